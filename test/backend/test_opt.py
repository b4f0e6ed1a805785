"""Kernel optimizations never change results: heuristics, NOOPT, threads and BEAM agree."""
from __future__ import annotations
import numpy as np
import pytest
from petagrad import Tensor, Context, Device
from petagrad.helpers import DISABLE_DISK_CACHE
from petagrad.models.quant import quantize, pack, q8_0_matvec
from petagrad.mixin.conv import winograd_weight

CASES = {
  "matmul": (lambda a, b: a @ b, [(64, 48), (48, 80)]),
  "matmul_odd": (lambda a, b: a @ b, [(33, 17), (17, 50)]),
  "matmul_bT": (lambda a, b: a @ b.T, [(32, 64), (48, 64)]),
  "matmul_aT": (lambda a, b: a.T @ b, [(64, 32), (64, 48)]),
  "gemv": (lambda a, b: a @ b.T, [(1, 512), (1024, 512)]),                    # a decode step's product (one row at a time)
  "gemv_int8": (lambda a, b: a @ ((b * 20).clip(-100, 100).cast("int8").cast("float32") * 0.05).T, [(1, 512), (1024, 512)]),
  "gemv_q8_0": (lambda a, b: a @ quantize(b, "q8_0")[1].T, [(1, 512), (1024, 512)]),
  "gemv_q8_0_a8": (lambda a, b: q8_0_matvec(a, pack(b, "q8_0"), 1024), [(1, 512), (1024, 512)]),   # int8 activations: DOT4s
  "dot_int8": (lambda a, b: (_int8(a).cast("int32") * _int8(b).cast("int32")).sum(1), [(16, 256), (16, 256)]),
  "bmm": (lambda a, b: a @ b, [(3, 16, 32), (3, 32, 16)]),
  "matmul_bias_relu": (lambda a, b, c: (a @ b + c).relu(), [(64, 32), (32, 48), (48,)]),
  "sum0": (lambda a: a.sum(0), [(64, 128)]),
  "sum1": (lambda a: a.sum(1), [(64, 128)]),
  "max0": (lambda a: a.max(axis=0), [(64, 128)]),
  "max1": (lambda a: a.max(axis=1), [(64, 128)]),
  "softmax": (lambda a: a.softmax(-1), [(64, 128)]),
  "softmax0": (lambda a: a.softmax(0), [(64, 128)]),
  "chain": (lambda a, b, c: ((a * b + c).relu() * 0.5).exp(), [(200, 300)] * 3),
  "log": (lambda a: (a.abs() + 0.1).log(), [(300, 200)]),
  "var": (lambda a: a.var(1), [(64, 128)]),
  "argmax": (lambda a: a.argmax(1), [(64, 128)]),
  "pad_sum": (lambda a: a.pad(((1, 2), (3, 4))).sum(0), [(64, 128)]),
  "half_matmul": (lambda a, b: (a.half() @ b.half()).float(), [(32, 32), (32, 48)]),
  "double_sum": (lambda a: a.double().sum(0), [(64, 96)]),
  "int_sum": (lambda a: (a * 100).cast("int32").sum(1), [(16, 64)]),
  "int_matmul": (lambda a, b: ((a * 10).cast("int32") @ (b * 10).cast("int32")).float(), [(16, 32), (32, 48)]),
  "where_after_matmul": (lambda a, b: ((a @ b) > 0).where(a @ b, -1.0).sum(0), [(32, 16), (16, 64)]),
  "bool_reduce": (lambda a: (a > 0).any(0).float() + (a > 0.5).all(0).float(), [(32, 64)]),
  "masked_colsum": (lambda a, b: ((a > b) & (b > 0)).where(a, b).sum(0), [(32, 64), (32, 64)]),
  "cast_colsum": (lambda a: (a > 0).cast("float32").sum(0) + (a * 3).cast("int32").cast("float32").max(axis=0), [(32, 64)]),
  "double_colmax": (lambda a: a.double().max(axis=0).float() + a.double().sum(0).float(), [(32, 64)]),
  "conv_pad": (lambda x, w: x.conv2d(w, padding=1), [(2, 8, 12, 16), (8, 8, 3, 3)]),
  "conv_pad2_stride": (lambda x, w: x.conv2d(w, padding=2, stride=2), [(2, 4, 13, 17), (8, 4, 5, 5)]),
  "conv_relu_bias": (lambda x, w, b: x.conv2d(w, b, padding=1).relu(), [(1, 3, 16, 32), (16, 3, 3, 3), (16,)]),
  "exp_log_colsum": (lambda a: (a.exp() + (a.abs() + 1).log()).sum(0), [(32, 64)]),
  "stack_pieces": (lambda a, b: Tensor.stack(a + b, a * b, a - 1, b.exp(), a.relu(), dim=1), [(24, 40), (24, 40)]),   # joined: unrolled
  "cat_cols": (lambda a, b: a.cat(b * 2, a[:, :3], dim=1), [(16, 13), (16, 5)]),
  "conv_winograd": (lambda x, w: x.conv2d(w * 0.1, padding=1, winograd=winograd_weight(w * 0.1)), [(2, 8, 9, 11), (16, 8, 3, 3)]),
}

