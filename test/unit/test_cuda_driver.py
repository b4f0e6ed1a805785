"""The CUDA runtime (runtime/ops_cuda.py) against a stand-in for the driver library: no GPU runs here, so this checks
the Python side of every driver call it makes (arguments, pointers, status handling, error messages) with host memory
in place of the GPU's. Kernels are real: NVRTC compiles them (skipped without it); the stand-in records launches
instead of running them. bench/gpu_check.sh runs the real thing on a GPU."""
from __future__ import annotations
import ctypes, json, os, re, subprocess, sys
import pytest
from petagrad.helpers import Context
from petagrad.runtime import ops_cuda
from petagrad.runtime.compile_cuda import NVRTCCompiler

ERRORS = {2: b"out of memory", 218: b"a PTX JIT compilation failed", 700: b"an illegal memory access was encountered"}

class FakeDriver:
  """libcuda.so.1's functions that ops_cuda calls, on host memory. Pointer arguments arrive as ctypes.byref(x) (x in
  ._obj) or as the u64 handles ops_cuda keeps; statuses are the driver's codes."""
  def __init__(self, gpus: int = 1, memory: int = 1 << 20, max_threads: int = 1024, cc: tuple[int, int] = (9, 0)):
    self.gpus, self.memory, self.max_threads, self.cc = gpus, memory, max_threads, cc
    self.blocks: dict[int, ctypes.Array] = {}
    self.launches: list[tuple] = []
    self.images: list[bytes] = []
    self.functions: dict[int, tuple[str, int]] = {}   # handle -> (kernel name, its parameter count, from the PTX)
    self.fail: dict[str, int] = {}   # function name -> status it returns
    self.graphs: dict[int, list[dict]] = {}   # graph handle -> its kernel nodes
    self.execs: dict[int, list[dict]] = {}    # executable graph handle -> its own copy of the nodes
    self.destroyed: list[int] = []
  def _status(self, fn: str) -> int: return self.fail.get(fn, 0)
  def cuInit(self, flags): return self._status("cuInit")
  def cuGetErrorString(self, status, out): out._obj.value = ERRORS.get(status, b"unknown"); return 0
  def cuDeviceGetCount(self, n): n._obj.value = self.gpus; return 0
  def cuDeviceGet(self, dev, i): dev._obj.value = i; return 0
  def cuDevicePrimaryCtxRetain(self, ctx, dev): ctx._obj.value = 0x1000 + dev.value; return 0
  def cuDeviceGetAttribute(self, out, attr, dev):
    out._obj.value = {ops_cuda.CC_MAJOR: self.cc[0], ops_cuda.CC_MINOR: self.cc[1], ops_cuda.MAX_THREADS: self.max_threads}[attr]; return 0
  def cuDeviceGetName(self, buf, n, dev): buf.value = b"Stand-in H200"; return 0
  def cuCtxSetCurrent(self, ctx): return 0
  def cuCtxSynchronize(self): return self._status("cuCtxSynchronize")
  def cuMemAlloc_v2(self, ptr, nbytes):
    if sum(map(ctypes.sizeof, self.blocks.values())) + nbytes > self.memory: return 2
    block = (ctypes.c_uint8 * nbytes)()
    self.blocks[ctypes.addressof(block)] = block
    ptr._obj.value = ctypes.addressof(block)
    return 0
  def cuMemFree_v2(self, raw): del self.blocks[raw.value]; return 0
  def cuMemcpyHtoD_v2(self, dst, src, nbytes): ctypes.memmove(dst.value, src, nbytes); return 0
  def cuMemcpyDtoH_v2(self, dst, src, nbytes): ctypes.memmove(dst, src.value, nbytes); return 0
  def cuModuleLoadData(self, module, image):
    if (s := self._status("cuModuleLoadData")): return s
    self.images.append(bytes(image)); module._obj.value = len(self.images); return 0
  def cuModuleGetFunction(self, fn, module, name):
    n = len(re.findall(rb"\.param \.\w+ " + name + rb"_param_\d+", self.images[module.value - 1]))
    fn._obj.value = 0x100 + len(self.functions); self.functions[fn._obj.value] = (name.decode(), n); return 0
  def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
    if (s := self._status("cuLaunchKernel")): return s
    # as the driver does, the parameters are read at the call: each points at a u64 holding a buffer's address
    self.launches.append((self.functions[fn.value][0], (gx, gy, gz), (bx, by, bz), self._read(fn.value, ctypes.addressof(params))))
    return 0

  def _read(self, fn: int, params: int) -> list[int]:   # the parameter values at the array `params`, read now
    return [ctypes.c_uint64.from_address(ctypes.c_void_p.from_address(params + 8 * i).value).value for i in range(self.functions[fn][1])]
  def _node(self, p) -> dict:
    return {"fn": p.func, "grid": tuple(p.grid), "block": tuple(p.block), "values": self._read(p.func, p.params)}
  def cuGraphCreate(self, graph, flags): graph._obj.value = 0x5000 + len(self.graphs); self.graphs[graph._obj.value] = []; return 0
  def cuGraphAddKernelNode_v2(self, node, graph, deps, ndeps, params):
    if (s := self._status("cuGraphAddKernelNode_v2")): return s
    nodes = self.graphs[graph.value]
    after = [deps[i] for i in range(ndeps)]
    assert all(d in [n["handle"] for n in nodes] for d in after), "a dependency that is not a node of this graph"
    node._obj.value = 0x9000 + 16 * len(nodes) + (graph.value & 15)
    nodes.append(dict(self._node(params._obj), handle=node._obj.value, after=after))
    return 0
  def cuGraphInstantiateWithFlags(self, exe, graph, flags):
    exe._obj.value = 0x7000 + len(self.execs); self.execs[exe._obj.value] = [dict(n) for n in self.graphs[graph.value]]; return 0
  def cuGraphExecKernelNodeSetParams_v2(self, exe, node, params):
    n = next(n for n in self.execs[exe.value] if n["handle"] == node.value)
    n.update(self._node(params._obj))
    return 0
  def cuGraphLaunch(self, exe, stream):
    if (s := self._status("cuGraphLaunch")): return s
    done: list[int] = []
    for n in self.execs[exe.value]:   # (nodes in the order their dependencies allow)
      assert all(d in done for d in n["after"])
      self.launches.append((self.functions[n["fn"]][0], n["grid"], n["block"], n["values"]))
      done.append(n["handle"])
    return 0
  def cuGraphExecDestroy(self, exe): self.destroyed.append(exe.value); return 0
  def cuGraphDestroy(self, graph): self.destroyed.append(graph.value); return 0

