"""Elementwise ops: arithmetic and the Python operators, comparisons, logical and bitwise ops, casts, where,
maximum/minimum, clip, pow, rounding and remainders, nan/inf checks.

Binary ops promote and broadcast their operands first (`_operands`); a Python scalar does not widen the dtype.
"""
from __future__ import annotations
import functools, math
from typing import Any
from petagrad.dtype import DType, dtypes, promote, promote_scalar
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp
from petagrad.uop.graph import is_disk, byte_view
from petagrad.uop.gradient import custom_backward
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import Scalar, _fail, _symbolic_int, _check_fits, _scalar_arg, _dtype_arg, _tensor_arg, _scalar_operand, \
  _check_int_divisor, _broadcast_shape, _truth, _as_tensor

def _pow_backward(T: Any, ctx: UOp, node: UOp) -> tuple[UOp | None, ...]:
  """torch.pow's gradients (node = CUSTOM_GRAD(value, a, b) or CUSTOM_GRAD(value, a) with the Python exponent in the
  arg): d/da = g * (b * a ** (b - 1)), 0 where b == 0; d/db = g * (a ** b * log(a)), 0 where a == 0 and b >= 0."""
  g = T(ctx)
  if len(node.src) == 2:
    y, a = node.arg[1], T(node.src[1])
    return (a.zeros_like().uop if y == 0 else (g * (a.pow(y - 1) * y)).uop,)
  a, b, out = T(node.src[1]), T(node.src[2]), T(node.src[0])
  ga = (b == 0).where(0.0, g * (b * a.pow(b - 1)))
  gb = g * ((a == 0) & (b >= 0)).where(0.0, out * a.log())
  return ga.uop, gb.uop

