"""ONNX elementwise math, activations, casts, reductions, matrix products and quantization, as Tensor ops."""
from __future__ import annotations
import math
from typing import Any, Callable
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.onnx import types
from petagrad.onnx.common import NodeContext, ints, scalar, axis_of, axes_of

# ------------------------------------------------------------ elementwise
def unary(f: Callable[[Tensor], Tensor]) -> Callable[..., Tensor]:
  def op(ctx: NodeContext, x: Tensor) -> Tensor: return f(x)
  return op

def binary(f: Callable[[Tensor, Tensor], Tensor]) -> Callable[..., Tensor]:
  def op(ctx: NodeContext, a: Tensor, b: Tensor) -> Tensor: return f(a, b)
  return op

def variadic(f: Callable[[Tensor, Tensor], Tensor]) -> Callable[..., Tensor]:
  def op(ctx: NodeContext, *xs: Tensor) -> Tensor:
    if not xs: raise ValueError("needs at least one input")
    out = xs[0]
    for x in xs[1:]: out = f(out, x)
    return out
  return op

def same_dtype(f: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
  """f, with the result cast back to the input's dtype (ONNX ops keep their input's type)."""
  def g(x: Tensor) -> Tensor:
    r = f(x)
    return r.cast(x.dtype) if r.dtype != x.dtype else r
  return g

def c_div(a: Tensor, b: Tensor) -> Tensor:
  if a.dtype.is_int: return a.div(b, rounding_mode="trunc").cast(a.dtype)   # C integer division
  return a / b

def onnx_pow(a: Tensor, b: Tensor) -> Tensor:
  if a.dtype.is_int and b.dtype.is_float: return a.cast(b.dtype).pow(b).cast(a.dtype)
  r = a.pow(b if b.dtype == a.dtype or not a.dtype.is_float else b.cast(a.dtype))
  return r.cast(a.dtype) if r.dtype != a.dtype else r

def Mod(ctx: NodeContext, a: Tensor, b: Tensor, fmod: int = 0) -> Tensor:
  r = a.fmod(b) if fmod else a.mod(b)
  return r.cast(a.dtype) if r.dtype != a.dtype else r

def BitShift(ctx: NodeContext, x: Tensor, y: Tensor, direction: str = "") -> Tensor:
  if direction not in ("LEFT", "RIGHT"): raise ValueError(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
  bits = x.dtype.itemsize * 8
  y = y.cast(dtypes.int64)
  bad = (y < 0) | (y >= bits)
  ys = bad.where(0, y).cast(x.dtype)
  if direction == "LEFT": return bad.where(0, x.lshift(ys)).cast(x.dtype)
  fill = (x < 0).where(-1, 0).cast(x.dtype) if not x.dtype.is_unsigned else 0
  return bad.where(fill, x.rshift(ys)).cast(x.dtype)

def Mean(ctx: NodeContext, *xs: Tensor) -> Tensor:
  s = variadic(lambda a, b: a + b)(ctx, *xs)
  return s / len(xs) if s.dtype.is_float else s.div(len(xs), rounding_mode="trunc").cast(s.dtype)

def max_nan(a: Tensor, b: Tensor) -> Tensor:
  # NaN propagates (numpy's maximum)
  r = a.maximum(b)
  return (a.isnan() | b.isnan()).where(float("nan"), r) if a.dtype.is_float else r
def min_nan(a: Tensor, b: Tensor) -> Tensor:
  r = a.minimum(b)
  return (a.isnan() | b.isnan()).where(float("nan"), r) if a.dtype.is_float else r

def Where(ctx: NodeContext, c: Tensor, x: Tensor, y: Tensor) -> Tensor: return c.cast(dtypes.bool).where(x, y)

def Clip(ctx: NodeContext, x: Tensor, lo: Tensor | None = None, hi: Tensor | None = None, min: float | None = None,
         max: float | None = None) -> Tensor:
  # opset < 11: bounds are attributes; later: optional scalar inputs
  lo_v = scalar(lo) if lo is not None else min
  hi_v = scalar(hi) if hi is not None else max
  if lo_v is not None: x = (x < lo_v).where(Tensor(lo_v, dtype=x.dtype, device=x.device), x)
  if hi_v is not None: x = (x > hi_v).where(Tensor(hi_v, dtype=x.dtype, device=x.device), x)
  return x

def IsInf(ctx: NodeContext, x: Tensor, detect_negative: int = 1, detect_positive: int = 1) -> Tensor:
  return x.isinf(bool(detect_positive), bool(detect_negative))

# ------------------------------------------------------------ activations
def Elu(ctx: NodeContext, x: Tensor, alpha: float = 1.0) -> Tensor: return (x > 0).where(x, alpha * (x.exp() - 1)).cast(x.dtype)
def Selu(ctx: NodeContext, x: Tensor, alpha: float = 1.67326319217681884765625, gamma: float = 1.05070102214813232421875) -> Tensor:
  return (gamma * (x > 0).where(x, alpha * (x.exp() - 1))).cast(x.dtype)
def Celu(ctx: NodeContext, x: Tensor, alpha: float = 1.0) -> Tensor:
  return (x.maximum(0) + (alpha * ((x / alpha).exp() - 1)).minimum(0)).cast(x.dtype)
def LeakyRelu(ctx: NodeContext, x: Tensor, alpha: float = 0.01) -> Tensor: return (x < 0).where(x * alpha, x).cast(x.dtype)
def ThresholdedRelu(ctx: NodeContext, x: Tensor, alpha: float = 1.0) -> Tensor: return (x > alpha).where(x, 0).cast(x.dtype)
def HardSigmoid(ctx: NodeContext, x: Tensor, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
  return (x * alpha + beta).maximum(0).minimum(1).cast(x.dtype)
def HardSwish(ctx: NodeContext, x: Tensor) -> Tensor: return (x * (x * (1 / 6) + 0.5).maximum(0).minimum(1)).cast(x.dtype)
def Shrink(ctx: NodeContext, x: Tensor, bias: float = 0.0, lambd: float = 0.5) -> Tensor:
  return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)
def Gelu(ctx: NodeContext, x: Tensor, approximate: str = "none") -> Tensor: return x.gelu(approximate).cast(x.dtype)
def Mish(ctx: NodeContext, x: Tensor) -> Tensor: return (x * _softplus(x).tanh()).cast(x.dtype)
def PRelu(ctx: NodeContext, x: Tensor, slope: Tensor) -> Tensor: return (x < 0).where(x * slope, x).cast(x.dtype)
def Swish(ctx: NodeContext, x: Tensor, alpha: float = 1.0) -> Tensor: return (x * (x * alpha).sigmoid()).cast(x.dtype)
def _softplus(x: Tensor) -> Tensor: return x.maximum(0) + ((-x.abs()).exp() + 1).log()
def Softplus(ctx: NodeContext, x: Tensor) -> Tensor: return _softplus(x).cast(x.dtype)

def coerce2d(f: Callable[[Tensor, int], Tensor]) -> Callable[..., Tensor]:
  """Softmax-like ops: before opset 13 the input is seen as 2-d (dims before axis, dims from axis) and axis defaults
  to 1; from 13 on the op runs along one axis, default -1."""
  def op(ctx: NodeContext, x: Tensor, axis: int | None = None) -> Tensor:
    if ctx.opset >= 13: return f(x, axis_of(-1 if axis is None else axis, x.ndim))
    a = axis_of(1 if axis is None else axis, x.ndim)
    lead = 1
    for s in x.shape[:a]: lead *= s
    return f(x.reshape(lead, -1) if x.numel() else x.reshape(lead, x.numel() // max(lead, 1)), 1).reshape(x.shape)
  return op

def hardmax(x: Tensor, axis: int) -> Tensor:
  n = x.shape[axis]
  idx = x.argmax(axis, keepdim=True)
  shape = [1] * x.ndim
  shape[axis] = n
  return (Tensor.arange(n, device=x.device).reshape(shape) == idx).cast(x.dtype)

# ------------------------------------------------------------ casts
def Cast(ctx: NodeContext, x: Tensor, to: int = 0, saturate: int = 1, round_mode: str = "up") -> Tensor:
  return _cast(x, to, bool(saturate), round_mode)

def _cast(x: Tensor, to: int, saturate: bool, round_mode: str = "up") -> Tensor:
  # an emulated value holds its exact value in a wider dtype: casting from it is casting from that dtype
  if not types.supported(to): raise NotImplementedError(f"casting to ONNX type {types.type_name(to)} is not supported")
  if to in types.EMULATED: return types.round_to_type(x, to, saturate, round_mode)
  dt = types.to_dtype(to)
  if x.dtype.is_float and dt.is_int and not dt.is_bool:
    # float -> int truncates (C); NaN and out-of-range values are undefined in ONNX: keep them from trapping
    return x.trunc().cast(dt)
  return x.cast(dt)

def CastLike(ctx: NodeContext, x: Tensor, like: Tensor, saturate: int = 1, round_mode: str = "up") -> Tensor:
  to = ctx.in_type(1) or types.ONNX_OF.get(like.dtype)
  if to is None: raise NotImplementedError(f"cannot tell the ONNX type of the target ({like.dtype})")
  return _cast(x, to, bool(saturate), round_mode)

def BitCast(ctx: NodeContext, x: Tensor, to: int = 0) -> Tensor:
  dt = types.to_dtype(to, "BitCast")
  if to in types.EMULATED: raise NotImplementedError(f"BitCast to {types.type_name(to)} is not supported")
  if dt == dtypes.bool: return x.bitcast(dtypes.uint8).cast(dtypes.bool)
  if x.dtype == dtypes.bool: return x.cast(dtypes.uint8).bitcast(dt)
  return x.bitcast(dt)

# ------------------------------------------------------------ reductions
_IDENTITY = {"sum": 0, "prod": 1, "max": -math.inf, "min": math.inf}

def _reduce_axes(ctx: NodeContext, x: Tensor, axes_in: Tensor | None, axes_attr: Any, noop: int) -> list[int] | None:
  """The axes to reduce (None: all), from the input (new opsets) or the attribute (old ones); [] means no-op."""
  axes = ints(axes_in, "axes") if axes_in is not None else (list(axes_attr) if axes_attr is not None else None)
  if not axes: return [] if noop else None
  return axes_of(axes, x.ndim)

def reduce(kind: str) -> Callable[..., Tensor]:
  def op(ctx: NodeContext, x: Tensor, axes: Tensor | tuple | None = None, keepdims: int = 1, noop_with_empty_axes: int = 0) -> Tensor:
    attr_axes = None
    if isinstance(axes, tuple): attr_axes, axes = axes, None   # old opsets: axes is an attribute
    ax = _reduce_axes(ctx, x, axes, attr_axes, noop_with_empty_axes)
    if ax == []: return _REDUCE_NOOP[kind](x)
    ax = list(range(x.ndim)) if ax is None else ax
    return _REDUCERS[kind](x, tuple(ax), bool(keepdims))
  return op

def _empty_reduce(x: Tensor, ax: tuple, kd: bool, value: Any, dtype: Any = None) -> Tensor:
  shape = [1 if i in ax else s for i, s in enumerate(x.shape)] if kd else [s for i, s in enumerate(x.shape) if i not in ax]
  dt = dtype or x.dtype
  if dt.is_int and isinstance(value, float) and math.isinf(value): value = dt.max if value > 0 else dt.min
  return Tensor.full(tuple(shape), value, dtype=dt, device=x.device)

def _is_empty(x: Tensor, ax: tuple) -> bool: return any(x.shape[a] == 0 for a in ax)

def _rmax(x: Tensor, ax: tuple, kd: bool) -> Tensor:
  if _is_empty(x, ax): return _empty_reduce(x, ax, kd, False if x.dtype.is_bool else -math.inf)
  return x.any(ax, keepdim=kd) if x.dtype.is_bool else x.amax(ax, keepdim=kd)
def _rmin(x: Tensor, ax: tuple, kd: bool) -> Tensor:
  if _is_empty(x, ax): return _empty_reduce(x, ax, kd, True if x.dtype.is_bool else math.inf)
  return x.all(ax, keepdim=kd) if x.dtype.is_bool else x.amin(ax, keepdim=kd)
def _rsum(x: Tensor, ax: tuple, kd: bool) -> Tensor: return x.sum(ax, keepdim=kd, dtype=x.dtype)
def _rprod(x: Tensor, ax: tuple, kd: bool) -> Tensor: return x.prod(ax, keepdim=kd, dtype=x.dtype)
def _rmean(x: Tensor, ax: tuple, kd: bool) -> Tensor:
  if x.dtype.is_int:
    n = 1
    for a in ax: n *= x.shape[a]
    return x.sum(ax, keepdim=kd, dtype=dtypes.int64).div(n, rounding_mode="trunc").cast(x.dtype)
  return x.mean(ax, keepdim=kd)
def _rl1(x: Tensor, ax: tuple, kd: bool) -> Tensor: return x.abs().sum(ax, keepdim=kd, dtype=x.dtype)
def _rl2(x: Tensor, ax: tuple, kd: bool) -> Tensor:
  s = (x * x).sum(ax, keepdim=kd, dtype=x.dtype)
  return s.sqrt().cast(x.dtype) if x.dtype.is_int else s.sqrt()
def _rlogsum(x: Tensor, ax: tuple, kd: bool) -> Tensor: return x.sum(ax, keepdim=kd).log()
def _rlogsumexp(x: Tensor, ax: tuple, kd: bool) -> Tensor:
  if _is_empty(x, ax): return _empty_reduce(x, ax, kd, -math.inf)
  m = x.amax(ax, keepdim=True)
  m = m.isinf().where(0, m)
  r = (x - m).exp().sum(ax, keepdim=True).log() + m
  return r if kd else r.squeeze(ax)
def _rsumsq(x: Tensor, ax: tuple, kd: bool) -> Tensor: return (x * x).sum(ax, keepdim=kd, dtype=x.dtype)

_REDUCERS: dict[str, Callable[[Tensor, tuple, bool], Tensor]] = {
  "max": _rmax, "min": _rmin, "sum": _rsum, "prod": _rprod, "mean": _rmean, "l1": _rl1, "l2": _rl2, "logsum": _rlogsum,
  "logsumexp": _rlogsumexp, "sumsquare": _rsumsq}
# reducing over no axes (noop_with_empty_axes=1): the elementwise part alone
_REDUCE_NOOP: dict[str, Callable[[Tensor], Tensor]] = {
  "max": lambda x: x, "min": lambda x: x, "sum": lambda x: x, "prod": lambda x: x, "mean": lambda x: x, "l1": lambda x: x.abs(),
  "l2": lambda x: (x * x).sqrt() if x.dtype.is_float else x.abs(), "logsum": lambda x: x.log(), "logsumexp": lambda x: x,
  "sumsquare": lambda x: x * x}

def arg(kind: str) -> Callable[..., Tensor]:
  def op(ctx: NodeContext, x: Tensor, axis: int = 0, keepdims: int = 1, select_last_index: int = 0) -> Tensor:
    a = axis_of(axis, x.ndim)
    y = x.flip(a) if select_last_index else x
    if x.dtype.is_bool: y = y.cast(dtypes.int32)
    i = (y.argmax if kind == "max" else y.argmin)(a, keepdim=bool(keepdims)).cast(dtypes.int64)
    return (x.shape[a] - 1 - i) if select_last_index else i
  return op

# ------------------------------------------------------------ matrix products
def MatMul(ctx: NodeContext, a: Tensor, b: Tensor) -> Tensor: return a.matmul(b)

def Gemm(ctx: NodeContext, a: Tensor, b: Tensor, c: Tensor | None = None, alpha: float = 1.0, beta: float = 1.0, transA: int = 0,
         transB: int = 0) -> Tensor:
  a = a.T if transA else a
  b = b.T if transB else b
  y = a.matmul(b)
  if alpha != 1.0: y = y * alpha
  if c is not None: y = y + (c * beta if beta != 1.0 else c)
  return y.cast(a.dtype) if y.dtype != a.dtype else y

def _zp(x: Tensor, zp: Tensor | None) -> Tensor:
  x = x.cast(dtypes.int32)
  return x if zp is None else x - zp.cast(dtypes.int32)

def MatMulInteger(ctx: NodeContext, a: Tensor, b: Tensor, a_zero_point: Tensor | None = None, b_zero_point: Tensor | None = None) -> Tensor:
  az = a_zero_point.reshape(-1, 1) if a_zero_point is not None and a_zero_point.ndim == 1 and a_zero_point.shape[0] > 1 else a_zero_point
  return _zp(a, az).matmul(_zp(b, b_zero_point), dtype=dtypes.int32)

def Einsum(ctx: NodeContext, *xs: Tensor, equation: str = "") -> Tensor:
  r = Tensor.einsum(equation.replace(" ", ""), *xs)
  return r.cast(xs[0].dtype) if xs and r.dtype != xs[0].dtype else r

def Det(ctx: NodeContext, x: Tensor) -> Tensor:
  """Determinant by Gaussian elimination with partial pivoting, one step per column (Tensor ops)."""
  n = x.shape[-1]
  if x.ndim < 2 or x.shape[-2] != n: raise ValueError(f"Det needs square matrices, got shape {tuple(x.shape)}")
  a = x.cast(dtypes.float64) if x.dtype != dtypes.float64 else x
  det = Tensor.ones(x.shape[:-2], dtype=a.dtype, device=x.device)
  rows = Tensor.arange(n, device=x.device)
  for k in range(n):
    col = (rows < k).where(-1.0, a[..., :, k].abs())   # rows above k are done: never pick them
    p = col.argmax(-1, keepdim=True)                           # (..., 1)
    is_p, is_k = (rows == p), (rows == k)                       # (..., n)
    rk = (is_k.unsqueeze(-1).where(a, 0)).sum(-2, keepdim=True)   # row k (..., 1, n)
    rp = (is_p.unsqueeze(-1).where(a, 0)).sum(-2, keepdim=True)   # pivot row
    swapped = (p.squeeze(-1) != k)
    a = is_k.unsqueeze(-1).where(rp, is_p.unsqueeze(-1).where(rk, a))   # swap rows k and p
    piv = rp[..., 0, k]
    det = det * swapped.where(-piv, piv)
    safe = (piv == 0).where(1.0, piv)
    f = a[..., :, k] / safe.unsqueeze(-1)
    f = (rows > k).where(f, 0.0)
    a = a - f.unsqueeze(-1) * rp
  return det.cast(x.dtype)

# ------------------------------------------------------------ quantization
def _bcast_param(p: Tensor, x: Tensor, axis: int, block_size: int) -> Tensor:
  """A scale or zero point for x: a scalar, one value per slice along axis, or (blocked) one per block_size slices."""
  if p.ndim == 0 or p.numel() == 1 and p.ndim <= 1: return p.reshape(())
  a = axis_of(axis, x.ndim)
  if block_size:
    p = p.repeat_interleave(block_size, dim=a)
    return p.shrink(tuple((0, x.shape[i]) if i == a else None for i in range(p.ndim)))
  if p.ndim != 1: raise ValueError(f"a per-axis scale must be 1-d, got shape {tuple(p.shape)}")
  shape = [1] * x.ndim
  shape[a] = p.shape[0]
  return p.reshape(shape)

_QRANGE = {types.UINT8: (0, 255), types.INT8: (-128, 127), types.UINT16: (0, 65535), types.INT16: (-32768, 32767),
           types.INT32: (-2**31, 2**31 - 1)}

def QuantizeLinear(ctx: NodeContext, x: Tensor, y_scale: Tensor, y_zero_point: Tensor | None = None, axis: int = 1, saturate: int = 1,
                   block_size: int = 0, output_dtype: int = 0, precision: int = 0) -> Tensor:
  to = output_dtype or (ctx.in_type(2) if y_zero_point is not None else None) or types.UINT8
  if y_zero_point is not None and ctx.in_type(2) is None and not output_dtype: to = types.ONNX_OF.get(y_zero_point.dtype, types.UINT8)
  s = _bcast_param(y_scale, x, axis, block_size)
  calc = dtypes.float32 if x.dtype != dtypes.float64 else x.dtype
  v = x.cast(calc) / s.cast(calc)
  if to in types.EMULATED and not types.EMULATED[to].holder.is_int:
    if y_zero_point is not None: v = v + _bcast_param(y_zero_point, x, axis, block_size).cast(calc)
    return types.round_to_type(v, to, bool(saturate))
  v = v.round_half_even()
  if y_zero_point is not None: v = v + _bcast_param(y_zero_point, x, axis, block_size).cast(calc)
  if to in types.EMULATED: return v.clip(types.EMULATED[to].lo, types.EMULATED[to].hi).cast(types.EMULATED[to].holder)
  lo, hi = _QRANGE.get(to, (None, None))
  if lo is None: raise NotImplementedError(f"QuantizeLinear to {types.type_name(to)} is not supported")
  return v.clip(lo, hi).cast(types.to_dtype(to))

def DequantizeLinear(ctx: NodeContext, x: Tensor, x_scale: Tensor, x_zero_point: Tensor | None = None, axis: int = 1, block_size: int = 0,
                     output_dtype: int = 0) -> Tensor:
  s = _bcast_param(x_scale, x, axis, block_size)
  calc = dtypes.float32 if s.dtype != dtypes.float64 else s.dtype
  v = x.cast(calc)
  if x_zero_point is not None: v = v - _bcast_param(x_zero_point, x, axis, block_size).cast(calc)
  out = v * s.cast(calc)
  dt = types.to_dtype(output_dtype) if output_dtype else s.dtype
  return out.cast(dt)

def DynamicQuantizeLinear(ctx: NodeContext, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
  lo, hi = x.min().minimum(0), x.max().maximum(0)
  scale = (hi - lo) / 255
  zp = (-lo / scale).round_half_even().clip(0, 255)
  y = ((x / scale).round_half_even() + zp).clip(0, 255).cast(dtypes.uint8)
  return y, scale.cast(x.dtype), zp.cast(dtypes.uint8)

def QLinearMatMul(ctx: NodeContext, a: Tensor, a_scale: Tensor, a_zp: Tensor, b: Tensor, b_scale: Tensor, b_zp: Tensor, y_scale: Tensor,
                  y_zp: Tensor) -> Tensor:
  calc = dtypes.float64 if a_scale.dtype == dtypes.float64 else dtypes.float32
  def dq(v: Tensor, s: Tensor, z: Tensor, ax: int) -> Tensor:
    s, z = s.cast(calc), z.cast(calc)
    if s.ndim == 1 and s.shape[0] > 1: s = s.reshape(-1, 1) if ax == -2 else s
    if z.ndim == 1 and z.shape[0] > 1: z = z.reshape(-1, 1) if ax == -2 else z
    return (v.cast(calc) - z) * s
  y = dq(a, a_scale, a_zp, -2).matmul(dq(b, b_scale, b_zp, -1))
  ys, yz = y_scale.cast(calc), y_zp.cast(calc)
  lo, hi = _QRANGE[types.ONNX_OF[y_zp.dtype]]
  return ((y / ys).round_half_even() + yz).clip(lo, hi).cast(y_zp.dtype)
