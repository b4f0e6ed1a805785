"""nn layers vs torch.nn with identical weights (torch's initialized state dict loaded through numpy):
forward values and the gradients of the inputs and of every parameter; default initializations; train/eval."""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
from petagrad import Tensor, dtypes, nn
from petagrad.nn.state import get_state_dict, load_state_dict

RNG = np.random.default_rng(0)

def _np(t: torch.Tensor) -> np.ndarray: return t.detach().numpy()

def compare_layer(pl, tl, inputs, fwd=None, training=False, rtol=1e-5, atol=1e-5, int_inputs=(), backward=True):
  """Load tl's state dict into pl, run both on the same inputs, compare outputs, then input and parameter grads."""
  torch.manual_seed(0)
  load_state_dict(pl, {k: _np(v) for k, v in tl.state_dict().items()})
  fwd = fwd or (lambda layer, *xs: layer(*xs))
  tl.train(training)
  tin = [torch.tensor(a) if i in int_inputs else torch.tensor(a, requires_grad=True) for i, a in enumerate(inputs)]
  pin = [Tensor(a) if i in int_inputs else Tensor(a, requires_grad=True) for i, a in enumerate(inputs)]
  with nn.train(training):
    pouts, touts = fwd(pl, *pin), fwd(tl, *tin)
  pouts = pouts if isinstance(pouts, (tuple, list)) else (pouts,)
  touts = touts if isinstance(touts, (tuple, list)) else (touts,)
  for i, (p, t) in enumerate(zip(pouts, touts)):
    if t is None: assert p is None; continue
    assert p.shape == tuple(t.shape), f"output {i}: shape {p.shape} != torch {tuple(t.shape)}"
    np.testing.assert_allclose(p.numpy(), _np(t), rtol=rtol, atol=atol, err_msg=f"output {i}")
  if not backward: return
  gs = [RNG.standard_normal(tuple(t.shape)).astype(np.float32) for t in touts if t is not None]
  sum((p * Tensor(g)).sum() for p, g in zip([p for p in pouts if p is not None], gs)).backward()
  sum((t * torch.tensor(g)).sum() for t, g in zip([t for t in touts if t is not None], gs)).backward()
  for i, (p, t) in enumerate(zip(pin, tin)):
    if i in int_inputs: continue
    np.testing.assert_allclose(p.grad.numpy(), _np(t.grad), rtol=rtol, atol=atol, err_msg=f"grad of input {i}")
  psd = get_state_dict(pl)
  for name, tp in tl.named_parameters():
    assert psd[name].grad is not None, f"no gradient for {name}"
    np.testing.assert_allclose(psd[name].grad.numpy(), _np(tp.grad), rtol=rtol, atol=atol, err_msg=f"grad of {name}")
  for name, tb in tl.named_buffers():   # running stats after the forward
    np.testing.assert_allclose(psd[name].numpy(), _np(tb), rtol=rtol, atol=atol, err_msg=f"buffer {name}")

def x_(*shape): return RNG.standard_normal(shape).astype(np.float32)

# ---------------------------------------------------------------------- linear, conv

@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias):
  compare_layer(nn.Linear(5, 3, bias=bias), torch.nn.Linear(5, 3, bias=bias), [x_(2, 4, 5)])

def test_linear_on_device(device):
  compare_layer(nn.Linear(3, 2), torch.nn.Linear(3, 2), [x_(2, 3)])

@pytest.mark.parametrize("kw",
                         [{"stride": 2, "padding": 1}, {"dilation": 2, "groups": 2, "padding": "same"}, {"padding": 2, "padding_mode": "reflect"}])
def test_conv1d(kw):
  compare_layer(nn.Conv1d(4, 6, 3, **kw), torch.nn.Conv1d(4, 6, 3, **kw), [x_(2, 4, 9)])

@pytest.mark.parametrize("kw", [{"stride": (2, 1), "padding": (1, 2)}, {"groups": 2, "dilation": 2, "bias": False}])
def test_conv2d(kw):
  compare_layer(nn.Conv2d(4, 6, (3, 2), **kw), torch.nn.Conv2d(4, 6, (3, 2), **kw), [x_(2, 4, 7, 6)])

def test_conv3d():
  compare_layer(nn.Conv3d(2, 3, 2, stride=(1, 2, 1), padding=1), torch.nn.Conv3d(2, 3, 2, stride=(1, 2, 1), padding=1), [x_(1, 2, 4, 5, 3)])

def test_conv2d_on_device(device):
  compare_layer(nn.Conv2d(2, 2, 2), torch.nn.Conv2d(2, 2, 2), [x_(1, 2, 3, 3)])

