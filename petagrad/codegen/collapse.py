"""Reduce collapse: a sum that picks one element by an index comparison becomes one gated load.

The Tensor layer builds every gather (`x[idx]`, `gather`, `Embedding`, `one_hot` products) from primitives as
`sum_r where(idx == r, x[r], 0)`: a reduce over the whole indexed dim, O(rows) work per output. At most one r
matches, so the sum is `where(0 <= idx < rows, x[idx], 0)`: the reduce range goes away, and each load that read
x[r] reads x[idx] behind that condition (a gated load: nothing is read when idx is out of range).

>>> from petagrad import Tensor, Context
>>> with Context(DEBUG=0): Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])[Tensor([2, 0])].tolist()
[[5.0, 6.0], [1.0, 2.0]]
"""
from __future__ import annotations
from petagrad.dtype import dtypes
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.uop.rewrite import PatternMatcher, UPat
from petagrad.uop.graph import substitute

def _conjuncts(c: UOp) -> list[UOp]:
  return _conjuncts(c.src[0]) + _conjuncts(c.src[1]) if c.op is Ops.AND else [c]

def _matched_index(term: UOp, r: UOp) -> UOp | None:
  """e when term says e == r (written NOT(e != r): XOR(CMPNE(e, r), True)) and e does not depend on r."""
  if term.op is not Ops.XOR or not (term.src[1].op is Ops.CONST and term.src[1].arg is True) or term.src[0].op is not Ops.CMPNE: return None
  a, b = term.src[0].src
  e = b if a is r else a if b is r else None
  if e is None or not e.dtype.is_int or r in e.toposort(): return None
  return e if e.dtype == r.dtype else UOp(Ops.CAST, r.dtype, (e,))

def _collapse(red: UOp) -> UOp | None:
  if red.arg is not Ops.ADD or len(red.src) != 2: return None
  val, r = red.src
  # (a float16/bfloat16 product summed in float32: cast(cast(cond) * x) picks cast(x))
  wide = val.dtype if val.op is Ops.CAST and val.src[0].op is Ops.MUL else None
  if wide is not None: val = val.src[0]
  if val.op is Ops.MUL:   # cast(cond) * x: a one-hot matmul (Embedding); where other rows hold inf/nan the sum was nan,
    # the load gives x[idx] (what torch's embedding gives)
    c, x = val.src if val.src[0].op is Ops.CAST and val.src[0].src[0].dtype == dtypes.bool else val.src[::-1]
    if c.op is not Ops.CAST or c.src[0].dtype != dtypes.bool: return None
    if wide is not None: x = UOp(Ops.CAST, wide, (x,))
    val = UOp(Ops.WHERE, x.dtype, (c.src[0], x, UOp.const(x.dtype, 0)))
  elif wide is not None: return None
  if val.op is not Ops.WHERE or val.src[2].op is not Ops.CONST or val.src[2].arg != 0: return None
  terms = _conjuncts(val.src[0])
  for i, t in enumerate(terms):
    if (e := _matched_index(t, r)) is not None: break
  else: return None
  rows = r.arg[1]
  in_range = UOp(Ops.AND, dtypes.bool, (UOp(Ops.CMPLT, dtypes.bool, (UOp.const(r.dtype, -1), e)),
                                         UOp(Ops.CMPLT, dtypes.bool, (e, UOp.const(r.dtype, rows)))))
  # every load that read at r reads at e, behind in_range (and its own gate, if it has one): inner loads first, so a
  # load whose index holds another load gets the gated one
  subst: dict[UOp, UOp] = {r: e}
  for ld in red.toposort():
    if ld.op is Ops.LOAD and r in ld.toposort():
      src = tuple(substitute(s, dict(subst)) for s in ld.src[1:])
      subst[ld] = UOp(Ops.LOAD, ld.dtype, (ld.src[0], src[0], in_range if len(src) == 1 else UOp(Ops.AND, dtypes.bool, (src[1], in_range))))
  gate = in_range
  for other in terms[:i] + terms[i + 1:]: gate = UOp(Ops.AND, dtypes.bool, (gate, substitute(other, dict(subst))))
  return UOp(Ops.WHERE, red.dtype, (gate, substitute(val.src[1], dict(subst)), val.src[2]))

collapse_rules = PatternMatcher([(UPat(Ops.REDUCE, name="red"), _collapse)])
