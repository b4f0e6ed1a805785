"""Sampling from a language model's logits, and `generate`: a prompt run once, then one token per call through the
model's KV cache.

Sampling runs on the logits' device with tensor ops; only the chosen token ids are read back. In the order
transformers applies them: temperature (0: greedy, the argmax), top-k (keep the k largest logits and every logit
equal to the k-th), top-p (keep the smallest set of the most likely tokens whose probability adds up to at least
top_p, with every token as likely as the least likely of the set), then a draw from the softmax of what is kept
(Gumbel-max: the argmax of logits plus Gumbel noise, with `Tensor.rand`, so `Tensor.manual_seed` or generate's seed=
makes it reproducible).

The thresholds of top-k and top-p are found without sorting the vocabulary: each float32 logit maps to a uint32 key
with the same order, and the threshold key is built 4 bits at a time, from the top, by counting (top-k) or adding up
the probabilities (top-p) of the tokens at or above 16 candidate keys at once: 8 rounds of O(vocab * 16) work.

>>> from petagrad import Tensor
>>> logits = Tensor([[0.0, 3.0, 1.0, 2.0]])
>>> sample(logits).tolist(), sample(logits, temperature=1.0, top_k=1).tolist()
([1], [1])
>>> filter_logits(logits, top_k=2).tolist()
[[-inf, 3.0, -inf, 2.0]]
"""
from __future__ import annotations
import math
from typing import Any, Iterator, Sequence
from petagrad.tensor import Tensor, Variable
from petagrad.engine.jit import TinyJit
from petagrad.uop.graph import view_buffers
from petagrad.nn.state import get_state_dict
from petagrad.dtype import dtypes

DIGIT_BITS = 4   # bits of the threshold key found per round: 2**DIGIT_BITS candidates each, 32 / DIGIT_BITS rounds

def _check_logits(logits: Any) -> Tensor:
  if not isinstance(logits, Tensor): raise TypeError(f"logits must be a Tensor (batch, vocab), got {type(logits).__name__}")
  if logits.ndim != 2: raise ValueError(f"logits must be (batch, vocab), got shape {logits.shape}")
  if not logits.dtype.is_float: raise TypeError(f"logits must be a float Tensor, got {logits.dtype}")
  return logits

def _check_sampling(temperature: float, top_k: int, top_p: float) -> None:
  if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0 or math.isinf(temperature):
    raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
  if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0: raise ValueError(f"top_k must be an int >= 0 (0: off), got {top_k!r}")
  if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0 < top_p <= 1:
    raise ValueError(f"top_p must be in (0, 1] (1: off), got {top_p!r}")

def order_keys(x: Tensor) -> Tensor:
  """uint32 keys in the order of the float32 values x: flip every bit of a negative float, set the sign bit of the
  others (-inf is the smallest of the non-NaN values, +inf the largest)."""
  bits = x.cast(dtypes.float32).bitcast(dtypes.uint32)
  return (bits >> 31).cast(dtypes.bool).where(bits ^ 0xFFFFFFFF, bits | 0x80000000)

def _value(v: float, device: str) -> Tensor:
  """A sampling parameter as a (1, 1) float32 buffer, not a constant in the kernels: other values reuse the compiled ones."""
  return Tensor([[float(v)]], dtype=dtypes.float32, device=device)

def _largest_key(keys: Tensor, weights: Tensor, target: Tensor) -> Tensor:
  """Per row of keys (batch, vocab): the largest key K such that the weights of the elements with key >= K add up
  to at least target (batch, 1), which must hold for K = 0. (batch, 1) uint32. Built DIGIT_BITS bits per round from
  the most significant: the sum is non-increasing in K, so each round keeps the largest digit whose sum reaches the
  target."""
  n = 1 << DIGIT_BITS
  digits = Tensor.arange(n, device=keys.device).cast(dtypes.uint32).reshape(1, n, 1)
  prefix = Tensor.zeros(keys.shape[0], 1, dtype=dtypes.uint32, device=keys.device)
  for shift in range(32 - DIGIT_BITS, -1, -DIGIT_BITS):
    cand = prefix.reshape(-1, 1, 1) | (digits << shift)                                              # (batch, n, 1)
    total = (keys.unsqueeze(1) >= cand).where(weights.unsqueeze(1), 0).sum(-1)                        # (batch, n)
    best = ((total >= target).cast(dtypes.int32).sum(-1, keepdim=True) - 1).maximum(0).cast(dtypes.uint32)   # (batch, 1)
    prefix = prefix | (best << shift)
  return prefix

