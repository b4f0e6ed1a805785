"""TinyJit: capture once, replay with new inputs, and refuse what cannot be replayed."""
from __future__ import annotations
import numpy as np
import pytest
from petagrad import Tensor, GlobalCounters
from petagrad.engine.jit import TinyJit, JitError
from petagrad.helpers import Context

def test_replay_matches_eager(device):
  @TinyJit
  def f(x, y): return (x @ y + 1).relu().sum(0)
  for _ in range(4):
    xn, yn = np.random.randn(3, 4).astype(np.float32), np.random.randn(4, 5).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(xn), Tensor(yn)).numpy(), np.maximum(xn @ yn + 1, 0).sum(0), rtol=1e-5, atol=1e-6)
  assert f.cnt == 4

def test_replay_runs_only_captured_kernels():
  @TinyJit
  def f(x): return (x * 2).sum() + x.max()
  x = Tensor.rand(16).realize()
  for _ in range(3): f(x)
  GlobalCounters.reset()
  f(x)
  assert GlobalCounters.launch_count == len(f.captured)

def test_cpu_replay_is_one_call(monkeypatch):
  # a CPU capture's launches run back to back in one C call (DeviceSpec.launch_list): each call's inputs and fresh
  # outputs are pointed at, results equal the one-by-one launches (DEBUG=2 times each launch: one by one)
  import petagrad.engine.realize as R
  from petagrad.helpers import SANITIZE
  from petagrad.runtime.ops_cpu import _queued
  ws = [Tensor.rand(8, 8).realize() for _ in range(3)]
  @TinyJit
  def f(x):
    for w in ws: x = (x @ w).relu() + 1
    return x.sum(1), x
  def ref(xn):
    for w in ws: xn = np.maximum(xn @ w.numpy(), 0) + 1
    return xn.sum(1), xn
  with Context(GROUP_MAX=1):
    outs = []
    for i in range(4):
      xn = np.random.default_rng(i).standard_normal((2, 8)).astype(np.float32)
      outs.append((xn, f(Tensor(xn))))
  # (one by one where the device cannot: bounds-checked kernels, SANITIZE=1; launches queued per device, several CPU
  # devices opened)
  one_call = not SANITIZE and not _queued()
  assert (f.launch_list is not None) == (not SANITIZE) and len(f.captured) >= 4
  runs = []
  monkeypatch.setattr(R.ExecItem, "run", lambda self: runs.append(self) or 0.0)
  GlobalCounters.reset()
  xn = np.ones((2, 8), np.float32)
  s, x = f(Tensor(xn))
  assert len(runs) == (0 if one_call else len(f.captured)) and GlobalCounters.launch_count == (len(f.captured) if one_call else 0)
  monkeypatch.undo()
  s, x = f(Tensor(xn))
  for xi, (si, yi) in outs + [(xn, (s, x))]:   # (earlier results kept their own buffers)
    rs, rx = ref(xi)
    np.testing.assert_allclose(si.numpy(), rs, rtol=1e-5)
    np.testing.assert_allclose(yi.numpy(), rx, rtol=1e-5)
  runs.clear()
  monkeypatch.setattr(R.ExecItem, "run", lambda self: runs.append(self) or 0.0)
  with Context(DEBUG=2):
    f(Tensor(xn))
  assert len(runs) == len(f.captured)