@pytest.mark.parametrize("kw", [{"stride": 2, "padding": 1, "output_padding": 1}, {"groups": 2, "dilation": 2}])
def test_conv_transpose1d(kw):
  compare_layer(nn.ConvTranspose1d(4, 6, 3, **kw), torch.nn.ConvTranspose1d(4, 6, 3, **kw), [x_(2, 4, 5)])

@pytest.mark.parametrize("kw", [{"stride": (2, 3), "padding": 1, "output_padding": (1, 2)}, {"groups": 2, "bias": False}])
def test_conv_transpose2d(kw):
  compare_layer(nn.ConvTranspose2d(4, 2, (3, 2), **kw), torch.nn.ConvTranspose2d(4, 2, (3, 2), **kw), [x_(2, 4, 4, 3)])

# ---------------------------------------------------------------------- normalization

@pytest.mark.parametrize("training,kw", [(True, {}), (False, {}), (True, {"momentum": None}), (True, {"affine": False, "momentum": 0.3}),
                                         (False, {"track_running_stats": False})])
def test_batchnorm2d(training, kw):
  pl, tl = nn.BatchNorm2d(3, **kw), torch.nn.BatchNorm2d(3, **kw)
  if kw.get("affine", True):   # non-trivial affine parameters
    with torch.no_grad(): tl.weight.uniform_(0.5, 1.5); tl.bias.uniform_(-0.5, 0.5)
  if tl.running_mean is not None:
    with torch.no_grad(): tl.running_mean.uniform_(-1, 1); tl.running_var.uniform_(0.5, 2)
  compare_layer(pl, tl, [x_(4, 3, 3, 2)], training=training)

