"""The CPU thread pool (runtime/threadpool.c) and the kernels the C renderer outlines for it: every index runs
exactly once for any size and thread count, threaded kernels match numpy, several thread loops in one program
run in order, values from outside a thread loop reach it, and the pool survives fork, concurrent launches from
two Python threads and a shutdown."""
from __future__ import annotations
import ast, ctypes, os, subprocess, sys, threading, time
import numpy as np
import pytest
from petagrad import Tensor, Context
from petagrad.dtype import dtypes
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.codegen.linearize import LinearProgram
from petagrad.renderer.cstyle import CRenderer
from petagrad.runtime.ops_cpu import ClangCompiler, CPUProgram, thread_pool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_longlong)

def _pool() -> ctypes.CDLL:
  lib = thread_pool().wait()
  lib.pg_parallel_for.argtypes = [TASK, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int]
  return lib

@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 8, 9, 100, 1001])
@pytest.mark.parametrize("nthreads", [1, 2, 3, 8])
def test_every_index_once(n, nthreads):
  lib = _pool()
  seen = np.zeros(max(n, 1), np.int64)
  def body(_args, lo, hi):
    assert 0 <= lo <= hi <= n
    seen[lo:hi] += 1
  lib.pg_parallel_for(TASK(body), None, n, nthreads)
  assert (seen[:n] == 1).all(), seen[:n]

def _wait_for(cond, seconds: float = 5.0) -> bool:
  end = time.monotonic() + seconds
  while not cond():
    if time.monotonic() > end: return False
    time.sleep(0.001)
  return True

def test_prewake_then_sleep_again():
  """pg_pool_prewake wakes sleeping workers without a job: jobs still run every index once, and the woken workers
  go back to sleep (they spin at most about a millisecond), also after a burst of pre-wakes."""
  lib = _pool()
  lib.pg_pool_workers.restype = lib.pg_pool_sleepers.restype = ctypes.c_int
  seen = np.zeros(1000, np.int64)
  def body(_args, lo, hi): seen[lo:hi] += 1
  task = TASK(body)
  lib.pg_parallel_for(task, None, 1000, 3)
  workers = lib.pg_pool_workers()
  assert workers >= 2
  assert _wait_for(lambda: lib.pg_pool_sleepers() == workers)
  for i in range(50):
    lib.pg_pool_prewake()
    if i % 5 == 0: lib.pg_parallel_for(task, None, 1000, 3)
  assert (seen == 11).all()
  assert _wait_for(lambda: lib.pg_pool_sleepers() == workers), "pre-woken workers kept spinning"

def _threaded_cases():
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((300, 1000)).astype(np.float32), rng.standard_normal((1000, 70)).astype(np.float32)
  c = rng.standard_normal((70001,)).astype(np.float32)
  return [("row sum", lambda t: t[0].sum(1), [a], lambda x: x.sum(1)),
          ("column sum", lambda t: t[0].sum(0), [a], lambda x: x.sum(0)),
          ("matmul", lambda t: t[0] @ t[1], [a, b], lambda x, y: x @ y),
          ("elementwise", lambda t: ((t[0] * 2 + 1).relu() * 0.5).exp(), [c], lambda x: np.exp(np.maximum(x * 2 + 1, 0) * 0.5)),
          ("softmax", lambda t: t[0].softmax(-1), [a],
           lambda x: np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True))]

@pytest.mark.parametrize("threads", [2, 3, 5])
def test_threaded_kernels_match_numpy(threads):
  with Context(THREADS=threads):
    for name, fn, xs, ref in _threaded_cases():
      got = fn([Tensor(x, device="CPU") for x in xs]).numpy()
      np.testing.assert_allclose(got, ref(*[x.astype(np.float64) for x in xs]), rtol=1e-4, atol=1e-4, err_msg=f"{name}, {threads} threads")

# ---------------------------------------------------------------- hand-built programs the renderer outlines
def _g(i: int) -> UOp: return UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), i)
def _rng(i: int, n: int, kind: str) -> UOp: return UOp(Ops.RANGE, dtypes.index, (), (i, n, kind))
def _c(v: int) -> UOp: return UOp.const(dtypes.index, v)
def _end(r: UOp) -> UOp: return UOp(Ops.ENDRANGE, r.dtype, (r,))