def test_capture_plans_the_memory_of_its_intermediates():
  # the intermediates a call gives back early share memory in the capture (a buffer read last hands its memory to a
  # later one of the same size), so replays run as one launch list with nothing to free, at the eager call's memory
  from petagrad.helpers import SANITIZE
  w1, w2, w3 = [(Tensor.rand(*s) * 0.04 - 0.02).realize() for s in [(1024, 2048), (2048, 2048), (2048, 256)]]
  f = TinyJit(lambda x: (((x @ w1).relu() @ w2).relu() @ w2).relu().__matmul__(w3).sum(1))
  xs = [np.random.default_rng(i).standard_normal((8, 1024)).astype(np.float32) for i in range(6)]
  w1n, w2n, w3n = w1.numpy(), w2.numpy(), w3.numpy()
  want = [(np.maximum(np.maximum(np.maximum(x @ w1n, 0) @ w2n, 0) @ w2n, 0) @ w3n).sum(1) for x in xs]
  for i, x in enumerate(xs):
    with Context(DEBUG=2 if i == 3 else 0):   # (a replay launched one by one reads the same planned memory)
      np.testing.assert_allclose(f(Tensor(x)).numpy(), want[i], rtol=1e-4, atol=1e-5)
    if i == 3: other = (Tensor.ones(8, 2048) + 0).realize()   # (memory from the allocator's pool: not the capture's)
  np.testing.assert_equal(other.numpy(), np.ones((8, 2048), np.float32))
  assert not any(ei.frees for ei in f.captured) and (f.launch_list is not None) == (not SANITIZE)
  # three kernels write (8, 2048) intermediates; the third takes the memory of the first, which the second read last
  inter = {id(ei.bufs[w.out]) for ei in f.captured for w in ei.writes if ei.bufs[w.out].size == 8 * 2048}
  writers = sum(1 for ei in f.captured for w in ei.writes if ei.bufs[w.out].size == 8 * 2048)
  assert (writers, len(inter)) == (3, 2)

def test_shape_change_raises():
  f = TinyJit(lambda x: (x + 1).realize())
  for _ in range(3): f(Tensor.rand(4))
  with pytest.raises(JitError, match="shapes"):
    f(Tensor.rand(5))

def test_dtype_change_raises():
  f = TinyJit(lambda x: (x + 1).realize())
  for _ in range(3): f(Tensor.rand(4))
  with pytest.raises(JitError):
    f(Tensor.rand(4).cast("float64"))

def test_python_value_change_raises():
  f = TinyJit(lambda x, k: (x * k).realize())
  for _ in range(3): f(Tensor.rand(4), 2.0)
  with pytest.raises(JitError, match="non-tensor"):
    f(Tensor.rand(4), 3.0)

def test_item_inside_raises():
  f = TinyJit(lambda x: x.sum().item())
  with pytest.raises(JitError, match="Python"):
    f(Tensor.rand(3))

def test_random_advances_on_replay():
  f = TinyJit(lambda x: (x + Tensor.rand(8)).realize())
  outs = [f(Tensor.zeros(8)).numpy() for _ in range(5)]
  for a, b in zip(outs, outs[1:]): assert not np.allclose(a, b)

@pytest.mark.parametrize("group_max", [1, 64])
def test_random_replays_draw_what_eager_calls_draw(group_max):
  # two draws that kernels read in the other order (and one read by two kernels): replays must give every call the
  # numbers the same call draws eagerly
  def fn(x):
    a, b = Tensor.rand(6), Tensor.rand(4, 6)
    outs = [(x * b).sum(0) + a, (b * 2).sum(), a * 3]
    Tensor.realize_all(*outs)
    return outs
  with Context(GROUP_MAX=group_max):
    Tensor.manual_seed(5)
    eager = [[t.numpy() for t in fn(Tensor.ones(4, 6))] for _ in range(5)]
    Tensor.manual_seed(5)
    f = TinyJit(fn)
    jitted = [[t.numpy() for t in f(Tensor.ones(4, 6))] for _ in range(5)]
  for e, j in zip(eager, jitted):
    for a, b in zip(e, j): np.testing.assert_array_equal(a, b)

def test_assign_state_in_jit():
  w = Tensor.zeros(4).contiguous().realize()
  @TinyJit
  def step(x):
    w.assign(w + x)
    return w
  for i in range(5): step(Tensor.ones(4))
  np.testing.assert_allclose(w.numpy(), [5.0] * 4)

def test_training_step_in_jit():
  Tensor.manual_seed(1)
  w = Tensor.randn(4, 2, requires_grad=True).realize()
  x = Tensor.randn(8, 4).realize()
  y = Tensor.randn(8, 2).realize()
  @TinyJit
  def step(x, y):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    w.assign(w.detach() - 0.1 * w.grad)
    w.grad = None
    return loss
  losses = [step(x, y).item() for _ in range(6)]
  assert losses[-1] < losses[0]
  _wn, _xn, _yn = None, x.numpy(), y.numpy()

# ---------------------------------------------------------------- state the function changes without realizing it

