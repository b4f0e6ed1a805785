"""tinygrad-0.14 / PyTorch habits in nn and nn.optim: BatchNorm(sz=...), LayerNorm2d, nn.Module with parameters() and
friends, conv padding checked where the layer is made, Muon, OptimizerGroup, opt.lr as a 1-element Tensor.

References: PyTorch where it has the call (torch.nn.LayerNorm / BatchNorm / Conv2d, torch.optim.Muon), a NumPy
implementation of the same math, and tinygrad 0.14 itself where it is installed (run in a subprocess on its PYTHON
device: its CPU device needs clang)."""
from __future__ import annotations
import os, sys
import numpy as np
import pytest
from petagrad import Tensor, nn, dtypes
from petagrad.nn import optim
from helpers import run_tinygrad

torch = pytest.importorskip("torch")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_run_tinygrad = run_tinygrad   # tinygrad 0.14 in a subprocess (test/helpers.py)

# ---------------------------------------------------------------------- BatchNorm(sz=...)

def test_batchnorm_tinygrad_keyword_and_aliases():
  for cls in (nn.BatchNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d):
    bn = cls(sz=5, eps=1e-3, affine=True, track_running_stats=True, momentum=0.2)
    assert bn.num_features == 5 and bn.eps == 1e-3 and bn.momentum == 0.2 and bn.weight.shape == (5,) and bn.running_mean.shape == (5,)
  assert nn.BatchNorm(sz=3, affine=False).weight is None
  with pytest.raises(TypeError, match="once"): nn.BatchNorm(3, sz=3)
  with pytest.raises(TypeError, match="once"): nn.BatchNorm()
  # tinygrad's positional order (sz, eps, affine, ...) would put a bool into torch's momentum: said, not misread
  with pytest.raises(TypeError, match="by keyword"): nn.BatchNorm(3, 1e-5, False)

