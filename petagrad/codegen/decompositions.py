"""Decompositions applied per target: ops a renderer asks to have rewritten into simpler primitives.

`exp2` and `log2` on float32 become polynomials over +, *, bit casts and integer shifts, so loops that
use them vectorize (a libm call stops a compiler from vectorizing). Accuracy: about 1-2 ulp.
"""
from __future__ import annotations
import math
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite
from petagrad.dtype import DType, dtypes

F32 = dtypes.float32

def _f(v: float) -> UOp: return UOp.const(F32, v)
def _i(v: int) -> UOp: return UOp.const(dtypes.int32, v)
def _where(c: UOp, a: UOp, b: UOp) -> UOp: return UOp(Ops.WHERE, a.dtype, (c, a, b))
def _lt(a: UOp, b: UOp) -> UOp: return UOp(Ops.CMPLT, dtypes.bool, (a, b))
def _ne(a: UOp, b: UOp) -> UOp: return UOp(Ops.CMPNE, dtypes.bool, (a, b))

def _pow2i(n: UOp) -> UOp:
  """2**n for an int32 n in [-126, 127], built from the exponent bits."""
  return UOp(Ops.SHL, dtypes.int32, (n + _i(127), _i(23))).bitcast(F32)

def exp2_f32(x: UOp) -> UOp:
  xc = _where(_lt(x, _f(-150.0)), _f(-150.0), _where(_lt(_f(130.0), x), _f(130.0), x))
  # round to nearest: adding 1.5 * 2**23 pushes the fraction bits out (exact for |x| < 2**22)
  n = (xc + _f(12582912.0)) - _f(12582912.0)
  f = xc - n                                     # in [-0.5, 0.5]
  # 2**f = exp(f ln2): Taylor series to degree 7, error < 1e-8 on [-0.5, 0.5]
  p = _f(math.log(2) ** 7 / math.factorial(7))
  for k in range(6, -1, -1): p = p * f + _f(math.log(2) ** k / math.factorial(k))
  ni = n.cast(dtypes.int32)
  a = UOp(Ops.SHR, dtypes.int32, (ni, _i(1)))
  out = p * _pow2i(a) * _pow2i(ni - a)            # two halves: the scale never leaves the normal range
  return _where(_ne(x, x), x, out)

def log2_f32(x: UOp) -> UOp:
  tiny = _lt(x, _f(1.1754943508222875e-38))      # subnormal inputs: scale up by 2**64 first
  xs = _where(tiny, x * _f(18446744073709551616.0), x)
  bits = xs.bitcast(dtypes.int32)
  e = (UOp(Ops.AND, dtypes.int32, (UOp(Ops.SHR, dtypes.int32, (bits, _i(23))), _i(0xff))) - _i(127)) + _where(tiny, _i(-64), _i(0))
  m = UOp(Ops.OR, dtypes.int32, (UOp(Ops.AND, dtypes.int32, (bits, _i(0x7fffff))), _i(0x3f800000))).bitcast(F32)   # [1, 2)
  big = _lt(_f(math.sqrt(2)), m)
  m = _where(big, m * _f(0.5), m)
  e = _where(big, e + _i(1), e)
  s = (m - _f(1.0)).alu(Ops.FDIV, m + _f(1.0))     # |s| <= 0.1716
  s2 = s * s
  # ln(m) = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), error < 4e-10
  p = _f(2 / 11)
  for k in (9, 7, 5, 3, 1): p = p * s2 + _f(2 / k)
  out = e.cast(F32) + (s * p) * _f(1 / math.log(2))
  out = _where(_ne(x, _f(math.inf)), out, x)
  out = _where(_ne(x, _f(0.0)), out, _f(-math.inf))
  return _where(_lt(x, _f(0.0)) | _ne(x, x), _f(math.nan), out)

# float64, for targets without a math library (HIP compiled without ROCm's device libraries). Same methods as above,
# with longer series: about 1-2 ulp
F64, I64 = dtypes.float64, dtypes.int64
def _d(v: float) -> UOp: return UOp.const(F64, v)
def _l(v: int) -> UOp: return UOp.const(I64, v)
def _round_f64(x: UOp) -> UOp: return (x + _d(6755399441055744.0)) - _d(6755399441055744.0)   # 1.5 * 2**52: exact for |x| < 2**51

def _pow2l(n: UOp) -> UOp:
  """2**n for an int64 n in [-1022, 1023], built from the exponent bits."""
  return UOp(Ops.SHL, I64, (n + _l(1023), _l(52))).bitcast(F64)

