"""Lazy in-place writes for optimizers, the GradScaler and state-dict loading, batched into one schedule.

`Tensor.assign` realizes at once (one realize per call), so N parameter
updates would be N separate realizes. `write()` records the update as a lazy ASSIGN node instead
(tinygrad's semantics: the tensor now *is* the pending write, so later reads in the same step see the new
value); `commit()` realizes every pending write in ONE `Tensor.realize_all` call. Delete this module once
the core has a lazy assign.

The core gives every tensor viewing a buffer a fresh BUFFER node when an eager write lands, but a lazy ASSIGN is
realized back onto its target node; `write()` therefore writes through a fresh BUFFER node over the same memory,
so graphs built after the write are new graphs, apart from those built before it. Under TinyJit, writes left
pending at the end of the jitted function are realized (and captured) by the JIT itself.
"""
from __future__ import annotations
from typing import Iterable
from petagrad.tensor import Tensor
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp
from petagrad.uop.graph import _buffer_ids, substitute, view_buffers

def _is_memory(u: UOp) -> bool:
  """Is u (a view of) memory a write can go into: a BUFFER node's, or one per device (a MULTI of such views: a realized
  multi-device tensor, whose pieces are written in place on their devices)?"""
  return u.base.op is Ops.BUFFER or u.op is Ops.MULTI and view_buffers(u) is not None

def is_buffer(t: Tensor) -> bool:
  """Is t (a view of) a realized buffer that a write can go into?"""
  return _is_memory(t.uop)

def _reads_other_view(value: UOp, dest: UOp, ready: set[UOp]) -> bool:
  """Does value read dest's buffer through a view other than dest (an in-place kernel would then overwrite
  elements it has yet to read)? Nodes in `ready` (realized earlier in the same schedule) are not looked into. A MULTI
  dest is its pieces' buffers: a read of one of them other than through dest is another view."""
  bufs = {dest.base} if dest.op is not Ops.MULTI else {n for n in dest.toposort() if n.op is Ops.BUFFER}
  if value is not dest and value.op in GroupOp.Movement and value.base in bufs: return True
  seen, stack = set(), [value]
  while stack:
    n = stack.pop()
    if n in seen or n in ready or n is dest: continue
    seen.add(n)
    if n.op not in GroupOp.Movement:
      for s in n.src:   # only a buffer itself or a movement op over it can be a view of it
        if s is not dest and (s in bufs or s.op in GroupOp.Movement) and s.base in bufs: return True
    stack.extend(n.src)
  return False

def write(target: Tensor, value: Tensor, ready: Iterable[Tensor] = ()) -> Tensor:
  """Lazily write value into target (cast to its dtype, broadcast to its shape). Nothing runs until commit().
  ready: tensors the caller will realize before this write in the same commit (gradients): reads of the
  target inside them are safe."""
  if not isinstance(value, Tensor): value = Tensor(value, device=target.device, dtype=target.dtype)
  if value.device != target.device: value = value.to(target.device)
  if value.dtype != target.dtype: value = value.cast(target.dtype)
  if value.shape != target.shape: value = value.expand(target.shape)
  value = value.detach()
  pending = target.uop if target.uop.op is Ops.ASSIGN else None
  dest = pending.src[0] if pending is not None else target.uop
  if not _is_memory(dest):
    target.uop = value.contiguous().uop   # not realized yet: nothing to write into, so rebind (like Tensor.assign)
    return target
  if _reads_other_view(value.uop, dest, {t.uop for t in ready}): value = Tensor(UOp(Ops.CONTIGUOUS, value.dtype, (value.uop,)))
  # the write goes through a fresh node over the same memory: once realized, target reads as that node, so
  # graphs built after the write differ from (and never reuse cached results of) graphs built before it
  target.uop = UOp(Ops.ASSIGN, target.dtype, (_fresh(dest), value.uop))
  return target

def commit(*tensors: Tensor) -> None:
  """Realize tensors (pending writes and anything else) in one schedule, in the given order: put the
  tensors that must read old values (gradients, the loss) first. `Tensor.realize_all` does the same; this
  also drops the pre-write graph realize_all keeps on grad leaves (it would hold the gradients alive)."""
  written = [t for t in tensors if t.uop.op is Ops.ASSIGN]
  Tensor.realize_all(*tensors)
  for t in written: t._ctx = None

def _fresh(view: UOp) -> UOp:
  """The same view over fresh BUFFER nodes (one per device of a MULTI) that share view's memory."""
  new = {}
  for base in (n for n in view.toposort() if n.op is Ops.BUFFER):
    new[base] = nb = UOp(Ops.BUFFER, base.dtype, (), (base.arg[0], base.arg[1], next(_buffer_ids)))
    nb.buffer = base.buffer
  return substitute(view, new)

def own_buffers(tensors: Iterable[Tensor], taken: set[int] | None = None) -> None:
  """Give every tensor that is not (a view of) a realized buffer, or whose buffer an earlier tensor of the list (or
  `taken`, a set of ids of Buffers) already uses, a fresh buffer of its own holding its value; one schedule for all
  (an optimizer writes each parameter in place, so no two may share memory)."""
  seen = set() if taken is None else taken
  todo: list[Tensor] = []
  for t in tensors:
    bufs = view_buffers(t.uop)
    ids = {id(b) for b in bufs} if bufs is not None else None
    if ids is not None and len(ids) == len(bufs) and not seen & ids: seen |= ids
    else: todo.append(t)
  if not todo: return
  # (a multi-device tensor's copy keeps its layout: an empty target would be replicated, and the write reshard it)
  fresh = [write(Tensor.empty(*t.shape, dtype=t.dtype, device=t.device), t.detach()) if isinstance(t.device, str)
           else Tensor(UOp(Ops.CONTIGUOUS, t.dtype, (t.detach().uop,))) for t in todo]
  commit(*fresh)
  for t, f in zip(todo, fresh):
    t.uop = f.uop
    seen.update(id(b) for b in view_buffers(t.uop) or [])
