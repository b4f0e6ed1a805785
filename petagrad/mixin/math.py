"""Elementwise math: exp/log, sqrt, trig, hyperbolic functions and their inverses, erf, log1p/expm1, hypot,
logaddexp & co.

Everything is composed from the core primitives (exp2, log2, sqrt, sin, where, ...). Functions with
cancellation near a point use a short series there and the closed form elsewhere (`where` between
two branches whose inputs are clamped, so the unused branch never produces inf/NaN gradients):
  expm1: Taylor series for |x| < 0.25, else exp(x) - 1.
  log1p: 2*atanh(x / (2 + x)) as an odd series for |x| < 0.25, else log(1 + x).
  atan:  two half-angle steps (atan x = 2 atan(x / (1 + sqrt(1 + x^2)))) bring |x| <= 1 down to
         |x| <= 0.2, then a Taylor series; |x| > 1 uses pi/2 - atan(1/|x|).

All are accurate to a few ulp in float32 and ~1e-15 relative in float64.
"""
from __future__ import annotations
import math
from typing import Sequence
from petagrad.dtype import dtypes
from petagrad.uop.ops import Ops
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.elementwise import _finfo_max
from petagrad.mixin.args import _fail

def _big(dt) -> float:
  """Where asinh/acosh switch to log(2x): 1e8, or lower where x*x would overflow (float16: 128)."""
  return min(1e8, math.sqrt(_finfo_max(dt)) / 2)

def _horner(x: Tensor, coeffs: Sequence[float]) -> Tensor:
  """coeffs[0] + coeffs[1] x + coeffs[2] x^2 + ..."""
  acc = x * 0 + coeffs[-1]
  for c in reversed(coeffs[:-1]): acc = acc * x + c
  return acc

def _odd(x: Tensor) -> tuple[Tensor, Tensor]:
  """(x < 0, |x|) for odd functions f(x) = sign(x) f(|x|); |x| has gradient 1 at 0 (not abs's 0)."""
  neg = x.signbit()
  return neg, neg.where(-x, x)

_EXPM1_C = [1.0 / math.factorial(k) for k in range(1, 15)]            # expm1(x)/x = sum x^(k-1)/k!
_ATANH_C = [1.0 / (2 * k + 1) for k in range(12)]                       # atanh(s)/s = sum s^(2k)/(2k+1)
_ATAN_C = [(-1.0) ** k / (2 * k + 1) for k in range(14)]                # atan(y)/y = sum (-y^2)^k/(2k+1)

