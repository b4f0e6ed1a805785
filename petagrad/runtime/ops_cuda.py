"""CUDA device: the driver API (libcuda.so.1, installed with the GPU's driver) through ctypes; kernels are CUDA C
(renderer/cuda.py) compiled to PTX by NVRTC (runtime/compile_cuda.py) for the GPU's architecture, and loaded by the
driver (or, where the driver is older than the PTX, assembled by ptxas first).

`CUDA` is GPU 0, `CUDA:1` GPU 1. Launches queue up in order on the default stream and return at once; a copy back to
the host waits for them, and `Device["CUDA"].synchronize()` waits for everything (DEBUG=2 and BEAM do, to time kernels).
"""
from __future__ import annotations
import ctypes, functools, shutil
from typing import Any
from petagrad.device import Allocator, DeviceSpec, Program, checked_launch, device_index, host_memory
from petagrad.helpers import CUDA_GRAPH, DEBUG, SANITIZE
from petagrad.renderer.cuda import CUDARenderer
from petagrad.runtime.compile_cuda import NVRTCCompiler, ptxas

FIX = "libcuda.so.1 comes with the NVIDIA driver: install the driver for this GPU (nvidia-smi should list it)"
OUT_OF_MEMORY, UNSUPPORTED_PTX = 2, 222
MAX_THREADS, CC_MAJOR, CC_MINOR = 1, 75, 76   # CUdevice_attribute values
u64, vp, ci, cu32 = ctypes.c_uint64, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint

class KernelNodeParams(ctypes.Structure):
  """CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h): one kernel launch of a CUDA graph."""
  _fields_ = [("func", vp), ("grid", cu32 * 3), ("block", cu32 * 3), ("shared_bytes", cu32), ("params", vp), ("extra", vp),
              ("kern", vp), ("ctx", vp)]

@functools.cache
def libcuda() -> Any:
  try: lib = ctypes.CDLL("libcuda.so.1")
  except OSError as e: raise RuntimeError(f"device CUDA: libcuda.so.1 not found ({e}): {FIX}") from None
  lib.cuMemcpyHtoD_v2.argtypes = [u64, vp, ctypes.c_size_t]
  lib.cuMemcpyDtoH_v2.argtypes = [vp, u64, ctypes.c_size_t]
  lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(u64), ctypes.c_size_t]
  lib.cuMemFree_v2.argtypes = [u64]
  lib.cuLaunchKernel.argtypes = [vp, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                 vp, vp, vp]
  if hasattr(lib, "cuGraphAddKernelNode_v2"):   # (CUDA 12 and later drivers: CUDA graphs for the JIT, CUDAGraph)
    lib.cuGraphAddKernelNode_v2.argtypes = [ctypes.POINTER(vp), vp, ctypes.POINTER(vp), ctypes.c_size_t, ctypes.POINTER(KernelNodeParams)]
    lib.cuGraphInstantiateWithFlags.argtypes = [ctypes.POINTER(vp), vp, ctypes.c_ulonglong]
    lib.cuGraphExecKernelNodeSetParams_v2.argtypes = [vp, vp, ctypes.POINTER(KernelNodeParams)]
    lib.cuGraphLaunch.argtypes = [vp, vp]
  check(lib.cuInit(0), "cuInit", "CUDA", lib)
  return lib

def check(status: int, what: str, device: str, lib: Any = None) -> None:
  if status == 0: return
  s = ctypes.c_char_p()
  (lib or libcuda()).cuGetErrorString(status, ctypes.byref(s))
  msg = f"device {device}: {what} failed: {(s.value or b'unknown error').decode()} ({status})"
  if status == OUT_OF_MEMORY: raise MemoryError(msg)
  raise RuntimeError(msg)

