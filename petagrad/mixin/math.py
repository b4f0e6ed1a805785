"""More elementwise math: nan checks, hyperbolic and inverse trig, log1p/expm1, hypot, fmod, norms, ... .

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
from typing import TYPE_CHECKING, Any, Sequence
from petagrad.dtype import dtypes
from petagrad.helpers import prod, argfix, flatten as flatten_list
if TYPE_CHECKING: from petagrad.tensor import Tensor

def _fail(*a, **k):
  from petagrad.tensor import _fail as f
  return f(*a, **k)

def _check_int_divisor(op: str, a: Tensor, b: Tensor) -> Tensor:
  from petagrad.tensor import _check_int_divisor as f
  return f(op, a, b)

def _as(x: Any, like: Tensor, op: str = "math") -> Tensor:
  from petagrad.tensor import Tensor
  if isinstance(x, Tensor): return x
  if not isinstance(x, (int, float, bool)): raise _fail(TypeError, op, f"unsupported operand type {type(x).__name__}", like)
  return Tensor.full((), x, like.dtype if like.dtype.is_float or not isinstance(x, float) else None, like.device)

def _finfo_max(dt) -> float:
  return {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}.get(dt.name, 1.7976931348623157e308)

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

class MathMixin:
  __slots__ = ()

  # ------------------------------------------------------------------ classification
  def isnan(self) -> Tensor:
    """True where the element is NaN (never for ints and bools)."""
    return self != self if self.dtype.is_float else self.full_like(False, dtypes.bool)

  def isinf(self, detect_positive: bool = True, detect_negative: bool = True) -> Tensor:
    """True where the element is +inf (detect_positive) or -inf (detect_negative)."""
    if not self.dtype.is_float: return self.full_like(False, dtypes.bool)
    pos, neg = self == math.inf, self == -math.inf
    if detect_positive and detect_negative: return pos | neg
    return pos if detect_positive else neg if detect_negative else self.full_like(False, dtypes.bool)

  def isfinite(self) -> Tensor:
    """True where the element is neither inf nor NaN."""
    return self.abs() < math.inf if self.dtype.is_float else self.full_like(True, dtypes.bool)

  def isposinf(self) -> Tensor: return self.isinf(True, False)
  def isneginf(self) -> Tensor: return self.isinf(False, True)

  def signbit(self) -> Tensor:
    """True where the sign bit is set (also for -0.0 and negative NaNs), from the bits."""
    if self.dtype.is_bool or self.dtype.is_unsigned: return self.full_like(False, dtypes.bool)
    if not self.dtype.is_float: return self < 0
    ints = {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[self.dtype.itemsize]
    return self.detach().bitcast(ints) < 0

  def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Tensor:
    """NaN -> nan, +inf -> posinf, -inf -> neginf (default: the largest/smallest finite value of the dtype)."""
    for name, v in (("nan", nan), ("posinf", posinf), ("neginf", neginf)):
      if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool)):
        raise _fail(TypeError, "nan_to_num", f"{name} must be a number, got {v!r}", self)
    if not self.dtype.is_float: return self
    big = _finfo_max(self.dtype)
    x = self.isnan().where(nan, self)
    x = (x == math.inf).where(big if posinf is None else posinf, x)
    return (x == -math.inf).where(-big if neginf is None else neginf, x)

  # ------------------------------------------------------------------ rounding and remainders
  def frac(self) -> Tensor:
    """x - trunc(x): the fractional part, with the sign of x."""
    if not self.dtype.is_float: raise _fail(TypeError, "frac", f"needs a float tensor, got {self.dtype}", self)
    return self - self.trunc()

  def fmod(self, x) -> Tensor:
    """C-style remainder: the result has the sign of self (torch.fmod). Ints: a divisor known to be 0 raises (torch)."""
    a, b = self._operands("fmod", x)
    if a.dtype.is_bool: raise _fail(TypeError, "fmod", "not defined for bool tensors", a, b)
    b = _check_int_divisor("fmod", a, b)
    if a.dtype.is_float: return a - (a / b).trunc() * b
    return a - a.div(b, rounding_mode="trunc") * b

  def idiv(self, x, reverse: bool = False) -> Tensor:
    """Integer division rounding toward zero (tinygrad's idiv; torch.div(rounding_mode='trunc'))."""
    a, b = self._operands("idiv", x, reverse)
    if a.dtype.is_bool: raise _fail(TypeError, "idiv", "not defined for bool tensors", a, b)
    b = _check_int_divisor("idiv", a, b)
    return a.div(b, rounding_mode="trunc")

  def lerp(self, end, weight) -> Tensor:
    """self + weight * (end - self), with torch's two-sided form (exact at weight 0 and 1)."""
    e, w = _as(end, self, "lerp"), _as(weight, self, "lerp")
    if not self.dtype.is_float: raise _fail(TypeError, "lerp", f"needs float tensors, got {self.dtype}", self, e)
    from petagrad.tensor import _broadcast_shape
    for t in (e, w):
      if t.device != self.device: raise _fail(RuntimeError, "lerp", f"tensors are on different devices: {self.device} and {t.device}", self, e, w)
    _broadcast_shape("lerp", self, e, w)
    d = e - self
    return (w.abs() < 0.5).where(self + w * d, e - d * (1 - w))

  # ------------------------------------------------------------------ exp / log family
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

  # ------------------------------------------------------------------ hyperbolic
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

  # ------------------------------------------------------------------ inverse trig
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

  # ------------------------------------------------------------------ two-argument helpers
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

  def copysign(self, other) -> Tensor:
    """|self| with the sign (bit) of other, as a float tensor."""
    a, b = self._operands("copysign", other)
    a, b = a._float("copysign"), b._float("copysign")
    return b.signbit().where(-a.abs(), a.abs())

  # ------------------------------------------------------------------ norms and distances
  def norm(self, ord=None, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Vector and matrix norms, torch.linalg.norm style.

    dim None: the whole tensor as a vector (ord None/'fro' is the 2-norm = Frobenius norm).
    dim an int: vector norms, ord in {None (2), p (any float), inf, -inf, 0}.
    dim a pair: matrix norms, ord in {None/'fro', 1, -1, inf, -inf}; 'nuc', 2, -2 need an SVD
    (NotImplementedError).

    >>> Tensor([3.0, 4.0]).norm().item()
    5.0
    """
    x = self._float("norm") if dtype is None else self.cast(dtype)
    from petagrad.tensor import _resolve_axis
    for a in (() if dim is None else tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)): _resolve_axis("norm", a, self.ndim, self)
    if dim is None and ord == "nuc":   # torch.Tensor.norm('nuc') of a matrix: the nuclear norm
      if self.ndim != 2: raise _fail(ValueError, "norm", f"ord 'nuc' needs a 2-D tensor or a pair of dims, got {self.ndim} dims", self)
      dim = (0, 1)
    if dim is None or isinstance(dim, int) or (isinstance(dim, (tuple, list)) and len(dim) == 1) or (isinstance(dim, (tuple, list)) and len(dim) > 2):
      if ord == "fro" or ord is None: ord = 2
      if isinstance(ord, str): raise _fail(ValueError, "norm", f"ord {ord!r} needs a pair of dims", self)
      return x._vector_norm(ord, dim, keepdim)
    if len(dim) != 2: raise _fail(ValueError, "norm", f"bad dim {dim}", self)
    from petagrad.tensor import _resolve_axis
    d0, d1 = _resolve_axis("norm", dim[0], self.ndim, self), _resolve_axis("norm", dim[1], self.ndim, self)
    if d0 == d1: raise _fail(ValueError, "norm", f"dims must differ, got {dim}", self)
    if ord is None or ord == "fro": return x._vector_norm(2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2): raise _fail(NotImplementedError, "norm", f"matrix norm ord={ord!r} needs singular values (not implemented)", self)
    if ord in (1, -1, math.inf, -math.inf):
      # 1: max over columns of the column sums; inf: max over rows of the row sums
      sum_dim, red_dim = (d0, d1) if ord in (1, -1) else (d1, d0)
      s = x.abs().sum(sum_dim, keepdim=True)
      r = s.max(red_dim, keepdim=True) if ord > 0 else s.min(red_dim, keepdim=True)
      return r if keepdim else r.squeeze((d0, d1))
    raise _fail(ValueError, "norm", f"unsupported matrix norm ord {ord!r}", self)

  def _vector_norm(self, ord, dim, keepdim: bool) -> Tensor:
    a = self.abs()
    if 0 in self.shape and (isinstance(ord, (int, float)) and ord < 0 or ord == math.inf):   # no identity for these: torch raises on an empty reduction
      dims = range(self.ndim) if dim is None else (dim,) if isinstance(dim, int) else dim
      if any(self.shape[d] == 0 for d in dims): raise _fail(RuntimeError, "norm", f"cannot compute the {ord} norm over an empty dim (no identity)", self)
    if ord == math.inf: return a.max(dim, keepdim)
    if ord == -math.inf: return a.min(dim, keepdim)
    if ord == 0: return (a != 0).cast(self.dtype).sum(dim, keepdim)
    if ord == 1: return a.sum(dim, keepdim)
    if ord == 2: return (self * self).sum(dim, keepdim).sqrt()
    if not isinstance(ord, (int, float)) or isinstance(ord, bool): raise _fail(ValueError, "norm", f"unsupported vector norm ord {ord!r}", self)
    return a.pow(float(ord)).sum(dim, keepdim).pow(1.0 / ord)

  def cross(self, other: Tensor, dim: int = -1) -> Tensor:
    """Cross product of 3-vectors along `dim` (default -1, like torch.linalg.cross), with broadcasting."""
    a, b = self._operands("cross", other)
    from petagrad.tensor import _resolve_axis
    d = _resolve_axis("cross", dim, a.ndim, a)
    if a.shape[d] != 3: raise _fail(ValueError, "cross", f"dim {d} must have size 3, got {a.shape[d]}", self, other)
    def comp(t: Tensor, i: int) -> Tensor: return t.shrink(tuple((i, i + 1) if k == d else None for k in range(t.ndim)))
    a0, a1, a2 = comp(a, 0), comp(a, 1), comp(a, 2)
    b0, b1, b2 = comp(b, 0), comp(b, 1), comp(b, 2)
    return (a1 * b2 - a2 * b1).cat(a2 * b0 - a0 * b2, a0 * b1 - a1 * b0, dim=d)

  def cdist(self, x2: Tensor, p: float = 2.0) -> Tensor:
    """Pairwise p-norm distances between the rows of self (..., P, M) and x2 (..., R, M) -> (..., P, R)."""
    from petagrad.tensor import Tensor
    if not isinstance(x2, Tensor): raise _fail(TypeError, "cdist", f"expected a Tensor, got {type(x2).__name__}", self)
    if self.ndim < 2 or x2.ndim < 2: raise _fail(ValueError, "cdist", "both inputs need at least 2 dims", self, x2)
    if self.shape[-1] != x2.shape[-1]: raise _fail(ValueError, "cdist", f"the last dims differ: {self.shape[-1]} and {x2.shape[-1]}", self, x2)
    if p < 0: raise _fail(ValueError, "cdist", f"p must be >= 0, got {p}", self, x2)
    diff = self._float("cdist").unsqueeze(-2) - x2._float("cdist").unsqueeze(-3)
    return diff._vector_norm(p, -1, False)

  # ------------------------------------------------------------------ more torch names (composed from the ops above)
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
    if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float))): raise _fail(TypeError, "logit", f"eps must be a float, got {eps!r}", self)
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

  def clamp_min(self, min) -> Tensor:
    """max(self, min) (torch.clamp_min); min may be a tensor."""
    from petagrad.tensor import Tensor
    return self.maximum(min) if isinstance(min, Tensor) else self.clip(min, None)

  def clamp_max(self, max) -> Tensor:
    """min(self, max) (torch.clamp_max); max may be a tensor."""
    from petagrad.tensor import Tensor
    return self.minimum(max) if isinstance(max, Tensor) else self.clip(None, max)

  def nansum(self, axis=None, keepdim: bool = False) -> Tensor:
    """sum treating NaN as 0."""
    return (self.isnan().where(0, self) if self.dtype.is_float else self).sum(axis, keepdim)

  def nanmean(self, axis=None, keepdim: bool = False) -> Tensor:
    """mean over the non-NaN elements (NaN where all are NaN)."""
    x = self._float("nanmean")
    ok = x.isnan().logical_not()
    return ok.where(x, 0).sum(axis, keepdim) / ok.sum(axis, keepdim)

  def count_nonzero(self, dim=None) -> Tensor:
    """The number of nonzero elements (over dims `dim`, all by default), int64."""
    return (self != 0).cast(dtypes.int64).sum(dim)

  def isclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> Tensor:
    """|self - other| <= atol + rtol * |other| elementwise (infs equal only to themselves), like torch.isclose.

    >>> Tensor([1.0, 2.0]).isclose(Tensor([1.0 + 1e-9, 2.1])).tolist()
    [True, False]
    """
    a, b = self._operands("isclose", other)
    if not a.dtype.is_float: return a == b
    finite = a.isfinite() & b.isfinite()
    close = finite.where((a - b).abs() <= atol + rtol * b.abs(), a == b)   # infs are close only to themselves
    return (close | (a.isnan() & b.isnan())) if equal_nan else close

  def allclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
    """True when every element isclose (a Python bool: this realizes)."""
    return bool(self.isclose(other, rtol, atol, equal_nan).all().item())

  # ------------------------------------------------------------------ products
  def _check_nd(self, op: str, other: Any, nd: int, other_nd: int) -> None:
    from petagrad.tensor import Tensor
    if not isinstance(other, Tensor): raise _fail(TypeError, op, f"expected a Tensor, got {type(other).__name__}", self)
    if self.ndim != nd or other.ndim != other_nd:
      raise _fail(ValueError, op, f"expects a {nd}-D and a {other_nd}-D tensor, got {self.ndim}-D and {other.ndim}-D", self, other)

  def mv(self, vec: Tensor) -> Tensor:
    """Matrix (n, m) times vector (m,) -> (n,)."""
    self._check_nd("mv", vec, 2, 1)
    return self.matmul(vec)

  def bmm(self, mat2: Tensor) -> Tensor:
    """Batched matmul of (b, n, m) and (b, m, p) -> (b, n, p), no broadcasting (torch.bmm)."""
    self._check_nd("bmm", mat2, 3, 3)
    if self.shape[0] != mat2.shape[0]: raise _fail(ValueError, "bmm", f"batch sizes differ: {self.shape[0]} and {mat2.shape[0]}", self, mat2)
    return self.matmul(mat2)

  def addmm(self, mat1: Tensor, mat2: Tensor, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * self + alpha * (mat1 @ mat2) (torch.addmm; self broadcasts to the product's shape)."""
    mat1._check_nd("addmm", mat2, 2, 2)
    return _scaled_sum("addmm", self, mat1.matmul(mat2), beta, alpha)

  def baddbmm(self, batch1: Tensor, batch2: Tensor, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * self + alpha * bmm(batch1, batch2) (torch.baddbmm)."""
    return _scaled_sum("baddbmm", self, batch1.bmm(batch2), beta, alpha)

  def inner(self, other: Tensor) -> Tensor:
    """Sum over the last dims of self and other (torch.inner): (..., k) x (..., k) -> self.shape[:-1] + other.shape[:-1]."""
    from petagrad.tensor import Tensor
    if not isinstance(other, Tensor): raise _fail(TypeError, "inner", f"expected a Tensor, got {type(other).__name__}", self)
    if self.ndim == 0 or other.ndim == 0: return self * other
    if self.shape[-1] != other.shape[-1]: raise _fail(ValueError, "inner", f"the last dims differ: {self.shape[-1]} and {other.shape[-1]}", self, other)
    return self.tensordot(other, ([self.ndim - 1], [other.ndim - 1]))

  def tensordot(self, other: Tensor, dims=2) -> Tensor:
    """Contract dims of self with dims of other (torch.tensordot): dims an int n (the last n of self with the
    first n of other) or two lists of dims. The result has self's free dims, then other's.

    >>> Tensor.ones(2, 3, 4).tensordot(Tensor.ones(3, 4, 5)).shape
    (2, 5)
    """
    from petagrad.tensor import Tensor, _resolve_axis
    if not isinstance(other, Tensor): raise _fail(TypeError, "tensordot", f"expected a Tensor, got {type(other).__name__}", self)
    if not (isinstance(dims, int) and not isinstance(dims, bool)) and not (isinstance(dims, (tuple, list)) and len(dims) == 2):
      raise _fail(TypeError, "tensordot", f"dims must be an int or a pair of dim lists, got {dims!r}", self, other)
    if isinstance(dims, int):
      if dims < 0 or dims > min(self.ndim, other.ndim): raise _fail(ValueError, "tensordot", f"dims={dims} is out of range for {self.ndim}-D and {other.ndim}-D tensors", self, other)
      da, db = list(range(self.ndim - dims, self.ndim)), list(range(dims))
    else:
      da, db = ([dims[0]] if isinstance(dims[0], int) else list(dims[0])), ([dims[1]] if isinstance(dims[1], int) else list(dims[1]))
      da, db = [_resolve_axis("tensordot", d, self.ndim, self) for d in da], [_resolve_axis("tensordot", d, other.ndim, other) for d in db]
    if len(da) != len(db): raise _fail(ValueError, "tensordot", f"dims {da} and {db} must have the same length", self, other)
    for p, q in zip(da, db):
      if self.shape[p] != other.shape[q]: raise _fail(ValueError, "tensordot", f"contracted dims differ: {self.shape[p]} (dim {p}) and {other.shape[q]} (dim {q})", self, other)
    fa, fb = [k for k in range(self.ndim) if k not in da], [k for k in range(other.ndim) if k not in db]
    k = prod(self.shape[p] for p in da)
    a = self.permute(*fa, *da).reshape(prod(self.shape[p] for p in fa), k)
    b = other.permute(*db, *fb).reshape(k, prod(other.shape[q] for q in fb))
    return a.matmul(b).reshape(tuple(self.shape[p] for p in fa) + tuple(other.shape[q] for q in fb))

  def kron(self, other: Tensor) -> Tensor:
    """Kronecker product (torch.kron): the smaller-rank operand gets leading 1 dims; out.shape[i] = a.shape[i] * b.shape[i]."""
    from petagrad.tensor import Tensor
    if not isinstance(other, Tensor): raise _fail(TypeError, "kron", f"expected a Tensor, got {type(other).__name__}", self)
    n = max(self.ndim, other.ndim)
    a = self.reshape((1,) * (n - self.ndim) + self.shape)
    b = other.reshape((1,) * (n - other.ndim) + other.shape)
    # (a0, 1, a1, 1, ...) * (1, b0, 1, b1, ...) -> (a0*b0, a1*b1, ...)
    pa = a.reshape(tuple(x for s in a.shape for x in (s, 1)))
    pb = b.reshape(tuple(x for s in b.shape for x in (1, s)))
    return (pa * pb).reshape(tuple(s * t for s, t in zip(a.shape, b.shape)))

def _scaled_sum(op: str, x: Tensor, prod_: Tensor, beta: float, alpha: float) -> Tensor:
  """beta * x + alpha * prod_, x broadcast to prod_'s shape (torch ignores x's values when beta == 0)."""
  p = prod_ if alpha == 1 else prod_ * alpha
  from petagrad.tensor import _broadcast_shape
  if _broadcast_shape(op, x, p) != p.shape: raise _fail(ValueError, op, f"self of shape {x.shape} does not broadcast to the product's shape {p.shape}", x, p)
  if beta == 0: return p   # torch ignores self's values (NaN too) when beta == 0
  return (x if beta == 1 else x * beta) + p