def _int8(a: Tensor) -> Tensor:
  """a as int8 over the whole range, -128 (at most -3.2 sigma) and 127 included."""
  return (a * 40).clip(-128, 127).cast("int8")

def _run(fn, xs, **flags):
  with Context(**flags):
    return fn(*[Tensor(x, device="CPU") for x in xs]).numpy()

@pytest.mark.parametrize("name", list(CASES))
def test_opts_agree_with_noopt(name):
  fn, shapes = CASES[name]
  rng = np.random.default_rng(0)
  xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  ref = _run(fn, xs, NOOPT=1)
  for flags in ({}, {"THREADS": 2}):
    np.testing.assert_allclose(_run(fn, xs, **flags), ref, rtol=2e-5, atol=2e-5, err_msg=f"{name} with {flags}")

def test_signed_zeros_survive_vector_code():
  """-0.0 broadcast into vector lanes stays -0.0 (x + 0 would make it +0.0), and a sum of -0.0s is +0.0 whether its
  loop runs, is unrolled or is vectorized (the identity +0.0 starts it), as in torch. Read through 1/x: -inf vs inf."""
  import torch
  x, y = np.ones((64, 64), np.float32), np.full((64, 1), -0.0, np.float32)
  fns = {"broadcast": lambda a, b: 1 / (a * b), "row_sum": lambda a, b: 1 / (a * b).sum(1), "col_sum": lambda a, b: 1 / (a * b).sum(0),
         "short_sum": lambda a, b: 1 / (a * b)[:, :4].sum(1)}
  for name, fn in fns.items():
    want = fn(torch.from_numpy(x), torch.from_numpy(y)).numpy()
    for flags in ({}, {"NOOPT": 1}, {"THREADS": 2}):
      np.testing.assert_array_equal(_run(fn, [x, y], **flags), want, err_msg=f"{name} with {flags}")

@pytest.mark.parametrize("name", ["matmul", "sum1", "gemv_q8_0_a8"])
def test_beam_agrees(name, tmp_path):
  fn, shapes = CASES[name]
  rng = np.random.default_rng(1)
  xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
  ref = _run(fn, xs, NOOPT=1)
  np.testing.assert_allclose(_run(fn, xs, BEAM=2, CACHEDIR=str(tmp_path)), ref, rtol=2e-5, atol=2e-5)

def test_beam_on_data_dependent_indices(tmp_path):
  # a gather's index is loaded data (bounds: the dtype's) and a Variable's too: the scratch buffers BEAM times on are
  # sized with those loads read as 0, not to 2**31 elements
  from petagrad import Variable
  a = np.random.default_rng(2).standard_normal((100, 8)).astype(np.float32)
  v = Variable("row", 0, 90)
  with Context(BEAM=1, CACHEDIR=str(tmp_path)):
    np.testing.assert_array_equal(Tensor(a)[Tensor([5, 99, 0])].numpy(), a[[5, 99, 0]])
    np.testing.assert_array_equal(Tensor(a)[v.bind(7):v.bind(7) + 4].numpy(), a[7:11])

def test_exp2_log2_decomposition_accuracy():
  # (below -150, where the result rounds to 0, too: those lanes compute no subnormal; -inf is a causal mask's)
  x = np.concatenate([np.linspace(-150, 128, 5001), [np.inf, -np.inf, np.nan, 0.0, -0.0, -150.5, -151, -1e30]]).astype(np.float32)
  got = Tensor(x, device="CPU").exp2().numpy()
  ref = np.exp2(x.astype(np.float64)).astype(np.float32)
  np.testing.assert_allclose(got, ref, rtol=3e-7, atol=0, equal_nan=True)
  y = np.concatenate([np.exp(np.linspace(-80, 80, 5001)), [np.inf, 0.0, -1.0, np.nan, 1e-42]]).astype(np.float32)
  with np.errstate(all="ignore"): ref = np.log2(y.astype(np.float64)).astype(np.float32)
  np.testing.assert_allclose(Tensor(y, device="CPU").log2().numpy(), ref, rtol=1e-6, atol=1e-6, equal_nan=True)

