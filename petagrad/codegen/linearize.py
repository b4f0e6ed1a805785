"""Linearizer: a kernel AST -> the linear program (a list of UOps) that renderers print.

Every node is placed in the innermost loop it depends on: the output ("global") ranges open first; each
REDUCE becomes an accumulator, a loop nest over its ranges holding the nodes that depend on them, and
an update. Nodes that do not depend on a reduce's ranges are hoisted before its loop.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp
from petagrad.dtype import DType
from petagrad.helpers import prod

def reduce_identity(op: Ops, dtype: DType):
  if op is Ops.ADD: return 0
  if op is Ops.MUL: return 1
  assert op is Ops.MAX
  return dtype.min

@dataclass
class LinearProgram:
  uops: list[UOp]
  flops: int = 0                       # ALU work on data (not index math), over the whole launch
  global_ranges: list[UOp] = field(default_factory=list)

@dataclass
class _Scope:
  owner: UOp | None                   # the REDUCE that opens it (None: the kernel's root)
  depth: int
  nodes: list[UOp] = field(default_factory=list)

def linearize(sink: UOp) -> LinearProgram:
  order = list(sink.toposort())
  # the ranges each node depends on (a REDUCE consumes its own)
  deps: dict[UOp, frozenset[UOp]] = {}
  for u in order:
    if u.op is Ops.RANGE: deps[u] = frozenset({u})
    else:
      d = frozenset().union(*(deps[s] for s in u.src))
      deps[u] = d - frozenset(u.src[1:]) if u.op is Ops.REDUCE else d
  # scopes: outer reduces first, so a reduce's parent scope is known before its body is placed
  root = _Scope(None, 0)
  scope_of_range: dict[UOp, _Scope] = {}
  reduce_scope: dict[UOp, _Scope] = {}
  def scope_for(d: frozenset[UOp]) -> _Scope:
    cands = [scope_of_range[r] for r in d if r in scope_of_range]
    return max(cands, key=lambda s: s.depth) if cands else root
  for u in reversed(order):
    if u.op is Ops.REDUCE:
      parent = scope_for(deps[u])
      sc = reduce_scope[u] = _Scope(u, parent.depth + 1)
      for r in u.src[1:]: scope_of_range[r] = sc
  for u in order:
    if u.op is Ops.RANGE or u.op is Ops.SINK: continue
    scope_for(deps[u]).nodes.append(u)
  # index math: computed from loop variables and constants only (not counted as FLOPs)
  index_math: set[UOp] = set()
  for u in order:
    if u.op in (Ops.RANGE, Ops.CONST) or (u.op in GroupOp.ALU and all(s in index_math for s in u.src)): index_math.add(u)
  global_ranges = sorted((u for u in order if u.op is Ops.RANGE and u.arg[2] == "global"), key=lambda r: r.arg[0])

  out: list[UOp] = []
  new: dict[UOp, UOp] = {}
  flops = 0
  def emit_scope(sc: _Scope, trip: int) -> None:
    nonlocal flops
    for u in sc.nodes:
      if u.op is Ops.REDUCE:
        rop, val_ranges = u.arg, u.src[1:]
        init = UOp.const(u.dtype, reduce_identity(rop, u.dtype))
        acc = UOp(Ops.DEFINE_ACC, u.dtype, (init,), len(out))
        out.extend([init, acc])
        for r in val_ranges: out.append(r)
        inner = reduce_scope[u]
        emit_scope(inner, trip * prod(r.arg[1] for r in val_ranges))
        out.append(UOp(Ops.ACC_UPDATE, u.dtype, (acc, new[u.src[0]]), rop))
        flops += trip * prod(r.arg[1] for r in val_ranges)
        for r in reversed(val_ranges): out.append(UOp(Ops.ENDRANGE, u.dtype, (r,)))
        new[u] = acc
        continue
      nu = u if not u.src else UOp(u.op, u.dtype, tuple(new.get(s, s) for s in u.src), u.arg)
      new[u] = nu
      out.append(nu)
      if u.op in GroupOp.ALU and u not in index_math: flops += trip
  for r in global_ranges: out.append(r)
  emit_scope(root, prod(r.arg[1] for r in global_ranges))
  for r in reversed(global_ranges): out.append(UOp(Ops.ENDRANGE, r.dtype, (r,)))
  return LinearProgram(out, flops, global_ranges)

