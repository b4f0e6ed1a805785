"""Pooling: max/avg pooling (1d/2d/3d, ceil mode, indices), max unpooling, adaptive pooling, and interpolate.
Each is a reduce over the sliding windows of conv.py's `_pool`, or a multiply-sum with a small index matrix."""
from __future__ import annotations
import math
from typing import Any
from petagrad.dtype import dtypes
from petagrad.helpers import prod
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import _fail, _is_int, _tuple, _resolve_pads, _check_tensor

class PoolMixin(TensorMixin):
  __slots__ = ()

  # ------------------------------------------------------------ max and average pooling
  def _pool_setup(self, op: str, kernel_size, stride, dilation, padding, ceil_mode: bool, n_default: int):
    """Shared argument handling for max/avg pooling: (k, s, d, explicit pads, pads with the ceil-mode extra)."""
    n = len(kernel_size) if isinstance(kernel_size, (tuple, list)) else n_default
    k_ = _tuple(op, "kernel_size", kernel_size, n, self)
    s_ = k_ if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) else _tuple(op, "stride", stride, n, self)
    d_ = _tuple(op, "dilation", dilation, n, self)
    if self.ndim < n + 1:
      raise _fail(ValueError, op, f"a {n}-d pool needs an input with at least {n + 1} dims (C, *spatial), got shape {self.shape}", self)
    pads = _resolve_pads(op, padding, n, self)
    full, outs = [], []
    for L, k, s, d, (pb, pa) in zip(self.shape[-n:], k_, s_, d_, pads):
      ek = d * (k - 1) + 1
      if pb < 0 or pa < 0 or pb > ek // 2 or pa > ek // 2:
        raise _fail(ValueError, op,
                    f"pad should be at most half of effective kernel size, but got padding={padding!r}, kernel_size={k_} and dilation={d_}", self)
      span = L + pb + pa - ek
      if span < 0:
        raise _fail(ValueError, op, f"kernel size {k_} (dilation {d_}) is larger than the padded input {self.shape[-n:]} + padding {padding!r}", self)
      o = (-(-span // s) if ceil_mode else span // s) + 1
      if ceil_mode and (o - 1) * s >= L + pb: o -= 1   # the last window must start inside the input or the left padding
      full.append((pb, (o - 1) * s + ek - L - pb))
      outs.append(o)
    return k_, s_, d_, pads, full
  # pooling methods take tinygrad's argument order (kernel_size, stride, dilation, padding, ...); torch's functional
  # order is (kernel_size, stride, padding, dilation, ...), so pass padding/dilation by keyword when porting torch code
  def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False, return_indices: bool = False):
    """Max pooling over the last len(kernel_size) dims (2 for an int), like torch.nn.functional.max_pool2d.
    return_indices=True also returns the flat (per-plane) index of each max (dtypes.default_int: torch's int64, or
    tinygrad's int32 under DEFAULT_INT=int32), for max_unpool2d.
    Positional arguments are in tinygrad's order (kernel_size, stride, dilation, padding, ceil_mode, return_indices);
    torch's F.max_pool2d order is (kernel_size, stride, padding, dilation, ...): pass padding= and dilation= by keyword.

    >>> from petagrad import Tensor
    >>> Tensor.arange(16).reshape(1, 4, 4).max_pool2d(2).tolist()
    [[[5, 7], [13, 15]]]
    """
    return self._max_pool("max_pool2d", kernel_size, stride, dilation, padding, ceil_mode, return_indices, 2)
  def max_pool1d(self, kernel_size=2, stride=None, dilation=1, padding=0, ceil_mode: bool = False, return_indices: bool = False):
    return self._max_pool("max_pool1d", kernel_size, stride, dilation, padding, ceil_mode, return_indices, 1)
  def max_pool3d(self, kernel_size=(2, 2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False, return_indices: bool = False):
    return self._max_pool("max_pool3d", kernel_size, stride, dilation, padding, ceil_mode, return_indices, 3)
  def _max_pool(self, op, kernel_size, stride, dilation, padding, ceil_mode, return_indices, n_default):
    k_, s_, d_, _, full = self._pool_setup(op, kernel_size, stride, dilation, padding, ceil_mode, n_default)
    n, pre = len(k_), self.ndim - len(k_)
    x = self.pad(((0, 0),) * pre + tuple(full), value=self.dtype.min)._pool(k_, s_, d_)
    axes = tuple(range(-n, 0))
    out = x.amax(axes)
    if not return_indices: return out
    sp = self.shape[pre:]
    T = type(self)
    idx = T.arange(prod(sp), device=self.device).reshape(sp).pad(tuple(full), value=-1)._pool(k_, s_, d_)   # (*O, *K)
    big = prod(sp)
    hit = x == out.reshape(out.shape + (1,) * n)
    # first occurrence of the max (the smallest input index) like torch
    ind = hit.where(idx, big).amin(axes).cast(dtypes.default_int)
    return out, ind
  def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> Tensor:
    """Average pooling over the last len(kernel_size) dims (2 for an int), like torch.nn.functional.avg_pool2d
    (dilation is an extra, as in tinygrad). Integer inputs give integers (truncated), like torch."""
    return self._avg_pool("avg_pool2d", kernel_size, stride, dilation, padding, ceil_mode, count_include_pad, divisor_override, 2)
  def avg_pool1d(self, kernel_size=2, stride=None, dilation=1, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> Tensor:
    return self._avg_pool("avg_pool1d", kernel_size, stride, dilation, padding, ceil_mode, count_include_pad, divisor_override, 1)
  def avg_pool3d(self, kernel_size=(2, 2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override: int | None = None) -> Tensor:
    return self._avg_pool("avg_pool3d", kernel_size, stride, dilation, padding, ceil_mode, count_include_pad, divisor_override, 3)
  def _avg_pool(self, op, kernel_size, stride, dilation, padding, ceil_mode, count_include_pad, divisor_override, n_default) -> Tensor:
    k_, s_, d_, pads, full = self._pool_setup(op, kernel_size, stride, dilation, padding, ceil_mode, n_default)
    n, pre = len(k_), self.ndim - len(k_)
    x = self if self.dtype.is_int else self._float(op)
    axes = tuple(range(-n, 0))
    sums = x.pad(((0, 0),) * pre + tuple(full))._pool(k_, s_, d_).sum(axes)
    def div(a, b): return a.div(b, rounding_mode="trunc").cast(x.dtype) if x.dtype.is_int else a / b
    if divisor_override is not None:
      if not _is_int(divisor_override) or divisor_override == 0:
        raise _fail(ValueError, op, f"divisor_override must be a nonzero int, got {divisor_override!r}", self)
      return div(sums, divisor_override)
    # the divisor of each window, per dim (counted here, in Python: no extra kernel), multiplied over the dims.
    # count_include_pad: the explicit padding counts, the ceil-mode overhang does not (torch)
    T = type(self)
    cdt = dtypes.int32 if x.dtype.is_int else x.dtype
    cnt: Any = 1
    for i, (L, k, s, d, (pb, pa), O) in enumerate(zip(self.shape[pre:], k_, s_, d_, pads, sums.shape[pre:])):
      lo, hi = (-pb, L + pa) if count_include_pad else (0, L)
      c = [sum(1 for kk in range(k) if lo <= o * s - pb + kk * d < hi) for o in range(O)]
      if all(v == c[0] for v in c): cnt = cnt * c[0]
      else: cnt = T(c, dtype=cdt, device=self.device).reshape((O,) + (1,) * (n - 1 - i)) * cnt
    return div(sums, cnt)
  def max_unpool2d(self, indices: Tensor, kernel_size=(2, 2), stride=None, dilation=1, padding=0, output_size=None) -> Tensor:
    """Inverse of max_pool2d(return_indices=True), like torch.nn.functional.max_unpool2d (tinygrad's argument order):
    puts every value at its index in a zero plane (composed as a one-hot compare + sum). output_size may hold the
    spatial dims or the whole shape."""
    return self._max_unpool("max_unpool2d", indices, kernel_size, stride, dilation, padding, output_size, 2)
  def max_unpool1d(self, indices: Tensor, kernel_size=2, stride=None, dilation=1, padding=0, output_size=None) -> Tensor:
    return self._max_unpool("max_unpool1d", indices, kernel_size, stride, dilation, padding, output_size, 1)
  def max_unpool3d(self, indices: Tensor, kernel_size=(2, 2, 2), stride=None, dilation=1, padding=0, output_size=None) -> Tensor:
    return self._max_unpool("max_unpool3d", indices, kernel_size, stride, dilation, padding, output_size, 3)
  def _max_unpool(self, op, indices, kernel_size, stride, dilation, padding, output_size, n_default) -> Tensor:
    _check_tensor(op, "indices", indices, self)
    n = len(kernel_size) if isinstance(kernel_size, (tuple, list)) else n_default
    k_ = _tuple(op, "kernel_size", kernel_size, n, self)
    s_ = k_ if stride is None else _tuple(op, "stride", stride, n, self)
    d_ = _tuple(op, "dilation", dilation, n, self)
    pads = _resolve_pads(op, padding, n, self)
    if indices.shape != self.shape:
      raise _fail(ValueError, op, f"indices shape {indices.shape} must match the input shape {self.shape}", self, indices)
    if indices.dtype.is_float or indices.dtype.is_bool:
      raise _fail(TypeError, op, f"indices must be an integer tensor, got {indices.dtype}", self, indices)
    if self.ndim < n + 1: raise _fail(ValueError, op, f"needs an input with at least {n + 1} dims, got shape {self.shape}", self)
    pre = self.ndim - n
    if output_size is None: out = tuple((L - 1) * s - pb - pa + d * (k - 1) + 1 for L, s, (pb, pa), k, d in zip(self.shape[pre:], s_, pads, k_, d_))
    else:
      out = tuple(output_size)[-n:]
      if len(out) != n or not all(_is_int(v) and v > 0 for v in out): raise _fail(ValueError, op, f"bad output_size {output_size!r}", self)
    P, M = prod(self.shape[pre:]), prod(out)
    T = type(self)
    hot = indices.reshape(*self.shape[:pre], P, 1) == T.arange(M, device=self.device).cast(indices.dtype)
    return hot.where(self.reshape(*self.shape[:pre], P, 1), 0).sum(-2).reshape(*self.shape[:pre], *out).cast(self.dtype)

  # ------------------------------------------------------------ adaptive pooling
  def _adaptive_bounds(self, L: int, O: int):
    """(start (O,1), end (O,1)) int tensors of torch's adaptive windows: [floor(i*L/O), ceil((i+1)*L/O))."""
    T = type(self)
    i = T.arange(O, device=self.device).reshape(O, 1)
    return (i * L) // O, ((i + 1) * L + O - 1) // O
  def _adaptive_args(self, op: str, output_size, n_default: int) -> tuple[int, ...]:
    n = len(output_size) if isinstance(output_size, (tuple, list)) else n_default
    if n != n_default: raise _fail(ValueError, op, f"output_size must be one int or {n_default} values, got {output_size!r}", self)
    if self.ndim < n + 1: raise _fail(ValueError, op, f"a {n}-d adaptive pool needs at least {n + 1} dims, got shape {self.shape}", self)
    osz = (output_size,) * n if not isinstance(output_size, (tuple, list)) else tuple(output_size)
    osz = tuple(L if o is None else o for o, L in zip(osz, self.shape[-n:]))
    if len(osz) != n or not all(_is_int(o) and o > 0 for o in osz):
      raise _fail(ValueError, op, f"output_size must be positive ints (or None), got {output_size!r}", self)
    if any(L == 0 for L in self.shape[-n:]): raise _fail(ValueError, op, f"input spatial dims must be non-empty, got shape {self.shape}", self)
    return osz
  def adaptive_avg_pool2d(self, output_size) -> Tensor:
    """Average over torch's adaptive windows (each output i covers [floor(i*L/O), ceil((i+1)*L/O)))."""
    return self._adaptive_avg("adaptive_avg_pool2d", output_size, 2)
  def adaptive_avg_pool1d(self, output_size) -> Tensor: return self._adaptive_avg("adaptive_avg_pool1d", output_size, 1)
  def adaptive_avg_pool3d(self, output_size) -> Tensor: return self._adaptive_avg("adaptive_avg_pool3d", output_size, 3)
  def _adaptive_avg(self, op, output_size, n_default) -> Tensor:
    osz = self._adaptive_args(op, output_size, n_default)
    n = len(osz)
    x = self._float(op)
    T = type(self)
    for i, O in enumerate(osz):
      ax = x.ndim - n + i
      L = x.shape[ax]
      if L == O: continue
      st, en = self._adaptive_bounds(L, O)
      j = T.arange(L, device=self.device).reshape(1, L)
      m = ((j >= st) & (j < en)).cast(x.dtype)
      m = (m / m.sum(1, keepdim=True)).reshape((O, L) + (1,) * (x.ndim - ax - 1))
      x = (x.unsqueeze(ax) * m).sum(ax + 1)
    return x
  def adaptive_max_pool2d(self, output_size, return_indices: bool = False):
    """Max over torch's adaptive windows; return_indices gives the flat per-plane index like max_pool2d."""
    return self._adaptive_max("adaptive_max_pool2d", output_size, return_indices, 2)
  def adaptive_max_pool1d(self, output_size, return_indices: bool = False):
    return self._adaptive_max("adaptive_max_pool1d", output_size, return_indices, 1)
  def adaptive_max_pool3d(self, output_size, return_indices: bool = False):
    return self._adaptive_max("adaptive_max_pool3d", output_size, return_indices, 3)
  def _adaptive_max(self, op, output_size, return_indices, n_default):
    osz = self._adaptive_args(op, output_size, n_default)
    n = len(osz)
    T = type(self)
    pre, sp = self.ndim - n, self.shape[-n:]
    # one window mask per output position over the whole plane: (*O, *L), the product of the per-dim masks
    mask = None
    for i, (L, O) in enumerate(zip(sp, osz)):
      st, en = self._adaptive_bounds(L, O)
      j = T.arange(L, device=self.device).reshape(1, L)
      m = ((j >= st) & (j < en))
      shape = [1] * (2 * n)
      shape[i], shape[n + i] = O, L
      m = m.reshape(shape)
      mask = m if mask is None else mask & m
    assert mask is not None
    x = self.reshape(self.shape[:pre] + (1,) * n + sp)
    w = mask.where(x, self.dtype.min)   # (..., *O, *L)
    axes = tuple(range(-n, 0))
    out = w.amax(axes)
    if not return_indices: return out
    idx = T.arange(prod(sp), device=self.device).reshape(sp)
    hit = mask & (w == out.reshape(out.shape + (1,) * n))
    return out, hit.where(idx, prod(sp)).amin(axes).cast(dtypes.default_int)

  # ------------------------------------------------------------ interpolation
  @staticmethod
  def _fixed_point_bits(L: int, O: int, align_corners: bool, scale: float) -> int:
    """The fraction bits of torch's int16 linear-interpolation weights (uint8 input): the most with the largest
    weight * 2**(bits + 1) under 2**15."""
    wmax = 0.0
    for o in range(O):
      src = o * ((L - 1) / (O - 1) if O > 1 else 0.0) if align_corners else max((o + 0.5) * scale - 0.5, 0.0)
      i0 = min(math.floor(src), L - 1)
      lam = min(max(src - i0, 0.0), 1.0)
      wmax = max(wmax, 1.0 if i0 == L - 1 else max(lam, 1 - lam))
    bits = 0
    while bits < 22 and int(0.5 + wmax * (1 << (bits + 1))) < (1 << 15): bits += 1
    return bits

  def interpolate(self, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                  recompute_scale_factor: bool | None = None) -> Tensor:
    """Resize the spatial dims (all dims after (N, C)) like torch.nn.functional.interpolate.
    mode: 'nearest', 'nearest-exact', 'linear', 'bilinear' / 'bicubic' (4-d), 'trilinear' (5-d), 'area'.
    'linear' is tinygrad's n-linear: linear along every resized dim, so on a 4-d or 5-d input it is torch's bilinear
    or trilinear (3-d: torch's linear); the torch names check the input rank as torch does.
    tinygrad's forms work too: `interpolate(size, "linear", align_corners)` (mode second, where torch has
    scale_factor) and a `size` tuple longer than the spatial dims, which resizes the last len(size) dims of an input
    with fewer than 2 leading dims (tinygrad takes 0 to N batch dims; a shorter size raises, as in torch).
    align_corners=False is accepted with every mode (torch raises for any value but None with the non-linear modes;
    tinygrad takes False).
    Each dim is a multiply-sum with a small (out, in) interpolation matrix (one reduce kernel per resized dim)."""
    op = "interpolate"
    if isinstance(scale_factor, str):   # tinygrad's positional order: interpolate(size, mode, align_corners)
      if isinstance(mode, bool) or mode is None: align_corners = mode if align_corners is None else align_corners
      elif mode != "nearest": raise _fail(TypeError, op, f"got a mode twice: {scale_factor!r} (positionally, tinygrad's order) and {mode!r}", self)
      mode, scale_factor = scale_factor, None
    modes = {"nearest": None, "nearest-exact": None, "area": None, "linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
    if not isinstance(mode, str) or mode not in modes: raise _fail(ValueError, op, f"mode must be one of {tuple(modes)}, got {mode!r}", self)
    n = self.ndim - 2
    if isinstance(size, (tuple, list)) and n < len(size) <= self.ndim and mode in ("linear", "nearest", "nearest-exact"):
      n = len(size)   # tinygrad: the last len(size) dims of an input with fewer than 2 leading dims (torch raises)
    elif n < 1: raise _fail(ValueError, op, f"input must be (N, C, *spatial) with at least one spatial dim, got shape {self.shape}", self)
    if mode != "linear" and modes[mode] is not None and modes[mode] != n:
      raise _fail(ValueError, op, f"mode {mode!r} needs a {modes[mode] + 2}-d input, got {self.ndim}-d ('linear' works on any rank)", self)
    if align_corners and modes[mode] is None:
      raise _fail(ValueError, op, f"align_corners only applies to the linear modes, not {mode!r}", self)
    if (size is None) == (scale_factor is None): raise _fail(ValueError, op, "exactly one of size and scale_factor must be given", self)
    pre = self.ndim - n
    sp = self.shape[pre:]
    if size is not None:
      osz = (size,) * n if not isinstance(size, (tuple, list)) else tuple(size)
      if len(osz) != n or not all(_is_int(o) and o > 0 for o in osz):
        raise _fail(ValueError, op, f"size must be {n} positive ints, got {size!r}", self)
      scales: list[float | None] = [None] * n
    else:
      sf = (scale_factor,) * n if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
      if len(sf) != n or not all(isinstance(v, (int, float)) and v > 0 for v in sf):
        raise _fail(ValueError, op, f"scale_factor must be {n} positive numbers, got {scale_factor!r}", self)
      osz = tuple(int(math.floor(L * f)) for L, f in zip(sp, sf))
      if any(o <= 0 for o in osz): raise _fail(ValueError, op, f"output size {osz} is empty (scale_factor {scale_factor!r})", self)
      scales = [None if recompute_scale_factor else float(f) for f in sf]
    if mode == "area": return self._adaptive_avg(op, osz, n)
    x = self if mode in ("nearest", "nearest-exact") else self._float(op)
    T = type(self)
    # a uint8 'linear' input is torch's separable uint8 bilinear: fixed-point passes, last dim first, each rounded half up
    # (tinygrad rounds uint8 too); other ints truncate as in tinygrad (torch rejects them)
    rnd = mode == "linear" and self.dtype == dtypes.uint8
    fdt = dtypes.float64 if x.dtype == dtypes.float64 or rnd else dtypes.float32
    for i in (reversed(range(n)) if rnd else range(n)):
      L, O, ax = sp[i], osz[i], pre + i
      dst = T.arange(O, device=self.device).cast(fdt).reshape(O, 1)
      j = T.arange(L, device=self.device).reshape(1, L)
      if mode in ("nearest", "nearest-exact"):
        scale = 1.0 / scales[i] if scales[i] is not None else L / O   # type: ignore[operator]
        src = ((dst + 0.5) if mode == "nearest-exact" else dst) * scale
        i0 = src.floor().cast(dtypes.int64).minimum(L - 1)
        hot = (j == i0).reshape((O, L) + (1,) * (n - 1 - i))
        x = hot.where(x.unsqueeze(ax), 0).sum(ax + 1).cast(x.dtype)   # exactly one hit per row: exact for any dtype
        continue
      if align_corners:
        src = dst * ((L - 1) / (O - 1) if O > 1 else 0.0)
      else:
        scale = 1.0 / scales[i] if scales[i] is not None else L / O   # type: ignore[operator]
        src = (dst + 0.5) * scale - 0.5
        if mode != "bicubic": src = src.maximum(0.0)
      if mode == "bicubic":   # torch's cubic convolution (A = -0.75) over 4 taps, indices clamped to the edge
        i0 = src.floor()
        t = src - i0
        i0 = i0.cast(dtypes.int64)
        A = -0.75
        def cc1(v): return ((A + 2) * v - (A + 3)) * v * v + 1
        def cc2(v): return ((A * v - 5 * A) * v + 8 * A) * v - 4 * A
        taps = [(i0 - 1, cc2(t + 1)), (i0, cc1(t)), (i0 + 1, cc1(1 - t)), (i0 + 2, cc2(2 - t))]
        m = None
        for idx, wt in taps:
          term = (j == idx.maximum(0).minimum(L - 1)).where(wt, 0.0)
          m = term if m is None else m + term
        assert m is not None
        m = m.cast(x.dtype).reshape((O, L) + (1,) * (n - 1 - i))
        x = (x.unsqueeze(ax) * m).sum(ax + 1)
        continue
      i0 = src.floor().cast(dtypes.int64).minimum(L - 1)
      lam = (src - i0.cast(fdt)).clip(0.0, 1.0)
      i1 = (i0 + 1).minimum(L - 1)
      m = (j == i0).where(1 - lam, 0.0) + (j == i1).where(lam, 0.0)
      if rnd:   # torch's uint8 path: int16 fixed-point weights, the sum rounded half up; an identity pass is skipped
        if O == L and (align_corners or scales[i] in (None, 1.0)): continue
        prec = self._fixed_point_bits(L, O, bool(align_corners), 1.0 / scales[i] if scales[i] is not None else L / O)
        m = (m * (1 << prec) + 0.5).floor()
      m = m.cast(x.dtype).reshape((O, L) + (1,) * (n - 1 - i))
      x = (x.unsqueeze(ax) * m).sum(ax + 1)
      if rnd: x = ((x + (1 << (prec - 1))) / (1 << prec)).floor().clip(self.dtype.min, self.dtype.max)
    # tinygrad's 'linear' keeps an integer input's dtype (uint8 rounded as above, other ints truncated)
    return x.cast(self.dtype) if mode == "linear" and self.dtype.is_int else x