def test_float64_decompositions_accuracy(monkeypatch):
  """The float64 exp2/log2/sin of targets without a math library (HIP), run on the CPU: within ~1 ulp of numpy."""
  import petagrad.engine.realize as R
  from petagrad.device import Device
  from petagrad.uop.ops import Ops
  from petagrad.dtype import dtypes
  r = Device["CPU"].renderer
  monkeypatch.setattr(r, "decompose_ops", r.decompose_ops | {(op, dtypes.float64) for op in (Ops.EXP2, Ops.LOG2, Ops.SIN)})
  monkeypatch.setattr(R, "_kernel_cache", {})
  with Context(DISABLE_DISK_CACHE=1), np.errstate(all="ignore"):
    x = np.concatenate([np.linspace(-1100, 1100, 20001), [np.inf, -np.inf, np.nan, 0.0, -0.0, -1074.5]])
    np.testing.assert_allclose(Tensor(x).exp2().numpy(), np.exp2(x), rtol=5e-16, atol=1e-323, equal_nan=True)   # subnormals: 1 ulp
    y = np.concatenate([np.exp(np.linspace(-700, 700, 20001)), [np.inf, 0.0, -1.0, np.nan, 5e-324, 1e-310]])
    np.testing.assert_allclose(Tensor(y).log2().numpy(), np.log2(y), rtol=5e-16, atol=0, equal_nan=True)
    z = np.concatenate([np.linspace(-1e4, 1e4, 200001), np.linspace(-1e6, 1e6, 1001), [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-310]])
    np.testing.assert_allclose(Tensor(z).sin().numpy(), np.sin(z), rtol=0, atol=3e-16, equal_nan=True)