def test_batchnorm_running_stats_update_on_replay():
  from petagrad import nn
  bn, ref = nn.BatchNorm2d(2), nn.BatchNorm2d(2)
  @TinyJit
  def f(x):
    with nn.train(): return bn(x).sum().realize()   # realizes only the output: the running stats are lazy writes
  for i in range(5):
    x = Tensor.ones(4, 2, 3, 3).contiguous() * (i + 1)
    f(x)
    with nn.train(): ref(x).realize()
  assert bn.num_batches_tracked.item() == 5
  np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(), rtol=1e-6)
  np.testing.assert_allclose(bn.running_mean.numpy(), [1.31441] * 2, rtol=1e-5)
  np.testing.assert_allclose(bn.running_var.numpy(), ref.running_var.numpy(), rtol=1e-6)

def test_lazy_assign_is_captured():
  from petagrad.uop.ops import Ops
  from petagrad.uop.uop import UOp
  w = Tensor.zeros(3).contiguous().realize()
  @TinyJit
  def f(x):
    w.uop = UOp(Ops.ASSIGN, w.dtype, (w.uop, (w + x).uop))   # a lazy in-place write nobody realizes
    return (x * 2).realize()
  for _ in range(6): f(Tensor.ones(3))
  np.testing.assert_allclose(w.numpy(), [6.0] * 3)

def test_rebound_tensor_is_written_in_place():
  s = Tensor.zeros(2, 2).contiguous().realize()
  @TinyJit
  def f(x):
    s.uop = (s + x).uop   # rebinding to a lazy value (not an assign): the JIT writes it into s's buffer
    return x.sum().realize()
  for i in range(5): f(Tensor.full((2, 2), float(i)))
  np.testing.assert_allclose(s.numpy(), np.full((2, 2), 10.0))

def test_rebound_to_a_new_buffer_is_copied_back():
  s = Tensor.zeros(4).contiguous().realize()
  @TinyJit
  def f(x):
    s.uop = (s + x).realize().uop   # realized into a new buffer: replays would read the old one forever
    return x.realize()
  for _ in range(5): f(Tensor.ones(4))
  np.testing.assert_allclose(s.numpy(), [5.0] * 4)

def test_new_lazy_tensor_kept_alive_is_realized():
  keep: dict = {}
  @TinyJit
  def f(x):
    keep["h"] = x * 3    # stored, never realized by the function
    return x.sum().realize()
  for i in range(4): f(Tensor.full((3,), float(i)))
  np.testing.assert_allclose(keep["h"].numpy(), [9.0] * 3)

def test_state_that_cannot_be_written_back_raises():
  s = Tensor.zeros(8).contiguous().realize()
  @TinyJit
  def f(x):
    s.uop = (s[1:] + 1).uop   # a new shape on every call: there is no buffer to write it into
    return x.realize()
  f(Tensor.ones(4))
  with pytest.raises(JitError, match="assign"):
    f(Tensor.ones(4))

def test_state_rebound_to_a_new_tensor_raises():
  class RNN:
    def __init__(self): self.h = Tensor.zeros(3).contiguous().realize()
  r = RNN()
  @TinyJit
  def f(x):
    r.h = (r.h + x).realize()   # a new Tensor object: a replay cannot rebind r.h, and would read the old buffer
    return r.h
  f(Tensor.ones(3))
  with pytest.raises(JitError, match="dropped"):
    f(Tensor.ones(3))

def test_inputs_and_outputs_of_previous_calls_are_fine():
  @TinyJit
  def f(x, h): return (h * 0.5 + x).realize()
  h = Tensor.zeros(2).contiguous().realize()
  for _ in range(5): h = f(Tensor.ones(2), h)   # the previous output comes back as an input
  np.testing.assert_allclose(h.numpy(), [1.9375] * 2)