def _compile(uops: list[UOp], nparams: int, threads: int = 3) -> tuple[str, CPUProgram]:
  _pool()
  # the plain build (these tests read its source and call it without SANITIZE's extra arguments)
  with Context(THREADS=threads, SANITIZE=0):
    src = CRenderer().render("k", LinearProgram(uops), [dtypes.float32] * nparams)
  return src, CPUProgram("k", ClangCompiler().compile(src, "k"))

def _buf(x: np.ndarray):
  return (ctypes.c_float * x.size).from_buffer(x)

def _two_loops(n: int, threads: int) -> tuple[str, CPUProgram]:
  # nest 1: data1[i] = data2[i] * 2; nest 2: data0[i] = data1[n-1-i] + 1 reads what other chunks of nest 1 wrote,
  # so it is only right if nest 1 finished everywhere first
  g0, g1, g2 = _g(0), _g(1), _g(2)
  r = _rng(0, n, "thread")
  v = UOp(Ops.LOAD, dtypes.float32, (g2, r))
  two = UOp(Ops.MUL, dtypes.float32, (v, UOp.const(dtypes.float32, 2.0)))
  rev = UOp(Ops.SUB, dtypes.index, (_c(n - 1), r))
  w = UOp(Ops.LOAD, dtypes.float32, (g1, rev))
  one = UOp(Ops.ADD, dtypes.float32, (w, UOp.const(dtypes.float32, 1.0)))
  consts = [UOp.const(dtypes.float32, 2.0), UOp.const(dtypes.float32, 1.0), _c(n - 1)]
  uops = [g0, g1, g2, *consts, r, v, two, UOp(Ops.STORE, dtypes.bool, (g1, r, two)), _end(r),
          r, rev, w, one, UOp(Ops.STORE, dtypes.bool, (g0, r, one)), _end(r)]
  return _compile(uops, 3, threads)

_PROGS: dict[tuple[int, int], CPUProgram] = {}
def _check_two_loops(n: int = 100_003, threads: int = 3, times: int = 3) -> None:
  """Runs a program whose two thread loops always go through the pool (with NOOPT=1 too) and checks it."""
  _pool()   # built and loaded before the program, so the program is linked to it
  if (n, threads) not in _PROGS: _PROGS[(n, threads)] = _two_loops(n, threads)[1]
  prog = _PROGS[(n, threads)]
  x = np.arange(n, dtype=np.float32)
  for _ in range(times):
    out, tmp = np.zeros(n, np.float32), np.zeros(n, np.float32)
    prog(_buf(out), _buf(tmp), _buf(x))
    np.testing.assert_array_equal(out, x[::-1] * 2 + 1)

def test_two_thread_loops_run_in_order():
  src, _ = _two_loops(1000, 3)
  assert src.count("pg_parallel_for(k_t") == 2, src   # one launch per nest
  _check_two_loops(times=20)

def test_runs_without_the_pool(tmp_path):
  # a kernel library whose pool pointer was never set runs its thread loops on the calling thread
  n = 10_001
  src, _ = _two_loops(n, 3)
  so = tmp_path / "k.so"
  so.write_bytes(ClangCompiler().compile(src, "k"))
  dll = ctypes.CDLL(str(so))
  assert ctypes.c_void_p.in_dll(dll, "pg_parallel_for").value is None
  x = np.arange(n, dtype=np.float32)
  out, tmp = np.zeros(n, np.float32), np.zeros(n, np.float32)
  dll.k(_buf(out), _buf(tmp), _buf(x))
  np.testing.assert_array_equal(out, x[::-1] * 2 + 1)

def test_values_from_outside_the_thread_loop():
  # a serial outer loop j around the thread loop i, and a value loaded before the thread loop: both are captured
  n, m = 5000, 3
  g0, g1 = _g(0), _g(1)
  j, i = _rng(0, m, "global"), _rng(1, n, "thread")
  jn = UOp(Ops.MUL, dtypes.index, (j, _c(n)))
  first = UOp(Ops.LOAD, dtypes.float32, (g1, jn))   # data1[j*n]
  idx = UOp(Ops.ADD, dtypes.index, (jn, i))
  v = UOp(Ops.LOAD, dtypes.float32, (g1, idx))
  s = UOp(Ops.SUB, dtypes.float32, (v, first))
  uops = [g0, g1, _c(n), j, jn, first, i, idx, v, s, UOp(Ops.STORE, dtypes.bool, (g0, idx, s)), _end(i), _end(j)]
  src, prog = _compile(uops, 2)
  assert "pg_parallel_for(k_t0" in src, src
  x = np.random.default_rng(0).standard_normal(n * m).astype(np.float32)
  out = np.zeros_like(x)
  prog(_buf(out), _buf(x))
  np.testing.assert_array_equal(out, (x.reshape(m, n) - x.reshape(m, n)[:, :1]).reshape(-1))