class CUDAContext:
  """One GPU: its primary context, made current on the calling thread before each driver call that needs it."""
  def __init__(self, name: str):
    lib, n = libcuda(), ci()
    check(lib.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount", name)
    idx = device_index(name, n.value, "GPUs")
    self.name, self.dev, self.ctx = name, ci(), vp()
    check(lib.cuDeviceGet(ctypes.byref(self.dev), idx), "cuDeviceGet", name)
    check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.ctx), self.dev), "creating a context", name)
    major, minor, threads = ci(), ci(), ci()
    for v, attr in ((major, CC_MAJOR), (minor, CC_MINOR), (threads, MAX_THREADS)): lib.cuDeviceGetAttribute(ctypes.byref(v), attr, self.dev)
    self.arch, self.max_threads = f"sm_{major.value}{minor.value}", threads.value
    label = ctypes.create_string_buffer(256)
    lib.cuDeviceGetName(label, 256, self.dev)
    self.label = f"{label.value.decode()} ({self.arch})"
  def current(self) -> Any:
    check(libcuda().cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent", self.name)
    return libcuda()
  def synchronize(self) -> None: check(self.current().cuCtxSynchronize(), "synchronizing", self.name)

class CUDAAllocator(Allocator):
  def __init__(self, ctx: CUDAContext): self.ctx = ctx
  def alloc(self, nbytes: int) -> Any:
    ptr = u64()
    check(self.ctx.current().cuMemAlloc_v2(ctypes.byref(ptr), max(nbytes, 1)), f"allocating {nbytes} bytes", self.ctx.name)
    return ptr
  def free(self, raw: Any, nbytes: int) -> None: self.ctx.current().cuMemFree_v2(raw)
  def copyin(self, dest: Any, src: memoryview) -> None:
    if not src.nbytes: return
    check(self.ctx.current().cuMemcpyHtoD_v2(dest, host_memory(src), src.nbytes), "copy to the device", self.ctx.name)
  def copyout(self, dest: memoryview, src: Any) -> None:
    if not dest.nbytes: return
    check(self.ctx.current().cuMemcpyDtoH_v2(host_memory(dest), src, dest.nbytes), "copy from the device", self.ctx.name)

class CUDAProgram(Program):
  def __init__(self, ctx: CUDAContext, name: str, lib: bytes, meta: Any = None):
    super().__init__(name, lib, meta)
    self.ctx, (self.groups, self.local) = ctx, meta or (1, 1)
    if self.local > ctx.max_threads:
      raise RuntimeError(f"device {ctx.name}: kernel {name} needs blocks of {self.local} threads, the GPU allows {ctx.max_threads}")
    if self.groups >= 1 << 31:
      raise RuntimeError(f"device {ctx.name}: kernel {name} needs {self.groups} blocks, more than a grid's 2**31 - 1")
    cu, self.module, self.fn = ctx.current(), vp(), vp()
    image = lib + b"\0"
    status = cu.cuModuleLoadData(ctypes.byref(self.module), image)
    if status == UNSUPPORTED_PTX and shutil.which("ptxas"):   # a driver older than NVRTC's PTX: assemble it here
      status = cu.cuModuleLoadData(ctypes.byref(self.module), ptxas(lib, ctx.arch, name))
    check(status, f"loading kernel {name}", ctx.name)
    check(cu.cuModuleGetFunction(ctypes.byref(self.fn), self.module, name.encode()), f"finding kernel {name}", ctx.name)
    self.sanitized = bool(SANITIZE)   # built with SANITIZE=1 (the flag keys every program cache): bounds-checked launches
  def __call__(self, *bufs: Any, sizes: list[int] | None = None) -> None:
    if self.sanitized: checked_launch(self.name, CUDAAllocator(self.ctx), self._launch, list(bufs), sizes)
    else: self._launch(bufs)
  def _launch(self, bufs: Any) -> None:
    _, params = _params([b.value for b in bufs])   # (the driver reads the parameters at the call)
    self.start(self.ctx.current(), params)
  def start(self, cu: Any, params: Any) -> None:
    check(cu.cuLaunchKernel(self.fn, self.groups, 1, 1, self.local, 1, 1, 0, None, params, None), f"launching {self.name}", self.ctx.name)

def _params(values: list[int]) -> tuple[Any, Any]:
  """A launch's parameters: the buffers' addresses (u64s) and the array of pointers to them that cuLaunchKernel reads."""
  args = (u64 * max(len(values), 1))(*values)
  return args, (vp * max(len(values), 1))(*[ctypes.addressof(args) + 8 * i for i in range(len(values))])

class CUDALaunchList:
  """A JIT replay's kernels launched back to back from parameter arrays built once (DeviceSpec.launch_list): one driver
  call per kernel and nothing else. `set(i, j, buf)` points kernel i's parameter j at buf (the array the driver reads
  at the next launch)."""
  def __init__(self, ctx: CUDAContext, progs: list[CUDAProgram], bufs: list[list[Any]]):
    self.ctx, self.progs = ctx, progs
    self.args, self.params = zip(*(_params([x.raw.value for x in b]) for b in bufs))
  def set(self, i: int, j: int, buf: Any) -> None: self.args[i][j] = buf.raw.value
  def __call__(self) -> bool:
    cu = self.ctx.current()
    for p, params in zip(self.progs, self.params): p.start(cu, params)
    return True

class CUDAGraph(CUDALaunchList):
  """The launch list as one CUDA graph (CUDA_GRAPH=1): the kernels are a chain of graph nodes, in capture order, and a
  replay is one cuGraphLaunch. The driver copies a node's parameters when the node is made or updated, so a `set`
  that changes a kernel's buffer updates that node (cuGraphExecKernelNodeSetParams) before the next launch."""
  def __init__(self, ctx: CUDAContext, progs: list[CUDAProgram], bufs: list[list[Any]]):
    super().__init__(ctx, progs, bufs)
    cu, self.graph, self.exec = ctx.current(), vp(), vp()
    check(cu.cuGraphCreate(ctypes.byref(self.graph), 0), "making a CUDA graph", ctx.name)
    self.nodes, self.changed = [vp() for _ in progs], set()
    self.node_params = [KernelNodeParams(p.fn, (cu32 * 3)(p.groups, 1, 1), (cu32 * 3)(p.local, 1, 1), 0, ctypes.cast(params, vp))
                        for p, params in zip(progs, self.params)]
    for i, (node, params) in enumerate(zip(self.nodes, self.node_params)):
      after = (vp * 1)(self.nodes[i - 1]) if i else None   # each kernel waits for the one before, as on a stream
      check(cu.cuGraphAddKernelNode_v2(ctypes.byref(node), self.graph, after, 1 if i else 0, ctypes.byref(params)),
            f"adding {progs[i].name} to a CUDA graph", ctx.name)
    check(cu.cuGraphInstantiateWithFlags(ctypes.byref(self.exec), self.graph, 0), "instantiating a CUDA graph", ctx.name)
  def set(self, i: int, j: int, buf: Any) -> None:
    if self.args[i][j] != buf.raw.value: self.changed.add(i)
    super().set(i, j, buf)
  def __call__(self) -> bool:
    cu = self.ctx.current()
    for i in self.changed:
      check(cu.cuGraphExecKernelNodeSetParams_v2(self.exec, self.nodes[i], ctypes.byref(self.node_params[i])),
            f"updating {self.progs[i].name} in a CUDA graph", self.ctx.name)
    self.changed.clear()
    check(cu.cuGraphLaunch(self.exec, None), f"launching a CUDA graph of {len(self.progs)} kernels", self.ctx.name)
    return True
  def __del__(self) -> None:
    try:
      if self.exec.value: libcuda().cuGraphExecDestroy(self.exec)
      if self.graph.value: libcuda().cuGraphDestroy(self.graph)
    except Exception: pass   # (at interpreter exit the driver may be gone)

def make_device(name: str) -> DeviceSpec:
  ctx = CUDAContext(name)
  renderer = CUDARenderer(ctx.arch)
  renderer.max_local = min(renderer.max_local, ctx.max_threads)
  def launch_list(progs: list[Any], bufs: list[list[Any]]) -> CUDALaunchList | None:   # (bounds-checked kernels launch one by one)
    if not progs or any(p.sanitized for p in progs): return None
    if CUDA_GRAPH and hasattr(libcuda(), "cuGraphAddKernelNode_v2"):
      try: return CUDAGraph(ctx, progs, bufs)
      except RuntimeError as e:   # (the replay still works, a launch at a time)
        if DEBUG >= 1: print(f"{name}: no CUDA graph for this JIT capture ({e}); launching its kernels one by one")
    return CUDALaunchList(ctx, progs, bufs)
  return DeviceSpec(name, CUDAAllocator(ctx), NVRTCCompiler(ctx.arch), functools.partial(CUDAProgram, ctx), renderer, ctx.synchronize,
                    launch_list)
