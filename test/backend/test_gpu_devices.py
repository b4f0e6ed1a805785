"""The GPU-style devices: OpenCL (PoCL in CI), and the compile-only CUDA and HIP targets.

The op suites run on CL through TEST_DEVICES=CL and build every kernel for CUDA and HIP through COMPILE_ALSO (see
docs/devices.md and .ci/run); this file checks what is particular to these devices: launch geometry, the dialects
side by side, copies between devices, the probe, and clear errors.
"""
from __future__ import annotations
import os, subprocess, sys
import numpy as np
import pytest
from petagrad import Tensor, Device, Context, GlobalCounters
from petagrad.device import CompileError
from petagrad.codegen.opt import Kernel, Opt, OptOps, OptError

def _available(name: str) -> bool:
  try: Device[name]; return True
  except Exception: return False

needs_cl = pytest.mark.skipif(not _available("CL"), reason="no OpenCL device (apt-get install pocl-opencl-icd ocl-icd-opencl-dev)")
needs_cuda_compile = pytest.mark.skipif(not _available("NULL:CUDA"), reason="no NVRTC (pip install nvidia-cuda-nvrtc==13.0.88)")
needs_hip_compile = pytest.mark.skipif(not _available("NULL:HIP"), reason="no clang with the AMDGPU target")

def _source(device: str, fn) -> str:
  """The source of the last kernel fn realizes on device."""
  import petagrad.engine.realize as R
  with Context(DEV=device):
    before = set(R._kernel_cache)
    fn().realize()
    new = [ck for k, ck in R._kernel_cache.items() if k not in before]
  assert new, "no new kernel was compiled"
  return new[-1].src

@needs_cl
def test_cl_matches_cpu_on_a_small_training_step():
  """Forward and backward of a tiny MLP on CL, against the same on CPU (same initial weights)."""
  rng = np.random.default_rng(0)
  x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((8, 5), (5, 7), (7, 3)))
  out = {}
  for dev in ("CPU", "CL"):
    with Context(DEV=dev):
      tw1, tw2 = Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)
      loss = (Tensor(x) @ tw1).relu().matmul(tw2).log_softmax(1).mean()
      loss.backward()
      out[dev] = (loss.item(), tw1.grad.numpy(), tw2.grad.numpy())
  assert out["CL"][0] == pytest.approx(out["CPU"][0], rel=1e-5)
  for a, b in zip(out["CL"][1:], out["CPU"][1:]): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

@needs_cl
def test_work_groups_cover_the_output_once():
  """Kernels on CL take their output indices from the work-group and thread ids; every element is written once,
  including shapes whose sizes have no divisor near the group size (a prime)."""
  for shape in ((1,), (7,), (4099,), (3, 257), (64, 64), (2, 3, 5, 7)):
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    with Context(DEV="CL"): got = (Tensor(a) * 2 + 1).numpy()
    np.testing.assert_array_equal(got, a * 2 + 1)
  src = _source("CL", lambda: Tensor.ones(256, 64, device="CL").contiguous() + 1)
  assert "get_group_id(0)" in src and "get_local_id(0)" in src and "for (" not in src   # no loops over the output

