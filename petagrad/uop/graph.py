"""Graph helpers every stage above the IR uses: rebuilding a graph with nodes substituted, new BUFFER nodes (for new
memory or for existing memory under a new identity), and a test for a value that reads a buffer through another
view."""
from __future__ import annotations
import itertools
from petagrad.device import Buffer
from petagrad.dtype import DType
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp

_buffer_ids = itertools.count()

def new_buffer(device: str, size: int, dtype: DType) -> UOp:
  """A fresh BUFFER node (memory is allocated when a kernel first writes it)."""
  return new_buffer_node(Buffer(device, size, dtype), dtype)

def new_buffer_node(buf: Buffer, dtype: DType) -> UOp:
  """A new BUFFER node for existing memory (a new identity: graphs over it are new graphs)."""
  u = UOp(Ops.BUFFER, dtype, (), (buf.device, buf.size, next(_buffer_ids)))
  u.buffer = buf
  return u

def substitute(root: UOp, subst: dict[UOp, UOp], memo: dict[UOp, UOp] | None = None) -> UOp:
  """Rebuild root with the nodes in `subst` replaced (not looking below them). Iterative. `memo`: a dict holding subst
  that the walk fills with every node it rebuilt (several roots over shared graphs then walk them once)."""
  done: dict[UOp, UOp] = dict(subst) if memo is None else memo
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    u, ready = stack.pop()
    if u in done: continue
    if not ready:
      stack.append((u, True))
      stack.extend((s, False) for s in u.src if s not in done)
      continue
    new_src = tuple(map(done.__getitem__, u.src))
    done[u] = u if new_src == u.src else UOp(u.op, u.dtype, new_src, u.arg)
  return done[root]

def reads_other_view(value: UOp, target: UOp) -> bool:
  """Does `value` read target's buffer through any view other than `target` itself? (A kernel writing target in
  place would then overwrite values it still has to read.)"""
  buf = target.base
  for n in value.toposort():
    if n.op in GroupOp.Movement: continue
    for s in n.src:
      if s.base is buf and s is not target: return True
  return value.base is buf and value is not target and value.op in GroupOp.Movement
