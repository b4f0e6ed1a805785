"""tinygrad 0.14's optimizer state attributes on petagrad's optimizers: LAMB/Adam/AdamW `m`, `v`, `b1_t`, `b2_t` and
SGD/LARS/Muon `b` are the live state (not copies), `get_state_dict(opt)` has tinygrad's names, a tinygrad optimizer
checkpoint resumes on petagrad (and the other way), and state moved to another device (tinygrad's CPU offload) is
updated where it lives.

References: tinygrad 0.14 itself (run in a subprocess on its PYTHON device, as test_nn_compat.py does), torch.optim for
the update rules, and an uninterrupted petagrad run for the resumed ones."""
from __future__ import annotations
import json, math
import numpy as np
import pytest
from petagrad import Tensor, dtypes
from petagrad.nn import optim
from helpers import run_tinygrad
from petagrad.nn.state import get_state_dict, load_state_dict, safe_save, safe_load
from petagrad.engine.jit import TinyJit

RNG = np.random.default_rng(7)
W0 = RNG.standard_normal((3, 4)).astype(np.float32)
B0 = RNG.standard_normal(4).astype(np.float32)
X = RNG.standard_normal((5, 3)).astype(np.float32)

_run_tinygrad = run_tinygrad   # tinygrad 0.14 in a subprocess (test/helpers.py)

def loss_of(W: Tensor, b: Tensor) -> Tensor: return (Tensor(X) @ W + b).tanh().square().mean()

def params() -> list[Tensor]: return [Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)]

def train(opt, ps, steps: int, jit: bool = False) -> None:
  def step():
    opt.zero_grad()
    loss = loss_of(*ps)
    loss.backward()
    Tensor.realize_all(loss, *opt.schedule_step())
    return loss
  f = TinyJit(step) if jit else step
  for _ in range(steps): f()

def to_(t: Tensor, device: str) -> Tensor:
  """tinygrad's Tensor.to_ (replace this tensor's data with its copy on device), for petagrad versions without it."""
  if hasattr(Tensor, "to_"): return t.to_(device)
  t.uop = t.to(device).uop
  return t

# ---------------------------------------------------------------------- the attributes are the live state

@pytest.mark.parametrize("make", [optim.Adam, optim.AdamW, optim.LAMB])
def test_lamb_family_attributes_are_the_state(make):
  ps = params()
  opt = make(ps, lr=0.01)
  m, v = opt.m, opt.v
  assert len(m) == len(v) == 2 and [t.shape for t in m] == [(3, 4), (4,)] and all(t.dtype == dtypes.float32 for t in m + v)
  assert m[0].tolist() == np.zeros((3, 4)).tolist() and opt.b1_t.shape == opt.b2_t.shape == (1,) and opt.b1_t.tolist() == [1.0]
  train(opt, ps, 3)
  st = opt.state[ps[0]]
  assert opt.m[0] is st["exp_avg"] and opt.v[0] is st["exp_avg_sq"] and m[0] is st["exp_avg"]   # the same objects before and after steps
  np.testing.assert_allclose(opt.b1_t.numpy(), [0.9 ** 3], rtol=1e-6)
  np.testing.assert_allclose(opt.b2_t.numpy(), [0.999 ** 3], rtol=1e-6)
  assert opt.b1_t.requires_grad is False and opt.b1_t is opt.b1_t

def test_m_v_writes_change_the_next_step_like_torch():
  """Zeroing the moments after two steps with opt.m/opt.v (tinygrad's names) equals torch zeroing exp_avg/exp_avg_sq."""
  torch = pytest.importorskip("torch")
  ps = params()
  opt = optim.Adam(ps, lr=0.05)
  train(opt, ps, 2)
  for t in opt.m + opt.v: t.assign(t.zeros_like())
  train(opt, ps, 2)
  tw, tb = torch.tensor(W0.copy(), requires_grad=True), torch.tensor(B0.copy(), requires_grad=True)
  topt = torch.optim.Adam([tw, tb], lr=0.05)
  for i in range(4):
    if i == 2:
      for s in topt.state.values(): s["exp_avg"].zero_(); s["exp_avg_sq"].zero_()
    topt.zero_grad()
    (torch.tensor(X) @ tw + tb).tanh().square().mean().backward()
    topt.step()
  np.testing.assert_allclose(ps[0].numpy(), tw.detach().numpy(), rtol=3e-6, atol=3e-7)

