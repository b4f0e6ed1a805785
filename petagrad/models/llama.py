"""LLaMA (Llama 2, Llama 3, and the many models that share its layout) in the Hugging Face layout.

Pre-norm decoder blocks: RMSNorm, grouped-query self-attention with rotary position embeddings (RoPE, rotate-half
layout, `rope_theta`, optional "linear" or "llama3" `rope_scaling`), RMSNorm, SwiGLU MLP; a final RMSNorm and an
output projection (optionally tied to the token embedding). The weights have Hugging Face's names
(`model.layers.{i}.self_attn.q_proj.weight`, ...), so `get_state_dict(model)` is a Hugging Face state dict.

`Llama.from_pretrained(folder)` reads a Hugging Face model folder (config.json and safetensors); `model(tokens,
start_pos)` returns logits and keeps a KV cache per layer (petagrad/models/kv_cache.py). `generate` (models/generate.py)
samples from it.

>>> from petagrad import Tensor
>>> cfg = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=4,
...                   num_key_value_heads=2, max_position_embeddings=64)
>>> Tensor.manual_seed(0); model = Llama(cfg, max_context=16)
>>> model(Tensor([[1, 2, 3]]), 0).shape, model(Tensor([[4]]), 3).shape
((1, 3, 32), (1, 1, 32))
"""
from __future__ import annotations
import math, os
from array import array
from dataclasses import dataclass, field
from typing import Any, Mapping
from petagrad.tensor import Tensor
from petagrad.dtype import DType, dtypes
from petagrad.device import Device
from petagrad import nn
from petagrad.models.hf import Checkpoint, activation, config_value, float_dtype, float_dtype_arg, load_weights, positive, read_config
from petagrad.models.kv_cache import Decoder, KVCache, Positions
from petagrad.models import quant

# max_context when from_pretrained is not told: the KV cache is allocated up front, so a model that knows 128k positions
# does not get a 128k cache unless asked
DEFAULT_MAX_CONTEXT = 4096

@dataclass(frozen=True)
class RopeScaling:
  """config.json's rope_scaling (rope_parameters in transformers 5): "default", "linear" (positions divided by factor)
  or "llama3" (Llama 3.1's frequency-dependent scaling)."""
  rope_type: str = "default"
  factor: float = 1.0
  low_freq_factor: float = 1.0
  high_freq_factor: float = 4.0
  original_max_position_embeddings: int = 8192

  SUPPORTED = ("default", "linear", "llama3")

  @staticmethod
  def from_dict(d: Mapping[str, Any] | None) -> RopeScaling:
    """From config.json's rope_scaling / rope_parameters object (None: no scaling). Unknown types raise ValueError."""
    if d is None: return RopeScaling()
    if not isinstance(d, Mapping): raise ValueError(f"config.json: rope_scaling must be an object, got {d!r}")
    kind = d.get("rope_type", d.get("type", "default"))
    if kind not in RopeScaling.SUPPORTED:
      raise ValueError(f"config.json: rope_scaling type {kind!r} is not supported (supported: {', '.join(RopeScaling.SUPPORTED)})")
    if kind == "default": return RopeScaling()
    w = "config.json rope_scaling"
    factor = config_value(d, "factor", float, where=w)
    if factor <= 0: raise ValueError(f"{w}: 'factor' must be positive, got {factor}")
    if kind == "linear": return RopeScaling("linear", factor)
    lo, hi = config_value(d, "low_freq_factor", float, where=w), config_value(d, "high_freq_factor", float, where=w)
    if not 0 < lo < hi: raise ValueError(f"{w}: need 0 < low_freq_factor < high_freq_factor, got {lo} and {hi}")
    orig = config_value(d, "original_max_position_embeddings", int, where=w)
    return RopeScaling("llama3", factor, lo, hi, positive("original_max_position_embeddings", orig))

