"""Optimizers, schedulers, gradient clipping and loss scaling vs torch.optim on a small problem."""
from __future__ import annotations
import math
import numpy as np
import pytest
import torch
from petagrad import Tensor, GlobalCounters, dtypes
from petagrad.nn import optim
from petagrad.engine.jit import TinyJit

RNG = np.random.default_rng(0)
W0, B0 = RNG.standard_normal((4, 3)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
X, Y = RNG.standard_normal((6, 4)).astype(np.float32), RNG.standard_normal((6, 3)).astype(np.float32)

def pg_loss(W, b, x, y): return ((x @ W + b).tanh() - y).square().mean()

def pg_step(opt, W, b):
  """One training step of pg_loss as a function of (x, y): loss, gradients and update in one realize."""
  def step(x, y):
    opt.zero_grad()
    loss = pg_loss(W, b, x, y)
    loss.backward()
    Tensor.realize_all(loss, *opt.schedule_step())
    return loss
  return step

def run_pg(make_opt, steps=10, make_sched=None, clip=None):
  W, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
  x, y = Tensor(X), Tensor(Y)
  opt = make_opt([W, b])
  sched = make_sched(opt) if make_sched else None
  losses = []
  for _ in range(steps):
    opt.zero_grad()
    loss = pg_loss(W, b, x, y)
    loss.backward()
    if clip is not None: optim.clip_grad_norm_([W, b], clip)
    Tensor.realize_all(loss, *opt.schedule_step())
    losses.append(loss.item())
    if sched: sched.step()
  return W.numpy(), b.numpy(), losses

def run_torch(make_opt, steps=10, make_sched=None, clip=None):
  W, b = torch.tensor(W0.copy(), requires_grad=True), torch.tensor(B0.copy(), requires_grad=True)
  x, y = torch.tensor(X), torch.tensor(Y)
  opt = make_opt([W, b])
  sched = make_sched(opt) if make_sched else None
  losses = []
  for _ in range(steps):
    opt.zero_grad()
    loss = pg_loss(W, b, x, y)
    loss.backward()
    if clip is not None: torch.nn.utils.clip_grad_norm_([W, b], clip)
    opt.step()
    losses.append(loss.item())
    if sched: sched.step()
  return W.detach().numpy(), b.detach().numpy(), losses

def check(a, b, rtol=3e-6, atol=3e-7):
  for u, v in zip(a[:2], b[:2]): np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)
  np.testing.assert_allclose(a[2], b[2], rtol=rtol, atol=atol)

