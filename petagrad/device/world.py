"""The MPI world: this process's rank among the processes `mpirun` started, which ranks share a machine, and the
device names that span them (docs/multi.md).

A device of another process is named `RANK:<r>/<device>` ("RANK:1/CPU": the CPU device of rank 1). On rank r,
`RANK:r/CPU` is this process's CPU device (its buffers and kernels are CPU's); the devices of other ranks are never
allocated or launched here: each rank computes the pieces of a tensor that live on its own devices, and the ranks
exchange data only through MPI collectives (runtime/mpi.py), which every rank calls in the same order because every
rank runs the same program.

MPI (mpi4py over the system's Open MPI) is an optional extra: `pip install -e ".[mpi]"`. Nothing here imports it
until a device of another rank is named or the world's size is asked for under mpirun.

>>> from petagrad.device.world import rank_of, local_name
>>> rank_of("RANK:1/CPU"), local_name("RANK:1/CPU"), rank_of("CPU")
(1, 'CPU', None)
"""
from __future__ import annotations
import functools, os
from typing import Any

FIX = 'pip install -e ".[mpi]" (mpi4py) and apt-get install openmpi-bin libopenmpi-dev; run with mpirun -np N python ...'
# environment variables an MPI launcher sets in each process it starts (Open MPI, MPICH/Hydra, Slurm's PMI)
_LAUNCHER_ENV = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")

def under_mpi() -> bool:
  """Was this process started by an MPI launcher?"""
  return any(k in os.environ for k in _LAUNCHER_ENV)

@functools.cache
def comm() -> Any:
  """MPI.COMM_WORLD, with errors raised as Python exceptions (not aborting the job)."""
  try: from mpi4py import MPI
  except ImportError as e: raise RuntimeError(f"devices of other ranks need MPI: {FIX}") from e
  c = MPI.COMM_WORLD
  c.Set_errhandler(MPI.ERRORS_RETURN)
  return c

def rank() -> int:
  """This process's rank (0 without MPI)."""
  return comm().Get_rank() if under_mpi() else 0

def size() -> int:
  """The number of ranks (1 without MPI)."""
  return comm().Get_size() if under_mpi() else 1

@functools.cache
def hosts() -> tuple[int, ...]:
  """For each rank, a number naming its machine (ranks that share memory share it: MPI's COMM_TYPE_SHARED split);
  the numbers are the lowest rank on each machine."""
  if not under_mpi(): return (0,)
  from mpi4py import MPI
  node = comm().Split_type(MPI.COMM_TYPE_SHARED)
  leader = node.allreduce(rank(), op=MPI.MIN)
  return tuple(comm().allgather(leader))

def rank_of(device: str) -> int | None:
  """r of "RANK:r/..." (None: a device of this process named without a rank)."""
  if not device.startswith("RANK:"): return None
  return int(device[5:].split("/", 1)[0])

def local_name(device: str) -> str:
  """The device's name inside its own process: "RANK:1/CPU" -> "CPU"."""
  return device.split("/", 1)[1] if device.startswith("RANK:") else device

def is_local(device: str) -> bool:
  """Does this process hold the device's buffers and run its kernels?"""
  r = rank_of(device)
  return r is None or r == rank()

def devices(local: tuple[str, ...] | list[str] = ("CPU",)) -> tuple[str, ...]:
  """The given devices of every rank, rank by rank: what a tensor spanning the whole job is sharded over.

  >>> devices(("CPU",)) if size() == 1 else None
  ('RANK:0/CPU',)
  """
  return tuple(f"RANK:{r}/{d}" for r in range(size()) for d in local)
