"""Weights that stay quantized in memory: ggml's Q8_0 and Q4_0 blocks, and int8 with one scale per output channel (the
int8 safetensors of compressed-tensors' W8A16 checkpoints), dequantized inside the kernels that read them.

A quantized weight is its packed bytes (one uint8 buffer) and a lazy view that decodes them with tensor ops
(`nn.state.ggml_dequantize`, the same decoding `gguf_load` uses). A matrix-vector product over it (a decode step, one
row of activations) fuses that decoding into its loop, so it reads 8.5 (Q8_0) or 4.5 (Q4_0) bits per weight instead
of 32. A product over many rows (a prefill) first writes the decoded weight once (matmul's layout rule), then runs as
a float matmul.

* Q8_0: blocks of 32 weights, one float16 scale d = max|w| / 127 and 32 int8 q = round(w / d): 34 bytes.
* Q4_0: blocks of 32 weights, d = m / -8 with m the weight of largest magnitude (its sign kept), 32 4-bit
  q = min(15, floor(w / d + 8.5)) (w = (q - 8) * d), two per byte (the first 16 in the low nibbles): 18 bytes.
* Q8_0 with int8 activations (`quantize_linears(model, "q8_0", int8_activations=True)`, `Q8_0Linear`): a
  matrix-vector product quantizes its row of activations to Q8_0 blocks too, as llama.cpp does on CPUs, and sums
  the int8 products of each block exactly in int32 (`q8_0_matvec`; on CPUs with AVX-512 VNNI one instruction per 128
  products). Error: the activations' rounding (half a step of max|x| / 127 per block) on top of the weights'.
* int8 ("int8", `Int8Linear`): per output row a scale s = max|w| / 127 and q = round(w / s) as int8; w = q * s. The
  layer holds `weight` (int8) and `weight_scale` (out, 1) as its state, under those names: a compressed-tensors
  "int-quantized" checkpoint (8-bit symmetric int weights, strategy "channel", no activation quantization) loads
  into it as it is (`Llama.from_pretrained` reads its `quantization_config`), and `safe_save(get_state_dict(model))`
  writes one.

>>> from petagrad import Tensor
>>> w = Tensor([[0.5, -1.0] * 16])
>>> packed, view = quantize(w, "q8_0")
>>> packed.shape, view.shape, round(view.sub(w).abs().max().item(), 3)
((34,), (1, 32), 0.004)
"""
from __future__ import annotations
import re
from typing import Any
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.helpers import prod
from petagrad import nn
from petagrad.nn.state import ggml_dequantize, get_state_dict, _f16

GGML_TYPE = {"q8_0": 8, "q4_0": 2}   # ggml's type ids (nn/state.py GGML_TYPES)
KINDS = (*GGML_TYPE, "int8")
BLOCK = 32

class Int8Linear:
  """y = x @ (weight * weight_scale).T + bias, with weight int8 (out_features, in_features) and weight_scale
  (out_features, 1) kept as they are: a product over one row of x (a decode step) reads one byte per weight, decoding
  inside its loop. Inference only (int8 weights have no gradient). `Int8Linear.from_linear(layer)` quantizes a float
  nn.Linear (symmetric, per output channel).

  >>> from petagrad import nn
  >>> lin = nn.Linear(4, 2); q = Int8Linear.from_linear(lin)
  >>> q.weight.dtype, q.weight_scale.shape, bool((q(Tensor.ones(1, 4)) - lin(Tensor.ones(1, 4))).abs().max().item() < 0.02)
  (dtypes.int8, (2, 1), True)
  """
  def __init__(self, in_features: int, out_features: int, bias: bool = False, dtype=None, device: str | None = None):
    self.weight = Tensor.zeros(out_features, in_features, dtype=dtypes.int8, device=device)
    self.weight_scale = Tensor.ones(out_features, 1, dtype=dtype or dtypes.default_float, device=device)
    self.bias = Tensor.zeros(out_features, dtype=dtype or dtypes.default_float, device=device) if bias else None
  def __call__(self, x: Tensor) -> Tensor:
    if x.shape[-1] != self.weight.shape[1]:
      raise ValueError(f"Int8Linear: input's last dim is {x.shape[-1]}, the layer takes {self.weight.shape[1]} (input shape {x.shape})")
    return x.linear(self.weight.cast(x.dtype) * self.weight_scale.cast(x.dtype), self.bias)
  @staticmethod
  def from_linear(layer: Any) -> Int8Linear:
    w = layer.weight.detach().float()
    out = Int8Linear(w.shape[1], w.shape[0], layer.bias is not None, layer.weight.dtype, layer.weight.device)
    scale = w.abs().max(axis=1, keepdim=True) / 127
    out.weight = (w / scale.maximum(1e-30)).round().clip(-127, 127).cast(dtypes.int8).realize()
    out.weight_scale = scale.cast(layer.weight.dtype).realize()
    if layer.bias is not None: out.bias = layer.bias.detach().realize()
    return out