CASES = {
  "sgd": (lambda p: optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
  "sgd_momentum_wd_damp": (lambda p: optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
                           lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
  "sgd_nesterov_maximize": (lambda p: optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, maximize=True),
                            lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.8, nesterov=True, maximize=True)),
  "adam": (lambda p: optim.Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
  "adam_wd_amsgrad": (lambda p: optim.Adam(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True),
                      lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
  "adamw": (lambda p: optim.AdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01)),
  "adamw_maximize": (lambda p: optim.AdamW(p, lr=0.02, weight_decay=0.1, maximize=True, eps=1e-6),
                     lambda p: torch.optim.AdamW(p, lr=0.02, weight_decay=0.1, maximize=True, eps=1e-6)),
}

@pytest.mark.parametrize("name", list(CASES))
def test_optimizer_vs_torch(name):
  mk_pg, mk_torch = CASES[name]
  check(run_pg(mk_pg), run_torch(mk_torch))

def test_param_groups_vs_torch():
  mk_pg = lambda p: optim.SGD([{"params": [p[0]], "lr": 0.2}, {"params": [p[1]], "momentum": 0.5}], lr=0.05, momentum=0.9)
  mk_torch = lambda p: torch.optim.SGD([{"params": [p[0]], "lr": 0.2}, {"params": [p[1]], "momentum": 0.5}], lr=0.05, momentum=0.9)
  check(run_pg(mk_pg), run_torch(mk_torch))
  a = optim.Adam([{"params": [Tensor.ones(2, requires_grad=True)]}, {"params": [Tensor.ones(2, requires_grad=True)], "lr": 0.5}], lr=0.1)
  assert [g["lr"].item() for g in a.param_groups] == pytest.approx([0.1, 0.5])
  with pytest.raises(ValueError, match="more than one"):
    t = Tensor.ones(2, requires_grad=True)
    optim.SGD([{"params": [t]}, {"params": [t]}])

# ---------------------------------------------------------------------- LAMB and LARS: torch references

class TorchLAMB(torch.optim.Optimizer):
  def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, adam=False):
    super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adam=adam))
  @torch.no_grad()
  def step(self):
    for g in self.param_groups:
      b1, b2 = g["betas"]
      for p in g["params"]:
        st = self.state[p]
        if not st: st["t"], st["m"], st["v"] = 0, torch.zeros_like(p), torch.zeros_like(p)
        st["t"] += 1
        st["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
        st["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
        up = (st["m"] / (1 - b1 ** st["t"])) / ((st["v"] / (1 - b2 ** st["t"])).sqrt() + g["eps"]) + g["weight_decay"] * p
        r = 1.0
        if not g["adam"]:
          r1, r2 = p.norm(), up.norm()
          r = (r1 / r2).item() if r1 > 0 and r2 > 0 else 1.0
        p.sub_(g["lr"] * r * up)

class TorchLARS(torch.optim.Optimizer):
  def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, nesterov=False, trust_coefficient=0.001):
    super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov, tc=trust_coefficient))
  @torch.no_grad()
  def step(self):
    for g in self.param_groups:
      for p in g["params"]:
        r1, r2 = p.norm(), p.grad.norm()
        r = g["tc"] * r1 / (r2 + g["weight_decay"] * r1) if r1 > 0 and r2 > 0 and g["tc"] else 1.0   # tc=0: plain SGD
        d = (p.grad + g["weight_decay"] * p) * r
        st = self.state[p]
        if "b" not in st: st["b"] = torch.zeros_like(p)
        st["b"].mul_(g["momentum"]).add_(d)
        d = d + g["momentum"] * st["b"] if g["nesterov"] else st["b"]
        p.sub_(g["lr"] * d)

@pytest.mark.parametrize("kw", [{}, {"weight_decay": 0.1}, {"adam": True}])
def test_lamb_vs_reference(kw):
  check(run_pg(lambda p: optim.LAMB(p, lr=0.05, **kw)), run_torch(lambda p: TorchLAMB(p, lr=0.05, **kw)), rtol=5e-6)

@pytest.mark.parametrize("lr,kw", [(2.0, {}), (2.0, {"weight_decay": 0.01, "nesterov": True}), (0.05, {"trust_coefficient": 0.0})])
def test_lars_vs_reference(lr, kw):
  check(run_pg(lambda p: optim.LARS(p, lr=lr, **kw)), run_torch(lambda p: TorchLARS(p, lr=lr, **kw)), rtol=5e-6)

# ---------------------------------------------------------------------- how a step runs

def test_step_is_one_realize(monkeypatch):
  W, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
  opt = optim.Adam([W, b], lr=0.01)
  pg_loss(W, b, Tensor(X), Tensor(Y)).backward()
  calls = []
  orig = Tensor.realize_all
  monkeypatch.setattr(Tensor, "realize_all", staticmethod(lambda *ts: (calls.append(len(ts)), orig(*ts))[1]))
  opt.step()
  assert len(calls) == 1, f"step realized {len(calls)} times"
  assert calls[0] >= 2 + 2 + 4   # 2 grads, 2 params, 2x(exp_avg, exp_avg_sq), the step counter

@pytest.mark.parametrize("make,per_elem", [(lambda p: optim.SGD(p, lr=0.1, momentum=0.9), 6), (lambda p: optim.Adam(p), 20),
                                           (lambda p: optim.AdamW(p), 24), (lambda p: optim.LAMB(p), 45)])