def test_batchnorm1d_running_stats_over_steps():
  pl, tl = nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4)
  load_state_dict(pl, {k: _np(v) for k, v in tl.state_dict().items()})
  x = x_(6, 4, 5)
  with nn.train():
    for _ in range(3): pl(Tensor(x)).realize()   # the same input every step: stats must still move
  tl.train()
  for _ in range(3): tl(torch.tensor(x))
  np.testing.assert_allclose(pl.running_mean.numpy(), _np(tl.running_mean), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(pl.running_var.numpy(), _np(tl.running_var), rtol=1e-5, atol=1e-6)
  assert pl.num_batches_tracked.item() == 3
  tl.eval()
  np.testing.assert_allclose(pl(Tensor(x)).numpy(), _np(tl(torch.tensor(x))), rtol=1e-5, atol=1e-5)

def test_batchnorm_bad_shape():
  with pytest.raises(ValueError, match=r"expected input \(N, 3"): nn.BatchNorm2d(3)(Tensor.ones(2, 4, 2, 2))

@pytest.mark.parametrize("kw", [{}, {"elementwise_affine": False}, {"bias": False}])
def test_layernorm(kw):
  pl, tl = nn.LayerNorm((3, 4), **kw), torch.nn.LayerNorm((3, 4), **kw)
  if tl.weight is not None:
    with torch.no_grad(): tl.weight.uniform_(0.5, 1.5)
  compare_layer(pl, tl, [x_(2, 3, 4)])

@pytest.mark.parametrize("eps", [None, 1e-3])
def test_rmsnorm(eps):
  pl, tl = nn.RMSNorm(6, eps=eps), torch.nn.RMSNorm(6, eps=eps)
  with torch.no_grad(): tl.weight.uniform_(0.5, 1.5)
  compare_layer(pl, tl, [x_(2, 3, 6)])

@pytest.mark.parametrize("affine", [True, False])
def test_groupnorm(affine):
  pl, tl = nn.GroupNorm(2, 4, affine=affine), torch.nn.GroupNorm(2, 4, affine=affine)
  if affine:
    with torch.no_grad(): tl.weight.uniform_(0.5, 1.5); tl.bias.uniform_(-1, 1)
  compare_layer(pl, tl, [x_(3, 4, 5)])

def test_instancenorm1d():
  compare_layer(nn.InstanceNorm1d(3), torch.nn.InstanceNorm1d(3), [x_(2, 3, 5)])

@pytest.mark.parametrize("training", [True, False])
def test_instancenorm2d_affine_running_stats(training):
  kw = {"affine": True, "track_running_stats": True}
  pl, tl = nn.InstanceNorm2d(3, **kw), torch.nn.InstanceNorm2d(3, **kw)
  with torch.no_grad(): tl.weight.uniform_(0.5, 1.5); tl.running_var.uniform_(0.5, 2)
  compare_layer(pl, tl, [x_(2, 3, 4, 3)], training=training)

# ---------------------------------------------------------------------- embedding, dropout, recurrent

@pytest.mark.parametrize("padding_idx", [None, 2])
def test_embedding(padding_idx):
  idx = np.array([[0, 2, 5], [5, 1, 2]], dtype=np.int64)
  pl, tl = nn.Embedding(6, 4, padding_idx=padding_idx), torch.nn.Embedding(6, 4, padding_idx=padding_idx)
  if padding_idx is not None: assert (pl.weight.numpy()[padding_idx] == 0).all()
  compare_layer(pl, tl, [idx], int_inputs=(0,))

def test_dropout():
  x = Tensor.ones(2000)
  d = nn.Dropout(0.25)
  assert (d(x).numpy() == 1).all()   # eval: identity
  with nn.train():
    Tensor.manual_seed(1)
    y = d(x).numpy()
  assert set(np.unique(y).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
  assert abs((y == 0).mean() - 0.25) < 0.05
  with nn.train():
    assert (nn.Dropout(0.0)(x).numpy() == 1).all()
  with pytest.raises(ValueError): nn.Dropout(1.5)

def test_lstmcell():
  pl, tl = nn.LSTMCell(3, 4), torch.nn.LSTMCell(3, 4)
  compare_layer(pl, tl, [x_(2, 3), x_(2, 4), x_(2, 4)], fwd=lambda l, x, h, c: l(x, (h, c)))
  h, c = pl(Tensor.ones(5, 3))   # no state: zeros
  assert h.shape == c.shape == (5, 4)

# ---------------------------------------------------------------------- attention

@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention(batch_first):
  E, H, L, S, N = 8, 2, 3, 5, 2
  pl, tl = nn.MultiheadAttention(E, H, batch_first=batch_first), torch.nn.MultiheadAttention(E, H, batch_first=batch_first)
  with torch.no_grad(): tl.in_proj_bias.uniform_(-0.5, 0.5); tl.out_proj.bias.uniform_(-0.5, 0.5)
  q, k = (x_(N, L, E), x_(N, S, E)) if batch_first else (x_(L, N, E), x_(S, N, E))
  compare_layer(pl, tl, [q, k, k.copy()])

def test_multihead_attention_masks_and_options():
  E, H, L, S, N = 8, 4, 3, 4, 2
  pl, tl = nn.MultiheadAttention(E, H, kdim=5, vdim=6, batch_first=True), torch.nn.MultiheadAttention(E, H, kdim=5, vdim=6, batch_first=True)
  kpm = np.array([[False, False, True, False], [False, True, False, False]])
  am = np.triu(np.ones((L, S), dtype=bool), 1)
  fwd = lambda l, q, k, v: l(q, k, v, key_padding_mask=(Tensor(kpm) if l is pl else torch.tensor(kpm)),
                             attn_mask=(Tensor(am) if l is pl else torch.tensor(am)), average_attn_weights=False)
  compare_layer(pl, tl, [x_(N, L, E), x_(N, S, 5), x_(N, S, 6)], fwd=fwd)
  fmask = x_(L, S)
  fwd2 = lambda l, q, k, v: l(q, k, v, attn_mask=(Tensor(fmask) if l is pl else torch.tensor(fmask)), need_weights=False)
  compare_layer(pl, tl, [x_(N, L, E), x_(N, S, 5), x_(N, S, 6)], fwd=fwd2, backward=False)

def test_multihead_attention_unbatched():
  pl, tl = nn.MultiheadAttention(4, 2), torch.nn.MultiheadAttention(4, 2)
  compare_layer(pl, tl, [x_(3, 4), x_(5, 4), x_(5, 4)], backward=False)

# ---------------------------------------------------------------------- init, containers, train switch

@pytest.mark.parametrize("make,shape_bound", [
  (lambda: nn.Linear(200, 150), lambda l: (1 / math.sqrt(200), 1 / math.sqrt(200))),
  (lambda: nn.Conv2d(16, 32, 3), lambda l: (1 / math.sqrt(16 * 9), 1 / math.sqrt(16 * 9))),
  (lambda: nn.ConvTranspose2d(16, 32, 3), lambda l: (1 / math.sqrt(32 * 9), 1 / math.sqrt(32 * 9))),
])
def test_default_init_like_torch(make, shape_bound):
  """kaiming_uniform(a=sqrt(5)) weights are U(-1/sqrt(fan_in), 1/sqrt(fan_in)); biases too."""
  layer = make()
  wb, bb = shape_bound(layer)
  w, b = layer.weight.numpy(), layer.bias.numpy()
  assert np.abs(w).max() <= wb and np.abs(w).max() > 0.95 * wb
  assert abs(w.std() - wb / math.sqrt(3)) < 0.05 * wb
  assert np.abs(b).max() <= bb
  assert layer.weight.requires_grad and layer.bias.requires_grad

def test_other_inits():
  assert abs(nn.Embedding(100, 64).weight.numpy().std() - 1) < 0.05
  bn = nn.BatchNorm2d(3)
  assert bn.weight.tolist() == [1.0] * 3 and bn.bias.tolist() == [0.0] * 3 and bn.running_var.tolist() == [1.0] * 3
  assert not bn.running_mean.requires_grad and bn.num_batches_tracked.dtype == dtypes.int64
  m = nn.MultiheadAttention(8, 2)
  assert m.in_proj_bias.tolist() == [0.0] * 24 and np.abs(m.in_proj_weight.numpy()).max() <= math.sqrt(6 / (8 + 24))
  k = 1 / math.sqrt(5)
  assert all(np.abs(t.numpy()).max() <= k for t in get_state_dict(nn.LSTMCell(3, 5)).values())

def test_state_dict_keys_match_torch():
  cases = [(nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)), (nn.MultiheadAttention(4, 2), torch.nn.MultiheadAttention(4, 2)),
           (nn.MultiheadAttention(4, 2, kdim=3, vdim=5), torch.nn.MultiheadAttention(4, 2, kdim=3, vdim=5)),
           (nn.LSTMCell(2, 3), torch.nn.LSTMCell(2, 3)),
           (nn.InstanceNorm2d(3, affine=True, track_running_stats=True), torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True)),
           (nn.Sequential(nn.Linear(2, 3), Tensor.relu, nn.LayerNorm(3)),
            torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.LayerNorm(3)))]
  for pl, tl in cases:
    psd = get_state_dict(pl)
    assert sorted(psd) == sorted(tl.state_dict()), type(pl).__name__
    for k, v in tl.state_dict().items(): assert psd[k].shape == tuple(v.shape), k