def q8_0_matvec(x: Tensor, packed: Tensor, out_features: int) -> Tensor:
  """x @ W.T for x with one row ((..., in_features), the leading dims multiplying to 1) and W (out_features,
  in_features) as the Q8_0 blocks `packed`, x quantized to Q8_0 blocks too: per block of 32, dx = max|x| / 127 and
  qx = round(x / dx) as int8; y = the sum over blocks of dw * dx * (the int32 sum of qw * qx). qx and dx are
  computed once (two small kernels); the product reads the packed weight and qx as int8.

  >>> packed, w = quantize(Tensor([[0.5, -1.0] * 16]), "q8_0")
  >>> x = Tensor([[0.25] * 32])   # (its blocks hold one value: exact in Q8_0)
  >>> round(q8_0_matvec(x, packed, 1).item(), 4), round((x @ w.T).item(), 4)
  (-1.9841, -1.9841)
  """
  k = x.shape[-1]
  if not isinstance(k, int) or k % BLOCK or prod(x.shape[:-1]) != 1 or packed.numel() != out_features * k // BLOCK * 34:
    raise ValueError(f"q8_0_matvec: x {x.shape} (one row, a multiple of {BLOCK} wide) and {packed.numel()} bytes of Q8_0 blocks do not "
                     f"make a ({out_features}, {k}) weight")
  nb = k // BLOCK
  blocks = packed.reshape(out_features, nb, 34)
  qw, dw = blocks[:, :, 2:].bitcast(dtypes.int8), _f16(blocks[:, :, :2]).reshape(out_features, nb, 1)
  xb = x.reshape(nb, BLOCK).float()
  dx = (xb.abs().amax(-1, keepdim=True) / 127).contiguous()
  qx = (xb / (dx > 0).where(dx, 1)).round().cast(dtypes.int8).contiguous()
  # (the int32 products of a block summed before their float scale: the code generator makes them DOT4s)
  y = ((qw.cast(dtypes.int32) * qx.cast(dtypes.int32)).cast(dtypes.float32) * (dw * dx.reshape(1, nb, 1))).sum((1, 2))
  return y.reshape(*x.shape[:-1], out_features).cast(x.dtype)

class Q8_0Linear(nn.Linear):
  """An nn.Linear whose weight is kept as Q8_0 blocks (`weight` is their lazy decoded view, as quantize_linears
  gives) and whose matrix-vector products (one row of x: a decode step) quantize x to Q8_0 too (q8_0_matvec, as
  llama.cpp does on CPUs); products over more rows (a prefill) decode the weight and keep x in float.

  >>> lin = nn.Linear(64, 8); q = Q8_0Linear(lin); x = Tensor.ones(1, 64)
  >>> bool((q(x) - lin(x)).abs().max().item() < 0.05)
  True
  """
  def __init__(self, layer: nn.Linear):   # (no nn.Linear.__init__: its float weight is not wanted)
    self.packed, self.weight = quantize(layer.weight.detach(), "q8_0")
    self.bias = layer.bias
    self.fused: tuple[Tensor, int] | None = None   # (the blocks of a group of layers it is part of, its first row there)
  def _state_dict_items(self) -> dict[str, Tensor]: return {"weight": self.weight, **({"bias": self.bias} if self.bias is not None else {})}
  def forward(self, x: Tensor) -> Tensor:
    if not _one_row(x, self.weight.shape[1]): return super().forward(x)
    y = q8_0_matvec(x, self.packed, self.weight.shape[0])
    return y if self.bias is None else y + self.bias

def _one_row(x: Tensor, in_features: int) -> bool:
  """Is x one row of in_features (a decode step's activations) that q8_0_matvec takes? (Blocks that straddle rows,
  in_features not a multiple of 32, and several rows stay on the float path.)"""
  return isinstance(n := prod(x.shape[:-1]), int) and n == 1 and x.shape[-1] == in_features and in_features % BLOCK == 0

