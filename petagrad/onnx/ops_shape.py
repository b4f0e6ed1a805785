"""ONNX shape, movement, creation and indexing ops (Reshape ... Unique), as Tensor ops."""
from __future__ import annotations
import math
from typing import Any
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.onnx import types
from petagrad.onnx.common import NodeContext, ints, scalar, axis_of, axes_of, arange, broadcast_shape, expand_to, static_ints

INT_MAX = 2**63 - 1

# ------------------------------------------------------------ shapes
def Shape(ctx: NodeContext, x: Tensor, start: int = 0, end: int | None = None) -> Tensor:
  n = x.ndim
  s = max(0, min(n, start + n if start < 0 else start))
  e = n if end is None else max(0, min(n, end + n if end < 0 else end))
  return Tensor(list(x.shape[s:e]) if e > s else [], dtype=dtypes.int64, device=x.device)

def Size(ctx: NodeContext, x: Tensor) -> Tensor: return Tensor(x.numel(), dtype=dtypes.int64, device=x.device)

def _reshape_target(x: Tensor, shape: list[int], allowzero: int) -> list[int]:
  out = [x.shape[i] if v == 0 and not allowzero and i < x.ndim else v for i, v in enumerate(shape)]
  if out.count(-1) > 1: raise ValueError(f"shape {shape} has more than one -1")
  if -1 in out:
    known = math.prod(v for v in out if v != -1)
    if known == 0 or x.numel() % known: raise ValueError(f"cannot reshape {tuple(x.shape)} to {shape}")
    out[out.index(-1)] = x.numel() // known
  return out

def Reshape(ctx: NodeContext, x: Tensor, shape: Tensor | tuple | None = None, allowzero: int = 0) -> Tensor:
  target = list(shape) if isinstance(shape, tuple) else ints(shape, "shape")
  if target is None: raise ValueError("Reshape needs a shape")
  return x.reshape(_reshape_target(x, target, allowzero))

def Flatten(ctx: NodeContext, x: Tensor, axis: int = 1) -> Tensor:
  a = axis + x.ndim if axis < 0 else axis
  if not 0 <= a <= x.ndim: raise ValueError(f"axis {axis} is out of range for {x.ndim} dims")
  return x.reshape(math.prod(x.shape[:a]), math.prod(x.shape[a:]))

def Squeeze(ctx: NodeContext, x: Tensor, axes: Tensor | tuple | None = None) -> Tensor:
  ax = list(axes) if isinstance(axes, tuple) else ints(axes, "axes")
  if not ax: return x.reshape([s for s in x.shape if s != 1])
  ax = axes_of(ax, x.ndim)
  for a in ax:
    if x.shape[a] != 1: raise ValueError(f"cannot squeeze dim {a} of size {x.shape[a]}")
  return x.reshape([s for i, s in enumerate(x.shape) if i not in ax])

def Unsqueeze(ctx: NodeContext, x: Tensor, axes: Tensor | tuple | None = None) -> Tensor:
  ax = list(axes) if isinstance(axes, tuple) else ints(axes, "axes")
  if ax is None: raise ValueError("Unsqueeze needs axes")
  n = x.ndim + len(ax)
  ax = axes_of(ax, n)
  it = iter(x.shape)
  return x.reshape([1 if i in ax else next(it) for i in range(n)])

def Transpose(ctx: NodeContext, x: Tensor, perm: tuple | None = None) -> Tensor:
  return x.permute(*(perm if perm is not None else reversed(range(x.ndim))))

def Concat(ctx: NodeContext, *xs: Tensor, axis: int = 0) -> Tensor:
  xs = tuple(x for x in xs if x is not None)
  a = axis_of(axis, xs[0].ndim)
  nonempty = [x for x in xs if x.shape[a] != 0] or [xs[0]]
  return nonempty[0].cat(*nonempty[1:], dim=a) if len(nonempty) > 1 else nonempty[0]