def test_swap_reorders_loops_and_keeps_results(monkeypatch):
  import petagrad.engine.realize as R
  from petagrad.codegen.opt import Opt, OptOps, OptError
  seen = []
  def swap_first_two(k, *_):
    k.normalize_ranges()
    g = [i for i, r in enumerate(k.ranges) if r.arg[2] == "global"]
    if len(g) >= 2:
      before = [r.arg[1] for r in k.ranges]
      k.apply(Opt(OptOps.SWAP, g[0], g[1]))
      seen.append((before, [r.arg[1] for r in k.ranges]))
      red = [i for i, r in enumerate(k.ranges) if r.arg[2] == "reduce"]
      if red:
        with pytest.raises(OptError): k.apply(Opt(OptOps.SWAP, g[0], red[0]))
    return k
  monkeypatch.setattr(R, "hand_coded_optimizations", swap_first_two)
  monkeypatch.setattr(R, "_kernel_cache", {})
  monkeypatch.setattr(DISABLE_DISK_CACHE, "value", 1)   # programs generated earlier would skip the patched heuristics
  rng = np.random.default_rng(2)
  a, b = rng.standard_normal((24, 40)).astype(np.float32), rng.standard_normal((40, 56)).astype(np.float32)
  a3 = rng.standard_normal((3, 5, 7)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose((Tensor(a3).permute(2, 0, 1) * 2).numpy(), a3.transpose(2, 0, 1) * 2, rtol=1e-6)
  assert any(before[:2] == after[:2][::-1] for before, after in seen)

def test_tile_nests_a_block_loop_and_keeps_results(monkeypatch):
  import petagrad.engine.realize as R
  from petagrad.codegen.opt import Opt, OptOps, OptError
  tiled = []
  def tile_first(k, *_):
    k.normalize_ranges()
    g = [i for i, r in enumerate(k.ranges) if r.arg[2] == "global"]
    size = k.ranges[g[0]].arg[1]
    if size % 4 == 0 and size > 4:
      k.apply(Opt(OptOps.TILE, g[0], 4))
      gl = [r.arg[1] for r in k.ranges if r.arg[2] == "global"]
      tiled.append((size, gl))
    red = [i for i, r in enumerate(k.ranges) if r.arg[2] == "reduce"]
    if red:
      with pytest.raises(OptError): k.apply(Opt(OptOps.TILE, red[0], 2))
    return k
  monkeypatch.setattr(R, "hand_coded_optimizations", tile_first)
  monkeypatch.setattr(R, "_kernel_cache", {})
  monkeypatch.setattr(DISABLE_DISK_CACHE, "value", 1)
  rng = np.random.default_rng(4)
  a, b = rng.standard_normal((24, 40)).astype(np.float32), rng.standard_normal((40, 56)).astype(np.float32)
  np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-5, atol=1e-5)
  # the outer part keeps the first place, the block of 4 is the innermost output loop
  assert any(gl[0] == size // 4 and gl[-1] == 4 for size, gl in tiled)

@pytest.mark.parametrize("vector_bytes", [16, 32, 64])
def test_register_width_sizes_lanes_and_tiles(monkeypatch, applied_opts, vector_bytes):
  """Lanes and register tiles follow the SIMD register the CPU device reports (SSE/NEON, AVX2, AVX-512), and every
  width computes the same results as NOOPT: the machine running the tests has one of them, the others are checked
  here."""
  from petagrad.device import Device
  from petagrad.codegen.opt import OptOps
  applied = applied_opts   # (the fixture empties the kernel caches: every kernel is optimized with this width)
  monkeypatch.setattr(Device["CPU"].renderer, "vector_bytes", vector_bytes)
  rng = np.random.default_rng(3)
  for name in ["matmul", "matmul_bT", "matmul_aT", "sum0", "sum1", "conv_pad", "half_matmul", "masked_colsum", "softmax0"]:
    fn, shapes = CASES[name]
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    applied.clear()
    got = _run(fn, xs)
    np.testing.assert_allclose(got, _run(fn, xs, NOOPT=1), rtol=2e-5, atol=2e-5, err_msg=f"{name}, {vector_bytes}-byte vectors")
    if name == "matmul":   # 64x48 @ 48x80: lanes of one register, a tile of 8 (AVX-512) or 4 rows
      vec = [o.amount for o in applied[0] if o.op is OptOps.VECTOR]
      rows = [o.amount for o in applied[0] if o.op is OptOps.UPCAST]
      assert vec == [vector_bytes // 4] and rows[0] == (8 if vector_bytes == 64 else 4), applied[0]

def _cpu_sources(monkeypatch) -> list[str]:
  """The list every CPU kernel compiled from now on (caches emptied) appends its source to (not COMPILE_ALSO's)."""
  import petagrad.engine.realize as R
  monkeypatch.setattr(R, "_kernel_cache", {})
  monkeypatch.setattr(DISABLE_DISK_CACHE, "value", 1)
  srcs: list[str] = []
  compile_kernels = R.compile_kernels
  def spy(device, todo):
    out = compile_kernels(device, todo)
    if device == "CPU": srcs.extend(ck.src for ck in out if not isinstance(ck, Exception))
    return out
  monkeypatch.setattr(R, "compile_kernels", spy)
  return srcs

def test_matrix_vector_product_reads_far_apart_rows(applied_opts):
  # a product over one row reads its weight once: each thread reads rows from 4 parts of the weight side by side, 4
  # long sequential streams (heuristic.py _far_streams: the output range tiled in 4 parts, the parts unrolled), never
  # adjacent rows (streams of one row each), float and Q8_0 alike; a product with reuse (64 rows) gets a register tile
  from petagrad.codegen.opt import OptOps
  from petagrad.codegen.heuristic import FAR_STREAMS
  rng = np.random.default_rng(3)
  x, x64, w = (rng.standard_normal(s).astype(np.float32) for s in ((1, 512), (64, 512), (1024, 512)))
  wt = Tensor(w, device="CPU")
  q = quantize(wt, "q8_0")[1]
  np.testing.assert_allclose((Tensor(x, device="CPU") @ wt.T).numpy(), x @ w.T, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose((Tensor(x, device="CPU") @ q.T).numpy(), x @ q.numpy().T, rtol=1e-4, atol=1e-4)
  products = [a for a in applied_opts if any(o.op is OptOps.VECTOR for o in a)][-2:]
  def far(a) -> bool:
    tile = [o for o in a if o.op is OptOps.TILE]
    return [o.amount for o in a if o.op is OptOps.UPCAST] == [FAR_STREAMS] and len(tile) == 1 and tile[0].amount == 1024 // FAR_STREAMS
  assert len(products) == 2 and all(far(a) for a in products), applied_opts
  applied_opts.clear()
  np.testing.assert_allclose((Tensor(x64, device="CPU") @ wt.T).numpy(), x64 @ w.T, rtol=1e-4, atol=1e-4)
  assert any(o.op is OptOps.UPCAST for a in applied_opts for o in a), applied_opts

def test_joined_pieces_are_unrolled(applied_opts):
  # a kernel that joins pieces (stack, cat: each piece padded into place and selected) computes one piece per
  # output, not every piece behind its mask: unrolled along the joined range (a mask compares it with constants), then
  # vector lanes along the contiguous store. A Winograd convolution's transforms join 6 pieces per pass (the weight's and
  # the input's: two passes each) and 4 x 4 (the output's)
  from petagrad.codegen.opt import OptOps
  rng = np.random.default_rng(5)
  an, bn = rng.standard_normal((24, 64)).astype(np.float32), rng.standard_normal((24, 64)).astype(np.float32)
  a, b = Tensor(an, device="CPU"), Tensor(bn, device="CPU")
  got = Tensor.stack(a + b, a * b, a - 1, dim=1).numpy()
  np.testing.assert_allclose(got, np.stack([an + bn, an * bn, an - 1], 1), rtol=1e-6)
  # (the CPU's kernels: under COMPILE_ALSO the same kernels are optimized for GPU targets too, with work-groups)
  def cpu() -> list: return [a for a in applied_opts if not any(o.op in (OptOps.LOCAL, OptOps.GROUP) for o in a)]
  assert [(o.op, o.amount) for o in cpu()[-1]][:2] == [(OptOps.UPCAST, 3), (OptOps.VECTOR, 16)], applied_opts
  # the output transform is unrolled 4 x 4 and no more: a batch of 2 (and 2 x 2 tiles) is not, no mask cuts those
  # ranges, so they join nothing. An output that is no whole number of tiles (6 x 6) is computed in whole tiles and
  # cropped after: cropped in the output transform, a row would not split into (tile, position) and every value would
  # select among the 16 pieces (1.1 MB of C, 31 s of gcc)
  # (kernels unrolled by 6: the weight's two passes, the input's two, and at 12 x 12 the products too: 18 tiles tile by 6)
  for shape, pad, by6 in (((2, 8, 12, 12), 1, 5), ((2, 8, 8, 8), 0, 4)):
    applied_opts.clear()
    x, w = (Tensor(rng.standard_normal(s).astype(np.float32), device="CPU") for s in (shape, (16, 8, 3, 3)))
    got = x.conv2d(w, padding=pad, winograd=winograd_weight(w)).numpy()
    upcasts = [[o.amount for o in a if o.op is OptOps.UPCAST] for a in cpu()]
    np.testing.assert_allclose(got, x.conv2d(w, padding=pad).numpy(), rtol=1e-4, atol=1e-4)
    assert sum(6 in u for u in upcasts) == by6 and sum(sorted(u) == [4, 4] for u in upcasts) == 1, (shape, applied_opts)

def test_unrolled_products_share_their_common_factor():
  # an unrolled sum whose copies multiply by the same node (the two 16-lane halves of a Q8_0 block, both times the
  # block's scale) multiplies by it once: a*d + b*d + c*e + f*e -> (a + b)*d + (c + f)*e; a copy without a shared
  # factor stays as it is
  from petagrad.codegen.expand import UNROLLED, _combine, _factor_shared, tree_leaves
  from petagrad.uop.ops import Ops
  from petagrad.uop.uop import UOp
  from petagrad.dtype import dtypes
  buf = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 0)
  a, b, c, d, e, f, g = (UOp(Ops.LOAD, dtypes.float32, (buf, UOp.const(dtypes.index, i))) for i in range(7))
  out = _factor_shared(_combine(Ops.ADD, [a * d, b * d, c * e, e * f, g], UNROLLED))
  terms = tree_leaves(out, Ops.ADD, UNROLLED)
  assert len(terms) == 3 and terms[2] is g
  assert [(set(tree_leaves(t.src[0], Ops.ADD)), t.src[1]) for t in terms[:2]] == [({a, b}, d), ({c, f}, e)]
  assert _factor_shared(_combine(Ops.ADD, [a * b, c * d], UNROLLED)) is _combine(Ops.ADD, [a * b, c * d], UNROLLED)

def test_every_other_element_is_two_vector_loads_and_a_shuffle(monkeypatch):
  # a load of elements 2 apart along the vector (a 2x2 pool's window, the input of a stride-2 convolution over a padded input) is two vector loads
  # and a shuffle, not 16 scalar loads (the stem conv of bench/onnx_inference.py: 609 -> 148 us). The two loads read
  # exactly the span of the elements wanted: the pool's last window ends on the buffer's last element (SANITIZE=1)
  import re, torch
  import petagrad.engine.realize as R
  srcs = _cpu_sources(monkeypatch)
  pair = re.compile(r"__builtin_shufflevector\((\w+), (?!\1\W)\w+")
  rng = np.random.default_rng(5)
  a = rng.standard_normal((2, 4, 16, 64)).astype(np.float32)
  a[0, 1, 3, 5] = np.nan
  ai = rng.integers(-1000, 1000, (2, 4, 16, 64)).astype(np.int32)
  for sanitize in (0, 1):
    monkeypatch.setattr(R, "_kernel_cache", {})
    srcs.clear()
    with Context(SANITIZE=sanitize):
      for x in (a, ai):
        want = torch.nn.functional.max_pool2d(torch.from_numpy(x.astype(np.float32)), 2).numpy().astype(x.dtype)
        np.testing.assert_array_equal(Tensor(x, device="CPU").max_pool2d(2).numpy(), want)
    if Device["CPU"].renderer.vector_bytes >= 32: assert len(srcs) == 2 and all(pair.search(s) for s in srcs)
  x, w = rng.standard_normal((2, 3, 33, 65)).astype(np.float32), rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
  srcs.clear()
  got = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), stride=2).numpy()
  want = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
  if Device["CPU"].renderer.vector_bytes >= 32: assert any(pair.search(s) for s in srcs)

