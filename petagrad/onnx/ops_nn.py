"""ONNX neural-network ops: convolution, pooling, normalization, dropout and losses, as Tensor ops."""
from __future__ import annotations
import math
from typing import Any, Sequence
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.helpers import ONNX_WINO
from petagrad.engine import jit
from petagrad.mixin.conv import conv_weight_layout, winograd_fits, winograd_weight
from petagrad.onnx.common import NodeContext, ints, scalar, axis_of, axes_of, arange, static_derived

# ------------------------------------------------------------ padding rules shared by conv and pooling
def _pads(auto_pad: str, pads: Sequence[int] | None, L: Sequence[int], k: Sequence[int], s: Sequence[int], d: Sequence[int],
          ceil_mode: int = 0) -> list[tuple[int, int]]:
  """(begin, end) padding per spatial dim from ONNX's auto_pad / pads (pads: all begins, then all ends)."""
  n = len(L)
  if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = []
    for Li, ki, si, di in zip(L, k, s, d):
      total = max((-(-Li // si) - 1) * si + (ki - 1) * di + 1 - Li, 0)
      small, big = total // 2, total - total // 2
      out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
    return out
  if auto_pad == "VALID": return [(0, 0)] * n
  if auto_pad not in ("NOTSET", ""): raise ValueError(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}")
  p = list(pads) if pads else [0] * (2 * n)
  if len(p) != 2 * n: raise ValueError(f"pads {p} must have 2 entries per spatial dim ({n})")
  return [(p[i], p[i + n]) for i in range(n)]

def _spatial(x: Tensor, w_or_k: Sequence[int], strides: Sequence[int] | None, dilations: Sequence[int] | None):
  n = len(w_or_k)
  return list(strides) if strides else [1] * n, list(dilations) if dilations else [1] * n

# ------------------------------------------------------------ convolution
def _winograd() -> bool:
  """Whether a Conv that fits runs as Winograd F(4x4, 3x3) (ONNX_WINO): with 1, inside a TinyJit call only, whose replays
  repay the extra kernels' build and the bigger graph (an eager call rebuilds it every time); 2 always, 0 never."""
  return ONNX_WINO >= 2 or (ONNX_WINO == 1 and bool(jit.jit_active))

def Conv(ctx: NodeContext, x: Tensor, w: Tensor, b: Tensor | None = None, auto_pad: str = "NOTSET", dilations: tuple | None = None,
         group: int = 1, kernel_shape: tuple | None = None, pads: tuple | None = None, strides: tuple | None = None) -> Tensor:
  k = list(w.shape[2:])
  s, d = _spatial(x, k, strides, dilations)
  p = _pads(auto_pad, pads, x.shape[2:], k, s, d)
  # an initializer's weight is laid out for the kernel once, not in every run: for Winograd (a 3x3 convolution that
  # fits, in a TinyJit call or under ONNX_WINO=2) transformed, else stored channels-last
  if _winograd() and winograd_fits(x.shape, w.shape, group, s, d, p, (x.dtype, w.dtype)):
    return x.conv2d(w, b, group, s, d, p, winograd=static_derived(w, "winograd", winograd_weight))
  return x.conv2d(static_derived(w, ("conv_weight", group), lambda t: conv_weight_layout(t, group)), b, group, s, d, p)

def ConvInteger(ctx: NodeContext, x: Tensor, w: Tensor, x_zero_point: Tensor | None = None, w_zero_point: Tensor | None = None,
                auto_pad: str = "NOTSET", dilations: tuple | None = None, group: int = 1, kernel_shape: tuple | None = None,
                pads: tuple | None = None, strides: tuple | None = None) -> Tensor:
  xi = x.cast(dtypes.int32) - (x_zero_point.cast(dtypes.int32) if x_zero_point is not None else 0)
  wz = w_zero_point.cast(dtypes.int32) if w_zero_point is not None else None
  if wz is not None and wz.numel() > 1: wz = wz.reshape(-1, *([1] * (w.ndim - 1)))
  wi = w.cast(dtypes.int32) - (wz if wz is not None else 0)
  k = list(w.shape[2:])
  s, d = _spatial(x, k, strides, dilations)
  p = _pads(auto_pad, pads, x.shape[2:], k, s, d)
  # padding with the zero point: pad the shifted input with zeros
  return xi.conv2d(wi, None, group, s, d, p, dtype=dtypes.int32).cast(dtypes.int32)

def QLinearConv(ctx: NodeContext, x: Tensor, x_scale: Tensor, x_zp: Tensor, w: Tensor, w_scale: Tensor, w_zp: Tensor, y_scale: Tensor,
                y_zp: Tensor, b: Tensor | None = None, auto_pad: str = "NOTSET", dilations: tuple | None = None, group: int = 1,
                kernel_shape: tuple | None = None, pads: tuple | None = None, strides: tuple | None = None) -> Tensor:
  xf = (x.cast(dtypes.float32) - x_zp.cast(dtypes.float32)) * x_scale
  ws, wz = w_scale.cast(dtypes.float32), w_zp.cast(dtypes.float32)
  if ws.numel() > 1: ws = ws.reshape(-1, *([1] * (w.ndim - 1)))
  if wz.numel() > 1: wz = wz.reshape(-1, *([1] * (w.ndim - 1)))
  wf = (w.cast(dtypes.float32) - wz) * ws
  bf = b.cast(dtypes.float32) * (x_scale * w_scale.reshape(-1)) if b is not None else None
  k = list(w.shape[2:])
  s, d = _spatial(x, k, strides, dilations)
  y = xf.conv2d(wf, bf, group, s, d, _pads(auto_pad, pads, x.shape[2:], k, s, d))
  lo, hi = (0, 255) if y_zp.dtype == dtypes.uint8 else (-128, 127)
  return ((y / y_scale).round_half_even() + y_zp.cast(dtypes.float32)).clip(lo, hi).cast(y_zp.dtype)

def ConvTranspose(ctx: NodeContext, x: Tensor, w: Tensor, b: Tensor | None = None, auto_pad: str = "NOTSET", dilations: tuple | None = None,
                  group: int = 1, kernel_shape: tuple | None = None, output_padding: tuple | None = None, output_shape: tuple | None = None,
                  pads: tuple | None = None, strides: tuple | None = None) -> Tensor:
  k = list(w.shape[2:])
  n = len(k)
  s, d = _spatial(x, k, strides, dilations)
  op = list(output_padding) if output_padding else [0] * n
  L = x.shape[2:]
  full = [(Li - 1) * si + (ki - 1) * di + 1 for Li, si, ki, di in zip(L, s, k, d)]
  if output_shape:
    out = list(output_shape)[-n:]
    total = [(Li - 1) * si + opi + (ki - 1) * di + 1 - oi for Li, si, opi, ki, di, oi in zip(L, s, op, k, d, out)]
    pp = [(t // 2, t - t // 2) if auto_pad == "SAME_UPPER" else (t - t // 2, t // 2) for t in total]
  elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
    out = [Li * si for Li, si in zip(L, s)]
    total = [(Li - 1) * si + opi + (ki - 1) * di + 1 - oi for Li, si, opi, ki, di, oi in zip(L, s, op, k, d, out)]
    pp = [(t // 2, t - t // 2) if auto_pad == "SAME_UPPER" else (t - t // 2, t // 2) for t in total]
  else:
    pp = _pads("NOTSET" if auto_pad == "VALID" else auto_pad, pads, L, k, s, d)
    out = [f + opi - pb - pe for f, opi, (pb, pe) in zip(full, op, pp)]
  y = x.conv_transpose2d(w, None, group, s, d, 0)
  y = y.pad(((0, 0), (0, 0)) + tuple((-pb, o - (f - pb)) for (pb, _), o, f in zip(pp, out, full)))
  return y if b is None else y + b.reshape(1, -1, *([1] * n))

# ------------------------------------------------------------ pooling
def _windows(x: Tensor, k: list[int], s: list[int], d: list[int], pads: list[tuple[int, int]], ceil_mode: int, fill: Any):
  """Sliding windows (..., *out, *k) of x padded with `fill`, and the (begin, end) padding actually used (with the
  ceil-mode overhang at the end, which never counts as input)."""
  n = len(k)
  full, over = [], []
  for L, ki, si, di, (pb, pe) in zip(x.shape[-n:], k, s, d, pads):
    ek = (ki - 1) * di + 1
    span = L + pb + pe - ek
    o = (-(-span // si) if ceil_mode else span // si) + 1
    if ceil_mode and (o - 1) * si >= L + pb: o -= 1
    extra = max((o - 1) * si + ek - (L + pb + pe), 0)
    full.append((pb, pe + extra))
    over.append(extra)
  pre = x.ndim - n
  xp = x.pad(((0, 0),) * pre + tuple(full), value=fill)
  # drop what lies after the last window (a negative extra never happens: span // s <= span / s)
  return xp._pool(k, s, d), full, over

def _pool_args(x: Tensor, kernel_shape: tuple, strides: tuple | None, dilations: tuple | None, auto_pad: str, pads: tuple | None):
  k = list(kernel_shape)
  s, d = _spatial(x, k, strides, dilations)
  return k, s, d, _pads(auto_pad, pads, x.shape[2:], k, s, d)

def MaxPool(ctx: NodeContext, x: Tensor, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: tuple | None = None,
            kernel_shape: tuple = (), pads: tuple | None = None, storage_order: int = 0, strides: tuple | None = None):
  k, s, d, p = _pool_args(x, kernel_shape, strides, dilations, auto_pad, pads)
  n = len(k)
  fill = -math.inf if x.dtype.is_float else x.dtype.min
  win, full, _ = _windows(x, k, s, d, p, ceil_mode, fill)
  axes = tuple(range(-n, 0))
  y = win.amax(axes)
  if ctx.n_outputs < 2: return y
  sp = x.shape[2:]
  if storage_order:   # column-major position within the plane
    idx = arange(math.prod(sp), x.device).reshape(tuple(reversed(sp))).permute(*reversed(range(n)))
  else: idx = arange(math.prod(sp), x.device).reshape(sp)
  plane = (arange(x.shape[0] * x.shape[1], x.device) * math.prod(sp)).reshape(x.shape[0], x.shape[1], *([1] * n))
  idx = (idx.reshape(1, 1, *sp) + plane)
  iwin = idx.pad(((0, 0), (0, 0)) + tuple(full), value=-1)._pool(k, s, d)
  big = x.numel()
  hit = win == y.reshape(y.shape + (1,) * n)
  ind = (hit & (iwin >= 0)).where(iwin, big).amin(axes)
  return y, ind.cast(dtypes.int64)

def AveragePool(ctx: NodeContext, x: Tensor, auto_pad: str = "NOTSET", ceil_mode: int = 0, count_include_pad: int = 0,
                dilations: tuple | None = None, kernel_shape: tuple = (), pads: tuple | None = None, strides: tuple | None = None) -> Tensor:
  k, s, d, p = _pool_args(x, kernel_shape, strides, dilations, auto_pad, pads)
  n = len(k)
  axes = tuple(range(-n, 0))
  win, full, over = _windows(x, k, s, d, p, ceil_mode, 0.0)
  sums = win.sum(axes)
  # the divisor: input cells, plus the explicit padding with count_include_pad (never the ceil-mode overhang)
  ones = Tensor.ones(*x.shape[2:], dtype=x.dtype, device=x.device)
  if count_include_pad: ones = ones.pad(tuple(p), value=1.0).pad(tuple((0, o) for o in over))
  else: ones = ones.pad(tuple(pb_pe for pb_pe in full))
  cnt = ones._pool(k, s, d).sum(axes)
  return (sums / cnt).cast(x.dtype)

def LpPool(ctx: NodeContext, x: Tensor, auto_pad: str = "NOTSET", ceil_mode: int = 0, dilations: tuple | None = None, kernel_shape: tuple = (),
           p: int = 2, pads: tuple | None = None, strides: tuple | None = None) -> Tensor:
  k, s, d, pp = _pool_args(x, kernel_shape, strides, dilations, auto_pad, pads)
  win, _, _ = _windows(x, k, s, d, pp, ceil_mode, 0.0)
  return win.abs().pow(p).sum(tuple(range(-len(k), 0))).pow(1.0 / p).cast(x.dtype)

def GlobalAveragePool(ctx: NodeContext, x: Tensor) -> Tensor: return x.mean(tuple(range(2, x.ndim)), keepdim=True)
def GlobalMaxPool(ctx: NodeContext, x: Tensor) -> Tensor: return x.amax(tuple(range(2, x.ndim)), keepdim=True)
def GlobalLpPool(ctx: NodeContext, x: Tensor, p: int = 2) -> Tensor:
  return x.abs().pow(p).sum(tuple(range(2, x.ndim)), keepdim=True).pow(1.0 / p).cast(x.dtype)

def MaxUnpool(ctx: NodeContext, x: Tensor, indices: Tensor, output_shape: Tensor | None = None, kernel_shape: tuple = (),
              pads: tuple | None = None, strides: tuple | None = None) -> Tensor:
  k = list(kernel_shape)
  n = len(k)
  s = list(strides) if strides else [1] * n
  p = _pads("NOTSET", pads, x.shape[2:], k, s, [1] * n)
  inferred = list(x.shape[:2]) + [(L - 1) * si - pb - pe + ki for L, si, (pb, pe), ki in zip(x.shape[2:], s, p, k)]
  flat_i, flat_x = indices.reshape(-1).cast(dtypes.int64), x.reshape(-1)
  y = Tensor.zeros(math.prod(inferred), dtype=x.dtype, device=x.device).scatter(0, flat_i, flat_x).reshape(inferred)
  if output_shape is None: return y
  # a larger output_shape: the unpooled values keep their places, zeros after them (onnx's reference)
  return y.pad(tuple((0, o - i) for o, i in zip(ints(output_shape), inferred)))

# ------------------------------------------------------------ normalization
def BatchNormalization(ctx: NodeContext, x: Tensor, scale: Tensor, b: Tensor, mean: Tensor, var: Tensor, epsilon: float = 1e-5,
                       momentum: float = 0.9, training_mode: int = 0, spatial: int = 1, is_test: int = 0, consumed_inputs: tuple | None = None):
  shape = (1, -1) + (1,) * (x.ndim - 2)
  if training_mode:
    axes = tuple(i for i in range(x.ndim) if i != 1)
    bm = x.mean(axes)
    bv = ((x - bm.reshape(shape)) ** 2).mean(axes)
    y = (x - bm.reshape(shape)) / (bv.reshape(shape) + epsilon).sqrt() * scale.reshape(shape) + b.reshape(shape)
    rm = mean * momentum + bm * (1 - momentum)
    rv = var * momentum + bv * (1 - momentum)
    return y.cast(x.dtype), rm.cast(mean.dtype), rv.cast(var.dtype)
  y = (x - mean.reshape(shape)) / (var.reshape(shape) + epsilon).sqrt() * scale.reshape(shape) + b.reshape(shape)
  return y.cast(x.dtype)

def InstanceNormalization(ctx: NodeContext, x: Tensor, scale: Tensor, b: Tensor, epsilon: float = 1e-5) -> Tensor:
  axes = tuple(range(2, x.ndim))
  m = x.mean(axes, keepdim=True)
  v = ((x - m) ** 2).mean(axes, keepdim=True)
  shape = (1, -1) + (1,) * (x.ndim - 2)
  return ((x - m) / (v + epsilon).sqrt() * scale.reshape(shape) + b.reshape(shape)).cast(x.dtype)

_STASH = {1: dtypes.float32, 11: dtypes.float64, 10: dtypes.float16, 16: dtypes.bfloat16}

def LayerNormalization(ctx: NodeContext, x: Tensor, scale: Tensor, b: Tensor | None = None, axis: int = -1, epsilon: float = 1e-5,
                       stash_type: int = 1):
  a = axis_of(axis, x.ndim)
  axes = tuple(range(a, x.ndim))
  xf = x.cast(_STASH.get(stash_type, dtypes.float32))
  m = xf.mean(axes, keepdim=True)
  v = ((xf - m) ** 2).mean(axes, keepdim=True)
  inv = (v + epsilon).rsqrt()
  y = ((xf - m) * inv).cast(x.dtype) * scale
  if b is not None: y = y + b
  return y.cast(x.dtype), m, inv

def GroupNormalization(ctx: NodeContext, x: Tensor, scale: Tensor, bias: Tensor, epsilon: float = 1e-5, num_groups: int = 0,
                       stash_type: int = 1) -> Tensor:
  n, c = x.shape[:2]
  g = num_groups
  xf = x.cast(_STASH.get(stash_type, dtypes.float32))
  xg = xf.reshape(n, g, -1)
  m = xg.mean(-1, keepdim=True)
  v = ((xg - m) ** 2).mean(-1, keepdim=True)
  y = ((xg - m) / (v + epsilon).sqrt()).reshape(x.shape).cast(x.dtype)
  shape = (1, -1) + (1,) * (x.ndim - 2)
  if ctx.opset < 21:   # scale and bias per group
    sc, bi = scale.repeat_interleave(c // g), bias.repeat_interleave(c // g)
  else: sc, bi = scale, bias
  return (y * sc.reshape(shape) + bi.reshape(shape)).cast(x.dtype)

def RMSNormalization(ctx: NodeContext, x: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5, stash_type: int = 1) -> Tensor:
  a = axis_of(axis, x.ndim)
  axes = tuple(range(a, x.ndim))
  xf = x.cast(_STASH.get(stash_type, dtypes.float32))
  y = xf * ((xf * xf).mean(axes, keepdim=True) + epsilon).rsqrt()
  return (y.cast(x.dtype) * scale).cast(x.dtype)

def LpNormalization(ctx: NodeContext, x: Tensor, axis: int = -1, p: int = 2) -> Tensor:
  a = axis_of(axis, x.ndim)
  nrm = x.abs().sum(a, keepdim=True) if p == 1 else (x * x).sum(a, keepdim=True).sqrt()
  return (nrm == 0).where(0, x / nrm).cast(x.dtype)

def MeanVarianceNormalization(ctx: NodeContext, x: Tensor, axes: tuple = (0, 2, 3)) -> Tensor:
  ax = tuple(axes_of(axes, x.ndim))
  m = x.mean(ax, keepdim=True)
  v = (x * x).mean(ax, keepdim=True) - m * m
  return ((x - m) / (v.sqrt() + 1e-9)).cast(x.dtype)

def LRN(ctx: NodeContext, x: Tensor, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0, size: int = 1) -> Tensor:
  c = x.shape[1]
  lo, hi = (size - 1) // 2, -(-(size - 1) // 2)
  sq = (x * x).pad(((0, 0), (lo, hi)) + ((0, 0),) * (x.ndim - 2))
  sums = sum(sq.shrink(tuple((j, j + c) if i == 1 else None for i in range(x.ndim))) for j in range(size))
  return (x / (bias + (alpha / size) * sums).pow(beta)).cast(x.dtype)

# ------------------------------------------------------------ dropout
def Dropout(ctx: NodeContext, x: Tensor, ratio: Any = None, training_mode: Tensor | None = None, seed: int | None = None,
            is_test: int = 0):
  r = float(scalar(ratio)) if isinstance(ratio, Tensor) else (0.5 if ratio is None else float(ratio))
  train = bool(scalar(training_mode)) if training_mode is not None else False
  if not train or r == 0:
    return (x, Tensor.ones(*x.shape, dtype=dtypes.bool, device=x.device)) if ctx.n_outputs > 1 else x
  if seed is not None: Tensor.manual_seed(seed)
  keep = Tensor.rand(*x.shape, device=x.device) >= r
  y = keep.where(x / (1 - r), 0).cast(x.dtype)
  return (y, keep) if ctx.n_outputs > 1 else y

# ------------------------------------------------------------ losses
def _reduce_loss(loss: Tensor, w: Tensor | None, reduction: str) -> Tensor:
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  if reduction == "mean": return loss.sum() / w.sum() if w is not None else loss.mean()
  raise ValueError(f"reduction must be none, sum or mean, got {reduction!r}")

def _nll(x: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int | None, reduction: str) -> Tensor:
  t = target.cast(dtypes.int64)
  ignored = (t == ignore_index) if ignore_index is not None else None
  safe = ignored.where(0, t) if ignored is not None else t
  picked = x.gather(1, safe.unsqueeze(1)).squeeze(1)
  w = weight.gather(0, safe.reshape(-1)).reshape(safe.shape) if weight is not None else None
  if ignored is not None: w = ignored.where(0, w if w is not None else 1.0).cast(x.dtype)
  loss = -picked * w if w is not None else -picked
  return _reduce_loss(loss, w if (weight is not None or ignore_index is not None) else None, reduction).cast(x.dtype)

def NegativeLogLikelihoodLoss(ctx: NodeContext, x: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int | None = None,
                              reduction: str = "mean") -> Tensor:
  return _nll(x, target, weight, ignore_index, reduction)

def SoftmaxCrossEntropyLoss(ctx: NodeContext, scores: Tensor, labels: Tensor, weights: Tensor | None = None, ignore_index: int | None = None,
                            reduction: str = "mean"):
  lp = scores.log_softmax(1)
  loss = _nll(lp, labels, weights, ignore_index, reduction)
  return (loss, lp) if ctx.n_outputs > 1 else loss