@needs_cl
def test_grouped_reductions_match_numpy(monkeypatch):
  """Reductions shared by a work-group's threads (GROUP), with the output ranges also split over the group (LOCAL):
  sums, maxima, int sums that wrap around, a reduction followed by elementwise ops, a mean and a softmax."""
  import petagrad.engine.realize as R
  from petagrad.helpers import DISABLE_DISK_CACHE
  applied = []
  def group_and_local(k, *_):
    k.normalize_ranges()
    red = [i for i, r in enumerate(k.ranges) if r.arg[2] == "reduce" and r.arg[1] % 8 == 0]
    if red: k.apply(Opt(OptOps.GROUP, red[-1], 8)); applied.append("group")
    out = [i for i, r in enumerate(k.ranges) if r.arg[2] == "global" and r.arg[1] % 4 == 0]
    if out: k.apply(Opt(OptOps.LOCAL, out[-1], 4)); applied.append("local")
    return k
  monkeypatch.setattr(R, "hand_coded_optimizations", group_and_local)
  monkeypatch.setattr(R, "_kernel_cache", {})
  monkeypatch.setattr(DISABLE_DISK_CACHE, "value", 1)
  rng = np.random.default_rng(3)
  a = rng.standard_normal((12, 64)).astype(np.float32)
  i = np.full((4, 16), 2**31 - 1, dtype=np.int32)
  with Context(DEV="CL"):
    np.testing.assert_allclose(Tensor(a).sum(1).numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(Tensor(a).amax(1).numpy(), a.max(1))
    np.testing.assert_array_equal(Tensor(a).cast("bfloat16").amax(1).float().numpy(), Tensor(a).cast("bfloat16").float().numpy().max(1))
    an = a.copy(); an[3, 17] = np.nan   # NaN wins a max, wherever it sits in the tree
    np.testing.assert_array_equal(Tensor(an).amax(1).numpy(), an.max(1))
    np.testing.assert_allclose((Tensor(a).sum(1) * 2 + 1).exp().numpy(), np.exp(a.sum(1) * 2 + 1), rtol=1e-4)
    np.testing.assert_array_equal(Tensor(i).sum(1, dtype="int32").numpy(), i.sum(1, dtype=np.int32))
    np.testing.assert_allclose(Tensor(a).softmax(1).numpy(), np.exp(a) / np.exp(a).sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    src = _source("CL", lambda: Tensor(a).sum(1) + 3)
  assert "group" in applied and "local" in applied
  assert "__local float pg_local0[32];" in src and "barrier(CLK_LOCAL_MEM_FENCE);" in src

def test_default_heuristic_for_work_groups():
  """A long reduction to few outputs is shared by the threads of a work-group; a short one or one to many outputs is
  not. A matmul to many outputs gets a 4 x 4 register tile per thread; a row sum (no reuse) does not."""
  from petagrad.codegen.heuristic import hand_coded_optimizations
  from petagrad.renderer import Renderer
  def opts(fn):
    import petagrad.engine.realize as R
    with Context(DEV="NULL"):
      item = R.schedule_cached([fn().uop]).items()[-1]
    k = hand_coded_optimizations(Kernel(R.lower_cached(item.out, item.value)[0], max_local=256), Renderer())
    return [o.op for o in k.applied]
  def total(shape, axis): return lambda: Tensor.empty(*shape).sum(axis)
  assert OptOps.GROUP in opts(total((100000,), 0)) and OptOps.GROUP in opts(total((7, 3000), 1))
  assert OptOps.GROUP not in opts(total((7, 30), 1)) and OptOps.GROUP not in opts(total((8192, 512), 1))
  assert opts(lambda: Tensor.empty(256, 64) @ Tensor.empty(64, 256)).count(OptOps.UPCAST) == 2
  assert OptOps.UPCAST not in opts(total((65536, 64), 1))

@needs_cl
def test_cl_runs_no_launch_groups():
  """A GPU has no barrier between kernels of one launch: independent small kernels run as launches of their own."""
  with Context(DEV="CL"):
    a, b = Tensor.ones(4).contiguous().realize(), Tensor.ones(4).contiguous().realize()
    GlobalCounters.reset()
    Tensor.realize(a + 1, b * 3)
    assert GlobalCounters.kernel_count == GlobalCounters.launch_count == 2

@needs_cl
def test_copies_between_devices():
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = Tensor(a, device="CPU").to("CL")
  assert t.device == "CL"
  back = (t * 2).to("PYTHON").to("CPU")
  np.testing.assert_array_equal(back.numpy(), a * 2)
  with pytest.raises(RuntimeError, match="different devices: CPU and CL"): Tensor(a, device="CPU") + t

def test_local_opt_is_checked():
  k = Kernel(_elementwise_ast(), max_local=64)
  k.normalize_ranges()   # one output range of 384
  k.apply(Opt(OptOps.LOCAL, 0, 16))
  assert k.local_size() == 16
  with pytest.raises(OptError, match="work-group of at most 64"): k.apply(Opt(OptOps.LOCAL, 0, 8))
  with pytest.raises(OptError): k.apply(Opt(OptOps.LOCAL, 0, 7))   # 7 does not divide 24 (nor fit)

def _elementwise_ast():
  import petagrad.engine.realize as R
  with Context(DEV="NULL"):
    t = Tensor.empty(8, 48) + 1
    sched = R.schedule_cached([t.uop])
    item = sched.items()[0]
  return R.lower_cached(item.out, item.value)[0]

def test_dialects_side_by_side():
  """One kernel in every C-style dialect: the same statements, each dialect's own spellings."""
  from petagrad.renderer.cstyle import CRenderer
  from petagrad.renderer.opencl import OpenCLRenderer
  from petagrad.renderer.cuda import CUDARenderer, HIPRenderer
  from petagrad.codegen.linearize import linearize
  from petagrad.codegen.expand import expand_unrolled, vectorize
  from petagrad.codegen.heuristic import hand_coded_optimizations
  from petagrad.dtype import dtypes
  expect = {CRenderer: ["void k(", "long long", "for ("], OpenCLRenderer: ["__kernel void k(__global float*", "int gid_ = (int)(get_group_id(0))"],
            CUDARenderer: ['extern "C" __global__ void k(', "blockIdx.x", "threadIdx.x"],
            HIPRenderer: ["__attribute__((global))", "__builtin_amdgcn_workgroup_id_x()"]}
  for cls, words in expect.items():
    r = cls()
    k = hand_coded_optimizations(Kernel(_elementwise_ast(), max_local=r.max_local), r)
    src = r.render("k", linearize(vectorize(expand_unrolled(k.ast))), [dtypes.float32, dtypes.float32])
    for w in words: assert w in src, f"{cls.__name__}: {w!r} not in\n{src}"
    assert r.launch_dims(linearize(vectorize(expand_unrolled(k.ast)))) == ((1, 1) if not r.max_local else (384 // k.local_size(), k.local_size()))

@needs_cuda_compile
def test_null_cuda_builds_ptx_checked_by_ptxas():
  import petagrad.engine.realize as R
  with Context(DEV="NULL:CUDA"):
    x = Tensor.empty(33, 17, dtype="float16")
    (x.float().exp() * 2).cast("bfloat16").realize()
  ck = list(R._kernel_cache.values())[-1]
  assert ck.device == "NULL:CUDA" and ck.program.lib.startswith(b"//") and b".target sm_" in ck.program.lib
  with pytest.raises(CompileError, match="NVRTC"):
    Device["NULL:CUDA"].compiler.compile('extern "C" __global__ void k(float* a) { a[0] = undefined_name; }', "k")
  with Context(DEV="NULL:CUDA", SANITIZE=1):   # the bounds-checked build (every access through pg_ok) passes ptxas too
    src = _source("NULL:CUDA", lambda: Tensor.empty(300, 70).sum(1) + 1)
  assert "pg_ok(pg_n_, pg_err_, 1," in src and "atomicExch" in src

@needs_cuda_compile
def test_compile_also_builds_every_new_kernel_for_the_targets(monkeypatch):
  import petagrad.engine.realize as R
  from petagrad.helpers import DISABLE_DISK_CACHE
  monkeypatch.setattr(R, "_kernel_cache", {})
  monkeypatch.setattr(DISABLE_DISK_CACHE, "value", 1)
  built = []
  compiler = Device["NULL:CUDA"].compiler
  orig = compiler.compile
  monkeypatch.setattr(compiler, "compile", lambda src, name: built.append(src) or orig(src, name))
  with Context(COMPILE_ALSO="NULL:CUDA", DEV="CPU"):
    np.testing.assert_allclose((Tensor.ones(37, 3) * 5).sum(1).numpy(), np.full(37, 15.0))   # runs on CPU as always
  assert built and all('extern "C" __global__' in s for s in built)
  def broken(src, name): raise CompileError(f"device CUDA: kernel {name} does not build")
  monkeypatch.setattr(compiler, "compile", broken)
  with Context(COMPILE_ALSO="NULL:CUDA", DEV="CPU"), pytest.raises(CompileError, match="device CUDA"):
    (Tensor.ones(41, 3) * 5).sum(1).realize()

@needs_hip_compile
def test_null_hip_builds_amdgpu_code_objects():
  import petagrad.engine.realize as R
  with Context(DEV="NULL:HIP"):
    Tensor.empty(40, dtype="float64").sin().realize()   # float64 sin: decomposed (no device math library)
  ck = list(R._kernel_cache.values())[-1]
  assert ck.program.lib.startswith(b"\x7fELF") and "__builtin_sin(" not in ck.src
  with pytest.raises(CompileError, match="HIP"):
    Device["NULL:HIP"].compiler.compile("this is not C++", "k")
  with Context(DEV="NULL:HIP", SANITIZE=1):
    src = _source("NULL:HIP", lambda: Tensor.empty(300, 70).sum(1) + 1)
  assert "pg_ok(pg_n_, pg_err_, 1," in src

@needs_cl
def test_cl_build_error_shows_log_and_source():
  with pytest.raises(CompileError, match=r"(?s)building kernel k failed.*undefined_name.*--- source ---"):
    Device["CL"].compiler.compile("__kernel void k(__global float* a) { a[0] = undefined_name; }", "k")

def test_bad_device_strings():
  with pytest.raises(RuntimeError, match="unknown device"): Tensor([1], device="TPU")
  with pytest.raises(RuntimeError, match="NULL:CUDA"): Device["NULL:FOO"]
  if _available("CL"):
    with pytest.raises(RuntimeError, match=r"CL:7 does not exist.*CL"): Tensor([1.0], device="CL:7").realize()

@needs_cl
def test_a_dtype_the_device_lacks_is_a_clear_error(monkeypatch):
  from petagrad.dtype import dtypes
  monkeypatch.setattr(Device["CL"].renderer, "unsupported", {dtypes.float64: "no cl_khr_fp64: use float32"})
  with pytest.raises(RuntimeError, match="device CL: kernel .* uses float64, which this device does not have"):
    (Tensor.ones(3, 5, dtype="float64", device="CL") * 3).numpy()
  assert (Tensor.ones(3, 6, device="CL") * 3).numpy().sum() == 54   # other kernels still build

@needs_cl
def test_sanitized_cl_kernels_report_and_skip_a_bad_access():
  """SANITIZE=1 on CL: every access is checked against its buffer's element count; the first bad one is recorded,
  skipped, and raised after the launch as OutOfBoundsError naming the kernel, the buffer and the index."""
  from petagrad.renderer.opencl import SANITIZE_DECL
  from petagrad.device import OutOfBoundsError
  src = SANITIZE_DECL.format(params="") + ("__kernel void k(__global float* data0, __global const long* pg_n_, __global long* pg_err_) {\n"
                                           "  long i = get_global_id(0);\n  if (pg_ok(pg_n_, pg_err_, 0, i + 2, 1, 1)) data0[i + 2] = 7.0f;\n}\n")
  dev = Device["CL"]
  with Context(SANITIZE=1): prog = dev.program("k", dev.compiler.compile(src, "k"), (1, 4))
  buf = dev.allocator.alloc(4 * 4)
  dev.allocator.copyin(buf, memoryview(np.zeros(4, np.float32).tobytes()))
  with pytest.raises(OutOfBoundsError, match=r"kernel k: a store to buffer 0 \(parameter 0: 4 elements\) at index [45], out of bounds \[0, 4\)"):
    prog(buf, sizes=[4])
  out = np.zeros(4, np.float32)
  dev.allocator.copyout(memoryview(out).cast("B"), buf)
  np.testing.assert_array_equal(out, [0, 0, 7, 7])   # the good stores landed, the bad ones were skipped
  dev.allocator.free(buf, 16)
  with Context(SANITIZE=1, DEV="CL"):   # a generated kernel, checked: runs clean
    np.testing.assert_array_equal((Tensor.arange(10, device="CL")[2:7] * 2).numpy(), np.arange(2, 7) * 2)

@needs_cl
def test_cl_out_of_memory_is_a_memory_error():
  with pytest.raises(MemoryError, match="device CL"):
    Tensor.zeros(1 << 45, dtype="uint8", device="CL").realize()

def test_probe_lists_every_device():
  out = subprocess.run([sys.executable, "-m", "petagrad.device"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))})
  assert out.returncode == 0, out.stderr
  lines = {l.split()[0]: l for l in out.stdout.splitlines()[1:] if l and not l.startswith("default")}
  for name in ("CPU", "PYTHON", "PYTHON:GPU", "NULL", "CL", "CUDA", "NULL:CUDA", "NULL:HIP", "DISK:<file>"): assert name in lines, out.stdout
  assert "PASS" in lines["CPU"] and "PASS" in lines["PYTHON"] and "PASS" in lines["PYTHON:GPU"]
  if not _available("CUDA"): assert "FAIL" in lines["CUDA"] and "driver" in lines["CUDA"]
  assert out.stdout.splitlines()[-1].startswith("default: CPU")

# ------------------------------------------------------------ vector loads and stores (codegen/vector_memory.py)

VECTOR_FORMS = {"CL": ("vload4(0, data", "vstore4("), "NULL:CUDA": ("*((float4*)(data", "*((float4*)(data0 + "),
                "NULL:HIP": ("*((float_v4u*)(data", "float_v4u*)(data0")}

@pytest.mark.parametrize("device", list(VECTOR_FORMS))
def test_gpu_kernels_load_and_store_16_bytes_at_once(device):
  """An elementwise kernel's threads each take 4 neighbouring floats, a matmul's 4 x 4 tile reads its right side 4 at a
  time: one 16-byte access each (ld.global.v4.f32 on CUDA)."""
  if not _available(device): pytest.skip(f"no {device}")
  load, store = VECTOR_FORMS[device]
  for fn in (lambda: Tensor.empty(512, 512) * 2 + Tensor.empty(512, 512), lambda: Tensor.empty(256, 256) @ Tensor.empty(256, 256)):
    src = _source(device, fn)
    assert load in src and store in src, src

@needs_cuda_compile
def test_cuda_vector_accesses_are_one_instruction():
  cases = ((lambda: Tensor.empty(256, 64) @ Tensor.empty(64, 256), "v4.f32"), (lambda: Tensor.empty(640, 512, dtype="float16") * 2, "v4.u16"))
  for fn, width in cases:
    ptx = Device["NULL:CUDA"].compiler.compile(_source("NULL:CUDA", fn), "k").decode()
    assert f"ld.global.{width}" in ptx and f"st.global.{width}" in ptx

VECTOR_RUNS = [("CL", d) for d in ("float32", "float16", "bfloat16", "float64", "int64", "int8", "int16")] + \
              [("PYTHON:GPU", d) for d in ("float16", "float64", "int8")]   # (the interpreter: 4 lanes of 2 and 1 bytes, 2 of 8)

@pytest.mark.parametrize("device,dtype", VECTOR_RUNS)
def test_vector_accesses_match_torch_at_every_offset(device, dtype):
  """Views that start off a vector boundary (a slice from 1, 2, 3), padding and a matmul, on CL (PoCL) and PYTHON:GPU
  (which raises on a vector access that is not aligned to its size, as a GPU faults) against torch: only accesses at a
  multiple of their lanes are joined, the others stay scalar."""
  import torch
  if not _available(device): pytest.skip(f"no {device}")
  a = np.random.default_rng(0).uniform(-4, 4, (64, 1030)).astype(np.float32)
  td = getattr(torch, dtype)
  ta = torch.tensor(a).to(td)
  x = Tensor(a, device=device).cast(dtype).realize()
  for k in range(4):
    got = (x[:, k:k + 1024] * 2 + x[:, 4:1028]).float().numpy()
    np.testing.assert_array_equal(got, (ta[:, k:k + 1024] * 2 + ta[:, 4:1028]).float().numpy())
  np.testing.assert_array_equal(x[:, :1024].pad(((0, 0), (3, 1))).float().numpy(), torch.nn.functional.pad(ta[:, :1024], (3, 1)).float().numpy())
  if device == "PYTHON:GPU":   # (the kernels above did join accesses: the aligned slice's)
    assert f"('LOAD', ('{dtype}', " in _source(device, lambda: x[:, 4:1028] * 3)
  if dtype in ("float32", "float64") and device == "CL":
    got = (x[:, :64] @ x[:, 4:260]).numpy()
    np.testing.assert_allclose(got, (ta[:, :64] @ ta[:, 4:260]).numpy(), rtol=1e-5, atol=1e-3)

@needs_cuda_compile
def test_index_math_is_32_bit_where_it_fits():
  """GPU dialects compute a kernel's index math in int where every value of it fits (the launch ids, loop variables
  and addresses), in long long where one may not (an index past 2**31)."""
  small = _source("NULL:CUDA", lambda: Tensor.empty(300, 70).sum(1) * Tensor.empty(300))
  assert "int gid_ = (int)(blockIdx.x);" in small and "long long" not in small.split("__global__")[-1].split(") {", 1)[1]
  big = _source("NULL:CUDA", lambda: Tensor.empty(2**31 + 64, dtype="int8") + 1)
  assert "long long gid_ = (long long)(blockIdx.x);" in big