@pytest.fixture
def driver(monkeypatch):
  fake = FakeDriver()
  monkeypatch.setattr(ops_cuda, "libcuda", lambda: fake)
  return fake

def _nvrtc() -> NVRTCCompiler:
  try: return NVRTCCompiler("sm_90")
  except RuntimeError as e: pytest.skip(str(e))

SRC = 'extern "C" __global__ void k(float* data0, float* data1) { data0[blockIdx.x * 64 + threadIdx.x] = data1[threadIdx.x] * 2.0f; }'

def test_device_parts_come_from_the_driver(driver):
  driver.max_threads = 512
  spec = ops_cuda.make_device("CUDA")
  assert spec.compiler.arch == "sm_90" and spec.renderer.max_local == 512
  assert spec.allocator.ctx.label == "Stand-in H200 (sm_90)"
  assert spec.renderer.tensor_cores   # mma.sync m16n8k16 on sm_80 and later, not on a Turing GPU
  driver.cc = (7, 5)
  assert ops_cuda.make_device("CUDA").renderer.tensor_cores == ()

def test_memory_round_trip_and_out_of_memory(driver):
  alloc = ops_cuda.make_device("CUDA").allocator
  raw = alloc.alloc(16)
  alloc.copyin(raw, memoryview(bytes(range(16))))
  back = bytearray(16)
  alloc.copyout(memoryview(back), raw)
  assert bytes(back) == bytes(range(16))
  alloc.copyin(raw, memoryview(b""))   # (nothing to copy: no driver call)
  alloc.free(raw, 16)
  assert not driver.blocks
  with pytest.raises(MemoryError, match=r"device CUDA: allocating 2097152 bytes failed: out of memory \(2\)"): alloc.alloc(2 << 20)