class MathMixin(TensorMixin):
  __slots__ = ()

  # ------------------------------------------------------------ exp, log, roots
  def exp2(self) -> Tensor: return self._float("exp2")._unop(Ops.EXP2)
  def exp(self) -> Tensor: return (self._float("exp") * (1 / math.log(2)))._unop(Ops.EXP2)
  def log2(self) -> Tensor: return self._float("log2")._unop(Ops.LOG2)
  def log(self) -> Tensor: return self._float("log")._unop(Ops.LOG2) * math.log(2)
  def log10(self) -> Tensor: return self._float("log10")._unop(Ops.LOG2) * (math.log(2) / math.log(10))
  def sqrt(self) -> Tensor: return self._float("sqrt")._unop(Ops.SQRT)
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def square(self) -> Tensor: return self * self if not self.dtype.is_bool else self.cast(dtypes.int64).square()
  def expm1(self) -> Tensor:
    """exp(x) - 1, accurate near 0 (series for |x| < 0.25)."""
    x = self._float("expm1")
    small = x.abs() < 0.25
    xs = small.where(x, 0.0)
    xl = small.where(1.0, x)
    return small.where(xs * _horner(xs, _EXPM1_C), xl.exp() - 1)
  def log1p(self) -> Tensor:
    """log(1 + x), accurate near 0 (2 atanh(x / (2 + x)) as a series for |x| < 0.25)."""
    x = self._float("log1p")
    small = x.abs() < 0.25
    xs = small.where(x, 0.0)
    s = xs / (2 + xs)
    return small.where(2 * s * _horner(s * s, _ATANH_C), (1 + small.where(1.0, x)).log())
  def xlogy(self, other) -> Tensor:
    """self * log(other), and 0 where self == 0 (unless other is NaN), like torch.xlogy."""
    a, b = self._operands("xlogy", other)
    a, b = a._float("xlogy"), b._float("xlogy")
    zero = (a == 0) & (b == b)
    lg = b.log()
    # at self == 0 use log(other) only where it is finite: the value is 0 and d/dself stays log(other), like torch
    return a * zero.where((lg.abs() < math.inf).where(lg, 0.0), lg)

  # ------------------------------------------------------------ trigonometric
  def sin(self) -> Tensor: return self._float("sin")._unop(Ops.SIN)
  def cos(self) -> Tensor:
    """cos(x) = sin(pi/2 - x), with the reduction by multiples of pi/2 done in float64 so large |x|
    keep their accuracy."""
    x = self._float("cos")
    if x.dtype == dtypes.float64: return ((math.pi / 2) - x)._unop(Ops.SIN)
    xd = x.cast(dtypes.float64)
    k = (xd * (2 / math.pi)).round_half_even()
    r = (xd - k * (math.pi / 2)).cast(x.dtype)    # |r| <= pi/4
    q = (k % 4).cast(dtypes.int32)
    c, s_ = ((math.pi / 2) - r)._unop(Ops.SIN), r._unop(Ops.SIN)   # cos(r), sin(r)
    return (q == 0).where(c, (q == 1).where(-s_, (q == 2).where(-c, s_)))
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def atan(self) -> Tensor:
    """Arc tangent (see the module doc for the method)."""
    x = self._float("atan")
    neg, ax = _odd(x)
    inv = ax > 1
    r = inv.where(1 / inv.where(ax, 1.0), ax)           # in [0, 1]
    for _ in range(2): r = r / (1 + (1 + r * r).sqrt())  # in [0, 0.2]
    a = 4 * r * _horner(r * r, _ATAN_C)
    a = inv.where(math.pi / 2 - a, a)
    return neg.where(-a, a)
  arctan = atan
  def asin(self) -> Tensor:
    """Arc sine: atan(x / sqrt((1 - x)(1 + x))); NaN outside [-1, 1]."""
    x = self._float("asin")
    return (x / ((1 - x) * (1 + x)).sqrt()).atan()
  def acos(self) -> Tensor:
    """Arc cosine: 2 atan(sqrt((1 - x) / (1 + x))), accurate near 1; NaN outside [-1, 1]."""
    x = self._float("acos")
    return 2 * ((1 - x) / (1 + x)).sqrt().atan()
  arcsin, arccos = asin, acos
  def atan2(self, other) -> Tensor:
    """The angle of the point (other, self), in [-pi, pi], with torch's signed-zero and inf rules."""
    y, x = self._operands("atan2", other)
    y, x = y._float("atan2"), x._float("atan2")
    ay, ax = y.abs(), x.abs()
    swap = ay > ax
    num, den = swap.where(ax, ay), swap.where(ay, ax)
    both_inf = (ay == math.inf) & (ax == math.inf)
    ok = (den > 0) & both_inf.logical_not()
    ratio = ok.where(num / ok.where(den, 1.0), 0.0)
    ratio = both_inf.where(1.0, ratio)
    a = ratio.atan()
    a = swap.where(math.pi / 2 - a, a)
    a = x.signbit().where(math.pi - a, a)
    a = (y.isnan() | x.isnan()).where(math.nan, a)
    return y.signbit().where(-a, a)
  arctan2 = atan2

  # ------------------------------------------------------------ hyperbolic
  def tanh(self) -> Tensor: return 2 * (2 * self._float("tanh")).sigmoid() - 1
  def sinh(self) -> Tensor:
    """(e^x - e^-x) / 2, accurate near 0 (through expm1) and without early overflow."""
    x = self._float("sinh")
    neg, ax = _odd(x)
    big = ax > 20
    sm = big.where(1.0, ax)
    small_val = 0.5 * sm.expm1() * (1 + (-sm).exp())
    big_val = (big.where(ax, 0.0) - math.log(2)).exp()
    v = big.where(big_val, small_val)
    return neg.where(-v, v)
  def cosh(self) -> Tensor:
    """(e^x + e^-x) / 2, without overflowing before the result does."""
    ax = self._float("cosh").abs()
    return (ax - math.log(2)).exp() + 0.5 * (-ax).exp()
  def asinh(self) -> Tensor:
    """log(x + sqrt(x^2 + 1)), accurate near 0 (log1p form) and for huge |x|."""
    x = self._float("asinh")
    neg, ax = _odd(x)
    big = ax > _big(x.dtype)
    a = big.where(1.0, ax)
    small_val = (a + a * a / (1 + (a * a + 1).sqrt())).log1p()
    big_val = big.where(ax, 1.0).log() + math.log(2)
    v = big.where(big_val, small_val)
    return neg.where(-v, v)
  def acosh(self) -> Tensor:
    """log(x + sqrt(x^2 - 1)) for x >= 1 (NaN below), accurate near 1 and for huge x."""
    x = self._float("acosh")
    big = x > _big(x.dtype)
    t = big.where(1.0, x) - 1
    small_val = (t + (t * (t + 2)).sqrt()).log1p()
    return big.where(big.where(x, 1.0).log() + math.log(2), small_val)
  def atanh(self) -> Tensor:
    """0.5 * log((1 + x) / (1 - x)) = 0.5 * log1p(2x / (1 - x)), accurate near 0."""
    x = self._float("atanh")
    return 0.5 * (2 * x / (1 - x)).log1p()

  # ------------------------------------------------------------ special functions
  def erf(self) -> Tensor:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)
    x = self._float("erf")
    pos = x >= 0
    a = pos.where(x, -x)   # |x| whose gradient at 0 is the right-hand one (erf is smooth there)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * (-(a * a)).exp()
    return pos.where(y, -y)
  def hypot(self, other) -> Tensor:
    """sqrt(self^2 + other^2) without overflow or underflow in the squares; inf if either is inf."""
    a, b = self._operands("hypot", other)
    a, b = a._float("hypot").abs(), b._float("hypot").abs()
    # scale by the larger magnitude, detached: the value is exact for any scale and no gradient
    # path multiplies two large numbers
    hi = a.maximum(b).detach()
    safe = (hi > 0) & (hi < math.inf)
    h = safe.where(hi, 1.0)
    ra, rb = a / h, b / h
    out = safe.where(h * (ra * ra + rb * rb).sqrt(), a + b)
    return ((a == math.inf) | (b == math.inf)).where(math.inf, out)
  def logaddexp(self, other) -> Tensor:
    """log(exp(self) + exp(other)), computed stably (max + log1p(exp(-|a - b|))).

    >>> round(Tensor([0.0]).logaddexp(Tensor([0.0])).item(), 4)
    0.6931
    """
    a, b = self._operands("logaddexp", other)
    a, b = a._float("logaddexp"), b._float("logaddexp")
    m = a.maximum(b)
    d = (a - b).abs()
    same_inf = (a == b) & (a.abs() == math.inf)        # inf - inf: the result is that inf
    return same_inf.where(a, m + (-same_inf.where(0.0, d)).exp().log1p())
  def logaddexp2(self, other) -> Tensor:
    """log2(2**self + 2**other), computed stably."""
    a, b = self._operands("logaddexp2", other)
    return (a._float("logaddexp2") * math.log(2)).logaddexp(b._float("logaddexp2") * math.log(2)) / math.log(2)
  def logit(self, eps: float | None = None) -> Tensor:
    """log(p / (1 - p)), with p clamped to [eps, 1 - eps] when eps is given (torch.logit)."""
    x = self._float("logit")
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float))):
      raise _fail(TypeError, "logit", f"eps must be a float, got {eps!r}", self)
    if eps is not None: x = x.clip(eps, 1 - eps)
    return (x / (1 - x)).log()
  def sinc(self) -> Tensor:
    """sin(pi x) / (pi x), 1 at x == 0 (torch.sinc); a Taylor series for |pi x| < 0.1 (no cancellation)."""
    x = self._float("sinc")
    px = x * math.pi
    small = px.abs() < 0.1
    ps, pl = small.where(px, 0.0), small.where(1.0, px)
    series = _horner(ps * ps, [1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880])
    return small.where(series, pl.sin() / pl)
  def deg2rad(self) -> Tensor: return self._float("deg2rad") * (math.pi / 180)
  def rad2deg(self) -> Tensor: return self._float("rad2deg") * (180 / math.pi)
