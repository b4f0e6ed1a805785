"""Launch groups, codegen side: consecutive elementwise kernels of one output shape in a group become one loop
nest with several stores (vertical fusion of independent outputs).

An optimizer step writes a parameter and its state with one kernel each (Adam: m, v, then the parameter, which
reads the new m and v). As one loop nest, each element of the gradient and the state is loaded once: a later
kernel's load of what an earlier one stored at the same index becomes the stored value itself, and the loads
of a buffer that a later kernel overwrites come before its store in every iteration.

>>> from petagrad.codegen.group import merge_nests
>>> merge_nests([], [])
[]
"""
from __future__ import annotations
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.schedule.schedule import substitute

Nest = tuple[UOp, tuple[int, ...]]   # a kernel AST (SINK of STOREs) and its parameters' positions in the launch

def _global(ast: UOp, params: tuple[int, ...]) -> UOp:
  """The AST with each DEFINE_GLOBAL numbered by its position in the launch."""
  return substitute(ast, {u: UOp(Ops.DEFINE_GLOBAL, u.dtype, (), params[u.arg]) for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL})

def _local(ast: UOp) -> Nest:
  """Back to parameters numbered 0..n-1 (in order of launch position)."""
  used = sorted({u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL})
  local = {p: i for i, p in enumerate(used)}
  return substitute(ast, {u: UOp(Ops.DEFINE_GLOBAL, u.dtype, (), local[u.arg]) for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}), tuple(used)

def _ranges(ast: UOp) -> frozenset[UOp]: return frozenset(u for u in ast.toposort() if u.op is Ops.RANGE)

def _join(nest: UOp, new: UOp, memory: list[int]) -> UOp | None:
  """nest and new (both in launch positions) as one SINK, or None where that would change what they compute."""
  if any(u.op is Ops.REDUCE for a in (nest, new) for u in a.toposort()) or _ranges(nest) != _ranges(new): return None
  stored = {memory[s.src[0].arg]: s for s in nest.src}
  subst: dict[UOp, UOp] = {}
  for u in new.toposort():
    if u.op is Ops.LOAD and (s := stored.get(memory[u.src[0].arg])) is not None:
      # what an earlier kernel wrote: its value at the same element, computed in this iteration
      if len(u.src) != 2 or u.src[1] is not s.src[1] or s.src[2].dtype != u.dtype: return None
      subst[u] = s.src[2]
  for st in new.src:
    m = memory[st.src[0].arg]
    if m in stored: return None   # two kernels writing one buffer
    # an earlier kernel reading the old value must read it at the element this store overwrites, in the same iteration
    if any(u.op is Ops.LOAD and memory[u.src[0].arg] == m and u.src[1] is not st.src[1] for u in nest.toposort()): return None
  return UOp(Ops.SINK, nest.dtype, nest.src + substitute(new, subst).src)

def merge_nests(parts: list[Nest], memory: list[int]) -> list[Nest]:
  """Merge runs of consecutive elementwise kernels over the same output ranges into one loop nest each.
  parts: (AST, parameter positions) in run order; memory: an identity of the memory behind each launch position
  (two positions may share memory: a lazy write goes through a fresh BUFFER node)."""
  out: list[UOp] = []
  for ast, params in parts:
    g = _global(ast, params)
    joined = _join(out[-1], g, memory) if out else None
    if joined is None: out.append(g)
    else: out[-1] = joined
  return [_local(a) for a in out]
