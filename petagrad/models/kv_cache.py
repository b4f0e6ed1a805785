"""The KV cache of a decoder and every use of `start_pos` (the position of a call's first token).

A decoder call `model(tokens, start_pos)` builds one `Positions` and hands it to its layers; each attention layer
holds a `KVCache`. Everything that depends on start_pos lives in this module: the rows of a position table (RoPE's
cos/sin, GPT-2's position embeddings), the causal mask, the in-place write of the new keys and values into the cache
and the read of the cached prefix.

start_pos is an int or a bound `Variable` (docs/variables.md). Either way the views and masks are sized to the
positions [0, start_pos + length). With an int that is a prompt's prefill (kernels for that prompt length); with a
Variable every offset and the size start_pos + length are read by the kernels when they run (a symbolic shape), so one
compile, and one TinyJit capture of a decode step (`generate` does it), serves every position, and attention reads
only the cached positions written so far.

>>> from petagrad import Tensor
>>> pos = Positions(start_pos=2, length=1, max_context=8)
>>> pos.end, pos.causal_mask("CPU") is None
(3, True)
>>> cache = KVCache(max_context=8, kv_heads=1, head_dim=2)
>>> k, v = cache.update(Tensor.ones(1, 1, 1, 2), Tensor.zeros(1, 1, 1, 2), pos)
>>> k.shape, k[0, 0, :, 0].tolist()
((1, 1, 3, 2), [0.0, 0.0, 1.0])
>>> cache.attention(Tensor.ones(1, 2, 1, 2), Tensor.ones(1, 1, 1, 2), Tensor.full((1, 1, 1, 2), 4.0), Positions(3, 1, 8)).shape
(1, 2, 1, 2)
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
from petagrad.tensor import Tensor
from petagrad.uop.uop import UOp, canonical, smin, smax, sint_str
from petagrad.dtype import DType, dtypes
from petagrad.models.hf import materialize

@dataclass(frozen=True)
class Positions:
  """The positions [start_pos, start_pos + length) of one decoder call, in a context of max_context positions.
  start_pos: an int or a bound Variable (`Variable("start_pos", 0, max_context - 1).bind(n)`).

  Raises TypeError / ValueError when start_pos is not a non-negative int or a bound Variable, or when the tokens
  could pass the end of the context.

  >>> Positions(0, 4, 16).causal_mask("CPU").shape
  (4, 4)
  >>> Positions(15, 2, 16)
  Traceback (most recent call last):
  ...
  ValueError: 2 tokens at start_pos 15 need positions up to 17, longer than the context (max_context 16)
  """
  start_pos: Any
  length: int
  max_context: int
  cached: bool = True   # False: a training forward over whole sequences (start_pos 0): no cache read or written

  def __post_init__(self) -> None:
    sp, n = self.start_pos, self.length
    if smin(n) < 1: raise ValueError(f"a decoder call needs at least one token, got {sint_str(n)}")
    if self.symbolic:
      if smin(sp) < 0: raise ValueError(f"start_pos's Variable must not go below 0, its range starts at {smin(sp)}")
      if smax(self.end) > self.max_context:
        raise ValueError(f"{sint_str(n)} tokens at a start_pos up to {smax(sp)} (the Variables' ranges) could need positions up to "
                         f"{smax(self.end)}, longer than the context (max_context {self.max_context})")
      return
    if isinstance(sp, bool) or not isinstance(sp, int):
      raise TypeError(f"start_pos must be an int or a bound Variable, got {type(sp).__name__} {sp!r}")
    if not self.cached and sp != 0: raise ValueError(f"a forward without the KV cache starts at position 0, got start_pos {sp}")
    if sp < 0: raise ValueError(f"start_pos must be >= 0, got {sp}")
    if sp + self.length > self.max_context:
      raise ValueError(f"{self.length} tokens at start_pos {sp} need positions up to {sp + self.length}, longer than the context "
                       f"(max_context {self.max_context})")

  @property
  def symbolic(self) -> bool:
    """Is start_pos or the number of tokens a bound Variable (an expression over one: its value read by the kernels when
    they run)?"""
    return isinstance(self.start_pos, UOp) or isinstance(self.length, UOp)

  @property
  def end(self) -> Any:
    """One past the last position of this call: the number of cached positions attention reads (an expression over the
    Variables when start_pos or the length is one)."""
    return canonical(self.start_pos + self.length)

  def rows(self, *tables: Tensor) -> list[Tensor]:
    """Rows [start_pos, end) of tables indexed by position (RoPE's cos/sin, learned position embeddings), computed.

    With a Variable start_pos a view at start_pos (one kernel for every position). With an int a gather by a buffer of
    the positions (a one-hot product, exact), not a view: a view at an int offset would be a new kernel, compiled, at
    every position (see _realized). Without the cache (training) the first `length` rows, a view."""
    if not self.cached: return [t[:self.length] for t in tables]
    if self.symbolic: return _realized(self, *[t[self.start_pos:self.end] for t in tables])
    idx = Tensor(list(range(self.start_pos, self.end)), dtype=dtypes.int32, device=tables[0].device).reshape(self.length, 1)
    out = []
    for t in tables:
      t = t.shrink(((0, min(t.shape[0], self.max_context)),) + (None,) * (t.ndim - 1))
      onehot = (idx == Tensor.arange(t.shape[0], dtype=dtypes.int32, device=t.device).reshape(1, -1)).cast(t.dtype)
      out.append(onehot.matmul(t.reshape(t.shape[0], -1)).reshape((self.length,) + t.shape[1:]))
    return _realized(self, *out)

  def causal_mask(self, device: str) -> Tensor | None:
    """The bool mask of which cached positions each new token sees (key j <= the query's position): (length, end), or
    None for one token, which sees the whole cached prefix it reads. (end: symbolic with a Variable start_pos.)"""
    if self.length == 1: return None
    q = Tensor.arange(self.length, device=device).reshape(self.length, 1) + self.start_pos
    return Tensor.arange(self.end, device=device).reshape(1, self.end) <= q

  def write(self, cache: Tensor, value: Tensor) -> None:
    """Write value (..., length, D) into positions [start_pos, end) of cache (..., max_context, D), in place."""
    cache.shrink((None,) * (cache.ndim - 2) + ((self.start_pos, self.end), None)).assign(value)

  def read(self, cache: Tensor) -> Tensor:
    """The cached positions attention reads: [0, end) of cache (..., max_context, D) as a view (of symbolic size with a
    Variable start_pos)."""
    return cache.shrink((None,) * (cache.ndim - 2) + ((0, self.end), None))

def _realized(pos: Positions, *tensors: Tensor) -> list[Tensor]:
  """The tensors, computed now (one schedule) when start_pos is an int; as they are with a Variable.

  Why: with an int start_pos every kernel that depends on it (a view at offset start_pos, attention over end
  positions) is a new kernel at each position, compiled once per position; and the kernels of one realize are
  compiled together. Computing the inputs of those kernels (this call's q, keys and values) and their output on their
  own keeps what each new position compiles to two small programs (the cache write, the attention), while the rest of
  a decode step (norms, projections, MLP: most of the work) reuses the kernels the first step compiled. With a
  Variable every kernel serves every position, and the step fuses as it likes."""
  if not pos.symbolic: Tensor.realize_all(*tensors)
  return list(tensors)

def check_tokens(tokens: Any, device: str) -> Tensor:
  """A decoder call's tokens: a (batch, seq) int Tensor (TypeError / ValueError otherwise), moved to device (tokens
  on several devices, a batch split for data-parallel training, stay where they are)."""
  if not isinstance(tokens, Tensor): raise TypeError(f"tokens must be an int Tensor (batch, seq), got {type(tokens).__name__}")
  if not tokens.dtype.is_int: raise TypeError(f"tokens must be an int Tensor, got {tokens.dtype}")
  if tokens.ndim != 2: raise ValueError(f"tokens must be (batch, seq), got shape {tokens.shape}")
  return tokens if isinstance(tokens.device, tuple) else tokens.to(device)

class KVCache:
  """The keys and values of one attention layer: one buffer (2, batch, kv_heads, max_context, head_dim), keys at [0]
  and values at [1], made (zeroed) on the first call and made again when the batch size changes. Each call writes
  its new keys and values into it in place (one write for both, into a view at start_pos) and attends to the cached
  positions [0, end).

  _state_dict_items: the cache is no weight, so get_state_dict(model) leaves it out."""
  def __init__(self, max_context: int, kv_heads: int, head_dim: int, dtype: DType | None = None, device: str | None = None):
    self.max_context, self.kv_heads, self.head_dim = max_context, kv_heads, head_dim
    self.dtype, self.device = dtype or dtypes.default_float, device
    self.kv: Tensor | None = None

  def update(self, k: Tensor, v: Tensor, pos: Positions) -> tuple[Tensor, Tensor]:
    """Store k and v (batch, kv_heads, length, head_dim) at pos; return views of the keys and values of positions
    [0, pos.end)."""
    self._write(self._new_kv(k, v, pos), pos)
    kv = pos.read(self.kv)   # type: ignore[arg-type]
    return kv[0], kv[1]

  def attention(self, q: Tensor, k: Tensor, v: Tensor, pos: Positions, scale: float | None = None) -> Tensor:
    """Store k and v (batch, kv_heads, length, head_dim) at pos, then attend with q (batch, heads, length, head_dim;
    heads a multiple of kv_heads) to every cached position up to each query's own: (batch, heads, length, head_dim),
    computed. Without the cache (pos.cached False: training) causal attention over k and v, lazy, with gradients."""
    if not pos.cached: return q.scaled_dot_product_attention(k, v, is_causal=True, scale=scale, enable_gqa=True)
    q, new = _realized(pos, q, self._new_kv(k, v, pos))
    self._write(new, pos)
    kv = pos.read(self.kv)   # type: ignore[arg-type]
    out = q.scaled_dot_product_attention(kv[0], kv[1], attn_mask=pos.causal_mask(q.device), scale=scale, enable_gqa=True)
    return _realized(pos, out)[0]

  def _new_kv(self, k: Tensor, v: Tensor, pos: Positions) -> Tensor:
    """k and v stacked (2, batch, kv_heads, length, head_dim) in the cache's dtype; the cache made if needed."""
    if k.shape != v.shape or k.ndim != 4 or k.shape[1:] != (self.kv_heads, pos.length, self.head_dim):
      raise ValueError(f"keys and values must be (batch, {self.kv_heads}, {pos.length}, {self.head_dim}), got {k.shape} and {v.shape}")
    self.ensure(k.shape[0], k.device)
    return k.cast(self.dtype).stack(v.cast(self.dtype)).contiguous()

  def ensure(self, batch: int, device: str) -> None:
    """Make the cache (zeroed, on self.device or else device) unless it is there for this batch size."""
    if self.kv is None or self.kv.shape[1] != batch:
      self.kv = Tensor.zeros(2, batch, self.kv_heads, self.max_context, self.head_dim, dtype=self.dtype, device=self.device or device)
      self.kv = self.kv.contiguous().realize()   # memory of its own, written in place from now on

  def _write(self, new: Tensor, pos: Positions) -> None:
    if pos.max_context > self.max_context: raise ValueError(f"positions up to {pos.max_context} do not fit this cache's {self.max_context}")
    pos.write(self.kv, _realized(pos, new)[0])   # type: ignore[arg-type]

  def clear(self) -> None:
    """Free the cache's memory (the next call makes a new one)."""
    self.kv = None

  def _state_dict_items(self) -> dict[str, Any]: return {}

class Decoder:
  """What GPT2 and Llama share: `model(tokens, start_pos, last_only=False)` -> logits, run without gradients, with the
  weights read on the first call (or by realize_weights()), and clear_cache(). A subclass sets max_context, device and
  _materialized = False, and defines _forward(tokens, pos, last_only) and _caches()."""
  max_context: int
  device: str
  _materialized: bool

  def __call__(self, tokens: Tensor, start_pos: Any = 0, last_only: bool = False) -> Tensor:
    # inference only: the keys and values reach attention through the cache's memory, not the graph, so no gradient could
    # flow back through them; without gradients each realize of the step also walks only what it computes
    with Tensor.no_grad():
      tokens = check_tokens(tokens, self.device)
      pos = Positions(start_pos, tokens.shape[1], self.max_context)
      self.realize_weights()
      return self._forward(tokens, pos, last_only)

  def forward(self, tokens: Tensor, checkpoint: bool = False) -> Tensor:
    """Logits (batch, seq, vocab) of whole sequences, lazy and with gradients (training, scoring): no KV cache is read
    or written, attention is causal over the tokens given (at most max_context). checkpoint=True recomputes each
    decoder layer in the backward pass (nn.checkpoint) instead of keeping its activations: memory for activations grows
    by one layer's input per layer, for about a third more compute.

    >>> from petagrad.models.llama import Llama, LlamaConfig
    >>> m = Llama(LlamaConfig(vocab_size=16, hidden_size=8, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2))
    >>> loss = m.forward(Tensor([[1, 2, 3]])).flatten(0, 1).cross_entropy(Tensor([2, 3, 4]))
    >>> _ = loss.backward(); m.model.layers[0].mlp.up_proj.weight.grad.shape
    (16, 8)
    """
    tokens = check_tokens(tokens, self.device)
    pos = Positions(0, tokens.shape[1], self.max_context, cached=False)
    self.realize_weights()
    return self._forward(tokens, pos, False, checkpoint)

  def _forward(self, tokens: Tensor, pos: Positions, last_only: bool, checkpoint: bool = False) -> Tensor: raise NotImplementedError
  def _caches(self) -> list[KVCache]: raise NotImplementedError

  def realize_weights(self) -> Any:
    """Read every weight from the checkpoint (or draw the random ones) now, into plain buffers on the model's device;
    the first call does it otherwise. Returns the model."""
    if not self._materialized:
      materialize(self)
      self._materialized = True
    return self

  def clear_cache(self) -> None:
    """Free every layer's KV cache (the next call makes new ones), and the decode capture generate() keeps, which holds
    them too."""
    for c in self._caches(): c.clear()
    self.__dict__.pop("_decode_capture", None)
