"""Tensor cores (codegen/tensor_core.py): half matmuls as warps of mma.sync m16n8k16.

No GPU runs here: PYTHON:GPU interprets the kernels a GPU gets, a warp's 32 threads in lockstep, and computes each
Ops.WMMA from PTX's fragment layouts, so the rewrite around it (which thread loads which element, where each result
goes) is checked against PyTorch; NULL:CUDA builds the same kernels to PTX and ptxas checks them for sm_90.
"""
from __future__ import annotations
import numpy as np
import pytest
import torch
from petagrad import Tensor, Device, Context, dtypes
from petagrad.uop.ops import Ops
import petagrad.engine.realize as R

HALVES = {"float16": torch.float16, "bfloat16": torch.bfloat16}

def _available(name: str) -> bool:
  try: Device[name]; return True
  except Exception: return False

# the interpreter here; a real GPU too where there is one (bench/gpu_check.sh)
RUNNERS = ["PYTHON:GPU"] + (["CUDA"] if _available("CUDA") else [])

def _run(device: str, fn, *arrays: np.ndarray):
  """fn on Tensors of arrays on device, realized: (the result as float numpy, the kernels compiled for it)."""
  before = set(R._kernel_cache)
  with Context(DEV=device):
    out = fn(*(Tensor(a) for a in arrays)).realize()
  return out.float().numpy(), [ck for k, ck in R._kernel_cache.items() if k not in before]

def _uses_tensor_cores(kernels) -> bool: return any("'WMMA'" in ck.src or "pg_mma" in ck.src for ck in kernels)

CASES = {
  "square": ((64, 32), (32, 64), lambda a, b: a @ b),
  "one_tile": ((16, 16), (16, 8), lambda a, b: a @ b),
  "two_warps": ((16, 48), (48, 16), lambda a, b: a @ b),          # 1 x 2 tiles: 2 warps to a block
  "batched": ((3, 32, 16), (3, 16, 24), lambda a, b: a @ b),
  "transposed_right": ((48, 32), (40, 32), lambda a, b: a @ b.T),
  "bias_relu": ((32, 64), (64, 32), lambda a, b: (a @ b + a[:, :32]).relu()),
  "float32_out": ((32, 32), (32, 16), lambda a, b: a.matmul(b, dtype="float32") if isinstance(a, Tensor) else a.float() @ b.float()),
}

@pytest.mark.parametrize("device", RUNNERS)
@pytest.mark.parametrize("half", list(HALVES))
@pytest.mark.parametrize("case", list(CASES))
def test_tensor_core_matmul_matches_torch(case, half, device):
  sa, sb, fn = CASES[case]
  rng = np.random.default_rng(len(case))
  a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
  got, kernels = _run(device, lambda x, y: fn(x.cast(half), y.cast(half)), a, b)
  assert _uses_tensor_cores(kernels), [ck.opts for ck in kernels]
  ref = fn(torch.tensor(a).to(HALVES[half]), torch.tensor(b).to(HALVES[half])).float().numpy()
  # (torch sums the float32 products in its own order; the result is then rounded to the half type)
  np.testing.assert_allclose(got, ref, rtol=1e-2 if half == "bfloat16" else 2e-3, atol=1e-2 if half == "bfloat16" else 2e-3)

def test_sizes_that_do_not_tile_use_plain_kernels():
  a, b = np.ones((24, 20), np.float32), np.ones((20, 12), np.float32)
  got, kernels = _run("PYTHON:GPU", lambda x, y: x.half() @ y.half(), a, b)
  assert not _uses_tensor_cores(kernels)
  np.testing.assert_array_equal(got, np.full((24, 12), 20.0, np.float32))

def test_gpu_interpreter_runs_work_groups_and_grouped_sums():
  """PYTHON:GPU's lockstep threads: an elementwise kernel over work-groups and a grouped (work-group) sum."""
  x = np.random.default_rng(1).standard_normal((300, 70)).astype(np.float32)
  got, kernels = _run("PYTHON:GPU", lambda t: t.sum(1) * 2 + t[:, 0], x)
  np.testing.assert_allclose(got, x.sum(1) * 2 + x[:, 0], rtol=1e-5, atol=1e-5)
  assert any(ck.launch[1] > 1 for ck in kernels)
  got, _ = _run("PYTHON:GPU", lambda t: t.sum(), x)
  np.testing.assert_allclose(got, x.sum(), rtol=1e-5)

@pytest.mark.skipif(not _available("NULL:CUDA"), reason="no NVRTC (pip install nvidia-cuda-nvrtc==13.0.88)")
def test_tensor_core_kernels_build_for_sm_90():
  for half in HALVES:
    _, kernels = _run("NULL:CUDA", lambda x, y: (x.cast(half) @ y.cast(half)).relu(), np.ones((64, 64), np.float32), np.ones((64, 128), np.float32))
    ck = next(ck for ck in kernels if "pg_mma" in ck.src)
    t = "f16" if half == "float16" else "bf16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32" in ck.src
    assert ck.program.lib.count(b"mma.sync.aligned.m16n8k16") == 8   # each warp: 2 x 4 tiles (ptxas checked the PTX)

