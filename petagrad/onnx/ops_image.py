"""ONNX image ops: Resize/Upsample, GridSample, AffineGrid, Col2Im and NonMaxSuppression, as Tensor ops.

Resize is separable: along each resized axis the output is a small (out, in) interpolation matrix applied to the
input (nearest: a gather). The matrix is built with Tensor ops from the output coordinates, so it runs where the
model runs.
"""
from __future__ import annotations
import itertools, math
from typing import Callable
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.onnx.common import NodeContext, ints, floats, scalar, axes_of, arange

F64 = dtypes.float64

# ------------------------------------------------------------ Resize
def _src_coords(mode: str, out: int, L: int, scale: float, roi: tuple[float, float] | None, device: str) -> Tensor:
  """The input coordinate (float64) of each output position along one axis."""
  y = arange(out, device, F64)
  ow = scale * L   # the output length as a float (onnx's reference divides by it, not by the rounded length)
  if mode == "align_corners": return y * 0.0 if ow == 1 else y * ((L - 1) / (ow - 1))
  if mode == "asymmetric": return y / scale
  if mode == "tf_crop_and_resize":
    r0, r1 = roi if roi is not None else (0.0, 1.0)
    base = (y * 0.0 + (r1 - r0) * (L - 1) / 2) if ow == 1 else y * ((r1 - r0) * (L - 1) / (ow - 1))
    return base + r0 * (L - 1)
  if mode == "pytorch_half_pixel": return y * 0.0 - 0.5 if ow == 1 else (y + 0.5) / scale - 0.5
  if mode == "half_pixel": return (y + 0.5) / scale - 0.5
  if mode == "half_pixel_symmetric":
    offset = (L / 2) * (1 - out / (scale * L))
    return (y + 0.5) / scale - 0.5 + offset
  raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")

def _cubic_kernel(A: float) -> Callable[[Tensor], Tensor]:
  def k(t: Tensor) -> Tensor:
    x = t.abs()
    near = ((A + 2) * x - (A + 3)) * x * x + 1
    far = ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    return (x <= 1).where(near, (x < 2).where(far, 0.0))
  return k

def _linear_kernel(t: Tensor) -> Tensor: return (1 - t.abs()).maximum(0.0)

def _nearest_index(x: Tensor, nearest_mode: str) -> Tensor:
  f = x.floor()
  r = x - f
  if nearest_mode == "round_prefer_floor": up = r > 0.5
  elif nearest_mode == "round_prefer_ceil": up = r >= 0.5
  elif nearest_mode == "floor": up = r < 0
  elif nearest_mode == "ceil": up = r > 0
  else: raise ValueError(f"unknown nearest_mode {nearest_mode!r}")
  return up.where(f + 1, f).cast(dtypes.int64)

def _resize_axis(x: Tensor, axis: int, out: int, scale: float, roi: tuple[float, float] | None, mode: str, coord: str, nearest_mode: str,
                 cubic_a: float, exclude_outside: int, antialias: int, extrapolation_value: float) -> Tensor:
  L = x.shape[axis]
  xo = _src_coords(coord, out, L, scale, roi, x.device)
  if mode == "nearest":
    idx = _nearest_index(xo, nearest_mode).clip(0, L - 1)
    y = x.index_select(axis, idx) if out else x.shrink(tuple((0, 0) if i == axis else None for i in range(x.ndim)))
  else:
    kernel, support = (_linear_kernel, 1) if mode == "linear" else (_cubic_kernel(cubic_a), 2)
    s = min(scale, 1.0) if antialias else 1.0
    start = math.floor(-support / s) + 1
    n = 2 - 2 * start
    f = xo.floor()
    r = xo - f
    taps = [((f + (start + i)).cast(dtypes.int64), kernel((r * -1 + (start + i)) * s)) for i in range(n)]
    if antialias:
      tot = sum(w for _, w in taps)
      taps = [(p, w / tot) for p, w in taps]
    if exclude_outside:
      taps = [(p, ((p >= 0) & (p < L)).where(w, 0.0)) for p, w in taps]
      tot = sum(w for _, w in taps)
      tot = (tot == 0).where(1.0, tot)
      taps = [(p, w / tot) for p, w in taps]
    cols = arange(L, x.device).reshape(1, L)
    W = sum((p.clip(0, L - 1).reshape(out, 1) == cols).where(w.reshape(out, 1), 0.0) for p, w in taps)   # (out, L)
    xm = x.cast(F64).transpose(axis, -1)
    y = xm.matmul(W.T).transpose(axis, -1)
    if x.dtype.is_int:
      y = y.round_half_even().clip(x.dtype.min, x.dtype.max)
    y = y.cast(x.dtype)
  if coord == "tf_crop_and_resize":
    outside = (xo < 0) | (xo > L - 1)
    shape = [1] * x.ndim
    shape[axis] = out
    y = outside.reshape(shape).where(Tensor(extrapolation_value, dtype=x.dtype, device=x.device), y)
  return y