def test_a_gpu_that_is_not_there(driver):
  with pytest.raises(RuntimeError, match="CUDA:3"): ops_cuda.make_device("CUDA:3")

def test_kernel_launch_passes_its_buffers_and_geometry(driver):
  spec, lib = ops_cuda.make_device("CUDA"), _nvrtc().compile(SRC, "k")
  prog = spec.program("k", lib, (3, 64))
  assert driver.images[-1] == lib + b"\0" and b".entry k" in lib   # PTX, NUL-terminated as cuModuleLoadData reads it
  a, b = spec.allocator.alloc(3 * 64 * 4), spec.allocator.alloc(64 * 4)
  prog(a, b)
  name, grid, block, _ = driver.launches[-1]
  assert (name, grid, block) == ("k", (3, 1, 1), (64, 1, 1))
  assert driver.launches[-1][3] == [a.value, b.value]

@pytest.mark.parametrize("graph", [0, 1], ids=["launch-list", "cuda-graph"])
def test_launch_list_replays_and_repoints(driver, graph):
  spec, lib = ops_cuda.make_device("CUDA"), _nvrtc().compile(SRC, "k")
  progs = [spec.program("k", lib, (1, 64)), spec.program("k", lib, (2, 32))]
  class Buf:   # what the JIT hands a launch list: Buffers, whose .raw is the allocator's handle
    def __init__(self, n: int): self.raw = spec.allocator.alloc(n)
  x, y, z, w = Buf(256), Buf(256), Buf(256), Buf(256)
  with Context(CUDA_GRAPH=graph): runner = spec.launch_list(progs, [[x, y], [z, x]])
  assert isinstance(runner, ops_cuda.CUDAGraph) == bool(graph)
  assert runner() is True
  assert [(l[1][0], l[2][0]) for l in driver.launches] == [(1, 64), (2, 32)]
  assert driver.launches[0][3] == [x.raw.value, y.raw.value] and driver.launches[1][3] == [z.raw.value, x.raw.value]
  runner.set(1, 1, w)   # a new input for the second kernel
  runner()
  assert driver.launches[3][3] == [z.raw.value, w.raw.value] and driver.launches[2][3] == [x.raw.value, y.raw.value]
  runner.set(0, 0, x)   # (the same buffer again: nothing to update)
  runner()
  assert driver.launches[4:] == driver.launches[2:4]
  fn = "cuGraphLaunch" if graph else "cuLaunchKernel"
  driver.fail[fn] = 700
  what = "launching a CUDA graph of 2 kernels" if graph else "launching k"
  with pytest.raises(RuntimeError, match=f"device CUDA: {what} failed: an illegal memory access was encountered"): runner()
  if graph:
    del runner
    assert len(driver.destroyed) == 2   # the executable graph and the graph
    driver.fail["cuGraphAddKernelNode_v2"] = 1   # a graph the driver will not make: the replay launches one by one
    assert type(spec.launch_list(progs, [[x, y], [z, x]])) is ops_cuda.CUDALaunchList

JIT_ON_THE_STAND_IN = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_cuda_driver import FakeDriver
from petagrad.runtime import ops_cuda
fake = FakeDriver()
ops_cuda.libcuda = lambda: fake
from petagrad import Tensor, TinyJit
step = TinyJit(lambda a: ((a + 1).contiguous() * 2).realize())
xs = [Tensor.empty(64, device="CUDA").realize() for _ in range(4)]
outs = [step(x) for x in xs]
print(json.dumps({"graph": isinstance(step.launch_list, ops_cuda.CUDAGraph), "launches": [l[3] for l in fake.launches],
                  "inputs": [x.uop.buffer.raw.value for x in xs], "outputs": [o.uop.buffer.raw.value for o in outs]}))
