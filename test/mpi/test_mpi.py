"""Several processes under mpirun (docs/multi.md): one tensor over the CPU devices of every rank, data-parallel
training equal to one device, ranks that disagree or stop answering. Each case runs test/mpi/mpi_program.py under
`mpirun -np N`; skipped without mpirun or mpi4py (CI installs both)."""
from __future__ import annotations
import os, re, shutil, subprocess, sys, tempfile
import pytest

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_program.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _have_mpi() -> bool:
  try: import mpi4py  # noqa: F401
  except ImportError: return False
  return shutil.which("mpirun") is not None

pytestmark = pytest.mark.skipif(not _have_mpi(), reason="needs mpirun (openmpi-bin) and mpi4py (pip install -e '.[mpi]')")

def mpirun(n: int, what: str, timeout: float = 600, env: dict | None = None, extra: list[str] | None = None) -> subprocess.CompletedProcess:
  # (MPI_TIMEOUT well under the job's timeout: a rank that fails makes the others raise, naming it, before the job is killed)
  e = {**os.environ, "MPI_TIMEOUT": str(int(timeout // 2)), "THREADS": "1", "PYTHONPATH": ROOT, **(env or {})}
  # each job its own session folder: jobs run side by side (pytest-xdist), and the namespaces' daemons share /tmp and
  # one hostname with everything else
  with tempfile.TemporaryDirectory(prefix="pg-mpi-") as tmp:
    # (rtc hwloc off: Open MPI 4.1's mpirun now and then segfaults writing its hardware topology into shared memory)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "orte_tmpdir_base", tmp, "--mca", "rtc", "^hwloc", "-np", str(n),
           *(extra or []), sys.executable, PROGRAM, what]
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

def test_optimizer_updates_run_after_the_last_allreduce_started():
  _ok(mpirun(2, "update_order"), 2, "update_order")

def test_ranks_running_different_programs_raise():
  _ok(mpirun(2, "mismatch"), 2, "mismatch")

# a rank that sleeps forever, and one killed (SIGKILL) in the middle of a training step; for the second,
# orte_enable_recovery lets mpirun keep the other ranks running (by default it ends the whole job at once)
@pytest.mark.parametrize("what,extra", [("stalls", []), ("dies", ["--mca", "orte_enable_recovery", "1"])])
def test_a_rank_that_stops_answering_is_named(what, extra):
  r = mpirun(3, what, env={"MPI_TIMEOUT": "20"}, timeout=300, extra=extra)
  raised = re.findall(r"rank \d: raised: .*?rank\(s\) 2 did not answer", r.stdout)
  assert len(raised) == 2, f"stdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"

# ------------------------------------------------------------------ two "machines": network namespaces joined by veth
# pairs to a bridge, ranks 0-1 in one and 2-3 in the other; mpirun starts them through netns_rsh.sh (not ssh) and MPI
# talks TCP across the veth links (shared memory is off: the namespaces share /dev/shm and one hostname). The
# hierarchical allreduce groups the ranks by machine from MPI's shared-memory split: two groups here.
# one subnet per pytest-xdist worker: two workers' jobs side by side on one subnet reached each other's daemons (Open MPI
# then failed with "File exists" on its session directory)
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
SUBNET = f"10.231.{77 + int(_WORKER[2:]) if _WORKER[2:].isdigit() else 77}"

def _sh(cmd: str) -> subprocess.CompletedProcess: return subprocess.run(cmd, shell=True, capture_output=True, text=True)

@pytest.fixture
def two_hosts():
  if os.geteuid() != 0 or shutil.which("ip") is None: pytest.skip("network namespaces need root and iproute2")
  tag = f"pg{os.getpid() % 10000}"
  br, names = f"{tag}br", [f"{tag}h{i}" for i in (1, 2)]
  setup = [f"ip link add {br} type bridge", f"ip addr add {SUBNET}.1/24 dev {br}", f"ip link set {br} up"]
  for i, ns in enumerate(names, 1):
    setup += [f"ip netns add {ns}", f"ip link add {tag}v{i} type veth peer name eth0 netns {ns}", f"ip link set {tag}v{i} master {br} up",
              f"ip netns exec {ns} ip addr add {SUBNET}.1{i}/24 dev eth0", f"ip netns exec {ns} ip link set eth0 up",
              f"ip netns exec {ns} ip link set lo up"]
  try:
    for cmd in setup:
      if (r := _sh(cmd)).returncode != 0: pytest.skip(f"cannot make network namespaces here ({cmd}: {r.stderr.strip()})")
    yield {f"{SUBNET}.1{i}": ns for i, ns in enumerate(names, 1)}
  finally:
    for ns in names: _sh(f"ip netns del {ns}")
    _sh(f"ip link del {br}")

@pytest.mark.parametrize("what", ["ops", "train_jit"])
def test_two_hosts_over_network_namespaces(two_hosts, what, tmp_path):
  hostfile = tmp_path / "hosts"
  hostfile.write_text("".join(f"{addr} slots=2\n" for addr in two_hosts))
  env = {"PETAGRAD_NETNS": " ".join(f"{a}={ns}" for a, ns in two_hosts.items())}
  extra = ["--hostfile", str(hostfile), "--mca", "plm_rsh_agent", os.path.join(os.path.dirname(PROGRAM), "netns_rsh.sh"),
           "--mca", "oob_tcp_if_include", f"{SUBNET}.0/24", "--mca", "btl_tcp_if_include", f"{SUBNET}.0/24", "--mca", "btl", "tcp,self",
           "-x", "MPI_TIMEOUT", "-x", "THREADS", "-x", "PYTHONPATH", "-x", "PETAGRAD_EXPECT_MACHINES"]
  _ok(mpirun(4, what, env={**env, "PETAGRAD_EXPECT_MACHINES": "2"}, extra=extra), 4, what)
