"""Launch groups: small independent kernels that are ready together run as one program (one launch)."""
from __future__ import annotations
import numpy as np
import pytest
from petagrad import Tensor, GlobalCounters, nn
from petagrad.helpers import Context
from petagrad.engine.jit import TinyJit
from petagrad.nn._inplace import write   # a lazy in-place write (Tensor.assign realizes at once)
from petagrad.device import Device

@pytest.fixture(autouse=True)
def _launch_groups_only(request):
  """Launch groups are a CPU-style feature: a GPU-style device (no barrier between kernels of one launch) runs each
  kernel alone (test/backend/test_gpu_devices.py checks that)."""
  if "device" in request.fixturenames and not Device[request.getfixturevalue("device")].renderer.launch_groups:
    pytest.skip("this device runs one kernel per launch")

SHAPES = [(16, 8), (8,), (4, 3, 2), (1,), (32, 5)]

def launches(*ts: Tensor) -> tuple[int, int]:
  GlobalCounters.reset()
  Tensor.realize_all(*ts)
  return GlobalCounters.kernel_count, GlobalCounters.launch_count

def _train(make_opt, steps: int, group_max: int) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
  rng = np.random.default_rng(0)
  with Context(GROUP_MAX=group_max):
    ps = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in SHAPES]
    opt = make_opt(ps)
    counts = []
    for _ in range(steps):
      for p in ps: p.grad = Tensor(rng.standard_normal(p.shape).astype(np.float32)).realize()
      GlobalCounters.reset()
      opt.step()
      counts.append((GlobalCounters.kernel_count, GlobalCounters.launch_count))
    return [p.numpy() for p in ps], counts

@pytest.mark.parametrize("name,make", [
  ("sgd", lambda ps: nn.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
  ("adam", lambda ps: nn.optim.Adam(ps, lr=0.01)),
  ("adamw", lambda ps: nn.optim.AdamW(ps, lr=0.01, weight_decay=0.1)),
  ("lamb", lambda ps: nn.optim.LAMB(ps, lr=0.01)),
  ("lars", lambda ps: nn.optim.LARS(ps, lr=0.01, momentum=0.9))])
def test_optimizer_step_is_a_few_launches(device, name, make):
  grouped, counts = _train(make, 3, 64)
  alone, counts_alone = _train(make, 3, 1)
  for a, b in zip(grouped, alone): np.testing.assert_array_equal(a, b)   # the same kernels, only launched together
  kernels, launched = counts[-1]
  assert kernels == counts_alone[-1][0] and kernels >= 2 * len(SHAPES)   # every parameter and state tensor written...
  assert launched <= 3, f"{name}: {kernels} kernels in {launched} launches"   # ... by a few programs (LAMB: norms, then updates)
  assert counts_alone[-1][1] == kernels

def test_group_sees_writes_of_earlier_kernels(device):
  # one realize: a kernel reading w's old value, the in-place write of w, and two kernels reading its new value
  w = Tensor([1.0, 2.0, 3.0]).realize()
  old = w * 10
  write(w, w + 1)
  new = w * 2
  flipped = w.flip(0) + 0
  kernels, launched = launches(old, w, new, flipped)
  assert (kernels, launched) == (4, 1)
  np.testing.assert_array_equal(old.numpy(), [10, 20, 30])
  np.testing.assert_array_equal(w.numpy(), [2, 3, 4])
  np.testing.assert_array_equal(new.numpy(), [4, 6, 8])
  np.testing.assert_array_equal(flipped.numpy(), [4, 3, 2])

def test_group_size_is_capped(device):
  xs = [Tensor.full((3,), float(i)).contiguous().realize() for i in range(10)]
  for x in xs: write(x, x * 2)
  with Context(GROUP_MAX=4):
    assert launches(*xs) == (10, 3)
  assert [x.numpy()[0] for x in xs] == [2.0 * i for i in range(10)]

def test_big_reductions_launch_alone(device):
  n = 300 if device == "PYTHON" else 1024   # over GROUP_REDUCE_WORK (65536) elements each
  a, b = Tensor.rand(n, n).realize(), Tensor.rand(n, n).realize()
  sa, sb = a.sum(), b.sum()
  assert launches(sa, sb) == (2, 2)
  small = [Tensor.rand(8, 8).realize() for _ in range(3)]
  sums = [s.sum() for s in small]
  assert launches(*sums) == (3, 1)
  for s, x in zip(sums, small): np.testing.assert_allclose(s.numpy(), x.numpy().sum(), rtol=1e-5)

def test_big_chains_read_at_other_elements_launch_apart(device, monkeypatch):
  # a big kernel reading a group member at other elements (a sort's stage reading the last one through a shuffle)
  # starts the next group: it could not share a loop nest, and a chain of them would make each group another program
  import petagrad.schedule.schedule as S
  monkeypatch.setattr(S, "GROUP_CHAIN_WORK", 8)
  def chain(n: int, view) -> tuple[list[Tensor], tuple[int, int]]:
    x = Tensor.arange(n, dtype="float32").realize()
    a = (x + 1).contiguous()
    b = (view(a) * 2).contiguous()
    c = view(b) - 1
    return [a, b, c], launches(a, b, c)
  (a, b, c), counts = chain(16, lambda t: t.flip(0))
  assert counts == (3, 3)
  np.testing.assert_array_equal(c.numpy(), (np.arange(16) + 1) * 2 - 1)
  assert chain(16, lambda t: t)[1] == (3, 1)            # read at the same element: one group (one loop nest)
  assert chain(4, lambda t: t.flip(0))[1] == (3, 1)     # small kernels: one group whatever they read

def test_grouped_step_replays_in_jit(device):
  rng = np.random.default_rng(1)
  data = [(rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)) for _ in range(5)]
  def run(jit: bool) -> list[np.ndarray]:
    Tensor.manual_seed(3)
    l1, l2 = nn.Linear(6, 5), nn.Linear(5, 2)
    opt = nn.optim.Adam(nn.state.get_parameters([l1, l2]), lr=0.05)
    def step(x, y):
      opt.zero_grad()
      loss = ((l2(l1(x).relu()) - y) ** 2).mean()
      loss.backward()
      opt.step()
      return loss
    f = TinyJit(step) if jit else step
    for x, y in data: f(Tensor(x), Tensor(y))
    return [p.numpy() for p in nn.state.get_parameters([l1, l2])]
  for a, b in zip(run(True), run(False)): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

