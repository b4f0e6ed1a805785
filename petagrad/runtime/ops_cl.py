"""CL device: OpenCL through ctypes on libOpenCL.so.1 (no Python package needed).

`CL` is the first OpenCL device of all platforms, `CL:1` the second, ... Kernels are OpenCL C (renderer/opencl.py),
built by the driver; the built binary is the compiler's artifact, so the disk cache spares a new process the build
(PoCL takes 1-3 s per kernel cold). Launches queue up in order on one command queue and return at once; a copy back to
the host waits for what came before it, and `Device["CL"].synchronize()` waits for everything (DEBUG=2 and BEAM do,
to time kernels).
"""
from __future__ import annotations
import ctypes, functools
from typing import Any
from petagrad.device import Allocator, Compiler, CompileError, DeviceSpec, Program, checked_launch, device_index, host_memory
from petagrad.helpers import SANITIZE
from petagrad.renderer.opencl import OpenCLRenderer
from petagrad.dtype import dtypes

FIX = "apt-get install ocl-icd-libopencl1 pocl-opencl-icd (PoCL: an OpenCL device on the CPU), or a GPU vendor's OpenCL driver"
ERRORS = {-1: "DEVICE_NOT_FOUND", -4: "MEM_OBJECT_ALLOCATION_FAILURE", -5: "OUT_OF_RESOURCES", -6: "OUT_OF_HOST_MEMORY",
          -11: "BUILD_PROGRAM_FAILURE", -30: "INVALID_VALUE", -33: "INVALID_DEVICE", -36: "INVALID_COMMAND_QUEUE",
          -38: "INVALID_MEM_OBJECT", -45: "INVALID_PROGRAM_EXECUTABLE", -46: "INVALID_KERNEL_NAME", -48: "INVALID_KERNEL",
          -51: "INVALID_ARG_SIZE", -52: "INVALID_KERNEL_ARGS", -54: "INVALID_WORK_GROUP_SIZE", -61: "INVALID_BUFFER_SIZE",
          -1001: "PLATFORM_NOT_FOUND_KHR"}
OUT_OF_MEMORY = (-4, -5, -6, -61)
vp, u32, sz = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_size_t
# the functions used: name -> (return type, argument types); every one returns a status or takes a pointer to one
SIGNATURES = {
  "clGetPlatformIDs": (ctypes.c_int, [u32, vp, ctypes.POINTER(u32)]),
  "clGetDeviceIDs": (ctypes.c_int, [vp, ctypes.c_uint64, u32, vp, ctypes.POINTER(u32)]),
  "clGetDeviceInfo": (ctypes.c_int, [vp, u32, sz, vp, ctypes.POINTER(sz)]),
  "clCreateContext": (vp, [vp, u32, vp, vp, vp, ctypes.POINTER(ctypes.c_int)]),
  "clCreateCommandQueue": (vp, [vp, vp, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int)]),
  "clCreateBuffer": (vp, [vp, ctypes.c_uint64, sz, vp, ctypes.POINTER(ctypes.c_int)]),
  "clReleaseMemObject": (ctypes.c_int, [vp]),
  "clEnqueueWriteBuffer": (ctypes.c_int, [vp, vp, u32, sz, sz, vp, u32, vp, vp]),
  "clEnqueueReadBuffer": (ctypes.c_int, [vp, vp, u32, sz, sz, vp, u32, vp, vp]),
  "clCreateProgramWithSource": (vp, [vp, u32, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(sz), ctypes.POINTER(ctypes.c_int)]),
  "clCreateProgramWithBinary": (vp, [vp, u32, vp, ctypes.POINTER(sz), ctypes.POINTER(ctypes.c_char_p), vp, ctypes.POINTER(ctypes.c_int)]),
  "clBuildProgram": (ctypes.c_int, [vp, u32, vp, ctypes.c_char_p, vp, vp]),
  "clGetProgramBuildInfo": (ctypes.c_int, [vp, vp, u32, sz, vp, ctypes.POINTER(sz)]),
  "clGetProgramInfo": (ctypes.c_int, [vp, u32, sz, vp, ctypes.POINTER(sz)]),
  "clReleaseProgram": (ctypes.c_int, [vp]),
  "clCreateKernel": (vp, [vp, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]),
  "clSetKernelArg": (ctypes.c_int, [vp, u32, sz, vp]),
  "clEnqueueNDRangeKernel": (ctypes.c_int, [vp, vp, u32, vp, ctypes.POINTER(sz), ctypes.POINTER(sz), u32, vp, vp]),
  "clFinish": (ctypes.c_int, [vp]),
}
DEVICE_NAME, DEVICE_VERSION, DRIVER_VERSION, MAX_WORK_GROUP, DOUBLE_FP_CONFIG = 0x102B, 0x102F, 0x102D, 0x1004, 0x1032
BUILD_LOG, BINARY_SIZES, BINARIES = 0x1183, 0x1165, 0x1166