def Split(ctx: NodeContext, x: Tensor, split: Tensor | tuple | None = None, axis: int = 0, num_outputs: int | None = None) -> list[Tensor]:
  a = axis_of(axis, x.ndim)
  sizes = list(split) if isinstance(split, tuple) else ints(split, "split")
  n = x.shape[a]
  if not sizes:
    k = num_outputs or ctx.n_outputs
    if num_outputs:
      step = -(-n // k)
      sizes = [min(step, n - i * step) for i in range(k)]
    else:
      if n % k: raise ValueError(f"dim {a} of size {n} does not split evenly into {k} outputs")
      sizes = [n // k] * k
  if sum(sizes) != n: raise ValueError(f"split sizes {sizes} do not add up to {n}")
  out, start = [], 0
  for s in sizes:
    out.append(x.shrink(tuple((start, start + s) if i == a else None for i in range(x.ndim))))
    start += s
  return out

def _slice(x: Tensor, starts: list[int], ends: list[int], axes: list[int] | None, steps: list[int] | None) -> Tensor:
  axes = axes_of(axes, x.ndim) if axes is not None else list(range(len(starts)))
  steps = steps or [1] * len(starts)
  idx: list[Any] = [slice(None)] * x.ndim
  for s, e, a, st in zip(starts, ends, axes, steps):
    if st == 0: raise ValueError("slice step cannot be 0")
    n = x.shape[a]
    # ONNX clamps like Python slices, with INT_MAX-style sentinels for "to the end"
    s, e = max(min(s, INT_MAX), -INT_MAX), max(min(e, INT_MAX), -INT_MAX)
    b, f, stp = slice(s, e, st).indices(n)
    idx[a] = slice(b, f if f >= 0 else None, stp)
  return x[tuple(idx)] if x.ndim else x

def Slice(ctx: NodeContext, x: Tensor, starts: Any = None, ends: Any = None, axes: Any = None, steps: Tensor | None = None) -> Tensor:
  if ctx.opset < 10: return _slice(x, list(starts), list(ends), list(axes) if axes is not None else None, None)
  return _slice(x, ints(starts), ints(ends), ints(axes), ints(steps))

def Expand(ctx: NodeContext, x: Tensor, shape: Tensor) -> Tensor:
  return expand_to(x, broadcast_shape(x.shape, ints(shape, "shape")))

def Tile(ctx: NodeContext, x: Tensor, repeats: Tensor) -> Tensor:
  r = ints(repeats, "repeats")
  if len(r) != x.ndim: raise ValueError(f"repeats {r} must have one entry per dim ({x.ndim})")
  return x.repeat(r) if x.ndim else x

_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate", "wrap": "circular"}

def Pad(ctx: NodeContext, x: Tensor, pads: Any = None, constant_value: Tensor | None = None, axes: Tensor | None = None,
        mode: str = "constant", value: float = 0.0, paddings: tuple | None = None) -> Tensor:
  if mode not in _PAD_MODES: raise ValueError(f"mode must be one of {sorted(_PAD_MODES)}, got {mode!r}")
  p = list(pads) if isinstance(pads, tuple) else list(paddings) if paddings is not None and pads is None else ints(pads, "pads")
  ax = axes_of(ints(axes, "axes"), x.ndim) if axes is not None else list(range(x.ndim))
  if len(p) != 2 * len(ax): raise ValueError(f"pads {p} must have 2 entries per padded axis ({len(ax)})")
  pairs: list[tuple[int, int]] = [(0, 0)] * x.ndim
  for i, a in enumerate(ax): pairs[a] = (p[i], p[i + len(ax)])
  if mode != "constant": return x.pad(pairs, mode=_PAD_MODES[mode])
  v = scalar(constant_value) if constant_value is not None else value
  if x.dtype.is_int: v = int(v)
  elif x.dtype.is_bool: v = bool(v)
  return x.pad(pairs, value=v)

def ConstantOfShape(ctx: NodeContext, shape: Tensor, value: Tensor | None = None) -> Tensor:
  s = ints(shape, "shape")
  if value is None: return Tensor.zeros(*s, dtype=dtypes.float32, device=ctx.device) if s else Tensor.zeros((), device=ctx.device)
  return value.reshape(()).reshape((1,) * len(s)).expand(s).contiguous() if s else value.reshape(())

def Constant(ctx: NodeContext, value: Tensor | None = None, value_float: float | None = None, value_floats: tuple | None = None,
             value_int: int | None = None, value_ints: tuple | None = None, value_string: str | None = None,
             value_strings: tuple | None = None, sparse_value: Any = None) -> Tensor:
  if value is not None: return value
  if value_float is not None: return Tensor(value_float, dtype=dtypes.float32, device=ctx.device)
  if value_floats is not None: return Tensor(list(value_floats), dtype=dtypes.float32, device=ctx.device)
  if value_int is not None: return Tensor(value_int, dtype=dtypes.int64, device=ctx.device)
  if value_ints is not None: return Tensor(list(value_ints), dtype=dtypes.int64, device=ctx.device)
  if value_string is not None or value_strings is not None: raise NotImplementedError("string constants are not supported")
  raise NotImplementedError("Constant without a (dense) value is not supported")

def Range(ctx: NodeContext, start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
  s, l, d = scalar(start), scalar(limit), scalar(delta)
  if d == 0: raise ValueError("Range delta cannot be 0")
  n = max(math.ceil((l - s) / d), 0)
  return (Tensor.arange(n, dtype=start.dtype, device=start.device) * delta.reshape(()) + start.reshape(())).cast(start.dtype) if n else \
    Tensor.zeros(0, dtype=start.dtype, device=start.device)

def EyeLike(ctx: NodeContext, x: Tensor, dtype: int | None = None, k: int = 0) -> Tensor:
  if x.ndim != 2: raise ValueError(f"EyeLike needs a 2-d input, got shape {tuple(x.shape)}")
  dt = types.to_dtype(dtype) if dtype is not None else x.dtype
  n, m = x.shape
  return ((arange(n, x.device).reshape(n, 1) + k) == arange(m, x.device).reshape(1, m)).cast(dt)

def Trilu(ctx: NodeContext, x: Tensor, k: Tensor | None = None, upper: int = 1) -> Tensor:
  kk = int(scalar(k)) if k is not None else 0
  return x.triu(kk) if upper else x.tril(kk)

def cumulative(f: str):
  def op(ctx: NodeContext, x: Tensor, axis: Tensor, exclusive: int = 0, reverse: int = 0) -> Tensor:
    a = axis_of(int(scalar(axis)), x.ndim)
    y = x.flip(a) if reverse else x
    if exclusive:
      ident = 0 if f == "sum" else 1
      y = y.pad(tuple((1, -1) if i == a else (0, 0) for i in range(x.ndim)), value=ident) if x.shape[a] else y
    y = y.cumsum(a) if f == "sum" else y.cumprod(a)
    y = y.flip(a) if reverse else y
    return y.cast(x.dtype) if y.dtype != x.dtype else y
  return op

# ------------------------------------------------------------ indexing
def _norm_index(idx: Tensor, n: int) -> Tensor:
  idx = idx.cast(dtypes.int64)
  return (idx < 0).where(idx + n, idx)

def Gather(ctx: NodeContext, x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
  a = axis_of(axis, x.ndim)
  n = x.shape[a]
  # constant indices that pick one run of consecutive positions (an exported attention's q, k, v out of one projection)
  # are a view, not a gather kernel
  v = static_ints(indices, 64)
  v = [i + n if i < 0 else i for i in v] if v and all(-n <= i < n for i in v) else None
  if v and v == list(range(v[0], v[0] + len(v))): out = x.shrink(tuple((v[0], v[0] + len(v)) if i == a else None for i in range(x.ndim)))
  else:
    flat = _norm_index(indices, n).reshape(-1)
    out = x.index_select(a, flat) if flat.shape[0] else x.shrink(tuple((0, 0) if i == a else None for i in range(x.ndim)))
  return out.reshape(x.shape[:a] + tuple(indices.shape) + x.shape[a + 1:])

def GatherElements(ctx: NodeContext, x: Tensor, indices: Tensor, axis: int = 0) -> Tensor:
  a = axis_of(axis, x.ndim)
  return x.gather(a, _norm_index(indices, x.shape[a]))

def _nd_linear(data_shape: tuple, indices: Tensor, b: int) -> tuple[Tensor, int]:
  """ScatterND/GatherND: indices (..., k) into data dims b..b+k -> one linear index per row (and k)."""
  k = indices.shape[-1]
  dims = data_shape[b:b + k]
  lin = None
  for j, n in enumerate(dims):
    ij = _norm_index(indices[..., j], n)
    lin = ij if lin is None else lin * n + ij
  if lin is None: lin = Tensor.zeros(indices.shape[:-1], dtype=dtypes.int64, device=indices.device)
  return lin, k

def GatherND(ctx: NodeContext, x: Tensor, indices: Tensor, batch_dims: int = 0) -> Tensor:
  b = batch_dims
  lin, k = _nd_linear(x.shape, indices, b)                       # (B..., M...)
  B, tail = x.shape[:b], x.shape[b + k:]
  Bp, M = math.prod(B), lin.shape[b:]
  xr = x.reshape(Bp, math.prod(x.shape[b:b + k]), *tail)
  li = lin.reshape(Bp, math.prod(M))
  li = li.reshape(*li.shape, *([1] * len(tail))).expand(Bp, li.shape[1], *tail)
  return xr.gather(1, li).reshape(*B, *M, *tail)

_SCATTER_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}

def ScatterElements(ctx: NodeContext, x: Tensor, indices: Tensor, updates: Tensor, axis: int = 0, reduction: str = "none") -> Tensor:
  a = axis_of(axis, x.ndim)
  idx = _norm_index(indices, x.shape[a])
  if reduction == "none": return x.scatter(a, idx, updates)
  if reduction not in _SCATTER_REDUCE: raise ValueError(f"reduction must be none, add, mul, max or min, got {reduction!r}")
  return x.scatter_reduce(a, idx, updates, _SCATTER_REDUCE[reduction], include_self=True)

def ScatterND(ctx: NodeContext, x: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
  lin, k = _nd_linear(x.shape, indices, 0)
  tail = x.shape[k:]
  xr = x.reshape(math.prod(x.shape[:k]), *tail)
  li = lin.reshape(-1)
  m = li.shape[0]
  li = li.reshape(m, *([1] * len(tail))).expand(m, *tail)
  up = updates.reshape(m, *tail)
  if reduction == "none": out = xr.scatter(0, li, up)
  elif reduction in _SCATTER_REDUCE: out = xr.scatter_reduce(0, li, up, _SCATTER_REDUCE[reduction], include_self=True)
  else: raise ValueError(f"reduction must be none, add, mul, max or min, got {reduction!r}")
  return out.reshape(x.shape)

def OneHot(ctx: NodeContext, indices: Tensor, depth: Tensor, values: Tensor, axis: int = -1) -> Tensor:
  d = int(scalar(depth))
  n = indices.ndim + 1
  a = axis_of(axis, n)
  idx = indices.cast(dtypes.int64) if not indices.dtype.is_float else indices.trunc().cast(dtypes.int64)
  idx = (idx < 0).where(idx + d, idx).unsqueeze(a)
  shape = [1] * n
  shape[a] = d
  hot = idx == arange(d, indices.device).reshape(shape)
  return hot.where(values[1], values[0])

def NonZero(ctx: NodeContext, x: Tensor) -> Tensor:
  if x.ndim == 0: x = x.reshape(1)
  nz = x.nonzero()
  return nz.T.cast(dtypes.int64) if nz.shape[0] else Tensor.zeros(x.ndim, 0, dtype=dtypes.int64, device=x.device)

def Compress(ctx: NodeContext, x: Tensor, condition: Tensor, axis: int | None = None) -> Tensor:
  if axis is None: x, a = x.reshape(-1), 0
  else: a = axis_of(axis, x.ndim)
  c = condition.cast(dtypes.bool).reshape(-1)
  n = min(c.shape[0], x.shape[a])
  keep = c[:n].nonzero().reshape(-1)
  if keep.shape[0] == 0: return x.shrink(tuple((0, 0) if i == a else None for i in range(x.ndim)))
  return x.index_select(a, keep)

def TopK(ctx: NodeContext, x: Tensor, k: Any, axis: int = -1, largest: int = 1, sorted: int = 1) -> tuple[Tensor, Tensor]:
  kk = int(scalar(k)) if isinstance(k, Tensor) else int(k)
  a = axis_of(axis, x.ndim)
  v, i = x.topk(kk, a, largest=bool(largest))
  return v, i.cast(dtypes.int64)

def TopK_v1(ctx: NodeContext, x: Tensor, axis: int = -1, k: int = 0) -> tuple[Tensor, Tensor]: return TopK(ctx, x, k, axis)

def Unique(ctx: NodeContext, x: Tensor, axis: int | None = None, sorted: int = 1) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  if axis is None: xs, a = x.reshape(-1), 0
  else: xs, a = x, axis_of(axis, x.ndim)
  y, inv, counts = xs.unique(sorted=True, return_inverse=True, return_counts=True, dim=None if axis is None else a)
  n, k = xs.shape[a], y.shape[a]
  inv = inv.reshape(-1).cast(dtypes.int64)
  # first occurrence of each unique value
  first = (inv.reshape(1, n) == arange(k, x.device).reshape(k, 1)).where(arange(n, x.device).reshape(1, n), n).amin(1)
  if not sorted:
    order = first.argsort()
    rank = order.argsort()
    y = y.index_select(a, order)
    counts, first, inv = counts.index_select(0, order), first.index_select(0, order), rank.index_select(0, inv)
  return y, first.cast(dtypes.int64), inv.cast(dtypes.int64), counts.cast(dtypes.int64)

def ReverseSequence(ctx: NodeContext, x: Tensor, sequence_lens: Tensor, batch_axis: int = 1, time_axis: int = 0) -> Tensor:
  ba, ta = axis_of(batch_axis, x.ndim), axis_of(time_axis, x.ndim)
  T, B = x.shape[ta], x.shape[ba]
  t = arange(T, x.device).reshape(T, 1)
  lens = sequence_lens.cast(dtypes.int64).reshape(1, B)
  src = (t < lens).where(lens - 1 - t, t)                        # (T, B)
  shape = [1] * x.ndim
  shape[ta], shape[ba] = T, B
  order = [ta, ba] if ta < ba else [ba, ta]
  src = src if order[0] == ta else src.T
  src = src.reshape([s if i in (ta, ba) else 1 for i, s in enumerate(shape)]).expand(x.shape)
  return x.gather(ta, src)

def DepthToSpace(ctx: NodeContext, x: Tensor, blocksize: int = 0, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  bs = blocksize
  if mode == "DCR": y = x.reshape(b, bs, bs, c // (bs * bs), h, w).permute(0, 3, 4, 1, 5, 2)
  else: y = x.reshape(b, c // (bs * bs), bs, bs, h, w).permute(0, 1, 4, 2, 5, 3)
  return y.reshape(b, c // (bs * bs), h * bs, w * bs)

def SpaceToDepth(ctx: NodeContext, x: Tensor, blocksize: int = 0, mode: str = "DCR") -> Tensor:
  b, c, h, w = x.shape
  bs = blocksize
  y = x.reshape(b, c, h // bs, bs, w // bs, bs)
  y = y.permute(0, 3, 5, 1, 2, 4) if mode == "DCR" else y.permute(0, 1, 3, 5, 2, 4)
  return y.reshape(b, c * bs * bs, h // bs, w // bs)

def CenterCropPad(ctx: NodeContext, x: Tensor, shape: Tensor, axes: tuple | None = None) -> Tensor:
  s = ints(shape, "shape")
  ax = axes_of(axes, x.ndim) if axes is not None else list(range(x.ndim))
  pairs: list[tuple[int, int]] = [(0, 0)] * x.ndim
  for a, want in zip(ax, s):
    have = x.shape[a]
    if want >= have:
      d = want - have
      pairs[a] = (d // 2, d - d // 2)
    else:
      d = have - want
      pairs[a] = (-(d // 2), -(d - d // 2))
  return x.pad(pairs)