def _launched(*ts: Tensor) -> list:
  from petagrad.engine.realize import capture_hooks
  seen: list = []
  capture_hooks.append(seen.append)
  try: Tensor.realize_all(*ts)
  finally: capture_hooks.remove(seen.append)
  return seen

def test_adam_update_of_a_parameter_is_one_loop_nest(device):
  # m, v and the parameter (which reads the new m and v) in one loop: each element of p, g, m, v is loaded once
  rng = np.random.default_rng(2)
  ps = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in SHAPES]
  opt = nn.optim.Adam(ps, lr=0.01)
  for _ in range(2):
    for p in ps: p.grad = Tensor(rng.standard_normal(p.shape).astype(np.float32)).realize()
    launched = _launched(*opt.schedule_step())
  (ei,) = launched
  nests = len(ei.kernel.opts)   # one list of applied optimizations per loop nest
  assert len(ei.writes) == 3 * len(SHAPES) + 1 + 1   # p, m, v per parameter, the step counter, the bias corrections
  assert nests == len(SHAPES) + 2, nests

@pytest.mark.parametrize("reader", ["same", "flipped"])
def test_loop_nest_merge_keeps_reads_of_old_values(device, reader):
  # a kernel reading w's old value and the write of w: one loop nest only when the read is at the written element
  w = Tensor([1.0, 2.0, 3.0, 4.0]).realize()
  old = (w if reader == "same" else w.flip(0)) * 10
  write(w, w + 1)
  new = w * 2
  (ei,) = _launched(old, w, new)
  assert len(ei.kernel.opts) == (1 if reader == "same" else 2)
  np.testing.assert_array_equal(old.numpy(), [10, 20, 30, 40] if reader == "same" else [40, 30, 20, 10])
  np.testing.assert_array_equal(w.numpy(), [2, 3, 4, 5])
  np.testing.assert_array_equal(new.numpy(), [4, 6, 8, 10])

def test_repeated_graph_runs_its_launch_plan(device, monkeypatch):
  # the second time a graph structure is realized, its launches run from the plan: no lowering, no program lookup
  import petagrad.engine.realize as R
  calls = []
  orig = R._launches
  monkeypatch.setattr(R, "_launches", lambda items: calls.append(len(items)) or orig(items))
  xs = [Tensor(np.arange(6, dtype=np.float32) * (i + 1)).realize() for i in range(3)]
  w = Tensor.zeros(6).contiguous().realize()
  calls.clear()
  outs = []
  for x in xs:
    y = (x * 2 + 1).sum()
    write(w, w + x)
    Tensor.realize_all(y, w)
    outs.append((y.item(), w.numpy().copy()))
  assert len(calls) == 1, calls
  for i, (y, wv) in enumerate(outs):
    x = np.arange(6, dtype=np.float32)
    assert y == ((x * (i + 1)) * 2 + 1).sum()
    np.testing.assert_array_equal(wv, x * sum(range(1, i + 2)))

def test_group_member_whose_input_simplified_away():
  # `m.where(x, x)` simplifies to x: m's buffer is never read, and must not take a parameter slot that the group
  # binds to another kernel's buffer (it once wrote -x into m's memory and left b unwritten)
  x = Tensor(np.arange(2048, dtype=np.float32).reshape(64, 32)).realize()
  m = Tensor(np.zeros((1, 32), bool)).realize()
  b, c = -x, m.expand(64, 32).where(x, x)
  Tensor.realize_all(c, b)
  np.testing.assert_array_equal(b.numpy(), -np.arange(2048, dtype=np.float32).reshape(64, 32))
  np.testing.assert_array_equal(c.numpy(), np.arange(2048, dtype=np.float32).reshape(64, 32))
  assert not m.numpy().any()

def test_group_int_add_of_zero_product():
  xi = Tensor(np.arange(12, dtype=np.int32).reshape(3, 4)).realize()
  y = Tensor(np.ones((3, 4), np.int32)).realize()
  a, b = xi + y * 0, xi * 2
  Tensor.realize_all(a, b)
  np.testing.assert_array_equal(a.numpy(), np.arange(12).reshape(3, 4))
  np.testing.assert_array_equal(b.numpy(), np.arange(12).reshape(3, 4) * 2)
  np.testing.assert_array_equal(y.numpy(), np.ones((3, 4)))
