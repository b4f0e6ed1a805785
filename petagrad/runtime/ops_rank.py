"""RANK:<r>/<device>: a device of MPI rank r (device/world.py, docs/multi.md). On rank r it is that device itself
(its allocator, compiler, launcher and renderer under this name); on the other ranks it holds no memory and runs
nothing: those ranks never compute its pieces, they only know their shapes."""
from __future__ import annotations
from typing import Any
from petagrad.device import Allocator, Device, DeviceSpec
from petagrad.device.world import is_local, local_name, rank, rank_of, size

class RemoteAllocator(Allocator):
  counted = False
  def __init__(self, name: str): self.name = name
  def alloc(self, nbytes: int) -> Any:
    raise RuntimeError(f"device {self.name} belongs to rank {rank_of(self.name)}: this process (rank {rank()}) holds none of its memory")

def make_device(name: str) -> DeviceSpec:
  if (r := rank_of(name)) is not None and r >= size():
    raise RuntimeError(f"device {name} does not exist: there are {size()} ranks" + ("" if size() > 1 else " (run under mpirun for more)"))
  inner = Device[local_name(name)]
  if is_local(name): return DeviceSpec(name, inner.allocator, inner.compiler, inner.program, inner.renderer, inner.sync)
  return DeviceSpec(name, RemoteAllocator(name), inner.compiler, inner.program, inner.renderer)