def test_register_tile_adds_unrolled_products_one_by_one(monkeypatch):
  # a 3x3 conv's register tile (8 accumulators, the 3 rows of its window unrolled) adds each row's product into its
  # accumulator on its own (3 fused multiply-adds) instead of summing the 3 products first (a multiply, 2 FMAs and an
  # add: 78% -> 94% of one core's FMA peak); a single accumulator (a row sum) keeps the tree: one add on its chain
  import re, torch
  srcs = _cpu_sources(monkeypatch)
  rng = np.random.default_rng(7)
  x, w = rng.standard_normal((2, 32, 18, 18)).astype(np.float32), rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
  got = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU")).numpy()
  np.testing.assert_allclose(got, torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w)).numpy(), rtol=1e-4, atol=1e-4)
  conv = [src for src in srcs if "void r_" in src]
  if Device["CPU"].renderer.vector_bytes >= 32:
    updates = re.findall(r"(acc\d+) = \(\1 \+ (\w+)\);", conv[0])
    per_acc = {a: sum(1 for b, _ in updates if b == a) for a, _ in updates}
    assert len(per_acc) >= 4 and all(n == 3 for n in per_acc.values()), per_acc

def test_padded_copy_runs_its_loops_in_pieces(monkeypatch):
  # an elementwise kernel whose masks compare an output loop with constants (a padded copy: 0 < x < 17) runs that loop
  # as consecutive pieces, each with its masks known: the border pieces store zeros, the interior reads without a select
  # (a BatchNorm+ReLU written padded for the next conv: 110 -> 35 us, bench/onnx_inference.py). The same values as numpy
  # for pads, a cat along the last axis, 1-wide pieces and a bounds-checked build
  import petagrad.engine.realize as R
  srcs = _cpu_sources(monkeypatch)
  rng = np.random.default_rng(6)
  a, b = rng.standard_normal((4, 8, 16, 16)).astype(np.float32), rng.standard_normal((4, 8, 16, 3)).astype(np.float32)
  for sanitize in (0, 1):
    monkeypatch.setattr(R, "_kernel_cache", {})
    srcs.clear()
    with Context(SANITIZE=sanitize):
      x = Tensor(a, device="CPU")
      np.testing.assert_array_equal((x.relu() + 1).pad(((0, 0), (0, 0), (1, 1), (2, 1))).numpy(),
                                    np.pad(np.maximum(a, 0) + 1, ((0, 0), (0, 0), (1, 1), (2, 1))))
      np.testing.assert_array_equal(x.cat(Tensor(b, device="CPU"), dim=3).numpy(), np.concatenate([a, b], 3))
      np.testing.assert_array_equal(x[:, :, :1, :].pad(((0, 0), (0, 0), (0, 0), (0, 1)), value=2.0).numpy(),
                                    np.pad(a[:, :, :1, :], ((0, 0), (0, 0), (0, 0), (0, 1)), constant_values=2.0))
    if not sanitize:
      body = srcs[0][srcs[0].index("void E_"):]
      # the rows in 3 pieces; the border rows are one loop of zeros, the interior rows 3 pieces (zeros, data, zeros): 5
      # innermost loops, and no select on a load (no "? data")
      assert body.count("#pragma omp simd") == 5 and "? data" not in body, body

