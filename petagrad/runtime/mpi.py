"""The collectives between MPI ranks (device/world.py, docs/multi.md): ALLREDUCE and ALLGATHER of one host buffer per
rank, run by MPI (mpi4py). A device buffer is staged through host memory (copied out, combined, copied back in).

Every call is non-blocking underneath and waited for with a deadline (MPI_TIMEOUT): a rank that died or stopped
answering makes the others raise, naming the ranks that did not answer, instead of hanging. Before a realize runs
collectives, the ranks compare what they are about to run (`agree`): ranks running different programs raise at once.

The algorithms of ALLREDUCE (the ALLREDUCE flag): `naive`/`auto` is MPI's own MPI_Allreduce (Open MPI picks its
algorithm by size); `ring` is a reduce-scatter and an all-gather around the ring of ranks (point-to-point messages,
MPI's local reduction); `hier` reduces on each machine first (ranks that share memory), allreduces among one leader
per machine, then broadcasts on each machine.
"""
from __future__ import annotations
import functools, hashlib, os, time
from typing import Any, Callable
from petagrad.device import Buffer, Device
from petagrad.device.world import comm, hosts, FIX
from petagrad.helpers import ALLREDUCE, MPI_TIMEOUT, cpu_threads
from petagrad.uop.ops import Ops

def _mpi() -> Any:
  try:
    from mpi4py import MPI
    return MPI
  except ImportError as e: raise RuntimeError(f"collectives between ranks need MPI: {FIX}") from e

@functools.cache
def _group(ranks: tuple[int, ...]) -> Any:
  """A communicator of these ranks of the world (the world itself when they are all of it)."""
  world = comm()
  if ranks == tuple(range(world.Get_size())): return world
  return world.Create_group(world.Get_group().Incl(list(ranks)))

@functools.cache
def _machine(ranks: tuple[int, ...]) -> tuple[Any, Any]:
  """(the ranks of this machine among these, the first rank of each machine among these or None on the others)."""
  c = _group(ranks)
  machine = [hosts()[r] for r in ranks]
  me = c.Get_rank()
  local = c.Split(machine.index(machine[me]), me)
  leaders = c.Split(0 if local.Get_rank() == 0 else _mpi().UNDEFINED, me)
  return local, leaders

# the number of ranks on this machine, as the MPI launchers tell each process (Open MPI, MPICH/Hydra, PMI)
_LOCAL_SIZE_ENV = ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE")

@functools.cache
def _oversubscribed() -> bool:
  """Do the ranks on this machine ask for more cores than it has (4 ranks of one thread on 2 cores)? From the launcher's
  environment, not from MPI: this is asked inside a wait, where a collective (hosts()) could deadlock with ranks that
  are not waiting."""
  local = next((int(os.environ[k]) for k in _LOCAL_SIZE_ENV if os.environ.get(k, "").isdigit()), 1)
  return local * cpu_threads() > (os.cpu_count() or 1)

def _wait(reqs: list, what: str, c: Any) -> None:
  """Wait for the requests until MPI_TIMEOUT seconds have passed; then find out who is not answering and raise."""
  MPI, start = _mpi(), time.monotonic()
  deadline, spin = start + float(MPI_TIMEOUT), start + (0.002 if _oversubscribed() else 0.05)
  # MPI moves the data of a non-blocking collective only while it is called: spin on Test for the first 50 ms (a
  # collective whose peers are there: as fast as the blocking call), then test every 100 us (peers still computing).
  # The spin yields the core between tests. With more ranks than cores it spins 2 ms only: the peer it waits for may
  # need this core, and a yield does not reliably hand it over (4 ranks on 2 cores: GPT data-parallel steps took 4-10x
  # their usual time now and then with 50 ms; with no spin at all a 1 MB allreduce ran at half the speed)
  while not MPI.Request.Testall(reqs):
    now = time.monotonic()
    if now > spin: time.sleep(1e-4)
    else: os.sched_yield()
    if now > deadline:
      dead = _not_answering(c)
      why = f"rank(s) {', '.join(map(str, dead))} did not answer (died or stopped)" if dead else \
            "every rank answers; a rank may be running a different program"
      raise RuntimeError(f"MPI rank {c.Get_rank()}: {what} did not complete within {float(MPI_TIMEOUT):g} s (MPI_TIMEOUT): {why}")

