"""CPU:n devices of one process (docs/multi.md, runtime/ops_cpu.py): with CPU_ASYNC=1 each runs its launches in order
on a thread of its own with an equal share of the cores, a copy between two of them is queued on the source, and the
destination's launches that use it wait for it. Results are those of running everything one launch after the other
(CPU_ASYNC=0), bit for bit."""
from __future__ import annotations
import ctypes, os, pickle, threading
import numpy as np
import pytest
from petagrad import Tensor, TinyJit, Device, nn
from petagrad.dtype import dtypes
from petagrad.device import Buffer, OutOfBoundsError
from petagrad.engine.realize import ExecItem, capture_hooks
from petagrad.helpers import Context, SANITIZE
from petagrad.runtime import ops_cpu
from conftest import DEVICES

pytestmark = pytest.mark.skipif("CPU" not in DEVICES, reason="CPU devices only")
DEVS = ("CPU", "CPU:1", "CPU:2")

def _queue(d: str) -> ops_cpu.LaunchQueue: return Device[d].allocator.launches

@pytest.fixture(autouse=True)
def _open_devices():
  for d in DEVS: Device[d]   # (several CPU devices open: their launches are queued)
  with Context(CPU_ASYNC=1): yield

def test_each_device_has_its_own_thread_and_share_of_the_cores():
  lib = ops_cpu.thread_pool().wait()
  with Context(THREADS=4):   # the threads the devices share; each running device gets an equal part
    x = Tensor(np.random.default_rng(0).random((512, 512), dtype=np.float32), device="CPU:1").realize()
    (x @ x.T).realize()   # CPU:1 works alone: its threaded kernel has all 4 threads (its pool grew to them, if not before)
    assert lib.pg_queue_share() == 4 and lib.pg_pool_threads(_queue("CPU:1").index + 1) >= 4
    xs = x.shard(DEVS[:2], 0)
    (xs @ x.T.to(DEVS[:2])).realize()   # both at once (2 threads each, or 4 for one that finds the other idle)
    np.testing.assert_allclose(xs.numpy() @ x.numpy().T, (xs @ x.T.to(DEVS[:2])).numpy(), rtol=1e-4, atol=1e-3)
  names = {open(f"/proc/self/task/{t}/comm").read().strip() for t in os.listdir("/proc/self/task")} if os.path.isdir("/proc/self/task") else None
  if names is not None: assert {f"pg-queue-{_queue(d).index}" for d in DEVS[:2]} <= names

def test_devices_running_at_once_share_the_cores():
  lib = ops_cpu.thread_pool().wait()
  a, b = _queue("CPU"), _queue("CPU:1")
  started, release, seen = threading.Event(), threading.Event(), []
  job = ctypes.CFUNCTYPE(None, ctypes.c_void_p)   # a queue calls a kernel as fn(void **args): here, Python functions
  hold = job(lambda _: (started.set(), release.wait(30)) and None)   # CPU:1 runs a "kernel" until released
  look = job(lambda _: seen.append(lib.pg_queue_share()))           # what a kernel on CPU gets meanwhile
  with Context(THREADS=4):
    try:
      b.kernel(ctypes.cast(hold, ctypes.c_void_p).value, ())
      assert started.wait(30)
      a.kernel(ctypes.cast(look, ctypes.c_void_p).value, ())
      a.wait()
    finally:
      release.set()
      b.wait()
    a.kernel(ctypes.cast(look, ctypes.c_void_p).value, ())   # alone now
    a.wait()
  assert seen == [2, 4]

def test_a_device_does_not_wait_behind_another():
  a, b = _queue("CPU"), _queue("CPU:1")
  x = Tensor.ones(1000, device="CPU").contiguous().realize()
  Tensor.ones(4, device="CPU:1").contiguous().realize()
  # CPU:1's queue now waits until CPU's has run one more job: were both devices' launches run in one order, the
  # kernel below (on CPU, after it) would never run and the realize, which waits for every device, would hang
  b._hold(b.lib.pg_queue_after(b.index, a.index, a.lib.pg_queue_queued(a.index) + 1), None)
  assert b.busy
  y = (x * 2).realize()
  assert not b.busy and y.numpy()[:3].tolist() == [2.0, 2.0, 2.0]

