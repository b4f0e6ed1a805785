"""ONNX signal ops (windows, DFT, STFT), random numbers, the training-preview optimizers and a few ai.onnx.ml ops,
as Tensor ops."""
from __future__ import annotations
import math
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.onnx import types
from petagrad.onnx.common import NodeContext, scalar, axis_of, arange

F64 = dtypes.float64

# ------------------------------------------------------------ windows
def cosine_window(a: tuple[float, ...]):
  """A generalized cosine window sum_k (-1)^k a_k cos(2 pi k n / N)."""
  def op(ctx: NodeContext, size: Tensor, output_datatype: int = types.FLOAT, periodic: int = 1) -> Tensor:
    n = int(scalar(size))
    N = n if periodic else n - 1
    i = arange(n, size.device, F64)
    w = i * 0 + a[0]
    for k, ak in enumerate(a[1:], start=1): w = w + ((-1) ** k) * ak * (i * (2 * math.pi * k / N)).cos()
    return w.cast(types.to_dtype(output_datatype))
  return op

# ------------------------------------------------------------ DFT / STFT
def _complex(x: Tensor) -> tuple[Tensor, Tensor]:
  """(..., 1 or 2) real/complex -> (real, imag) without the last dim, in float64."""
  x = x.cast(F64)
  if x.shape[-1] == 1: return x[..., 0], x[..., 0] * 0
  return x[..., 0], x[..., 1]

def _fit(x: Tensor, axis: int, n: int) -> Tensor:
  """Pad with zeros or truncate dim axis to n (numpy's fft n=)."""
  L = x.shape[axis]
  return x.pad(tuple((0, n - L) if i == axis else (0, 0) for i in range(x.ndim))) if n >= L else \
    x.shrink(tuple((0, n) if i == axis else None for i in range(x.ndim)))

def _dft_last(re: Tensor, im: Tensor, n: int, k: int, sign: float) -> tuple[Tensor, Tensor]:
  """sum_t (re + i im)[t] exp(sign * 2 pi i f t / n) over the last dim, for f < k."""
  ph = ((arange(n, re.device).reshape(n, 1) * arange(k, re.device).reshape(1, k)) % n).cast(F64) * (2 * math.pi / n)
  c, s = ph.cos(), ph.sin() * sign
  return re.matmul(c) - im.matmul(s), re.matmul(s) + im.matmul(c)

def _dft(x: Tensor, n: int | None, axis: int, inverse: int, onesided: int) -> Tensor:
  a = axis_of(axis, x.ndim)
  if a == x.ndim - 1: raise ValueError("DFT's axis cannot be the last (real/imaginary) dim")
  re, im = _complex(x)
  re, im = re.transpose(a, -1), im.transpose(a, -1)
  L = re.shape[-1]
  if n is None: n = 2 * (L - 1) if inverse and onesided else L
  if inverse and onesided:   # a one-sided spectrum -> real signal: rebuild the Hermitian half, take the real part
    h = n // 2 + 1
    re, im = _fit(re, re.ndim - 1, h), _fit(im, im.ndim - 1, h)
    rest = n - h
    if rest > 0:
      sl = (slice(None),) * (re.ndim - 1)
      re = re.cat(re[sl + (slice(rest, 0, -1),)], dim=-1)
      im = im.cat(-im[sl + (slice(rest, 0, -1),)], dim=-1)
    yr, _ = _dft_last(re, im, n, n, 1.0)
    out = (yr / n).unsqueeze(-1)
  else:
    re, im = _fit(re, re.ndim - 1, n), _fit(im, im.ndim - 1, n)
    k = n // 2 + 1 if onesided else n
    yr, yi = _dft_last(re, im, n, k, 1.0 if inverse else -1.0)
    if inverse: yr, yi = yr / n, yi / n
    out = yr.unsqueeze(-1).cat(yi.unsqueeze(-1), dim=-1)
  return out.transpose(a, -2).cast(x.dtype)

def DFT_17(ctx: NodeContext, x: Tensor, dft_length: Tensor | None = None, axis: int = 1, inverse: int = 0, onesided: int = 0) -> Tensor:
  return _dft(x, int(scalar(dft_length)) if dft_length is not None else None, axis, inverse, onesided)

def DFT_20(ctx: NodeContext, x: Tensor, dft_length: Tensor | None = None, axis: Tensor | None = None, inverse: int = 0,
           onesided: int = 0) -> Tensor:
  return _dft(x, int(scalar(dft_length)) if dft_length is not None else None, int(scalar(axis)) if axis is not None else -2, inverse, onesided)

def STFT(ctx: NodeContext, signal: Tensor, frame_step: Tensor, window: Tensor | None = None, frame_length: Tensor | None = None,
         onesided: int = 1) -> Tensor:
  step = int(scalar(frame_step))
  W = window.shape[0] if window is not None else int(scalar(frame_length))
  n = int(scalar(frame_length)) if frame_length is not None else W
  L = signal.shape[1]
  frames = 1 + (L - W) // step
  parts = [signal[:, f * step:f * step + W] for f in range(frames)]      # each (B, W, 1|2)
  x = Tensor.stack(*parts, dim=1)                                       # (B, frames, W, 1|2)
  if window is not None: x = x * window.cast(x.dtype).reshape(1, 1, W, 1)
  return _dft(x, n, 2, 0, onesided)