def test_batchnorm_sz_matches_torch():
  x = np.random.RandomState(0).randn(4, 3, 5, 5).astype(np.float32)
  bn, tbn = nn.BatchNorm(sz=3, momentum=0.3), torch.nn.BatchNorm2d(3, momentum=0.3)
  with nn.train(): y = bn(Tensor(x)).numpy()
  ty = tbn.train()(torch.tensor(x)).detach().numpy()
  np.testing.assert_allclose(y, ty, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(bn.running_var.numpy(), tbn.running_var.numpy(), rtol=1e-5, atol=1e-6)
  with nn.eval(): np.testing.assert_allclose(bn(Tensor(x)).numpy(), tbn.eval()(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)

# ---------------------------------------------------------------------- LayerNorm2d

def _ln2d_inputs():
  r = np.random.RandomState(1)
  return r.randn(2, 3, 4, 5).astype(np.float32) * 2 + 1, r.randn(3).astype(np.float32), r.randn(3).astype(np.float32)

def test_layernorm2d_matches_torch():
  x, w, b = _ln2d_inputs()
  ln = nn.LayerNorm2d(3, eps=1e-5)
  ln.weight.assign(Tensor(w)); ln.bias.assign(Tensor(b))
  xt = torch.tensor(x, requires_grad=True)
  ref = torch.nn.functional.layer_norm(xt.permute(0, 2, 3, 1), (3,), torch.tensor(w), torch.tensor(b), 1e-5).permute(0, 3, 1, 2)
  xp = Tensor(x, requires_grad=True)
  out = ln(xp)
  np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
  (out * out).sum().backward(); (ref * ref).sum().backward()
  np.testing.assert_allclose(xp.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
  assert sorted(nn.state.get_state_dict(ln)) == ["bias", "weight"] and ln.weight.shape == (3,)
  with pytest.raises(ValueError, match="LayerNorm2d"): ln(Tensor.ones(2, 4, 3, 3))
  with pytest.raises(ValueError, match="LayerNorm2d"): ln(Tensor.ones(3, 4))

def test_tinygrad_is_never_imported_here():
  assert "tinygrad" not in sys.modules and sys.getrecursionlimit() < 10000

def test_layernorm2d_matches_tinygrad():
  x, w, b = _ln2d_inputs()
  ref = _run_tinygrad("""
    ln = nn.LayerNorm2d(3)
    ln.weight, ln.bias = Tensor(inputs["w"]), Tensor(inputs["b"])
    out["y"] = ln(Tensor(inputs["x"])).numpy()
  """, x=x, w=w, b=b)
  ln = nn.LayerNorm2d(3)
  ln.weight.assign(Tensor(w)); ln.bias.assign(Tensor(b))
  np.testing.assert_allclose(ln(Tensor(x)).numpy(), ref["y"], rtol=1e-5, atol=1e-5)

# ---------------------------------------------------------------------- nn.Module

class _Net(nn.Module):
  def __init__(self):
    super().__init__()
    self.conv = nn.Conv2d(1, 2, 3, padding=1)
    self.bn = nn.BatchNorm2d(2)
    self.blocks = [nn.Linear(8, 4), nn.Linear(4, 3)]
    self.head = {"out": nn.Linear(3, 2)}
    self.tied = self.blocks[0].weight   # a tensor reachable twice
    self.scale = Tensor([2.0])          # tinygrad style: requires_grad None (an optimizer makes it True)
  def forward(self, x: Tensor) -> Tensor:
    x = self.bn(self.conv(x)).relu().reshape(x.shape[0], -1)[:, :8]
    for b in self.blocks: x = b(x).relu()
    return self.head["out"](x) * self.scale

class _TNet(torch.nn.Module):
  def __init__(self):
    super().__init__()
    self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)
    self.bn = torch.nn.BatchNorm2d(2)
    self.blocks = torch.nn.ModuleList([torch.nn.Linear(8, 4), torch.nn.Linear(4, 3)])
    self.head = torch.nn.ModuleDict({"out": torch.nn.Linear(3, 2)})
    self.scale = torch.nn.Parameter(torch.tensor([2.0]))

def test_module_names_match_torch():
  net, tnet = _Net(), _TNet()
  assert [n for n, _ in net.named_parameters()] == [n for n, _ in tnet.named_parameters() if n != "scale"] + ["scale"]
  assert [n for n, _ in net.named_buffers()] == [n for n, _ in tnet.named_buffers()]
  assert sorted(net.state_dict()) == sorted(set(tnet.state_dict()) | {"tied"})
  assert len(net.parameters()) == len(list(tnet.parameters())) and all(isinstance(p, Tensor) for p in net.parameters())
  assert [n for n, _ in net.named_parameters("model")][0] == "model.conv.weight"
  # loading torch's weights (its numbers) through the Module method; strict and both error habits
  sd = {k: v.detach().numpy() for k, v in tnet.state_dict().items()}
  sd["tied"] = sd["blocks.0.weight"]
  net.load_state_dict(sd)
  np.testing.assert_allclose(net.blocks[0].weight.numpy(), tnet.blocks[0].weight.detach().numpy())
  for habit in (ValueError, RuntimeError):
    with pytest.raises(habit): net.load_state_dict({k: v for k, v in sd.items() if k != "scale"})
  assert net.load_state_dict({"scale": np.array([3.0], np.float32)}, strict=False).missing_keys[0] == "conv.weight"

def test_module_forward_train_eval_and_optimizer():
  net, tnet = _Net(), _TNet()
  sd = {k: v.detach().numpy() for k, v in tnet.state_dict().items()}
  sd["tied"] = sd["blocks.0.weight"]
  net.load_state_dict(sd)
  x = np.random.RandomState(2).randn(3, 1, 4, 4).astype(np.float32)
  def tforward(m, x):
    h = m.bn(m.conv(x)).relu().reshape(x.shape[0], -1)[:, :8]
    for b in m.blocks: h = b(h).relu()
    return m.head["out"](h) * m.scale
  prev = Tensor.training
  try:
    assert net.train() is net and net.training and Tensor.training
    tnet.train()
    np.testing.assert_allclose(net(Tensor(x)).numpy(), tforward(tnet, torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    assert net.eval() is net and not net.training and not Tensor.training
    tnet.eval()
    np.testing.assert_allclose(net.forward(Tensor(x)).numpy(), tforward(tnet, torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)
    # one SGD step through model.parameters() matches torch
    net.train(); tnet.train()
    opt, topt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9), torch.optim.SGD(tnet.parameters(), lr=0.1, momentum=0.9)
    for _ in range(2):
      opt.zero_grad(); topt.zero_grad()
      net(Tensor(x)).square().mean().backward(); tforward(tnet, torch.tensor(x)).square().mean().backward()
      opt.step(); topt.step()
    np.testing.assert_allclose(net.head["out"].weight.numpy(), tnet.head["out"].weight.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(net.scale.numpy(), tnet.scale.detach().numpy(), rtol=1e-4, atol=1e-5)
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
  finally:
    Tensor.training = prev

def test_module_submodules_and_plain_layers():
  net = _Net()
  names = [n for n, _ in net.named_modules()]
  assert names == ["", "conv", "bn", "blocks.0", "blocks.1", "head.out"]
  assert [n for n, _ in net.named_children()] == ["conv", "bn"] and net.children()[0] is net.conv
  seen = []
  net.apply(lambda m: seen.append(type(m).__name__))
  assert seen[-1] == "_Net" and sorted(seen[:-1]) == ["BatchNorm2d", "Conv2d", "Linear", "Linear", "Linear"]
  # petagrad's own layers are Modules: parameters() like torch's layers
  for layer, tlayer in ((nn.Linear(3, 2), torch.nn.Linear(3, 2)), (nn.BatchNorm2d(4), torch.nn.BatchNorm2d(4)), (nn.LayerNorm(5), torch.nn.LayerNorm(5)),
                        (nn.Conv2d(2, 3, 3), torch.nn.Conv2d(2, 3, 3)), (nn.Embedding(4, 2), torch.nn.Embedding(4, 2)), (nn.LSTMCell(3, 2), torch.nn.LSTMCell(3, 2)),
                        (nn.MultiheadAttention(4, 2), torch.nn.MultiheadAttention(4, 2)), (nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)),
                        (nn.Sequential(nn.Linear(2, 2), Tensor.relu), torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU()))):
    assert isinstance(layer, nn.Module)
    assert [n for n, _ in layer.named_parameters()] == [n for n, _ in tlayer.named_parameters()], type(layer).__name__
    assert [tuple(p.shape) for p in layer.parameters()] == [tuple(p.shape) for p in tlayer.parameters()]
  lin = nn.Linear(3, 2)
  assert lin.forward(Tensor.ones(1, 3)).tolist() == lin(Tensor.ones(1, 3)).tolist()
  # a subclass overriding forward is what calling runs
  class Doubled(nn.Linear):
    def forward(self, x): return super().forward(x) * 2
  d = Doubled(3, 2)
  np.testing.assert_allclose(d(Tensor.ones(1, 3)).numpy(), (Tensor.ones(1, 3).linear(d.weight, d.bias) * 2).numpy(), rtol=1e-6)
  with pytest.raises(NotImplementedError, match="forward"): nn.Module()(Tensor.ones(1))

def test_module_walks_plain_tinygrad_style_classes():
  class Block:   # tinygrad style: no base class
    def __init__(self): self.l = nn.Linear(2, 2)
    def __call__(self, x): return self.l(x)
  class Net(nn.Module):
    def __init__(self): self.block = Block()
    def forward(self, x): return self.block(x)
  net = Net()
  assert [n for n, _ in net.named_parameters()] == ["block.l.weight", "block.l.bias"] and [n for n, _ in net.named_modules()] == ["", "block.l"]
  assert net(Tensor.ones(1, 2)).shape == (1, 2)

# ---------------------------------------------------------------------- conv padding checked at construction

@pytest.mark.parametrize("kw", [dict(padding=-1), dict(padding=(1, -2)), dict(padding="full"), dict(padding="SAME"), dict(padding="same", stride=2),
                                dict(padding="same", stride=(1, 2)), dict(padding=(1, 2, 3)), dict(padding=((1, 2), (3,)))])
def test_conv_bad_padding_raises_at_construction(kw):
  with pytest.raises(ValueError) as e: nn.Conv2d(3, 4, 3, **kw)
  assert "Conv2d" in str(e.value) and "padding" in str(e.value)
  if kw.get("padding") in ("full", "SAME") or kw.get("stride"):   # torch rejects these too, at construction
    with pytest.raises(ValueError): torch.nn.Conv2d(3, 4, 3, **kw)

@pytest.mark.parametrize("cls, n", [(nn.Conv1d, 1), (nn.Conv3d, 3)])
def test_conv_nd_bad_padding(cls, n):
  with pytest.raises(ValueError, match=cls.__name__): cls(2, 2, 3, padding=-1)
  with pytest.raises(ValueError, match="strided"): cls(2, 2, 3, padding="same", stride=2)
  with pytest.raises(TypeError, match="padding"): cls(2, 2, 3, padding=1.5)

def test_conv_transpose_bad_arguments():
  for kw, what in ((dict(padding=-1), "padding"), (dict(padding="same"), "padding"), (dict(output_padding=2, stride=2), "output_padding"),
                   (dict(output_padding=-1), "output_padding"), (dict(stride=0), "stride")):
    with pytest.raises(ValueError) as e: nn.ConvTranspose2d(3, 4, 3, **kw)
    assert "ConvTranspose2d" in str(e.value) and what in str(e.value)

@pytest.mark.parametrize("padding, mode", [((1, 2, 0, 1), "zeros"), (((0, 1), (2, 1)), "zeros"), ("same", "zeros"), ("valid", "zeros"), ((1, 2), "reflect"),
                                           ((1, 2, 0, 1), "circular"), ("same", "replicate")])
def test_conv_good_padding_forms_match_torch(padding, mode):
  x = np.random.RandomState(3).randn(1, 2, 6, 7).astype(np.float32)
  conv = nn.Conv2d(2, 3, (3, 2), padding=padding, padding_mode=mode, dilation=(1, 2) if padding == "same" else 1)
  # torch's form of the same padding: an F.pad before a padding=0 conv
  if padding == "same": pairs = [(1, 1), (1, 1)]
  elif padding == "valid": pairs = [(0, 0), (0, 0)]
  elif isinstance(padding[0], tuple): pairs = list(padding)
  elif len(padding) == 4: pairs = [(padding[2], padding[3]), (padding[0], padding[1])]
  else: pairs = [(p, p) for p in padding]
  xt = torch.nn.functional.pad(torch.tensor(x), [p for pr in reversed(pairs) for p in pr], mode="constant" if mode == "zeros" else mode)
  ref = torch.nn.functional.conv2d(xt, torch.tensor(conv.weight.numpy()), torch.tensor(conv.bias.numpy()), dilation=(1, 2) if padding == "same" else 1)
  np.testing.assert_allclose(conv(Tensor(x)).numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)

# ---------------------------------------------------------------------- Muon

def _ns_ref(G: np.ndarray, steps: int, coeffs, eps: float) -> np.ndarray:
  if G.shape[0] > G.shape[1]: return _ns_ref(G.T, steps, coeffs, eps).T
  G = G / (np.sqrt((G * G).sum()) + eps)
  for _ in range(steps):
    A, X, out = G @ G.T, G, coeffs[0] * G
    for c in coeffs[1:]:
      X = A @ X
      out = out + c * X
    G = out
  return G

def _muon_ref(params, targets, steps, lr=0.02, momentum=0.95, weight_decay=0.1, ns_steps=5, coeffs=(3.4445, -4.775, 2.0315), nesterov=True, eps=1e-7):
  """tinygrad's Muon (LARS with ns_coefficients, pre_wd=False, classic=False, tcoef=0) in float64 on the loss
  sum((p - target)^2)."""
  ps = [p.astype(np.float64) for p in params]
  bufs = [np.zeros_like(p) for p in ps]
  for _ in range(steps):
    for i, (p, t) in enumerate(zip(ps, targets)):
      g = 2 * (p - t)
      bufs[i] = momentum * bufs[i] + g
      u = g + momentum * bufs[i] if nesterov else bufs[i]
      u = _ns_ref(u.reshape(u.shape[0], -1), ns_steps, coeffs, eps).reshape(u.shape)
      ps[i] = p - lr * u - weight_decay * lr * p
  return ps

def _muon_run(params, targets, steps, **kw):
  ws = [Tensor(p, requires_grad=True) for p in params]
  opt = optim.Muon(ws, **kw)
  for _ in range(steps):
    opt.zero_grad()
    sum(((w - Tensor(t)) ** 2).sum() for w, t in zip(ws, targets)).backward()
    opt.step()
  return [w.numpy() for w in ws]

def _problem(shapes, seed=4):
  r = np.random.RandomState(seed)
  return [r.randn(*s).astype(np.float32) for s in shapes], [r.randn(*s).astype(np.float32) for s in shapes]

@pytest.mark.parametrize("kw", [dict(), dict(nesterov=False), dict(weight_decay=0.0, momentum=0.5), dict(ns_steps=2, ns_coefficients=(2.0, -1.5, 0.5)),
                                dict(momentum=0.0)])
def test_muon_matches_numpy_reference(kw):
  params, targets = _problem([(4, 6), (6, 4), (5,), (3, 2, 2)])
  ref_kw = {("coeffs" if k == "ns_coefficients" else k): v for k, v in kw.items()}
  got = _muon_run(params, targets, 3, lr=0.02, **kw)
  for g, r in zip(got, _muon_ref(params, targets, 3, lr=0.02, **ref_kw)): np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-5)

def test_muon_defaults_are_tinygrads():
  opt = optim.Muon([Tensor.ones(2, 2, requires_grad=True)])
  g = opt.param_groups[0]
  assert (opt.lr.item(), g["momentum"], g["weight_decay"], g["ns_steps"], g["ns_coefficients"], g["nesterov"]) == \
         (pytest.approx(0.001), 0.95, 0.1, 5, (3.4445, -4.775, 2.0315), True)

def test_muon_matches_tinygrad():
  params, targets = _problem([(3, 5), (5, 3), (4,)], seed=5)
  ref = _run_tinygrad("""
    ws = [Tensor(inputs[f"p{i}"]) for i in range(3)]
    ts = [Tensor(inputs[f"t{i}"]) for i in range(3)]
    opt = nn.optim.Muon(ws, lr=0.02)
    with Context(TRAINING=1):
      for _ in range(3):
        opt.zero_grad()
        sum(((w - t) ** 2).sum() for w, t in zip(ws, ts)).backward()
        opt.step()
    for i, w in enumerate(ws): out[f"w{i}"] = w.numpy()
  """, **{f"p{i}": p for i, p in enumerate(params)}, **{f"t{i}": t for i, t in enumerate(targets)})
  got = _muon_run(params, targets, 3, lr=0.02)
  for i, g in enumerate(got): np.testing.assert_allclose(g, ref[f"w{i}"], rtol=2e-4, atol=2e-5)
  assert "tinygrad" not in sys.modules

@pytest.mark.parametrize("adjust", ["original", "match_rms_adamw"])
def test_muon_matches_torch_with_torch_lr_adjustment(adjust):
  assert hasattr(torch.optim, "Muon")
  params, targets = _problem([(4, 6), (6, 4)], seed=6)
  tws = [torch.tensor(p, requires_grad=True) for p in params]
  topt = torch.optim.Muon(tws, lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn=adjust)
  for _ in range(3):
    topt.zero_grad()
    sum(((w - torch.tensor(t)) ** 2).sum() for w, t in zip(tws, targets)).backward()
    topt.step()
  got = _muon_run(params, targets, 3, lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=True, adjust_lr_fn=adjust)
  # torch runs Newton-Schulz in bfloat16 (and averages its momentum, a scale Newton-Schulz removes): close, not equal
  # (differences ~1e-3 where the steps moved the weights by 0.03-0.05; without the lr adjustment the tall matrix is 1e-2 off)
  for g, t in zip(got, tws): np.testing.assert_allclose(g, t.detach().numpy(), rtol=0, atol=2e-3)

def test_muon_errors_and_dtypes():
  with pytest.raises(ValueError, match="0-d"): optim.Muon([Tensor(1.0, requires_grad=True)])
  with pytest.raises(ValueError, match="adjust_lr_fn"): optim.Muon([Tensor.ones(2, 2, requires_grad=True)], adjust_lr_fn="nope")
  with pytest.raises(ValueError, match="lr"): optim.Muon([Tensor.ones(2, 2, requires_grad=True)], lr=-1)
  w = Tensor.ones(3, 4, dtype=dtypes.float16, requires_grad=True)
  opt = optim.Muon([w], lr=0.01)
  (w.float() * Tensor.arange(12).reshape(3, 4).float()).sum().backward(); opt.step()
  assert w.dtype == dtypes.float16 and opt.state[w]["master"].dtype == dtypes.float32 and np.isfinite(w.numpy()).all()

def test_newton_schulz_orthogonalizes():
  G = np.random.RandomState(7).randn(5, 8).astype(np.float32)
  q = optim.newton_schulz(Tensor(G), 5, (3.4445, -4.775, 2.0315)).numpy()
  np.testing.assert_allclose(q, _ns_ref(G.astype(np.float64), 5, (3.4445, -4.775, 2.0315), 1e-7), rtol=1e-4, atol=1e-5)
  s = np.linalg.svd(q, compute_uv=False)
  assert 0.6 < s.min() and s.max() < 1.25   # Muon's quintic: singular values near 1, not exactly 1
  with pytest.raises(ValueError, match="matrix"): optim.newton_schulz(Tensor.ones(3), 5, (1.5, -0.5))

# ---------------------------------------------------------------------- OptimizerGroup

def test_optimizer_group_matches_separate_torch_optimizers():
  r = np.random.RandomState(8)
  W, b, x = r.randn(4, 3).astype(np.float32), r.randn(4).astype(np.float32), r.randn(5, 3).astype(np.float32)
  w_, b_ = Tensor(W, requires_grad=True), Tensor(b, requires_grad=True)
  tw, tb = torch.tensor(W, requires_grad=True), torch.tensor(b, requires_grad=True)
  group = optim.OptimizerGroup(optim.SGD([w_], lr=0.1, momentum=0.9), optim.AdamW([b_], lr=0.01))
  t1, t2 = torch.optim.SGD([tw], lr=0.1, momentum=0.9), torch.optim.AdamW([tb], lr=0.01)
  for _ in range(3):
    group.zero_grad(); t1.zero_grad(); t2.zero_grad()
    (Tensor(x).linear(w_, b_).relu() ** 2).mean().backward()
    (torch.nn.functional.linear(torch.tensor(x), tw, tb).relu() ** 2).mean().backward()
    group.step(); t1.step(); t2.step()
  np.testing.assert_allclose(w_.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(b_.numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-6)
  assert group[0].params == [w_] and len(group) == 2 and [o for o in group] == group.optimizers
  assert group.params == [w_, b_] and len(group.param_groups) == 2

def test_optimizer_group_schedule_step_and_state_dict():
  w1, w2 = Tensor.ones(2, 2, requires_grad=True), Tensor.ones(2, requires_grad=True)
  group = optim.OptimizerGroup([optim.Muon([w1], lr=0.1), optim.SGD([w2], lr=0.5)])
  loss = ((Tensor.ones(3, 2) @ w1) @ w2).sum()
  loss.backward()
  Tensor.realize_all(loss, *group.schedule_step())
  assert loss.item() == 12.0 and w2.tolist() != [1.0, 1.0] and w1.tolist() != [[1.0, 1.0], [1.0, 1.0]]
  sd = group.state_dict()
  assert len(sd["optimizers"]) == 2 and "momentum_buffer" in sd["optimizers"][0]["state"][0]
  other = optim.OptimizerGroup(optim.Muon([w1], lr=0.3), optim.SGD([w2], lr=0.7))
  other.load_state_dict(sd)
  assert other[0].lr.item() == pytest.approx(0.1) and other[1].lr.item() == pytest.approx(0.5)
  with pytest.raises(ValueError): other.load_state_dict({"optimizers": [sd["optimizers"][0]]})
  with pytest.raises(ValueError, match="more than one"): optim.OptimizerGroup(optim.SGD([w1]), optim.SGD([w1]))
  with pytest.raises(TypeError): optim.OptimizerGroup(optim.SGD([w1]), "adam")
  # a torch-style scheduler over the group scales every optimizer's lr; group.lr sets all
  sched = optim.StepLR(group, step_size=1, gamma=0.5); sched.step()
  assert [g["lr"].item() for g in group.param_groups] == pytest.approx([0.05, 0.25])
  group.lr = 0.01
  assert group[0].lr.item() == pytest.approx(0.01) and group[1].lr.item() == pytest.approx(0.01)

# ---------------------------------------------------------------------- opt.lr, tinygrad style

def test_opt_lr_is_a_one_element_tensor_schedulers_assign_to():
  w = Tensor([1.0, 2.0], requires_grad=True)
  s = Tensor(3.0, requires_grad=True)   # a 0-d parameter keeps its shape under a (1,)-shaped lr
  opt = optim.SGD([w, s], lr=0.1)
  assert isinstance(opt.lr, Tensor) and opt.lr.shape == (1,) and opt.lr.dtype == dtypes.float32
  buf = opt.lr
  # tinygrad's schedulers (extra/lr_scheduler.py) write opt.lr in place: opt.lr.assign(opt.lr * gamma), or a Tensor([lr])
  opt.lr.assign(opt.lr * 0.5)
  assert opt.lr is buf and opt.lr.item() == pytest.approx(0.05) and opt.state_dict()["param_groups"][0]["lr"] == pytest.approx(0.05)
  opt.lr.assign(Tensor([0.25]))
  (w.sum() + s * 2).backward(); opt.step()
  assert w.tolist() == pytest.approx([0.75, 1.75]) and s.shape == () and s.item() == pytest.approx(2.5)
  opt.lr = 0.5
  assert opt.lr is buf and opt.lr.item() == 0.5
  # torch-style schedulers still work on it, and an assigned lr replays under TinyJit (no recompile)
  from petagrad import TinyJit
  w2 = Tensor([0.0], requires_grad=True)
  opt2 = optim.SGD([w2], lr=1.0)
  @TinyJit
  def step():
    opt2.zero_grad(); loss = w2.sum(); loss.backward(); opt2.step(); return loss.realize()
  for i, lr in enumerate([1.0, 1.0, 0.5, 0.25, 0.125]):
    opt2.lr.assign(Tensor([lr]))
    step()
  assert w2.item() == pytest.approx(-(1.0 + 1.0 + 0.5 + 0.25 + 0.125))
  sched = optim.CosineAnnealingLR(opt2, T_max=4)
  sched.step()
  assert opt2.lr.shape == (1,) and opt2.lr.item() == pytest.approx(sched.get_last_lr()[0])

def test_lr_with_torch_matches_after_tinygrad_style_assign():
  x = np.array([[1.0, -2.0, 0.5]], np.float32)
  w, tw = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  opt, topt = optim.Adam([w], lr=0.1), torch.optim.Adam([tw], lr=0.1)
  for lr in (0.1, 0.05, 0.01):
    opt.lr.assign(Tensor([lr]))
    for g in topt.param_groups: g["lr"] = lr
    opt.zero_grad(); topt.zero_grad()
    (w ** 2).sum().backward(); (tw ** 2).sum().backward()
    opt.step(); topt.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)

# ---------------------------------------------------------------------- tinygrad's Adam keywords

@pytest.mark.parametrize("cls, tcls", [(optim.Adam, torch.optim.Adam), (optim.AdamW, torch.optim.AdamW)])
def test_adam_tinygrad_b1_b2_keywords(cls, tcls):
  x = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
  w, tw = Tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
  opt, topt = cls([w], lr=0.05, b1=0.8, b2=0.95), tcls([tw], lr=0.05, betas=(0.8, 0.95))
  assert opt.param_groups[0]["betas"] == (0.8, 0.95)
  for _ in range(3):
    opt.zero_grad(); topt.zero_grad()
    (w ** 3).sum().backward(); (tw ** 3).sum().backward()
    opt.step(); topt.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
  assert optim.LAMB([Tensor.ones(2, requires_grad=True)], b1=0.5).param_groups[0]["betas"] == (0.5, 0.999)
  with pytest.raises(TypeError, match="b1"): cls([Tensor.ones(2, requires_grad=True)], 0.001, 0.9)   # tinygrad's positional b1
  with pytest.raises(ValueError, match="betas"): cls([Tensor.ones(2, requires_grad=True)], b2=1.5)