def test_update_cost_per_element(make, per_elem):
  # the per-group scalars (Adam's bias corrections: expm1 of step * log(beta)) are computed once in a tiny kernel,
  # not in every element of the update kernels (that made Adam's update ~10x slower than its memory traffic)
  w = Tensor.randn(128, 128, requires_grad=True).realize()
  opt = make([w])
  for _ in range(3):
    w.grad = Tensor.randn(128, 128).realize()
    GlobalCounters.reset()
    opt.step()
  assert GlobalCounters.global_ops / w.numel() < per_elem
  assert GlobalCounters.kernel_count <= 8

def test_grads_are_detached_and_read_before_overwrite():
  # y = w1 * w2: each gradient reads the other parameter, which the step overwrites in the same schedule
  a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
  opt = optim.SGD([a, b], lr=0.1)
  (a * b).sum().backward()
  opt.step()
  np.testing.assert_allclose(a.numpy(), [1 - 0.3, 2 - 0.4], rtol=1e-6)
  np.testing.assert_allclose(b.numpy(), [3 - 0.1, 4 - 0.2], rtol=1e-6)
  assert a.requires_grad and b.requires_grad

def test_fixed_batch_loss_keeps_changing():
  # the forward graph is identical every step: the step must not leave a stale cached result behind
  w = Tensor([1.0, 2.0], requires_grad=True)
  x = Tensor([3.0, 4.0])
  opt = optim.SGD([w], lr=0.01)
  losses = []
  for _ in range(3):
    opt.zero_grad()
    loss = (x * w).sum()
    loss.backward()
    losses.append(loss.realize().item())
    opt.step()
  assert losses == pytest.approx([11.0, 11.0 - 0.25, 11.0 - 0.5], rel=1e-6)

def test_zero_grad_and_params_without_grad():
  w, frozen = Tensor([1.0], requires_grad=True), Tensor([5.0], requires_grad=True)
  buf = Tensor([0.0]); buf.requires_grad = False
  opt = optim.SGD([w, frozen, buf], lr=0.5)
  assert len(opt.params) == 2   # requires_grad=False tensors are not optimized
  (w * 2).sum().backward()
  opt.step()
  assert w.item() == pytest.approx(0.0) and frozen.item() == 5.0
  opt.zero_grad()
  assert w.grad is None

def test_step_in_jit_matches_eager():
  def train(jit: bool):
    W, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
    opt = optim.AdamW([W, b], lr=0.01)
    sched = optim.StepLR(opt, step_size=2, gamma=0.5)
    step = pg_step(opt, W, b)
    f = TinyJit(step) if jit else step
    losses = []
    for _ in range(6):
      losses.append(f(Tensor(X), Tensor(Y)).item())
      sched.step()
    return W.numpy(), b.numpy(), losses
  eager, jitted = train(False), train(True)
  check(jitted, eager, rtol=1e-6)
  check(eager, run_torch(lambda p: torch.optim.AdamW(p, lr=0.01), steps=6, make_sched=lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.5)))

def test_lr_change_does_not_recompile():
  W, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
  opt = optim.SGD([W, b], lr=0.1, momentum=0.9)
  sched = optim.CosineAnnealingLR(opt, T_max=10)
  x, y = Tensor(X), Tensor(Y)
  for i in range(4):
    if i == 2: c0 = GlobalCounters.compile_count
    opt.zero_grad()
    pg_loss(W, b, x, y).backward()
    opt.step()
    sched.step()
  assert GlobalCounters.compile_count == c0
  assert opt.lr.item() == pytest.approx(sched.get_last_lr()[0], rel=1e-6)

def test_python_float_lr():
  w = Tensor([1.0], requires_grad=True)
  opt = optim.SGD([w], lr=0.1)
  opt.param_groups[0]["lr"] = 0.5
  sched = optim.StepLR(opt, step_size=1, gamma=0.5)
  (w * 2).sum().backward(); opt.step(); sched.step()
  assert w.item() == pytest.approx(0.0) and opt.param_groups[0]["lr"] == 0.25