@dataclass(frozen=True)
class LlamaConfig:
  """The fields of a LLaMA config.json that the model uses (Hugging Face's names and defaults)."""
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_hidden_layers: int
  num_attention_heads: int
  num_key_value_heads: int | None = None   # None: num_attention_heads (no grouping)
  head_dim: int | None = None              # None: hidden_size // num_attention_heads
  max_position_embeddings: int = 2048
  rms_norm_eps: float = 1e-6
  rope_theta: float = 10000.0
  rope_scaling: RopeScaling = field(default_factory=RopeScaling)
  hidden_act: str = "silu"
  tie_word_embeddings: bool = False
  attention_bias: bool = False
  mlp_bias: bool = False

  def __post_init__(self) -> None:
    for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings"):
      positive(k, getattr(self, k))
    if self.head_dim is None and self.hidden_size % self.num_attention_heads:
      raise ValueError(f"config.json: hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}")
    if self.num_attention_heads % self.kv_heads:
      raise ValueError(f"config.json: num_attention_heads {self.num_attention_heads} is not a multiple of num_key_value_heads {self.kv_heads}")
    if self.head_size % 2: raise ValueError(f"config.json: RoPE needs an even head_dim, got {self.head_size}")
    if self.rope_theta <= 0: raise ValueError(f"config.json: rope_theta must be positive, got {self.rope_theta}")
    activation(self.hidden_act, "hidden_act")   # an unknown name fails here, not at the first call

  @property
  def kv_heads(self) -> int: return positive("num_key_value_heads", self.num_key_value_heads or self.num_attention_heads)
  @property
  def head_size(self) -> int: return positive("head_dim", self.head_dim or self.hidden_size // self.num_attention_heads)

  @staticmethod
  def from_dict(d: Mapping[str, Any]) -> LlamaConfig:
    """From a config.json object: rope_theta and rope_scaling as transformers 4 writes them, or transformers 5's
    rope_parameters."""
    rp = d.get("rope_parameters")
    if rp is not None and not isinstance(rp, Mapping): raise ValueError(f"config.json: rope_parameters must be an object, got {rp!r}")
    theta = config_value(d, "rope_theta", float, None)
    if theta is None: theta = config_value(rp or {}, "rope_theta", float, 10000.0, "config.json rope_parameters")
    v = lambda k, kind, default=...: config_value(d, k, kind, default)   # noqa: E731
    return LlamaConfig(
      vocab_size=v("vocab_size", int), hidden_size=v("hidden_size", int), intermediate_size=v("intermediate_size", int),
      num_hidden_layers=v("num_hidden_layers", int), num_attention_heads=v("num_attention_heads", int),
      num_key_value_heads=v("num_key_value_heads", int, None), head_dim=v("head_dim", int, None),
      max_position_embeddings=v("max_position_embeddings", int, 2048), rms_norm_eps=v("rms_norm_eps", float, 1e-6),
      rope_theta=theta, rope_scaling=RopeScaling.from_dict(d.get("rope_scaling", rp)), hidden_act=v("hidden_act", str, "silu"),
      tie_word_embeddings=v("tie_word_embeddings", bool, False), attention_bias=v("attention_bias", bool, False),
      mlp_bias=v("mlp_bias", bool, False))

  def inv_freq(self) -> list[float]:
    """RoPE's inverse frequencies (head_dim / 2 of them), scaled as rope_scaling says, rounded to float32 as
    transformers computes them."""
    d, s = self.head_size, self.rope_scaling
    inv = [_f32(1.0 / _f32(self.rope_theta ** (i / d))) for i in range(0, d, 2)]
    if s.rope_type == "linear": return [_f32(f / s.factor) for f in inv]
    if s.rope_type != "llama3": return inv
    low_wavelen, high_wavelen = s.original_max_position_embeddings / s.low_freq_factor, s.original_max_position_embeddings / s.high_freq_factor
    out = []
    for f in inv:
      wavelen = 2 * math.pi / f
      if wavelen < high_wavelen: out.append(f)                # high frequencies: unchanged
      elif wavelen > low_wavelen: out.append(f / s.factor)    # low frequencies: slowed down by factor
      else:                                                   # in between: a smooth mix of the two
        smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
        out.append((1 - smooth) * f / s.factor + smooth * f)
    return [_f32(f) for f in out]

def _f32(x: float) -> float: return array("f", [x])[0]

def rope_tables(inv_freq: list[float], max_context: int, device: str) -> tuple[Tensor, Tensor]:
  """cos and sin of position * inv_freq, (max_context, len(inv_freq)) float32: the angle is the float32 product, as in
  transformers, and its cos/sin are taken in double precision (accurate at every position of a long context)."""
  angles = array("f", [p * f for p in range(max_context) for f in inv_freq])   # array("f") rounds each product to float32
  cos, sin = array("f", map(math.cos, angles)), array("f", map(math.sin, angles))
  return (Tensor(bytes(cos), dtype=dtypes.float32, device=device).reshape(max_context, -1),
          Tensor(bytes(sin), dtype=dtypes.float32, device=device).reshape(max_context, -1))

def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
  """Rotate x (batch, seq, heads, head_dim) in the rotate-half layout: the pairs are (x[i], x[i + head_dim/2]).
  cos/sin: (seq, head_dim/2)."""
  half = x.shape[-1] // 2
  c, s = cos.cast(x.dtype).reshape(1, x.shape[1], 1, half), sin.cast(x.dtype).reshape(1, x.shape[1], 1, half)
  x1, x2 = x[..., :half], x[..., half:]
  return (x1 * c - x2 * s).cat(x2 * c + x1 * s, dim=-1)

class LlamaAttention:
  FUSED_LINEARS = (("q_proj", "k_proj", "v_proj"),)   # read the same input (quant.fuse_siblings)
  def __init__(self, cfg: LlamaConfig, max_context: int, dtype: DType, device: str):
    self.heads, self.kv_heads, self.head_dim = cfg.num_attention_heads, cfg.kv_heads, cfg.head_size
    D, hd = cfg.hidden_size, cfg.head_size
    self.q_proj = nn.Linear(D, self.heads * hd, bias=cfg.attention_bias, dtype=dtype, device=device)
    self.k_proj = nn.Linear(D, self.kv_heads * hd, bias=cfg.attention_bias, dtype=dtype, device=device)
    self.v_proj = nn.Linear(D, self.kv_heads * hd, bias=cfg.attention_bias, dtype=dtype, device=device)
    self.o_proj = nn.Linear(self.heads * hd, D, bias=cfg.attention_bias, dtype=dtype, device=device)
    self.cache = KVCache(max_context, self.kv_heads, hd, dtype, device)
  def __call__(self, x: Tensor, pos: Positions, cos: Tensor, sin: Tensor) -> Tensor:
    B, T, _ = x.shape
    # (Q8_0 layers with int8 activations: one kernel for the three in a decode step)
    qkv = quant.fused_matvec(x, (self.q_proj, self.k_proj, self.v_proj)) or [self.q_proj(x), self.k_proj(x), self.v_proj(x)]
    q = apply_rope(qkv[0].reshape(B, T, self.heads, self.head_dim), cos, sin).transpose(1, 2)
    k = apply_rope(qkv[1].reshape(B, T, self.kv_heads, self.head_dim), cos, sin).transpose(1, 2)
    v = qkv[2].reshape(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
    out = self.cache.attention(q, k, v, pos)
    return self.o_proj(out.transpose(1, 2).reshape(B, T, self.heads * self.head_dim))

class LlamaMLP:
  FUSED_LINEARS = (("gate_proj", "up_proj"),)
  def __init__(self, cfg: LlamaConfig, dtype: DType, device: str):
    D, F = cfg.hidden_size, cfg.intermediate_size
    self.gate_proj = nn.Linear(D, F, bias=cfg.mlp_bias, dtype=dtype, device=device)
    self.up_proj = nn.Linear(D, F, bias=cfg.mlp_bias, dtype=dtype, device=device)
    self.down_proj = nn.Linear(F, D, bias=cfg.mlp_bias, dtype=dtype, device=device)
    self.act = activation(cfg.hidden_act, "hidden_act")
  def __call__(self, x: Tensor) -> Tensor:
    gate, up = quant.fused_matvec(x, (self.gate_proj, self.up_proj)) or (self.gate_proj(x), self.up_proj(x))
    return self.down_proj(self.act(gate) * up)

class LlamaDecoderLayer:
  def __init__(self, cfg: LlamaConfig, max_context: int, dtype: DType, device: str):
    self.input_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=dtype, device=device)
    self.self_attn = LlamaAttention(cfg, max_context, dtype, device)
    self.post_attention_layernorm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=dtype, device=device)
    self.mlp = LlamaMLP(cfg, dtype, device)
  def __call__(self, x: Tensor, pos: Positions, cos: Tensor, sin: Tensor) -> Tensor:
    h = x + self.self_attn(self.input_layernorm(x), pos, cos, sin)
    return h + self.mlp(self.post_attention_layernorm(h))

