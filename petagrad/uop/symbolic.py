"""The symbolic simplifier: constant folding, bounds-based folding and div/mod rules for index math.

Index expressions are normalized as linear combinations `sum(coef * term) + const`; division and
modulo by a positive constant split off the terms whose coefficient it divides.

>>> from petagrad.uop.uop import UOp, decompose   # noqa: F401  (decompose: imported from here too)
>>> from petagrad.uop.ops import Ops
>>> from petagrad.dtype import dtypes
>>> from petagrad.uop.symbolic import simplify
>>> i = UOp(Ops.RANGE, dtypes.int64, (), (0, 3, "loop")); j = UOp(Ops.RANGE, dtypes.int64, (), (1, 4, "loop"))
>>> simplify((i * 4 + j) // 4) is i
True
"""
from __future__ import annotations
import math
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp, decompose   # noqa: F401  (decompose: imported from here too)
from petagrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite
from petagrad.uop.alu import exec_alu, exec_cast
from petagrad.dtype import dtypes

def _const(u: UOp, v) -> UOp: return UOp.const(u.dtype, v)

# ------------------------------------------------------------ linear combinations

def _cdiv(x: UOp, c: int) -> UOp:
  """x // c as the simplifier writes it: (y // c0) // c is y // (c0*c)."""
  if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0 and x.src[1].arg * c <= x.dtype.max:
    return UOp(Ops.IDIV, x.dtype, (x.src[0], _const(x, x.src[1].arg * c)))
  return UOp(Ops.IDIV, x.dtype, (x, _const(x, c)))

