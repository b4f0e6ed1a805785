"""The symbolic simplifier and the bounds (vmin, vmax) of kernel index math.

Unit tests pin the rules; a hypothesis fuzz test checks, for random index expressions over 1-3 loop
variables, that simplify() keeps the value at EVERY point of the iteration space (evaluated with
exec_alu, the definition of every op: C semantics, truncating division), that the bounds of every
node contain every value it takes, and that simplify() is idempotent.
"""
from __future__ import annotations
import itertools, os
from hypothesis import given, settings, strategies as st, HealthCheck
from petagrad.uop.uop import UOp
from petagrad.uop.ops import Ops
from petagrad.uop.symbolic import simplify
from petagrad.uop.alu import exec_alu, exec_cast
from petagrad.dtype import dtypes, DType

def rng(i: int, n: int, dt: DType = dtypes.int64) -> UOp: return UOp(Ops.RANGE, dt, (), (i, n, "loop"))
def c(v, dt: DType = dtypes.int64) -> UOp: return UOp.const(dt, v)

def evaluate_all(roots: list[UOp], ranges: list[UOp]) -> dict[UOp, list]:
  """Value of every node under `roots` at every point of the ranges' iteration space (row-major order),
  computed with exec_alu/exec_cast only."""
  points = list(itertools.product(*[range(r.arg[1]) for r in ranges]))
  vals: dict[UOp, list] = {}
  memo: dict[tuple, object] = {}
  for r in roots:
    for u in r.toposort():
      if u in vals: continue
      if u.op is Ops.RANGE: vals[u] = [p[ranges.index(u)] for p in points]
      elif u.op is Ops.CONST: vals[u] = [u.arg] * len(points)
      else:
        out = []
        for args in zip(*(vals[s] for s in u.src)):
          if (key := (u.op, u.dtype, args)) not in memo:
            memo[key] = exec_cast(args[0], u.src[0].dtype, u.dtype) if u.op is Ops.CAST else exec_alu(u.op, u.dtype, args)
          out.append(memo[key])
        vals[u] = out
  return vals

def evaluate_at(u: UOp, env: dict[UOp, int]):
  """Value of u with the ranges set as in env."""
  vals: dict[UOp, object] = {}
  for n in u.toposort():
    if n.op is Ops.RANGE: vals[n] = env[n]
    elif n.op is Ops.CONST: vals[n] = n.arg
    elif n.op is Ops.CAST: vals[n] = exec_cast(vals[n.src[0]], n.src[0].dtype, n.dtype)
    else: vals[n] = exec_alu(n.op, n.dtype, tuple(vals[s] for s in n.src))
  return vals[u]

def check_simplify(e: UOp, ranges: list[UOp]) -> UOp:
  s = simplify(e)
  vals = evaluate_all([e, s], ranges)
  assert vals[s] == vals[e], f"simplify changed the value\n{e}\n---\n{s}"
  for u, vs in vals.items():
    assert u.vmin <= min(vs) and max(vs) <= u.vmax, f"bounds {u.bounds} miss values {min(vs)}..{max(vs)} of\n{u}"
  assert simplify(s) is s, f"simplify is not idempotent on\n{s}"
  return s

i, j, k = rng(0, 5), rng(1, 4), rng(2, 3)

# ------------------------------------------------------------ unit tests of the rules