# ---------------------------------------------------------------------- schedulers vs torch

def _sched_pairs():
  return {
    "step": (lambda o: optim.StepLR(o, 3, 0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, 3, 0.5)),
    "multistep": (lambda o: optim.MultiStepLR(o, [2, 5, 5, 9], 0.3), lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [2, 5, 5, 9], 0.3)),
    "cosine": (lambda o: optim.CosineAnnealingLR(o, 7, eta_min=0.01), lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 7, eta_min=0.01)),
    "linear": (lambda o: optim.LinearLR(o, 0.25, 1.0, 4), lambda o: torch.optim.lr_scheduler.LinearLR(o, 0.25, 1.0, 4)),
    "exponential": (lambda o: optim.ExponentialLR(o, 0.9), lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.9)),
    "onecycle": (lambda o: optim.OneCycleLR(o, max_lr=1.0, total_steps=12),
                 lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=12, cycle_momentum=False)),
    "onecycle_3phase_linear": (lambda o: optim.OneCycleLR(o, max_lr=[1.0, 2.0], total_steps=12, three_phase=True, anneal_strategy="linear",
                                                          pct_start=0.25),
                               lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=[1.0, 2.0], total_steps=12, three_phase=True,
                                                                             anneal_strategy="linear", pct_start=0.25, cycle_momentum=False)),
  }

@pytest.mark.parametrize("name", list(_sched_pairs()))
def test_scheduler_vs_torch(name):
  mk_pg, mk_torch = _sched_pairs()[name]
  popt = optim.SGD([{"params": [Tensor.ones(2, requires_grad=True)]}, {"params": [Tensor.ones(2, requires_grad=True)], "lr": 0.3}], lr=0.1)
  topt = torch.optim.SGD([{"params": [torch.ones(2, requires_grad=True)]}, {"params": [torch.ones(2, requires_grad=True)], "lr": 0.3}], lr=0.1)
  ps, ts = mk_pg(popt), mk_torch(topt)
  for _ in range(11):
    np.testing.assert_allclose(ps.get_last_lr(), ts.get_last_lr(), rtol=1e-12)
    np.testing.assert_allclose([g["lr"].item() for g in popt.param_groups], [g["lr"] for g in topt.param_groups], rtol=1e-6)
    topt.step(); ts.step(); ps.step()

def test_linear_warmup_then_cosine():
  opt = optim.SGD([Tensor.ones(2, requires_grad=True)], lr=0.8)
  s = optim.LinearWarmup(opt, 4, after=optim.CosineAnnealingLR(opt, T_max=6))
  lrs = []
  for _ in range(10):
    lrs.append(s.get_last_lr()[0]); s.step()
  expected = [0.8 * e / 4 for e in range(4)] + [0.8 * (1 + math.cos(math.pi * e / 6)) / 2 for e in range(6)]
  np.testing.assert_allclose(lrs, expected, rtol=1e-12)

def test_onecycle_past_total_raises():
  s = optim.OneCycleLR(optim.SGD([Tensor.ones(1, requires_grad=True)], lr=0.1), max_lr=1.0, total_steps=2)
  s.step(); s.step()
  with pytest.raises(ValueError, match="total_steps"): s.step()

# ---------------------------------------------------------------------- gradient clipping