def test_sequential_and_train_switch():
  net = nn.Sequential(nn.Linear(4, 8), Tensor.relu, nn.Dropout(0.5), nn.Linear(8, 2))
  x = Tensor.ones(3, 4)
  a, b = net(x).numpy(), net(x).numpy()
  np.testing.assert_array_equal(a, b)
  assert Tensor.training is False
  with nn.train():
    assert Tensor.training is True
    with nn.eval(): assert Tensor.training is False
    assert Tensor.training is True
  assert Tensor.training is False
  @nn.train()
  def f(): return Tensor.training
  assert f() is True and Tensor.training is False

# ---------------------------------------------------------------------- 10 training steps vs torch

def _ten_cases():
  """name -> (make petagrad layer, make torch layer, input shapes (None: integer indices), forward, training)."""
  mha_fwd = lambda l, q, k: l(q, k, k)[0]
  lstm_fwd = lambda l, x, h: l(x, (h, h))[0] * 2 + l(x, (h, h))[1]
  def bn(n, **kw): return (lambda: nn.BatchNorm(n, **kw)) if n == 3 else None
  return {
    "linear": (lambda: nn.Linear(5, 4), lambda: torch.nn.Linear(5, 4), [(6, 5)], None, False),
    "conv1d": (lambda: nn.Conv1d(3, 4, 3, padding=1), lambda: torch.nn.Conv1d(3, 4, 3, padding=1), [(2, 3, 7)], None, False),
    "conv2d": (lambda: nn.Conv2d(2, 3, 3, stride=2, groups=1), lambda: torch.nn.Conv2d(2, 3, 3, stride=2), [(2, 2, 7, 6)], None, False),
    "conv3d": (lambda: nn.Conv3d(2, 2, 2), lambda: torch.nn.Conv3d(2, 2, 2), [(1, 2, 4, 3, 3)], None, False),
    "conv_transpose1d": (lambda: nn.ConvTranspose1d(3, 2, 3, stride=2), lambda: torch.nn.ConvTranspose1d(3, 2, 3, stride=2), [(2, 3, 5)], None,
                         False),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1), lambda: torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1),
                         [(2, 3, 4, 4)], None, False),
    "batchnorm1d": (lambda: nn.BatchNorm1d(3), lambda: torch.nn.BatchNorm1d(3), [(8, 3)], None, True),
    "batchnorm2d_cumulative": (lambda: nn.BatchNorm2d(3, momentum=None), lambda: torch.nn.BatchNorm2d(3, momentum=None), [(4, 3, 3, 3)], None, True),
    "batchnorm3d_momentum": (lambda: nn.BatchNorm3d(3, momentum=0.3), lambda: torch.nn.BatchNorm3d(3, momentum=0.3), [(2, 3, 2, 3, 2)], None, True),
    "batchnorm2d_no_stats": (lambda: nn.BatchNorm2d(3, track_running_stats=False), lambda: torch.nn.BatchNorm2d(3, track_running_stats=False),
                             [(4, 3, 2, 2)], None, True),
    "layernorm": (lambda: nn.LayerNorm(5), lambda: torch.nn.LayerNorm(5), [(3, 4, 5)], None, False),
    "rmsnorm": (lambda: nn.RMSNorm(5), lambda: torch.nn.RMSNorm(5), [(3, 4, 5)], None, False),
    "groupnorm": (lambda: nn.GroupNorm(2, 4), lambda: torch.nn.GroupNorm(2, 4), [(3, 4, 5)], None, False),
    "instancenorm2d": (lambda: nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
                       lambda: torch.nn.InstanceNorm2d(3, affine=True, track_running_stats=True),
                       [(2, 3, 4, 4)], None, True),
    "embedding": (lambda: nn.Embedding(7, 4), lambda: torch.nn.Embedding(7, 4), [None], None, False),
    "lstmcell": (lambda: nn.LSTMCell(3, 4), lambda: torch.nn.LSTMCell(3, 4), [(2, 3), (2, 4)], lstm_fwd, False),
    "multihead_attention": (lambda: nn.MultiheadAttention(8, 2, batch_first=True), lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True),
                            [(2, 3, 8), (2, 5, 8)], mha_fwd, False),
  }

