"""Long float sums keep their answer: blocked partial sums (codegen/opt.py: Kernel.block_sums) against float64 numpy.

One accumulator (per SIMD lane) that adds millions of values drifts (1e7 copies of 0.1 summed 0.3% low) or stops
growing (3e8 ones summed to 2**28). The CPU cases use sizes where the unblocked kernels are off by 1e-5 to 1e-2 and
blocked ones by about an ulp; the PYTHON device interprets one scalar at a time, so there the block sizes are lowered
(the same code path, small data) and the test checks the loop nest it runs.
"""
from __future__ import annotations
import numpy as np
import pytest
from petagrad import Tensor, Context, GlobalCounters, dtypes
from petagrad.uop.ops import Ops
from petagrad.helpers import DISABLE_DISK_CACHE
import petagrad.codegen.opt as opt
import petagrad.engine.realize as realize

def rel_err(got, ref) -> float:
  got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
  return float(np.max(np.abs(got - ref) / np.abs(ref)))

@pytest.fixture
def cpu():
  with Context(DEV="CPU"): yield

@pytest.fixture
def small_blocks(monkeypatch):
  """Blocks of 4 past 8 adds (register tiles too), with fresh kernel caches: the generated programs do not key on
  these constants."""
  for name, v in (("BLOCK_MIN", 8), ("BLOCK_INNER", 4), ("BLOCK_OUTER", 4), ("TILE_MIN", 8), ("TILE_INNER", 4)):
    monkeypatch.setattr(opt, name, v)
  monkeypatch.setattr(realize, "_kernel_cache", {})
  monkeypatch.setattr(DISABLE_DISK_CACHE, "value", 1)

def acc_depths(fn, monkeypatch) -> list[list[int]]:
  """Run fn() and return, per kernel it generated, the loop depth of each accumulator of its linear program."""
  from petagrad.codegen.linearize import linearize
  from petagrad.codegen.expand import expand_unrolled, vectorize
  from petagrad.codegen.decompositions import decompose
  from petagrad.device import Device
  kernels: list = []
  orig = realize._optimize
  def record(device, ast, params):
    k = orig(device, ast, params)
    if not device.startswith("NULL:"): kernels.append((device, k))   # (not the COMPILE_ALSO targets' copies)
    return k
  monkeypatch.setattr(realize, "_optimize", record)
  monkeypatch.setattr(realize, "_kernel_cache", {})
  monkeypatch.setattr(DISABLE_DISK_CACHE, "value", 1)
  fn()
  out = []
  for device, k in kernels:
    prog = linearize(vectorize(expand_unrolled(decompose(k.ast, Device[device].renderer.decompose_ops))))
    depth, depths = 0, []
    for u in prog.uops:
      if u.op is Ops.RANGE: depth += 1
      elif u.op is Ops.ENDRANGE: depth -= 1
      elif u.op is Ops.DEFINE_ACC: depths.append(depth)
    out.append(depths)
  return out

# ------------------------------------------------------------ CPU, default block sizes

def test_constant_sum_and_mean_1e7(cpu):
  a = np.full(10**7, 0.1, np.float32)
  x = Tensor(a).realize()
  ref = a.astype(np.float64)
  assert rel_err(x.sum().numpy(), ref.sum()) < 5e-7       # one accumulator per lane: 3e-3
  assert rel_err(x.mean().numpy(), ref.mean()) < 5e-7

def test_ones_3e8_and_constant_mean_1e8(cpu):
  # constants need no memory; without blocks 16 lanes of float32 stop at 2**24 each: 2**28
  assert Tensor.ones(3 * 10**8).sum().item() == 3e8
  assert rel_err(Tensor.full((10**8,), 0.1).mean().item(), np.float64(np.float32(0.1))) < 5e-7

def test_ones_past_2_24(cpu):
  # a length no vector divides: a scalar loop the compiler vectorizes, blocks per lane and a tail
  n = 2**24 + 3
  assert Tensor(np.ones(n, np.float32)).sum().item() == float(np.float32(n))

@pytest.mark.parametrize("shape,axis", [((4, 10**6), 1), ((10**6, 4), 0), ((10**6, 3), 0), ((999_983, 16), 0)])
def test_long_rows_and_columns(cpu, shape, axis):
  a = np.full(shape, 0.1, np.float32)
  assert rel_err(Tensor(a).sum(axis).numpy(), a.astype(np.float64).sum(axis)) < 5e-7   # unblocked: 2e-4 to 1e-2

def test_random_data_var_mean(cpu):
  rng = np.random.default_rng(0)
  for a in (rng.standard_normal(10**7, dtype=np.float32) + 3, rng.random(10**7, dtype=np.float32),
            (rng.standard_normal(10**6) * 10.0 ** rng.uniform(-4, 4, 10**6)).astype(np.float32)):
    x, ref = Tensor(a).realize(), a.astype(np.float64)
    assert rel_err(x.sum().numpy(), ref.sum()) < 3e-7
    assert rel_err(x.mean().numpy(), ref.mean()) < 3e-7
    assert rel_err(x.var().numpy(), ref.var(ddof=1)) < 3e-7   # unblocked (normal + 3): 1e-5

def test_several_reduce_ranges(cpu):
  # axes 0 and 2: two reduce loops that do not merge (unblocked: 1e-5)
  a = np.full((1000, 3, 1001), 0.1, np.float32)
  assert rel_err(Tensor(a).sum((0, 2)).numpy(), a.astype(np.float64).sum((0, 2))) < 1e-6

def test_threaded_rows(cpu):
  a = np.full((8, 10**6), 0.1, np.float32)   # unblocked: 2e-4
  with Context(THREADS=2):
    assert rel_err(Tensor(a).sum(1).numpy(), a.astype(np.float64).sum(1)) < 5e-7