def test_b1_t_b2_t_write_the_step_counter():
  ps = params()
  opt = optim.Adam(ps, lr=0.01, b1=0.5)
  held = opt.b1_t                                     # a reference held across steps stays current
  train(opt, ps, 3)
  assert held.tolist() == [0.125] and opt.param_groups[0]["step"].item() == 3
  held.assign(Tensor([0.5 ** 7]))
  assert opt.param_groups[0]["step"].item() == 7 and held.tolist() == [0.5 ** 7]
  opt.b1_t *= 0.5                                     # tinygrad's own update (self.b1_t *= self.b1)
  assert opt.param_groups[0]["step"].item() == 8
  opt.b2_t = Tensor([0.999 ** 20])
  assert opt.param_groups[0]["step"].item() == 20
  opt.b2_t.assign(0.0)                                # underflowed: at least the step where float32 0.999 ** t is 0
  assert opt.param_groups[0]["step"].item() >= 100000 and opt.b2_t.tolist() == [0.0]
  with pytest.raises(ValueError, match="one value"): opt.b1_t.assign(Tensor([0.5, 0.25]))

def test_b1_t_write_reaches_a_jitted_step():
  """After TinyJit captured the step, writing b1_t still sets the step the bias corrections use."""
  ref_ps, ps = params(), params()
  ref, opt = optim.Adam(ref_ps, lr=0.05), optim.Adam(ps, lr=0.05)
  train(opt, ps, 4, jit=True)
  train(ref, ref_ps, 4)
  for o in (opt, ref): o.b1_t.assign(Tensor([0.9 ** 50]))
  train(opt, ps, 3, jit=True)   # (a new TinyJit: captures again; the written counter is what it reads)
  train(ref, ref_ps, 3)
  assert opt.param_groups[0]["step"].item() == ref.param_groups[0]["step"].item() == 53
  np.testing.assert_allclose(ps[0].numpy(), ref_ps[0].numpy(), rtol=1e-6, atol=1e-7)

@pytest.mark.parametrize("make,kw", [(optim.SGD, dict(momentum=0.9)), (optim.SGD, dict(momentum=0.9, nesterov=True)), (optim.LARS, {}),
                                     (optim.Muon, {})])
def test_momentum_b_is_the_buffer(make, kw):
  ps = params()
  opt = make(ps, lr=0.01, **kw)
  b = opt.b
  assert len(b) == 2 and b[1].tolist() == [0.0] * 4
  train(opt, ps, 2)
  assert opt.b[0] is b[0] is opt.state[ps[0]]["momentum_buffer"]
  assert optim.SGD(params(), lr=0.1).b == []          # no momentum, no buffers (tinygrad)

def test_sgd_b_before_first_step_matches_torch():
  """Touching opt.b before the first step makes the buffers (zeros); the steps stay torch's, dampening too."""
  torch = pytest.importorskip("torch")
  for kw in (dict(momentum=0.9), dict(momentum=0.9, dampening=0.3)):
    ps = params()
    opt = optim.SGD(ps, lr=0.1, **kw)
    assert opt.b[0].tolist() == np.zeros((3, 4)).tolist()
    train(opt, ps, 3)
    tw, tb = torch.tensor(W0.copy(), requires_grad=True), torch.tensor(B0.copy(), requires_grad=True)
    topt = torch.optim.SGD([tw, tb], lr=0.1, **kw)
    for _ in range(3):
      topt.zero_grad()
      (torch.tensor(X) @ tw + tb).tanh().square().mean().backward()
      topt.step()
    np.testing.assert_allclose(ps[0].numpy(), tw.detach().numpy(), rtol=3e-6, atol=3e-7)
    np.testing.assert_allclose(opt.b[0].numpy(), topt.state[tw]["momentum_buffer"].numpy(), rtol=3e-6, atol=3e-7)