def test_wmma_op_is_the_warp_product():
  """Ops.WMMA's reference (codegen/tensor_core.py: wmma) is A @ B over PTX's fragment layouts."""
  from petagrad.codegen.tensor_core import wmma, a_place, b_place, c_place
  rng = np.random.default_rng(2)
  A, B = rng.integers(-4, 4, (16, 16)).astype(float), rng.integers(-4, 4, (16, 8)).astype(float)
  a = [[A[a_place(i, l // 4, l % 4)] for i in range(8)] for l in range(32)]
  b = [[B[b_place(i, l // 4, l % 4)] for i in range(4)] for l in range(32)]
  D = A @ B
  assert wmma(a, b) == [[D[c_place(i, l // 4, l % 4)] for i in range(4)] for l in range(32)]
  C = rng.integers(-4, 4, (16, 8)).astype(float)   # with C: D = A @ B + C
  c = [[C[c_place(i, l // 4, l % 4)] for i in range(4)] for l in range(32)]
  assert wmma(a, b, c) == [[(D + C)[c_place(i, l // 4, l % 4)] for i in range(4)] for l in range(32)]
  assert Ops.WMMA in Ops and dtypes.float16 in Device["PYTHON:GPU"].renderer.tensor_cores

def test_beam_tries_tensor_cores():
  """BEAM's first candidates for a half matmul include OptOps.TC on a renderer with tensor cores (not on the CPU's), and
  a search on PYTHON:GPU returns a kernel that computes the product."""
  from petagrad.codegen.opt import Kernel, OptOps
  from petagrad.codegen.search import actions
  from petagrad.renderer.cstyle import CRenderer
  from petagrad.renderer.cuda import CUDARenderer
  with Context(DEV="NULL"):
    item = R.schedule_cached([(Tensor.empty(32, 32, dtype="float16") @ Tensor.empty(32, 16, dtype="float16")).uop]).items()[-1]
  k = Kernel(R.lower_cached(item.out, item.value)[0], max_local=1024)
  k.normalize_ranges()
  assert [o.amount for o in actions(k, CUDARenderer("sm_90")) if o.op is OptOps.TC] == [1, 2, 4]
  assert not any(o.op is OptOps.TC for o in actions(k, CUDARenderer("sm_75")) + actions(k, CRenderer()))
  a, b = np.arange(16 * 16).reshape(16, 16) % 5, np.arange(16 * 16).reshape(16, 16) % 3
  with Context(BEAM=1, DISABLE_DISK_CACHE=1):   # (which candidate wins is the timer's call: the product must be right)
    got, kernels = _run("PYTHON:GPU", lambda x, y: x.half() @ y.half(), a.astype(np.float32), b.astype(np.float32))
  np.testing.assert_array_equal(got, (a @ b).astype(np.float32))

def test_mma_accumulates_in_the_instruction():
  """linearize hands a tensor-core product its 4 accumulators as C (D = A @ B + C) and turns their adds into plain
  assignments, but only where the updates run once per product (not inside a loop the product is outside of)."""
  from petagrad.codegen.linearize import _mma_accumulates
  from petagrad.uop.uop import UOp
  h = [UOp(Ops.DEFINE_GLOBAL, dtypes.float16, (), 0)]
  def program(inner_loop: bool) -> list:
    k, j = UOp(Ops.RANGE, dtypes.index, (), (0, 4, "reduce")), UOp(Ops.RANGE, dtypes.index, (), (1, 2, "reduce"))
    loads = [UOp(Ops.LOAD, dtypes.float16, (h[0], k + i)) for i in range(12)]
    accs = [UOp(Ops.DEFINE_ACC, dtypes.float32, (UOp.const(dtypes.float32, 0.0),), i) for i in range(4)]
    w = UOp(Ops.WMMA, dtypes.float32.vec(4), tuple(loads), dtypes.float16)
    geps = [UOp(Ops.GEP, dtypes.float32, (w,), i) for i in range(4)]
    ups = [UOp(Ops.ACC_UPDATE, dtypes.float32, (a, g), Ops.ADD) for a, g in zip(accs, geps)]
    inner = [j, *ups, UOp(Ops.ENDRANGE, dtypes.index, (j,))] if inner_loop else ups
    return [*accs, k, *loads, w, *geps, *inner, UOp(Ops.ENDRANGE, dtypes.index, (k,))]
  out = _mma_accumulates(program(False))
  w = next(u for u in out if u.op is Ops.WMMA)
  assert len(w.src) == 16 and all(a.op is Ops.DEFINE_ACC for a in w.src[12:])
  assert [u.arg for u in out if u.op is Ops.ACC_UPDATE] == [Ops.ASSIGN] * 4
  assert all(u.src[1].src[0] is w for u in out if u.op is Ops.ACC_UPDATE)
  kept = program(True)
  assert _mma_accumulates(kept) == kept
  # and in a real kernel: every product takes its accumulators, no add is left after it
  _, kernels = _run("PYTHON:GPU", lambda x, y: x.half() @ y.half(), np.ones((32, 32), np.float32), np.ones((32, 16), np.float32))
  lines = next(ck.src for ck in kernels if "'WMMA'" in ck.src).splitlines()
  assert all(len(eval(l)[2]) == 16 for l in lines if l.startswith("('WMMA'"))
  assert not any(l.startswith("('ACC_UPDATE'") and "'ADD'" in l for l in lines)