@pytest.mark.parametrize("max_norm,norm_type", [(0.05, 2.0), (100.0, 2.0), (0.05, math.inf), (0.1, 1.0)])
def test_clip_grad_norm_vs_torch(max_norm, norm_type):
  ws = [RNG.standard_normal(s).astype(np.float32) for s in [(3, 4), (5,), (2, 2, 2)]]
  pts = [Tensor(w, requires_grad=True) for w in ws]
  tts = [torch.tensor(w, requires_grad=True) for w in ws]
  sum((t * t * (i + 1)).sum() for i, t in enumerate(pts)).backward()
  sum((t * t * (i + 1)).sum() for i, t in enumerate(tts)).backward()
  GlobalCounters.reset()
  total = optim.clip_grad_norm_(pts, max_norm, norm_type).realize()
  assert GlobalCounters.kernel_count == 1   # one fused reduction over every gradient
  ttotal = torch.nn.utils.clip_grad_norm_(tts, max_norm, norm_type)
  np.testing.assert_allclose(total.item(), ttotal.item(), rtol=1e-6)
  for p, t in zip(pts, tts): np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-6, atol=1e-7)

def test_clip_then_step_vs_torch():
  check(run_pg(lambda p: optim.SGD(p, lr=0.5, momentum=0.9), clip=0.1), run_torch(lambda p: torch.optim.SGD(p, lr=0.5, momentum=0.9), clip=0.1))

# ---------------------------------------------------------------------- mixed precision

@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_master_weights(dtype):
  """Half params: the optimizer updates float32 master weights and writes their rounded value."""
  w32 = RNG.standard_normal(8).astype(np.float32)
  g = RNG.standard_normal(8).astype(np.float32) * 1e-3
  p = Tensor(w32).cast(dtype).contiguous().realize()
  p.requires_grad = True
  opt = optim.SGD([p], lr=0.1, momentum=0.9)
  master = torch.tensor(p.float().numpy())           # the master starts from the half value
  tw = master.clone().requires_grad_(True)
  topt = torch.optim.SGD([tw], lr=0.1, momentum=0.9)
  for _ in range(5):
    p.grad = Tensor(g).cast(dtype)
    opt.step()
    tw.grad = torch.tensor(Tensor(g).cast(dtype).float().numpy())
    topt.step()
  assert p.dtype == dtypes.__dict__[dtype]
  np.testing.assert_allclose(opt.state[p]["master"].numpy(), tw.detach().numpy(), rtol=1e-6)
  np.testing.assert_allclose(p.float().numpy(), tw.detach().to(getattr(torch, dtype)).float().numpy())
  # tiny updates accumulate in the master even when they are below half precision's resolution
  assert not np.array_equal(opt.state[p]["master"].numpy(), Tensor(w32).cast(dtype).float().numpy())

def test_grad_scaler_vs_torch():
  """Same scale/growth/backoff sequence and same skipped steps as torch.amp.GradScaler."""
  w0 = RNG.standard_normal(4).astype(np.float32)
  p = Tensor(w0.copy(), requires_grad=True)
  tp = torch.tensor(w0.copy(), requires_grad=True)
  opt, topt = optim.SGD([p], lr=0.1), torch.optim.SGD([tp], lr=0.1)
  sc = optim.GradScaler(init_scale=256.0, growth_interval=2)
  tsc = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2)
  x = RNG.standard_normal(4).astype(np.float32)
  scales = []
  for i in range(7):
    bad = i in (2, 5)
    xi = x.copy()
    if bad: xi[1] = np.inf
    opt.zero_grad(); topt.zero_grad()
    sc.scale((p * Tensor(xi)).sum()).backward()
    tsc.scale((tp * torch.tensor(xi)).sum()).backward()
    if i == 3: found = sc.unscale_(opt); tsc.unscale_(topt); assert found.item() is False
    sc.step(opt); tsc.step(topt)
    sc.update(); tsc.update()
    assert sc.get_scale() == tsc.get_scale(), f"step {i}"
    scales.append(sc.get_scale())
    np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-6)
  assert scales == [256.0, 512.0, 256.0, 256.0, 512.0, 256.0, 256.0]