# ---------------------------------------------------------------------- state moved to another device

@pytest.mark.parametrize("make", [optim.LAMB, optim.Adam, optim.AdamW, lambda p: optim.SGD(p, lr=0.01, momentum=0.9, nesterov=True), optim.LARS])
def test_offloaded_state_updates_where_it_lives(make):
  """tinygrad's test_lamb_cpu_offload, with the parameters on PYTHON and the state on CPU (two devices on any machine)."""
  ref_ps = [Tensor(W0.copy(), requires_grad=True, device="PYTHON"), Tensor(B0.copy(), requires_grad=True, device="PYTHON")]
  ps = [Tensor(W0.copy(), requires_grad=True, device="PYTHON"), Tensor(B0.copy(), requires_grad=True, device="PYTHON")]
  ref, opt = make(ref_ps), make(ps)
  names = ["b"] if hasattr(opt, "b") else ["m", "v"]
  for t in [t for n in names for t in getattr(opt, n)]: to_(t, "CPU")
  if hasattr(opt, "b1_t"):
    for t in (opt.b1_t, opt.b2_t): to_(t, "CPU")
  for o, p in ((opt, ps), (ref, ref_ps)):
    for _ in range(2):
      o.zero_grad()
      (Tensor(X, device="PYTHON") @ p[0] + p[1]).tanh().square().mean().backward()
      o.step()
  assert ps[0].device == "PYTHON" and getattr(opt, names[0])[0].device == "CPU"
  np.testing.assert_allclose(ps[0].numpy(), ref_ps[0].numpy(), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(getattr(opt, names[0])[1].numpy(), getattr(ref, names[0])[1].numpy(), rtol=1e-6, atol=1e-7)

# ---------------------------------------------------------------------- get_state_dict(opt): tinygrad's names

def _optimizers(o, T):
  ps = lambda: [T.ones(3, 4).contiguous(), T.ones(4).contiguous()]   # noqa: E731
  return {"Adam": o.Adam(ps()), "AdamW": o.AdamW(ps()), "LAMB": o.LAMB(ps()), "SGD": o.SGD(ps(), momentum=0.9), "SGD0": o.SGD(ps()),
          "LARS": o.LARS(ps()), "Muon": o.Muon(ps()), "Group": o.OptimizerGroup(o.Adam(ps()[:1]), o.SGD(ps()[1:], momentum=0.9))}

def test_get_state_dict_names_match_tinygrad():
  mine = _optimizers(optim, Tensor)
  want = {name: {k: list(v.shape) for k, v in get_state_dict(o).items()} for name, o in mine.items()}
  out = _run_tinygrad(f"""
    from tinygrad.nn import optim
    want = json.loads({json.dumps(json.dumps(want))})
    ps = lambda: [Tensor.ones(3, 4).contiguous(), Tensor.ones(4).contiguous()]
    o = optim
    tg = {{"Adam": o.Adam(ps()), "AdamW": o.AdamW(ps()), "LAMB": o.LAMB(ps()), "SGD": o.SGD(ps(), momentum=0.9), "SGD0": o.SGD(ps()),
          "LARS": o.LARS(ps()), "Muon": o.Muon(ps()), "Group": o.OptimizerGroup(o.Adam(ps()[:1]), o.SGD(ps()[1:], momentum=0.9))}}
    for name, opt in tg.items():
      got = {{k: list(v.shape) for k, v in get_state_dict(opt).items()}}
      if got != want[name]: print(name, sorted(got), sorted(want[name]), file=sys.stderr)
      out[name] = [got == want[name]]
  """)
  assert {k: bool(v[0]) for k, v in out.items()} == {k: True for k in mine}
  assert sorted(want["Adam"]) == ["b1_t", "b2_t", "lr", "m.0", "m.1", "params.0", "params.1", "v.0", "v.1"]
  assert sorted(want["SGD"]) == ["b.0", "b.1", "lr", "params.0", "params.1"] and sorted(want["SGD0"]) == ["lr", "params.0", "params.1"]
  sd = get_state_dict(mine["Adam"])
  assert sd["m.0"] is mine["Adam"].state[sd["params.0"]]["exp_avg"] and sd["lr"] is mine["Adam"].lr

@pytest.mark.parametrize("make", [optim.Adam, optim.LAMB, lambda p, lr: optim.SGD(p, lr=lr, momentum=0.9), optim.Muon])
def test_checkpoint_roundtrip_resumes_exactly(tmp_path, make):
  """safe_save(get_state_dict(opt)) then load_state_dict into a new optimizer (and model): the resumed run equals the
  uninterrupted one, bit for bit."""
  ref_ps = params()
  ref = make(ref_ps, lr=0.02)
  train(ref, ref_ps, 6)
  ps = params()
  opt = make(ps, lr=0.02)
  train(opt, ps, 3)
  safe_save(get_state_dict(opt), str(tmp_path / "opt.safetensors"))
  ps2 = [Tensor.zeros(3, 4, requires_grad=True), Tensor.zeros(4, requires_grad=True)]
  opt2 = make(ps2, lr=0.5)
  load_state_dict(opt2, safe_load(str(tmp_path / "opt.safetensors")))   # params, lr and the state (tinygrad loads params too)
  assert opt2.lr.item() == pytest.approx(0.02)
  if hasattr(opt2, "b1_t"): assert opt2.param_groups[0]["step"].item() == 3
  train(opt2, ps2, 3)
  np.testing.assert_array_equal(ps2[0].numpy(), ref_ps[0].numpy())
  np.testing.assert_array_equal(ps2[1].numpy(), ref_ps[1].numpy())

def test_tinygrad_checkpoint_resumes_on_petagrad():
  """A tinygrad 0.14 AdamW trained 3 steps; its get_state_dict loaded into petagrad's AdamW; 3 more steps on each."""
  out = _run_tinygrad("""
    W, b, x = Tensor(inputs["W"]), Tensor(inputs["b"]), Tensor(inputs["x"])
    opt = nn.optim.AdamW([W, b], lr=0.02, weight_decay=0.1)
    def step():
      opt.zero_grad()
      loss = (x @ W + b).tanh().square().mean()
      loss.backward()
      opt.step()
    with Context(TRAINING=1):
      for _ in range(3): step()
      for k, v in get_state_dict(opt).items(): out["sd." + k] = v.numpy()
      for _ in range(3): step()
    out["W"], out["b"] = W.numpy(), b.numpy()
  """, W=W0, b=B0, x=X)
  ps = params()
  opt = optim.AdamW(ps, lr=0.02, weight_decay=0.1)
  load_state_dict(opt, {k[3:]: v.astype(np.float32) for k, v in out.items() if k.startswith("sd.")})
  assert opt.param_groups[0]["step"].item() == 3
  train(opt, ps, 3)
  # tinygrad's bias corrections are 1 - b ** t in float32 (petagrad's: -expm1(t log b)); 1e-5 covers that
  np.testing.assert_allclose(ps[0].numpy(), out["W"], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(ps[1].numpy(), out["b"], rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(opt.m[0].numpy(), opt.state[ps[0]]["exp_avg"].numpy())
  assert math.isclose(opt.b2_t.item(), 0.999 ** 6, rel_tol=1e-6)

def test_lamb_offload_like_tinygrads_test():
  """tinygrad's test_lamb_cpu_offload as written (the state moved to CPU, then a step)."""
  t = Tensor(W0.copy())
  opt = optim.LAMB([t])
  for p in opt.m + opt.v + [opt.b1_t, opt.b2_t]: to_(p, "CPU")
  t.sum().backward()
  opt.step()
  assert t.device == "CPU" and opt.m[0].device == "CPU"
  np.testing.assert_allclose(opt.m[0].numpy(), np.full((3, 4), 0.1), rtol=1e-6)
