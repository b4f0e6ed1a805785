"""GPT-2 with the weights of Hugging Face's `GPT2LMHeadModel`.

Token and learned position embeddings, pre-LayerNorm blocks (multi-head causal self-attention, an MLP with GELU's
tanh approximation), a final LayerNorm, and an output projection tied to the token embedding. The weights have
Hugging Face's names (`transformer.h.{i}.attn.c_attn.weight`, ...) and its Conv1D layout: (in_features,
out_features), so a layer is `x @ weight + bias`.

`GPT2.from_pretrained(folder)` reads a Hugging Face folder (checkpoints with or without the `transformer.` prefix);
`model(tokens, start_pos)` returns logits and keeps a KV cache per layer (petagrad/models/kv_cache.py).

>>> from petagrad import Tensor
>>> Tensor.manual_seed(0); model = GPT2(GPT2Config(vocab_size=50, n_positions=32, n_embd=16, n_layer=1, n_head=2))
>>> model(Tensor([[1, 2, 3]]), 0).shape, model(Tensor([[4]]), 3, last_only=True).shape
((1, 3, 50), (1, 1, 50))
"""
from __future__ import annotations
import math, os
from dataclasses import dataclass
from typing import Any, Mapping
from petagrad.tensor import Tensor
from petagrad.dtype import DType, dtypes
from petagrad.device import Device
from petagrad import nn
from petagrad.models.hf import Checkpoint, activation, config_value, float_dtype, float_dtype_arg, load_weights, positive, read_config
from petagrad.models.kv_cache import Decoder, KVCache, Positions

@dataclass(frozen=True)
class GPT2Config:
  """The fields of a GPT-2 config.json that the model uses (Hugging Face's names and defaults: GPT-2 small)."""
  vocab_size: int = 50257
  n_positions: int = 1024
  n_embd: int = 768
  n_layer: int = 12
  n_head: int = 12
  n_inner: int | None = None   # None: 4 * n_embd
  activation_function: str = "gelu_new"
  layer_norm_epsilon: float = 1e-5
  scale_attn_weights: bool = True
  scale_attn_by_inverse_layer_idx: bool = False
  tie_word_embeddings: bool = True

  def __post_init__(self) -> None:
    for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"): positive(k, getattr(self, k))
    if self.n_inner is not None: positive("n_inner", self.n_inner)
    if self.n_embd % self.n_head: raise ValueError(f"config.json: n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
    activation(self.activation_function, "activation_function")

  @property
  def inner(self) -> int: return self.n_inner or 4 * self.n_embd

  @staticmethod
  def from_dict(d: Mapping[str, Any]) -> GPT2Config:
    """From a config.json object. Options this model does not implement (reorder_and_upcast_attn, cross-attention)
    raise ValueError."""
    for k in ("add_cross_attention", "reorder_and_upcast_attn"):
      if config_value(d, k, bool, False): raise ValueError(f"config.json: {k}=true is not supported")
    v = lambda k, kind, default=...: config_value(d, k, kind, default)   # noqa: E731
    return GPT2Config(
      vocab_size=v("vocab_size", int, 50257), n_positions=v("n_positions", int, 1024), n_embd=v("n_embd", int, 768),
      n_layer=v("n_layer", int, 12), n_head=v("n_head", int, 12), n_inner=v("n_inner", int, None),
      activation_function=v("activation_function", str, "gelu_new"), layer_norm_epsilon=v("layer_norm_epsilon", float, 1e-5),
      scale_attn_weights=v("scale_attn_weights", bool, True), scale_attn_by_inverse_layer_idx=v("scale_attn_by_inverse_layer_idx", bool, False),
      tie_word_embeddings=v("tie_word_embeddings", bool, True))

class Conv1D:
  """Hugging Face's GPT-2 "Conv1D": a linear layer whose weight is stored (in_features, out_features): x @ weight + bias."""
  def __init__(self, in_features: int, out_features: int, dtype: DType, device: str):
    self.weight = (Tensor.randn(in_features, out_features, dtype=dtype, device=device) * 0.02).requires_grad_(True)
    self.bias = Tensor.zeros(out_features, dtype=dtype, device=device).requires_grad_(True)
  def __call__(self, x: Tensor) -> Tensor: return x.matmul(self.weight) + self.bias

class GPT2Attention:
  def __init__(self, cfg: GPT2Config, layer_idx: int, max_context: int, dtype: DType, device: str):
    D = cfg.n_embd
    self.heads, self.head_dim = cfg.n_head, D // cfg.n_head
    self.c_attn, self.c_proj = Conv1D(D, 3 * D, dtype, device), Conv1D(D, D, dtype, device)
    self.scale = (1 / math.sqrt(self.head_dim) if cfg.scale_attn_weights else 1.0) / (layer_idx + 1 if cfg.scale_attn_by_inverse_layer_idx else 1)
    self.cache = KVCache(max_context, self.heads, self.head_dim, dtype, device)
  def __call__(self, x: Tensor, pos: Positions) -> Tensor:
    B, T, D = x.shape
    q, k, v = self.c_attn(x).reshape(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)   # each (B, heads, T, head_dim)
    out = self.cache.attention(q, k, v, pos, scale=self.scale)
    return self.c_proj(out.transpose(1, 2).reshape(B, T, D))

class GPT2MLP:
  def __init__(self, cfg: GPT2Config, dtype: DType, device: str):
    self.c_fc, self.c_proj = Conv1D(cfg.n_embd, cfg.inner, dtype, device), Conv1D(cfg.inner, cfg.n_embd, dtype, device)
    self.act = activation(cfg.activation_function, "activation_function")
  def __call__(self, x: Tensor) -> Tensor: return self.c_proj(self.act(self.c_fc(x)))

class GPT2Block:
  def __init__(self, cfg: GPT2Config, layer_idx: int, max_context: int, dtype: DType, device: str):
    self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon, dtype=dtype, device=device)
    self.attn = GPT2Attention(cfg, layer_idx, max_context, dtype, device)
    self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon, dtype=dtype, device=device)
    self.mlp = GPT2MLP(cfg, dtype, device)
  def __call__(self, x: Tensor, pos: Positions) -> Tensor:
    h = x + self.attn(self.ln_1(x), pos)
    return h + self.mlp(self.ln_2(h))