def Resize(ctx: NodeContext, x: Tensor, roi: Tensor | None = None, scales: Tensor | None = None, sizes: Tensor | None = None,
           antialias: int = 0, axes: tuple | None = None, coordinate_transformation_mode: str = "half_pixel", cubic_coeff_a: float = -0.75,
           exclude_outside: int = 0, extrapolation_value: float = 0.0, keep_aspect_ratio_policy: str = "stretch", mode: str = "nearest",
           nearest_mode: str = "round_prefer_floor") -> Tensor:
  if ctx.opset < 11:   # Resize-10: (X, scales), asymmetric coordinates, nearest rounds down
    scales, roi = roi, None
    coordinate_transformation_mode, nearest_mode = "asymmetric", "floor"
  r = x.ndim
  ax = axes_of(axes, r) if axes is not None else list(range(r))
  sc, sz = floats(scales), ints(sizes)
  roi_v = floats(roi)
  if sz:
    if len(sz) != len(ax): raise ValueError(f"sizes {sz} must have one entry per resized axis ({len(ax)})")
    f = [sz[i] / x.shape[a] for i, a in enumerate(ax)]
    if keep_aspect_ratio_policy != "stretch":
      if keep_aspect_ratio_policy not in ("not_larger", "not_smaller"):
        raise ValueError(f"unknown keep_aspect_ratio_policy {keep_aspect_ratio_policy!r}")
      one = min(f) if keep_aspect_ratio_policy == "not_larger" else max(f)
      f = [one] * len(ax)
      sz = [int(one * x.shape[a] + 0.5) for a in ax]
    outs, facs = sz, f
  elif sc:
    if len(sc) != len(ax): raise ValueError(f"scales {sc} must have one entry per resized axis ({len(ax)})")
    facs, outs = sc, [int(s * x.shape[a]) for s, a in zip(sc, ax)]
  else: raise ValueError("Resize needs scales or sizes")
  rois: dict[int, tuple[float, float]] = {}
  if roi_v:
    n = len(roi_v) // 2
    for i, a in enumerate(ax if n == len(ax) else range(r)):
      rois[a] = (roi_v[i], roi_v[i + n])
  y = x
  for a, o, s in zip(ax, outs, facs):
    ra = rois.get(a)
    if math.isclose(s, 1.0) and o == y.shape[a] and (ra is None or (math.isclose(ra[0], 0.0) and math.isclose(ra[1], 1.0))): continue
    y = _resize_axis(y, a, o, s, ra, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside, antialias,
                     extrapolation_value)
  return y

def Upsample(ctx: NodeContext, x: Tensor, scales: Tensor | None = None, mode: str = "nearest") -> Tensor:
  sc = floats(scales)
  y = x
  for a, s in enumerate(sc):
    if s == 1.0: continue
    y = _resize_axis(y, a, int(s * x.shape[a]), s, None, mode, "asymmetric", "floor", -0.75, 0, 0, 0.0)
  return y

# ------------------------------------------------------------ GridSample / AffineGrid
def _reflect(x: Tensor, lo: float, hi: float) -> Tensor:
  """Reflect x back into [lo, hi] off the near border, as often as it takes (GridSample's reflection padding)."""
  rng = hi - lo
  if rng <= 0: return x * 0 + lo
  def fold(d: Tensor) -> tuple[Tensor, Tensor]:   # d >= 0: how far past the border; (remainder, whether the bounces are even)
    n = (d / rng).trunc()
    return d - n * rng, (n - (n / 2).trunc() * 2) == 0
  rb, eb = fold(lo - x)
  ra, ea = fold(x - hi)
  return (x < lo).where(eb.where(rb + lo, -rb + hi), (x > hi).where(ea.where(-ra + hi, ra + lo), x))

