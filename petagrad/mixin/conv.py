"""Convolution: sliding windows, conv1d/2d/3d, conv_transpose1d/2d/3d, im2col (F.unfold) and fold (col2im).

The central trick is `_pool`: it turns the last n dims of a tensor into sliding windows (..., *out, *kernel) with
movement ops only (pad/reshape/expand/shrink/permute: no copy), so that convolution is `(windows * weight).sum(...)`
-- one fused reduce kernel -- and pooling (pool.py) is a max/sum over the windows.
"""
from __future__ import annotations
import functools, itertools
from typing import Any, Sequence
from petagrad.dtype import dtypes, promote
from petagrad.helpers import prod, flatten as flatten_list, WINO
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp, smax
from petagrad.uop.gradient import custom_backward, compute_gradient
from petagrad.uop.graph import substitute
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import _fail, _is_int, _tuple, _resolve_pads, _check_tensor

def _check_kernel_ndim(op: str, weight: Any, ndim: int, x: Any) -> None:
  _check_tensor(op, "weight", weight, x)
  if weight.ndim != ndim:
    raise _fail(ValueError, op, f"weight must be (cout, cin/groups, *kernel) with {ndim - 2} kernel dims, got shape {weight.shape}", x, weight)

# enough output channels (per group) to fill vector lanes: the weight is stored with output channels contiguous
def _channels_last(rcout: int) -> bool: return rcout % 8 == 0

def conv_weight_layout(weight: Tensor, groups: int = 1) -> Tensor:
  """A conv weight (cout, cin/groups, *kernel) as conv2d reads it: with at least 8 output channels per group stored
  channels-last, (groups, cin/groups, *kernel, cout/groups) contiguous, so the kernel computes output channels as
  vector lanes; viewed back in the weight's shape. conv2d calls it on every weight; a weight that never changes (an
  ONNX initializer) can be laid out once (`.realize()` the result) and passed instead: conv2d then reads it as it
  is, with no copy.

  >>> from petagrad import Tensor
  >>> w = Tensor.ones(8, 2, 3, 3)
  >>> stored = conv_weight_layout(w).realize()
  >>> stored.shape, Tensor.ones(1, 2, 5, 5).conv2d(stored).shape
  ((8, 2, 3, 3), (1, 8, 3, 3))
  """
  n, (cout, cin), HW = weight.ndim - 2, weight.shape[:2], weight.shape[2:]
  rcout = cout // groups
  if not _channels_last(rcout): return weight
  w = weight.reshape(groups, rcout, cin, *HW).permute(0, *range(2, 3 + n), 1).contiguous()   # stored (groups, cin, *HW, rcout)
  return w.permute(0, 2 + n, *range(1, 2 + n)).reshape(weight.shape)

# ------------------------------------------------------------ Winograd F(4x4, 3x3)
# A 4x4 tile of a 3x3 convolution's output from the 6x6 input tile around it with 36 products per (input, output)
# channel pair instead of 144 (Lavin & Gray, 2015): Y = AT [(G w GT) * (BT d B)] A, summed over input channels. The
# rows of BT, G and AT as literal coefficients: the transforms are sums of slices whose constants fold into the kernels.
WINO_TILE = 4
WINO_MIN_TILES = 16              # winograd_fits: enough tiles (batch x tiles per image) to reuse each transformed weight...
WINO_CACHED_BYTES = 1 << 20      # ...or a transformed weight small enough to stay in the cache
WINO_BT = ((4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0), (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1))
WINO_G = ((1 / 4, 0, 0), (-1 / 6, -1 / 6, -1 / 6), (-1 / 6, 1 / 6, -1 / 6), (1 / 24, 1 / 12, 1 / 6), (1 / 24, -1 / 12, 1 / 6), (0, 0, 1))
WINO_AT = ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1))

def _combine(coeffs: Sequence[float], pieces: Sequence[Any]) -> Any:
  """sum(c * piece) over the nonzero coefficients (1 and -1 without a multiply)."""
  out = None
  for c, t in zip(coeffs, pieces):
    if c == 0: continue
    term = t if c == 1 else -t if c == -1 else t * c
    out = term if out is None else out + term
  return out