class GPT2Transformer:
  def __init__(self, cfg: GPT2Config, max_context: int, dtype: DType, device: str):
    self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd, dtype=dtype, device=device)
    self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd, dtype=dtype, device=device)
    for e in (self.wte, self.wpe): e.weight.replace(e.weight * 0.02)   # random init: N(0, 0.02) like transformers' initializer_range
    self.h = [GPT2Block(cfg, i, max_context, dtype, device) for i in range(cfg.n_layer)]
    self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon, dtype=dtype, device=device)

class GPT2(Decoder):
  """A GPT-2 causal language model. `GPT2(config)` has random weights; `GPT2.from_pretrained(folder)` loads a Hugging
  Face folder. Call it as `model(tokens, start_pos)`: tokens (batch, seq) int, start_pos the position of
  tokens[:, 0]; returns logits (batch, seq, vocab_size) (the last position only with last_only=True). Each call stores
  its keys and values in the per-layer KV cache ((batch, heads, max_context, head_dim) keys and values, made on the first
  call and again when the batch size changes).

  max_context: positions the KV cache holds (default and at most n_positions, the learned position embeddings); a call
  past it raises ValueError. dtype: the weights' and activations' dtype (default float32)."""
  def __init__(self, config: GPT2Config, device: str | None = None, dtype: DType | str | None = None, max_context: int | None = None):
    if not isinstance(config, GPT2Config): raise TypeError(f"config must be a GPT2Config, got {type(config).__name__}")
    self.config = config
    self.device: str = Device.canonicalize(device) if device is not None else Device.DEFAULT
    self.dtype: DType = dtypes.default_float if dtype is None else float_dtype_arg(dtype)
    if max_context is None: max_context = config.n_positions
    if isinstance(max_context, bool) or not isinstance(max_context, int) or not 1 <= max_context <= config.n_positions:
      raise ValueError(f"max_context must be an int in [1, n_positions = {config.n_positions}] (GPT-2 learned that many positions), "
                       f"got {max_context!r}")
    self.max_context = max_context
    self.transformer = GPT2Transformer(config, max_context, self.dtype, self.device)
    self._materialized = False   # the weights are computed (read from the checkpoint, or drawn) at the first call
    if not config.tie_word_embeddings:
      self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False, dtype=self.dtype, device=self.device)

  @classmethod
  def from_pretrained(cls, path: str | os.PathLike, device: str | None = None, dtype: DType | str | None = None,
                      max_context: int | None = None) -> GPT2:
    """The model of a Hugging Face folder: config.json and model.safetensors (or shards and their
    model.safetensors.index.json); tensor names with or without the `transformer.` prefix. Weights stay in the files
    until the model first uses them (lazy DISK views copied to `device`, cast to `dtype`: default the checkpoint's).
    A tensor whose name or shape does not fit the config, or a missing weight, raises ValueError naming it."""
    config = GPT2Config.from_dict(read_config(path))
    ckpt = Checkpoint(path)
    def rename(n: str) -> str: return n if n.startswith("transformer.") or n.startswith("lm_head.") else "transformer." + n
    emb = next((n for n in ckpt if rename(n) == "transformer.wte.weight"), "transformer.wte.weight")
    model = cls(config, device, float_dtype(ckpt, emb) if dtype is None else dtype, max_context)
    # attn.bias / attn.masked_bias: the causal-mask buffers older checkpoints hold; a tied lm_head is wte (a copy is ignored)
    def ignore(n: str) -> bool:
      return n.endswith(".attn.bias") or n.endswith(".attn.masked_bias") or (config.tie_word_embeddings and n == "lm_head.weight")
    load_weights(model, ckpt, "GPT-2", rename, ignore)
    return model

  def _forward(self, tokens: Tensor, pos: Positions, last_only: bool, checkpoint: bool = False) -> Tensor:
    t = self.transformer
    wpe, = pos.rows(t.wpe.weight)
    x = t.wte(tokens) + wpe
    for block in t.h: x = nn.checkpoint(block, x, pos) if checkpoint else block(x, pos)
    if last_only: x = x[:, -1:]
    x = t.ln_f(x)
    return self.lm_head(x) if not self.config.tie_word_embeddings else x.matmul(t.wte.weight.T)

  def _caches(self) -> list[KVCache]: return [block.attn.cache for block in self.transformer.h]