def test_grad_scaler_fp16_training_in_jit():
  """float16 params + float32 master weights + loss scaling, eager and under TinyJit: same losses, scales and
  weights, including a step skipped on overflow (the scale grows until the float16 gradients overflow)."""
  def run(jit: bool):
    w = Tensor(np.ones((4, 1), np.float32)).half().contiguous().realize()
    w.requires_grad = True
    x = Tensor(np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)).half().realize()
    opt, sc = optim.SGD([w], lr=0.1), optim.GradScaler(init_scale=2.0 ** 14, growth_interval=2)
    def step(x):
      opt.zero_grad()
      loss = ((x @ w).float() - 1).square().mean()
      sc.scale(loss).backward()
      loss.realize()
      sc.step(opt)
      sc.update()
      return loss
    f = TinyJit(step) if jit else step
    losses = [f(x).item() for _ in range(8)]
    assert w.dtype == dtypes.float16 and opt.state[w]["master"].dtype == dtypes.float32
    return losses, sc.get_scale(), w.float().numpy()
  (le, se, we), (lj, sj, wj) = run(False), run(True)
  assert le == lj and se == sj and np.array_equal(we, wj)
  assert le[0] > le[5] and le[6] == le[7]   # trains; the 7th step overflowed (scale 2**17) and was skipped
  assert se == 2.0 ** 16

# ---------------------------------------------------------------------- state dicts (optimizers, schedulers)

from petagrad.nn.state import flatten_state, unflatten_state, safe_save, safe_load

SD_CASES = {
  "sgd_momentum": lambda p: optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
  "adam_amsgrad": lambda p: optim.Adam(p, lr=0.01, amsgrad=True),
  "adamw": lambda p: optim.AdamW(p, lr=0.01),
  "lamb": lambda p: optim.LAMB(p, lr=0.01),
  "lars": lambda p: optim.LARS(p, lr=0.5),
  "groups": lambda p: optim.Adam([{"params": [p[0]], "lr": 0.02}, {"params": [p[1]], "betas": (0.8, 0.9)}], lr=0.01),
}

def _steps(W, b, opt, n, sched=None):
  x, y, step = Tensor(X), Tensor(Y), pg_step(opt, W, b)
  for _ in range(n):
    step(x, y)
    if sched is not None: sched.step()

@pytest.mark.parametrize("name", list(SD_CASES))
def test_state_dict_resume_is_exact(name, tmp_path):
  """5 steps, save (optimizer state flattened into safetensors), load into a new optimizer before its first step,
  5 more steps == 10 steps straight."""
  mk = SD_CASES[name]
  W, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
  opt = mk([W, b])
  _steps(W, b, opt, 10)
  W1, b1 = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
  o1 = mk([W1, b1])
  assert o1.state_dict()["state"] == {}   # before the first step: no state, groups only
  _steps(W1, b1, o1, 5)
  tensors, spec = flatten_state(o1.state_dict(), "optim")
  safe_save({"W": W1, "b": b1, **tensors}, str(tmp_path / "ck.safetensors"), metadata={"optim": spec})
  f = safe_load(str(tmp_path / "ck.safetensors"))
  W2, b2 = Tensor(f["W"].numpy(), requires_grad=True), Tensor(f["b"].numpy(), requires_grad=True)
  o2 = mk([W2, b2])
  o2.load_state_dict(unflatten_state(f, f.metadata["optim"]))
  assert [g["lr"].item() for g in o2.param_groups] == [g["lr"].item() for g in o1.param_groups]
  _steps(W2, b2, o2, 5)
  np.testing.assert_array_equal(W2.numpy(), W.numpy())
  np.testing.assert_array_equal(b2.numpy(), b.numpy())