def _random_program(seed: int) -> list[Tensor]:
  """Tensors moved between the devices and back, pieces written in place, reductions over sharded axes: every kind of
  dependency between two queues (a copy's source written after it, its destination memory reused)."""
  rng = np.random.default_rng(seed)
  vals = [Tensor(rng.standard_normal((n, 16)).astype(np.float32), device=DEVS[i % 3]).realize() for i, n in enumerate((24, 8, 17, 1))]
  outs = []
  for step in range(12):
    i, j = rng.integers(len(vals), size=2)
    a, b = vals[i], vals[j]
    d = DEVS[int(rng.integers(3))]
    kind = int(rng.integers(5))
    if kind == 0: v = (a.to(d).sum(0, keepdim=True) + b.to(d)[:1].exp()).expand(int(rng.integers(1, 9)), 16)
    elif kind == 1: v = a.shard(DEVS, 0).relu().sum(0, keepdim=True).to(d) * 0.5
    elif kind == 2: v = (a.to(d)[:, :8] @ b.to(d)[:1, :8].T.expand(8, 16))
    elif kind == 3:
      b.assign(b.to(b.device) * 0.9 + a.to(b.device)[:1].sum() * 0.1)   # in place: later copies of b see the new value
      v = b
    else: v = Tensor.cat(a.to(d), b.to(d)).tanh()
    vals.append(v.contiguous())
    if rng.random() < 0.5: outs.append(vals[-1].realize())
  return outs + [Tensor.stack(*[v.to("CPU").sum(0) for v in vals[-3:]])]

@pytest.mark.parametrize("seed", range(6))
def test_random_programs_match_running_one_launch_at_a_time(seed):
  got = {}
  for a in (1, 0):
    with Context(CPU_ASYNC=a):
      got[a] = [o.numpy() for o in _random_program(seed)]
  for x, y in zip(got[1], got[0]): np.testing.assert_array_equal(x, y)

def test_data_parallel_steps_match_under_jit():
  def train(async_: int) -> list[np.ndarray]:
    with Context(CPU_ASYNC=async_):
      Tensor.manual_seed(3)
      model = [nn.Linear(12, 32), nn.BatchNorm(32), nn.Linear(32, 5)]
      for layer in model:
        for t in nn.state.get_parameters(layer) + ([layer.running_mean, layer.running_var] if isinstance(layer, nn.BatchNorm) else []): t.to_(DEVS)
      params = [t for layer in model for t in nn.state.get_parameters(layer)]
      opt = nn.optim.Adam(params, lr=1e-2)
      @TinyJit
      def step(x, y):
        with nn.train():
          opt.zero_grad()
          loss = x.sequential([model[0], model[1], Tensor.relu, model[2]]).sparse_categorical_crossentropy(y)
          loss.backward()
          Tensor.realize_all(loss, *opt.schedule_step())
        return loss
      rng = np.random.default_rng(1)
      for _ in range(5):
        step(Tensor(rng.standard_normal((30, 12)).astype(np.float32)).shard(DEVS, 0), Tensor(rng.integers(0, 5, 30)).shard(DEVS, 0))
      return [p.numpy() for p in params]
  for x, y in zip(train(1), train(0)): np.testing.assert_array_equal(x, y)

def test_kernels_that_read_a_copy_from_another_device_run_after_that_devices_own_work():
  a = Tensor.rand(64, 64, device="CPU").realize()
  b = Tensor.rand(64, 64, device="CPU:1").realize()
  waits = (a * 2).to("CPU:1") + 1   # first in program order, but needs CPU's result
  alone = (b.exp() * 3).sum(1)      # CPU:1's own work
  ran: list[ExecItem] = []
  capture_hooks.append(ran.append)
  try: Tensor.realize_all(waits, alone)
  finally: capture_hooks.remove(ran.append)
  writes = [next(iter(e.bufs[w.out] for w in e.writes)) for e in ran]
  pos = {id(b): i for i, b in enumerate(writes)}
  assert pos[id(alone.uop.base.buffer)] < pos[id(waits.uop.base.buffer)]
  np.testing.assert_allclose(waits.numpy(), a.numpy() * 2 + 1)

def test_a_forked_child_starts_its_own_queues():
  x = Tensor.arange(12, device="CPU:1").float().realize()
  r, w = os.pipe()
  pid = os.fork()
  if pid == 0:   # the child: the parent's queue threads are not here
    try: os.write(w, pickle.dumps((x.shard(DEVS, 0) * 2).sum(0).to("CPU:2").tolist()))
    finally: os._exit(0)
  os.close(w)
  with os.fdopen(r, "rb") as f: got = pickle.loads(f.read())
  os.waitpid(pid, 0)
  assert got == float(np.arange(12).sum() * 2)

@pytest.mark.skipif(not SANITIZE, reason="bounds-checked kernels: SANITIZE=1")
def test_a_queued_kernels_bad_access_raises_at_the_next_wait():
  ran: list[ExecItem] = []
  x = Tensor(np.arange(64, dtype=np.float32), device="CPU:1").realize()
  capture_hooks.append(ran.append)
  try: (x * 3).realize()
  finally: capture_hooks.remove(ran.append)
  ei = next(e for e in ran if e.kernel is not None)
  small = Buffer("CPU:1", 40, dtypes.float32)
  ExecItem(ei.kernel, [ei.bufs[0], small], ei.writes).run()   # queued: returns before the kernel ran
  with pytest.raises(OutOfBoundsError, match=rf"kernel {ei.kernel.name}: a load from buffer 1 \(parameter 1: float32, 40 elements\)"):
    Device["CPU:1"].synchronize()