def filter_logits(logits: Tensor, top_k: int = 0, top_p: float = 1.0) -> Tensor:
  """logits (batch, vocab) with the tokens outside top-k, then outside the top-p nucleus, set to -inf. top_k keeps the
  k largest logits (and any equal to the k-th); top_p keeps the smallest set of most likely tokens whose probability
  (softmax of the top-k logits) adds up to at least top_p (and any token as likely as the least likely kept).
  top_k=0 and top_p=1 are off.

  >>> filter_logits(Tensor([[2.0, 1.0, 0.0, -1.0]]), top_p=0.8).tolist()   # probabilities 0.64, 0.24, 0.09, 0.03
  [[2.0, 1.0, -inf, -inf]]
  """
  logits = _check_logits(logits)
  _check_sampling(1.0, top_k, top_p)
  x = logits.cast(dtypes.float32)
  keys = order_keys(x)
  if 0 < top_k < x.shape[-1]:
    kth = _largest_key(keys, Tensor.ones(*x.shape, device=x.device), _value(top_k, x.device))
    x = (keys >= kth).where(x, -math.inf)
  if top_p < 1.0:
    probs = x.softmax(-1)
    target = probs.sum(-1, keepdim=True) * _value(top_p, x.device)   # (the same kind of sum over the whole row, times top_p)
    cut = _largest_key(keys, probs, target)
    x = (keys >= cut).where(x, -math.inf)
  return x.cast(logits.dtype)

def sample(logits: Tensor, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0) -> Tensor:
  """One token id per row of logits (batch, vocab): (batch,) int32, computed on the logits' device. temperature 0 is
  greedy (the first argmax; top_k and top_p do not change it); otherwise logits / temperature, filtered by
  filter_logits(top_k, top_p), then drawn from their softmax with Tensor.rand (seed it with Tensor.manual_seed)."""
  logits = _check_logits(logits)
  _check_sampling(temperature, top_k, top_p)
  if temperature == 0: return logits.argmax(-1).cast(dtypes.int32)
  x = filter_logits(logits.cast(dtypes.float32) / _value(temperature, logits.device), top_k, top_p)
  # Gumbel-max: argmax(x - log(-log(u))) is distributed as softmax(x); u in (0, 1) (rand gives [0, 1))
  u = Tensor.rand(*x.shape, device=x.device).maximum(1e-10)
  return (x - (-u.log()).log()).argmax(-1).cast(dtypes.int32)

def _held_fixed(model: Any) -> tuple:
  """What a decode capture takes as fixed: the memory of each weight (a computed weight, such as a quantized view, by its
  graph) and of each layer's KV cache."""
  def held(t: Tensor | None) -> Any:
    if t is None: return None
    return tuple(bufs) if (bufs := view_buffers(t.uop)) is not None else t.uop
  caches = model._caches() if hasattr(model, "_caches") else []
  return tuple(held(t) for t in get_state_dict(model).values()) + tuple(held(c.kv) for c in caches)

