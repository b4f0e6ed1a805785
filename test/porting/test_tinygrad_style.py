"""Porting suite, tinygrad side: programs written the way a tinygrad 0.14 user writes them, run on petagrad with
only the import changed, compared with PyTorch doing the same math (same initial weights, copied via numpy).

Runs on the default device only (Device.DEFAULT, CPU here): these are whole programs, and the PYTHON device
would take minutes; op-by-device coverage lives in test/backend.

Each program runs twice: `literal=True` is the tinygrad code exactly as written for tinygrad (strict xfail while a
form it uses is missing: the reason names the forms); `literal=False` swaps only those forms for today's petagrad
spelling, so the numerics are pinned now. Single forms are pinned one per case further down (test_form_*):
when a form lands its case XPASSes (strict) and the mark must be removed. See INVENTORY.md.
"""
from __future__ import annotations
import functools, importlib, math, os, tempfile
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from petagrad import Tensor, nn, dtypes
from petagrad.nn.state import get_parameters, get_state_dict, safe_save, safe_load, load_state_dict
from petagrad.nn.optim import Adam, SGD, AdamW
from porting_helpers import xf, to_np, pg_from, assert_close, copy_linear, copy_bn

def _seq(x: Tensor, layers, literal: bool) -> Tensor:
  if literal: return x.sequential(layers)
  return functools.reduce(lambda acc, f: f(acc), layers, x)

def _tinyjit(literal: bool):
  if literal:
    from petagrad import TinyJit   # tinygrad: `from tinygrad import TinyJit`
    return TinyJit
  from petagrad.engine.jit import TinyJit
  return TinyJit

def _train_ctx(literal: bool):
  return Tensor.train() if literal else nn.train()

