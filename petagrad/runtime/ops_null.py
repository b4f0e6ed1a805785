"""NULL device: renders and compiles (to nothing), runs nothing. For testing the pipeline and counting kernels."""
from __future__ import annotations
from typing import Any
from petagrad.device import Allocator, Compiler, DeviceSpec, Program
from petagrad.renderer.cstyle import CRenderer

class NullAllocator(Allocator):
  def alloc(self, nbytes: int) -> Any: return nbytes
  def copyin(self, dest: Any, src: memoryview) -> None: pass
  def copyout(self, dest: memoryview, src: Any) -> None: dest[:] = bytes(dest.nbytes)   # reads give zeros

class NullProgram(Program):
  def __call__(self, *bufs) -> None: pass

def make_device(name: str) -> DeviceSpec: return DeviceSpec(name, NullAllocator(), Compiler(), NullProgram, CRenderer())
