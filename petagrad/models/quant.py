"""Weights that stay quantized in memory: ggml's Q8_0 and Q4_0 blocks, dequantized inside the kernels that read them.

A quantized weight is its packed bytes (one uint8 buffer) and a lazy view that decodes them with tensor ops
(`nn.state.ggml_dequantize`, the same decoding `gguf_load` uses). A matrix-vector product over it (a decode step, one
row of activations) fuses that decoding into its loop, so it reads 8.5 (Q8_0) or 4.5 (Q4_0) bits per weight instead
of 32. A product over many rows (a prefill) first writes the decoded weight once (matmul's layout rule), then runs as
a float matmul.

* Q8_0: blocks of 32 weights, one float16 scale d = max|w| / 127 and 32 int8 q = round(w / d): 34 bytes.
* Q4_0: blocks of 32 weights, d = m / -8 with m the weight of largest magnitude (its sign kept), 32 4-bit
  q = min(15, floor(w / d + 8.5)) (w = (q - 8) * d), two per byte (the first 16 in the low nibbles): 18 bytes.

>>> from petagrad import Tensor
>>> w = Tensor([[0.5, -1.0] * 16])
>>> packed, view = quantize(w, "q8_0")
>>> packed.shape, view.shape, round(view.sub(w).abs().max().item(), 3)
((34,), (1, 32), 0.004)
"""
from __future__ import annotations
from typing import Any
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.nn.state import ggml_dequantize, get_state_dict

GGML_TYPE = {"q8_0": 8, "q4_0": 2}   # ggml's type ids (nn/state.py GGML_TYPES)
BLOCK = 32

def _f16_bytes(d: Tensor) -> Tensor:
  """(n, 1) float scales -> (n, 2) uint8: their float16 bits, little-endian."""
  u = d.cast(dtypes.float16).bitcast(dtypes.uint16)
  return (u & 0xFF).cast(dtypes.uint8).cat((u >> 8).cast(dtypes.uint8), dim=1)

def pack(w: Tensor, kind: str) -> Tensor:
  """The ggml blocks of w (its elements in row-major order; their number a multiple of 32) as a flat uint8 Tensor."""
  if kind not in GGML_TYPE: raise ValueError(f"quantization {kind!r} is not supported (supported: {', '.join(GGML_TYPE)})")
  if w.numel() % BLOCK: raise ValueError(f"{kind}: {w.numel()} weights (shape {w.shape}) are not a whole number of blocks of {BLOCK}")
  b = w.float().reshape(-1, BLOCK)
  if kind == "q8_0":
    d = b.abs().max(axis=1, keepdim=True) / 127
    q = (b / d.maximum(1e-30)).round().clip(-127, 127).cast(dtypes.int8).bitcast(dtypes.uint8)
    return _f16_bytes(d).cat(q, dim=1).flatten()
  # q4_0: the scale takes the sign of the largest-magnitude weight, so it maps to -8 exactly
  m = b.gather(1, b.abs().argmax(1, keepdim=True))
  d = m / -8
  inv = (d != 0).where(1 / d, 0.0)
  q = (b * inv + 8.5).floor().clip(0, 15).cast(dtypes.uint8)
  return _f16_bytes(d).cat(q[:, :16] | (q[:, 16:] << 4), dim=1).flatten()

def quantize(w: Tensor, kind: str = "q8_0") -> tuple[Tensor, Tensor]:
  """(packed bytes, realized; the lazy dequantized view of them, shaped like w, in w's dtype)."""
  packed = pack(w, kind).realize()
  view = ggml_dequantize(packed, GGML_TYPE[kind], w.numel()).reshape(w.shape)
  return packed, view if view.dtype == w.dtype else view.cast(w.dtype)

def quantize_linears(model: Any, kind: str = "q8_0", skip: tuple[str, ...] = ()) -> int:
  """Replace the weight of every nn.Linear of model (found through its state dict) whose size is a multiple of 32 by
  its quantized view, in place (the view holds the packed bytes; the float weight is freed when nothing else holds
  it). Layers whose state-dict name starts with one of skip keep their weight. Returns how many were quantized. The
  model's weights must be in memory (a model from from_pretrained: call realize_weights() first). Inference only: a
  quantized weight has no gradient.

  >>> from petagrad import nn
  >>> net = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 4))
  >>> quantize_linears(net, "q4_0"), net(Tensor.ones(1, 64)).shape
  (2, (1, 4))
  """
  n = 0
  for name, layer in _linears(model):
    if any(name.startswith(s) for s in skip) or layer.weight.numel() % BLOCK: continue
    layer.weight = quantize(layer.weight.detach(), kind)[1]
    n += 1
  return n

def _linears(model: Any) -> list[tuple[str, Any]]:
  """(name, layer) of the layers in model's state dict that hold a 2-D weight and have in_features."""
  from petagrad import nn
  seen, out = set(), []
  for key in get_state_dict(model):
    if not key.endswith(".weight"): continue
    obj = model
    for part in key.split(".")[:-1]: obj = obj[int(part)] if part.isdigit() and isinstance(obj, (list, tuple)) else getattr(obj, part)
    if isinstance(obj, nn.Linear) and id(obj) not in seen:
      seen.add(id(obj))
      out.append((key[:-len(".weight")], obj))
  return out
