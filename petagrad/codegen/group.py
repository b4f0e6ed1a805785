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
from petagrad.uop.graph import substitute

Nest = tuple[UOp, tuple[int, ...]]   # a kernel AST (SINK of STOREs) and its parameters' positions in the launch

def _renumber(ast: UOp, index) -> UOp:
  """The AST with DEFINE_GLOBAL i renumbered index[i]."""
  return substitute(ast, {u: UOp(Ops.DEFINE_GLOBAL, u.dtype, (), index[u.arg]) for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL})

def _local(ast: UOp) -> Nest:
  """Parameters numbered by launch position back to 0..n-1 (in order of launch position)."""
  used = sorted({u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL})
  return _renumber(ast, {p: i for i, p in enumerate(used)}), tuple(used)

def _ranges(nodes: list[UOp]) -> frozenset[UOp]: return frozenset(u for u in nodes if u.op is Ops.RANGE)
def _reduces(nodes: list[UOp]) -> bool: return any(u.op is Ops.REDUCE for u in nodes)

class _Nest:
  """A loop nest being built: its stores, and the memory each of its loads reads at which element."""
  def __init__(self, ast: UOp, nodes: list[UOp], memory: list[int]):
    self.stores: list[UOp] = list(ast.src)
    self.ranges, self.elementwise = _ranges(nodes), not _reduces(nodes)
    self.stored = {memory[s.src[0].arg]: s for s in ast.src}
    self.loads: dict[int, set[UOp]] = {}
    self._add_loads(nodes, memory)
  def _add_loads(self, nodes: list[UOp], memory: list[int]) -> None:
    for u in nodes:
      if u.op is Ops.LOAD: self.loads.setdefault(memory[u.src[0].arg], set()).add(u.src[1])

  def join(self, ast: UOp, nodes: list[UOp], memory: list[int]) -> bool:
    """Add the kernel `ast` (its nodes: `nodes`) to this nest, unless that would change what either computes."""
    if not self.elementwise or _reduces(nodes) or self.ranges != _ranges(nodes): return False
    subst: dict[UOp, UOp] = {}
    for u in nodes:
      if u.op is Ops.LOAD and (s := self.stored.get(memory[u.src[0].arg])) is not None:
        # what an earlier kernel wrote: its value at the same element, computed in this iteration
        if len(u.src) != 2 or u.src[1] is not s.src[1] or s.src[2].dtype != u.dtype: return False
        subst[u] = s.src[2]
    for st in ast.src:
      m = memory[st.src[0].arg]
      if m in self.stored: return False   # two kernels writing one buffer
      # an earlier kernel reading the old value must read it at the element this store overwrites, in the same iteration
      if self.loads.get(m, {st.src[1]}) != {st.src[1]}: return False
    ast = substitute(ast, subst) if subst else ast
    self.stores.extend(ast.src)
    self.stored.update((memory[s.src[0].arg], s) for s in ast.src)
    self._add_loads([u for u in nodes if u not in subst], memory)
    return True

_cache: dict[tuple, list[Nest]] = {}

def merge_nests(parts: list[Nest], memory: list[int]) -> list[Nest]:
  """Merge runs of consecutive elementwise kernels over the same output ranges into one loop nest each.
  parts: (AST, parameter positions) in run order; memory: an identity of the memory behind each launch position
  (two positions may share memory: a lazy write goes through a fresh BUFFER node). Cached: a training step
  merges the same kernels every time."""
  first: dict[int, int] = {}
  aliasing = tuple(first.setdefault(m, i) for i, m in enumerate(memory))   # which positions share memory
  key = (tuple(parts), aliasing)
  if (hit := _cache.get(key)) is not None: return hit
  nests: list[_Nest] = []
  for ast, params in parts:
    g = _renumber(ast, params)   # parameters numbered by launch position
    nodes = list(g.toposort())
    if not nests or not nests[-1].join(g, nodes, list(aliasing)): nests.append(_Nest(g, nodes, list(aliasing)))
  if len(_cache) >= 4096: _cache.clear()
  out = _cache[key] = [_local(UOp(Ops.SINK, n.stores[0].dtype, tuple(n.stores))) for n in nests]
  return out