def test_batchnorm_training_step_jit_matches_eager():
  """conv + BatchNorm + linear trained with Adam: 5 jitted steps == 5 eager steps (weights and running stats)."""
  from petagrad import nn
  from petagrad.nn import optim
  from petagrad.nn.state import get_state_dict
  def run(jit: bool):
    Tensor.manual_seed(3)
    conv, bn, fc = nn.Conv2d(1, 3, 3, stride=2), nn.BatchNorm2d(3), nn.Linear(3 * 3 * 3, 2)
    model = {"conv": conv, "bn": bn, "fc": fc}
    opt = optim.Adam([p for p in get_state_dict(model).values() if p.requires_grad], lr=0.01)
    def step(x, y):
      with nn.train():
        opt.zero_grad()
        loss = fc(bn(conv(x)).relu().flatten(1)).cross_entropy(y)
        loss.backward()
        Tensor.realize_all(loss, *opt.schedule_step())
      return loss
    f = TinyJit(step) if jit else step
    rng = np.random.default_rng(0)
    for _ in range(5): f(Tensor(rng.standard_normal((4, 1, 7, 7)).astype(np.float32)), Tensor(rng.integers(0, 2, 4).astype(np.int32)))
    return {k: v.numpy() for k, v in get_state_dict(model).items()}
  eager, jitted = run(False), run(True)
  assert jitted["bn.num_batches_tracked"] == 5
  for k in eager: np.testing.assert_allclose(jitted[k], eager[k], rtol=1e-5, atol=1e-6, err_msg=k)

def test_gradients_accumulating_across_calls_raise():
  w = Tensor.ones(3, requires_grad=True).realize()
  @TinyJit
  def f(x):
    (w * x).sum().backward()   # no zero_grad: w.grad = previous grad + new one; a replay would reuse the first call's grad
    return w.grad.realize()
  _g = f(Tensor.ones(3))
  with pytest.raises(JitError, match="zero_grad"):
    _g = f(Tensor.ones(3))

# ---------------------------------------------------------------- training loops, step for step against eager

class _Net:
  """Embedding + dropout + two Linear layers: integer inputs, a count inside sparse cross-entropy, RNG, Adam state."""
  def __init__(self):
    from petagrad import nn
    self.emb, self.l1, self.l2 = nn.Embedding(10, 8), nn.Linear(8, 16), nn.Linear(16, 4)
  def __call__(self, tok: Tensor) -> Tensor: return self.l2(self.l1(self.emb(tok).sum(1)).relu().dropout(0.25))

def _data(seed: int) -> tuple[Tensor, Tensor]:
  rng = np.random.default_rng(seed)
  return Tensor(rng.integers(0, 10, (16, 3)).astype(np.int32)).realize(), Tensor(rng.integers(0, 4, (16,)).astype(np.int32)).realize()

def _train_run(jit: bool, fresh_inputs: bool, steps: int = 6) -> tuple[list[list[float]], dict[str, np.ndarray]]:
  from petagrad import nn
  from petagrad.nn import optim
  from petagrad.nn.state import get_parameters, get_state_dict
  Tensor.manual_seed(7)
  net = _Net()
  opt = optim.Adam(get_parameters(net), lr=0.02)
  def step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    with nn.train():
      opt.zero_grad()
      out = net(x)
      loss = out.sparse_categorical_crossentropy(y)
      loss.backward()
      acc = (out.argmax(-1) == y).float().mean()
      return loss.realize(acc, *opt.schedule_step()), acc   # tinygrad's idiom: the loss and the step in one schedule
  def evaluate(x: Tensor) -> Tensor: return net(x).softmax(-1).realize()
  f, ev = (TinyJit(step), TinyJit(evaluate)) if jit else (step, evaluate)
  x, y = _data(0)
  xe, _ = _data(99)
  seen = []
  for i in range(steps):
    if fresh_inputs: x, y = _data(i)   # new tensors (new buffers) every call
    loss, acc = f(x, y)
    seen.append([loss.item(), acc.item(), *ev(xe).numpy().ravel()[:4].tolist()])
  return seen, {k: v.numpy() for k, v in get_state_dict(net).items()}

@pytest.mark.parametrize("fresh_inputs", [False, True], ids=["same_inputs", "fresh_inputs"])
def test_training_loop_matches_eager_step_for_step(fresh_inputs):
  eager, ew = _train_run(False, fresh_inputs)
  jitted, jw = _train_run(True, fresh_inputs)
  np.testing.assert_allclose(np.array(jitted), np.array(eager), rtol=1e-5, atol=1e-6)
  assert eager[-1][2:] != eager[0][2:]   # the weights move (the eval outputs change)
  if not fresh_inputs: assert eager[-1][0] < eager[0][0]   # and the loss on the one batch goes down
  for k in ew: np.testing.assert_allclose(jw[k], ew[k], rtol=1e-5, atol=1e-6, err_msg=k)