def test_horizontal_reduce_halves_the_vector(monkeypatch):
  # a row reduced inside one vector (softmax's max and sum over 64 keys) combines the lanes by halving the vector
  # (16 -> 8 -> 4 -> 2 -> 1: four vector ops, not 15 scalar ones; NaN-aware max 144 -> 15 us for 2048 rows); the
  # results are those of numpy, NaNs, infinities and ints included
  srcs = _cpu_sources(monkeypatch)
  rng = np.random.default_rng(4)
  a = rng.standard_normal((256, 64)).astype(np.float32)
  a[3, 17], a[5, 60], a[7, 0] = np.nan, np.inf, -np.inf
  x = Tensor(a, device="CPU")
  np.testing.assert_array_equal(x.amax(1).numpy(), a.max(1))
  np.testing.assert_allclose(x.sum(1).numpy(), a.sum(1), rtol=1e-5, atol=1e-5)
  ai = rng.integers(-1000, 1000, (256, 64)).astype(np.int32)
  np.testing.assert_array_equal(Tensor(ai, device="CPU").amax(1).numpy(), ai.max(1))
  np.testing.assert_array_equal(Tensor(ai, device="CPU").sum(1).numpy(), ai.sum(1))
  if Device["CPU"].renderer.vector_bytes >= 32: assert srcs and all("__builtin_shufflevector" in s for s in srcs)

