"""Devices, compilation and caches: the CPU device really compiles C, caches it on disk, and fails clearly."""
from __future__ import annotations
import os, subprocess, sys, textwrap
import numpy as np
import pytest
from petagrad import Tensor, Device, GlobalCounters, Context
from petagrad.device import CompileError
from petagrad.helpers import SANITIZE

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def run_py(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
                        env={**os.environ, "PYTHONPATH": REPO, **env})

PROGRAM = """
from petagrad import Tensor, GlobalCounters
x = Tensor([[1.0, 2.0], [3.0, 4.0]], device="CPU")
print(((x * 3.25 + 1).exp().sum(1)).tolist())
print("compiled", GlobalCounters.compile_count)
print("generated", GlobalCounters.codegen_count)
"""

def test_second_process_hits_disk_cache(tmp_path):
  """A second process running the same kernels neither generates (lowering, optimization, rendering) nor compiles
  them: lowered kernels, generated programs and compiled libraries all come from CACHEDIR."""
  env = {"CACHEDIR": str(tmp_path), "COMPILE_ALSO": ""}   # (the compile-only targets' copies are made in every process)
  first = run_py(PROGRAM, env)
  assert first.returncode == 0, first.stderr
  assert "compiled 0" not in first.stdout and "generated 0" not in first.stdout
  second = run_py(PROGRAM, env)
  assert second.returncode == 0, second.stderr
  assert "compiled 0" in second.stdout and "generated 0" in second.stdout
  assert first.stdout.splitlines()[0] == second.stdout.splitlines()[0]
  assert any((tmp_path / "generated").rglob("*.pkl")) and any((tmp_path / "lowered").rglob("*.pkl"))

def test_unreadable_cache_entries_are_regenerated(tmp_path):
  env = {"CACHEDIR": str(tmp_path)}
  first = run_py(PROGRAM, env)
  assert first.returncode == 0, first.stderr
  for sub in ("generated", "lowered"):
    for f in (tmp_path / sub).rglob("*.pkl"): f.write_bytes(b"not a pickle")
  again = run_py(PROGRAM, env)
  assert again.returncode == 0, again.stderr
  assert "generated 0" not in again.stdout and again.stdout.splitlines()[0] == first.stdout.splitlines()[0]

def test_code_caches_of_old_code_versions_are_pruned(tmp_path):
  """Generated code is kept per version of petagrad's code; a version folder nothing wrote to for CODE_CACHE_DAYS
  goes (each edit of petagrad leaves one behind), a recent one stays."""
  import time
  from petagrad.helpers import code_cache_dir, code_version, CODE_CACHE_DAYS
  base = tmp_path / "generated"
  stale, recent = base / "stale_version", base / "recent_version"
  for d in (stale, recent):
    d.mkdir(parents=True)
    (d / "x.pkl").write_bytes(b"")
  t = time.time() - (CODE_CACHE_DAYS + 1) * 86400
  os.utime(stale, (t, t))
  with Context(CACHEDIR=str(tmp_path)): here = code_cache_dir("generated")
  assert here.name == code_version()[:24] and here.is_dir()
  assert not stale.exists() and recent.exists()

def test_cache_pruning_removes_least_recently_used(tmp_path):
  """Beyond CACHE_MB the least recently used cache files go until the caches take 3/4 of it; a file read through
  read_cached counts as used; the thread pool's library stays."""
  import time
  from petagrad.helpers import prune_cache, read_cached
  now = time.time()
  files = []
  for i in range(6):   # 6 x 512 KiB, oldest first
    f = tmp_path / "compile" / f"{i}.bin"
    f.parent.mkdir(exist_ok=True)
    f.write_bytes(b"x" * (512 << 10))
    os.utime(f, (now - 1000 + i, now - 1000 + i))
    files.append(f)
  pool = tmp_path / "so" / "threadpool_abc.so"
  pool.parent.mkdir()
  pool.write_bytes(b"x" * (512 << 10))
  os.utime(pool, (now - 5000, now - 5000))
  assert read_cached(files[0]) is not None   # the oldest is used now: it stays
  assert prune_cache(tmp_path, limit_mb=2) == 3 * (512 << 10)   # 3 MiB (the pool's library aside) -> 1.5 MiB
  assert [f.exists() for f in files] == [True, False, False, False, True, True] and pool.exists()
  assert prune_cache(tmp_path, limit_mb=2) == 0 and prune_cache(tmp_path, limit_mb=0) == 0