def fuse_siblings(layers: list[Q8_0Linear]) -> None:
  """Keep the Q8_0 blocks of layers that read the same activations (a transformer's q, k and v projections, an MLP's
  gate and up) in one buffer, each layer's rows a part of it, so that `fused_matvec` computes them in one kernel."""
  if len(layers) < 2 or len({l.weight.shape[1] for l in layers}) != 1: return
  group = Tensor.cat(*[l.packed for l in layers]).realize()
  row = layers[0].weight.shape[1] // BLOCK * 34
  first = 0
  for l in layers:
    n = l.weight.shape[0]
    l.packed = group[first * row:(first + n) * row]
    l.weight = _decoded(l.packed, "q8_0", l.weight.shape, l.weight.dtype)
    l.fused = (group, first)
    first += n

def fused_matvec(x: Tensor, layers: tuple[Any, ...]) -> list[Tensor] | None:
  """The outputs of layers (Q8_0Linears made siblings by fuse_siblings, in their order there) for one row of x, from
  one matrix-vector kernel over their common buffer (a decode step: one kernel's threads and memory streams instead
  of several short ones); None where that does not apply (other layers, several rows): call each layer then.

  >>> from petagrad import nn
  >>> a, b = Q8_0Linear(nn.Linear(64, 32)), Q8_0Linear(nn.Linear(64, 16)); fuse_siblings([a, b])
  >>> x = Tensor.ones(1, 64); ya, yb = fused_matvec(x, (a, b))
  >>> ya.shape, yb.shape, bool((ya - a(x)).abs().max().item() < 1e-5)
  ((1, 32), (1, 16), True)
  """
  if not all(isinstance(l, Q8_0Linear) and l.fused is not None for l in layers): return None
  group, first = layers[0].fused
  sizes = [l.weight.shape[0] for l in layers]
  # (the same buffer, the layers one after another from its first row: compared by identity, == of Tensors is elementwise)
  if first != 0 or any(l.fused[0] is not group or l.fused[1] != sum(sizes[:i]) for i, l in enumerate(layers)): return None
  if not _one_row(x, layers[0].weight.shape[1]): return None
  total = group.numel() // (x.shape[-1] // BLOCK * 34)
  if sum(sizes) != total: return None
  y = q8_0_matvec(x, group, total)
  outs = list(y.split(sizes, dim=-1))
  return [o if l.bias is None else o + l.bias for o, l in zip(outs, layers)]

def _f16_bytes(d: Tensor) -> Tensor:
  """(n, 1) float scales -> (n, 2) uint8: their float16 bits, little-endian."""
  u = d.cast(dtypes.float16).bitcast(dtypes.uint16)
  return (u & 0xFF).cast(dtypes.uint8).cat((u >> 8).cast(dtypes.uint8), dim=1)

def _check_kind(kind: str, kinds: tuple[str, ...] = KINDS) -> None:
  if kind not in kinds: raise ValueError(f"quantization {kind!r} is not supported (supported: {', '.join(kinds)})")

def pack(w: Tensor, kind: str) -> Tensor:
  """The ggml blocks of w (its elements in row-major order; their number a multiple of 32) as a flat uint8 Tensor."""
  _check_kind(kind, tuple(GGML_TYPE))
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
  return packed, _decoded(packed, kind, w.shape, w.dtype)

def _decoded(packed: Tensor, kind: str, shape: tuple, dtype) -> Tensor:
  """The lazy dequantized view of packed blocks, shaped `shape`, in dtype."""
  view = ggml_dequantize(packed, GGML_TYPE[kind], prod(shape)).reshape(shape)
  return view if view.dtype == dtype else view.cast(dtype)

def quantize_linears(model: Any, kind: str = "q8_0", skip: tuple[str, ...] = (), int8_activations: bool = False) -> int:
  """Quantize every nn.Linear of model (found through its state dict), in place: "q8_0"/"q4_0" replace the weight of
  each whose size is a multiple of 32 by its quantized view (the view holds the packed bytes; the float weight is freed
  when nothing else holds it); with int8_activations (q8_0 only) each such layer whose in_features is a multiple of 32
  becomes a Q8_0Linear instead, whose matrix-vector products quantize the activations too; "int8" replaces each layer
  by an Int8Linear. Layers whose state-dict name starts with one of skip are left as they are. Returns how many were
  quantized. The model's weights must be in memory (a model from from_pretrained: call realize_weights() first).
  Inference only: a quantized weight has no gradient.

  >>> from petagrad import nn
  >>> net = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 4))
  >>> quantize_linears(net, "q4_0"), net(Tensor.ones(1, 64)).shape
  (2, (1, 4))
  """
  _check_kind(kind)
  if int8_activations and kind != "q8_0": raise ValueError(f"int8_activations: only with q8_0 weights, not {kind!r}")
  n = 0
  for name, layer in _linears(model):
    if any(name.startswith(s) for s in skip) or (kind != "int8" and layer.weight.numel() % BLOCK): continue
    if kind == "int8": _set_layer(model, name, Int8Linear.from_linear(layer))
    elif int8_activations and layer.weight.shape[1] % BLOCK == 0: _set_layer(model, name, Q8_0Linear(layer))
    else: layer.weight = quantize(layer.weight.detach(), kind)[1]
    n += 1
  if int8_activations:   # the layers a module declares as reading the same input (FUSED_LINEARS) share one buffer
    for parent in _modules(model):
      for names in getattr(type(parent), "FUSED_LINEARS", ()):
        group = [getattr(parent, nm, None) for nm in names]
        if all(isinstance(l, Q8_0Linear) for l in group): fuse_siblings(group)
  return n