# ------------------------------------------------------------ random numbers
def _seeded(seed: float | None) -> None:
  if seed is not None: Tensor.manual_seed(int(seed))

def Bernoulli(ctx: NodeContext, x: Tensor, dtype: int | None = None, seed: float | None = None) -> Tensor:
  _seeded(seed)
  return (Tensor.rand(*x.shape, device=x.device) < x).cast(types.to_dtype(dtype) if dtype is not None else x.dtype)

def RandomUniformLike(ctx: NodeContext, x: Tensor, dtype: int | None = None, high: float = 1.0, low: float = 0.0,
                      seed: float | None = None) -> Tensor:
  _seeded(seed)
  dt = types.to_dtype(dtype) if dtype is not None else x.dtype
  return (Tensor.rand(*x.shape, device=x.device) * (high - low) + low).cast(dt)

def RandomNormalLike(ctx: NodeContext, x: Tensor, dtype: int | None = None, mean: float = 0.0, scale: float = 1.0,
                     seed: float | None = None) -> Tensor:
  _seeded(seed)
  dt = types.to_dtype(dtype) if dtype is not None else x.dtype
  return (Tensor.randn(*x.shape, device=x.device) * scale + mean).cast(dt)

def RandomUniform(ctx: NodeContext, dtype: int = types.FLOAT, high: float = 1.0, low: float = 0.0, seed: float | None = None,
                  shape: tuple = ()) -> Tensor:
  _seeded(seed)
  return (Tensor.rand(*shape, device=ctx.device) * (high - low) + low).cast(types.to_dtype(dtype))

def RandomNormal(ctx: NodeContext, dtype: int = types.FLOAT, mean: float = 0.0, scale: float = 1.0, seed: float | None = None,
                 shape: tuple = ()) -> Tensor:
  _seeded(seed)
  return (Tensor.randn(*shape, device=ctx.device) * scale + mean).cast(types.to_dtype(dtype))

# ------------------------------------------------------------ ai.onnx.preview.training
def _groups(xs: tuple, k: int, what: str) -> list[tuple]:
  if len(xs) % k: raise ValueError(f"{what} takes R, T, then {k} groups of tensors; got {len(xs) + 2} inputs")
  n = len(xs) // k
  return [tuple(xs[j * n + i] for j in range(k)) for i in range(n)]

def Adagrad(ctx: NodeContext, r: Tensor, t: Tensor, *xs: Tensor, decay_factor: float = 0.0, epsilon: float = 1e-6,
            norm_coefficient: float = 0.0) -> tuple:
  lr = r / (1 + t.cast(r.dtype) * decay_factor)
  new_x, new_h = [], []
  for x, g, h in _groups(xs, 3, "Adagrad"):
    gr = x * norm_coefficient + g
    h2 = h + gr * gr
    new_x.append((x - lr * gr / (h2.sqrt() + epsilon)).cast(x.dtype))
    new_h.append(h2.cast(h.dtype))
  return (*new_x, *new_h)

def Adam(ctx: NodeContext, r: Tensor, t: Tensor, *xs: Tensor, alpha: float = 0.9, beta: float = 0.999, epsilon: float = 1e-6,
         norm_coefficient: float = 0.0, norm_coefficient_post: float = 0.0) -> tuple:
  tf = t.cast(F64)
  adj = (tf > 0).where(r.cast(F64) * (1 - (tf * math.log(beta)).exp()).sqrt() / (1 - (tf * math.log(alpha)).exp()), r.cast(F64))
  outs: list[list[Tensor]] = [[], [], []]
  for x, g, v, h in _groups(xs, 4, "Adam"):
    gr = x * norm_coefficient + g
    v2 = v * alpha + gr * (1 - alpha)
    h2 = h * beta + gr * gr * (1 - beta)
    x2 = x - adj.cast(x.dtype) * (v2 / (h2.sqrt() + epsilon))
    outs[0].append((x2 * (1 - norm_coefficient_post)).cast(x.dtype))
    outs[1].append(v2.cast(v.dtype))
    outs[2].append(h2.cast(h.dtype))
  return (*outs[0], *outs[1], *outs[2])

def Momentum(ctx: NodeContext, r: Tensor, t: Tensor, *xs: Tensor, alpha: float = 0.0, beta: float = 0.0, mode: str = "standard",
             norm_coefficient: float = 0.0) -> tuple:
  if mode not in ("standard", "nesterov"): raise ValueError(f"mode must be 'standard' or 'nesterov', got {mode!r}")
  b = (t > 0).where(beta, 1.0)
  new_x, new_v = [], []
  for x, g, v in _groups(xs, 3, "Momentum"):
    gr = x * norm_coefficient + g
    v2 = v * alpha + b.cast(v.dtype) * gr
    x2 = x - r * v2 if mode == "standard" else x - r * (gr + v2 * alpha)
    new_x.append(x2.cast(x.dtype))
    new_v.append(v2.cast(v.dtype))
  return (*new_x, *new_v)

# ------------------------------------------------------------ ai.onnx.ml
def Binarizer(ctx: NodeContext, x: Tensor, threshold: float = 0.0) -> Tensor: return (x > threshold).cast(x.dtype)

def ArrayFeatureExtractor(ctx: NodeContext, x: Tensor, y: Tensor) -> Tensor:
  idx = y.reshape(-1).cast(dtypes.int64)
  out = x.index_select(x.ndim - 1, idx)
  return out.reshape(1, -1) if x.ndim == 1 else out
