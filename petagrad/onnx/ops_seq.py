"""ONNX sequence-model ops: Attention, RotaryEmbedding, LinearAttention, CausalConvWithState, SwiGLU, TensorScatter and
the recurrent nets (RNN, GRU, LSTM), as Tensor ops. Recurrences unroll in Python over the (known) sequence length."""
from __future__ import annotations
import math
from typing import Any, Callable
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.onnx import types
from petagrad.onnx.common import NodeContext, ints, axis_of, arange

NEG_INF = float("-inf")

# ------------------------------------------------------------ attention
def _heads(x: Tensor, n: int) -> Tensor:
  """(B, S, H*D) -> (B, H, S, D)."""
  b, s, hd = x.shape
  if hd % n: raise ValueError(f"hidden size {hd} is not a multiple of the number of heads {n}")
  return x.reshape(b, s, n, hd // n).permute(0, 2, 1, 3)

def _softmax_masked(x: Tensor) -> Tensor:
  """softmax over the last dim where a row of -inf gives zeros (not NaN)."""
  m = x.amax(-1, keepdim=True)
  m = (m == NEG_INF).where(0, m)
  e = (x - m).exp()
  s = e.sum(-1, keepdim=True)
  return e / (s == 0).where(1, s)

def _bias_from(allowed: Tensor, dt: Any) -> Tensor: return allowed.where(0.0, NEG_INF).cast(dt)

def Attention(ctx: NodeContext, q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, past_key: Tensor | None = None,
              past_value: Tensor | None = None, nonpad_kv_seqlen: Tensor | None = None, is_causal: int = 0, kv_num_heads: int | None = None,
              q_num_heads: int | None = None, qk_matmul_output_mode: int = 0, scale: float | None = None, softcap: float = 0.0,
              softmax_precision: int | None = None, left_window_size: int = -1, right_window_size: int = -1):
  if (past_key is None) != (past_value is None): raise ValueError("past_key and past_value must be given together")
  three_d = q.ndim == 3
  if three_d:
    if q_num_heads is None or kv_num_heads is None: raise ValueError("3-d inputs need q_num_heads and kv_num_heads")
    q, k, v = _heads(q, q_num_heads), _heads(k, kv_num_heads), _heads(v, kv_num_heads)
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4: raise ValueError(f"Q, K, V must be 3-d or 4-d, got {q.shape}, {k.shape}, {v.shape}")
  dt = q.dtype
  s = 1 / math.sqrt(q.shape[3]) if scale is None else scale
  rs = Tensor(math.sqrt(s), dtype=dt, device=q.device)
  if past_key is not None:
    k, v = past_key.cat(k, dim=2), past_value.cat(v, dim=2)
  present_k, present_v = k, v
  sq, skv = q.shape[2], k.shape[2]
  i_idx, j_idx = arange(sq, q.device).reshape(sq, 1), arange(skv, q.device).reshape(1, skv)
  bias: Tensor = Tensor.zeros(sq, skv, dtype=dt, device=q.device)
  if attn_mask is not None:
    pad = skv - attn_mask.shape[-1]
    if pad > 0:
      attn_mask = attn_mask.pad(((0, 0),) * (attn_mask.ndim - 1) + ((0, pad),), value=False if attn_mask.dtype.is_bool else NEG_INF)
    mask_bias = _bias_from(attn_mask, dt) if attn_mask.dtype.is_bool else attn_mask.cast(dt)
  else: mask_bias = None
  # where the causal frontier and the sliding window sit: the cache length, or per batch with nonpad_kv_seqlen
  if past_key is None and nonpad_kv_seqlen is not None: offset: Any = (nonpad_kv_seqlen.cast(dtypes.int64) - sq).reshape(-1, 1, 1, 1)
  else: offset = past_key.shape[2] if past_key is not None else 0
  if is_causal:
    bias = (mask_bias if mask_bias is not None else bias) + _bias_from(j_idx <= i_idx + offset, dt)
  elif mask_bias is not None: bias = bias + mask_bias
  if left_window_size >= 0 or right_window_size >= 0:
    diff = (i_idx + offset) - j_idx
    allowed = Tensor.ones(*diff.shape, dtype=dtypes.bool, device=q.device)
    if left_window_size >= 0: allowed = allowed & (diff <= left_window_size)
    if right_window_size >= 0: allowed = allowed & (-diff <= right_window_size)
    bias = bias + _bias_from(allowed, dt)
  if nonpad_kv_seqlen is not None:
    bias = bias + _bias_from(j_idx.reshape(1, 1, 1, skv) < nonpad_kv_seqlen.cast(dtypes.int64).reshape(-1, 1, 1, 1), dt)
  hq, hk = q.shape[1], k.shape[1]
  if hq != hk:
    if hq % hk: raise ValueError(f"{hq} query heads are not a multiple of {hk} key/value heads")
    k, v = k.repeat_interleave(hq // hk, dim=1), v.repeat_interleave(hq // hk, dim=1)
  qk = (q * rs).matmul((k * rs).transpose(-1, -2))
  if softcap and softcap > 0: qk = (qk / softcap).tanh() * softcap
  qkb = qk + bias
  qk_out = qkb if qk_matmul_output_mode == 2 else qk
  sm_in = qkb.cast(types.to_dtype(softmax_precision)) if softmax_precision else qkb
  probs = _softmax_masked(sm_in)
  masked_row = bias.amax(-1, keepdim=True) == NEG_INF
  probs = masked_row.where(0, probs)
  if qk_matmul_output_mode == 3: qk_out = probs
  probs = probs.cast(dt)
  y = probs.matmul(v)
  if three_d: y = y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
  return y.cast(dt), present_k, present_v, qk_out.cast(dt)

def FlexAttention(ctx: NodeContext, q: Tensor, k: Tensor, v: Tensor, scale: float | None = None, score_mod: Any = None, prob_mod: Any = None,
                  softmax_precision: int | None = None) -> Tensor:
  if q.ndim != 4 or k.ndim != 4 or v.ndim != 4: raise ValueError(f"FlexAttention needs 4-d Q, K, V, got {q.shape}, {k.shape}, {v.shape}")
  hq, hk = q.shape[1], k.shape[1]
  if hq != hk:
    if hq % hk: raise ValueError(f"{hq} query heads are not a multiple of {hk} key/value heads")
    k, v = k.repeat_interleave(hq // hk, dim=1), v.repeat_interleave(hq // hk, dim=1)
  s = 1 / math.sqrt(q.shape[3]) if scale is None else scale
  rs = Tensor(math.sqrt(s), dtype=dtypes.float32, device=q.device).cast(q.dtype)
  scores = (q * rs).matmul((k * rs).transpose(-1, -2))
  cdt = types.to_dtype(softmax_precision) if softmax_precision else (dtypes.float32 if q.dtype.itemsize < 4 else q.dtype)
  scores = _modify(score_mod, scores.cast(cdt), "score_mod")
  probs = _modify(prob_mod, scores.softmax(-1), "prob_mod")
  return probs.matmul(v.cast(cdt)).cast(v.dtype)

def _modify(g: Any, x: Tensor, what: str) -> Tensor:
  """Run a modifier subgraph (one tensor in, one of the same shape out) on x; x itself when there is none."""
  if g is None: return x
  outs = g.run([x], what)   # (model.Graph.run)
  if len(outs) != 1 or not isinstance(outs[0], Tensor) or outs[0].shape != x.shape:
    raise ValueError(f"FlexAttention's {what} must give one tensor of shape {tuple(x.shape)}")
  return outs[0].cast(x.dtype)

def RotaryEmbedding(ctx: NodeContext, x: Tensor, cos_cache: Tensor, sin_cache: Tensor, position_ids: Tensor | None = None,
                    interleaved: int = 0, num_heads: int = 0, rotary_embedding_dim: int = 0) -> Tensor:
  shape = x.shape
  if x.ndim == 4: x = x.permute(0, 2, 1, 3)            # (B, S, H, D)
  elif x.ndim == 3:
    if not num_heads: raise ValueError("a 3-d input needs num_heads")
    x = x.reshape(shape[0], shape[1], num_heads, -1)
  else: raise ValueError(f"input must be 3-d or 4-d, got shape {shape}")
  d = x.shape[3]
  r = rotary_embedding_dim or d
  if position_ids is not None:
    pid = position_ids.cast(dtypes.int64)
    cos_cache, sin_cache = cos_cache[pid], sin_cache[pid]
  if cos_cache.shape[-1] != r // 2: raise ValueError(f"the cos cache's last dim {cos_cache.shape[-1]} must be rotary_embedding_dim/2 = {r // 2}")
  cos, sin = cos_cache.unsqueeze(2), sin_cache.unsqueeze(2)
  rot, rest = x[..., :r], x[..., r:]
  if interleaved: x1, x2 = rot[..., 0::2], rot[..., 1::2]
  else: x1, x2 = rot[..., :r // 2], rot[..., r // 2:]
  real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
  rot = real.unsqueeze(-1).cat(imag.unsqueeze(-1), dim=-1).reshape(rot.shape) if interleaved else real.cat(imag, dim=-1)
  out = rot.cat(rest, dim=-1) if r < d else rot
  out = out.reshape(shape) if len(shape) == 3 else out.permute(0, 2, 1, 3)
  return out.cast(x.dtype)

def SwiGLU(ctx: NodeContext, a: Tensor, b: Tensor, alpha: float = 1.0) -> Tensor:
  if a.shape != b.shape: raise ValueError(f"SwiGLU needs inputs of one shape, got {a.shape} and {b.shape}")
  return (a * (a * alpha).sigmoid().cast(a.dtype) * b).cast(a.dtype)

def TensorScatter(ctx: NodeContext, cache: Tensor, update: Tensor, write_indices: Tensor | None = None, axis: int = -2,
                  mode: str = "linear") -> Tensor:
  if mode not in ("linear", "circular"): raise ValueError(f"mode must be 'linear' or 'circular', got {mode!r}")
  a = axis_of(axis, cache.ndim)
  L, n, B = cache.shape[a], update.shape[a], cache.shape[0]
  wi = write_indices.cast(dtypes.int64) if write_indices is not None else Tensor.zeros(B, dtype=dtypes.int64, device=cache.device)
  # for each cache slot along axis: which update row lands there (or none), per batch
  pos = arange(L, cache.device).reshape(1, L)
  rel = pos - wi.reshape(B, 1)
  if mode == "circular": rel = (rel % L + L) % L
  hit = (rel >= 0) & (rel < n)                            # (B, L)
  src = hit.where(rel, 0)
  shape = [1] * cache.ndim
  shape[0], shape[a] = B, L
  src_full = src.reshape(shape).expand(*[cache.shape[i] if i != a else L for i in range(cache.ndim)])
  picked = update.gather(a, src_full.shrink(tuple((0, s) for s in src_full.shape))) if n else cache
  return hit.reshape(shape).where(picked, cache)

def LinearAttention(ctx: NodeContext, q: Tensor, k: Tensor, v: Tensor, past_state: Tensor | None = None, decay: Tensor | None = None,
                    beta: Tensor | None = None, chunk_size: int | None = None, kv_num_heads: int | None = None, q_num_heads: int | None = None,
                    scale: float | None = None, update_rule: str = "gated_delta"):
  if update_rule not in ("linear", "gated", "delta", "gated_delta"): raise ValueError(f"unknown update_rule {update_rule!r}")
  if not q_num_heads or not kv_num_heads or q_num_heads % kv_num_heads: raise ValueError("q_num_heads must be a multiple of kv_num_heads")
  gating, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
  if gating != (decay is not None): raise ValueError(f"update_rule {update_rule!r} {'needs' if gating else 'forbids'} the decay input")
  if delta != (beta is not None): raise ValueError(f"update_rule {update_rule!r} {'needs' if delta else 'forbids'} the beta input")
  out_dt = q.dtype
  f32 = dtypes.float32
  b, t, _ = q.shape
  dk, dv, g = q.shape[-1] // q_num_heads, v.shape[-1] // kv_num_heads, q_num_heads // kv_num_heads
  q4, k4, v4 = _heads(q, q_num_heads).cast(f32), _heads(k, kv_num_heads).cast(f32), _heads(v, kv_num_heads).cast(f32)
  if decay is not None:
    d4 = decay.reshape(b, t, kv_num_heads, 1).permute(0, 2, 1, 3) if decay.shape[-1] == kv_num_heads else _heads(decay, kv_num_heads)
    d4 = d4.cast(f32)
  if beta is not None: b4 = beta.reshape(b, t, beta.shape[-1], 1).permute(0, 2, 1, 3).cast(f32)
  state = past_state.cast(f32) if past_state is not None else Tensor.zeros(b, kv_num_heads, dk, dv, dtype=f32, device=q.device)
  sc = 1 / math.sqrt(dk) if not scale else scale
  outs = []
  for i in range(t):
    qt, kt, vt = q4[:, :, i], k4[:, :, i], v4[:, :, i]
    if gating: state = state * d4[:, :, i].exp().unsqueeze(-1)
    if delta:
      got = (state * kt.unsqueeze(-1)).sum(-2)
      vt = b4[:, :, i] * (vt - got)
    state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
    read = state.repeat_interleave(g, dim=1) if g > 1 else state
    outs.append((qt.unsqueeze(-1) * read).sum(-2) * sc)
  y = Tensor.stack(*outs, dim=2).permute(0, 2, 1, 3).reshape(b, t, q_num_heads * dv)
  return y.cast(out_dt), state.cast(past_state.dtype if past_state is not None else out_dt)

def CausalConvWithState(ctx: NodeContext, x: Tensor, w: Tensor, bias: Tensor | None = None, past_state: Tensor | None = None,
                        activation: str = "none"):
  if activation not in ("none", "silu", "swish"): raise ValueError(f"activation must be none, silu or swish, got {activation!r}")
  bsz, c, _ = x.shape
  kk = w.shape[2]
  pad = past_state if past_state is not None else Tensor.zeros(bsz, c, kk - 1, dtype=x.dtype, device=x.device)
  padded = pad.cat(x, dim=2) if kk > 1 else x
  y = padded.conv2d(w, bias, groups=c).cast(x.dtype)
  if activation != "none": y = (y.cast(dtypes.float32) * y.cast(dtypes.float32).sigmoid()).cast(x.dtype)
  return y, padded[:, :, padded.shape[2] - (kk - 1):]

# ------------------------------------------------------------ recurrent nets
_ACT: dict[str, Callable[..., Tensor]] = {
  "sigmoid": lambda x, a, b: x.sigmoid(), "tanh": lambda x, a, b: x.tanh(), "relu": lambda x, a, b: x.relu(),
  "affine": lambda x, a, b: x * a + b, "leakyrelu": lambda x, a, b: (x < 0).where(x * a, x),
  "thresholdedrelu": lambda x, a, b: (x > a).where(x, 0), "scaledtanh": lambda x, a, b: (x * b).tanh() * a,
  "hardsigmoid": lambda x, a, b: (x * a + b).maximum(0).minimum(1), "elu": lambda x, a, b: (x > 0).where(x, (x.exp() - 1) * a),
  "softsign": lambda x, a, b: x / (1 + x.abs()), "softplus": lambda x, a, b: (x.exp() + 1).log()}
_ACT_DEFAULTS = {"affine": (1.0, 0.0), "leakyrelu": (0.01, 0.0), "thresholdedrelu": (1.0, 0.0), "scaledtanh": (1.0, 1.0),
                 "hardsigmoid": (0.2, 0.5), "elu": (1.0, 0.0)}

def _acts(names: tuple | None, alphas: tuple | None, betas: tuple | None, default: list[str], dirs: int) -> list[list[Callable]]:
  names = [n.lower() for n in names] if names else default * dirs
  per = len(default)
  if len(names) != per * dirs: raise ValueError(f"activations {names} must name {per} functions per direction")
  al, be = list(alphas or ()), list(betas or ())
  fns = []
  for i, n in enumerate(names):
    if n not in _ACT: raise NotImplementedError(f"activation {n!r} is not supported")
    da, db = _ACT_DEFAULTS.get(n, (0.0, 0.0))
    a = al[i] if i < len(al) else da
    b = be[i] if i < len(be) else db
    fns.append(lambda x, f=_ACT[n], a=a, b=b: f(x, a, b))
  return [fns[d * per:(d + 1) * per] for d in range(dirs)]

def _rnn_common(x: Tensor, direction: str, layout: int, seq_lens: Tensor | None):
  if direction not in ("forward", "reverse", "bidirectional"):
    raise ValueError(f"direction must be forward, reverse or bidirectional, got {direction!r}")
  if layout: x = x.permute(1, 0, 2)   # (batch, seq, in) -> (seq, batch, in)
  return x, (2 if direction == "bidirectional" else 1), (ints(seq_lens) if seq_lens is not None else None)

def _run_dirs(x: Tensor, dirs: int, direction: str, seq: list[int] | None, step: Callable[[int, Tensor, tuple], tuple], init: list[tuple]):
  """Run `step(d, x_t, state) -> state` over the sequence for each direction; returns (Y (seq, dirs, batch, hidden),
  final states). Steps past a batch row's sequence length keep its state and give zeros."""
  T, B = x.shape[0], x.shape[1]
  ys_all, finals = [], []
  for d in range(dirs):
    rev = direction == "reverse" or d == 1
    state = init[d]
    ys: list[Tensor | None] = [None] * T
    for t in (range(T - 1, -1, -1) if rev else range(T)):
      new = step(d, x[t], state)
      if seq is not None:
        live = Tensor([t < s for s in seq], dtype=dtypes.bool, device=x.device).reshape(B, 1)
        new = tuple(live.where(n, o) for n, o in zip(new, state))
        ys[t] = live.where(new[0], 0)
      else: ys[t] = new[0]
      state = new
    ys_all.append(Tensor.stack(*ys, dim=0))
    finals.append(state)
  return Tensor.stack(*ys_all, dim=1), finals

def _outputs(ctx: NodeContext, Y: Tensor, finals: list[Tensor], layout: int, extra: list[Tensor] | None = None):
  h = Tensor.stack(*finals, dim=0)                      # (dirs, batch, hidden)
  if layout:
    Y, h = Y.permute(2, 0, 1, 3), h.permute(1, 0, 2)
    extra = [e.permute(1, 0, 2) for e in extra] if extra else extra
  return (Y, h, *(extra or []))

def RNN(ctx: NodeContext, x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: Tensor | None = None,
        initial_h: Tensor | None = None, activation_alpha: tuple | None = None, activation_beta: tuple | None = None,
        activations: tuple | None = None, clip: float | None = None, direction: str = "forward", hidden_size: int = 0, layout: int = 0):
  if layout and initial_h is not None: initial_h = initial_h.permute(1, 0, 2)
  x, dirs, seq = _rnn_common(x, direction, layout, sequence_lens)
  H, B = w.shape[1], x.shape[1]
  acts = _acts(activations, activation_alpha, activation_beta, ["tanh"], dirs)
  bias = b if b is not None else Tensor.zeros(dirs, 2 * H, dtype=x.dtype, device=x.device)
  def step(d: int, xt: Tensor, st: tuple) -> tuple:
    pre = xt.matmul(w[d].T) + st[0].matmul(r[d].T) + bias[d, :H] + bias[d, H:]
    if clip is not None: pre = pre.clip(-clip, clip)
    return (acts[d][0](pre),)
  h0 = [(initial_h[d] if initial_h is not None else Tensor.zeros(B, H, dtype=x.dtype, device=x.device),) for d in range(dirs)]
  Y, fin = _run_dirs(x, dirs, direction, seq, step, h0)
  return _outputs(ctx, Y, [f[0] for f in fin], layout)

def GRU(ctx: NodeContext, x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: Tensor | None = None,
        initial_h: Tensor | None = None, activation_alpha: tuple | None = None, activation_beta: tuple | None = None,
        activations: tuple | None = None, clip: float | None = None, direction: str = "forward", hidden_size: int = 0, layout: int = 0,
        linear_before_reset: int = 0):
  if layout and initial_h is not None: initial_h = initial_h.permute(1, 0, 2)
  x, dirs, seq = _rnn_common(x, direction, layout, sequence_lens)
  H, B = w.shape[1] // 3, x.shape[1]
  acts = _acts(activations, activation_alpha, activation_beta, ["sigmoid", "tanh"], dirs)
  bias = b if b is not None else Tensor.zeros(dirs, 6 * H, dtype=x.dtype, device=x.device)
  def step(d: int, xt: Tensor, st: tuple) -> tuple:
    h = st[0]
    wz, wr, wh = w[d, :H], w[d, H:2 * H], w[d, 2 * H:]
    rz, rr, rh = r[d, :H], r[d, H:2 * H], r[d, 2 * H:]
    bb = [bias[d, i * H:(i + 1) * H] for i in range(6)]
    def c(v: Tensor) -> Tensor: return v.clip(-clip, clip) if clip is not None else v
    z = acts[d][0](c(xt.matmul(wz.T) + h.matmul(rz.T) + bb[0] + bb[3]))
    rg = acts[d][0](c(xt.matmul(wr.T) + h.matmul(rr.T) + bb[1] + bb[4]))
    if linear_before_reset: hh = acts[d][1](c(xt.matmul(wh.T) + rg * (h.matmul(rh.T) + bb[5]) + bb[2]))
    else: hh = acts[d][1](c(xt.matmul(wh.T) + (rg * h).matmul(rh.T) + bb[5] + bb[2]))
    return ((1 - z) * hh + z * h,)
  h0 = [(initial_h[d] if initial_h is not None else Tensor.zeros(B, H, dtype=x.dtype, device=x.device),) for d in range(dirs)]
  Y, fin = _run_dirs(x, dirs, direction, seq, step, h0)
  return _outputs(ctx, Y, [f[0] for f in fin], layout)

def LSTM(ctx: NodeContext, x: Tensor, w: Tensor, r: Tensor, b: Tensor | None = None, sequence_lens: Tensor | None = None,
         initial_h: Tensor | None = None, initial_c: Tensor | None = None, p: Tensor | None = None, activation_alpha: tuple | None = None,
         activation_beta: tuple | None = None, activations: tuple | None = None, clip: float | None = None, direction: str = "forward",
         hidden_size: int = 0, input_forget: int = 0, layout: int = 0):
  if layout:
    initial_h = initial_h.permute(1, 0, 2) if initial_h is not None else None
    initial_c = initial_c.permute(1, 0, 2) if initial_c is not None else None
  x, dirs, seq = _rnn_common(x, direction, layout, sequence_lens)
  H, B = w.shape[1] // 4, x.shape[1]
  acts = _acts(activations, activation_alpha, activation_beta, ["sigmoid", "tanh", "tanh"], dirs)
  bias = b if b is not None else Tensor.zeros(dirs, 8 * H, dtype=x.dtype, device=x.device)
  peep = p if p is not None else Tensor.zeros(dirs, 3 * H, dtype=x.dtype, device=x.device)
  def step(d: int, xt: Tensor, st: tuple) -> tuple:
    h, c_ = st
    g = xt.matmul(w[d].T) + h.matmul(r[d].T) + bias[d, :4 * H] + bias[d, 4 * H:]
    if clip is not None: g = g.clip(-clip, clip)
    gi, go, gf, gc = g[:, :H], g[:, H:2 * H], g[:, 2 * H:3 * H], g[:, 3 * H:]
    pi, po, pf = peep[d, :H], peep[d, H:2 * H], peep[d, 2 * H:]
    i = acts[d][0](gi + pi * c_)
    f = acts[d][0](gf + pf * c_)
    if input_forget: f = 1 - i
    ct = f * c_ + i * acts[d][1](gc)
    o = acts[d][0](go + po * ct)
    return (o * acts[d][2](ct), ct)
  zeros = Tensor.zeros(B, H, dtype=x.dtype, device=x.device)
  init = [(initial_h[d] if initial_h is not None else zeros, initial_c[d] if initial_c is not None else zeros) for d in range(dirs)]
  Y, fin = _run_dirs(x, dirs, direction, seq, step, init)
  return _outputs(ctx, Y, [f[0] for f in fin], layout, [Tensor.stack(*[f[1] for f in fin], dim=0)])
