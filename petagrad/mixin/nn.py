"""Neural-network functionals: convolution, pooling, interpolation, activations, losses, normalization,
attention, dropout, and random initializers.

Everything here is composed from Tensor ops (movement, elementwise, reduce); nothing is device- or
dtype-specific. The central trick is `_pool`: it turns the last n dims of a tensor into sliding windows
(..., *out, *kernel) with movement ops only (pad/reshape/expand/shrink/permute: no copy), so that
convolution is `(windows * weight).sum(...)` -- one fused reduce kernel -- and pooling is a max/sum.
"""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any, Sequence
from petagrad.dtype import dtypes, promote
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.uop.gradient import custom_backward, compute_gradient
from petagrad.helpers import prod, argfix, flatten as flatten_list
if TYPE_CHECKING: from petagrad.tensor import Tensor

def _fail(*a, **k):
  from petagrad.tensor import _fail as f
  return f(*a, **k)

def _T():
  from petagrad.tensor import Tensor
  return Tensor

def _is_int(x) -> bool: return isinstance(x, int) and not isinstance(x, bool)

def _tuple(op: str, name: str, x, n: int, t, minimum: int | None = 1) -> tuple[int, ...]:
  """An int or a sequence of n ints -> n ints (each >= minimum)."""
  out = (x,) * n if _is_int(x) else tuple(x) if isinstance(x, (tuple, list)) else None
  if out is None or len(out) != n or not all(_is_int(v) for v in out):
    raise _fail(TypeError if out is None or not all(_is_int(v) for v in out) else ValueError, op,
                f"{name} must be an int or a sequence of {n} ints, got {x!r}", t)
  if minimum is not None and any(v < minimum for v in out): raise _fail(ValueError, op, f"{name} must be >= {minimum}, got {x!r}", t)
  return out

def _resolve_pads(op: str, padding, n: int, t, k: Sequence[int] | None = None, d: Sequence[int] | None = None,
                  s: Sequence[int] | None = None, allow_str: bool = False) -> list[tuple[int, int]]:
  """padding -> one (before, after) pair per spatial dim, in dim order. Accepts an int, n ints (symmetric per dim),
  n (before, after) pairs, 2n ints in torch's F.pad order (last dim first: left, right, top, bottom, ...), or
  (convolutions) 'valid' / 'same'."""
  if isinstance(padding, str):
    if not allow_str: raise _fail(ValueError, op, f"padding must be ints here, got {padding!r}", t)
    if padding == "valid": return [(0, 0)] * n
    if padding == "same":
      assert k is not None and d is not None and s is not None
      if any(v != 1 for v in s): raise _fail(ValueError, op, f"padding='same' is not supported for strided convolutions (stride {tuple(s)})", t)
      return [((dd * (kk - 1)) // 2, dd * (kk - 1) - (dd * (kk - 1)) // 2) for kk, dd in zip(k, d)]
    raise _fail(ValueError, op, f"padding string must be 'same' or 'valid', got {padding!r}", t)
  if _is_int(padding): return [(padding, padding)] * n
  if isinstance(padding, (tuple, list)):
    p = tuple(padding)
    if len(p) == n and all(_is_int(v) for v in p): return [(v, v) for v in p]
    if len(p) == n and all(isinstance(v, (tuple, list)) and len(v) == 2 and all(_is_int(u) for u in v) for v in p): return [tuple(v) for v in p]  # type: ignore
    if len(p) == 2 * n and all(_is_int(v) for v in p): return [(p[2 * (n - 1 - i)], p[2 * (n - 1 - i) + 1]) for i in range(n)]
  raise _fail(ValueError, op, f"padding must be an int, {n} ints, {n} (before, after) pairs or {2 * n} ints (torch F.pad order), got {padding!r}", t)

def _shapes(op: str, x: Any, t: Any) -> tuple[int, ...]:
  """An int or a sequence of ints (a normalized_shape)."""
  from petagrad.tensor import _shape_arg
  return _shape_arg(op, (x,), t, name="normalized_shape")

def _check_tensor(op: str, name: str, x, self) -> None:
  if not isinstance(x, _T()): raise _fail(TypeError, op, f"{name} must be a Tensor, got {type(x).__name__}", self)
  if x.device != self.device: raise _fail(RuntimeError, op, f"{name} is on {x.device}, input on {self.device}", self, x)

def _reduce_loss(op: str, loss, reduction: str, self):
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  if reduction == "mean": return loss.mean()
  raise _fail(ValueError, op, f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}", self)

def _check_reduction(op: str, reduction: str, self, extra: tuple[str, ...] = ()) -> None:
  if reduction not in ("none", "mean", "sum") + extra:
    raise _fail(ValueError, op, f"reduction must be one of {('none', 'mean', 'sum') + extra}, got {reduction!r}", self)

def _erfinv(x):
  """Inverse error function (M. Giles' single-precision polynomial approximation), composed from log/sqrt."""
  w = -((1 - x) * (1 + x)).log()
  a = w - 2.5
  p1 = 2.81022636e-08
  for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941):
    p1 = c + p1 * a
  b = w.maximum(5.0).sqrt() - 3
  p2 = -0.000200214257
  for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682):
    p2 = c + p2 * b
  return (w < 5.0).where(p1, p2) * x

_FLOAT_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}

def _gain(op: str, nonlinearity: str, a: float) -> float:
  if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sigmoid"): return 1.0
  if nonlinearity == "tanh": return 5.0 / 3
  if nonlinearity == "relu": return math.sqrt(2.0)
  if nonlinearity == "leaky_relu": return math.sqrt(2.0 / (1 + a * a))
  if nonlinearity == "selu": return 3.0 / 4
  raise _fail(ValueError, op, f"unsupported nonlinearity {nonlinearity!r}")

def _fans(op: str, shape: tuple[int, ...]) -> tuple[int, int]:
  if len(shape) < 2: raise _fail(ValueError, op, f"fan in and fan out can not be computed for a shape with fewer than 2 dims: {shape}")
  rf = prod(shape[2:])
  return shape[1] * rf, shape[0] * rf

def _check_kernel_ndim(op: str, weight: Any, ndim: int, x: Any) -> None:
  _check_tensor(op, "weight", weight, x)
  if weight.ndim != ndim:
    raise _fail(ValueError, op, f"weight must be (cout, cin/groups, *kernel) with {ndim - 2} kernel dims, got shape {weight.shape}", x, weight)

def _check_axes(op: str, axis: Any, x: Any) -> Any:
  """Resolve an int or a tuple of axes with `op` named in the error; returns axis unchanged."""
  from petagrad.tensor import _resolve_axis
  for a in (tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)): _resolve_axis(op, a, x.ndim, x)   # a non-int raises TypeError
  return axis

def _conv_backward(ctx: UOp, node: UOp) -> tuple[UOp | None, UOp | None]:
  """Gradients of a convolution's input and weight (node = CUSTOM_GRAD(value, x, weight))."""
  from petagrad.tensor import Tensor
  value, x, w = node.src
  _, stride, pads, dilation, groups = node.arg
  dx = Tensor(ctx).conv_transpose2d(Tensor(w), None, groups, stride, dilation, 0)
  # the transposed convolution covers the padded input up to the last position a window read: extend it to the
  # whole padded input, then drop the padding
  dx = dx.pad(((0, 0), (0, 0)) + tuple((0, L + pb + pa - F) for L, (pb, pa), F in zip(x.shape[2:], pads, dx.shape[2:])))
  dx = dx.shrink(((0, x.shape[0]), (0, x.shape[1])) + tuple((pb, pb + L) for L, (pb, _) in zip(x.shape[2:], pads)))
  if dx.dtype != x.dtype: dx = dx.cast(x.dtype)
  return dx.uop, compute_gradient(value, ctx, {w}).get(w)