def test_same_input_tensors_every_call_recompute_what_they_build():
  # the capture builds the warm-up call's graph over the same input buffers: it must compute (and record) it again
  x = Tensor([1.0, 2.0, 3.0]).realize()
  w = Tensor.zeros(3).contiguous().realize()
  @TinyJit
  def f(x):
    w.assign(w + (x * 2).sum())   # (x * 2).sum() is the same graph on every call
    return w.realize()
  for i in range(5): np.testing.assert_allclose(f(x).numpy(), [12.0 * (i + 1)] * 3)

def test_jit_method_keeps_self_and_captures_per_instance():
  class Counter:
    def __init__(self, start: float): self.s = Tensor.full((2,), start).contiguous().realize()
    @TinyJit
    def step(self, x: Tensor) -> Tensor:
      self.s.assign(self.s + x)
      return (self.s * 2).realize()
  a, b = Counter(0.0), Counter(100.0)
  for _ in range(4): ra, _rb = a.step(Tensor.ones(2)), b.step(Tensor.full((2,), 2.0))
  np.testing.assert_allclose(a.s.numpy(), [4.0, 4.0])
  np.testing.assert_allclose(b.s.numpy(), [108.0, 108.0])
  np.testing.assert_allclose(ra.numpy(), [8.0, 8.0])
  assert a.step is a.step and a.step is not b.step and a.step.cnt == 4

def test_realized_value_is_not_a_hidden_cache():
  from petagrad.tensor import _forward
  from petagrad.uop.ops import Ops
  x = Tensor([1.0, 2.0]).realize()
  a = (x * 3).sum()
  b = a + 1                          # lazy, built from a's graph
  a.realize()
  assert not any(u.op is Ops.REDUCE_AXIS for u in _forward(b.uop, {}, []).toposort())   # b reads a's buffer now
  GlobalCounters.reset()
  c = (x * 3).sum().realize()        # equal to a's graph, built later: computed again, into its own buffer
  assert GlobalCounters.kernel_count == 1 and c.uop.base.buffer is not a.uop.base.buffer
  assert b.item() == 10.0 and c.item() == 9.0

def test_results_kept_by_the_caller_are_not_overwritten():
  # every replay returns tensors of its own: a list of losses, or a lazy running sum, keeps each call's value
  f = TinyJit(lambda x: (x * 2).realize())
  kept = [f(Tensor([float(i)])) for i in range(5)]
  assert [r.item() for r in kept] == [0.0, 2.0, 4.0, 6.0, 8.0]
  total = Tensor([0.0])
  for i in range(5): total = total + f(Tensor([float(i)]))   # lazy: reads every call's output buffer at the end
  assert total.item() == 20.0

def test_returned_view_of_an_input_follows_the_input():
  f = TinyJit(lambda x: (x.reshape(2, 2), (x * 2).realize()))
  for i in range(4):
    a, b = f(Tensor([float(i)] * 4))
    assert a.tolist() == [[float(i)] * 2] * 2 and b.tolist() == [2.0 * i] * 4

def test_jit_method_does_not_keep_its_instance_alive():
  import gc, weakref
  class M:
    def __init__(self): self.w = Tensor.ones(2).contiguous().realize()
    @TinyJit
    def f(self, x: Tensor) -> Tensor: return (self.w * x).realize()
  m = M()
  for _ in range(3): m.f(Tensor([1.0, 2.0]))
  r = weakref.ref(m)
  del m
  gc.collect()
  assert r() is None and len(M.f._bound) == 0

# ---------------------------------------------------------------- JIT=0, prune=, CAPTURING (tinygrad's switches)

def test_jit_0_runs_the_function_eagerly_every_call():
  calls = []
  @TinyJit
  def f(x):
    calls.append(x.sum().item())   # reading a value is fine: nothing is captured
    return x * 2
  with Context(JIT=0):
    outs = [f(Tensor([float(i), 1.0])) for i in range(4)]
  assert calls == [1.0, 2.0, 3.0, 4.0] and f.cnt == 0 and f.captured == []
  assert [o.tolist() for o in outs] == [[2.0 * i, 2.0] for i in range(4)]
  assert all(o.uop.base.op.name == "BUFFER" for o in outs)   # returned tensors are realized, as tinygrad does
  # JIT back on: the function is traced again, and reading a value inside it is refused
  with pytest.raises(JitError, match="Python"):
    for i in range(2): f(Tensor([float(i), 1.0]))