def _grid_taps(c: Tensor, L: int, mode: str, padding_mode: str, align_corners: int) -> list[tuple[Tensor, Tensor, Tensor | None]]:
  """Per-dim taps of GridSample: (index, weight, valid) for a coordinate tensor c (normalized, in [-1, 1])."""
  x = (c + 1) / 2 * (L - 1) if align_corners else ((c + 1) * L - 1) / 2
  lo, hi = (0.0, L - 1.0) if align_corners else (-0.5, L - 0.5)
  if mode == "nearest": x = x.round_half_even()
  if padding_mode == "border": x = ((x < lo) | (x > hi)).where(x.clip(0, L - 1), x)
  elif padding_mode == "reflection": x = _reflect(x, lo, hi)
  if mode == "nearest": offs, f, ws = [0], x, [None]
  else:
    f = x.floor()
    t = x - f
    if mode in ("linear", "bilinear"): offs, ws = [0, 1], [1 - t, t]
    else:
      A = -0.75
      k = _cubic_kernel(A)
      offs, ws = [-1, 0, 1, 2], [k(t + 1), k(t), k(1 - t), k(2 - t)]
  taps = []
  for o, w in zip(offs, ws):
    i = f + o
    if padding_mode == "zeros": valid, idx = (i >= 0) & (i <= L - 1), i.clip(0, L - 1)
    elif padding_mode == "border": valid, idx = None, i.clip(0, L - 1)
    else: valid, idx = None, _reflect(i, lo, hi).trunc().clip(0, L - 1)
    taps.append((idx.cast(dtypes.int64), w if w is not None else Tensor.ones(*i.shape, dtype=c.dtype, device=c.device), valid))
  return taps

def GridSample(ctx: NodeContext, x: Tensor, grid: Tensor, align_corners: int = 0, mode: str = "linear", padding_mode: str = "zeros") -> Tensor:
  if mode not in ("nearest", "linear", "bilinear", "cubic", "bicubic"): raise ValueError(f"unknown mode {mode!r}")
  if padding_mode not in ("zeros", "border", "reflection"): raise ValueError(f"unknown padding_mode {padding_mode!r}")
  N, C, *dims = x.shape
  nd = len(dims)
  out = grid.shape[1:-1]
  g = grid.cast(F64)
  # grid's last dim lists coordinates innermost dim first (x, y, ...)
  per_dim = [_grid_taps(g[..., nd - 1 - k], dims[k], mode, padding_mode, align_corners) for k in range(nd)]
  flat = x.cast(F64).reshape(N, C, -1)
  strides = [math.prod(dims[k + 1:]) for k in range(nd)]
  acc = None
  for combo in itertools.product(*per_dim):
    lin = sum(idx * st for (idx, _, _), st in zip(combo, strides))
    w = math.prod((wt for _, wt, _ in combo), start=1)
    valid = None
    for _, _, v in combo:
      if v is not None: valid = v if valid is None else valid & v
    li = lin.reshape(N, 1, -1).expand(N, C, lin.reshape(N, -1).shape[1])
    val = flat.gather(2, li).reshape(N, C, *out)
    wt = w.reshape(N, 1, *out)
    term = val * wt
    if valid is not None: term = valid.reshape(N, 1, *out).where(term, 0.0)
    acc = term if acc is None else acc + term
  return acc.cast(x.dtype)

def AffineGrid(ctx: NodeContext, theta: Tensor, size: Tensor, align_corners: int = 0) -> Tensor:
  sz = ints(size, "size")
  N, dims = sz[0], sz[2:]
  def base(L: int) -> Tensor:
    i = arange(L, theta.device, theta.dtype)
    if align_corners: return i * (2 / (L - 1)) - 1 if L > 1 else i * 0
    return (i * 2 + 1) / L - 1
  # the base grid (..., nd + 1): coordinates innermost dim first (x, y, z), then 1
  grids = Tensor.meshgrid(*[base(L) for L in dims], indexing="ij")   # each (*dims), in dim order
  parts = [grids[len(dims) - 1 - k] for k in range(len(dims))] + [Tensor.ones(*dims, dtype=theta.dtype, device=theta.device)]
  b = Tensor.stack(*parts, dim=-1).reshape(1, -1, len(dims) + 1)   # (1, P, nd+1)
  out = b.matmul(theta.transpose(1, 2))                              # (N, P, nd)
  return out.reshape(N, *dims, len(dims))

