"""Pattern matching and the one graph-rewrite engine. Rewrites are data: tables of (UPat, function).

>>> from petagrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite
>>> from petagrad.uop.uop import UOp
>>> from petagrad.uop.ops import Ops
>>> from petagrad.dtype import dtypes
>>> pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c", 0))), lambda x, c: x)])
>>> r = UOp(Ops.RANGE, dtypes.int64, (), (0, 4, "loop"))
>>> graph_rewrite(r + 0, pm) is r
True
"""
from __future__ import annotations
import inspect, itertools
from typing import Any, Callable, Iterable
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.dtype import DType

class UPat:
  """A pattern over UOps. `src` as a tuple matches in order, as a list matches any permutation,
  as a single UPat matches every source. `name` captures the matched node."""
  __slots__ = ("ops", "dtypes", "src", "arg", "name", "allow_any_len", "custom")
  def __init__(self, op: Ops | Iterable[Ops] | None = None, dtype: DType | Iterable[DType] | None = None,
               src: tuple[UPat, ...] | list[UPat] | UPat | None = None, arg: Any = None, name: str | None = None,
               allow_any_len: bool = False, custom: Callable[[UOp], bool] | None = None):
    self.ops = None if op is None else (frozenset({op}) if isinstance(op, Ops) else frozenset(op))
    self.dtypes = None if dtype is None else (frozenset({dtype}) if isinstance(dtype, DType) else frozenset(dtype))
    self.src, self.arg, self.name, self.allow_any_len, self.custom = src, arg, name, allow_any_len, custom

  @staticmethod
  def var(name: str | None = None, dtype=None) -> UPat: return UPat(dtype=dtype, name=name)
  @staticmethod
  def cvar(name: str | None = None, value: Any = None, dtype=None) -> UPat: return UPat(Ops.CONST, dtype, name=name, arg=value)

  def match(self, u: UOp, store: dict[str, UOp]) -> list[dict[str, UOp]]:
    if self.ops is not None and u.op not in self.ops: return []
    if self.dtypes is not None and u.dtype not in self.dtypes: return []
    if self.arg is not None and (u.arg != self.arg or type(u.arg) is not type(self.arg)): return []
    if self.custom is not None and not self.custom(u): return []
    if self.name is not None:
      if self.name in store and store[self.name] is not u: return []
      store = {**store, self.name: u}
    if self.src is None: return [store]
    if isinstance(self.src, UPat): orders: Iterable = [tuple([self.src] * len(u.src))]
    elif isinstance(self.src, list): orders = itertools.permutations(self.src)
    else: orders = [self.src]
    out = []
    for pats in orders:
      if len(pats) != len(u.src) and not (self.allow_any_len and len(pats) <= len(u.src)): continue
      stores = [store]
      for p, s in zip(pats, u.src):
        stores = [r for st in stores for r in p.match(s, st)]
        if not stores: break
      out.extend(stores)
    return out

class PatternMatcher:
  """An ordered table of (pattern, function) rules. The function gets the captures as keyword
  arguments (and `ctx` if it asks for it) and returns a replacement UOp or None."""
  def __init__(self, rules: list[tuple[UPat, Callable]]):
    self.rules = rules
    # per op, the rules that can match it, in table order (rules without an op are kept in their place)
    self.by_op: dict[Ops, list[tuple[UPat, Callable, bool]]] = {op: [] for op in Ops}
    for pat, fn in rules:
      wants_ctx = "ctx" in inspect.signature(fn).parameters
      for op in (pat.ops if pat.ops is not None else Ops): self.by_op[op].append((pat, fn, wants_ctx))
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules)
  def rewrite(self, u: UOp, ctx: Any = None) -> UOp | None:
    for pat, fn, wants_ctx in self.by_op[u.op]:
      for store in pat.match(u, {}):
        ret = fn(ctx=ctx, **store) if wants_ctx else fn(**store)
        if ret is not None and ret is not u: return ret
    return None

def graph_rewrite(root: UOp, pm: PatternMatcher, ctx: Any = None, memo: bool = False) -> UOp:
  """Rewrite every node of the graph bottom-up to a fixed point. Iterative: any depth works. memo=True (symbolic.simplify
  only: the one table whose results the nodes hold; its rules read nothing but the node) keeps each node's result on
  the node (UOp._simple) for later calls: a graph built around one simplified before is not walked again below it."""
  done: dict[UOp, UOp] = {}
  # stack entries: (node, stage, pending replacement)
  stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
  while stack:
    n, stage, pending = stack.pop()
    if n in done: continue
    if memo and (known := n._simple) is not None:
      done[n] = n if known is True else known
      continue
    if stage == 0:
      stack.append((n, 1, None))
      stack.extend((s, 0, None) for s in reversed(n.src) if s not in done)
    elif stage == 1:
      new_src = tuple(done[s] for s in n.src)
      nn = n if new_src == n.src else UOp(n.op, n.dtype, new_src, n.arg)
      r = pm.rewrite(nn, ctx)
      if r is None:
        done[n] = nn
        done[nn] = nn
      else:
        stack.append((n, 2, r))
        stack.append((r, 0, None))
    else:
      assert pending is not None
      done[n] = done[pending]
  if memo:
    for n, r in done.items(): n._simple = True if r is n else r   # (not itself: a node would keep itself alive)
  return done[root]