def _apply(mat: Sequence[Sequence[float]], taps: Sequence[Any], dim: int) -> Any:
  """mat applied to the taps (tensors of one shape) along a new axis dim: out[..., a, ...] = sum_i mat[a][i] taps[i]."""
  return type(taps[0]).stack(*[_combine(row, taps) for row in mat], dim=dim)

def _transform(mat: Sequence[Sequence[float]], grid: list[list[Any]]) -> list[Any]:
  """out[a][b] = sum_ij mat[a][i] mat[b][j] grid[i][j] (mat @ grid @ mat.T over a grid of tensors), flattened row by
  row; the columns first, then the rows, so each output is a few adds of the column sums."""
  cols = [[_combine(row, [grid[i][j] for i in range(len(grid))]) for j in range(len(grid[0]))] for row in mat]
  return [_combine(row, cols[a]) for a in range(len(mat)) for row in mat]

def winograd_fits(x_shape: Sequence[int], weight_shape: Sequence[int], groups: int = 1, stride: Sequence[int] = (1, 1),
                  dilation: Sequence[int] = (1, 1), pads: Sequence[tuple[int, int]] = ((0, 0), (0, 0)), dts: tuple | None = None) -> bool:
  """Can a convolution of these shapes take the Winograd path (conv2d's winograd=, WINO): a 3x3 kernel, stride 1, no dilation or
  groups, padding >= 0, an output of at least one 4x4 tile, channels enough for the products' vector lanes, and 16 or
  more tiles (batch x tiles per image) or a transformed weight of at most 1 MiB (in the weight's dtype; float32 without
  dts); with dts, the input's and the weight's dtypes: both float32 or both float64 (half types keep the direct path)."""
  if dts is not None and not (dts[0] == dts[1] and dts[0] in (dtypes.float32, dtypes.float64)): return False
  if len(weight_shape) != 4 or len(x_shape) != 4 or tuple(weight_shape[2:]) != (3, 3) or groups != 1: return False
  if tuple(stride) != (1, 1) or tuple(dilation) != (1, 1) or any(p < 0 for pr in pads for p in pr): return False
  out = [L + pb + pa - 2 for L, (pb, pa) in zip(x_shape[2:], pads)]
  if not (min(out) >= WINO_TILE and weight_shape[1] >= 8 and _channels_last(weight_shape[0])): return False
  # the products read the transformed weight (36 values per channel pair, 4x the direct one's) once per call: with few
  # tiles and a weight too big for the cache they wait on memory (512 channels at 7 x 7, batch 1: 2.7 ms, direct 1.2)
  tiles = smax(x_shape[0]) * prod(-(-o // WINO_TILE) for o in out)
  return tiles >= WINO_MIN_TILES or 36 * weight_shape[0] * weight_shape[1] * (dts[1].itemsize if dts else 4) <= WINO_CACHED_BYTES

def winograd_weight(weight: Tensor) -> Tensor:
  """A 3x3 conv weight (cout, cin, 3, 3) transformed for conv2d's Winograd path: (36, cin, cout), G w GT per channel
  pair, contiguous. conv2d computes it each call under WINO=1; a weight that never changes (an ONNX initializer) is
  transformed once and passed as conv2d(..., winograd=u) instead.

  >>> from petagrad import Tensor
  >>> w = Tensor.ones(8, 8, 3, 3)
  >>> u = winograd_weight(w).realize()
  >>> u.shape, Tensor.ones(1, 8, 4, 4).conv2d(w, padding=1, winograd=u).shape
  ((36, 8, 8), (1, 8, 4, 4))
  """
  if weight.ndim != 4 or tuple(weight.shape[2:]) != (3, 3):
    raise _fail(ValueError, "winograd_weight", f"expected a 3x3 conv weight (cout, cin, 3, 3), got shape {weight.shape}", weight)
  # in two passes (rows, then columns) of 6 pieces each: one of 36 takes seconds longer to build
  cout, cin = weight.shape[:2]
  rows = _apply(WINO_G, [weight[:, :, i] for i in range(3)], 2).contiguous()   # (cout, cin, 6, 3)
  u = _apply(WINO_G, [rows[:, :, :, j] for j in range(3)], 3)                 # (cout, cin, 6, 6)
  return u.reshape(cout, cin, 36).permute(2, 1, 0).contiguous()

def _conv_backward(T: Any, ctx: UOp, node: UOp) -> tuple[UOp | None, UOp | None]:
  """Gradients of a convolution's input and weight (node = CUSTOM_GRAD(value, x, weight))."""
  value, x, w = node.src
  _, stride, pads, dilation, groups = node.arg
  dx = T(ctx).conv_transpose2d(T(w), None, groups, stride, dilation, 0)
  # the transposed convolution covers the padded input up to the last position a window read: extend it to the
  # whole padded input, then drop the padding
  dx = dx.pad(((0, 0), (0, 0)) + tuple((0, L + pb + pa - F) for L, (pb, pa), F in zip(x.shape[2:], pads, dx.shape[2:])))
  dx = dx.shrink(((0, x.shape[0]), (0, x.shape[1])) + tuple((pb, pb + L) for L, (pb, _) in zip(x.shape[2:], pads)))
  if dx.dtype != x.dtype: dx = dx.cast(x.dtype)
  if x is w: return None, compute_gradient(value, ctx, {w}).get(w)   # x.conv2d(x): both paths are the weight's
  # the weight's gradient through this conv alone: x is held constant (when x is computed from w, as in
  # x.conv2d(w).conv2d(w), the path through x is dx's, which the outer walk carries on)
  return dx.uop, compute_gradient(substitute(value, {x: UOp(Ops.DETACH, x.dtype, (x,))}), ctx, {w}).get(w)

def _pool_backward(T: Any, ctx: UOp, node: UOp) -> tuple[UOp]:
  """Gradient of the sliding-window view (..., *L) -> (..., *o, *k) (node = CUSTOM_GRAD(view, x)): every kernel
  offset's slice of ctx, spread out by the stride and shifted to where that offset read, summed (col2im)."""
  _, k_, s_, d_ = node.arg
  x, n = node.src[1], len(k_)
  pre, L_ = x.shape[:-n], x.shape[-n:]
  o_ = ctx.shape[len(pre):len(pre) + n]
  # spread out by the stride once ((o) -> (o*s), zeros between) and realize it: it is read k times over, may hold
  # the forward's window view (a max-pool's argmax mask), and the pieces below are then plain shifted slices
  g = T(ctx)
  for i, (o, s) in enumerate(zip(o_, s_)):
    if s == 1: continue
    ax = len(pre) + i
    u = g.unsqueeze(ax + 1)
    g = u.pad(tuple((0, s - 1) if a == ax + 1 else (0, 0) for a in range(u.ndim))).reshape(g.shape[:ax] + (o * s,) + g.shape[ax + 1:])
  g = g.contiguous()
  out = None
  for offs in itertools.product(*[range(k) for k in k_]):
    piece = g.shrink(tuple((0, sz) for sz in g.shape[:len(pre) + n]) + tuple((j, j + 1) for j in offs)).reshape(g.shape[:len(pre) + n])
    for i, (L, d, j) in enumerate(zip(L_, d_, offs)):
      ax = len(pre) + i
      span = min(piece.shape[ax], L - j * d)   # the last window ends at most at L
      piece = piece.shrink(tuple((0, sz) if a != ax else (0, span) for a, sz in enumerate(piece.shape)))
      piece = piece.pad(tuple((0, 0) if a != ax else (j * d, L - j * d - span) for a in range(piece.ndim)))
    out = piece if out is None else out + piece
  return (out.uop,)

class ConvMixin(TensorMixin):
  __slots__ = ()

  def __init_subclass__(cls, **kwargs: Any) -> None:
    super().__init_subclass__(**kwargs)
    # the gradient rules of a convolution and of the sliding windows are tensor ops: they build tensors of the class
    # that combines the mixins (the first one: petagrad.tensor.Tensor)
    custom_backward.setdefault("conv", functools.partial(_conv_backward, cls))
    custom_backward.setdefault("pool", functools.partial(_pool_backward, cls))

  # ------------------------------------------------------------ sliding windows
  def _window1(self, ax: int, k: int, s: int, d: int) -> Tensor:
    """Replace dim `ax` (length L) by (k, o): element [kk, oo] is x[oo*s + kk*d], o = (L - d*(k-1) - 1)//s + 1."""
    L = self.shape[ax]
    o = (L - d * (k - 1) - 1) // s + 1
    pre, post = self.shape[:ax], self.shape[ax + 1:]
    nd = (None,) * len(pre)
    x = self
    if k == 1 or (d == 1 and k <= s):
      # windows do not overlap: cut the dim into (o, s) blocks and keep the first k of each
      x = x.pad(nd + ((0, o * s - L),) + (None,) * len(post)) if o * s > L else x.shrink(nd + ((0, o * s),) + (None,) * len(post))
      x = x.reshape(pre + (o, s) + post).shrink(nd + ((0, o), (0, k)) + (None,) * len(post))
      return x.transpose(ax, ax + 1)
    # windows overlap: repeat the dim r times (an expand: no copy) and read it back as rows of length Lp+d, so that
    # row kk starts kk*d further on; the row's columns o*s (kept below) are then x[o*s + kk*d]
    Lp = max(L, o * s)
    if Lp > L: x = x.pad(nd + ((0, Lp - L),) + (None,) * len(post))
    r = -(-k * (Lp + d) // Lp)
    x = x.reshape(pre + (1, Lp) + post).expand(pre + (r, Lp) + post).reshape(pre + (r * Lp,) + post)
    x = x.shrink(nd + ((0, k * (Lp + d)),) + (None,) * len(post)).reshape(pre + (k, Lp + d) + post)
    x = x.shrink(nd + ((0, k), (0, o * s)) + (None,) * len(post)).reshape(pre + (k, o, s) + post)
    return x.shrink(nd + ((0, k), (0, o), (0, 1)) + (None,) * len(post)).reshape(pre + (k, o) + post)
  def _pool(self, k_: Sequence[int], stride: int | Sequence[int] = 1, dilation: int | Sequence[int] = 1) -> Tensor:
    """Sliding windows over the last len(k_) dims: (..., *spatial) -> (..., *out, *k_). No padding; movement ops only."""
    n = len(k_)
    s_, d_ = _tuple("pool", "stride", stride, n, self), _tuple("pool", "dilation", dilation, n, self)
    pre = self.ndim - n
    for L, k, d in zip(self.shape[pre:], k_, d_):
      if d * (k - 1) + 1 > L:
        raise _fail(ValueError, "pool", f"kernel size {tuple(k_)} (dilation {d_}) is larger than the input {self.shape[pre:]}", self)
    x = self
    for i, (k, s, d) in enumerate(zip(k_, s_, d_)): x = x._window1(pre + 2 * i, k, s, d)
    # (..., k1, o1, k2, o2, ...) -> (..., o1, o2, ..., k1, k2, ...)
    x = x.permute(tuple(range(pre)) + tuple(pre + 2 * i + 1 for i in range(n)) + tuple(pre + 2 * i for i in range(n)))
    # the backward of that view is index math dividing per element; windows scattered back one kernel offset at a
    # time (col2im, _pool_backward) is a sum of shifted pads
    return x._new(UOp(Ops.CUSTOM_GRAD, x.dtype, (x.uop, self.uop), ("pool", tuple(k_), s_, d_)), self)

  # ------------------------------------------------------------ convolution
  def _conv_checks(self, kind: str, weight: Any, groups: Any, layout: str) -> tuple[str, int]:
    """The op's name (conv2d, conv_transpose1d, ...) and its number of spatial dims n, after checking the weight
    (layout: its first two dims), an input of n + 2 (batched) or n + 1 dims, and groups."""
    op = {1: f"{kind}1d", 2: f"{kind}2d", 3: f"{kind}3d"}.get(getattr(weight, "ndim", 4) - 2, kind)
    _check_tensor(op, "weight", weight, self)
    if weight.ndim < 3: raise _fail(ValueError, op, f"weight must be ({layout}, *kernel), got shape {weight.shape}", self, weight)
    n = weight.ndim - 2
    if self.ndim not in (n + 1, n + 2):
      raise _fail(ValueError, op, f"a {n}-d kernel {weight.shape} needs a {n + 2}-d (batched) or {n + 1}-d input, got {self.ndim}-d", self, weight)
    if not _is_int(groups) or groups < 1: raise _fail(ValueError, op, f"groups must be a positive int, got {groups!r}", self, weight)
    return op, n
  def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0, dtype=None,
             winograd: Tensor | None = None) -> Tensor:
    """N-d convolution (cross-correlation) like torch.nn.functional.conv2d; the number of spatial dims comes from
    the weight (cout, cin/groups, *kernel). Input (N, cin, *spatial) or unbatched (cin, *spatial).
    padding: int, one int per dim, one (before, after) pair per dim, 2n ints in F.pad order, 'same' or 'valid'.
    winograd: winograd_weight(weight), computed once for a weight that does not change: a convolution that fits
    (winograd_fits) then runs as Winograd F(4x4, 3x3). WINO=1 takes that path for every conv2d that fits,
    transforming the weight each call.

    >>> from petagrad import Tensor
    >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    op, n = self._conv_checks("conv", weight, groups, "cout, cin/groups")
    if self.ndim == n + 1: return self.unsqueeze(0).conv2d(weight, bias, groups, stride, dilation, padding, dtype).squeeze(0)
    (bs, cin_), (cout, cin), HW = self.shape[:2], weight.shape[:2], weight.shape[2:]
    if cin * groups != cin_:
      raise _fail(ValueError, op, f"input has {cin_} channels but the weight expects {cin} x groups={groups} = {cin * groups}", self, weight)
    if cout % groups: raise _fail(ValueError, op, f"out channels ({cout}) must be divisible by groups ({groups})", self, weight)
    if any(k == 0 for k in HW): raise _fail(ValueError, op, f"kernel size must be positive, got {HW}", self, weight)
    s_, d_ = _tuple(op, "stride", stride, n, self), _tuple(op, "dilation", dilation, n, self)
    pads = _resolve_pads(op, padding, n, self, HW, d_, s_, allow_str=True)
    for L, (pb, pa), k, d in zip(self.shape[2:], pads, HW, d_):
      if L + pb + pa < d * (k - 1) + 1:
        raise _fail(ValueError, op,
          f"kernel {HW} (dilation {d_}) is larger than the padded input {tuple(L + b + a for L, (b, a) in zip(self.shape[2:], pads))}", self, weight)
    if bias is not None:
      _check_tensor(op, "bias", bias, self)
      if bias.shape != (cout,): raise _fail(ValueError, op, f"bias must have shape ({cout},), got {bias.shape}", self, weight, bias)
    if winograd is not None: _check_tensor(op, "winograd", winograd, self)
    if (winograd is not None or WINO) and dtype is None and winograd_fits(self.shape, weight.shape, groups, s_, d_, pads, (self.dtype, weight.dtype)):
      u = winograd_weight(weight) if winograd is None else winograd
      if u.shape != (36, cin, cout):
        raise _fail(ValueError, op, f"winograd= must be winograd_weight(weight), of shape {(36, cin, cout)}, got {u.shape}", self, weight, u)
      ret = self._conv2d_winograd(u.cast(self.dtype), pads)
      return ret if bias is None else ret + bias.reshape(1, cout, 1, 1)
    rcout, padded = cout // groups, any(p != (0, 0) for p in pads)
    # enough output channels to fill vector lanes: the weight is stored with output channels contiguous, so the
    # kernel computes them as SIMD lanes (a matmul's register tile), and a padded input is written once with
    # its zeros so the inner loop reads it without masks. Both are small copies next to the convolution.
    channels_last = _channels_last(rcout)   # (the weight: conv_weight_layout)
    x = self.pad(((0, 0), (0, 0)) + tuple(pads)) if padded else self
    if channels_last and padded: x = x.contiguous()
    x = x._pool(HW, s_, d_)   # (bs, groups*cin, *oyx, *HW)
    oyx = x.shape[2:2 + n]
    x = x.reshape(bs, groups, cin, 1, *oyx, *HW).expand(bs, groups, cin, rcout, *oyx, *HW)
    x = x.permute(0, 1, 3, *[4 + i for i in range(n)], 2, *[4 + n + i for i in range(n)])   # (bs, groups, rcout, *oyx, cin, *HW)
    wb = conv_weight_layout(weight, groups).reshape(1, groups, rcout, *[1] * n, cin, *HW)
    # float16/bfloat16 multiply in float32 as matmul does (and torch): products rounded to 11 or 8 bits, then summed,
    # lose an output that cancels
    if dtype is None and promote(self.dtype, weight.dtype) in (dtypes.float16, dtypes.bfloat16):
      x, wb = x.cast(dtypes.float32), wb.cast(dtypes.float32)
    ret = (x * wb).sum([-1 - i for i in range(1 + n)], dtype=dtype)
    if channels_last:
      # the output gradient is realized channels-last, so the weight gradient (a reduce over pixels) and the input
      # gradient (a reduce over output channels) both read output channels contiguously
      cl = ret.permute(0, *range(3, 3 + n), 1, 2).contiguous_backward()   # (bs, *oyx, groups, rcout)
      ret = cl.permute(0, 1 + n, 2 + n, *range(1, 1 + n))
    if dtype is None and ret.dtype != (dt := promote(self.dtype, weight.dtype)): ret = ret.cast(dt)
    ret = ret.reshape(bs, cout, *oyx)
    if all(p >= 0 for pr in pads for p in pr):
      # the input's gradient is a transposed convolution (a vectorized kernel) instead of the backward of the
      # sliding-window view (index math with divisions per element); the weight's stays that of this graph
      ret = ret._new(UOp(Ops.CUSTOM_GRAD, ret.dtype, (ret.uop, self.uop, weight.uop), ("conv", s_, tuple(pads), d_, groups)), self, weight)
    return ret if bias is None else ret + bias.reshape(1, cout, *[1] * n)
  def _conv2d_winograd(self, u: Tensor, pads: Sequence[tuple[int, int]]) -> Tensor:
    """A 3x3, stride-1 convolution as Winograd F(4x4, 3x3) with the transformed weight u (36, cin, cout), in four
    kernels: the input transform in two passes (BT d over the rows of each 6-row band of the padded input, then d B
    over the columns of each 6x6 tile: 36 values per tile and channel), 36 matrix products (tiles x cin @ cin x cout)
    and the output transform. All work channels-last, channels as vector lanes, and store each tile's 36 values side by
    side: stored 36 planes apart, the transforms' loads or stores (a plane is a multiple of 4 KiB) share the L1 cache's
    sets and evict each other (the output transform 145 -> 21 us). Two passes of 6 pieces each, not one of 36, run as
    fast and build 7x faster. The output is stored channels-last, so what follows (bias, activation, the next
    convolution's input transform) reads it with no transform redone."""
    m, a = WINO_TILE, WINO_TILE + 2
    (bs, cin, H, W), cout = self.shape, u.shape[2]
    (pt, pb), (pl, pr) = pads
    Ho, Wo = H + pt + pb - 2, W + pl + pr - 2
    ty, tx = -(-Ho // m), -(-Wo // m)
    # padded to whole tiles and one more, so that input row i of tile row y is a slice: row m*y + i of (y + i//m, i%m)
    xp = self.permute(0, 2, 3, 1).pad(((0, 0), (pt, m * (ty + 1) - H - pt), (pl, m * (tx + 1) - W - pl), (0, 0)))
    xp = xp.reshape(bs, ty + 1, m, m * (tx + 1), cin)
    r = _apply(WINO_BT, [xp[:, i // m:i // m + ty, i % m] for i in range(a)], 2).contiguous()         # (bs, ty, a, W', cin)
    r = r.reshape(bs, ty, a, tx + 1, m, cin)
    v = _apply(WINO_BT, [r[:, :, :, j // m:j // m + tx, j % m] for j in range(a)], 4)                 # (bs, ty, a, tx, a, cin)
    v = v.permute(0, 1, 3, 2, 4, 5).reshape(bs * ty * tx, a * a, cin).contiguous()
    prods = (v.permute(1, 0, 2) @ u).permute(1, 0, 2).contiguous().reshape(bs, ty, tx, a, a, cout)
    ys = _transform(WINO_AT, [[prods[:, :, :, i, j] for j in range(a)] for i in range(a)])   # m*m x (bs, ty, tx, cout)
    out_rows = [type(self).stack(*ys[p * m:(p + 1) * m], dim=3) for p in range(m)]          # (bs, ty, tx, m, cout)
    y = type(self).stack(*out_rows, dim=2).reshape(bs, ty * m, tx * m, cout).contiguous()
    # whole tiles stored, the rest cropped as a view (a no-op for whole tiles): cropped in the same kernel, an output row
    # would no longer split into (tile, position), and every value would select among the 16 pieces at run time (a 6x6
    # output: 1.1 MB of C)
    return y[:, :Ho, :Wo].permute(0, 3, 1, 2)
  def conv1d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0, dtype=None) -> Tensor:
    """conv2d with a 1-d kernel (same signature as conv2d; pass torch's stride/padding/dilation/groups by keyword)."""
    _check_kernel_ndim("conv1d", weight, 3, self)
    return self.conv2d(weight, bias, groups, stride, dilation, padding, dtype)
  def conv3d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0, dtype=None) -> Tensor:
    """conv2d with a 3-d kernel (same signature as conv2d)."""
    _check_kernel_ndim("conv3d", weight, 5, self)
    return self.conv2d(weight, bias, groups, stride, dilation, padding, dtype)
  def conv_transpose2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0,
                       output_padding=0) -> Tensor:
    """N-d transposed convolution like torch.nn.functional.conv_transpose2d; weight (cin, cout/groups, *kernel).
    Composed as a convolution of the stride-dilated input with the flipped, transposed weight."""
    op, n = self._conv_checks("conv_transpose", weight, groups, "cin, cout/groups")
    if self.ndim == n + 1: return self.unsqueeze(0).conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding).squeeze(0)
    cin, rcout, HW = weight.shape[0], weight.shape[1], weight.shape[2:]
    if self.shape[1] != cin: raise _fail(ValueError, op, f"input has {self.shape[1]} channels but the weight expects {cin}", self, weight)
    if cin % groups: raise _fail(ValueError, op, f"in channels ({cin}) must be divisible by groups ({groups})", self, weight)
    if any(k == 0 for k in HW): raise _fail(ValueError, op, f"kernel size must be positive, got {HW}", self, weight)
    s_, d_ = _tuple(op, "stride", stride, n, self), _tuple(op, "dilation", dilation, n, self)
    op_ = _tuple(op, "output_padding", output_padding, n, self, minimum=0)
    pads = _resolve_pads(op, padding, n, self)
    if any(p < 0 for pr in pads for p in pr): raise _fail(ValueError, op, f"padding must be >= 0, got {padding!r}", self)
    for o, s, d in zip(op_, s_, d_):
      if o >= max(s, d): raise _fail(ValueError, op, f"output padding {op_} must be smaller than either stride {s_} or dilation {d_}", self)
    out = [(L - 1) * s - pb - pa + d * (k - 1) + o + 1 for L, s, (pb, pa), d, k, o in zip(self.shape[2:], s_, pads, d_, HW, op_)]
    if any(v <= 0 for v in out): raise _fail(ValueError, op, f"output size {tuple(out)} is too small (padding {padding!r})", self, weight)
    if bias is not None:
      _check_tensor(op, "bias", bias, self)
      if bias.shape != (rcout * groups,):
        raise _fail(ValueError, op, f"bias must have shape ({rcout * groups},), got {bias.shape}", self, weight, bias)
    w = weight.reshape(groups, cin // groups, rcout, *HW).transpose(1, 2).flip(*range(3, n + 3)).reshape(groups * rcout, cin // groups, *HW)
    x = self
    if any(s > 1 for s in s_):
      # insert s-1 zeros between input elements: (L) -> (L, 1) -> pad -> (L, s) -> (L*s) -> drop the trailing s-1
      bsz, c = x.shape[:2]
      x = x.reshape(bsz, c, *flatten_list((L, 1) for L in x.shape[2:]))
      x = x.pad(((0, 0), (0, 0)) + tuple(flatten_list(((0, 0), (0, s - 1)) for s in s_)))
      x = x.reshape(bsz, c, *[L * s for L, s in zip(self.shape[2:], s_)])
      x = x.shrink(((0, bsz), (0, c)) + tuple((0, L * s - (s - 1)) for L, s in zip(self.shape[2:], s_)))
    cpads = [(d * (k - 1) - pb, d * (k - 1) - pa + o) for k, d, (pb, pa), o in zip(HW, d_, pads, op_)]
    return x.conv2d(w, bias, groups, 1, d_, cpads)
  def conv_transpose1d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0,
                       output_padding=0) -> Tensor:
    """conv_transpose2d with a 1-d kernel (same signature as conv_transpose2d)."""
    return self.conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding)
  def conv_transpose3d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0,
                       output_padding=0) -> Tensor:
    """conv_transpose2d with a 3-d kernel (same signature as conv_transpose2d)."""
    return self.conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding)

  # ------------------------------------------------------------ im2col and col2im
  def im2col(self, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """torch.nn.functional.unfold (im2col): (N, C, *spatial) -> (N, C*prod(kernel), L) sliding blocks.
    It is F.unfold; Tensor.unfold(dimension, size, step) is torch.Tensor.unfold, the sliding window of one dim."""
    n = len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 2
    if self.ndim == n + 1: return self.unsqueeze(0).im2col(kernel_size, dilation, padding, stride).squeeze(0)
    if self.ndim != n + 2:
      raise _fail(ValueError, "im2col", f"expected a {n + 1}-d or {n + 2}-d input for a {n}-d kernel, got shape {self.shape}", self)
    k_ = _tuple("im2col", "kernel_size", kernel_size, n, self)
    d_, s_ = _tuple("im2col", "dilation", dilation, n, self), _tuple("im2col", "stride", stride, n, self)
    pads = _resolve_pads("im2col", padding, n, self)
    if any(p < 0 for pr in pads for p in pr): raise _fail(ValueError, "im2col", f"padding must be >= 0, got {padding!r}", self)
    for L, (pb, pa), k, d in zip(self.shape[2:], pads, k_, d_):
      if L + pb + pa < d * (k - 1) + 1: raise _fail(ValueError, "im2col", f"kernel {k_} (dilation {d_}) is larger than the padded input", self)
    x = self.pad(((0, 0), (0, 0)) + tuple(pads))._pool(k_, s_, d_)   # (N, C, *O, *K)
    N, C, O = x.shape[0], x.shape[1], x.shape[2:2 + n]
    x = x.permute(0, 1, *range(2 + n, 2 + 2 * n), *range(2, 2 + n))
    return x.reshape(N, C * prod(k_), prod(O))
  def fold(self, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """torch.nn.functional.fold (col2im), the adjoint of unfold: (N, C*prod(kernel), L) -> (N, C, *output_size),
    overlapping values summed. Composed as a grouped transposed convolution with a one-hot weight."""
    op = "fold"
    n = len(output_size) if isinstance(output_size, (tuple, list)) else 2
    if self.ndim == 2: return self.unsqueeze(0).fold(output_size, kernel_size, dilation, padding, stride).squeeze(0)
    if self.ndim != 3: raise _fail(ValueError, op, f"expected a 2-d or 3-d input (N, C*prod(kernel), L), got shape {self.shape}", self)
    out = _tuple(op, "output_size", output_size, n, self)
    k_ = _tuple(op, "kernel_size", kernel_size, n, self)
    d_, s_ = _tuple(op, "dilation", dilation, n, self), _tuple(op, "stride", stride, n, self)
    pads = _resolve_pads(op, padding, n, self)
    if any(p < 0 for pr in pads for p in pr): raise _fail(ValueError, op, f"padding must be >= 0, got {padding!r}", self)
    N, CK, L = self.shape
    K = prod(k_)
    if CK % K: raise _fail(ValueError, op, f"expected size of input's dimension 1 ({CK}) to be divisible by the product of kernel_size ({K})", self)
    O = [(o + pb + pa - d * (k - 1) - 1) // s + 1 for o, (pb, pa), k, d, s in zip(out, pads, k_, d_, s_)]
    if any(v <= 0 for v in O) or prod(O) != L:
      raise _fail(ValueError, op, f"given output_size={out}, kernel_size={k_}, dilation={d_}, padding={padding!r}, stride={s_}, expected "
                  f"size of input's dimension 2 to match the calculated number of sliding blocks {prod(max(v, 0) for v in O)}, but got {L}", self)
    C, T = CK // K, type(self)
    ar = T.arange(K, device=self.device)
    w = (ar.reshape(K, 1) == ar.reshape(1, K)).cast(self.dtype if self.dtype.is_float else dtypes.default_float)
    w = w.reshape(1, K, 1, *k_).expand(C, K, 1, *k_).reshape(C * K, 1, *k_)
    base = [(v - 1) * s - pb - pa + d * (k - 1) + 1 for v, s, (pb, pa), d, k in zip(O, s_, pads, d_, k_)]
    return self.reshape(N, CK, *O).conv_transpose2d(w, groups=C, stride=s_, dilation=d_, padding=pads,
                                                    output_padding=tuple(o - b for o, b in zip(out, base)))