"""

def test_cuda_graph_runs_a_jit_replay():
  """TinyJit on CUDA (kernels compiled by NVRTC, launched by the stand-in; in a process of its own, so no CUDA device
  made on the stand-in outlives the test): each replay is one graph launch whose nodes read that call's input and
  write a fresh output buffer."""
  _nvrtc()
  run = subprocess.run([sys.executable, "-c", JIT_ON_THE_STAND_IN, os.path.dirname(os.path.abspath(__file__))], capture_output=True,
                       text=True, timeout=300)
  assert run.returncode == 0, run.stderr
  got = json.loads(run.stdout.splitlines()[-1])
  assert got["graph"] and len(got["launches"]) == 8   # 2 kernels x (warm-up, capture, 2 replays)
  for call in (2, 3):   # the replays: kernel 1 reads the call's input, kernel 2 writes the call's own output
    first, second = got["launches"][2 * call:2 * call + 2]
    assert got["inputs"][call] in first and second[0] == got["outputs"][call]
  assert len(set(got["outputs"])) == 4

def test_kernel_errors_name_the_device_and_kernel(driver):
  spec, lib = ops_cuda.make_device("CUDA"), _nvrtc().compile(SRC, "k")
  with pytest.raises(RuntimeError, match="kernel k needs blocks of 2048 threads, the GPU allows 1024"): spec.program("k", lib, (1, 2048))
  driver.fail["cuModuleLoadData"] = 218
  with pytest.raises(RuntimeError, match="device CUDA: loading kernel k failed: a PTX JIT compilation failed"): spec.program("k", lib, (1, 64))
  driver.fail["cuCtxSynchronize"] = 700
  with pytest.raises(RuntimeError, match="device CUDA: synchronizing failed: an illegal memory access"): spec.synchronize()

def test_missing_driver_library_says_how_to_get_it(monkeypatch):
  def no_library(*a, **k): raise OSError("libcuda.so.1: cannot open shared object file")
  monkeypatch.setattr(ops_cuda.ctypes, "CDLL", no_library)
  ops_cuda.libcuda.cache_clear()
  try:
    with pytest.raises(RuntimeError, match="device CUDA: libcuda.so.1 not found .*install the driver"): ops_cuda.make_device("CUDA")
  finally: ops_cuda.libcuda.cache_clear()

def test_graph_node_parameters_match_cuda_h(tmp_path):
  """KernelNodeParams is laid out as cuda.h's CUDA_KERNEL_NODE_PARAMS_v2 (checked with the CUDA toolkit's header and a C
  compiler, where both are here)."""
  import glob, shutil
  headers = sorted(glob.glob(os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda*"), "include", "cuda.h")))
  if not headers or not shutil.which("gcc"): pytest.skip("no CUDA toolkit header (cuda.h) or gcc here")
  fields = ("func", "gridDimX", "blockDimX", "sharedMemBytes", "kernelParams", "extra", "kern", "ctx")
  src = tmp_path / "layout.c"
  src.write_text('#include <stdio.h>\n#include <stddef.h>\n#include "cuda.h"\nint main(void) { printf("%zu", sizeof(CUDA_KERNEL_NODE_PARAMS_v2));'
                 + "".join(f' printf(" %zu", offsetof(CUDA_KERNEL_NODE_PARAMS_v2, {f}));' for f in fields) + " return 0; }\n")
  subprocess.run(["gcc", "-I", os.path.dirname(headers[-1]), str(src), "-o", str(tmp_path / "layout")], check=True)
  got = list(map(int, subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout.split()))
  K = ops_cuda.KernelNodeParams
  assert got == [ctypes.sizeof(K)] + [getattr(K, f).offset for f in ("func", "grid", "block", "shared_bytes", "params", "extra", "kern", "ctx")]