class LlamaModel:
  def __init__(self, cfg: LlamaConfig, max_context: int, dtype: DType, device: str):
    self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, dtype=dtype, device=device)
    self.embed_tokens.weight.replace(self.embed_tokens.weight * 0.02)   # random init: N(0, 0.02) like transformers' initializer_range
    self.layers = [LlamaDecoderLayer(cfg, max_context, dtype, device) for _ in range(cfg.num_hidden_layers)]
    self.norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps, dtype=dtype, device=device)

class _Tables:
  """RoPE's cos/sin tables: derived from the config, so no part of the state dict, and constants (requires_grad=False:
  backward's rule for float tensors whose requires_grad is unset would give them gradients)."""
  def __init__(self, cos: Tensor, sin: Tensor): self.cos, self.sin = cos.requires_grad_(False), sin.requires_grad_(False)
  def _state_dict_items(self) -> dict[str, Any]: return {}

class Llama(Decoder):
  """A LLaMA-architecture causal language model. `Llama(config)` has random weights; `Llama.from_pretrained(folder)`
  loads a Hugging Face folder. Call it as `model(tokens, start_pos)`: tokens (batch, seq) int, start_pos the position
  of tokens[:, 0]; returns logits (batch, seq, vocab_size) (the last position only with last_only=True). Each call
  stores its keys and values in the per-layer KV cache, (batch, kv_heads, max_context, head_dim) keys and values
  made on the first call (and again when the batch size changes), so a prompt is run once (start_pos 0) and each new
  token then costs one call with seq 1 (start_pos = tokens so far).

  max_context: positions the KV cache holds (default: max_position_embeddings, at most DEFAULT_MAX_CONTEXT = 4096);
  a call past it raises ValueError. dtype: the weights' and activations' dtype (default float32)."""
  def __init__(self, config: LlamaConfig, device: str | None = None, dtype: DType | str | None = None, max_context: int | None = None):
    if not isinstance(config, LlamaConfig): raise TypeError(f"config must be a LlamaConfig, got {type(config).__name__}")
    self.config = config
    self.device: str = Device.canonicalize(device) if device is not None else Device.DEFAULT
    self.dtype: DType = dtypes.default_float if dtype is None else float_dtype_arg(dtype)
    if max_context is None: max_context = min(config.max_position_embeddings, DEFAULT_MAX_CONTEXT)
    if isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1:
      raise ValueError(f"max_context must be a positive int, got {max_context!r}")
    self.max_context = max_context
    self.model = LlamaModel(config, max_context, self.dtype, self.device)
    self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False, dtype=self.dtype, device=self.device)
    if config.tie_word_embeddings: self.lm_head.weight = self.model.embed_tokens.weight   # one tensor under both names
    self.rope = _Tables(*rope_tables(config.inv_freq(), max_context, self.device))
    self._materialized = False   # the weights are computed (read from the checkpoint, or drawn) at the first call

  @classmethod
  def from_pretrained(cls, path: str | os.PathLike, device: str | None = None, dtype: DType | str | None = None,
                      max_context: int | None = None) -> Llama:
    """The model of a Hugging Face folder: config.json and model.safetensors (or shards and their
    model.safetensors.index.json). Weights stay in the files until the model first uses them (lazy DISK views copied
    to `device`, cast to `dtype`: default the checkpoint's). A tensor whose name or shape does not fit the config,
    or a missing weight, raises ValueError naming it."""
    raw = read_config(path)
    config = LlamaConfig.from_dict(raw)
    ckpt = Checkpoint(path)
    model = cls(config, device, float_dtype(ckpt, "model.embed_tokens.weight") if dtype is None else dtype, max_context)
    quant.apply_quantization_config(model, raw, "LLaMA")   # int8 checkpoints: their linear layers hold int8 weights
    # rotary_emb.inv_freq: a buffer older transformers saved; a tied lm_head is the embedding (transformers ignores the copy)
    load_weights(model, ckpt, "LLaMA", ignore=lambda n: n.endswith(".rotary_emb.inv_freq") or (config.tie_word_embeddings and n == "lm_head.weight"))
    return model

  def _forward(self, tokens: Tensor, pos: Positions, last_only: bool, checkpoint: bool = False) -> Tensor:
    cos, sin = pos.rows(self.rope.cos, self.rope.sin)
    x = self.model.embed_tokens(tokens)
    for layer in self.model.layers: x = nn.checkpoint(layer, x, pos, cos, sin) if checkpoint else layer(x, pos, cos, sin)
    if last_only: x = x[:, -1:]
    return self.lm_head(self.model.norm(x))

  def _caches(self) -> list[KVCache]: return [layer.self_attn.cache for layer in self.model.layers]