@functools.cache
def opencl() -> Any:
  """libOpenCL.so.1 with the signatures above; RuntimeError naming the fix when it is missing."""
  try: lib = ctypes.CDLL("libOpenCL.so.1")
  except OSError as e: raise RuntimeError(f"device CL: libOpenCL.so.1 not found ({e}): {FIX}") from None
  for name, (res, args) in SIGNATURES.items():
    f = getattr(lib, name)
    f.restype, f.argtypes = res, args
  return lib

def check(status: int, what: str, device: str) -> None:
  if status == 0: return
  msg = f"device {device}: {what} failed: CL_{ERRORS.get(status, 'ERROR')} ({status})"
  if status in OUT_OF_MEMORY: raise MemoryError(msg + " (out of device memory?)")
  raise RuntimeError(msg)

def all_devices() -> list[Any]:
  """Every OpenCL device of every platform, in order (CL:i is the i-th)."""
  cl, n = opencl(), u32()
  if cl.clGetPlatformIDs(0, None, ctypes.byref(n)) != 0 or n.value == 0: return []
  plats = (vp * n.value)()
  cl.clGetPlatformIDs(n.value, plats, None)
  out = []
  for p in plats:
    if cl.clGetDeviceIDs(p, 0xFFFFFFFF, 0, None, ctypes.byref(n)) != 0 or n.value == 0: continue
    devs = (vp * n.value)()
    cl.clGetDeviceIDs(p, 0xFFFFFFFF, n.value, devs, None)
    out += list(devs)
  return out

def device_info(dev: Any, param: int) -> str:
  buf, n = ctypes.create_string_buffer(1024), sz()
  opencl().clGetDeviceInfo(dev, param, 1024, buf, ctypes.byref(n))
  return buf.value.decode(errors="replace")

class CLContext:
  """One OpenCL device: its context and in-order command queue."""
  def __init__(self, name: str):
    devs = all_devices()
    idx = device_index(name, len(devs), "OpenCL devices", f"none ({FIX})")
    cl, err = opencl(), ctypes.c_int()
    self.name, self.dev = name, devs[idx]
    self.ctx = cl.clCreateContext(None, 1, ctypes.byref(vp(self.dev)), None, None, ctypes.byref(err))
    check(err.value, "clCreateContext", name)
    self.queue = cl.clCreateCommandQueue(self.ctx, self.dev, 0, ctypes.byref(err))
    check(err.value, "clCreateCommandQueue", name)
    self.label = f"{device_info(self.dev, DEVICE_NAME)} ({device_info(self.dev, DEVICE_VERSION)}, driver {device_info(self.dev, DRIVER_VERSION)})"
    mwg = sz()
    cl.clGetDeviceInfo(self.dev, MAX_WORK_GROUP, ctypes.sizeof(sz), ctypes.byref(mwg), None)
    self.max_work_group = mwg.value
    fp64 = ctypes.c_uint64()
    self.has_fp64 = cl.clGetDeviceInfo(self.dev, DOUBLE_FP_CONFIG, 8, ctypes.byref(fp64), None) == 0 and fp64.value != 0
  def finish(self) -> None: check(opencl().clFinish(self.queue), "clFinish", self.name)

class CLAllocator(Allocator):
  def __init__(self, ctx: CLContext): self.ctx = ctx
  def alloc(self, nbytes: int) -> Any:
    err = ctypes.c_int()
    mem = opencl().clCreateBuffer(self.ctx.ctx, 1, max(nbytes, 1), None, ctypes.byref(err))   # 1: CL_MEM_READ_WRITE
    check(err.value, f"allocating {nbytes} bytes", self.ctx.name)
    return vp(mem)
  def free(self, raw: Any, nbytes: int) -> None: opencl().clReleaseMemObject(raw)
  def copyin(self, dest: Any, src: memoryview) -> None:
    if not src.nbytes: return
    status = opencl().clEnqueueWriteBuffer(self.ctx.queue, dest, 1, 0, src.nbytes, host_memory(src), 0, None, None)
    check(status, "copy to the device", self.ctx.name)
  def copyout(self, dest: memoryview, src: Any) -> None:
    if not dest.nbytes: return
    status = opencl().clEnqueueReadBuffer(self.ctx.queue, src, 1, 0, dest.nbytes, host_memory(dest), 0, None, None)
    check(status, "copy from the device", self.ctx.name)