def test_state_dict_format_like_torch():
  W, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
  opt = optim.Adam([{"params": [W]}, {"params": [b], "lr": 0.5}], lr=0.01, weight_decay=0.1)
  tW, tb = torch.tensor(W0.copy(), requires_grad=True), torch.tensor(B0.copy(), requires_grad=True)
  topt = torch.optim.Adam([{"params": [tW]}, {"params": [tb], "lr": 0.5}], lr=0.01, weight_decay=0.1)
  _steps(W, b, opt, 2)
  pg_loss(tW, tb, torch.tensor(X), torch.tensor(Y)).backward(); topt.step()
  sd, tsd = opt.state_dict(), topt.state_dict()
  assert sorted(sd["state"]) == sorted(tsd["state"]) == [0, 1]
  assert sorted(sd["state"][0]) == sorted(tsd["state"][0]) == ["exp_avg", "exp_avg_sq", "step"]
  assert sd["state"][1]["step"].item() == 2
  for g, tg in zip(sd["param_groups"], tsd["param_groups"]):
    assert g["params"] == tg["params"] and g["lr"] == tg["lr"] and tuple(g["betas"]) == tuple(tg["betas"]) and g["weight_decay"] == tg["weight_decay"]

def test_load_torch_optimizer_state():
  """torch's Adam state (torch tensors, float step) continues in petagrad exactly like in torch."""
  tW, tb = torch.tensor(W0.copy(), requires_grad=True), torch.tensor(B0.copy(), requires_grad=True)
  topt = torch.optim.Adam([tW, tb], lr=0.01)
  x, y = torch.tensor(X), torch.tensor(Y)
  for _ in range(4):
    topt.zero_grad(); pg_loss(tW, tb, x, y).backward(); topt.step()
  W, b = Tensor(tW.detach().numpy().copy(), requires_grad=True), Tensor(tb.detach().numpy().copy(), requires_grad=True)
  opt = optim.Adam([W, b], lr=0.5)
  opt.load_state_dict(topt.state_dict())
  assert opt.param_groups[0]["step"].item() == 4 and opt.param_groups[0]["lr"].item() == pytest.approx(0.01)
  for _ in range(4):
    topt.zero_grad(); pg_loss(tW, tb, x, y).backward(); topt.step()
  _steps(W, b, opt, 4)
  np.testing.assert_allclose(W.numpy(), tW.detach().numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(b.numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-6)

def test_load_state_dict_in_place_under_jit():
  """Loading writes the existing state buffers in place, so a TinyJit that captured the step keeps using them."""
  def setup():
    W, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
    return W, b, optim.Adam([W, b], lr=0.01)
  W, b, opt = setup()
  x, y = Tensor(X).realize(), Tensor(Y).realize()
  step = TinyJit(pg_step(opt, W, b))
  for _ in range(3): step(x, y)
  saved = {"W": W.numpy(), "b": b.numpy()}
  saved_sd = {"state": {i: {k: v.numpy() for k, v in st.items()} for i, st in opt.state_dict()["state"].items()},
              "param_groups": opt.state_dict()["param_groups"]}
  for _ in range(3): step(x, y)
  after6 = W.numpy()
  W.assign(Tensor(saved["W"])); b.assign(Tensor(saved["b"]))
  opt.load_state_dict(saved_sd)   # back to step 3, then 3 replays again
  for _ in range(3): step(x, y)
  np.testing.assert_array_equal(W.numpy(), after6)

def test_load_state_dict_bad_input():
  W, b = Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)
  opt = optim.Adam([W, b], lr=0.01)
  _steps(W, b, opt, 1)
  sd = opt.state_dict()
  other = optim.Adam([Tensor(W0.copy(), requires_grad=True), Tensor(B0.copy(), requires_grad=True)], lr=0.01)
  with pytest.raises(TypeError, match="state.*param_groups"): other.load_state_dict({"W": W})
  with pytest.raises(ValueError, match="1 parameter groups"):
    optim.Adam([{"params": [W]}, {"params": [b]}]).load_state_dict(sd)
  with pytest.raises(ValueError, match="group 0 has 2 parameters in the state dict, 1 in the optimizer"):
    optim.Adam([Tensor(W0.copy(), requires_grad=True)]).load_state_dict(sd)
  bad = {"state": {**sd["state"], 1: {**sd["state"][1], "exp_avg": Tensor.zeros(5)}}, "param_groups": sd["param_groups"]}
  with pytest.raises(ValueError, match=r"'exp_avg' of parameter 1 has shape \(5,\), expected \(3,\)"): other.load_state_dict(bad)
  assert other.state == {}   # nothing was written
  with pytest.raises(ValueError, match=r"parameters \[7\]"):
    other.load_state_dict({"state": {**sd["state"], 7: {}}, "param_groups": sd["param_groups"]})
  tensors, spec = flatten_state(sd, "optim")
  with pytest.raises(ValueError, match="optim.state.0.exp_avg.*missing"):
    unflatten_state({k: v for k, v in tensors.items() if k != "optim.state.0.exp_avg"}, spec)
  with pytest.raises(ValueError, match="not valid JSON"): unflatten_state(tensors, spec[:-3])