def _not_answering(c: Any, grace: float = 5.0) -> list[int]:
  """The ranks of c that do not answer a message within grace seconds (the live ranks time out at about the same time,
  and answer each other here)."""
  me, n = c.Get_rank(), c.Get_size()
  got = [bytearray(1) for _ in range(n)]
  recvs = {r: c.Irecv(got[r], source=r, tag=7777) for r in range(n) if r != me}
  for r in range(n):
    if r != me: c.Isend(b"\x01", dest=r, tag=7777)
  deadline = time.monotonic() + grace
  while time.monotonic() < deadline and not all(q.Test() for q in recvs.values()): time.sleep(0.01)
  return [r for r, q in recvs.items() if not q.Test()]

_OPS = {Ops.ADD: "SUM", Ops.MAX: "MAX", Ops.MUL: "PROD"}

def _host_view(buf: Buffer) -> memoryview | None:
  """The buffer's memory as a writable memoryview when it is host memory (CPU, PYTHON: MPI reads and writes it in
  place), else None (a GPU's: staged through a host copy). Waits for the device's queued launches (MPI then reads or
  writes the memory beside them)."""
  Device[buf.device].synchronize()
  try: mv = memoryview(buf.ensure_allocated().raw)
  except TypeError: return None
  return None if mv.readonly else mv.cast("B")[:buf.nbytes]

class Started:
  """A collective under way: its MPI requests, and what to do once they complete (copy a staged result back).
  `test` moves it along without blocking (MPI progresses a non-blocking collective only while it is called)."""
  def __init__(self, reqs: list, what: str, c: Any, done: Callable[[], None] | None = None):
    self.reqs, self.what, self.c, self.done, self.finished = reqs, what, c, done, False
  def _finish(self) -> None:
    self.finished = True
    if self.done is not None: self.done()
  def test(self) -> bool:
    if not self.finished and _mpi().Request.Testall(self.reqs): self._finish()
    return self.finished
  def wait(self) -> None:
    if self.finished: return
    _wait(self.reqs, self.what, self.c)
    self._finish()

def start_collective(coll: tuple, out: Buffer, src: Buffer) -> Started | None:
  """Start out = the collective of src's over the ranks; returns it under way (None: it has completed already, as the
  ring and hierarchical allreduces do: they are several steps). Until it completes, nothing may read out or write src."""
  kind, arg = coll
  MPI, fmt = _mpi(), src.dtype.fmt
  dst = _host_view(out)
  result = dst if dst is not None else memoryview(bytearray(out.nbytes))
  done = None if dst is not None else (lambda: out.copyin(result))   # a device buffer: the result is staged
  if kind is Ops.ALLREDUCE:
    op, ranks = arg
    c, mop = _group(ranks), getattr(MPI, _OPS[op])
    sv, choice = _host_view(src), str(ALLREDUCE.value or "auto")
    if choice in ("auto", "naive") and sv is not None:   # MPI reads src and writes out: no copy of ours
      return Started([c.Iallreduce(sv.cast(fmt), result.cast(fmt), mop)], "an allreduce", c, done)
    result[:] = sv if sv is not None else src.as_bytes()
    if choice not in ("ring", "hier") or (choice == "ring" and c.Get_size() <= 2):
      return Started([c.Iallreduce(MPI.IN_PLACE, result.cast(fmt), mop)], "an allreduce", c, done)
    if choice == "ring": _ring(c, result.cast(fmt), mop)
    else: _hierarchical(ranks, result.cast(fmt), mop)
  elif kind is Ops.ALLGATHER:
    axis, sizes, ranks = arg
    assert axis == 0, "ALLGATHER joins along the first axis (multi.py moves the axis there)"
    c = _group(ranks)
    inner = src.size // sizes[c.Get_rank()] if sizes[c.Get_rank()] else out.size // max(sum(sizes), 1)
    counts = [k * inner for k in sizes]
    displs = [sum(counts[:i]) for i in range(len(counts))]
    sv = _host_view(src)
    mine = sv if sv is not None else memoryview(bytearray(src.as_bytes()))
    return Started([c.Iallgatherv(mine.cast(fmt), (result.cast(fmt), (counts, displs)))], "an allgather", c, done)
  else: raise RuntimeError(f"unknown collective {kind}")
  if done is not None: done()
  return None