def _fold_divmod_pairs(terms: dict[UOp, int]) -> dict[UOp, int]:
  """Recombine what splitting an index into digits produced (C truncation: these hold for any sign of x):
  (x // c) * c * k + (x % c) * k  ->  x * k
  ((x // c0) % c) * c0 * k + (x % c0) * k  ->  (x % (c0*c)) * k"""
  def add(t: UOp, k: int):
    terms[t] = terms.get(t, 0) + k
    if terms[t] == 0: del terms[t]
  changed = True
  while changed:
    changed = False
    for t in list(terms):
      if t not in terms or t.op is not Ops.MOD or t.src[1].op is not Ops.CONST or t.src[1].arg <= 0: continue
      k, x, c = terms[t], t.src[0], t.src[1].arg
      if terms.get(d := _cdiv(x, c)) == k * c:
        del terms[t], terms[d]
        add(x, k)
        changed = True
      elif x.op is Ops.IDIV and x.src[1].op is Ops.CONST and (c0 := x.src[1].arg) > 0 and c0 * c <= x.dtype.max and k % c0 == 0 and \
           terms.get(m := UOp(Ops.MOD, x.dtype, (x.src[0], x.src[1]))) == k // c0:
        del terms[t], terms[m]
        add(UOp(Ops.MOD, x.dtype, (x.src[0], _const(x, c0 * c))), k // c0)
        changed = True
  return terms

def rebuild(terms: dict[UOp, int], const: int, like: UOp) -> UOp:
  """Canonical form: terms sorted by content hash, constant last."""
  out: UOp | None = None
  for t in sorted(terms, key=lambda t: t.key):
    k = terms[t]
    v = t if k == 1 else UOp(Ops.MUL, like.dtype, (t, _const(like, k)))
    out = v if out is None else UOp(Ops.ADD, like.dtype, (out, v))
  if out is None: return _const(like, const)
  return out if const == 0 else UOp(Ops.ADD, like.dtype, (out, _const(like, const)))

def _bounds_of_terms(terms: dict[UOp, int], const: int) -> tuple[int, int]:
  lo = hi = const
  for t, k in terms.items():
    a, b = k * t.vmin, k * t.vmax
    lo, hi = lo + min(a, b), hi + max(a, b)
  return lo, hi

def _norm_add(x: UOp) -> UOp | None:
  if not x.dtype.is_int: return None
  terms, const = decompose(x)
  terms = _fold_divmod_pairs(terms)
  ret = rebuild(terms, const, x)
  return None if ret is x else ret

def _fits(lo: int, hi: int, dt) -> bool:
  """The exact (mathematical) interval [lo, hi] is non-negative and holds in dt: no wrap-around anywhere."""
  return 0 <= lo and hi <= dt.max

def _div_mod(x: UOp, c: UOp, is_mod: bool) -> UOp | None:
  """x // c and x % c for a constant c > 0 and x >= 0 (where C truncation equals floor)."""
  d = c.arg
  if not x.dtype.is_int or d <= 0 or x.vmin < 0: return None
  if d == 1: return _const(x, 0) if is_mod else x
  if not is_mod and x.vmax < d: return _const(x, 0)
  if is_mod and x.vmax < d: return x
  terms, const = decompose(x)
  # the rules below reason about the exact value of sum(coef * term) + const: it must not wrap (unsigned
  # dtypes have vmin >= 0 even when the sum wraps around)
  if not _fits(*_bounds_of_terms(terms, const), x.dtype): return None
  # x == d*Q + R: Q from the terms whose coefficient d divides, R the rest with the constant
  quot = {t: k // d for t, k in terms.items() if k % d == 0}
  rest = {t: k for t, k in terms.items() if k % d != 0}
  rlo, rhi = _bounds_of_terms(rest, const)
  if rlo >= 0 and rlo // d == rhi // d:   # R only shifts the quotient by a constant
    return rebuild(rest, const - (rlo // d) * d, x) if is_mod else rebuild(quot, rlo // d, x)
  if is_mod and all(t.vmin >= 0 for t in rest):
    red, rc = {t: k % d for t, k in rest.items() if k % d}, const % d   # congruent mod d, still >= 0
    lo, hi = _bounds_of_terms(red, rc)
    if lo >= 0 and hi < d: return rebuild(red, rc, x)
    if (red != rest or rc != const or quot) and _fits(lo, hi, x.dtype): return UOp(Ops.MOD, x.dtype, (rebuild(red, rc, x), c))
  # (g*a + b) with 0 <= b < g and g | d:  (g*a+b)//d == a//(d/g),  (g*a+b)%d == (a%(d/g))*g + b
  for g in sorted({math.gcd(k, d) for k in terms.values()}, reverse=True):
    if g <= 1 or g == d: continue
    big = {t: k // g for t, k in terms.items() if k % g == 0}
    small = {t: k for t, k in terms.items() if k % g != 0}
    slo, shi = _bounds_of_terms(small, const % g)
    if slo >= 0 and shi < g and all(t.vmin >= 0 for t in big):
      a = rebuild(big, const // g, x)
      if not is_mod: return UOp(Ops.IDIV, x.dtype, (a, _const(x, d // g)))
      return UOp(Ops.ADD, x.dtype, (UOp(Ops.MUL, x.dtype, (UOp(Ops.MOD, x.dtype, (a, _const(x, d // g))), _const(x, g))),
                                    rebuild(small, const % g, x)))
  if quot and _fits(rlo, rhi, x.dtype):
    if is_mod: return UOp(Ops.MOD, x.dtype, (rebuild(rest, const, x), c))
    return UOp(Ops.ADD, x.dtype, (rebuild(quot, 0, x), UOp(Ops.IDIV, x.dtype, (rebuild(rest, const, x), c))))
  return None

def _nested_div(x: UOp, c1: UOp, c2: UOp) -> UOp | None:
  # (x // c1) // c2 -> x // (c1*c2): holds for floor and for C truncation alike, for any sign of x
  if not x.dtype.is_int or c1.arg <= 0 or c2.arg <= 0 or c1.arg * c2.arg > x.dtype.max: return None
  return UOp(Ops.IDIV, x.dtype, (x, _const(x, c1.arg * c2.arg)))

def _mod_then_div(x: UOp, m: UOp, c: UOp) -> UOp | None:
  # (x % (c*k)) // c -> (x // c) % k   (C truncation: x % m keeps the sign of x, so this holds for any x)
  if not x.dtype.is_int or c.arg <= 0 or m.arg % c.arg != 0: return None
  return UOp(Ops.MOD, x.dtype, (UOp(Ops.IDIV, x.dtype, (x, c)), _const(x, m.arg // c.arg)))

def _mod_mod(x: UOp, m: UOp, c: UOp) -> UOp | None:
  # (x % (c*k)) % c -> x % c   (m == 0 is excluded: x % 0 is 0)
  if not x.dtype.is_int or c.arg <= 0 or m.arg == 0 or m.arg % c.arg != 0: return None
  return UOp(Ops.MOD, x.dtype, (x, c))

def _lt_split(x: UOp, c: int, const_left: bool) -> UOp | None:
  """x < c (or c < x) for an integer linear x == g*A + S: when S's range cannot change the outcome, compare A
  alone:  g*A + S < c  <=>  A <= (c-1-S)//g,   c < g*A + S  <=>  (c-S)//g < A."""
  if not x.dtype.is_int: return None
  terms, const = decompose(x)
  dt = x.dtype
  lo, hi = _bounds_of_terms(terms, const)
  if lo < dt.min or hi > dt.max: return None   # x may wrap: its value is not the exact sum
  for g in sorted({abs(k) for k in terms.values()} | {math.gcd(*terms.values())} if terms else (), reverse=True):
    if g <= 1: continue
    big = {t: k // g for t, k in terms.items() if k % g == 0}
    small = {t: k for t, k in terms.items() if k % g != 0}
    slo, shi = _bounds_of_terms(small, const)
    if const_left: qlo, qhi = (c - shi) // g, (c - slo) // g
    else: qlo, qhi = (c - 1 - shi) // g, (c - 1 - slo) // g
    if qlo != qhi: continue
    a = rebuild(big, 0, x)
    alo, ahi = _bounds_of_terms(big, 0)
    q = qlo if const_left else qlo + 1
    if alo < dt.min or ahi > dt.max or not dt.min <= q <= dt.max: continue
    return UOp(Ops.CMPLT, dtypes.bool, (_const(x, q), a) if const_left else (a, _const(x, q)))
  return None

def _max_bounds(a: UOp) -> UOp | None:
  # max(x, y) is x when x >= y everywhere
  x, y = a.src
  if x.vmin >= y.vmax: return x
  if y.vmin >= x.vmax: return y
  return None

def _fold_const(a: UOp) -> UOp | None:
  if not all(s.op is Ops.CONST for s in a.src): return None
  if a.op is Ops.CAST: return UOp.const(a.dtype, exec_cast(a.src[0].arg, a.src[0].dtype, a.dtype))
  if a.op in GroupOp.ALU: return UOp.const(a.dtype, exec_alu(a.op, a.dtype, tuple(s.arg for s in a.src)))
  return None

def _fold_bounds(a: UOp) -> UOp | None:
  # an integer/bool expression whose interval is one point is that constant
  if a.op is Ops.CONST or a.dtype.is_float or a.op not in GroupOp.ALU: return None
  lo, hi = a.bounds
  return UOp.const(a.dtype, lo) if lo == hi else None

def _const_right(a: UOp) -> UOp | None:
  # canonical order: constants on the right of commutative ops
  if a.op in GroupOp.Commutative and len(a.src) == 2 and a.src[0].op is Ops.CONST and a.src[1].op is not Ops.CONST:
    return UOp(a.op, a.dtype, (a.src[1], a.src[0]))
  return None

_INTS = tuple(d for d in dtypes.all() if d.is_int or d.is_bool)

symbolic = PatternMatcher([
  (UPat(GroupOp.ALU | {Ops.CAST}, name="a"), _fold_const),
  (UPat(GroupOp.ALU, name="a"), _fold_bounds),
  (UPat(GroupOp.Commutative, name="a"), _const_right),
  # identities (ints and bools only where floats would differ: x*0 is nan for x=inf)
  (UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar(value=0))), lambda x: x),
  (UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar(value=1))), lambda x: x),
  (UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c", value=0))), lambda x, c: c if not x.dtype.is_float else None),
  (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar(value=1))), lambda x: x),
  (UPat(Ops.FDIV, src=(UPat.var("x"), UPat.cvar(value=1.0))), lambda x: x),
  (UPat(Ops.AND, src=(UPat.var("x"), UPat.cvar(value=True))), lambda x: x),
  (UPat(Ops.AND, src=(UPat.var("x"), UPat.cvar("c", value=False))), lambda x, c: c),
  (UPat(Ops.OR, src=(UPat.var("x"), UPat.cvar(value=False))), lambda x: x),
  (UPat(Ops.AND, src=(UPat.var("x"), UPat.var("x"))), lambda x: x),
  (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b"))), lambda c, a, b: a if c.arg else b),
  (UPat(Ops.WHERE, src=(UPat.var(), UPat.var("a"), UPat.var("a"))), lambda a: a),
  (UPat(Ops.CAST, name="c"), lambda c: c.src[0] if c.src[0].dtype == c.dtype else None),
  # integer index math
  (UPat({Ops.ADD, Ops.SUB, Ops.NEG}, name="x"), _norm_add),
  (UPat({Ops.IDIV, Ops.MOD}, src=(UPat.var("x"), UPat.cvar("c", 0))), lambda x, c: c),   # defined as 0 (exec_alu)
  (UPat(Ops.MUL, src=(UPat({Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL}, name="x"), UPat.cvar("c"))),
   lambda x, c: _norm_add(UOp(Ops.MUL, x.dtype, (x, c))) if x.dtype.is_int else None),
  (UPat(Ops.MAX, dtype=_INTS, name="a"), _max_bounds),
  (UPat(Ops.CMPLT, src=(UPat.var("x"), UPat.cvar("c"))), lambda x, c: _lt_split(x, c.arg, False)),
  (UPat(Ops.CMPLT, src=(UPat.cvar("c"), UPat.var("x"))), lambda x, c: _lt_split(x, c.arg, True)),
  (UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("c"))), lambda x, c: _div_mod(x, c, False)),
  (UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("c"))), lambda x, c: _div_mod(x, c, True)),
  (UPat(Ops.IDIV, src=(UPat(Ops.IDIV, src=(UPat.var("x"), UPat.cvar("c1"))), UPat.cvar("c2"))), _nested_div),
  (UPat(Ops.IDIV, src=(UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("m"))), UPat.cvar("c"))), _mod_then_div),
  (UPat(Ops.MOD, src=(UPat(Ops.MOD, src=(UPat.var("x"), UPat.cvar("m"))), UPat.cvar("c"))), _mod_mod),
])

def simplify(u: UOp) -> UOp: return graph_rewrite(u, symbolic, memo=True)