@pytest.mark.parametrize("name", ["step", "onecycle", "warmup_cosine", "lambda"])
def test_scheduler_state_dict_resume(name):
  makers = {"step": lambda o: optim.StepLR(o, 3, 0.5), "onecycle": lambda o: optim.OneCycleLR(o, max_lr=1.0, total_steps=12),
            "warmup_cosine": lambda o: optim.LinearWarmup(o, 3, after=optim.CosineAnnealingLR(o, T_max=8)),
            "lambda": lambda o: optim.LambdaLR(o, lambda e: 1 / (1 + e))}
  def new():
    opt = optim.SGD([Tensor.ones(2, requires_grad=True)], lr=0.1, momentum=0.9)
    return opt, makers[name](opt)
  o1, s1 = new()
  lrs = []
  for _ in range(10): lrs.append(s1.get_last_lr()[0]); s1.step()
  o1, s1 = new()
  for _ in range(4): s1.step()
  osd, ssd = o1.state_dict(), s1.state_dict()
  import json
  ssd = json.loads(json.dumps(ssd))   # plain Python: it fits in safetensors metadata
  o2, s2 = new()
  o2.load_state_dict(osd); s2.load_state_dict(ssd)   # like torch: optimizer first (the lr), then the scheduler
  assert o2.param_groups[0]["lr"].item() == pytest.approx(lrs[4])
  got = []
  for _ in range(6): got.append(s2.get_last_lr()[0]); s2.step()
  np.testing.assert_allclose(got, lrs[4:], rtol=1e-12)
  with pytest.raises(TypeError, match="last_epoch"): s2.load_state_dict({"x": 1})

def test_params_sharing_a_buffer_are_split():
  p1 = Tensor.zeros(3).contiguous().realize()
  p2 = Tensor.zeros(3).contiguous().realize()   # an equal graph: the core may bind it to p1's buffer
  p3 = Tensor.zeros(3)                          # lazy
  opt = optim.SGD([p1, p2, p3], lr=1.0)
  assert len({id(p.uop.base.buffer) for p in (p1, p2, p3)}) == 3
  p1.grad = Tensor.ones(3)
  opt.step()
  assert p1.tolist() == [-1.0] * 3 and p2.tolist() == [0.0] * 3 and p3.tolist() == [0.0] * 3

def test_grad_scaler_state_dict_roundtrip_and_torch():
  sc = optim.GradScaler(init_scale=256.0, growth_interval=3)
  p = Tensor([1.0, 2.0], requires_grad=True)
  opt = optim.SGD([p], lr=0.1)
  for _ in range(2):
    opt.zero_grad(); sc.scale((p * p).sum()).backward(); sc.step(opt); sc.update()
  sd = sc.state_dict()
  assert sd["scale"] == 256.0 and sd["_growth_tracker"] == 2
  other = optim.GradScaler()
  other.load_state_dict(sd)
  assert other.get_scale() == 256.0 and other.get_growth_tracker() == 2 and other.growth_interval == 3
  tsc = torch.amp.GradScaler("cpu", init_scale=64.0, growth_interval=7)
  other.load_state_dict(tsc.state_dict())
  assert other.get_scale() == 64.0 and other.growth_interval == 7
  with pytest.raises(TypeError, match="scale"): other.load_state_dict({"x": 1})