# ------------------------------------------------------------ Col2Im
def Col2Im(ctx: NodeContext, x: Tensor, image_shape: Tensor, block_shape: Tensor, dilations: tuple | None = None, pads: tuple | None = None,
           strides: tuple | None = None) -> Tensor:
  img, blk = ints(image_shape), ints(block_shape)
  n = len(img)
  d = list(dilations) if dilations else [1] * n
  s = list(strides) if strides else [1] * n
  p = list(pads) if pads else [0] * (2 * n)
  full = [L + p[i] + p[i + n] for i, L in enumerate(img)]
  if n == 2: y = x.fold(tuple(full), tuple(blk), dilation=tuple(d), padding=0, stride=tuple(s))
  else:
    # N-d: scatter-add each kernel offset's columns into the padded image
    N, CK, Lc = x.shape
    C = CK // math.prod(blk)
    outs = [(F - (di * (k - 1) + 1)) // si + 1 for F, k, di, si in zip(full, blk, d, s)]
    cols = x.reshape(N, C, *blk, *outs)
    y = Tensor.zeros(N, C, *full, dtype=x.dtype, device=x.device)
    for offs in itertools.product(*[range(k) for k in blk]):
      piece = cols[(slice(None), slice(None), *offs)]
      pads_ = []
      for o, k, di, si, F, On in zip(offs, blk, d, s, full, outs):
        pads_.append((o * di, F - o * di - ((On - 1) * si + 1)))
      if any(si > 1 for si in s):
        for i, si in enumerate(s):
          if si > 1:
            ax = 2 + i
            u = piece.unsqueeze(ax + 1)
            piece = u.pad(tuple((0, si - 1) if a == ax + 1 else (0, 0) for a in range(u.ndim))).reshape(
              *piece.shape[:ax], piece.shape[ax] * si, *piece.shape[ax + 1:])
            piece = piece.shrink(tuple((0, piece.shape[a] - (si - 1)) if a == ax else None for a in range(piece.ndim)))
      y = y + piece.pad(((0, 0), (0, 0)) + tuple(pads_))
  return y.shrink(((0, y.shape[0]), (0, y.shape[1])) + tuple((p[i], p[i] + img[i]) for i in range(n)))

# ------------------------------------------------------------ NonMaxSuppression
def NonMaxSuppression(ctx: NodeContext, boxes: Tensor, scores: Tensor, max_output_boxes_per_class: Tensor | None = None,
                      iou_threshold: Tensor | None = None, score_threshold: Tensor | None = None, center_point_box: int = 0) -> Tensor:
  """Greedy NMS per (batch, class), in Tensor ops: boxes in score order, each kept unless a kept earlier box overlaps
  it by more than iou_threshold. The number of boxes is data dependent: the keep mask is realized to size the output."""
  max_out = int(scalar(max_output_boxes_per_class)) if max_output_boxes_per_class is not None else 0
  iou_t = float(scalar(iou_threshold)) if iou_threshold is not None else 0.0
  B, C, S = scores.shape
  empty = Tensor.zeros(0, 3, dtype=dtypes.int64, device=boxes.device)
  if max_out <= 0 or S == 0: return empty
  b = boxes.cast(dtypes.float32)
  if center_point_box:
    xc, yc, w, h = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    y1, x1, y2, x2 = yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
  else:
    ya, xa, yb, xb = b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    y1, y2, x1, x2 = ya.minimum(yb), ya.maximum(yb), xa.minimum(xb), xa.maximum(xb)
  area = (y2 - y1) * (x2 - x1)                                        # (B, S)
  iy = (y2.unsqueeze(-1).minimum(y2.unsqueeze(-2)) - y1.unsqueeze(-1).maximum(y1.unsqueeze(-2))).maximum(0)
  ix = (x2.unsqueeze(-1).minimum(x2.unsqueeze(-2)) - x1.unsqueeze(-1).maximum(x1.unsqueeze(-2))).maximum(0)
  inter = iy * ix
  union = area.unsqueeze(-1) + area.unsqueeze(-2) - inter
  iou = (union > 0).where(inter / union, 0.0)                         # (B, S, S)
  sc = scores.cast(dtypes.float32)
  order = sc.argsort(-1, descending=True)                             # (B, C, S) stable: ties keep box order
  ssorted = sc.gather(-1, order)
  valid = ssorted > float(scalar(score_threshold)) if score_threshold is not None else Tensor.ones(B, C, S, dtype=dtypes.bool, device=b.device)
  # IoU between boxes in sorted order: (B, C, S, S)
  iou_bc = iou.unsqueeze(1).expand(B, C, S, S)
  rows = iou_bc.gather(2, order.unsqueeze(-1).expand(B, C, S, S))
  iou_s = rows.gather(3, order.unsqueeze(-2).expand(B, C, S, S))
  over = iou_s > iou_t
  keep_cols: list[Tensor] = []
  for i in range(S):
    k = valid[..., i]
    if keep_cols:
      prev = Tensor.stack(*keep_cols, dim=-1)                         # (B, C, i)
      k = k & ~(prev & over[..., i, :i]).any(-1)
    keep_cols.append(k)
  keep = Tensor.stack(*keep_cols, dim=-1)                             # (B, C, S)
  rank = keep.cast(dtypes.int64).cumsum(-1)
  keep = keep & (rank <= max_out)
  sel = keep.nonzero()                                                # (K, 3): batch, class, position in score order
  if sel.shape[0] == 0: return empty
  box = order[sel[:, 0], sel[:, 1], sel[:, 2]]
  return Tensor.stack(sel[:, 0], sel[:, 1], box, dim=1).cast(dtypes.int64)