custom_backward["conv"] = _conv_backward

def _pool_backward(ctx: UOp, node: UOp) -> tuple[UOp]:
  """Gradient of the sliding-window view (..., *L) -> (..., *o, *k) (node = CUSTOM_GRAD(view, x)): every kernel
  offset's slice of ctx, spread out by the stride and shifted to where that offset read, summed (col2im)."""
  from petagrad.tensor import Tensor
  import itertools
  _, k_, s_, d_ = node.arg
  x, n = node.src[1], len(k_)
  pre, L_ = x.shape[:-n], x.shape[-n:]
  o_ = ctx.shape[len(pre):len(pre) + n]
  # spread out by the stride once ((o) -> (o*s), zeros between) and realize it: it is read k times over, may hold
  # the forward's window view (a max-pool's argmax mask), and the pieces below are then plain shifted slices
  g = Tensor(ctx)
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

custom_backward["pool"] = _pool_backward

class NNMixin:
  __slots__ = ()

  # ================================================================== sliding windows
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
      if d * (k - 1) + 1 > L: raise _fail(ValueError, "pool", f"kernel size {tuple(k_)} (dilation {d_}) is larger than the input {self.shape[pre:]}", self)
    x = self
    for i, (k, s, d) in enumerate(zip(k_, s_, d_)): x = x._window1(pre + 2 * i, k, s, d)
    # (..., k1, o1, k2, o2, ...) -> (..., o1, o2, ..., k1, k2, ...)
    x = x.permute(tuple(range(pre)) + tuple(pre + 2 * i + 1 for i in range(n)) + tuple(pre + 2 * i for i in range(n)))
    # the backward of that view is index math dividing per element; windows scattered back one kernel offset at a
    # time (col2im, _pool_backward) is a sum of shifted pads
    return x._new(UOp(Ops.CUSTOM_GRAD, x.dtype, (x.uop, self.uop), ("pool", tuple(k_), s_, d_)), self)

  # ================================================================== convolution
  def conv2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0, dtype=None) -> Tensor:
    """N-d convolution (cross-correlation) like torch.nn.functional.conv2d; the number of spatial dims comes from
    the weight (cout, cin/groups, *kernel). Input (N, cin, *spatial) or unbatched (cin, *spatial).
    padding: int, one int per dim, one (before, after) pair per dim, 2n ints in F.pad order, 'same' or 'valid'.

    >>> from petagrad import Tensor
    >>> Tensor.ones(1, 1, 3, 3).conv2d(Tensor.ones(1, 1, 2, 2)).tolist()
    [[[[4.0, 4.0], [4.0, 4.0]]]]
    """
    op = {1: "conv1d", 2: "conv2d", 3: "conv3d"}.get(getattr(weight, "ndim", 4) - 2, "conv")
    _check_tensor(op, "weight", weight, self)
    if weight.ndim < 3: raise _fail(ValueError, op, f"weight must be (cout, cin/groups, *kernel), got shape {weight.shape}", self, weight)
    n = weight.ndim - 2
    if self.ndim == n + 1: return self.unsqueeze(0).conv2d(weight, bias, groups, stride, dilation, padding, dtype).squeeze(0)
    if self.ndim != n + 2: raise _fail(ValueError, op, f"a {n}-d kernel {weight.shape} needs a {n + 2}-d (batched) or {n + 1}-d input, got {self.ndim}-d", self, weight)
    if not _is_int(groups) or groups < 1: raise _fail(ValueError, op, f"groups must be a positive int, got {groups!r}", self, weight)
    (bs, cin_), (cout, cin), HW = self.shape[:2], weight.shape[:2], weight.shape[2:]
    if cin * groups != cin_: raise _fail(ValueError, op, f"input has {cin_} channels but the weight expects {cin} x groups={groups} = {cin * groups}", self, weight)
    if cout % groups: raise _fail(ValueError, op, f"out channels ({cout}) must be divisible by groups ({groups})", self, weight)
    if any(k == 0 for k in HW): raise _fail(ValueError, op, f"kernel size must be positive, got {HW}", self, weight)
    s_, d_ = _tuple(op, "stride", stride, n, self), _tuple(op, "dilation", dilation, n, self)
    pads = _resolve_pads(op, padding, n, self, HW, d_, s_, allow_str=True)
    for L, (pb, pa), k, d in zip(self.shape[2:], pads, HW, d_):
      if L + pb + pa < d * (k - 1) + 1:
        raise _fail(ValueError, op, f"kernel {HW} (dilation {d_}) is larger than the padded input {tuple(L + b + a for L, (b, a) in zip(self.shape[2:], pads))}", self, weight)
    if bias is not None:
      _check_tensor(op, "bias", bias, self)
      if bias.shape != (cout,): raise _fail(ValueError, op, f"bias must have shape ({cout},), got {bias.shape}", self, weight, bias)
    rcout, padded = cout // groups, any(p != (0, 0) for p in pads)
    # enough output channels to fill vector lanes: the weight is stored with output channels contiguous, so the
    # kernel computes them as SIMD lanes (a matmul's register tile), and a padded input is written once with
    # its zeros so the inner loop reads it without masks. Both are small copies next to the convolution.
    channels_last = rcout % 8 == 0
    x = self.pad(((0, 0), (0, 0)) + tuple(pads)) if padded else self
    if channels_last and padded: x = x.contiguous()
    x = x._pool(HW, s_, d_)   # (bs, groups*cin, *oyx, *HW)
    oyx = x.shape[2:2 + n]
    x = x.reshape(bs, groups, cin, 1, *oyx, *HW).expand(bs, groups, cin, rcout, *oyx, *HW)
    x = x.permute(0, 1, 3, *[4 + i for i in range(n)], 2, *[4 + n + i for i in range(n)])   # (bs, groups, rcout, *oyx, cin, *HW)
    w = weight.reshape(groups, rcout, cin, *HW)
    if channels_last: w = w.permute(0, *range(2, 3 + n), 1).contiguous().permute(0, 2 + n, *range(1, 2 + n))   # stored (groups, cin, *HW, rcout)
    wb = w.reshape(1, groups, rcout, *[1] * n, cin, *HW)
    # float16/bfloat16 multiply in float32 as matmul does (and torch): products rounded to 11 or 8 bits, then summed,
    # lose an output that cancels
    if dtype is None and promote(self.dtype, weight.dtype) in (dtypes.float16, dtypes.bfloat16): x, wb = x.cast(dtypes.float32), wb.cast(dtypes.float32)
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
  def conv1d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0, dtype=None) -> Tensor:
    """conv2d with a 1-d kernel (same signature as conv2d; pass torch's stride/padding/dilation/groups by keyword)."""
    _check_kernel_ndim("conv1d", weight, 3, self)
    return self.conv2d(weight, bias, groups, stride, dilation, padding, dtype)
  def conv3d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0, dtype=None) -> Tensor:
    """conv2d with a 3-d kernel (same signature as conv2d)."""
    _check_kernel_ndim("conv3d", weight, 5, self)
    return self.conv2d(weight, bias, groups, stride, dilation, padding, dtype)

  def conv_transpose2d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0, output_padding=0) -> Tensor:
    """N-d transposed convolution like torch.nn.functional.conv_transpose2d; weight (cin, cout/groups, *kernel).
    Composed as a convolution of the stride-dilated input with the flipped, transposed weight."""
    op = {1: "conv_transpose1d", 2: "conv_transpose2d", 3: "conv_transpose3d"}.get(getattr(weight, "ndim", 4) - 2, "conv_transpose")
    _check_tensor(op, "weight", weight, self)
    if weight.ndim < 3: raise _fail(ValueError, op, f"weight must be (cin, cout/groups, *kernel), got shape {weight.shape}", self, weight)
    n = weight.ndim - 2
    if self.ndim == n + 1: return self.unsqueeze(0).conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding).squeeze(0)
    if self.ndim != n + 2: raise _fail(ValueError, op, f"a {n}-d kernel {weight.shape} needs a {n + 2}-d (batched) or {n + 1}-d input, got {self.ndim}-d", self, weight)
    if not _is_int(groups) or groups < 1: raise _fail(ValueError, op, f"groups must be a positive int, got {groups!r}", self, weight)
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
      if bias.shape != (rcout * groups,): raise _fail(ValueError, op, f"bias must have shape ({rcout * groups},), got {bias.shape}", self, weight, bias)
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
  def conv_transpose1d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0, output_padding=0) -> Tensor:
    """conv_transpose2d with a 1-d kernel (same signature as conv_transpose2d)."""
    return self.conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding)
  def conv_transpose3d(self, weight: Tensor, bias: Tensor | None = None, groups: int = 1, stride=1, dilation=1, padding=0, output_padding=0) -> Tensor:
    """conv_transpose2d with a 3-d kernel (same signature as conv_transpose2d)."""
    return self.conv_transpose2d(weight, bias, groups, stride, dilation, padding, output_padding)

  def unfold(self, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """torch.nn.functional.unfold (im2col): (N, C, *spatial) -> (N, C*prod(kernel), L) sliding blocks.
    Note: this is F.unfold, not torch.Tensor.unfold(dimension, size, step)."""
    n = len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 2
    if self.ndim == n + 1: return self.unsqueeze(0).unfold(kernel_size, dilation, padding, stride).squeeze(0)
    if self.ndim != n + 2: raise _fail(ValueError, "unfold", f"expected a {n + 1}-d or {n + 2}-d input for a {n}-d kernel, got shape {self.shape}", self)
    k_ = _tuple("unfold", "kernel_size", kernel_size, n, self)
    d_, s_ = _tuple("unfold", "dilation", dilation, n, self), _tuple("unfold", "stride", stride, n, self)
    pads = _resolve_pads("unfold", padding, n, self)
    if any(p < 0 for pr in pads for p in pr): raise _fail(ValueError, "unfold", f"padding must be >= 0, got {padding!r}", self)
    for L, (pb, pa), k, d in zip(self.shape[2:], pads, k_, d_):
      if L + pb + pa < d * (k - 1) + 1: raise _fail(ValueError, "unfold", f"kernel {k_} (dilation {d_}) is larger than the padded input", self)
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

  # ================================================================== pooling
  def _pool_setup(self, op: str, kernel_size, stride, dilation, padding, ceil_mode: bool, n_default: int):
    """Shared argument handling for max/avg pooling: (k, s, d, explicit pads, pads with the ceil-mode extra)."""
    n = len(kernel_size) if isinstance(kernel_size, (tuple, list)) else n_default
    k_ = _tuple(op, "kernel_size", kernel_size, n, self)
    s_ = k_ if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0) else _tuple(op, "stride", stride, n, self)
    d_ = _tuple(op, "dilation", dilation, n, self)
    if self.ndim < n + 1: raise _fail(ValueError, op, f"a {n}-d pool needs an input with at least {n + 1} dims (C, *spatial), got shape {self.shape}", self)
    pads = _resolve_pads(op, padding, n, self)
    full, outs = [], []
    for L, k, s, d, (pb, pa) in zip(self.shape[-n:], k_, s_, d_, pads):
      ek = d * (k - 1) + 1
      if pb < 0 or pa < 0 or pb > ek // 2 or pa > ek // 2:
        raise _fail(ValueError, op, f"pad should be at most half of effective kernel size, but got padding={padding!r}, kernel_size={k_} and dilation={d_}", self)
      span = L + pb + pa - ek
      if span < 0: raise _fail(ValueError, op, f"kernel size {k_} (dilation {d_}) is larger than the padded input {self.shape[-n:]} + padding {padding!r}", self)
      o = (-(-span // s) if ceil_mode else span // s) + 1
      if ceil_mode and (o - 1) * s >= L + pb: o -= 1   # the last window must start inside the input or the left padding
      full.append((pb, (o - 1) * s + ek - L - pb))
      outs.append(o)
    return k_, s_, d_, pads, full

  # pooling methods take tinygrad's argument order (kernel_size, stride, dilation, padding, ...); torch's functional
  # order is (kernel_size, stride, padding, dilation, ...), so pass padding/dilation by keyword when porting torch code
  def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode: bool = False, return_indices: bool = False):
    """Max pooling over the last len(kernel_size) dims (2 for an int), like torch.nn.functional.max_pool2d.
    return_indices=True also returns the flat (per-plane) index of each max (int64), for max_unpool2d.

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
    out = x.max(axes)
    if not return_indices: return out
    sp = self.shape[pre:]
    T = type(self)
    idx = T.arange(prod(sp), device=self.device).reshape(sp).pad(tuple(full), value=-1)._pool(k_, s_, d_)   # (*O, *K)
    big = prod(sp)
    hit = x == out.reshape(out.shape + (1,) * n)
    # first occurrence of the max (the smallest input index) like torch
    ind = hit.where(idx, big).min(axes).cast(dtypes.int64)
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
      if not _is_int(divisor_override) or divisor_override == 0: raise _fail(ValueError, op, f"divisor_override must be a nonzero int, got {divisor_override!r}", self)
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
    if indices.shape != self.shape: raise _fail(ValueError, op, f"indices shape {indices.shape} must match the input shape {self.shape}", self, indices)
    if indices.dtype.is_float or indices.dtype.is_bool: raise _fail(TypeError, op, f"indices must be an integer tensor, got {indices.dtype}", self, indices)
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
    if len(osz) != n or not all(_is_int(o) and o > 0 for o in osz): raise _fail(ValueError, op, f"output_size must be positive ints (or None), got {output_size!r}", self)
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
  def adaptive_max_pool1d(self, output_size, return_indices: bool = False): return self._adaptive_max("adaptive_max_pool1d", output_size, return_indices, 1)
  def adaptive_max_pool3d(self, output_size, return_indices: bool = False): return self._adaptive_max("adaptive_max_pool3d", output_size, return_indices, 3)
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
    out = w.max(axes)
    if not return_indices: return out
    idx = T.arange(prod(sp), device=self.device).reshape(sp)
    hit = mask & (w == out.reshape(out.shape + (1,) * n))
    return out, hit.where(idx, prod(sp)).min(axes).cast(dtypes.int64)

  # ================================================================== interpolation and padding modes
  def interpolate(self, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                  recompute_scale_factor: bool | None = None) -> Tensor:
    """Resize the spatial dims (all dims after (N, C)) like torch.nn.functional.interpolate.
    mode: 'nearest', 'nearest-exact', 'linear' (3-d), 'bilinear' / 'bicubic' (4-d), 'trilinear' (5-d), 'area'.
    Each dim is a multiply-sum with a small (out, in) interpolation matrix (one reduce kernel per resized dim)."""
    op = "interpolate"
    n = self.ndim - 2
    if n < 1: raise _fail(ValueError, op, f"input must be (N, C, *spatial) with at least one spatial dim, got shape {self.shape}", self)
    modes = {"nearest": None, "nearest-exact": None, "area": None, "linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
    if not isinstance(mode, str) or mode not in modes: raise _fail(ValueError, op, f"mode must be one of {tuple(modes)}, got {mode!r}", self)
    if modes[mode] is not None and modes[mode] != n: raise _fail(ValueError, op, f"mode {mode!r} needs a {modes[mode] + 2}-d input, got {self.ndim}-d", self)
    if align_corners is not None and modes[mode] is None: raise _fail(ValueError, op, f"align_corners only applies to the linear modes, not {mode!r}", self)
    if (size is None) == (scale_factor is None): raise _fail(ValueError, op, "exactly one of size and scale_factor must be given", self)
    sp = self.shape[2:]
    if size is not None:
      osz = (size,) * n if not isinstance(size, (tuple, list)) else tuple(size)
      if len(osz) != n or not all(_is_int(o) and o > 0 for o in osz): raise _fail(ValueError, op, f"size must be {n} positive ints, got {size!r}", self)
      scales: list[float | None] = [None] * n
    else:
      sf = (scale_factor,) * n if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
      if len(sf) != n or not all(isinstance(v, (int, float)) and v > 0 for v in sf): raise _fail(ValueError, op, f"scale_factor must be {n} positive numbers, got {scale_factor!r}", self)
      osz = tuple(int(math.floor(L * f)) for L, f in zip(sp, sf))
      if any(o <= 0 for o in osz): raise _fail(ValueError, op, f"output size {osz} is empty (scale_factor {scale_factor!r})", self)
      scales = [None if recompute_scale_factor else float(f) for f in sf]
    if mode == "area": return self.adaptive_avg_pool2d(osz)
    x = self if mode in ("nearest", "nearest-exact") else self._float(op)
    T = type(self)
    fdt = dtypes.float64 if x.dtype == dtypes.float64 else dtypes.float32
    for i, (L, O) in enumerate(zip(sp, osz)):
      ax = 2 + i
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
      m = ((j == i0).where(1 - lam, 0.0) + (j == i1).where(lam, 0.0)).cast(x.dtype).reshape((O, L) + (1,) * (n - 1 - i))
      x = (x.unsqueeze(ax) * m).sum(ax + 1)
    return x

  def pad_mode(self, padding: Sequence, mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pad with mode 'constant', 'reflect', 'replicate' or 'circular' (torch.nn.functional.pad). `padding` is torch's flat
    form (last dim first: left, right, top, bottom, ...) or one (before, after) pair per dim."""
    return self.pad(padding, mode=mode, value=value)   # Tensor.pad parses the padding and routes the modes here
  def _pad_mode(self, pairs: Sequence[tuple[int, int]], mode: str) -> Tensor:
    """Non-constant padding with one (before, after) pair per dim (the hook the core Tensor.pad calls)."""
    if mode == "reflect": return self._pad_reflect(pairs)
    if mode == "replicate": return self._pad_replicate(pairs)
    if mode == "circular": return self._pad_circular(pairs)
    raise _fail(ValueError, "pad", f"mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}", self)
  def _pad_crop(self, pairs) -> tuple[Tensor, list[tuple[int, int]]]:
    """Apply the negative parts of pairs (a crop); returns the cropped tensor and the remaining non-negative pairs."""
    x = self
    if any(b < 0 or a < 0 for b, a in pairs):
      x = x.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, x.shape)))
    return x, [(max(b, 0), max(a, 0)) for b, a in pairs]
  def _pad_each(self, pairs, piece, mode: str) -> Tensor:
    x, pairs = self._pad_crop(pairs)
    for ax, (b, a) in enumerate(pairs):
      if not b and not a: continue
      L = x.shape[ax]
      parts = [p for p in (piece(x, ax, L, b, True), x, piece(x, ax, L, a, False)) if p is not None]
      x = parts[0].cat(*parts[1:], dim=ax)
    return x
  def _pad_reflect(self, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """Reflect about the edge (the edge is not repeated): [a b c d] pad 2 -> [c b a b c d c b]."""
    for ax, ((b, a), L) in enumerate(zip(pairs, self.shape)):
      if b >= L or a >= L: raise _fail(ValueError, "pad", f"reflect padding {tuple(pairs)} must be smaller than the dim ({L} in dim {ax})", self)
    def piece(x, ax, L, p, left):
      if not p: return None
      rng = (1, p + 1) if left else (L - 1 - p, L - 1)
      return x.shrink(tuple(rng if i == ax else None for i in range(x.ndim))).flip(ax)
    return self._pad_each(pairs, piece, "reflect")
  def _pad_replicate(self, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """Repeat the edge value: [a b c] pad 2 -> [a a a b c c c]."""
    for ax, ((b, a), L) in enumerate(zip(pairs, self.shape)):
      if L == 0 and (b > 0 or a > 0): raise _fail(ValueError, "pad", f"cannot replicate-pad an empty dim {ax}", self)
    def piece(x, ax, L, p, left):
      if not p: return None
      e = x.shrink(tuple(((0, 1) if left else (L - 1, L)) if i == ax else None for i in range(x.ndim)))
      return e.expand(tuple(p if i == ax else s for i, s in enumerate(e.shape)))
    return self._pad_each(pairs, piece, "replicate")
  def _pad_circular(self, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """Wrap around: [a b c] pad 1 -> [c a b c a]."""
    for ax, ((b, a), L) in enumerate(zip(pairs, self.shape)):
      if b > L or a > L: raise _fail(ValueError, "pad", f"circular padding {tuple(pairs)} must be at most the dim ({L} in dim {ax})", self)
    def piece(x, ax, L, p, left):
      if not p: return None
      return x.shrink(tuple(((L - p, L) if left else (0, p)) if i == ax else None for i in range(x.ndim)))
    return self._pad_each(pairs, piece, "circular")

  # ================================================================== activations
  def elu(self, alpha: float = 1.0) -> Tensor:
    x = self._float("elu")
    return (x > 0).where(x, alpha * (x.minimum(0.0).exp() - 1))
  def celu(self, alpha: float = 1.0) -> Tensor:
    x = self._float("celu")
    # no outer minimum(0): exp(min(x, 0) / alpha) - 1 <= 0 already, and where it rounds to 0 (|x| < 7e-4 in float16)
    # the tie halved the gradient
    return x.maximum(0.0) + alpha * ((x.minimum(0.0) / alpha).exp() - 1)
  def selu(self) -> Tensor:
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return scale * self.elu(alpha)
  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
    x = self._float("leaky_relu")
    return (x > 0).where(x, x * neg_slope)
  def relu6(self) -> Tensor: return self.relu() - (self - 6).relu()
  def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor: return self.clip(min_val, max_val)
  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    """torch.nn.functional.hardsigmoid: relu6(x + 3) / 6 (alpha, beta as in tinygrad)."""
    y = alpha * self._float("hardsigmoid") + beta
    return y.relu() - (y - 1).relu()
  def hardswish(self) -> Tensor: return self * (self + 3).relu6() * (1 / 6)
  def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta*x)) / beta, and x where beta*x > threshold (torch)."""
    x = self._float("softplus")
    z = x * beta
    sp = z.maximum(0.0) + ((-z.abs()).exp() + 1).log()
    return (z > threshold).where(x, sp * (1 / beta))
  def softsign(self) -> Tensor: return self / (1 + self.abs())
  def logsigmoid(self) -> Tensor: return -(-self).softplus()
  def mish(self) -> Tensor: return self * self.softplus().tanh()
  def quick_gelu(self) -> Tensor: return self * (self * 1.702).sigmoid()
  def glu(self, dim: int = -1) -> Tensor:
    from petagrad.tensor import _resolve_axis
    d = _resolve_axis("glu", dim, self.ndim, self)
    if self.shape[d] % 2: raise _fail(RuntimeError, "glu", f"halving dimension must be even, but dimension {d} is size {self.shape[d]}", self)
    a, b = self.chunk(2, d)
    return a * b.sigmoid()
  def softmin(self, axis: int = -1) -> Tensor: return (-self).softmax(axis)
  def tanhshrink(self) -> Tensor: return self - self.tanh()
  def hardshrink(self, lambd: float = 0.5) -> Tensor: return (self.abs() > lambd).where(self, 0)
  def softshrink(self, lambd: float = 0.5) -> Tensor:
    return (self > lambd).where(self - lambd, (self < -lambd).where(self + lambd, 0))
  def threshold(self, threshold: float, value: float) -> Tensor: return (self > threshold).where(self, value)

  # ================================================================== losses
  def _class_target(self, op: str, target: Tensor) -> tuple[int, bool]:
    """(class dim, target holds probabilities) with torch's shape rules; raises on a bad target."""
    _check_tensor(op, "target", target, self)
    if self.ndim == 0: raise _fail(ValueError, op, "input must have at least 1 dim (classes)", self, target)
    cd = 0 if self.ndim == 1 else 1
    if target.shape == self.shape and target.dtype.is_float: return cd, True
    if target.dtype.is_float or target.dtype.is_bool:
      raise _fail(TypeError, op, f"target must be class indices (an integer tensor) or probabilities with the input's shape {self.shape}, got {target.shape} {target.dtype}", self, target)
    want = self.shape[:cd] + self.shape[cd + 1:]
    if target.shape != want: raise _fail(ValueError, op, f"class-index target must have shape {want} for input {self.shape}, got {target.shape}", self, target)
    return cd, False
  def _class_weight(self, op: str, weight: Tensor | None, cd: int, target=None):
    if weight is None: return None
    _check_tensor(op, "weight", weight, self)
    C = self.shape[cd]
    if weight.shape != (C,): raise _fail(ValueError, op, f"weight must have shape ({C},) (one per class), got {weight.shape}", self, weight)
    return weight.reshape((C,) + (1,) * (self.ndim - cd - 1))
  def _index_nll(self, op: str, logp: Tensor, target: Tensor, cd: int, w, ignore_index: int, reduction: str, smoothing: float = 0.0) -> Tensor:
    T = type(self)
    C = self.shape[cd]
    from petagrad.mixin.indexing import _known_values
    known = _known_values(target)   # class indices already in memory are checked like PyTorch does, others when computed
    if known is not None:
      bad = next((v for v in known if v != ignore_index and not 0 <= v < C), None)
      if bad is not None: raise _fail(IndexError, op, f"target {bad} is out of bounds for {C} classes (ignore_index={ignore_index})", self, target)
    elif target.numel():
      t64 = target.cast(dtypes.int64)
      target = target._checked((t64 == ignore_index) | ((t64 >= 0) & (t64 < C)), IndexError, op,
                               f"a target is out of bounds for {C} classes (ignore_index={ignore_index})", self, target)
    hot = target.unsqueeze(cd) == T.arange(C, device=self.device).cast(target.dtype).reshape((C,) + (1,) * (self.ndim - cd - 1))
    valid = target != ignore_index
    wl = logp * w if w is not None else logp
    loss = -hot.where(wl, 0.0).sum(cd)
    if smoothing: loss = (1 - smoothing) * loss - (smoothing / C) * wl.sum(cd)
    loss = valid.where(loss, 0.0)
    if reduction == "none": return loss
    if reduction == "sum": return loss.sum()
    denom = valid.where(hot.where(w, 0.0).sum(cd), 0.0).sum() if w is not None else valid.sum().cast(loss.dtype)
    return loss.sum() / denom
  def cross_entropy(self, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """torch.nn.functional.cross_entropy on logits (N, C, *d) or (C,): target is class indices (N, *d) or probabilities
    with the input's shape. Out-of-range class indices (other than ignore_index) raise IndexError when their values
    are known at the call (see the index rules in docs/ops.md) and contribute 0 when they are lazy."""
    op = "cross_entropy"
    cd, probs = self._class_target(op, target)
    _check_reduction(op, reduction, self)
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) or not 0.0 <= label_smoothing <= 1.0:
      raise _fail(ValueError, op, f"label_smoothing must be a float in [0, 1], got {label_smoothing!r}", self)
    w = self._class_weight(op, weight, cd)
    logp = self._float(op).log_softmax(cd)
    C = self.shape[cd]
    if probs:
      t = target * (1 - label_smoothing) + label_smoothing / C if label_smoothing else target
      loss = -(logp * t * w if w is not None else logp * t).sum(cd)
      return _reduce_loss(op, loss, reduction, self)
    return self._index_nll(op, logp, target, cd, w, ignore_index, reduction, label_smoothing)
  def nll_loss(self, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """torch.nn.functional.nll_loss: self holds log-probabilities (N, C, *d) or (C,); target class indices."""
    op = "nll_loss"
    cd, probs = self._class_target(op, target)
    if probs: raise _fail(TypeError, op, f"target must be class indices (an integer tensor), got {target.dtype}", self, target)
    _check_reduction(op, reduction, self)
    return self._index_nll(op, self._float(op), target, cd, self._class_weight(op, weight, cd), ignore_index, reduction)
  def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    """tinygrad's name: cross entropy of logits (N, C) with class indices (ignore_index defaults to -1 there)."""
    return self.cross_entropy(Y, ignore_index=ignore_index, label_smoothing=label_smoothing, reduction=reduction)

  def _pair_loss(self, op: str, target: Tensor) -> Tensor:
    _check_tensor(op, "target", target, self)
    if target.shape != self.shape:
      raise _fail(ValueError, op, f"target shape {target.shape} must match the input shape {self.shape}", self, target)
    return target
  def binary_cross_entropy(self, target: Tensor, weight: Tensor | None = None, reduction: str = "mean") -> Tensor:
    """torch.nn.functional.binary_cross_entropy on probabilities (logs are clamped at -100 like torch)."""
    op = "binary_cross_entropy"
    self._pair_loss(op, target)
    _check_reduction(op, reduction, self)
    x = self._float(op)
    loss = -(target * x.log().maximum(-100.0) + (1 - target) * (1 - x).log().maximum(-100.0))
    if weight is not None: loss = loss * weight
    return _reduce_loss(op, loss, reduction, self)
  def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor: return self.binary_cross_entropy(Y, reduction=reduction)
  def binary_cross_entropy_with_logits(self, target: Tensor, weight: Tensor | None = None, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    """torch.nn.functional.binary_cross_entropy_with_logits (numerically stable; pos_weight weighs the positives)."""
    op = "binary_cross_entropy_with_logits"
    self._pair_loss(op, target)
    _check_reduction(op, reduction, self)
    x = self._float(op)
    sp = (-x.abs()).exp().add(1).log() + (-x).maximum(0.0)   # log(1 + exp(-x))
    if pos_weight is not None:
      lw = (pos_weight - 1) * target + 1
      loss = (1 - target) * x + lw * sp
    else: loss = (1 - target) * x + sp
    if weight is not None: loss = loss * weight
    return _reduce_loss(op, loss, reduction, self)
  def binary_crossentropy_logits(self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    return self.binary_cross_entropy_with_logits(Y, reduction=reduction, pos_weight=pos_weight)
  def mse_loss(self, target: Tensor, reduction: str = "mean") -> Tensor:
    self._pair_loss("mse_loss", target); _check_reduction("mse_loss", reduction, self)
    return _reduce_loss("mse_loss", (self - target).square(), reduction, self)
  def l1_loss(self, target: Tensor, reduction: str = "mean") -> Tensor:
    self._pair_loss("l1_loss", target); _check_reduction("l1_loss", reduction, self)
    return _reduce_loss("l1_loss", (self - target).abs(), reduction, self)
  def smooth_l1_loss(self, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    op = "smooth_l1_loss"
    self._pair_loss(op, target); _check_reduction(op, reduction, self)
    if beta < 0: raise _fail(ValueError, op, f"beta must be >= 0, got {beta}", self)
    d = (self - target).abs()
    loss = d if beta == 0 else (d < beta).where(0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce_loss(op, loss, reduction, self)
  def huber_loss(self, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    op = "huber_loss"
    self._pair_loss(op, target); _check_reduction(op, reduction, self)
    if delta <= 0: raise _fail(ValueError, op, f"delta must be > 0, got {delta}", self)
    d = (self - target).abs()
    return _reduce_loss(op, (d < delta).where(0.5 * d * d, delta * (d - 0.5 * delta)), reduction, self)
  def kl_div(self, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """torch.nn.functional.kl_div: self holds log-probabilities; reduction also 'batchmean' (sum / batch size)."""
    op = "kl_div"
    _check_tensor(op, "target", target, self)
    from petagrad.tensor import _broadcast_shape
    _broadcast_shape(op, self, target)
    _check_reduction(op, reduction, self, ("batchmean",))
    if log_target: loss = target.exp() * (target - self)
    else:
      safe = (target > 0).where(target, 1.0)
      loss = (target > 0).where(target * (safe.log() - self), (target == 0).where(-target * self, float("nan")))
    if reduction == "batchmean": return loss.sum() / (loss.shape[0] if loss.ndim else 1)
    return _reduce_loss(op, loss, reduction, self)
  def cosine_similarity(self, other: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 * x2) / (max(|x1|, eps) * max(|x2|, eps)) along dim (inputs broadcast), like torch."""
    op = "cosine_similarity"
    _check_tensor(op, "other", other, self)
    from petagrad.tensor import _broadcast_shape, _resolve_axis
    shape = _broadcast_shape(op, self, other)
    a, b = self._float(op).expand(shape), other._float(op).expand(shape)
    d = _resolve_axis(op, dim, len(shape), self)
    na = a.square().sum(d, keepdim=True).sqrt().maximum(eps)
    nb = b.square().sum(d, keepdim=True).sqrt().maximum(eps)
    return ((a / na) * (b / nb)).sum(d)
  def pairwise_distance(self, other: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    _check_tensor("pairwise_distance", "other", other, self)
    d = (self - other + eps).abs()
    return (d ** p).sum(-1, keepdim=keepdim) ** (1 / p)
  def margin_ranking_loss(self, other: Tensor, target: Tensor, margin: float = 0.0, reduction: str = "mean") -> Tensor:
    _check_tensor("margin_ranking_loss", "other", other, self); _check_tensor("margin_ranking_loss", "target", target, self)
    _check_reduction("margin_ranking_loss", reduction, self)
    return _reduce_loss("margin_ranking_loss", (-target * (self - other) + margin).relu(), reduction, self)
  def hinge_embedding_loss(self, target: Tensor, margin: float = 1.0, reduction: str = "mean") -> Tensor:
    _check_tensor("hinge_embedding_loss", "target", target, self)
    _check_reduction("hinge_embedding_loss", reduction, self)
    loss = (target == 1).where(self, 0.0) + (target == -1).where((margin - self).relu(), 0.0)
    return _reduce_loss("hinge_embedding_loss", loss, reduction, self)

  # ================================================================== normalization
  def layernorm(self, axis=-1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over `axis` (int or tuple), no affine (tinygrad's Tensor.layernorm)."""
    x = self._float("layernorm")
    _check_axes("layernorm", axis, self)
    y = x - x.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()
  def layer_norm(self, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.layer_norm: normalize over the trailing dims `normalized_shape`, then weight and bias."""
    op = "layer_norm"
    ns = _shapes(op, normalized_shape, self)
    if not ns or len(ns) > self.ndim or self.shape[self.ndim - len(ns):] != ns:
      raise _fail(ValueError, op, f"normalized_shape {ns} must match the trailing dims of the input {self.shape}", self)
    for name, p in (("weight", weight), ("bias", bias)):
      if p is not None:
        _check_tensor(op, name, p, self)
        if p.shape != ns: raise _fail(ValueError, op, f"{name} must have shape {ns}, got {p.shape}", self, p)
    x = self.layernorm(tuple(range(-len(ns), 0)), eps)
    if weight is not None: x = x * weight
    return x + bias if bias is not None else x
  def rms_norm(self, normalized_shape=None, weight: Tensor | None = None, eps: float | None = None, axis=None) -> Tensor:
    """torch.nn.functional.rms_norm: x / sqrt(mean(x^2) + eps) over the trailing dims `normalized_shape` (or `axis`;
    default: the last dim), times weight. eps None: the dtype's machine epsilon (torch)."""
    op = "rms_norm"
    x = self._float(op)
    if normalized_shape is not None and axis is not None: raise _fail(ValueError, op, "give normalized_shape or axis, not both", self)
    if axis is not None: axes = _check_axes(op, axis, self)
    else:
      ns = (self.shape[-1],) if normalized_shape is None else _shapes(op, normalized_shape, self)
      if not ns or len(ns) > self.ndim or self.shape[self.ndim - len(ns):] != ns:
        raise _fail(ValueError, op, f"normalized_shape {ns} must match the trailing dims of the input {self.shape}", self)
      axes = tuple(range(-len(ns), 0))
    e = _FLOAT_EPS.get(x.dtype.name, 2.0 ** -23) if eps is None else eps
    out = x * (x * x).mean(axes, keepdim=True).add(e).rsqrt()
    if weight is not None:
      _check_tensor(op, "weight", weight, self)
      out = out * weight
    return out
  def batchnorm(self, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor, axis=1) -> Tensor:
    """tinygrad's Tensor.batchnorm: (x - mean) * weight * invstd + bias, the 1-d params broadcast along `axis`."""
    axes = (axis,) if _is_int(axis) else tuple(axis)
    from petagrad.tensor import _resolve_axis
    axes = tuple(_resolve_axis("batchnorm", a, self.ndim, self) for a in axes)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    want = tuple(self.shape[a] for a in axes)
    for name, t in (("weight", weight), ("bias", bias), ("mean", mean), ("invstd", invstd)):
      if t is None: continue
      _check_tensor("batchnorm", name, t, self)
      if t.shape not in (want, shape) and t.numel() != 1:
        raise _fail(ValueError, "batchnorm", f"{name} must have shape {want} (the input's dims {axes}), got {t.shape}", self, t)
    def r(t): return t.reshape(shape) if t.ndim == len(axes) and t.shape != shape else t
    x = self - r(mean)
    if weight is not None: x = x * r(weight)
    ret = x * r(invstd)
    return ret + r(bias) if bias is not None else ret
  def batch_norm(self, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None, bias: Tensor | None = None,
                 training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.batch_norm on (N, C, *). training: normalize with the batch statistics and update the
    running stats in place (running_var with the unbiased variance); otherwise use the running stats."""
    op = "batch_norm"
    if self.ndim < 2: raise _fail(ValueError, op, f"input must be (N, C, *), got shape {self.shape}", self)
    C = self.shape[1]
    for name, p in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
      if p is not None:
        _check_tensor(op, name, p, self)
        if p.shape != (C,): raise _fail(ValueError, op, f"{name} must have shape ({C},), got {p.shape}", self, p)
    x = self._float(op)
    axes = (0,) + tuple(range(2, self.ndim))
    shape = (1, C) + (1,) * (self.ndim - 2)
    if training:
      n = prod(self.shape[a] for a in axes)
      if n == 1: raise _fail(ValueError, op, f"expected more than 1 value per channel when training, got input shape {self.shape}", self)
      mean = x.mean(axes)
      var = (x - mean.reshape(shape)).square().mean(axes)
      if n == 0: running_mean = running_var = None   # an empty batch: an empty result, the running stats stay (torch)
      if running_mean is not None: running_mean.assign((running_mean * (1 - momentum) + mean.detach() * momentum).cast(running_mean.dtype))
      if running_var is not None: running_var.assign((running_var * (1 - momentum) + var.detach() * (momentum * n / (n - 1))).cast(running_var.dtype))
    else:
      if running_mean is None or running_var is None: raise _fail(ValueError, op, "running_mean and running_var are required when training=False", self)
      mean, var = running_mean, running_var
    return x.batchnorm(weight, bias, mean, (var + eps).rsqrt(), axis=1)
  def instance_norm(self, running_mean: Tensor | None = None, running_var: Tensor | None = None, weight: Tensor | None = None,
                    bias: Tensor | None = None, use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.instance_norm: normalize each (sample, channel) plane over its spatial dims."""
    op = "instance_norm"
    if self.ndim < 3: raise _fail(ValueError, op, f"input must be (N, C, *spatial), got shape {self.shape}", self)
    N, C = self.shape[:2]
    for name, p in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
      if p is not None:
        _check_tensor(op, name, p, self)
        if p.shape != (C,): raise _fail(ValueError, op, f"{name} must have shape ({C},), got {p.shape}", self, p)
    x = self._float(op)
    axes = tuple(range(2, self.ndim))
    shape = (1, C) + (1,) * (self.ndim - 2)
    if use_input_stats:
      n = prod(self.shape[2:])
      mean = x.mean(axes, keepdim=True)
      var = (x - mean).square().mean(axes, keepdim=True)
      if running_mean is not None: running_mean.assign((running_mean * (1 - momentum) + mean.detach().reshape(N, C).mean(0) * momentum).cast(running_mean.dtype))
      if running_var is not None and n > 1:
        running_var.assign((running_var * (1 - momentum) + var.detach().reshape(N, C).mean(0) * (momentum * n / (n - 1))).cast(running_var.dtype))
      y = (x - mean) * (var + eps).rsqrt()
    else:
      if running_mean is None or running_var is None: raise _fail(ValueError, op, "running_mean and running_var are required when use_input_stats=False", self)
      y = (x - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    if weight is not None: y = y * weight.reshape(shape)
    return y + bias.reshape(shape) if bias is not None else y
  def group_norm(self, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.group_norm: normalize over (channels of a group, *spatial) per sample, then per-channel affine."""
    op = "group_norm"
    if self.ndim < 2: raise _fail(ValueError, op, f"input must be (N, C, *), got shape {self.shape}", self)
    N, C = self.shape[:2]
    if not _is_int(num_groups) or num_groups < 1 or C % num_groups:
      raise _fail(ValueError, op, f"num_groups ({num_groups!r}) must be a positive int that divides the channels ({C})", self)
    for name, p in (("weight", weight), ("bias", bias)):
      if p is not None:
        _check_tensor(op, name, p, self)
        if p.shape != (C,): raise _fail(ValueError, op, f"{name} must have shape ({C},), got {p.shape}", self, p)
    x = self._float(op).reshape(N, num_groups, (C // num_groups) * prod(self.shape[2:])).layernorm(-1, eps).reshape(self.shape)
    shape = (1, C) + (1,) * (self.ndim - 2)
    if weight is not None: x = x * weight.reshape(shape)
    return x + bias.reshape(shape) if bias is not None else x
  def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """torch.nn.functional.normalize: x / max(||x||_p, eps) along dim."""
    x = self._float("normalize")
    n = x.abs().pow(p).sum(dim, keepdim=True).pow(1 / p) if p != 2 else x.square().sum(dim, keepdim=True).sqrt()
    return x / n.maximum(eps)

  # ================================================================== dropout and attention
  def dropout(self, p: float = 0.5) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) -- only when Tensor.training is True
    (an identity otherwise)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)): raise _fail(TypeError, "dropout", f"p must be a float, got {type(p).__name__} {p!r}", self)
    if not 0.0 <= p <= 1.0: raise _fail(ValueError, "dropout", f"dropout probability has to be between 0 and 1, but got {p}", self)
    if not type(self).training or p == 0: return self
    if p == 1: return self * 0
    keep = type(self).rand(*self.shape, device=self.device) >= p
    return keep.where(self, 0) * (1.0 / (1.0 - p))
  def scaled_dot_product_attention(self, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                   is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v, like torch.nn.functional.scaled_dot_product_attention: q (..., L, E),
    k (..., S, E), v (..., S, Ev). A bool mask keeps True; a float mask is added. is_causal: the top-left lower
    triangle. Like torch, dropout_p > 0 drops attention weights regardless of Tensor.training."""
    op = "scaled_dot_product_attention"
    _check_tensor(op, "key", key, self); _check_tensor(op, "value", value, self)
    q, k, v = self, key, value
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2: raise _fail(ValueError, op, "query, key and value need at least 2 dims", q, k, v)
    if q.shape[-1] != k.shape[-1]: raise _fail(ValueError, op, f"query and key embedding dims differ: {q.shape[-1]} vs {k.shape[-1]}", q, k, v)
    if k.shape[-2] != v.shape[-2]: raise _fail(ValueError, op, f"key and value sequence lengths differ: {k.shape[-2]} vs {v.shape[-2]}", q, k, v)
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
      hq, hk = q.shape[-3], k.shape[-3]
      if hq % hk: raise _fail(ValueError, op, f"query heads ({hq}) must be a multiple of key/value heads ({hk})", q, k, v)
      def rep(t):
        return t.unsqueeze(-3).expand(t.shape[:-2] + (hq // hk,) + t.shape[-2:]).reshape(t.shape[:-3] + (hq,) + t.shape[-2:])
      k, v = rep(k), rep(v)
    L, S = q.shape[-2], k.shape[-2]
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qk = q.matmul(k.transpose(-1, -2)) * sc
    T = type(self)
    if is_causal:
      if attn_mask is not None: raise _fail(ValueError, op, "give attn_mask or is_causal, not both", q, k, v)
      attn_mask = T.arange(L, device=self.device).reshape(L, 1) >= T.arange(S, device=self.device).reshape(1, S)
    if attn_mask is not None:
      _check_tensor(op, "attn_mask", attn_mask, self)
      from petagrad.tensor import _broadcast_shape
      _broadcast_shape(op, qk, attn_mask)
      qk = attn_mask.where(qk, -float("inf")) if attn_mask.dtype.is_bool else qk + attn_mask
    w = qk.softmax(-1)
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)): raise _fail(TypeError, op, f"dropout_p must be a float, got {dropout_p!r}", q)
    if dropout_p > 0:
      if dropout_p > 1: raise _fail(ValueError, op, f"dropout_p must be in [0, 1], got {dropout_p}", q)
      keep = T.rand(*w.shape, device=self.device) >= dropout_p
      w = keep.where(w, 0) * (1.0 / (1.0 - dropout_p)) if dropout_p < 1 else w * 0
    return w.matmul(v)

  # ================================================================== random
  def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
    """Sample class indices from unnormalized non-negative weights (C,) or (B, C), like torch.multinomial.
    With replacement: inverse CDF (cumsum, then count the CDF entries below a uniform draw). Without: Gumbel keys and
    num_samples rounds of argmax that mask the chosen class (fine for small num_samples)."""
    op = "multinomial"
    if self.ndim not in (1, 2): raise _fail(ValueError, op, f"probabilities must be 1-d or 2-d, got shape {self.shape}", self)
    if not _is_int(num_samples) or num_samples < 1: raise _fail(ValueError, op, f"num_samples must be a positive int, got {num_samples!r}", self)
    C = self.shape[-1]
    if C == 0: raise _fail(ValueError, op, "cannot sample from an empty distribution", self)
    if not replacement and num_samples > C: raise _fail(ValueError, op, f"cannot sample {num_samples} > {C} classes without replacement", self)
    T = type(self)
    p = (self if self.ndim == 2 else self.unsqueeze(0))._float(op).detach()
    B = p.shape[0]
    ar = T.arange(C, device=self.device)
    if replacement:
      if hasattr(p, "cumsum"): cdf = p.cumsum(-1)   # (B, C)
      else: cdf = p.matmul((ar.reshape(C, 1) <= ar.reshape(1, C)).cast(p.dtype))
      u = T.rand(B, num_samples, 1, device=self.device, dtype=p.dtype) * cdf[:, C - 1:].reshape(B, 1, 1)
      out = (cdf.reshape(B, 1, C) <= u).sum(-1).minimum(C - 1)
    else:
      u = T.rand(B, C, device=self.device, dtype=dtypes.float32)
      keys = p.log().cast(dtypes.float32) - (-(u.maximum(1e-30).log())).log()
      picks = []
      for _ in range(num_samples):
        a = keys.argmax(-1, keepdim=True)
        picks.append(a)
        keys = (ar == a).where(-float("inf"), keys)
      out = picks[0].cat(*picks[1:], dim=-1)
    out = out.cast(dtypes.int64)
    return out if self.ndim == 2 else out.reshape(num_samples)
  def bernoulli(self, p: float | None = None) -> Tensor:
    """0/1 samples: with probability self (torch.bernoulli(input)), or with probability p for every element
    (like torch.Tensor.bernoulli_(p)). Same dtype as self."""
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float))): raise _fail(TypeError, "bernoulli", f"p must be a float, got {type(p).__name__} {p!r}", self)
    if p is not None and not 0.0 <= p <= 1.0: raise _fail(ValueError, "bernoulli", f"p must be in [0, 1], got {p}", self)
    u = type(self).rand(*self.shape, device=self.device)
    hit = u < (p if p is not None else self.detach().cast(dtypes.float32))
    return hit.cast(self.dtype if self.dtype.is_float or self.dtype.is_int else dtypes.default_float)

  @staticmethod
  def randperm(n: int, dtype=dtypes.int64, device=None, requires_grad=None) -> Tensor:
    """A random permutation of 0..n-1: the ranks of n random keys, from O(n^2) pairwise comparisons (ties broken by
    position; one fused reduce, faster than a sort for small n); above 4096 elements an argsort of the keys."""
    T = _T()
    if not _is_int(n) or n < 0: raise _fail(ValueError, "randperm", f"n must be a non-negative int, got {n!r}")
    if n == 0: return T.zeros(0, dtype=dtype, device=device)
    keys = T.rand(n, device=device)
    if n > 4096 and hasattr(T, "argsort"): return T(keys.argsort().cast(dtype).uop, requires_grad=requires_grad)
    ki, kj = keys.reshape(n, 1), keys.reshape(1, n)
    ar = T.arange(n, device=device)
    before = (kj < ki) | ((kj == ki) & (ar.reshape(1, n) < ar.reshape(n, 1)))
    return T(before.sum(1).cast(dtype).uop, requires_grad=requires_grad)

  @staticmethod
  def kaiming_uniform(*shape, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", dtype=None, device=None, requires_grad=None) -> Tensor:
    """torch.nn.init.kaiming_uniform_: U(-b, b), b = gain * sqrt(3 / fan); gain sqrt(2 / (1 + a^2)) for leaky_relu."""
    shape = argfix(*shape)
    fan_in, fan_out = _fans("kaiming_uniform", shape)
    if mode not in ("fan_in", "fan_out"): raise _fail(ValueError, "kaiming_uniform", f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan = fan_in if mode == "fan_in" else fan_out
    bound = _gain("kaiming_uniform", nonlinearity, a) * math.sqrt(3.0 / fan) if fan else 0.0
    return _T().uniform(shape, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)
  @staticmethod
  def kaiming_normal(*shape, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", dtype=None, device=None, requires_grad=None) -> Tensor:
    """torch.nn.init.kaiming_normal_: N(0, std^2), std = gain / sqrt(fan)."""
    shape = argfix(*shape)
    fan_in, fan_out = _fans("kaiming_normal", shape)
    if mode not in ("fan_in", "fan_out"): raise _fail(ValueError, "kaiming_normal", f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan = fan_in if mode == "fan_in" else fan_out
    std = _gain("kaiming_normal", nonlinearity, a) / math.sqrt(fan) if fan else 0.0
    return _T().normal(shape, mean=0.0, std=std, dtype=dtype, device=device, requires_grad=requires_grad)
  @staticmethod
  def glorot_uniform(*shape, gain: float = 1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    """torch.nn.init.xavier_uniform_: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)) (torch's fans, receptive
    field included in both)."""
    shape = argfix(*shape)
    fan_in, fan_out = _fans("glorot_uniform", shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
    return _T().uniform(shape, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)
  xavier_uniform = glorot_uniform
  @staticmethod
  def glorot_normal(*shape, gain: float = 1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    """torch.nn.init.xavier_normal_: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    shape = argfix(*shape)
    fan_in, fan_out = _fans("glorot_normal", shape)
    std = gain * math.sqrt(2.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
    return _T().normal(shape, mean=0.0, std=std, dtype=dtype, device=device, requires_grad=requires_grad)
  xavier_normal = glorot_normal
  @staticmethod
  def trunc_normal(*shape, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    """torch.nn.init.trunc_normal_: N(mean, std^2) restricted to [a, b] (absolute bounds), by the inverse CDF."""
    shape = argfix(*shape)
    if not a < b: raise _fail(ValueError, "trunc_normal", f"need a < b, got a={a}, b={b}")
    if std <= 0: raise _fail(ValueError, "trunc_normal", f"std must be > 0, got {std}")
    def cdf(v): return (1.0 + math.erf(v / math.sqrt(2.0))) / 2.0
    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    T = _T()
    u = T.uniform(shape, low=2 * lo - 1, high=2 * hi - 1, dtype=dtypes.float32, device=device)
    u = u.clip(-1 + 1e-7, 1 - 1e-7)
    x = (_erfinv(u) * (std * math.sqrt(2.0)) + mean).clip(a, b)
    from petagrad.dtype import to_dtype
    return T(x.cast(to_dtype(dtype) if dtype is not None else dtypes.default_float).uop, requires_grad=requires_grad)