def test_noopt(cpu):
  # scalar loops, which the C compiler vectorizes itself: blocks of BLOCK_INNER per lane of its registers
  a = np.full(10**7 + 1, 0.1, np.float32)
  with Context(NOOPT=1):
    assert rel_err(Tensor(a).sum().numpy(), a.astype(np.float64).sum()) < 1e-6   # torch: 6e-7; unblocked: 1e-2

def test_beam_keeps_blocks(cpu, tmp_path):
  a = np.full((2, 1 << 18), 0.1, np.float32)
  launched: list = []
  realize.capture_hooks.append(launched.append)
  try:
    with Context(BEAM=2, CACHEDIR=str(tmp_path)): got = Tensor(a).sum(1).numpy()
  finally: realize.capture_hooks.remove(launched.append)
  # the winner depends on timings (lanes, unrolls, threads), its blocks with it: 1e-7 to 2.4e-6 seen (unblocked: 6e-5);
  # a winner that splits the sum into partial sums short enough needs no BLOCK (block_sums adds one only where needed)
  assert rel_err(got, a.astype(np.float64).sum(1)) < 1e-5
  assert any(ei.kernel for ei in launched)

@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float64"])
def test_other_float_dtypes(cpu, dt):
  import torch
  a = np.full(10**7, 0.1, np.float32)
  t = torch.from_numpy(a).to(getattr(torch, dt))
  x = Tensor(a).cast(getattr(dtypes, dt)).realize()
  ref = t.double().numpy()   # the data as stored in dt
  tol = 5e-7 if dt != "float64" else 1e-14
  # float16 sums of 1e6 overflow (to inf, as in torch): mean; bfloat16 sums in float32 and rounds to 8 bits
  assert rel_err(x.mean().float().numpy() if dt != "float64" else x.mean().numpy(), ref.mean()) <= \
    max(tol, rel_err(t.mean().double().numpy(), ref.mean()))
  if dt == "float64": assert rel_err(x.sum().numpy(), ref.sum()) < tol
  if dt == "bfloat16": assert rel_err(x.sum().float().numpy(), ref.sum()) <= rel_err(t.sum().double().numpy(), ref.sum())

def test_matmul_short_k_not_blocked(cpu, monkeypatch):
  # a register tile's K below TILE_MIN keeps its one loop: the matmul's code does not change
  a, b = Tensor.rand(64, 1024).realize(), Tensor.rand(1024, 64).realize()
  (depths,) = acc_depths(lambda: (a @ b).realize(), monkeypatch)
  assert len(set(depths)) == 1

# ------------------------------------------------------------ every device: kernel counts, lowered block sizes

@pytest.mark.parametrize("name,fn,count", [("sum", lambda x: x.sum(), 1), ("mean", lambda x: x.mean(), 1),
                                           ("rows", lambda x: x.reshape(50, 20).sum(1), 1), ("var", lambda x: x.var(), 2)])
def test_kernel_count_unchanged(device, small_blocks, name, fn, count):
  x = Tensor(np.random.default_rng(1).random(1000, dtype=np.float32)).realize()
  GlobalCounters.reset()
  out = fn(x)
  Tensor.realize_all(out)
  assert GlobalCounters.kernel_count == count

def test_blocks_nest_accumulators(device, monkeypatch, small_blocks):
  x = Tensor(np.ones(1031, np.float32)).realize()
  (depths,) = acc_depths(lambda: x.sum().realize(), monkeypatch)
  assert len(set(depths)) >= 3, depths   # a block inside a block inside the outer sum
  (depths,) = acc_depths(lambda: (x * 2).max().realize(), monkeypatch)
  assert len(set(depths)) == 1   # MAX is exact: not blocked

def test_small_blocks_keep_small_values(device, small_blocks):
  # 2**24 then ones: a float32 accumulator that holds 2**24 drops every 1 added to it (2**24 + 1 rounds to 2**24): one
  # accumulator (PYTHON) loses all 1002, one per lane (CPU) ~1002/lanes; blocks lose those of the first block only
  a = np.ones(1003, np.float32)
  a[0] = 2**24
  assert abs(Tensor(a).sum().item() - (2**24 + 1002)) <= 8

def _pad(t):
  if isinstance(t, Tensor): return t.pad(((3, 4), (1, 0)))
  import torch
  return torch.nn.functional.pad(t, (1, 0, 3, 4))

@pytest.mark.parametrize("shape,fn", [
  ((37, 29), lambda t: t.sum()), ((7, 61), lambda t: t.sum(1)), ((61, 8), lambda t: t.sum(0)), ((59, 5), lambda t: t.sum(0)),
  ((5, 3, 23), lambda t: t.sum((0, 2))), ((3, 41), lambda t: t.var(1)), ((4, 50), lambda t: t.softmax(-1)),
  ((12, 33), lambda t: t @ t.T), ((33, 12), lambda t: t.T @ t), ((6, 27), lambda t: (t @ t.T).sum()),
  ((40, 6), lambda t: t.permute(1, 0).sum(1)), ((30, 5), lambda t: _pad(t).sum(0)), ((200,), lambda t: t.double().sum()),
  ((200,), lambda t: t.half().mean().float()), ((9, 25), lambda t: t.sum(1, keepdim=True) * t)])
def test_small_blocks_agree_with_torch(device, small_blocks, shape, fn):
  import torch
  a = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
  want = fn(torch.from_numpy(a)).numpy()
  tol = 2e-3 if shape == (200,) else 1e-5
  np.testing.assert_allclose(fn(Tensor(a)).numpy(), want, rtol=tol, atol=tol)
  with Context(NOOPT=1): np.testing.assert_allclose(fn(Tensor(a)).numpy(), want, rtol=tol, atol=tol)