def test_cache_pruning_runs_in_a_process_of_its_own_at_most_hourly(tmp_path):
  """The prune is a low-priority child process (it outlives a short run and never holds this interpreter), started at
  most once per PRUNE_EVERY_S per cache folder."""
  from petagrad.helpers import start_prune
  (tmp_path / "compile").mkdir()
  for i in range(6): (tmp_path / "compile" / f"{i}.bin").write_bytes(b"x" * (512 << 10))
  with Context(CACHE_MB=2):
    proc = start_prune(tmp_path)
    assert proc is not None and proc.wait(timeout=60) == 0
    assert sum(f.stat().st_size for f in (tmp_path / "compile").iterdir()) <= 3 * (512 << 10)
    assert (tmp_path / ".pruned").exists() and start_prune(tmp_path) is None   # (pruned a moment ago)
  with Context(CACHE_MB=0):
    os.utime(tmp_path / ".pruned", (0, 0))
    assert start_prune(tmp_path) is None   # (no limit)

def test_broken_compiler_fails_clearly(tmp_path):
  bad = tmp_path / "badcc"
  bad.write_text("#!/bin/sh\necho 'this compiler is broken' >&2\nexit 3\n")
  bad.chmod(0o755)
  r = run_py(PROGRAM, {"CACHEDIR": str(tmp_path / "cache"), "CC": str(bad)})
  assert r.returncode != 0
  assert "CompileError" in r.stderr and "this compiler is broken" in r.stderr
  assert "void " in r.stderr   # the kernel source is shown

def test_missing_compiler_fails_clearly(tmp_path):
  r = run_py(PROGRAM, {"CACHEDIR": str(tmp_path / "cache"), "CC": str(tmp_path / "no_such_cc")})
  assert r.returncode != 0 and "CompileError" in r.stderr and "could not run" in r.stderr

def test_compile_error_names_kernel():
  from petagrad.runtime.ops_cpu import ClangCompiler
  with Context(DISABLE_DISK_CACHE=1):
    with pytest.raises(CompileError, match="kernel broken_k"):
      ClangCompiler().compile_cached("void broken_k( { syntax error", "broken_k")

def test_null_device_compiles_but_runs_nothing():
  GlobalCounters.reset()
  out = (Tensor.ones(4, device="NULL") * 3).sum()
  assert out.tolist() == 0.0   # nothing ran: NULL buffers read as zeros
  assert GlobalCounters.kernel_count >= 1

def test_default_device_from_flag():
  with Context(DEV="PYTHON"):
    assert Device.DEFAULT == "PYTHON"
    assert Tensor([1, 2]).device == "PYTHON"
  assert Tensor([1, 2], device="cpu").device == "CPU"

def test_unknown_device():
  with pytest.raises(RuntimeError, match="unknown device"):
    Tensor([1.0], device="TPU")

def test_copy_between_devices():
  a = Tensor([1.0, 2.0, 3.0], device="CPU")
  b = (a * 2).to("PYTHON")
  assert b.device == "PYTHON"
  assert (b + 1).to("CPU").tolist() == [3.0, 5.0, 7.0]

def test_deep_graph_10000_ops():
  x = Tensor([1.0, 2.0], device="CPU")
  y = x
  for i in range(10000): y = y + 1 if i % 2 else y * 1.0
  np.testing.assert_allclose(y.numpy(), [5001.0, 5002.0])

def test_deep_graph_backward():
  x = Tensor([1.0, 2.0], device="CPU", requires_grad=True)
  y = x
  for _ in range(2000): y = y * 1.001
  y.sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), [1.001 ** 2000] * 2, rtol=1e-3)

def test_debug_levels(capsys):
  x = Tensor.rand(3, 3, device="CPU").realize()
  with Context(DEBUG=4):
    (x * 2 + 1).sum(0).realize()
  out = capsys.readouterr().out
  assert "realize:" in out                    # level 1 summary
  assert "GFLOP/s" in out and "GB/s" in out   # level 2 per kernel line
  assert "opts:" in out                       # level 3
  assert "void r_" in out                     # level 4 source

def test_freed_big_buffers_are_reused_and_overwritten():
  import gc, ctypes
  from petagrad.device import Buffer
  from petagrad.dtype import dtypes
  b = Buffer("CPU", 1 << 15, dtypes.float32).ensure_allocated()
  addr = ctypes.addressof(b.raw)
  b.copyin(memoryview(np.full(1 << 15, 7, np.float32).tobytes()))
  del b; gc.collect()
  c = Buffer("CPU", 1 << 15, dtypes.float32).ensure_allocated()
  # the same memory, no fresh mapping (SANITIZE=1 maps every buffer fresh against a guard page: no pool)
  assert ctypes.addressof(c.raw) == addr or SANITIZE
  del c; gc.collect()
  # a kernel output that lands in reused memory holds only the kernel's values
  x = Tensor.arange(1 << 15).float().realize()
  np.testing.assert_array_equal((x * 2).numpy(), np.arange(1 << 15, dtype=np.float32) * 2)