def generate(model: Any, prompt_ids: Sequence[int], max_new_tokens: int, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
             seed: int | None = None, stop_ids: Sequence[int] = ()) -> Iterator[int]:
  """Yield up to max_new_tokens token ids that model (a decoder called as `model(tokens, start_pos)`, such as Llama or
  GPT2) continues prompt_ids with: the prompt is run once (prefill, start_pos 0), then each token is fed back alone at
  the next position, so attention reads the KV cache instead of recomputing the prefix. Sampling as in `sample`
  (temperature 0: greedy); seed: Tensor.manual_seed(seed) first, for a reproducible draw. Stops after a token of
  stop_ids (which is yielded). Raises ValueError when the prompt and the new tokens do not fit the model's
  max_context.

  Each decode step runs under one TinyJit capture: start_pos is a Variable bound to the step's position (the kernels read
  it when they run: models/kv_cache.py), so the second step captures and every later one replays, with no graph built
  in Python. The capture is kept on the model for the next call with the same sampling settings, as long as the model
  holds the same weights and KV caches (a weight replaced, say by quantize_linears, or a cache made anew, and the next
  call captures again; values written in place are read by the replays; `model.clear_cache()` drops it with the caches,
  and with it the memory it holds). A model without a max_context runs its decode steps eagerly with int positions.

  >>> from petagrad.models.gpt2 import GPT2, GPT2Config
  >>> from petagrad import Tensor
  >>> Tensor.manual_seed(0); model = GPT2(GPT2Config(vocab_size=16, n_positions=16, n_embd=8, n_layer=1, n_head=2))
  >>> len(list(generate(model, [1, 2, 3], max_new_tokens=4, temperature=0.8, seed=1)))
  4
  """
  if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
    raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
  _check_sampling(temperature, top_k, top_p)
  ids = [int(i) for i in prompt_ids]
  if not ids: raise ValueError("the prompt needs at least one token")
  limit = getattr(model, "max_context", None)
  if limit is not None and len(ids) + max_new_tokens - 1 > limit:
    raise ValueError(f"a prompt of {len(ids)} tokens and {max_new_tokens} new tokens need {len(ids) + max_new_tokens - 1} positions, "
                     f"longer than the context (max_context {limit})")
  if max_new_tokens == 0: return
  if seed is not None: Tensor.manual_seed(seed)
  device = getattr(model, "device", None)
  stop = set(stop_ids)
  def step(tok: Tensor, start_pos: Any) -> Tensor:
    return sample(model(tok.reshape(1, 1), start_pos, last_only=True)[:, -1, :], temperature, top_k, top_p).realize()
  def prefill(toks: Tensor, n: Any) -> Tensor:   # the first n of toks (1, max_context) at position 0
    return sample(model(toks[:, :n], 0, last_only=True)[:, -1, :], temperature, top_k, top_p).realize()
  # (a Variable needs the context's size)
  var = Variable("start_pos", 0, limit - 1) if limit is not None else None
  decode: Any = step
  if var is None: nxt = sample(model(Tensor([ids], dtype=dtypes.int32, device=device), 0, last_only=True)[:, -1, :], temperature, top_k, top_p)
  else:
    # (the weights and caches the captures read and write are the key: made now, not by the first call)
    if hasattr(model, "realize_weights"): model.realize_weights()
    for c in (model._caches() if hasattr(model, "_caches") else []): c.ensure(1, device)
    key = (float(temperature), int(top_k), float(top_p), _held_fixed(model))
    kept = getattr(model, "_decode_capture", None)
    if kept is not None and kept[0] == key: first, decode = kept[1]
    else:
      first, decode = TinyJit(prefill), TinyJit(step)
      try: model._decode_capture = (key, (first, decode))
      except AttributeError: pass   # (a model with __slots__: a capture per call)
    # the prompt's length is a Variable too (a symbolic shape): one capture of the prefill serves every prompt
    toks = Tensor([ids + [0] * (limit - len(ids))], dtype=dtypes.int32, device=device)
    nxt = first(toks, Variable("prompt_len", 1, limit).bind(len(ids)))
  pos = len(ids)
  for i in range(max_new_tokens):
    tok = int(nxt.item())   # the only read back of a step: one id
    yield tok
    if tok in stop or i == max_new_tokens - 1: return
    nxt = decode(nxt, var.bind(pos) if var is not None else pos)
    pos += 1