def exp2_f64(x: UOp) -> UOp:
  xc = _where(_lt(x, _d(-1080.0)), _d(-1080.0), _where(_lt(_d(1030.0), x), _d(1030.0), x))
  n = _round_f64(xc)
  f = xc - n                                      # in [-0.5, 0.5]
  # 2**f: Taylor series of exp(f ln2) to degree 15, error < 1e-19
  p = _d(math.log(2) ** 15 / math.factorial(15))
  for k in range(14, -1, -1): p = p * f + _d(math.log(2) ** k / math.factorial(k))
  ni = n.cast(I64)
  a = UOp(Ops.SHR, I64, (ni, _l(1)))
  return _where(_ne(x, x), x, p * _pow2l(a) * _pow2l(ni - a))

def log2_f64(x: UOp) -> UOp:
  tiny = _lt(x, _d(2.2250738585072014e-308))       # subnormal inputs: scale up by 2**64 first
  xs = _where(tiny, x * _d(18446744073709551616.0), x)
  bits = xs.bitcast(I64)
  e = (UOp(Ops.AND, I64, (UOp(Ops.SHR, I64, (bits, _l(52))), _l(0x7ff))) - _l(1023)) + _where(tiny, _l(-64), _l(0))
  m = UOp(Ops.OR, I64, (UOp(Ops.AND, I64, (bits, _l((1 << 52) - 1))), _l(0x3ff0000000000000))).bitcast(F64)   # [1, 2)
  big = _lt(_d(math.sqrt(2)), m)
  m = _where(big, m * _d(0.5), m)
  e = _where(big, e + _l(1), e)
  s = (m - _d(1.0)).alu(Ops.FDIV, m + _d(1.0))     # |s| <= 0.1716
  s2 = s * s
  p = _d(2 / 27)                                   # 2 atanh(s) to s**27: error < 1e-20
  for k in range(25, 0, -2): p = p * s2 + _d(2 / k)
  out = e.cast(F64) + (s * p) * _d(1 / math.log(2))
  out = _where(_ne(x, _d(math.inf)), out, x)
  out = _where(_ne(x, _d(0.0)), out, _d(-math.inf))
  return _where(_lt(x, _d(0.0)) | _ne(x, x), _d(math.nan), out)

# pi/2 as three doubles: the first two with their low 20 bits zero, so k * part is exact for |k| < 2**20
_PIO2 = [1.5707963267341256, 6.077100506303966e-11, 2.0222662487959506e-21]

def sin_f64(x: UOp) -> UOp:
  """sin(x) = +-sin(r) or +-cos(r), r = x - k pi/2 in [-pi/4, pi/4] (Cody-Waite reduction: exact while |x| < 1.6e6;
  beyond it the error grows with |x|)."""
  k = _round_f64(x * _d(2 / math.pi))
  r = ((x - k * _d(_PIO2[0])) - k * _d(_PIO2[1])) - k * _d(_PIO2[2])
  r2 = r * r
  sp, cp = _d(-1 / math.factorial(23)), _d(1 / math.factorial(22))   # Taylor series to degree 23 / 22: error < 1e-25
  for j in range(21, 0, -2): sp = sp * r2 + _d((-1) ** (j // 2) / math.factorial(j))
  for j in range(20, -1, -2): cp = cp * r2 + _d((-1) ** (j // 2) / math.factorial(j))
  sn = r * sp
  q = UOp(Ops.AND, I64, (k.cast(I64), _l(3)))
  out = _where(_ne(UOp(Ops.AND, I64, (q, _l(1))), _l(0)), cp, sn)
  out = _where(_ne(UOp(Ops.AND, I64, (q, _l(2))), _l(0)), -out, out)
  return _where(_ne(x - x, _d(0.0)), _d(math.nan), out)   # inf and NaN: NaN

DECOMPOSITIONS: dict[tuple[Ops, DType], object] = {(Ops.EXP2, F32): exp2_f32, (Ops.LOG2, F32): log2_f32,
                                                   (Ops.EXP2, F64): exp2_f64, (Ops.LOG2, F64): log2_f64, (Ops.SIN, F64): sin_f64}

def _decompose(u: UOp, ctx: frozenset) -> UOp | None:
  fn = DECOMPOSITIONS.get((u.op, u.dtype))
  return fn(u.src[0]) if fn is not None and (u.op, u.dtype) in ctx else None   # type: ignore[operator]

decompose_rules = PatternMatcher([(UPat((Ops.EXP2, Ops.LOG2, Ops.SIN), name="u"), lambda u, ctx: _decompose(u, ctx))])

def decompose(ast: UOp, wanted: frozenset) -> UOp:
  """Rewrite the (op, dtype) pairs in `wanted` into primitives the target vectorizes."""
  return graph_rewrite(ast, decompose_rules, ctx=wanted) if wanted else ast