# ====================================================================== (a) beautiful_mnist-style CNN training
@pytest.mark.parametrize("literal", [False, True])
def test_mnist_cnn_train_steps(literal):
  torch.manual_seed(0)
  tm = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.BatchNorm2d(4), torch.nn.MaxPool2d(2),
                           torch.nn.Flatten(1), torch.nn.Linear(36, 10))
  topt = torch.optim.Adam(tm.parameters())
  rng = np.random.default_rng(0)
  xs, ys = rng.standard_normal((8, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 8)

  class Model:
    def __init__(self):
      self.layers = [nn.Conv2d(1, 4, 3), Tensor.relu, nn.BatchNorm(4), Tensor.max_pool2d, lambda x: x.flatten(1), nn.Linear(36, 10)]
    def __call__(self, x: Tensor) -> Tensor: return _seq(x, self.layers, literal)
  model = Model()
  copy_linear(model.layers[0], tm[0]); copy_bn(model.layers[2], tm[2]); copy_linear(model.layers[5], tm[5])
  opt = Adam(get_parameters(model))
  X, Y = Tensor(xs), Tensor(ys)
  TinyJit = _tinyjit(literal)

  if literal:
    @TinyJit
    @Tensor.train()
    def train_step() -> Tensor:
      opt.zero_grad()
      loss = model(X).sparse_categorical_crossentropy(Y).backward()
      return loss.realize(*opt.schedule_step())
  else:
    @TinyJit
    def train_step() -> Tensor:
      with nn.train():
        opt.zero_grad()
        loss = model(X).sparse_categorical_crossentropy(Y).backward()
        return loss.realize(*opt.schedule_step())

  tx, ty = torch.tensor(xs), torch.tensor(ys)
  tm.train()
  for step in range(4):   # warm-up, capture, 2 replays
    loss = train_step()
    topt.zero_grad()
    tl = F.cross_entropy(tm(tx), ty)
    tl.backward()
    topt.step()
    assert_close(f"loss at step {step}", loss, tl, atol=1e-5, rtol=1e-4)
  assert_close("conv weight after 4 steps", model.layers[0].weight, tm[0].weight, atol=1e-5, rtol=1e-4)
  assert_close("linear bias after 4 steps", model.layers[5].bias, tm[5].bias, atol=1e-5, rtol=1e-4)
  assert_close("bn running_mean", model.layers[2].running_mean, tm[2].running_mean, atol=1e-5, rtol=1e-4)
  assert_close("bn running_var", model.layers[2].running_var, tm[2].running_var, atol=1e-5, rtol=1e-4)
  # eval forward after training
  assert_close("eval logits", model(X), tm.eval()(tx), atol=1e-4, rtol=1e-4)

# ====================================================================== (b) LLaMA-style block with RoPE + KV cache

def precompute_freqs_cis(dim: int, end: int, literal: bool, theta: float = 10000.0) -> Tensor:
  freqs = 1.0 / (theta ** (Tensor.arange(0, dim, 2)[:(dim // 2)] / dim))
  freqs = Tensor.arange(end).unsqueeze(dim=1) * freqs.unsqueeze(dim=0)
  st = Tensor.stack(freqs.cos(), freqs.sin(), dim=-1) if literal else Tensor.stack([freqs.cos(), freqs.sin()], dim=-1)
  return st.reshape(1, end, 1, dim // 2, 2)

def complex_mult(A, c, d):
  a, b = A[..., 0:1], A[..., 1:2]
  ro = a * c - b * d
  co = a * d + b * c
  return ro.cat(co, dim=-1)

def apply_rotary_emb(xq, xk, freqs_cis):
  xq = xq.reshape(*xq.shape[0:-1], -1, 2)
  xk = xk.reshape(*xk.shape[0:-1], -1, 2)
  c, d = freqs_cis[..., 0:1], freqs_cis[..., 1:2]
  return complex_mult(xq, c, d).flatten(3), complex_mult(xk, c, d).flatten(3)

def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
  bs, seqlen, n_kv_heads, head_dim = x.shape
  if n_rep == 1: return x
  return x.repeat((1, 1, 1, n_rep)).reshape(bs, seqlen, n_kv_heads * n_rep, head_dim)

class Attention:
  def __init__(self, dim, n_heads, n_kv_heads, max_context, literal):
    self.n_heads, self.n_kv_heads, self.head_dim, self.max_context, self.literal = n_heads, n_kv_heads, dim // n_heads, max_context, literal
    self.n_rep = n_heads // n_kv_heads
    self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
    self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
    self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
    self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
  def __call__(self, x: Tensor, start_pos: int, freqs_cis: Tensor, mask: Tensor | None) -> Tensor:
    xq, xk, xv = self.wq(x), self.wk(x), self.wv(x)
    xq = xq.reshape(xq.shape[0], xq.shape[1], self.n_heads, self.head_dim)
    xk = xk.reshape(xk.shape[0], xk.shape[1], self.n_kv_heads, self.head_dim)
    xv = xv.reshape(xv.shape[0], xv.shape[1], self.n_kv_heads, self.head_dim)
    xq, xk = apply_rotary_emb(xq, xk, freqs_cis)
    bsz, seqlen, _, _ = xq.shape
    if not hasattr(self, "cache_kv"):
      self.cache_kv = Tensor.zeros(2, bsz, self.max_context, self.n_kv_heads, self.head_dim, dtype=x.dtype).contiguous().realize()
    kv = Tensor.stack(xk, xv) if self.literal else Tensor.stack([xk, xv])
    self.cache_kv.shrink((None, None, (start_pos, start_pos + seqlen), None, None)).assign(kv).realize()
    keys = self.cache_kv[0].shrink((None, (0, start_pos + seqlen), None, None))
    values = self.cache_kv[1].shrink((None, (0, start_pos + seqlen), None, None))
    keys, values = repeat_kv(keys, self.n_rep), repeat_kv(values, self.n_rep)
    xq, keys, values = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
    attn = xq.scaled_dot_product_attention(keys, values, mask).transpose(1, 2)
    return self.wo(attn.reshape(bsz, seqlen, -1))

class FeedForward:
  def __init__(self, dim, hidden_dim):
    self.w1, self.w2, self.w3 = nn.Linear(dim, hidden_dim, bias=False), nn.Linear(hidden_dim, dim, bias=False), nn.Linear(dim, hidden_dim, bias=False)
  def __call__(self, x: Tensor) -> Tensor: return self.w2(self.w1(x).silu() * self.w3(x))

class TransformerBlock:
  def __init__(self, dim, hidden_dim, n_heads, n_kv_heads, norm_eps, max_context, literal):
    self.attention = Attention(dim, n_heads, n_kv_heads, max_context, literal)
    self.feed_forward = FeedForward(dim, hidden_dim)
    self.attention_norm, self.ffn_norm = nn.RMSNorm(dim, norm_eps), nn.RMSNorm(dim, norm_eps)
  def __call__(self, x: Tensor, start_pos: int, freqs_cis: Tensor, mask: Tensor | None) -> Tensor:
    h = x + self.attention(self.attention_norm(x), start_pos, freqs_cis, mask)
    return (h + self.feed_forward(self.ffn_norm(h))).contiguous()

def _torch_block(p: dict, x, start_pos, cache, n_heads, n_kv_heads, eps, max_context):
  """The same block in plain torch (complex RoPE via torch.view_as_complex, the Meta reference formulation)."""
  bsz, seqlen, dim = x.shape
  hd = dim // n_heads
  def rms(v, w): return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * w
  h0 = rms(x, p["attention_norm.weight"])
  xq = (h0 @ p["attention.wq.weight"].T).view(bsz, seqlen, n_heads, hd)
  xk = (h0 @ p["attention.wk.weight"].T).view(bsz, seqlen, n_kv_heads, hd)
  xv = (h0 @ p["attention.wv.weight"].T).view(bsz, seqlen, n_kv_heads, hd)
  freqs = 1.0 / (10000.0 ** (torch.arange(0, hd, 2)[: hd // 2].float() / hd))
  fc = torch.polar(torch.ones(max_context, hd // 2), torch.outer(torch.arange(max_context).float(), freqs))[start_pos:start_pos + seqlen]
  fc = fc.view(1, seqlen, 1, hd // 2)
  xq = torch.view_as_real(torch.view_as_complex(xq.reshape(bsz, seqlen, n_heads, -1, 2)) * fc).flatten(3)
  xk = torch.view_as_real(torch.view_as_complex(xk.reshape(bsz, seqlen, n_kv_heads, -1, 2)) * fc).flatten(3)
  cache[0, :, start_pos:start_pos + seqlen] = xk
  cache[1, :, start_pos:start_pos + seqlen] = xv
  keys, values = cache[0, :, :start_pos + seqlen], cache[1, :, :start_pos + seqlen]
  keys = keys.repeat_interleave(n_heads // n_kv_heads, dim=2)
  values = values.repeat_interleave(n_heads // n_kv_heads, dim=2)
  q, k, v = xq.transpose(1, 2), keys.transpose(1, 2), values.transpose(1, 2)
  s = q @ k.transpose(-2, -1) / math.sqrt(hd)
  if seqlen > 1: s = s + torch.full((seqlen, start_pos + seqlen), float("-inf")).triu(start_pos + 1)
  a = (s.softmax(-1) @ v).transpose(1, 2).reshape(bsz, seqlen, -1) @ p["attention.wo.weight"].T
  h = x + a
  h1 = rms(h, p["ffn_norm.weight"])
  ff = (F.silu(h1 @ p["feed_forward.w1.weight"].T) * (h1 @ p["feed_forward.w3.weight"].T)) @ p["feed_forward.w2.weight"].T
  return h + ff

@pytest.mark.parametrize("n_kv_heads", [2, 1], ids=["plain_attention", "grouped_attention"])
@pytest.mark.parametrize("literal", [False, True])
def test_llama_block_kv_cache(literal, n_kv_heads):
  dim, hidden, n_heads, eps, max_context, bsz = 8, 16, 2, 1e-5, 8, 2
  Tensor.manual_seed(0)
  blk = TransformerBlock(dim, hidden, n_heads, n_kv_heads, eps, max_context, literal)
  # the RMSNorm weights start at ones: make them random so that they count
  rng = np.random.default_rng(1)
  sd = get_state_dict(blk)
  for k, v in sd.items(): v.assign(Tensor(rng.uniform(0.5, 1.5, v.shape).astype(np.float32)) if "norm" in k else v).realize()
  tp = {k: torch.tensor(v.numpy()) for k, v in get_state_dict(blk).items()}
  freqs_cis = precompute_freqs_cis(dim // n_heads, max_context, literal)
  tcache = torch.zeros(2, bsz, max_context, n_kv_heads, dim // n_heads)
  tokens = rng.standard_normal((bsz, 6, dim)).astype(np.float32)
  # prefill 3 positions, then decode 3 one at a time, reading back the cache filled by assign
  start_pos = 0
  for seqlen in (3, 1, 1, 1):
    x = tokens[:, start_pos:start_pos + seqlen]
    mask = Tensor.full((1, 1, seqlen, start_pos + seqlen), float("-inf")).triu(start_pos + 1) if seqlen > 1 else None
    out = blk(Tensor(x), start_pos, freqs_cis.shrink((None, (start_pos, start_pos + seqlen), None, None, None)), mask)
    tout = _torch_block(tp, torch.tensor(x), start_pos, tcache, n_heads, n_kv_heads, eps, max_context)
    assert_close(f"block output at start_pos={start_pos}", out, tout, atol=1e-5, rtol=1e-4)
    start_pos += seqlen
  assert_close("kv cache contents", blk.attention.cache_kv, tcache, atol=1e-5, rtol=1e-4)

# ====================================================================== (c) ResNet basic block
class BasicBlock:
  expansion = 1
  def __init__(self, in_planes, planes, stride=1, literal=False):
    self.literal = literal
    self.conv1 = nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=False)
    self.bn1 = nn.BatchNorm2d(planes)
    self.conv2 = nn.Conv2d(planes, planes, kernel_size=3, padding=1, stride=1, bias=False)
    self.bn2 = nn.BatchNorm2d(planes)
    self.downsample = []
    if stride != 1 or in_planes != self.expansion * planes:
      self.downsample = [nn.Conv2d(in_planes, self.expansion * planes, kernel_size=1, stride=stride, bias=False), nn.BatchNorm2d(self.expansion * planes)]
  def __call__(self, x: Tensor) -> Tensor:
    out = self.bn1(self.conv1(x)).relu()
    out = self.bn2(self.conv2(out))
    out = out + _seq(x, self.downsample, self.literal)
    return out.relu()

class TorchBasicBlock(torch.nn.Module):
  def __init__(self, in_planes, planes, stride=1):
    super().__init__()
    self.conv1 = torch.nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False); self.bn1 = torch.nn.BatchNorm2d(planes)
    self.conv2 = torch.nn.Conv2d(planes, planes, 3, 1, 1, bias=False); self.bn2 = torch.nn.BatchNorm2d(planes)
    self.downsample = torch.nn.Sequential()
    if stride != 1 or in_planes != planes:
      self.downsample = torch.nn.Sequential(torch.nn.Conv2d(in_planes, planes, 1, stride, bias=False), torch.nn.BatchNorm2d(planes))
  def forward(self, x): return (self.bn2(self.conv2(self.bn1(self.conv1(x)).relu())) + self.downsample(x)).relu()

@pytest.mark.parametrize("stride,in_planes", [(1, 4), (2, 3)], ids=["identity", "downsample"])
@pytest.mark.parametrize("literal", [False, True])
def test_resnet_basic_block_fwd_bwd(literal, stride, in_planes):
  torch.manual_seed(0)
  tb = TorchBasicBlock(in_planes, 4, stride).train()
  b = BasicBlock(in_planes, 4, stride, literal)
  for mine, theirs in [(b.conv1, tb.conv1), (b.conv2, tb.conv2), (b.bn1, tb.bn1), (b.bn2, tb.bn2)] + list(zip(b.downsample, tb.downsample)):
    copy_linear(mine, theirs)
  xs = np.random.default_rng(0).standard_normal((2, in_planes, 6, 6)).astype(np.float32)
  tx = torch.tensor(xs, requires_grad=True)
  x = Tensor(xs, requires_grad=True)
  g = np.random.default_rng(1).standard_normal(tuple(tb(tx.detach()).shape)).astype(np.float32)
  tb = TorchBasicBlock(in_planes, 4, stride).train()   # fresh running stats: the probe forward above updated them
  for mine, theirs in [(b.conv1, tb.conv1), (b.conv2, tb.conv2), (b.bn1, tb.bn1), (b.bn2, tb.bn2)] + list(zip(b.downsample, tb.downsample)):
    copy_linear(mine, theirs)
  with nn.train():
    out = b(x)
    (out * Tensor(g)).sum().backward()
  tout = tb(tx)
  (tout * torch.tensor(g)).sum().backward()
  assert_close("output", out, tout, atol=1e-5, rtol=1e-4)
  assert_close("input grad", x.grad, tx.grad, atol=1e-5, rtol=1e-4)
  pairs = [("conv1", b.conv1, tb.conv1), ("conv2", b.conv2, tb.conv2), ("bn1", b.bn1, tb.bn1), ("bn2", b.bn2, tb.bn2)]
  pairs += [(f"downsample.{i}", m, t) for i, (m, t) in enumerate(zip(b.downsample, tb.downsample))]
  for name, m, t in pairs:
    assert_close(f"{name}.weight grad", m.weight.grad, t.weight.grad, atol=1e-4, rtol=1e-4)
    if getattr(t, "bias", None) is not None: assert_close(f"{name}.bias grad", m.bias.grad, t.bias.grad, atol=1e-4, rtol=1e-4)
  assert_close("bn1 running_var", b.bn1.running_var, tb.bn1.running_var, atol=1e-5, rtol=1e-4)

# ====================================================================== (d) BERT encoder layer, eval, sdpa dropout_p
class BertLayer:
  """tinygrad's extra/models/bert.py layer, condensed: self-attention with sdpa(dropout_p), dense + dropout +
  LayerNorm(residual), intermediate gelu (erf), output dense + dropout + LayerNorm(residual)."""
  def __init__(self, hidden, heads, inter, p):
    self.heads, self.head_size, self.p = heads, hidden // heads, p
    self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)
    self.attn_out, self.attn_norm = nn.Linear(hidden, hidden), nn.LayerNorm(hidden, eps=1e-5)
    self.inter, self.out, self.out_norm = nn.Linear(hidden, inter), nn.Linear(inter, hidden), nn.LayerNorm(hidden, eps=1e-5)
  def _split(self, x: Tensor) -> Tensor: return x.reshape(x.shape[0], x.shape[1], self.heads, self.head_size).transpose(1, 2)
  def __call__(self, h: Tensor) -> Tensor:
    q, k, v = self._split(self.query(h)), self._split(self.key(h)), self._split(self.value(h))
    ctx = Tensor.scaled_dot_product_attention(q, k, v, None, self.p).transpose(1, 2)
    ctx = ctx.reshape(ctx.shape[0], ctx.shape[1], self.heads * self.head_size)
    h = self.attn_norm(self.attn_out(ctx).dropout(self.p) + h)
    i = self.inter(h).gelu()
    return self.out_norm(self.out(i).dropout(self.p) + h)

@pytest.mark.parametrize("p", [0.0, 0.1])
def test_bert_encoder_layer_eval(p):
  torch.manual_seed(0)
  tl = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, activation="gelu", batch_first=True).eval()
  lay = BertLayer(8, 2, 16, p)
  wq, wk, wv = tl.self_attn.in_proj_weight.chunk(3)
  bq, bk, bv = tl.self_attn.in_proj_bias.chunk(3)
  for m, w, bb in [(lay.query, wq, bq), (lay.key, wk, bk), (lay.value, wv, bv)]: m.weight, m.bias = pg_from(w), pg_from(bb)
  copy_linear(lay.attn_out, tl.self_attn.out_proj); copy_linear(lay.attn_norm, tl.norm1)
  copy_linear(lay.inter, tl.linear1); copy_linear(lay.out, tl.linear2); copy_linear(lay.out_norm, tl.norm2)
  xs = np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32)
  assert Tensor.training is False
  with torch.no_grad(): tout = tl(torch.tensor(xs))
  assert_close("encoder layer output (eval)", lay(Tensor(xs)), tout, atol=1e-5, rtol=1e-4)

# ====================================================================== single forms, one per case
def _close(a, b, atol=1e-6, rtol=1e-5): assert_close("value", a, b, atol, rtol)
R = np.random.default_rng(0)
A = R.standard_normal((3, 4)).astype(np.float32)
B = R.standard_normal((3, 4)).astype(np.float32)

def f_import_tinyjit():
  from petagrad import TinyJit
  f = TinyJit(lambda x: (x * 2).realize())
  for i in range(3): out = f(Tensor([float(i)]))
  assert out.tolist() == [4.0]
def f_import_getenv():
  from petagrad import getenv
  os.environ["PORTING_BS"] = "7"
  assert getenv("PORTING_BS", 512) == 7 and getenv("PORTING_UNSET_X", 3) == 3
def f_helpers_getenv():
  from petagrad.helpers import getenv
  assert getenv("PORTING_UNSET_X", 3) == 3
def f_import_context_counters():
  from petagrad import Context, GlobalCounters
  GlobalCounters.reset()
  with Context(DEBUG=0): (Tensor(A) + 1).realize()
  assert GlobalCounters.kernel_count >= 1
def f_tensor_train_ctx():
  with Tensor.train():
    assert Tensor.training is True
  assert Tensor.training is False
def f_tensor_train_decorator():
  @Tensor.train()
  def g(): return Tensor.training
  assert g() is True and Tensor.training is False
def f_tensor_test_ctx():   # tinygrad's Tensor.test(): no gradients inside (it sets Tensor.no_grad)
  w = Tensor([1.0], requires_grad=True)
  with Tensor.test(): assert Tensor.no_grad and not (w * 2).requires_grad
  assert not Tensor.no_grad and (w * 2).requires_grad
def f_training_flag():
  Tensor.training = True
  try: assert (Tensor.ones(100).dropout(0.5).numpy() == 0).any()
  finally: Tensor.training = False
def f_backward_returns_self():
  x = Tensor(A, requires_grad=True)
  loss = x.sum().backward()
  assert isinstance(loss, Tensor) and loss.item() == pytest.approx(float(A.sum()), rel=1e-5)
def f_sequential(): _close(Tensor(A).sequential([lambda x: x * 2, Tensor.relu]), np.maximum(A * 2, 0))
def f_stack_varargs(): _close(Tensor.stack(Tensor(A), Tensor(B), dim=1), np.stack([A, B], 1))
def f_stack_method(): _close(Tensor(A).stack(Tensor(B), dim=1), np.stack([A, B], 1))
def f_stack_list(): _close(Tensor.stack([Tensor(A), Tensor(B)], dim=1), np.stack([A, B], 1))
def f_cat_method(): _close(Tensor(A).cat(Tensor(B), dim=1), np.concatenate([A, B], 1))
def f_sum_axis(): _close(Tensor(A).sum(axis=1), A.sum(1))
def f_sum_axis_tuple(): _close(Tensor(A).sum(axis=(0, 1)), A.sum())
def f_max_axis(): _close(Tensor(A).max(axis=-1), A.max(-1))
def f_mean_axis_keepdim(): _close(Tensor(A).mean(axis=0, keepdim=True), A.mean(0, keepdims=True))
def f_reshape_none(): assert Tensor(A.reshape(2, 6)).reshape(None, 3, 2).shape == (2, 3, 2)
def f_reshape_minus1(): assert Tensor(A).reshape(-1, 6).shape == (2, 6)
def f_rearrange(): _close(Tensor(A.reshape(3, 2, 2)).rearrange("a b c -> b (a c)"), A.reshape(3, 2, 2).transpose(1, 0, 2).reshape(2, 6))
def f_pad_to(): _close(Tensor(A).pad_to(4, 6), np.pad(A, ((0, 1), (0, 2))))
def f_pad_to_none(): _close(Tensor(A).pad_to(None, 6), np.pad(A, ((0, 0), (0, 2))))
def f_shrink(): _close(Tensor(A).shrink(((0, 2), (1, 3))), A[0:2, 1:3])
def f_shrink_none(): _close(Tensor(A).shrink((None, (1, 3))), A[:, 1:3])
def f_pad_tuple_pairs(): _close(Tensor(A).pad(((1, 0), (0, 2))), np.pad(A, ((1, 0), (0, 2))))
def f_scaled_uniform_static():
  t = Tensor.scaled_uniform(64, 32)
  bound = 64 ** -0.5 * 32 ** -0.5   # tinygrad: uniform(-1, 1) * prod(shape) ** -0.5
  v = t.numpy(); assert t.shape == (64, 32) and np.abs(v).max() <= bound and np.abs(v).max() > bound / 2
def f_scaled_uniform_method():
  assert Tensor.ones(1).scaled_uniform(8, 8).shape == (8, 8)
def f_glorot_uniform(): assert Tensor.glorot_uniform(8, 4).shape == (8, 4)
def f_dot(): _close(Tensor(A).dot(Tensor(B.T)), A @ B.T, 1e-5)
def f_cumsum_axis(): _close(Tensor(A).cumsum(axis=1), A.cumsum(1), 1e-5)
def f_cumsum_pos(): _close(Tensor(A).cumsum(1), A.cumsum(1), 1e-5)
def f_clip_pos(): _close(Tensor(A).clip(0, 1), A.clip(0, 1))
def f_one_hot(): _close(Tensor([1, 0, 3]).one_hot(10), np.eye(10)[[1, 0, 3]])
def f_sparse_cce():
  y = np.array([1, 0, 3])
  _close(Tensor(A).sparse_categorical_crossentropy(Tensor(y)), F.cross_entropy(torch.tensor(A), torch.tensor(y)), 1e-6)
def f_sparse_cce_smoothing():
  y = np.array([1, 0, 3])
  _close(Tensor(A).sparse_categorical_crossentropy(Tensor(y), label_smoothing=0.1),
         F.cross_entropy(torch.tensor(A), torch.tensor(y), label_smoothing=0.1), 1e-6)
def f_unfold_sliding():   # tinygrad 0.14: Tensor.unfold(dim, size, step) is torch.Tensor.unfold
  _close(Tensor(A).unfold(1, 2, 1), torch.tensor(A).unfold(1, 2, 1))
def f_interpolate_linear_4d():
  x = R.standard_normal((1, 2, 3, 4)).astype(np.float32)
  _close(Tensor(x).interpolate((6, 5), mode="linear"), F.interpolate(torch.tensor(x), (6, 5), mode="bilinear", align_corners=False), 1e-5)
def f_interpolate_linear_4d_align():
  x = R.standard_normal((1, 2, 3, 4)).astype(np.float32)
  _close(Tensor(x).interpolate((6, 5), mode="linear", align_corners=True), F.interpolate(torch.tensor(x), (6, 5), mode="bilinear", align_corners=True), 1e-5)
def f_einsum_implicit():
  a, b = R.standard_normal((2, 3, 4)).astype(np.float32), R.standard_normal((2, 4, 5)).astype(np.float32)
  _close(Tensor.einsum("...ij,...jk", Tensor(a), Tensor(b)), torch.einsum("...ij,...jk", torch.tensor(a), torch.tensor(b)), 1e-5)
def f_einsum_list():
  a, b = R.standard_normal((3, 4)).astype(np.float32), R.standard_normal((4, 5)).astype(np.float32)
  _close(Tensor.einsum("ij,jk->ik", [Tensor(a), Tensor(b)]), a @ b, 1e-5)
def f_batchnorm_sz():
  bn = nn.BatchNorm(sz=3)
  assert bn.weight.shape == (3,) and bn.running_var.shape == (3,)
def f_batchnorm_positional(): assert nn.BatchNorm(3).weight.shape == (3,)
def f_layernorm2d():
  x = R.standard_normal((2, 3, 4, 4)).astype(np.float32)
  ln = nn.LayerNorm2d(3)
  _close(ln(Tensor(x)), F.layer_norm(torch.tensor(x).permute(0, 2, 3, 1), (3,)).permute(0, 3, 1, 2), 1e-5)
def f_layernorm_call():
  x = R.standard_normal((2, 3, 4)).astype(np.float32)
  _close(nn.LayerNorm(4)(Tensor(x)), F.layer_norm(torch.tensor(x), (4,)), 1e-5)
def f_tensor_layernorm():   # tinygrad: x.layernorm(axis=-1, eps=1e-5)
  _close(Tensor(A).layernorm(), F.layer_norm(torch.tensor(A), (4,)), 1e-5)
def f_state_roundtrip():
  class M:
    def __init__(self): self.l1, self.l2 = nn.Linear(4, 3), nn.Linear(3, 2)
  m, m2 = M(), M()
  sd = get_state_dict(m)
  assert set(sd) == {"l1.weight", "l1.bias", "l2.weight", "l2.bias"} and len(get_parameters(m)) == 4
  with tempfile.TemporaryDirectory() as d:
    fn = os.path.join(d, "m.safetensors")
    safe_save(sd, fn)
    load_state_dict(m2, safe_load(fn))
  _close(m2.l1.weight, m.l1.weight.numpy()); _close(m2.l2.bias, m.l2.bias.numpy())
def _opt_case(pg_opt, t_opt):
  w0 = R.standard_normal((3, 4)).astype(np.float32)
  w, tw = Tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
  o, to = pg_opt([w]), t_opt([tw])
  for _ in range(3):
    o.zero_grad(); ((w * w).sum() + w.sum()).backward(); o.step()
    to.zero_grad(); ((tw * tw).sum() + tw.sum()).backward(); to.step()
  _close(w, tw, 1e-6, 1e-5)
def f_adam(): _opt_case(lambda p: Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01))
def f_adamw(): _opt_case(lambda p: AdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01))
def f_sgd_momentum(): _opt_case(lambda p: SGD(p, lr=0.01, momentum=0.9, nesterov=True), lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9, nesterov=True))
def f_nn_optim_module():
  _opt_case(lambda p: nn.optim.Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01))
def f_schedule_step():
  w0 = R.standard_normal((3,)).astype(np.float32)
  w = Tensor(w0, requires_grad=True); o = SGD([w], lr=0.1)
  loss = (w * w).sum().backward()
  loss.realize(*o.schedule_step())
  _close(w, w0 - 0.1 * 2 * w0)
def f_dtypes_names():
  assert dtypes.float == dtypes.float32 and dtypes.default_float == dtypes.float32 and dtypes.int == dtypes.int32
  # tinygrad's default int is int32; petagrad follows torch (int64), by design (INVENTORY.md)
  assert Tensor([1, 2]).dtype == dtypes.int64 == dtypes.default_int
def f_tensor_getitem_tensor():
  idx = Tensor([2, 0])
  _close(Tensor(A)[idx], A[[2, 0]])
def f_randint_shape():
  t = Tensor.randint(5, low=0, high=10)
  assert t.shape == (5,) and ((t.numpy() >= 0) & (t.numpy() < 10)).all()
def f_linear_method():   # tinygrad: x.linear(w (in, out), b) = x @ w + b; petagrad follows torch F.linear: w (out, in), by design
  w = R.standard_normal((2, 4)).astype(np.float32)
  _close(Tensor(A).linear(Tensor(w), Tensor([1.0, 2.0])), A @ w.T + [1.0, 2.0], 1e-5)
def f_realize_varargs():
  a, b = Tensor(A) + 1, Tensor(B) * 2
  a.realize(b); _close(b, B * 2)
def f_numpy_item_tolist():
  assert Tensor([[1.0, 2.0]]).tolist() == [[1.0, 2.0]] and Tensor(3.5).item() == 3.5
def f_tensor_from_list_dtype(): assert Tensor([1, 2, 3], dtype=dtypes.float16).dtype == dtypes.float16
def f_max_pool2d_default():
  x = R.standard_normal((1, 1, 4, 4)).astype(np.float32)
  _close(Tensor(x).max_pool2d(), F.max_pool2d(torch.tensor(x), 2))
def f_avg_pool2d_default():
  x = R.standard_normal((1, 1, 4, 4)).astype(np.float32)
  _close(Tensor(x).avg_pool2d(), F.avg_pool2d(torch.tensor(x), 2))
def f_sdpa_dropout_eval():
  q = R.standard_normal((1, 2, 3, 4)).astype(np.float32)
  out = Tensor(q).scaled_dot_product_attention(Tensor(q), Tensor(q), dropout_p=0.5)
  _close(out, F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(q), torch.tensor(q)), 1e-5)
def f_assign_shrink_kv():
  c = Tensor.zeros(1, 4, 2).contiguous().realize()
  for i in range(3): c.shrink((None, (i, i + 1), None)).assign(Tensor.ones(1, 1, 2) * (i + 1)).realize()
  _close(c, np.array([[[1, 1], [2, 2], [3, 3], [0, 0]]], np.float32))
def f_contiguous_realize_assign():
  t = Tensor.zeros(2, 2).contiguous().realize()
  t.assign(t + 1).realize(); t.assign(t * 3).realize()
  _close(t, np.full((2, 2), 3.0))
def f_nn_embedding():
  e = nn.Embedding(10, 4)
  _close(e(Tensor([[1, 2], [3, 1]])), e.weight.numpy()[[[1, 2], [3, 1]]])
def f_repeat_tuple(): _close(Tensor(A).repeat((2, 1)), np.tile(A, (2, 1)))
def f_flatten_start(): assert Tensor(A.reshape(3, 2, 2)).flatten(1).shape == (3, 4)
def f_binary_crossentropy_logits():
  y = (R.random((3, 4)) > 0.5).astype(np.float32)
  _close(Tensor(A).binary_crossentropy_logits(Tensor(y)), F.binary_cross_entropy_with_logits(torch.tensor(A), torch.tensor(y)), 1e-6)
def f_where_method(): _close((Tensor(A) > 0).where(Tensor(A), 0.0), np.where(A > 0, A, 0))
def f_gelu_default():   # tinygrad's gelu() is the tanh approximation; petagrad follows torch (erf), by design
  _close(Tensor(A).gelu(), F.gelu(torch.tensor(A)), 1e-6)
def f_gelu_tanh(): _close(Tensor(A).gelu(approximate="tanh"), F.gelu(torch.tensor(A), approximate="tanh"), 1e-6)
def f_quick_gelu(): _close(Tensor(A).quick_gelu(), torch.tensor(A) * torch.sigmoid(1.702 * torch.tensor(A)), 1e-6)

FORMS = [
  ("from petagrad import TinyJit", f_import_tinyjit, None),
  ("from petagrad import getenv", f_import_getenv, None),
  ("petagrad.helpers.getenv", f_helpers_getenv, None),
  ("Context/GlobalCounters", f_import_context_counters, None),
  ("with Tensor.train()", f_tensor_train_ctx, None),
  ("@Tensor.train() decorator", f_tensor_train_decorator, None),
  ("with Tensor.test()", f_tensor_test_ctx, None),
  ("Tensor.training = True", f_training_flag, None),
  ("loss.backward() returns self", f_backward_returns_self, None),
  ("x.sequential(layers)", f_sequential, None),
  ("Tensor.stack(a, b, dim=1)", f_stack_varargs, None),
  ("a.stack(b, dim=1)", f_stack_method, None),
  ("Tensor.stack([a, b], dim=1)", f_stack_list, None),
  ("a.cat(b, dim=1)", f_cat_method, None),
  ("x.sum(axis=1)", f_sum_axis, None),
  ("x.sum(axis=(0, 1))", f_sum_axis_tuple, None),
  ("x.max(axis=-1)", f_max_axis, None),
  ("x.mean(axis=0, keepdim=True)", f_mean_axis_keepdim, None),
  ("x.reshape(None, 3, 2)", f_reshape_none, None),
  ("x.reshape(-1, 6)", f_reshape_minus1, None),
  ("x.rearrange(...)", f_rearrange, None),
  ("x.pad_to(4, 6)", f_pad_to, None),
  ("x.pad_to(None, 6)", f_pad_to_none, None),
  ("x.shrink(((0,2),(1,3)))", f_shrink, None),
  ("x.shrink((None,(1,3)))", f_shrink_none, None),
  ("x.pad(((1,0),(0,2)))", f_pad_tuple_pairs, None),
  ("Tensor.scaled_uniform(64, 32)", f_scaled_uniform_static, None),
  ("x.scaled_uniform(8, 8)", f_scaled_uniform_method, None),
  ("Tensor.glorot_uniform", f_glorot_uniform, None),
  ("x.dot(w)", f_dot, None),
  ("x.cumsum(axis=1)", f_cumsum_axis, None),
  ("x.cumsum(1)", f_cumsum_pos, None),
  ("x.clip(0, 1)", f_clip_pos, None),
  ("x.one_hot(10)", f_one_hot, None),
  ("x.sparse_categorical_crossentropy(y)", f_sparse_cce, None),
  ("sparse_cce(label_smoothing=0.1)", f_sparse_cce_smoothing, None),
  ("x.unfold(1, 2, 1) (tinygrad 0.14 = torch sliding window)", f_unfold_sliding, None),
  ("x.interpolate(size, mode='linear') 4-d", f_interpolate_linear_4d, None),
  ("x.interpolate(mode='linear', align_corners=True) 4-d", f_interpolate_linear_4d_align, None),
  ("Tensor.einsum('...ij,...jk', a, b)", f_einsum_implicit, None),
  ("Tensor.einsum('ij,jk->ik', [a, b])", f_einsum_list, None),
  ("nn.BatchNorm(sz=3)", f_batchnorm_sz, None),
  ("nn.BatchNorm(3)", f_batchnorm_positional, None),
  ("nn.LayerNorm2d(3)", f_layernorm2d, None),
  ("nn.LayerNorm(4)(x)", f_layernorm_call, None),
  ("x.layernorm()", f_tensor_layernorm, None),
  ("get_state_dict/safe_save/safe_load/load_state_dict", f_state_roundtrip, None),
  ("Adam", f_adam, None),
  ("AdamW", f_adamw, None),
  ("SGD(momentum, nesterov)", f_sgd_momentum, None),
  ("nn.optim.Adam", f_nn_optim_module, None),
  ("loss.realize(*opt.schedule_step())", f_schedule_step, None),
  ("dtypes.float/int/default_float, default int int64 (tinygrad: int32)", f_dtypes_names, None),
  ("x[Tensor idx]", f_tensor_getitem_tensor, None),
  ("Tensor.randint(5, low=, high=)", f_randint_shape, None),
  ("x.linear(w (out,in), b) torch layout (tinygrad: (in,out))", f_linear_method, None),
  ("a.realize(b)", f_realize_varargs, None),
  (".tolist()/.item()", f_numpy_item_tolist, None),
  ("Tensor(list, dtype=)", f_tensor_from_list_dtype, None),
  ("x.max_pool2d() default 2x2", f_max_pool2d_default, None),
  ("x.avg_pool2d() default 2x2", f_avg_pool2d_default, None),
  ("sdpa(dropout_p=0.5) with Tensor.training False", f_sdpa_dropout_eval, None),
  ("shrink(...).assign(...) KV cache", f_assign_shrink_kv, None),
  ("t.assign(t + 1)", f_contiguous_realize_assign, None),
  ("nn.Embedding", f_nn_embedding, None),
  ("x.repeat((2, 1))", f_repeat_tuple, None),
  ("x.flatten(1)", f_flatten_start, None),
  ("x.binary_crossentropy_logits(y)", f_binary_crossentropy_logits, None),
  ("cond.where(x, 0.0)", f_where_method, None),
  ("x.gelu() = torch erf gelu (tinygrad: tanh; by design)", f_gelu_default, None),
  ("x.gelu(approximate='tanh')", f_gelu_tanh, None),
  ("x.quick_gelu()", f_quick_gelu, None),
]

@pytest.mark.parametrize("fn", [pytest.param(f, id=name, marks=[m] if m else []) for name, f, m in FORMS])
def test_form(fn): fn()