def test_jit_0_from_the_environment():
  import subprocess, sys, os
  prog = ("from petagrad import Tensor, TinyJit\nfrom petagrad.helpers import JIT\nn = []\n"
          "f = TinyJit(lambda x: (n.append(1), (x + 1).realize())[1])\n"
          "r = [f(Tensor([float(i)])).item() for i in range(4)]\nprint(int(JIT), len(n), f.cnt, r)")
  r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=300,
                     env={**os.environ, "JIT": "0", "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))})
  assert r.returncode == 0, r.stderr
  assert r.stdout.split("\n")[-2] == "0 4 0 [1.0, 2.0, 3.0, 4.0]"

def _const_then_input(w):
  return lambda x: (x * (w * 2 + 1).realize()).realize()   # the first kernel reads only w: the same on every call

@pytest.mark.parametrize("decorated", [False, True])
def test_prune_drops_kernels_that_do_not_depend_on_the_inputs(decorated):
  w = Tensor([1.0, 2.0, 3.0]).realize()
  plain = TinyJit(_const_then_input(w))
  pruned = TinyJit(prune=True)(_const_then_input(w)) if decorated else TinyJit(_const_then_input(w), prune=True)
  assert isinstance(pruned, TinyJit) and pruned.prune
  for i in range(5):
    x = Tensor([float(i), 1.0, -1.0])
    assert plain(x).tolist() == pruned(x).tolist() == [3.0 * i, 5.0, -7.0]
  assert len(plain.captured) == 2 and len(pruned.captured) == 1
  GlobalCounters.reset()
  pruned(Tensor([1.0, 1.0, 1.0]))
  assert GlobalCounters.kernel_count == 1

def test_prune_keeps_state_updates_and_random_draws():
  # in-place writes and random numbers change every call, inputs or not (tinygrad's prune would run the write once)
  w = Tensor.zeros(4).contiguous().realize()
  @TinyJit(prune=True)
  def f(x):
    w.assign(w + 1)
    return (x + Tensor.rand(4).realize()).realize()
  outs = [f(Tensor.zeros(4)).numpy() for _ in range(5)]
  np.testing.assert_array_equal(w.numpy(), [5.0] * 4)
  for a, b in zip(outs, outs[1:]): assert not np.allclose(a, b)

def test_prune_training_step_matches_unpruned():
  def make():
    Tensor.manual_seed(3)
    w = Tensor.randn(4, 2, requires_grad=True).realize()
    scale = Tensor([0.5, 2.0]).realize()
    def step(x, y):
      loss = ((x @ w * (scale * scale).realize() - y) ** 2).mean()   # scale*scale: the same every call
      loss.backward()
      w.assign(w.detach() - 0.05 * w.grad)
      w.grad = None
      return loss
    return step
  xs = [(Tensor(np.random.randn(8, 4).astype(np.float32)), Tensor(np.random.randn(8, 2).astype(np.float32))) for _ in range(6)]
  a, b = TinyJit(make()), TinyJit(make(), prune=True)
  la, lb = [a(x, y).item() for x, y in xs], [b(x, y).item() for x, y in xs]
  np.testing.assert_allclose(la, lb, rtol=1e-6)
  assert len(b.captured) < len(a.captured)

def test_tinyjit_keywords_are_tinygrads():
  with pytest.raises(TypeError): TinyJit(lambda x: x, optimize=True)   # tinygrad 0.14's TinyJit takes prune only
  with pytest.raises(TypeError): TinyJit(3)

def test_capturing_0_runs_once_and_is_not_replayed():
  w = Tensor([1.0, 2.0]).realize()
  @TinyJit
  def f(x):
    with Context(CAPTURING=0):
      c = (w * 10).realize()         # launched now, in every call up to the capture; replays skip it
      y = (x * 2).realize()          # read from the capture call's buffer ever after (tinygrad's semantics)
    return (x + c + y).realize()
  outs = [f(Tensor([float(i), float(i)])).tolist() for i in range(4)]
  assert outs == [[10.0, 20.0], [13.0, 23.0], [14.0, 24.0], [15.0, 25.0]]   # y stays 2 * 1 (the capture call's x)
  assert len(f.captured) == 1