def test_transposing_copy_moves_8x8_blocks(monkeypatch):
  # a copy whose load runs down a column (a weight's row-major copy for a matmul, an optimizer update reading a gradient
  # laid out transposed) moves 8 x 8 blocks: the store's range as 8 lanes, the load's contiguous range unrolled 8 times
  # and innermost (128 x 512 floats 173 -> 39 us, 1024 x 1024 4.1 -> 0.84 ms). Shapes that are not multiples of 8 keep
  # the plain loops; values as numpy's, with and without bounds checks
  import petagrad.engine.realize as R
  srcs = _cpu_sources(monkeypatch)
  rng = np.random.default_rng(8)
  for sanitize in (0, 1):
    for shape, perm, tiled in [((128, 512), (1, 0), True), ((24, 40), (1, 0), True), ((9, 16), (1, 0), False), ((4, 16, 24), (0, 2, 1), True),
                               ((3, 8, 4, 16), (0, 3, 2, 1), True)]:
      monkeypatch.setattr(R, "_kernel_cache", {})
      srcs.clear()
      a = rng.standard_normal(shape).astype(np.float32)
      with Context(SANITIZE=sanitize):
        np.testing.assert_array_equal((Tensor(a, device="CPU").permute(perm) * 2).numpy(), a.transpose(perm) * 2)
      if Device["CPU"].renderer.supports_vector:
        assert len(srcs) == 1 and ("float_v8" in srcs[0]) == tiled, srcs

def test_padded_window_reads_are_masked_vector_loads(monkeypatch):
  # a vector load whose lanes cross a padding mask (a depthwise convolution's or a padded pool's window at the ends of
  # a row) is one masked load on AVX-512 machines, its mask compared in 32-bit lanes, and the window unrolled so the
  # masks are computed once per row (depthwise 3x3 over 16x64x32x32: 524 -> 211 us here). The masked-off lanes are never
  # read: the first row's window starts one element before the buffer. Same values with bounds checks (lane by lane)
  import torch
  import petagrad.engine.realize as R
  srcs = _cpu_sources(monkeypatch)
  rng = np.random.default_rng(7)
  x, w = rng.standard_normal((2, 4, 16, 16)).astype(np.float32), rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
  want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(w), groups=4, padding=1).numpy()
  pool = torch.nn.functional.max_pool2d(torch.tensor(x), 3, 1, padding=1).numpy()
  for sanitize in (0, 1):
    monkeypatch.setattr(R, "_kernel_cache", {})
    srcs.clear()
    with Context(SANITIZE=sanitize):
      np.testing.assert_allclose(Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), groups=4, padding=1).numpy(), want, rtol=1e-5, atol=1e-5)
      np.testing.assert_array_equal(Tensor(x, device="CPU").max_pool2d(3, 1, padding=1).numpy(), pool)
    if not sanitize and Device["CPU"].renderer.masked_loads:
      conv = next(s for s in srcs if "void r_" in s)
      assert "_mm512_maskz_loadu_ps" in conv and "long_long_v" not in conv, conv
      assert "for (long long ridx" not in conv, conv   # (both window loops unrolled)
  # every dtype with a masked load (float64, 32- and 64-bit integers; 256- and 512-bit vectors): a padded 3x3 window sum
  srcs.clear()
  for npdt in (np.float32, np.float64, np.int32, np.int64, np.uint32):
    for w in (8, 16):
      a = rng.integers(0, 50, (2, 3, 5, w)).astype(npdt)
      got = Tensor(a, device="CPU").pad((1, 1, 1, 1))._pool((3, 3), (1, 1), (1, 1)).sum((-2, -1)).numpy()
      ref = sum(np.pad(a, ((0, 0), (0, 0), (1, 1), (1, 1)))[:, :, i:i + 5, j:j + w] for i in range(3) for j in range(3))
      np.testing.assert_array_equal(got, ref.astype(got.dtype))
  if Device["CPU"].renderer.masked_loads:
    used = {m for s in srcs for m in ("_maskz_loadu_ps", "_maskz_loadu_pd", "_maskz_loadu_epi32", "_maskz_loadu_epi64") if m in s}
    assert len(used) == 4, used

