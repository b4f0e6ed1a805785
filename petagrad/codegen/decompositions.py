"""Decompositions applied per target: ops a renderer asks to have rewritten into simpler primitives.

`exp2` and `log2` on float32 become polynomials over +, *, bit casts and integer shifts, so loops that
use them vectorize (a libm call stops a compiler from vectorizing). Accuracy: about 1-2 ulp. The same methods serve
float64 (with longer series) and float64 `sin`, for targets without a math library (HIP compiled without ROCm).
"""
from __future__ import annotations
import functools, math
from dataclasses import dataclass
from typing import Callable
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite
from petagrad.dtype import DType, dtypes

F32 = dtypes.float32

def _where(c: UOp, a: UOp, b: UOp) -> UOp: return UOp(Ops.WHERE, a.dtype, (c, a, b))
def _lt(a: UOp, b: UOp) -> UOp: return UOp(Ops.CMPLT, dtypes.bool, (a, b))
def _ne(a: UOp, b: UOp) -> UOp: return UOp(Ops.CMPNE, dtypes.bool, (a, b))

@dataclass(frozen=True)
class FloatBits:
  """What exp2 and log2 need to know of a float dtype: its integer twin, its fraction bits and exponent bias, where
  exp2's input is clamped, and the degree of each series (float32: errors < 1e-8 / 4e-10; float64: < 1e-19 / 1e-20)."""
  f: DType
  i: DType
  mant: int
  bias: int
  exp_clamp: tuple[float, float]
  exp_degree: int
  log_degree: int
  def c(self, v: float) -> UOp: return UOp.const(self.f, v)
  def n(self, v: int) -> UOp: return UOp.const(self.i, v)
  def round(self, x: UOp) -> UOp:
    """x rounded to an integer: adding 1.5 * 2**mant pushes the fraction bits out (exact for |x| < 2**(mant - 1))."""
    return (x + self.c(1.5 * 2.0 ** self.mant)) - self.c(1.5 * 2.0 ** self.mant)
  def pow2(self, n: UOp) -> UOp:
    """2**n for an integer n in the normal exponent range, built from the exponent bits."""
    return UOp(Ops.SHL, self.i, (n + self.n(self.bias), self.n(self.mant))).bitcast(self.f)

F32_BITS = FloatBits(F32, dtypes.int32, 23, 127, (-150.0, 130.0), 7, 11)
# float64, for targets without a math library (HIP compiled without ROCm's device libraries): about 1-2 ulp
F64_BITS = FloatBits(dtypes.float64, dtypes.int64, 52, 1023, (-1080.0, 1030.0), 15, 27)

def exp2(x: UOp, b: FloatBits) -> UOp:
  lo, hi = b.exp_clamp
  # below lo the result is 0: those lanes compute 2**0, not a subnormal (x86 takes ~100 cycles per subnormal result,
  # and a causal softmax's masked half is exp(-inf): its row sums ran 6x slower)
  under = _lt(x, b.c(lo))
  xc = _where(under, b.c(0.0), _where(_lt(b.c(hi), x), b.c(hi), x))
  n = b.round(xc)
  f = xc - n                                     # in [-0.5, 0.5]
  # 2**f = exp(f ln2): Taylor series
  p = b.c(math.log(2) ** b.exp_degree / math.factorial(b.exp_degree))
  for k in range(b.exp_degree - 1, -1, -1): p = p * f + b.c(math.log(2) ** k / math.factorial(k))
  ni = n.cast(b.i)
  a = UOp(Ops.SHR, b.i, (ni, b.n(1)))
  out = _where(under, b.c(0.0), p * b.pow2(a) * b.pow2(ni - a))   # two halves: the scale never leaves the normal range
  return _where(_ne(x, x), x, out)

