"""NULL device: renders and compiles, runs nothing. For testing the pipeline and counting kernels.

`NULL` renders C and compiles nothing; `NULL:CUDA` renders CUDA C and compiles it to PTX with NVRTC (checked by
ptxas) for CUDA_ARCH; `NULL:HIP` renders HIP and compiles it to an AMDGPU code object with clang for HIP_ARCH. So a
GPU's kernels are built and checked on a machine without one. Memory reads back as zeros.
"""
from __future__ import annotations
from typing import Any
from petagrad.device import Allocator, Compiler, DeviceSpec, Program
from petagrad.helpers import CUDA_ARCH, HIP_ARCH

class NullAllocator(Allocator):
  def alloc(self, nbytes: int) -> Any: return nbytes
  def copyin(self, dest: Any, src: memoryview) -> None: pass
  def copyout(self, dest: memoryview, src: Any) -> None: dest[:] = bytes(dest.nbytes)   # reads give zeros

class NullProgram(Program):
  def __call__(self, *bufs) -> None: pass

def _c() -> tuple[Any, Compiler]:
  from petagrad.renderer.cstyle import CRenderer
  return CRenderer(), Compiler()
def _cuda() -> tuple[Any, Compiler]:
  from petagrad.renderer.cuda import CUDARenderer
  from petagrad.runtime.compile_cuda import NVRTCCompiler
  return CUDARenderer(str(CUDA_ARCH)), NVRTCCompiler(str(CUDA_ARCH), check=True)
def _hip() -> tuple[Any, Compiler]:
  from petagrad.renderer.cuda import HIPRenderer
  from petagrad.runtime.compile_hip import HIPCompiler
  return HIPRenderer(), HIPCompiler(str(HIP_ARCH))

TARGETS = {"": _c, "CUDA": _cuda, "HIP": _hip}   # what follows "NULL:" -> (renderer, compiler)

def make_device(name: str) -> DeviceSpec:
  target = name.partition(":")[2]
  if target not in TARGETS:
    raise RuntimeError(f"device {name}: no such compile-only target; known: NULL, " + ", ".join(f"NULL:{t}" for t in TARGETS if t))
  renderer, compiler = TARGETS[target]()
  return DeviceSpec(name, NullAllocator(), compiler, NullProgram, renderer)