def build(ctx: CLContext, prog: Any, src: str, name: str) -> None:
  """Build a program (from source or from a binary) for the device; CompileError with the build log and the source."""
  cl = opencl()
  status = cl.clBuildProgram(prog, 1, ctypes.byref(vp(ctx.dev)), b"-cl-std=CL1.2", None, None)
  if status != 0:
    n = sz()
    cl.clGetProgramBuildInfo(prog, ctx.dev, BUILD_LOG, 0, None, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value + 1)
    cl.clGetProgramBuildInfo(prog, ctx.dev, BUILD_LOG, n.value, log, None)
    cl.clReleaseProgram(prog)
    raise CompileError(f"device {ctx.name}: building kernel {name} failed (CL_{ERRORS.get(status, 'ERROR')}):\n"
                       f"{log.value.decode(errors='replace').strip()}\n--- source ---\n{src}")

class CLCompiler(Compiler):
  """OpenCL C -> the driver's program binary."""
  def __init__(self, ctx: CLContext):
    self.ctx, self.cache_key = ctx, ctx.label
  def compile(self, src: str, name: str) -> bytes:
    cl, err, data = opencl(), ctypes.c_int(), src.encode()
    prog = cl.clCreateProgramWithSource(self.ctx.ctx, 1, ctypes.byref(ctypes.c_char_p(data)), ctypes.byref(sz(len(data))), ctypes.byref(err))
    check(err.value, f"creating kernel {name}", self.ctx.name)
    build(self.ctx, prog, src, name)
    n = sz()
    check(cl.clGetProgramInfo(prog, BINARY_SIZES, ctypes.sizeof(sz), ctypes.byref(n), None), "reading a program binary", self.ctx.name)
    binary = ctypes.create_string_buffer(n.value)
    ptrs = (vp * 1)(ctypes.cast(binary, vp))
    check(cl.clGetProgramInfo(prog, BINARIES, ctypes.sizeof(vp), ptrs, None), "reading a program binary", self.ctx.name)
    cl.clReleaseProgram(prog)
    return binary.raw

class CLProgram(Program):
  def __init__(self, ctx: CLContext, name: str, lib: bytes, meta: Any = None):
    super().__init__(name, lib, meta)
    cl, err, status = opencl(), ctypes.c_int(), ctypes.c_int()
    self.ctx, self.groups, self.local = ctx, *(meta or (1, 1))
    self.prog = cl.clCreateProgramWithBinary(ctx.ctx, 1, ctypes.byref(vp(ctx.dev)), ctypes.byref(sz(len(lib))),
                                             ctypes.byref(ctypes.c_char_p(lib)), ctypes.byref(status), ctypes.byref(err))
    check(err.value or status.value, f"loading kernel {name}", ctx.name)
    build(ctx, self.prog, "(from its binary)", name)
    self.kernel = cl.clCreateKernel(self.prog, name.encode(), ctypes.byref(err))
    check(err.value, f"loading kernel {name}", ctx.name)
    # built with SANITIZE=1 (the flag keys every program cache): takes the buffers' element counts and an error record
    self.sanitized = bool(SANITIZE)
    if self.local > ctx.max_work_group:
      raise RuntimeError(f"device {ctx.name}: kernel {name} needs work-groups of {self.local} threads, the device allows {ctx.max_work_group}")
  def __call__(self, *bufs: Any, sizes: list[int] | None = None) -> None:
    if self.sanitized: checked_launch(self.name, CLAllocator(self.ctx), self._launch, list(bufs), sizes)
    else: self._launch(bufs)
  def _launch(self, bufs: Any) -> None:
    cl = opencl()
    for i, b in enumerate(bufs):
      check(cl.clSetKernelArg(self.kernel, i, ctypes.sizeof(vp), ctypes.byref(b)), f"argument {i} of {self.name}", self.ctx.name)
    check(cl.clEnqueueNDRangeKernel(self.ctx.queue, self.kernel, 1, None, ctypes.byref(sz(self.groups * self.local)), ctypes.byref(sz(self.local)),
                                    0, None, None), f"launching {self.name}", self.ctx.name)

def make_device(name: str) -> DeviceSpec:
  ctx = CLContext(name)
  renderer = OpenCLRenderer()
  renderer.max_local = min(renderer.max_local, ctx.max_work_group)
  renderer.device = name
  if not ctx.has_fp64: renderer.unsupported = {dtypes.float64: "no cl_khr_fp64: use float32"}
  return DeviceSpec(name, CLAllocator(ctx), CLCompiler(ctx), functools.partial(CLProgram, ctx), renderer, ctx.finish)