class TestDivMod:
  def test_split_digit(self):
    assert simplify((i * 4 + j) // 4) is i
    assert simplify((i * 4 + j) % 4) is j
    assert simplify((j + i * 4) // 4) is i   # order does not matter
    assert simplify((i * 4 + j + 8) // 4) is simplify(i + 2)
    assert simplify((i * 4 + j + 8) % 4) is j

  def test_recombine(self):
    x = i * 4 + j
    assert simplify((x // 4) * 4 + x % 4) is simplify(x)
    assert simplify(x % 4 + (x // 4) * 4) is simplify(x)
    y = rng(5, 60)
    assert simplify((y // 7) * 7 + y % 7) is y
    assert simplify(((y // 7) * 7 + y % 7) * 3) is simplify(y * 3)

  def test_recombine_three_digits(self):
    # what reshape (60,) -> (5,4,3) -> (60,) leaves: the digits of x in base (.., 4, 3)
    x = rng(5, 60)
    assert simplify((x // 12) * 12 + ((x // 3) % 4) * 3 + x % 3) is x
    assert simplify(((x // 3) % 4) * 3 + x % 3) is simplify(x % 12)
    assert simplify(((x // 3) % 4) * 6 + (x % 3) * 2 + (x // 12) * 24 + 1) is simplify(x * 2 + 1)

  def test_reshape_roundtrip(self):
    # index math as lowering writes it: (5,4,3) viewed as (20,3) and back, then flattened
    big, kk = rng(3, 20), k
    flat = big * 3 + kk
    a, b, cc = flat // 12, (flat // 3) % 4, flat % 3
    assert simplify(a) is simplify(big // 4) and simplify(b) is simplify(big % 4) and simplify(cc) is kk
    assert simplify(a * 12 + b * 3 + cc) is simplify(flat)
    check_simplify(a * 12 + b * 3 + cc, [big, kk])

  def test_gcd(self):
    # (g*a + b) // d with 0 <= b < g, g | d
    x = rng(5, 60)
    assert simplify((x * 4 + j) // 8) is simplify(x // 2)
    assert simplify((x * 4 + j) % 8) is simplify((x % 2) * 4 + j)

  def test_nested_div(self):
    x = rng(5, 100)
    assert simplify((x // 4) // 3) is simplify(x // 12)
    assert simplify(((x // 2) // 3) // 5) is simplify(x // 30)

  def test_mod_of_mod(self):
    x = rng(5, 100)
    assert simplify((x % 12) % 4) is simplify(x % 4)
    assert simplify((x % 12) // 4) is simplify((x // 4) % 3)
    assert simplify((x % 12) % 5) is (x % 12) % 5   # 5 does not divide 12

  def test_small_dividend(self):
    assert simplify(j // 4) is c(0)
    assert simplify(j % 4) is j
    assert simplify(j % 1) is c(0) and simplify(j // 1) is j
    assert simplify((j + 4) // 4) is c(1)

  def test_negative_dividend_untouched_where_truncation_differs(self):
    # j - 3 is in [-3, 0]: C truncation, not floor
    for e in [(j - 3) // 2, (j - 3) % 2, (j * -1) // 2, (i - 2) % 3, ((j - 3) // 2) * 2 + (j - 3) % 2]:
      check_simplify(e, [j, i])
    assert simplify(((j - 3) // 2) * 2 + (j - 3) % 2) is simplify(j - 3)   # the identity holds for truncation too

  def test_const_fold_c_semantics(self):
    assert simplify(c(-7) // c(2)) is c(-3)
    assert simplify(c(-7) % c(2)) is c(-1)
    assert simplify(c(7) // c(-2)) is c(-3)
    assert simplify(c(7) % c(0)) is c(0)   # division by zero is defined as 0
    assert simplify(c(127, dtypes.int8) + c(1, dtypes.int8)) is c(-128, dtypes.int8)

class TestLinear:
  def test_canonical_order(self):
    assert simplify(i + j) is simplify(j + i)
    assert simplify(i * 3 + j * 2 + 1) is simplify(1 + j * 2 + i * 3)
    assert simplify((i + 1) + (j + 2)) is simplify(i + j + 3)

  def test_cancel(self):
    assert simplify(i - i) is c(0)
    assert simplify((i + j) - j) is i
    assert simplify(i * 3 - i * 2) is i
    assert simplify(-(-i)) is i

  def test_const_mul_chain(self):
    assert simplify((i * 2) * 3) is simplify(i * 6)
    assert simplify((i + 1) * 2) is simplify(i * 2 + 2)
    assert simplify(-(i) * 3) is simplify(i * -3)

  def test_identities(self):
    assert simplify(i + 0) is i and simplify(i * 1) is i and simplify(i * 0) is c(0) and simplify(i // 1) is i
    f = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 0)
    fx = UOp(Ops.LOAD, dtypes.float32, (f, i))
    # x * 0 is not 0 for floats (inf, nan), and x + 0.0 is not x for x = -0.0
    assert simplify(fx * UOp.const(dtypes.float32, 0.0)) is fx * UOp.const(dtypes.float32, 0.0)
    assert simplify(fx + UOp.const(dtypes.float32, 0.0)) is fx + UOp.const(dtypes.float32, 0.0)
    assert simplify(fx.alu(Ops.FDIV, UOp.const(dtypes.float32, 1.0))) is fx

class TestCompare:
  def test_bounds_folded(self):
    assert simplify(i < 10) is c(True, dtypes.bool)
    assert simplify(i < 0) is c(False, dtypes.bool)
    assert simplify(c(-1) < i) is c(True, dtypes.bool)
    assert simplify(i * 4 + j < 20) is c(True, dtypes.bool)
    assert simplify((i * 4 + j) // 4 < 5) is c(True, dtypes.bool)
    assert simplify(i.ne(7)) is c(True, dtypes.bool)
    assert simplify((i < 3) & (i < 10)) is simplify(i < 3)

  def test_split(self):
    assert simplify(i * 4 + j < 8) is simplify(i < 2)
    assert simplify(c(7) < i * 4 + j) is simplify(c(1) < i)
    assert simplify(i * 4 < 9) is simplify(i < 3)
    big = rng(3, 20)
    assert simplify(big * 3 + k < 30) is simplify(big < 10)
    for e in [i * 4 + j < 9, c(8) < i * 4 + j, i * 6 + j * 2 < 7, c(3) < i * -2 + 11, (i * 4 + j < 8).where(i, j)]:
      check_simplify(e, [i, j])

class TestMax:
  def test_max_bounds(self):
    assert simplify((i + 1).maximum(c(0))) is simplify(i + 1)
    assert simplify(c(10).maximum(i)) is c(10)
    assert simplify(i.maximum(j)) is i.maximum(j)

class TestWhere:
  def test_where(self):
    assert simplify((i < 10).where(i, j)) is i
    assert simplify((i < 0).where(i, j)) is j
    assert simplify((i < 3).where(j, j)) is j

# ------------------------------------------------------------ bounds

class TestBounds:
  def test_basic(self):
    assert i.bounds == (0, 4) and (i * 4 + j).bounds == (0, 19) and (i * -2).bounds == (-8, 0)
    assert (i - j).bounds == (-3, 4) and (i // 2).bounds == (0, 2) and (i % 3).bounds == (0, 2)
    assert (i.maximum(j)).bounds == (0, 4) and (i < j).bounds == (False, True)

  def test_div_mod_of_negative(self):
    assert ((j - 3) // 2).bounds == (-1, 0)   # C truncation: -3 // 2 == -1
    assert ((j - 3) % 2).bounds == (-1, 0)
    assert ((i - 2) % 4).bounds == (-2, 2)
    assert ((c(-7) + j) % 8).bounds == (-7, -4)
    assert ((c(-7) + j) % 4).bounds == (-3, 0)   # -4 % 4 == 0

  def test_where_known_condition(self):
    assert UOp(Ops.WHERE, dtypes.int64, (c(True, dtypes.bool), i, j + 10)).bounds == (0, 4)

  def test_bool_neg_is_not(self):
    t = UOp(Ops.NEG, dtypes.bool, (i < 10,))
    assert t.bounds == (False, False)
    assert UOp(Ops.NEG, dtypes.bool, (i < 2,)).bounds == (False, True)
    assert simplify(t) is c(False, dtypes.bool)

  def test_wrap_gives_full_range(self):
    x = rng(0, 200, dtypes.int8)
    assert (x + 100).bounds == (-128, 127)
    u = rng(0, 5, dtypes.uint32)
    assert (u - 1).bounds == (0, 2**32 - 1)
    assert ((i - 3).cast(dtypes.uint8)).bounds == (0, 255)

  def test_floats_are_unbounded(self):
    f = UOp(Ops.LOAD, dtypes.float32, (UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 0), i))
    assert f.bounds == (float("-inf"), float("inf"))

# ------------------------------------------------------------ regressions of fixed bugs

class TestRegressions:
  def test_unsigned_wraparound_in_mod(self):
    # (0 - u) % 3 in uint32 is (2**32 - u) % 3, not (-u) mod 3: the sum wraps
    u = rng(0, 8, dtypes.uint32)
    for e in [(-u) % 6, (c(0, dtypes.uint32) - u) % c(3, dtypes.uint32), (u * 2 - 1) // c(3, dtypes.uint32),
              (u * c(2**32 - 1, dtypes.uint32)) // c(6, dtypes.uint32)]:
      check_simplify(e, [u])

  def test_mod_of_mod_by_zero(self):
    x = rng(5, 20)
    check_simplify((x % 0) % 3, [x])   # x % 0 is 0, so this is 0, not x % 3
    assert simplify((x % 0) % 3) is c(0)

  def test_div_mod_rules_hold_for_negative_dividends(self):
    # (x//a)//b == x//(a*b), (x%(c*k))//c == (x//c)%k and (x%(c*k))%c == x%c hold for C truncation too
    x = j - 3
    for e in [(x // 2) // 2, (x % 4) // 2, (x % 6) % 3, ((x * 5) % 12) // 4]:
      check_simplify(e, [j])
    assert simplify((x // 2) // 2) is simplify(x // 4)

  def test_large_values_do_not_wrap(self):
    # a loop variable over most of int64: the sums must not wrap where the rules assume exact values
    big = rng(7, 2**62)
    for e in [(big * 2 + 1) % 4, (big * -1 + 2**62) % 3, (big * 3) // 6, (big // 2**40) // 2**30, big * 2 + j < 2**62]:
      s = simplify(e)
      for v in [0, 1, 2**40 - 1, 2**61 + 5, 2**62 - 2, 2**62 - 1]:
        for w in range(4):
          env = {big: v, j: w}
          assert evaluate_at(s, env) == evaluate_at(e, env), (e, s, v, w)

def test_simplify_remembers_results_on_the_nodes():
  # simplify keeps each node's result on the node (UOp._simple): a graph built around a simplified one is not walked
  # again below it (a kernel's index math is simplified view by view, each view around the last), and the results
  # are those of a rewrite that remembers nothing
  from petagrad.uop import rewrite as RW
  from petagrad.uop.symbolic import symbolic
  a, b = rng(0, 12), rng(1, 5)
  inner = ((a * c(5) + b) // c(5) + (a * c(5) + b) % c(5) * c(3)) * c(2) + c(0)
  outer = (inner + a * c(4)) % c(7) + inner // c(3)
  fresh_inner, fresh_outer = RW.graph_rewrite(inner, symbolic), RW.graph_rewrite(outer, symbolic)
  assert simplify(inner) is fresh_inner and inner._simple is not None
  calls = []
  orig = symbolic.rewrite
  symbolic.rewrite = lambda u, ctx=None: calls.append(u) or orig(u, ctx)
  try: assert simplify(outer) is fresh_outer
  finally: del symbolic.rewrite
  below = set(inner.toposort()) - {inner}
  assert calls and not below & set(calls)
  assert simplify(fresh_outer) is fresh_outer and fresh_outer._simple is True   # (a fixed point holds no reference to itself)

# ------------------------------------------------------------ the fuzz test

COEFS = [-12, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 8, 12, 16, 24]
DIVS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24]

@st.composite
def index_expr(draw, dtype: DType = dtypes.int64):
  n = draw(st.integers(1, 3))
  ends = [draw(st.integers(1, 9 if n < 3 else 6)) for _ in range(n)]
  ranges = [rng(d, e, dtype) for d, e in enumerate(ends)]
  def const(lo=-20, hi=40) -> UOp: return c(draw(st.integers(lo, hi)), dtype)
  def cond(depth: int) -> UOp:
    kind = draw(st.integers(0, 2))
    if kind == 0: return expr(depth) < const()
    if kind == 1: return const() < expr(depth)
    return expr(depth) < expr(depth)
  def expr(depth: int) -> UOp:
    if depth == 0 or draw(st.integers(0, 9)) == 0:
      return draw(st.sampled_from(ranges)) if draw(st.integers(0, 4)) else const()
    d = depth - 1
    kind = draw(st.integers(0, 9))
    if kind == 0: return expr(d) + expr(d)
    if kind == 1: return expr(d) * c(draw(st.sampled_from(COEFS)), dtype)
    if kind in (2, 3): return expr(d) // c(draw(st.sampled_from(DIVS)), dtype)
    if kind in (4, 5): return expr(d) % c(draw(st.sampled_from(DIVS)), dtype)
    if kind == 6: return cond(d).where(expr(d), expr(d))
    if kind == 7: return expr(d).maximum(expr(d))
    if kind == 8: return expr(d) - expr(d)
    out = const(-10, 10)   # a linear combination, as views write them
    for _ in range(draw(st.integers(1, 3))): out = out + expr(d) * c(draw(st.sampled_from(COEFS)), dtype)
    return out
  return expr(draw(st.integers(1, 5))), ranges

FUZZ = settings(max_examples=int(os.environ.get("SYMBOLIC_FUZZ_EXAMPLES", "700")), deadline=None, database=None,
                derandomize=os.environ.get("SYMBOLIC_FUZZ_RANDOM", "") == "",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

@FUZZ
@given(index_expr())
def test_fuzz_int64(case):
  check_simplify(*case)

@settings(FUZZ, max_examples=max(FUZZ.max_examples // 2, 10))
@given(st.sampled_from([dtypes.int8, dtypes.int32, dtypes.uint8, dtypes.uint32]).flatmap(index_expr))
def test_fuzz_wrapping_dtypes(case):
  # narrow and unsigned dtypes wrap around: the rules that reason about exact values must notice
  check_simplify(*case)