def test_int8_dot_products_are_dot4s(monkeypatch):
  # a sum of int8 products over contiguous memory takes 4 products per int32 lane in one instruction where the CPU has
  # AVX-512 VNNI (Ops.DOT4 -> vpdpbusd): exact for every int8, -128 x -128 included (the usual sign trick is not), in
  # 128-, 256- and 512-bit vectors, and scaled per block of 32 (a Q8_0 weight times Q8_0 activations); the same values
  # with bounds checks and without the optimizer
  srcs = _cpu_sources(monkeypatch)
  rng = np.random.default_rng(8)
  for n in (16, 32, 64, 256):
    a, b = rng.integers(-128, 128, (8, n)).astype(np.int8), rng.integers(-128, 128, (8, n)).astype(np.int8)
    a[0], b[0] = -128, -128
    ref = (a.astype(np.int64) * b.astype(np.int64)).sum(1)
    for flags in ({}, {"SANITIZE": 1}, {"NOOPT": 1}):
      with Context(**flags):
        got = (Tensor(a, device="CPU").cast("int32") * Tensor(b, device="CPU").cast("int32")).sum(1).numpy()
      np.testing.assert_array_equal(got, ref, err_msg=f"{n} with {flags}")
  # (512 blocks of 32 make a long float sum, computed in nested blocks: Kernel.block_sums)
  for rows, nb in ((8, 8), (256, 512)):
    s = rng.standard_normal((rows, nb, 1)).astype(np.float32)
    a, b = rng.integers(-128, 128, (rows, nb, 32)).astype(np.int8), rng.integers(-128, 128, (1, nb, 32)).astype(np.int8)
    ref = ((a.astype(np.int64) * b).sum(2, keepdims=True) * s.astype(np.float64)).sum((1, 2))
    got = ((Tensor(a).cast("int32") * Tensor(b).cast("int32")).cast("float32") * Tensor(s)).sum((1, 2)).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-2)
  if Device["CPU"].renderer.dot4_lanes:
    used = {w for s in srcs for w, f in ((16, "_mm_dpbusd_epi32"), (32, "_mm256_dpbusd_epi32"), (64, "_mm512_dpbusd_epi32")) if f in s}
    assert used == {16, 32, 64}, used
    # (no kernel of int8 products is left with int32 lanes of products)
    assert not [s for s in srcs if "void r_" in s and "int_v32" in s], [s for s in srcs if "int_v32" in s][:1]

def test_vector_load_whose_lane_mask_agrees_in_a_piece():
  # a padded row of 28 loaded 4 lanes at a time: in a peeled piece of the loop the lane mask lane + 4*r < 29 is the same
  # for every lane (r < 6) and simplifies to one bool; the load is then gated by it, not rendered as a masked vector
  # load of a scalar mask (gcc: "cannot convert value to a vector"; ShuffleNet's depthwise 3x3 convolution)
  import torch
  rng = np.random.default_rng(7)
  xn, wn = rng.standard_normal((1, 136, 28, 28)).astype(np.float32), rng.standard_normal((136, 1, 3, 3)).astype(np.float32)
  got = Tensor(xn, device="CPU").conv2d(Tensor(wn, device="CPU"), padding=1, groups=136).numpy()
  want = torch.nn.functional.conv2d(torch.from_numpy(xn), torch.from_numpy(wn), padding=1, groups=136).numpy()
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