def log2(x: UOp, b: FloatBits) -> UOp:
  tiny = _lt(x, b.c(2.0 ** (1 - b.bias)))         # subnormal inputs: scale up by 2**64 first
  xs = _where(tiny, x * b.c(18446744073709551616.0), x)
  bits = xs.bitcast(b.i)
  e = (UOp(Ops.AND, b.i, (UOp(Ops.SHR, b.i, (bits, b.n(b.mant))), b.n(2 * b.bias + 1))) - b.n(b.bias)) + _where(tiny, b.n(-64), b.n(0))
  m = UOp(Ops.OR, b.i, (UOp(Ops.AND, b.i, (bits, b.n((1 << b.mant) - 1))), b.n(b.bias << b.mant))).bitcast(b.f)   # [1, 2)
  big = _lt(b.c(math.sqrt(2)), m)
  m = _where(big, m * b.c(0.5), m)
  e = _where(big, e + b.n(1), e)
  s = (m - b.c(1.0)).alu(Ops.FDIV, m + b.c(1.0))     # |s| <= 0.1716
  s2 = s * s
  # ln(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...)
  p = b.c(2 / b.log_degree)
  for k in range(b.log_degree - 2, 0, -2): p = p * s2 + b.c(2 / k)
  out = e.cast(b.f) + (s * p) * b.c(1 / math.log(2))
  out = _where(_ne(x, b.c(math.inf)), out, x)
  out = _where(_ne(x, b.c(0.0)), out, b.c(-math.inf))
  return _where(_lt(x, b.c(0.0)) | _ne(x, x), b.c(math.nan), out)

# pi/2 as three doubles: the first two with their low 20 bits zero, so k * part is exact for |k| < 2**20
_PIO2 = [1.5707963267341256, 6.077100506303966e-11, 2.0222662487959506e-21]

def sin_f64(x: UOp) -> UOp:
  """sin(x) = +-sin(r) or +-cos(r), r = x - k pi/2 in [-pi/4, pi/4] (Cody-Waite reduction: exact while |x| < 1.6e6;
  beyond it the error grows with |x|)."""
  b = F64_BITS
  _d, _l = b.c, b.n
  k = b.round(x * _d(2 / math.pi))
  r = ((x - k * _d(_PIO2[0])) - k * _d(_PIO2[1])) - k * _d(_PIO2[2])
  r2 = r * r
  sp, cp = _d(-1 / math.factorial(23)), _d(1 / math.factorial(22))   # Taylor series to degree 23 / 22: error < 1e-25
  for j in range(21, 0, -2): sp = sp * r2 + _d((-1) ** (j // 2) / math.factorial(j))
  for j in range(20, -1, -2): cp = cp * r2 + _d((-1) ** (j // 2) / math.factorial(j))
  sn = r * sp
  q = UOp(Ops.AND, b.i, (k.cast(b.i), _l(3)))
  out = _where(_ne(UOp(Ops.AND, b.i, (q, _l(1))), _l(0)), cp, sn)
  out = _where(_ne(UOp(Ops.AND, b.i, (q, _l(2))), _l(0)), -out, out)
  return _where(_ne(x - x, _d(0.0)), _d(math.nan), out)   # inf and NaN: NaN

def _via_f32(x: UOp, fn: Callable[..., UOp], dt: DType) -> UOp:
  """A float16/bfloat16 exp2 or log2: float32's polynomial on the widened value, rounded back (within float32's ulp of
  the libm call rounded the same way, far below a 16-bit float's)."""
  return fn(x.cast(dtypes.float32), b=F32_BITS).cast(dt)

DECOMPOSITIONS: dict[tuple[Ops, DType], Callable[[UOp], UOp]] = {
  **{(op, b.f): functools.partial(fn, b=b) for b in (F32_BITS, F64_BITS) for op, fn in ((Ops.EXP2, exp2), (Ops.LOG2, log2))},
  **{(op, dt): functools.partial(_via_f32, fn=fn, dt=dt) for dt in (dtypes.float16, dtypes.bfloat16)
     for op, fn in ((Ops.EXP2, exp2), (Ops.LOG2, log2))},
  (Ops.SIN, dtypes.float64): sin_f64}

def _decompose(u: UOp, ctx: frozenset) -> UOp | None:
  fn = DECOMPOSITIONS.get((u.op, u.dtype))
  return fn(u.src[0]) if fn is not None and (u.op, u.dtype) in ctx else None

decompose_rules = PatternMatcher([(UPat((Ops.EXP2, Ops.LOG2, Ops.SIN), name="u"), lambda u, ctx: _decompose(u, ctx))])

def decompose(ast: UOp, wanted: frozenset) -> UOp:
  """Rewrite the (op, dtype) pairs in `wanted` into primitives the target vectorizes."""
  return graph_rewrite(ast, decompose_rules, ctx=wanted) if wanted else ast