def test_omp_flag_renders_openmp():
  g0 = _g(0)
  r = _rng(0, 64, "thread")
  uops = [g0, UOp.const(dtypes.float32, 1.0), r, UOp(Ops.STORE, dtypes.bool, (g0, r, UOp.const(dtypes.float32, 1.0))), _end(r)]
  with Context(OMP=1): src = CRenderer().render("k", LinearProgram(uops), [dtypes.float32])
  assert "#pragma omp parallel for" in src and "pg_parallel_for" not in src

def test_omp_path_still_runs():
  code = ("import numpy as np; from petagrad import Tensor, Context\n"
          "x = np.random.default_rng(0).standard_normal((300, 1000)).astype(np.float32)\n"
          "with Context(THREADS=2): got = Tensor(x).sum(1).numpy()\n"
          "np.testing.assert_allclose(got, x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-4); print('ok')")
  p = subprocess.run([sys.executable, "-c", code], env={**os.environ, "OMP": "1", "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=300)
  assert p.returncode == 0 and "ok" in p.stdout, p.stderr

def test_default_path_leaves_openmp_alone():
  """Without OMP=1, kernels compile without libgomp and OMP_WAIT_POLICY stays unset (torch in the same process keeps
  its own OpenMP default); with OMP=1 it defaults to PASSIVE."""
  code = ("import os; from petagrad import Tensor; from petagrad.device import Device\n"
          "assert (Tensor([1.0, 2.0]) * 2).tolist() == [2.0, 4.0]\n"
          "print(os.environ.get('OMP_WAIT_POLICY'), '-fopenmp' in Device['CPU'].compiler.flags)")
  env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP")}
  for omp, want in (("0", "None False"), ("1", "PASSIVE True")):
    p = subprocess.run([sys.executable, "-c", code], env={**env, "OMP": omp, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.split() == want.split(), (omp, p.stdout, p.stderr)

# ---------------------------------------------------------------- fork, threads, shutdown
def _check_rowsum(threads: int = 2, rows: int = 300) -> None:
  x = np.random.default_rng(rows).standard_normal((rows, 1000)).astype(np.float32)
  with Context(THREADS=threads): got = Tensor(x, device="CPU").sum(1).numpy()
  np.testing.assert_allclose(got, x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-4)

@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_fork():
  _check_rowsum(); _check_two_loops()          # the parent's workers exist
  assert _pool().pg_pool_workers() >= 2
  pid = os.fork()
  if pid == 0:                                 # child: only this thread exists; the pool must start new workers
    code = 1
    try:
      _check_rowsum(); _check_rowsum(threads=3, rows=301); _check_two_loops()
      code = 0 if thread_pool().wait().pg_pool_workers() >= 2 else 2
    finally: os._exit(code)
  deadline = time.monotonic() + 120
  while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done: break
    time.sleep(0.05)
  else:
    os.kill(pid, 9); os.waitpid(pid, 0)
    pytest.fail("the forked child hung running a threaded kernel")
  assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
  _check_rowsum(); _check_two_loops()          # the parent's pool still works

def test_two_python_threads_launch_at_once():
  errors: list[BaseException] = []
  # built here: _compile's Context(SANITIZE=0) is process-wide, and would change what the threads' realizes render
  for k in range(3): _check_two_loops(n=50_000 + k, threads=2 + k % 2, times=1)
  def run(k: int) -> None:
    try:
      for i in range(15):
        _check_rowsum(threads=2, rows=200 + k * 50 + i)
        _check_two_loops(n=50_000 + k, threads=2 + k % 2)
    except BaseException as e: errors.append(e)
  ts = [threading.Thread(target=run, args=(k,)) for k in range(3)]
  for t in ts: t.start()
  for t in ts: t.join(300)
  assert not any(t.is_alive() for t in ts), "a launching thread hung"
  assert not errors, errors

def test_concurrent_renders_do_not_mix():
  # a device's renderer is shared by every Python thread; two renders at once mixed their outlined thread functions
  # (a compile error: struct r_308_1000_a0 next to r_258_1000_t2), most often under SANITIZE (three passes a kernel)
  def uops(n: int) -> list[UOp]:
    g0, g1, r = _g(0), _g(1), _rng(0, n, "thread")
    x = UOp(Ops.LOAD, dtypes.float32, (g1, r))
    v = UOp(Ops.MUL, dtypes.float32, (x, UOp.const(dtypes.float32, 2.0)))
    return [g0, g1, UOp.const(dtypes.float32, 2.0), r, x, v, UOp(Ops.STORE, dtypes.bool, (g0, r, v)), _end(r)]
  r = CRenderer()
  r.thread_pool = True
  progs = {n: LinearProgram(uops(n)) for n in (1000 + i for i in range(6))}
  with Context(THREADS=3):
    want = {n: r.render(f"k{n}", p, [dtypes.float32] * 2) for n, p in progs.items()}
    got: dict[int, set[str]] = {n: set() for n in progs}
    def run() -> None:
      for _ in range(80):
        for n, p in progs.items(): got[n].add(r.render(f"k{n}", p, [dtypes.float32] * 2))
    ts = [threading.Thread(target=run) for _ in range(4)]
    for t in ts: t.start()
    for t in ts: t.join(120)
  assert all(got[n] == {want[n]} for n in progs)

def test_shutdown_then_reuse():
  _check_two_loops()
  lib = _pool()
  lib.pg_pool_shutdown()
  assert lib.pg_pool_workers() == 0
  _check_two_loops(); _check_rowsum(threads=3)   # workers are started again on demand
  assert lib.pg_pool_workers() >= 2

@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2 or not os.path.exists("/proc/self/task"),
                    reason="needs Linux and two cores")
def test_workers_stay_on_cores_of_their_own(tmp_path):
  # a pool over every core the process may use (THREADS unset, or as many as the cores) pins worker k to the k-th of
  # them (Linux woke a sleeping worker on the launching thread's core, and the two took turns on it: 2x slower calls
  # for up to a second); the launching thread is not pinned; POOL_PIN=0 pins nothing, nor does a THREADS below the
  # cores (processes side by side; tested where the machine has 3 cores)
  code = ("import os, glob; cores = sorted(os.sched_getaffinity(0))[:int(os.environ['NCORES'])]; os.sched_setaffinity(0, cores)\n"
          "import numpy as np; from petagrad import Tensor\n"
          "x = np.random.default_rng(0).standard_normal((300, 1000)).astype(np.float32)\n"
          "from petagrad.runtime.ops_cpu import thread_pool\n"
          "for _ in range(2):   # (the pool is built next to the first kernel: the second one runs on it)\n"
          "  np.testing.assert_allclose(Tensor(x).sum(1).numpy(), x.astype(np.float64).sum(1), rtol=1e-4, atol=1e-4); thread_pool().wait()\n"
          "def allowed(f):   # (a helper thread may end between the listing and the read)\n"
          "  try: return next(l.split()[1] for l in open(f) if l.startswith('Cpus_allowed_list'))\n"
          "  except FileNotFoundError: return ''\n"
          "lists = [allowed(f) for f in glob.glob('/proc/self/task/*/status')]\n"
          "print(cores[1], sorted(l for l in lists if l.isdigit()))")
  cases = [("2", "1", "", lambda core: [str(core)]), ("2", "0", "", lambda core: []), ("2", "1", "2", lambda core: [str(core)])]
  if len(os.sched_getaffinity(0)) >= 3: cases.append(("3", "1", "2", lambda core: []))   # THREADS below the cores
  for ncores, pin, threads, want in cases:
    # (caches of its own: a row sum some other process compiled unthreaded, under these flags, starts no worker)
    env = {**os.environ, "PYTHONPATH": ROOT, "THREADS": threads, "POOL_PIN": pin, "CACHEDIR": str(tmp_path), "NCORES": ncores}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    core, pinned = p.stdout.split(maxsplit=1)
    assert ast.literal_eval(pinned) == want(int(core)), (pin, p.stdout)
