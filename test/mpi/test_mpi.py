"""Several processes under mpirun (docs/multi.md): one tensor over the CPU devices of every rank, data-parallel
training equal to one device, ranks that disagree or stop answering. Each case runs test/mpi/mpi_program.py under
`mpirun -np N`; skipped without mpirun or mpi4py (CI installs both)."""
from __future__ import annotations
import os, re, shutil, subprocess, sys
import pytest

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_program.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _have_mpi() -> bool:
  try: import mpi4py  # noqa: F401
  except ImportError: return False
  return shutil.which("mpirun") is not None

pytestmark = pytest.mark.skipif(not _have_mpi(), reason="needs mpirun (openmpi-bin) and mpi4py (pip install -e '.[mpi]')")

def mpirun(n: int, what: str, timeout: float = 600, env: dict | None = None, extra: list[str] | None = None) -> subprocess.CompletedProcess:
  e = {**os.environ, "MPI_TIMEOUT": "600", "THREADS": "1", "PYTHONPATH": ROOT, **(env or {})}
  cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), *(extra or []), sys.executable, PROGRAM, what]
  return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=e)

def _ok(r: subprocess.CompletedProcess, n: int, what: str) -> None:
  done = re.findall(rf"rank \d+ of {n}: {what} ok", r.stdout)   # (the ranks' lines may interleave)
  assert r.returncode == 0 and len(done) == n, f"mpirun exited {r.returncode}; stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-5000:]}"

@pytest.mark.parametrize("n,per_rank", [(2, 1), (4, 1), (2, 2)])
def test_ops_across_ranks(n, per_rank):
  _ok(mpirun(n, "ops", env={"DEVICES_PER_RANK": str(per_rank)}), n, "ops")

@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("what", ["train", "train_jit"])
def test_data_parallel_training_equals_one_device(n, what):
  _ok(mpirun(n, what), n, what)

def test_ranks_running_different_programs_raise():
  _ok(mpirun(2, "mismatch"), 2, "mismatch")

def test_a_rank_that_stops_answering_is_named():
  r = mpirun(3, "stalls", env={"MPI_TIMEOUT": "20"}, timeout=300)
  raised = re.findall(r"rank \d: raised: .*?rank\(s\) 2 did not answer", r.stdout)
  assert len(raised) == 2, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