def _ring(c: Any, buf: memoryview, op: Any) -> None:
  """Reduce-scatter then all-gather around the ring: chunk k ends reduced on rank k, then travels once around."""
  n, me = c.Get_size(), c.Get_rank()
  bounds = [(len(buf) * i // n, len(buf) * (i + 1) // n) for i in range(n)]
  right, left = (me + 1) % n, (me - 1) % n
  tmp = bytearray(buf.nbytes)
  for step in range(n - 1):   # reduce-scatter: send chunk (me - step), receive chunk (me - step - 1) and add it in
    s, r = (me - step) % n, (me - step - 1) % n
    incoming = memoryview(tmp).cast(buf.format)[:bounds[r][1] - bounds[r][0]]
    _wait([c.Isend(buf[bounds[s][0]:bounds[s][1]], dest=right, tag=100 + step), c.Irecv(incoming, source=left, tag=100 + step)],
          "a ring allreduce", c)
    op.Reduce_local(incoming, buf[bounds[r][0]:bounds[r][1]])
  for step in range(n - 1):   # all-gather: the reduced chunk (me + 1 - step) moves right
    s, r = (me + 1 - step) % n, (me - step) % n
    _wait([c.Isend(buf[bounds[s][0]:bounds[s][1]], dest=right, tag=200 + step), c.Irecv(buf[bounds[r][0]:bounds[r][1]], source=left, tag=200 + step)],
          "a ring allreduce", c)

def _hierarchical(ranks: tuple[int, ...], buf: memoryview, op: Any) -> None:
  """Reduce on each machine to its first rank, allreduce among those, broadcast on each machine."""
  MPI = _mpi()
  local, leaders = _machine(ranks)
  if local.Get_size() > 1:
    first = local.Get_rank() == 0
    _wait([local.Ireduce(MPI.IN_PLACE if first else buf, buf if first else None, op, root=0)], "a machine's reduce", local)
  if leaders != MPI.COMM_NULL and leaders.Get_size() > 1: _wait([leaders.Iallreduce(MPI.IN_PLACE, buf, op)], "the leaders' allreduce", leaders)
  if local.Get_size() > 1: _wait([local.Ibcast(buf, root=0)], "a machine's broadcast", local)

def agree(program: tuple, collectives: list[tuple], ranks: tuple[int, ...]) -> None:
  """Raise unless every rank is about to run the same program (the structure of the graph being realized: its ops,
  shapes, dtypes and devices) and the same collectives (kind, arguments, shape, dtype, in order)."""
  c = _group(ranks)
  digest = bytearray(hashlib.sha256(repr((program, collectives)).encode()).digest()[:16])
  everyone = bytearray(16 * c.Get_size())
  _wait([c.Iallgather(digest, everyone)], "the check that the ranks run the same program", c)
  differ = [r for r in range(c.Get_size()) if everyone[16 * r:16 * r + 16] != digest]
  if differ:
    raise RuntimeError(f"MPI rank {c.Get_rank()}: rank(s) {', '.join(map(str, differ))} are about to run other collectives than this rank "
                       f"({len(collectives)}: {collectives[:3]}{' ...' if len(collectives) > 3 else ''}): the ranks must run the same program "
                       "on tensors of the same shapes")