@pytest.mark.parametrize("name", list(_ten_cases()))
def test_ten_training_steps_vs_torch(name):
  """Same init (torch's weights loaded), same inputs: 10 SGD (momentum) steps on a squared-error loss. Parameters,
  running statistics and the losses stay within float tolerance of torch's."""
  from petagrad.nn import optim
  mk_pg, mk_torch, shapes, fwd, training = _ten_cases()[name]
  fwd = fwd or (lambda l, *xs: l(*xs))
  torch.manual_seed(0)
  tl, pl = mk_torch(), mk_pg()
  load_state_dict(pl, {k: _np(v) for k, v in tl.state_dict().items()})
  tl.train(training)
  rng = np.random.default_rng(1)
  data = [[rng.integers(0, 7, (3, 4)) if s is None else rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(10)]
  popt = optim.SGD([p for p in get_state_dict(pl).values() if p.requires_grad], lr=0.05, momentum=0.9)
  topt = torch.optim.SGD(tl.parameters(), lr=0.05, momentum=0.9)
  plosses, tlosses = [], []
  for xs in data:
    tout = fwd(tl, *[torch.tensor(x) for x in xs])
    target = np.cos(np.arange(tout.numel(), dtype=np.float32)).reshape(tuple(tout.shape))
    tloss = ((tout - torch.tensor(target)) ** 2).mean()
    topt.zero_grad(); tloss.backward(); topt.step()
    with nn.train(training):
      popt.zero_grad()
      ploss = ((fwd(pl, *[Tensor(x) for x in xs]) - Tensor(target)) ** 2).mean()
      ploss.backward()
      Tensor.realize_all(ploss, *popt.schedule_step())
    plosses.append(ploss.item()); tlosses.append(tloss.item())
  np.testing.assert_allclose(plosses, tlosses, rtol=1e-4, atol=1e-5)
  psd = get_state_dict(pl)
  for k, v in tl.state_dict().items():
    np.testing.assert_allclose(psd[k].numpy(), _np(v), rtol=1e-4, atol=1e-5, err_msg=k)

def test_layers_own_their_buffers():
  """Equal lazy inits (ones/zeros) are one graph node: every parameter and running statistic still gets memory of
  its own, and an update of one never moves another."""
  from petagrad.nn import optim
  a, b, bn = nn.LayerNorm(4), nn.LayerNorm(4), nn.BatchNorm1d(4)
  ts = [a.weight, a.bias, b.weight, b.bias, bn.weight, bn.bias, bn.running_mean, bn.running_var]
  opt = optim.SGD([a.weight, a.bias, b.weight, b.bias, bn.weight, bn.bias], lr=0.1)
  assert len({id(t.uop.base.buffer) for t in ts}) == len(ts)
  x = Tensor(x_(3, 4))
  with nn.train():
    (a(x).sum() * 3 + bn(x).sum()).backward()
  opt.step()
  assert b.bias.tolist() == [0.0] * 4 and b.weight.tolist() == [1.0] * 4   # b had no gradient
  np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.numpy().mean(0), rtol=1e-5)   # not moved by bn.bias's update
