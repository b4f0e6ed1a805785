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

DECOMPOSITIONS: dict[tuple[Ops, DType], object] = {(Ops.EXP2, F32): exp2_f32, (Ops.LOG2, F32): log2_f32}

def _decompose(u: UOp, ctx: frozenset) -> UOp | None:
  fn = DECOMPOSITIONS.get((u.op, u.dtype))
  return fn(u.src[0]) if fn is not None and (u.op, u.dtype) in ctx else None   # type: ignore[operator]

decompose_rules = PatternMatcher([(UPat((Ops.EXP2, Ops.LOG2), name="u"), lambda u, ctx: _decompose(u, ctx))])

def decompose(ast: UOp, wanted: frozenset) -> UOp:
  """Rewrite the (op, dtype) pairs in `wanted` into primitives the target vectorizes."""
  return graph_rewrite(ast, decompose_rules, ctx=wanted) if wanted else ast