class ElementwiseMixin(TensorMixin):
  __slots__ = ()

  def __init_subclass__(cls, **kwargs: Any) -> None:
    super().__init_subclass__(**kwargs)
    # pow's gradient rule is tensor ops: it builds tensors of the class that combines the mixins (petagrad.tensor.Tensor)
    custom_backward.setdefault("pow", functools.partial(_pow_backward, cls))

  # ------------------------------------------------------------ operands
  def _operands(self, op: str, x: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    """Promote and broadcast (self, x) for a binary op; Python scalars do not widen the dtype."""
    if isinstance(x, TensorMixin):
      if x.device != self.device:
        raise _fail(RuntimeError, op, f"tensors are on different devices: {self.device} and {x.device}", self, x)
      if x.dtype is self.dtype and x.shape == self.shape: return (x, self) if reverse else (self, x)   # the common case
      try: dt = promote(self.dtype, x.dtype)
      except TypeError as e: raise _fail(TypeError, op, str(e), self, x) from None
      a, b = self, x
    elif isinstance(x, (int, float, bool)):
      # the common case again, built on the graph directly: the constant broadcast to self's shape
      dt = promote_scalar(self.dtype, x)
      # an int beyond 64 bits (or beyond any float) raises like torch; one in the 64-bit range wraps into an int dtype
      # like torch does (int8 + 1000, int8 == 300, int32 & 0xFFFFFFFF)
      if type(x) is int and (not -(1 << 63) <= x < (1 << 64) if dt.is_int else x.bit_length() > 1000): _scalar_operand(op, x, dt, self)
      a = self.cast(dt)
      b = a._new(a._c(x))
      b._requires_grad = None
      return (b, a) if reverse else (a, b)
    elif _symbolic_int(op, x, self):   # a bound Variable's value (an int32 scalar read when the kernel runs)
      return self._operands(op, type(self)(x, device=self.device), reverse)
    else:
      raise _fail(TypeError, op, f"unsupported operand type {type(x).__name__}", self)
    shape = _broadcast_shape(op, a, b)
    a, b = a.cast(dt)._broadcast_to(shape, op, a, b), b.cast(dt)._broadcast_to(shape, op, a, b)
    return (b, a) if reverse else (a, b)
  def _binop(self, op: Ops, x: Any, reverse: bool = False, name: str = "", dtype: DType | None = None) -> Tensor:
    a, b = self._operands(name or op.name.lower(), x, reverse)
    return a._new(UOp(op, dtype or (dtypes.bool if op in GroupOp.Comparison else a.dtype), (a.uop, b.uop)), b)
  def _unop(self, op: Ops) -> Tensor: return self._new(UOp(op, self.dtype, (self.uop,)), self)
  def _float(self, name: str) -> Tensor:
    """Self as a float tensor (ints and bools become the default float, like PyTorch's math functions)."""
    return self if self.dtype.is_float else self.cast(dtypes.default_float)

  # ------------------------------------------------------------ casts
  def cast(self, dtype: DType | str) -> Tensor:
    """Convert elements to another dtype (floats to ints truncate toward zero)."""
    dt = _dtype_arg(dtype)
    return self if dt == self.dtype else self._new(self.uop.cast(dt), self)
  def bitcast(self, dtype: DType | str) -> Tensor:
    """Reinterpret the bits as another dtype of the same size. On DISK the sizes may differ (the last dim scales: 8
    uint8 are 2 float32), and the result is a view of the same bytes of the file.

    >>> Tensor([1.0]).bitcast("int32").tolist()
    [1065353216]
    """
    dt = _dtype_arg(dtype)
    if is_disk(self.device): return self._disk_bitcast(dt)
    if dt.itemsize != self.dtype.itemsize: raise _fail(TypeError, "bitcast", f"{self.dtype} and {dt} differ in size", self)
    return self if dt == self.dtype else type(self)(self.uop.bitcast(dt))
  def _disk_bitcast(self, dt: DType) -> Tensor:
    """bitcast of a DISK tensor: its bytes as dt, a Buffer view of the file (DISK runs no kernels)."""
    old, new = self.dtype.itemsize, dt.itemsize
    if dt == self.dtype: return self
    if old != new and (not self.shape or self.shape[-1] * old % new):
      raise _fail(ValueError, "bitcast", f"the last dim of shape {self.shape} ({old}-byte elements) is not a whole number of {dt} elements", self)
    shape = self.shape if old == new else self.shape[:-1] + (self.shape[-1] * old // new,)
    if (v := byte_view(self.uop, dt, shape)) is None:
      raise _fail(RuntimeError, "bitcast", f"this view of {self.device} is not one contiguous byte range of the file: DISK bitcasts byte "
                  "ranges only; copy it to a compute device first (.to('CPU'))", self)
    return type(self)(v)
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def bfloat16(self) -> Tensor: return self.cast(dtypes.bfloat16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)
  def is_floating_point(self) -> bool: return self.dtype.is_float
  def type_as(self, other: Tensor) -> Tensor: return self.cast(_tensor_arg("type_as", "other", other, self).dtype)

  # ------------------------------------------------------------ arithmetic
  def add(self, x, alpha: Scalar | None = None) -> Tensor:
    if alpha is not None: x = x * alpha
    if self.dtype.is_bool and isinstance(x, TensorMixin) and x.dtype.is_bool: return self._binop(Ops.OR, x, name="add")
    return self._binop(Ops.ADD, x)
  def sub(self, x, alpha: Scalar | None = None, reverse: bool = False) -> Tensor:
    if alpha is not None: x = x * alpha
    a, b = self._operands("sub", x, reverse)
    if a.dtype.is_bool: raise _fail(TypeError, "sub", "subtraction of bool tensors is not supported; use logical_xor", a, b)
    return a._new(UOp(Ops.SUB, a.dtype, (a.uop, b.uop)), b)
  def mul(self, x) -> Tensor:
    if self.dtype.is_bool and isinstance(x, TensorMixin) and x.dtype.is_bool: return self._binop(Ops.AND, x, name="mul")
    return self._binop(Ops.MUL, x)
  def div(self, x, rounding_mode: str | None = None, reverse: bool = False) -> Tensor:
    """True division (ints give floats); rounding_mode 'trunc' or 'floor' like torch.div."""
    if rounding_mode not in (None, "trunc", "floor"):
      raise _fail(ValueError, "div", f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}", self)
    a, b = self._operands("div", x, reverse)
    if rounding_mode is not None: b = _check_int_divisor("div", a, b)
    if rounding_mode == "trunc": return a._trunc_div(b)
    if rounding_mode == "floor": return a._floor_div(b)
    a, b = a._float("div"), b._float("div")
    return a._new(UOp(Ops.FDIV, a.dtype, (a.uop, b.uop)), b)
  def _trunc_div(self, b: Tensor) -> Tensor:
    if self.dtype.is_float: return (self / b).trunc()
    return self._new(UOp(Ops.IDIV, self.dtype, (self.uop, b.uop)), b)
  def _floor_div(self, b: Tensor) -> Tensor:
    if self.dtype.is_float: return (self / b).floor()
    q = self._trunc_div(b)
    fix = ((q * b).ne(self)) & ((self < 0) ^ (b < 0))
    return fix.where(q - 1, q)
  def floordiv(self, x, reverse: bool = False) -> Tensor:
    a, b = self._operands("floordiv", x, reverse)
    b = _check_int_divisor("floordiv", a, b)
    return a._floor_div(b)
  def mod(self, x, reverse: bool = False) -> Tensor:
    """Python-style remainder: the result has the sign of the divisor (torch.remainder)."""
    a, b = self._operands("remainder", x, reverse)
    b = _check_int_divisor("remainder", a, b)
    if a.dtype.is_float:
      r = a - (a / b).floor() * b
      # x % +-inf is x when the signs agree (or x is 0), else +-inf (Python and PyTorch)
      inf = (b.abs() == float("inf")) & (a.abs() != float("inf"))
      return inf.where(((a == 0) | ((a < 0) == (b < 0))).where(a, b), r)
    r = a._new(UOp(Ops.MOD, a.dtype, (a.uop, b.uop)), b)
    return ((r.ne(0)) & ((r < 0) ^ (b < 0))).where(r + b, r)
  remainder = mod
  def neg(self) -> Tensor:
    if self.dtype.is_bool: raise _fail(TypeError, "neg", "negation of a bool tensor is not supported; use logical_not", self)
    return self._unop(Ops.NEG)
  def reciprocal(self) -> Tensor: return self._float("reciprocal")._unop(Ops.RECIPROCAL)
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

  # ------------------------------------------------------------ operators
  def __add__(self, x): return self.add(x)
  def __radd__(self, x): return self.add(x)
  def __sub__(self, x): return self.sub(x)
  def __rsub__(self, x): return self.sub(x, reverse=True)
  def __mul__(self, x): return self.mul(x)
  def __rmul__(self, x): return self.mul(x)
  def __truediv__(self, x): return self.div(x)
  def __rtruediv__(self, x): return self.div(x, reverse=True)
  def __floordiv__(self, x): return self.floordiv(x)
  def __rfloordiv__(self, x): return self.floordiv(x, reverse=True)
  def __mod__(self, x): return self.mod(x)
  def __rmod__(self, x): return self.mod(x, reverse=True)
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self.pow(x, reverse=True)
  def __neg__(self): return self.neg()
  def __pos__(self): return self
  def __abs__(self): return self.abs()
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return type(self)(x, device=self.device).matmul(self) if not isinstance(x, TensorMixin) else x.matmul(self)
  def __and__(self, x): return self.bitwise_and(x)
  def __rand__(self, x): return self.bitwise_and(x)
  def __or__(self, x): return self.bitwise_or(x)
  def __ror__(self, x): return self.bitwise_or(x)
  def __xor__(self, x): return self.bitwise_xor(x)
  def __rxor__(self, x): return self.bitwise_xor(x)
  def __invert__(self): return self.bitwise_not()
  def __lshift__(self, x): return self.lshift(x)
  def __rshift__(self, x): return self.rshift(x)
  def __rlshift__(self, x): return self.lshift(x, reverse=True)
  def __rrshift__(self, x): return self.rshift(x, reverse=True)
  # comparisons
  def __lt__(self, x): return self._binop(Ops.CMPLT, x, name="lt")
  def __gt__(self, x): return self._binop(Ops.CMPLT, x, reverse=True, name="gt")
  def __le__(self, x): return (self < x) | (self == x)   # not `not (a > b)`: both are False for NaN
  def __ge__(self, x): return (self > x) | (self == x)
  def __eq__(self, x): return self.ne(x).logical_not()   # type: ignore[override]
  def __ne__(self, x): return self.ne(x)   # type: ignore[override]
  def ne(self, x) -> Tensor: return self._binop(Ops.CMPNE, x, name="ne")
  def eq(self, x) -> Tensor: return self == x
  def lt(self, x) -> Tensor: return self < x
  def gt(self, x) -> Tensor: return self > x
  def le(self, x) -> Tensor: return self <= x
  def ge(self, x) -> Tensor: return self >= x

  # ------------------------------------------------------------ logical and bitwise
  def _check_int_or_bool(self, op: str, *others: Tensor) -> None:
    for t in (self,) + others:
      if t.dtype.is_float: raise _fail(TypeError, op, f"needs integer or bool tensors, got {t.dtype}", self, *others)
  def bitwise_and(self, x) -> Tensor:
    a, b = self._operands("bitwise_and", x); a._check_int_or_bool("bitwise_and", b)
    return a._new(UOp(Ops.AND, a.dtype, (a.uop, b.uop)))
  def bitwise_or(self, x) -> Tensor:
    a, b = self._operands("bitwise_or", x); a._check_int_or_bool("bitwise_or", b)
    return a._new(UOp(Ops.OR, a.dtype, (a.uop, b.uop)))
  def bitwise_xor(self, x) -> Tensor:
    a, b = self._operands("bitwise_xor", x); a._check_int_or_bool("bitwise_xor", b)
    return a._new(UOp(Ops.XOR, a.dtype, (a.uop, b.uop)))
  def bitwise_not(self) -> Tensor:
    self._check_int_or_bool("bitwise_not")
    return self._new(UOp(Ops.XOR, self.dtype, (self.uop, self._c(True if self.dtype.is_bool else -1))))
  def lshift(self, x, reverse: bool = False) -> Tensor:
    a, b = self._operands("lshift", x, reverse); a._check_int_or_bool("lshift", b)
    return a._new(UOp(Ops.SHL, a.dtype, (a.uop, b.uop)))
  def rshift(self, x, reverse: bool = False) -> Tensor:
    a, b = self._operands("rshift", x, reverse); a._check_int_or_bool("rshift", b)
    return a._new(UOp(Ops.SHR, a.dtype, (a.uop, b.uop)))
  def logical_not(self) -> Tensor: return self.cast(dtypes.bool).bitwise_xor(True)
  # a scalar operand is taken as a bool right away (2**70 is True, no int constant that wraps first)
  def logical_and(self, x) -> Tensor: return self.cast(dtypes.bool).bitwise_and(_as_tensor(_truth("logical_and", x, self), self).cast(dtypes.bool))
  def logical_or(self, x) -> Tensor: return self.cast(dtypes.bool).bitwise_or(_as_tensor(_truth("logical_or", x, self), self).cast(dtypes.bool))
  def logical_xor(self, x) -> Tensor: return self.cast(dtypes.bool).bitwise_xor(_as_tensor(_truth("logical_xor", x, self), self).cast(dtypes.bool))

  # ------------------------------------------------------------ selection, bounds and signs
  def maximum(self, x) -> Tensor: return self._binop(Ops.MAX, x, name="maximum")
  def minimum(self, x) -> Tensor:
    a, b = self._operands("minimum", x)
    if a.dtype.is_float: return -((-a).maximum(-b))
    return a.bitwise_not().maximum(b.bitwise_not()).bitwise_not()
  def where(self, x, y) -> Tensor:
    """Elementwise `x if self else y` (self is the condition; a non-bool condition is true where it is nonzero,
    as in tinygrad, where torch asks for a bool tensor).

    >>> Tensor([True, False]).where(1, 2).tolist()
    [1, 2]
    """
    cond = self.cast(dtypes.bool)
    if not isinstance(x, TensorMixin): x = _scalar_arg("where", "input", x, cond)
    if not isinstance(y, TensorMixin): y = _scalar_arg("where", "other", y, cond)
    if isinstance(x, TensorMixin) and isinstance(y, TensorMixin):
      try: dt = promote(x.dtype, y.dtype)
      except TypeError as e: raise _fail(TypeError, "where", str(e), cond, x, y) from None
    elif isinstance(x, TensorMixin): dt = promote_scalar(x.dtype, y)
    elif isinstance(y, TensorMixin): dt = promote_scalar(y.dtype, x)
    else: dt = promote(dtypes.from_py(x), dtypes.from_py(y))
    for v in (x, y):   # a scalar must fit the result's dtype (like torch.where on int8 with 1000)
      if not isinstance(v, TensorMixin): _check_fits("where", v, dt, True, cond)
    xt, yt = _as_tensor(x, cond, dt).cast(dt), _as_tensor(y, cond, dt).cast(dt)
    for t in (xt, yt):
      if t.device != cond.device: raise _fail(RuntimeError, "where", f"tensors are on different devices: {cond.device} and {t.device}", cond, xt, yt)
    shape = _broadcast_shape("where", cond, xt, yt)
    c, xt, yt = cond._broadcast_to(shape, "where"), xt._broadcast_to(shape, "where"), yt._broadcast_to(shape, "where")
    return xt._new(UOp(Ops.WHERE, dt, (c.uop, xt.uop, yt.uop)), yt)
  def abs(self) -> Tensor: return self if self.dtype.is_bool or self.dtype.is_unsigned else self.maximum(-self)
  def sign(self) -> Tensor:
    if self.dtype.is_bool: return self
    out = (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype) if not self.dtype.is_unsigned else (self > 0).cast(self.dtype)
    return self._new(out.uop, self)   # needs grad when self does (its gradient is 0), as in torch
  def clip(self, min_=None, max_=None, min=None, max=None) -> Tensor:   # noqa: A002  (torch's keyword names)
    """Clamp into [min_, max_] (either may be None; torch's keywords min= and max= work too); the gradient passes
    where min_ <= x <= max_."""
    if min is not None: min_ = min
    if max is not None: max_ = max
    if min_ is None and max_ is None: raise _fail(ValueError, "clip", "at least one of min_ and max_ must be given", self)
    for v in (min_, max_):   # a bound must fit the result's dtype, like torch.clamp
      if v is not None and not isinstance(v, TensorMixin):
        _check_fits("clip", v, promote_scalar(self.dtype, _scalar_arg("clip", "bound", v, self)), True, self)
    x = self
    if min_ is not None: x = (x < min_).where(min_, x)
    if max_ is not None: x = (x > max_).where(max_, x)
    return x
  clamp = clip
  def clamp_min(self, min) -> Tensor:
    """max(self, min) (torch.clamp_min); min may be a tensor."""
    return self.maximum(min) if isinstance(min, TensorMixin) else self.clip(min, None)
  def clamp_max(self, max) -> Tensor:
    """min(self, max) (torch.clamp_max); max may be a tensor."""
    return self.minimum(max) if isinstance(max, TensorMixin) else self.clip(None, max)
  def copysign(self, other) -> Tensor:
    """|self| with the sign (bit) of other, as a float tensor."""
    a, b = self._operands("copysign", other)
    a, b = a._float("copysign"), b._float("copysign")
    return b.signbit().where(-a.abs(), a.abs())
  def lerp(self, end, weight) -> Tensor:
    """self + weight * (end - self), with torch's two-sided form (exact at weight 0 and 1)."""
    e, w = _as(end, self, "lerp"), _as(weight, self, "lerp")
    if not self.dtype.is_float: raise _fail(TypeError, "lerp", f"needs float tensors, got {self.dtype}", self, e)
    for t in (e, w):
      if t.device != self.device: raise _fail(RuntimeError, "lerp", f"tensors are on different devices: {self.device} and {t.device}", self, e, w)
    _broadcast_shape("lerp", self, e, w)
    d = e - self
    return (w.abs() < 0.5).where(self + w * d, e - d * (1 - w))

  # ------------------------------------------------------------ powers and rounding
  def pow(self, x, reverse: bool = False) -> Tensor:
    """self ** x (x ** self when reverse), with torch.pow's values and gradients at the edges: small integer exponents
    multiply exactly (a negative base is fine: (-2) ** 3 = -8); 0 ** y, 1 ** nan, (-1) ** inf, (-inf) ** 0.5 and
    -0.0 ** -1 are what C's pow gives. The gradient is torch's: d/dx = y * x ** (y - 1), 0 where y == 0 (even at
    x == 0); d/dy = x ** y * log(x), 0 where x == 0 and y >= 0 (NaN for a negative base, -inf at x == 0, y < 0).

    >>> (Tensor([-2.0, 0.0]) ** 3).tolist(), (Tensor([0.0]) ** -1).tolist()
    ([-8.0, 0.0], [inf])
    """
    if not reverse and isinstance(x, int) and not isinstance(x, bool) and x < 0 and (self.dtype.is_int or self.dtype.is_bool):
      raise _fail(ValueError, "pow", f"Integers to negative integer powers are not allowed (exponent {x}; use a float exponent or tensor)", self)
    if self.dtype.is_bool and not (isinstance(x, TensorMixin) and x.dtype.is_float) and not isinstance(x, float):
      return self.cast(dtypes.int64).pow(x, reverse)   # bool ** int is int64 in PyTorch
    if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer() and abs(x) <= 16:
      n, base, acc = abs(int(x)), self, None
      while n:
        if n & 1: acc = base if acc is None else acc * base
        n >>= 1
        if n: base = base * base
      if acc is None:   # x ** 0 == 1 (also for NaN), with a zero gradient (the graph keeps x, like PyTorch)
        one = self.ones_like() if not self.dtype.is_bool else self.ones_like(dtypes.int64)
        return type(self).full(self.shape, True, dtypes.bool, self.device).where(one, self.cast(one.dtype))
      out = acc.reciprocal() if x < 0 else acc
      return out._pow_grad(self, x) if x not in (1, 2) else out   # x and x * x: the product rule is torch's already
    if not reverse and isinstance(x, float) and x == 0.5: return self.sqrt()
    if not reverse and isinstance(x, float) and x == -0.5 and self.dtype.is_float: return self.rsqrt()._pow_grad(self, x)   # torch: rsqrt
    a, b = self._operands("pow", x, reverse)
    if a.dtype.is_bool: a, b = a.cast(dtypes.int64), b.cast(dtypes.int64)
    if not a.dtype.is_float:   # integer power through float, rounded back
      return a.cast(dtypes.float64).pow(b.cast(dtypes.float64)).round_half_even().cast(a.dtype)
    a_, b_ = a.detach(), b.detach()   # the value's graph; the gradient comes from _pow_backward
    zero = a_ == 0
    # at a == 0 the log is -inf: take log2(1) there (no inf * 0 = nan) and fix the value below
    mag = (b_ * zero.where(1.0, a_.abs()).log2()).exp2()
    mag = zero.where((b_ > 0).where(0.0, float("inf")).cast(mag.dtype), mag)   # two scalars alone would be float32
    b_int = b_.trunc() == b_
    odd = b_int & ((b_.abs() % 2) == 1)
    out = (a_.signbit() & odd).where(-mag, mag)   # the sign bit: (-0.0) ** -1 is -inf
    out = ((a_ < 0) & (a_ > -math.inf) & b_int.logical_not()).where(float("nan"), out)   # (-inf) ** 0.5 is inf
    out = b_.isnan().where(float("nan"), out)
    out = ((b_ == 0) | (a_ == 1) | ((a_ == -1) & (b_.abs() == math.inf))).where(1.0, out)
    # a Python exponent: torch's gradient is y * x.pow(y - 1) with the scalar y - 1 (x.pow(0.5) is sqrt: nan at -inf)
    return out._pow_grad(a, b if reverse or isinstance(x, TensorMixin) else x)
  def _pow_grad(self, a: Tensor, b: Tensor | Scalar) -> Tensor:
    """self (the value of a ** b) with torch.pow's gradient for a (and b when it is a tensor): a CUSTOM_GRAD node
    whose backward is _pow_backward."""
    if isinstance(b, TensorMixin): return self._new(UOp(Ops.CUSTOM_GRAD, self.dtype, (self.uop, a.uop, b.uop), ("pow",)), a, b)
    return self._new(UOp(Ops.CUSTOM_GRAD, self.dtype, (self.uop, a.uop), ("pow", b)), a)
  def trunc(self) -> Tensor: return self if not self.dtype.is_float else self._unop(Ops.TRUNC)
  def floor(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round_half_even(self) -> Tensor:
    if not self.dtype.is_float: return self
    f = self.floor()
    d = self - f
    even = (f % 2) == 0
    return (d > 0.5).where(f + 1, (d < 0.5).where(f, even.where(f, f + 1)))
  def round(self, decimals: int = 0) -> Tensor:
    """Round half to even, to `decimals` decimal places (like torch.round).

    >>> Tensor([0.5, 1.5, 1.2345]).round().tolist(), Tensor([1.2345]).round(decimals=2).tolist()
    ([0.0, 2.0, 1.0], [1.2300000190734863])
    """
    if not isinstance(decimals, int) or isinstance(decimals, bool):
      raise _fail(TypeError, "round", f"decimals must be an int, got {decimals!r}", self)
    if decimals == 0 or not self.dtype.is_float: return self.round_half_even()
    if abs(decimals) > 308:
      raise _fail(ValueError, "round", f"decimals must be in [-308, 308] (10**decimals must be a finite float), got {decimals}", self)
    scale = 10.0 ** decimals
    return (self * scale).round_half_even() / scale
  def frac(self) -> Tensor:
    """x - trunc(x): the fractional part, with the sign of x."""
    if not self.dtype.is_float: raise _fail(TypeError, "frac", f"needs a float tensor, got {self.dtype}", self)
    return self - self.trunc()

  # ------------------------------------------------------------ classification and closeness
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

def _as(x: Any, like: Tensor, op: str = "math") -> Tensor:
  if isinstance(x, TensorMixin): return x
  if not isinstance(x, (int, float, bool)): raise _fail(TypeError, op, f"unsupported operand type {type(x).__name__}", like)
  return type(like).full((), x, like.dtype if like.dtype.is_float or not isinstance(x, float) else None, like.device)

def _finfo_max(dt) -> float:
  return {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}.get(dt.name, 1.7976931348623157e308)