def _modules(model: Any) -> list[Any]:
  """The objects holding model's state-dict tensors, each once (the modules and layers along their paths)."""
  seen: dict[int, Any] = {}
  for key in get_state_dict(model):
    parts = key.split(".")
    for i in range(len(parts)):
      obj = _module_at(model, parts[:i])
      seen.setdefault(id(obj), obj)
  return list(seen.values())

def _set_layer(model: Any, name: str, layer: Any) -> None:
  """Put layer at the state-dict path name ("model.layers.0.mlp.up_proj") of model."""
  *path, last = name.split(".")
  obj = _module_at(model, path)
  if last.isdigit() and isinstance(obj, list): obj[int(last)] = layer
  else: setattr(obj, last, layer)

def apply_quantization_config(model: Any, config: dict[str, Any], what: str) -> int:
  """Make model's layers fit the quantization_config of a Hugging Face config.json, before its weights are loaded:
  compressed-tensors' int-quantized W8A16 (8-bit symmetric int weights, one scale per output channel, activations
  not quantized) turns every targeted nn.Linear into an Int8Linear, but those `ignore` names (exact names, or "re:"
  regular expressions). Any other quantization raises ValueError naming the setting. Returns the layers changed."""
  qc = config.get("quantization_config")
  if qc is None: return 0
  where = "config.json quantization_config"
  if not isinstance(qc, dict): raise ValueError(f"{where} must be an object, got {qc!r:.80}")
  method, fmt = qc.get("quant_method"), qc.get("format")
  if method != "compressed-tensors" or fmt not in ("int-quantized", "naive-quantized"):
    raise ValueError(f"{where}: {what} loads compressed-tensors int-quantized (int8 per-channel) weights only, not quant_method "
                     f"{method!r} with format {fmt!r}")
  groups = qc.get("config_groups") or {}
  if not isinstance(groups, dict) or not groups: raise ValueError(f"{where}: no config_groups")
  for gname, g in groups.items():
    w = (g or {}).get("weights") or {}
    want = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
    bad = {k: w.get(k) for k, v in want.items() if w.get(k) != v}
    if bad: raise ValueError(f"{where}: group {gname!r} has weights {bad}; supported: {want}")
    if g.get("input_activations") is not None:
      raise ValueError(f"{where}: group {gname!r} quantizes activations too (W8A8); only weights (W8A16) are supported")
    if [t for t in g.get("targets", ["Linear"]) if t != "Linear"]:
      raise ValueError(f"{where}: group {gname!r} targets {g.get('targets')}; only Linear is supported")
  ignore = qc.get("ignore") or []
  def ignored(name: str) -> bool: return any(re.fullmatch(p[3:], name) if p.startswith("re:") else p == name for p in ignore)
  n = 0
  for name, layer in _linears(model):
    if ignored(name): continue
    w = layer.weight
    _set_layer(model, name, Int8Linear(w.shape[1], w.shape[0], layer.bias is not None, w.dtype, w.device))
    n += 1
  return n

def _linears(model: Any) -> list[tuple[str, Any]]:
  """(name, layer) of the layers in model's state dict that hold a 2-D weight and have in_features."""
  from petagrad import nn
  seen, out = set(), []
  for key in get_state_dict(model):
    if not key.endswith(".weight"): continue
    obj = _module_at(model, key.split(".")[:-1])
    if isinstance(obj, nn.Linear) and id(obj) not in seen:
      seen.add(id(obj))
      out.append((key[:-len(".weight")], obj))
  return out

def _module_at(model: Any, path: list[str]) -> Any:
  """The object at a state-dict path (["model", "layers", "0", "mlp"]): attributes, and list items by index."""
  obj = model
  for part in path: obj = obj[int(part)] if part.isdigit() and isinstance(obj, (list, tuple)) else getattr(obj, part)
  return obj
