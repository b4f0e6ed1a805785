"""dtypes vs PyTorch: cast, bitcast, promotion (tensor-tensor and tensor-scalar) and arithmetic in every dtype."""
import itertools
import numpy as np
import pytest
import torch
from petagrad import Tensor
from petagrad.dtype import dtypes, DType
from helpers import helper_test_op, compare, make_pair, stacked, TORCH_DTYPES, DEFAULT_TOL

ALL = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32", "float64"]
# the dtypes torch can promote and compute with on CPU (uint16/32/64 are storage-only in torch)
TORCH_FULL = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "bfloat16", "float32", "float64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]

def dt(name: str) -> DType: return getattr(dtypes, name)

# ------------------------------------------------------------------ cast

# values every dtype can hold exactly-ish; floats going to unsigned stay >= 0 (C leaves negative -> unsigned undefined)
CAST_SRC = {
  "bool": [True, False, True, True],
  "int8": [-128, -1, 0, 1, 5, 127], "int16": [-300, -1, 0, 1, 255, 32767], "int32": [-70000, -1, 0, 1, 256, 2**31 - 1],
  "int64": [-2**40, -1, 0, 1, 257, 2**40], "uint8": [0, 1, 127, 128, 200, 255], "uint16": [0, 1, 255, 256, 40000, 65535],
  "uint32": [0, 1, 255, 65536, 2**31, 2**32 - 1], "uint64": [0, 1, 255, 65536, 2**32, 2**40],
  "float16": [-2.5, -1.0, 0.0, 0.5, 1.75, 100.0], "bfloat16": [-2.5, -1.0, 0.0, 0.5, 1.75, 96.0],
  "float32": [-2.75, -1.0, -0.0, 0.3, 1.5, 100.9], "float64": [-2.75, -1.0, 0.0, 0.1, 1.5, 100.9],
}

def _cast_ok(src: str, dst: str, v) -> bool:
  """Only conversions C and torch both define: float -> int needs the truncated value to fit."""
  if src in FLOATS and dst in INTS + ["bool"]:
    if dst == "bool": return True
    info = np.iinfo(dst)
    return info.min <= int(v) <= info.max
  return True

def _np(values, name):
  if name == "bfloat16": return np.asarray(values, dtype=np.float32)
  return np.asarray(values, dtype=name)

@pytest.mark.parametrize("src", ALL)
def test_cast(device, src):
  # every target dtype in one kernel: cast to dst, then (exactly) to float64, stacked; the values here are
  # all exact in float64, so a wrong first cast shows, and the cast chain must not be folded into one cast
  pts, refs = [], []
  for dst in ALL:
    vals = [v for v in CAST_SRC[src] if _cast_ok(src, dst, v)]
    vals = vals + [vals[0]] * (len(CAST_SRC[src]) - len(vals))
    tt, pt = make_pair(_np(vals, src), src, requires_grad=False)
    assert pt.cast(dst).dtype == dt(dst) and pt.cast(dt(dst)).dtype == dt(dst) and pt.cast(dst).shape == pt.shape
    pts.append(pt.cast(dst).cast("float64")); refs.append(tt.to(TORCH_DTYPES[dst]).to(torch.float64))
  got, exp = Tensor.stack(pts).numpy(), torch.stack(refs).numpy()
  for i, dst in enumerate(ALL): np.testing.assert_array_equal(got[i], exp[i], err_msg=f"cast {src} -> {dst}")

def test_cast_single(device):
  # plain single casts (no chain) for a few pairs
  for src, dst in [("float32", "int32"), ("int32", "float32"), ("float32", "float16"), ("float16", "bfloat16"), ("int64", "int8"),
                   ("float64", "uint8"), ("bool", "float32"), ("float32", "bool"), ("uint8", "int8"), ("bfloat16", "float64")]:
    vals = [v for v in CAST_SRC[src] if _cast_ok(src, dst, v)]
    tt, pt = make_pair(_np(vals, src), src, requires_grad=False)
    compare(f"cast {src}->{dst}", pt.cast(dst), tt.to(TORCH_DTYPES[dst]), 0, 0)

def test_cast_methods(device):
  helper_test_op([(3, 4)], lambda x: x.float(), dtype="float16")
  helper_test_op([(3, 4)], lambda x: x.half())
  helper_test_op([(3, 4)], lambda x: x.double())
  helper_test_op([(3, 4)], lambda x: x.bfloat16())
  helper_test_op([(3, 4)], lambda x: x.int(), low=-5, high=5)
  helper_test_op([(3, 4)], lambda x: x.long(), low=-5, high=5)
  helper_test_op([(3, 4)], lambda x: x.bool())
  helper_test_op([(3, 4)], lambda x: x.to(torch.float64), lambda x: x.cast("float64"))

def test_cast_grad(device):
  # gradients flow through float casts and come back in the input dtype
  helper_test_op([(3, 4)], lambda x: x.half().float() * 2)
  helper_test_op([(3, 4)], lambda x: x.double().exp().float())
  helper_test_op([(3, 4)], lambda x: x.float() * 3, dtype="float16")
  helper_test_op([(3, 4)], lambda x: x.float() * 3, dtype="bfloat16")

def test_cast_float_to_int_truncates(device):
  helper_test_op(None, lambda x: x.int(), vals=[[-2.9, -2.5, -0.5, 0.5, 2.5, 2.9]])
  helper_test_op(None, lambda x: x.to(torch.uint8), lambda x: x.cast("uint8"), vals=[[0.5, 2.9, 254.9, 100.0]])

def test_cast_rounding_to_half(device):
  # round to nearest even in the narrowing float casts
  v = [[1.0 + 2**-11, 1.0 + 3 * 2**-11, 65504.0, 65520.0, 1e-8, 1.0 + 2**-8 + 2**-20, 3.0 + 2**-8]]
  helper_test_op(None, lambda x: x.half(), vals=v, forward_only=True)
  helper_test_op(None, lambda x: x.bfloat16(), vals=v, forward_only=True)

def test_cast_float64_to_half_rounds_once(device):
  # just below the midpoint of two halves: rounded to float32 first it lands on the midpoint, which ties to even upward
  # (PyTorch's CPU cast goes through float); every petagrad device rounds once, as numpy and PyTorch's CUDA cast do
  x = np.array([4.787109370613683, -4.794921760849859, 1.0 + 2**-11 - 2**-40, 1.0 + 2**-11 + 2**-40], dtype=np.float64)
  out = Tensor(x, device=device).cast(dtypes.float16).numpy()
  np.testing.assert_array_equal(out, x.astype(np.float16))
  assert out[0] == np.float16(4.78515625)

def test_cast_special_floats(device):
  v = [[float("inf"), float("-inf"), float("nan"), -0.0]]
  for f in FLOATS:
    helper_test_op(None, lambda x: x.to(TORCH_DTYPES[f]), lambda x: x.cast(f), vals=v, forward_only=True)
  helper_test_op(None, lambda x: x.bool(), vals=v, forward_only=True)

# ------------------------------------------------------------------ bitcast

BITCAST_GROUPS = [["float32", "int32", "uint32"], ["float16", "bfloat16", "int16", "uint16"], ["float64", "int64", "uint64"], ["int8", "uint8"]]

@pytest.mark.parametrize("group", BITCAST_GROUPS, ids=lambda g: g[0])
def test_bitcast(device, group):
  for src, dst in itertools.permutations(group, 2):
    vals = CAST_SRC[src]
    tt, pt = make_pair(_np(vals, src), src, requires_grad=False)
    ref = tt.view(TORCH_DTYPES[dst])
    if dst in ("uint16", "uint32", "uint64"):   # torch can't compare these; compare through numpy
      got = pt.bitcast(dst)
      assert got.dtype.name == dst and got.shape == tuple(ref.shape)
      np.testing.assert_array_equal(got.numpy(), ref.numpy())
    else:
      compare(f"bitcast {src}->{dst}", pt.bitcast(dst), ref, 0, 0)

def test_bitcast_known_bits(device):
  assert Tensor([1.0], dtype="float32").bitcast("int32").item() == 0x3f800000
  assert Tensor([-2.0], dtype="float16").bitcast("uint16").item() == 0xc000
  assert Tensor([1.0], dtype="bfloat16").bitcast("int16").item() == 0x3f80
  assert Tensor([0x3f800000], dtype="int32").bitcast("float32").item() == 1.0
  assert Tensor([-1], dtype="int8").bitcast("uint8").item() == 255

def test_bitcast_after_op(device):
  helper_test_op(None, lambda x: (x * 2).view(torch.int32), lambda x: (x * 2).bitcast("int32"), vals=[[1.0, -3.5, 0.1]], forward_only=True)
  helper_test_op(None, lambda x: (x + 1).view(torch.float32) * 1, lambda x: (x + 1).bitcast("float32") * 1,
                 vals=[[0x3f800000, 0x40000000]], dtype="int32")

@pytest.mark.parametrize("src,dst", [("uint16", "bfloat16"), ("int16", "float16"), ("float16", "bfloat16"), ("bfloat16", "int16")])
def test_bitcast_into_vector_math(device, src, dst):
  """A bitcast read in vector lanes (a matmul over it): half lanes are computed as floats (a uint16 -> bfloat16
  vector was once built as a uint16 vector and did not compile)."""
  bits = np.random.default_rng(0).integers(0x3c00 if "float16" in (src, dst) else 0x3f00, 0x3f80, (4, 6, 8)).astype(np.uint16)
  other = bits[:, ::-1].copy()
  def ref(b): return torch.from_numpy(b.view(np.int16)).view(TORCH_DTYPES[dst] if dst != "int16" else torch.int16).float()
  def ours(b): return Tensor(b, device=device).bitcast(src).bitcast(dst).float()
  want = ref(bits).transpose(1, 2) @ ref(other)
  got = ours(bits).transpose(1, 2) @ ours(other)
  np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)

def test_bitcast_size_mismatch(device):
  with pytest.raises(TypeError):
    Tensor([1.0]).bitcast("int16")

# ------------------------------------------------------------------ promotion

def _expected_promotion(a: str, b: str) -> str | None:
  """torch.promote_types, and numpy's answer where torch refuses (uint16/32/64); None: no common int type."""
  try: return str(torch.promote_types(TORCH_DTYPES[a], TORCH_DTYPES[b])).replace("torch.", "")
  except RuntimeError: pass
  if "bfloat16" in (a, b):
    other = b if a == "bfloat16" else a
    return "bfloat16" if other in INTS + ["bool", "bfloat16"] else "float32" if other == "float16" else other
  r = np.promote_types(a, b).name
  return None if r == "float64" and a not in FLOATS and b not in FLOATS else r

@pytest.mark.parametrize("a", ALL)
def test_promote_tensor_tensor(device, a):
  for b in ALL:
    exp = _expected_promotion(a, b)
    x, y = Tensor.zeros(2, dtype=a), Tensor.zeros(2, dtype=b)
    if exp is None:   # uint64 with a signed int: no integer dtype holds both
      with pytest.raises(TypeError): x * y
      continue
    for op in ("mul", "maximum", "where"):
      r = x.mul(y) if op == "mul" else x.maximum(y) if op == "maximum" else Tensor([True, False]).where(x, y)
      assert r.dtype.name == exp, f"{op}({a}, {b}) -> {r.dtype.name}, expected {exp}"
    if not (a == "bool" and b == "bool"):
      assert (x + y).dtype.name == exp, f"{a} + {b}"
    assert (x < y).dtype == dtypes.bool
    assert (x / y).dtype.name == (exp if exp in FLOATS else "float32"), f"{a} / {b}"

def test_promote_tensor_tensor_values(device):
  # mixed-dtype arithmetic computes in the promoted dtype
  for a, b in [("int8", "uint8"), ("int8", "int32"), ("uint8", "float16"), ("int32", "float32"), ("float16", "bfloat16"),
               ("float16", "float64"), ("bool", "int8"), ("bool", "float32"), ("int64", "float16"), ("uint8", "int16")]:
    helper_test_op([(6,), (6,)], lambda x, y: x * y + x, dtype=[a, b], low=-4, high=4, forward_only=True)
    if "bool" not in (a, b): helper_test_op([(6,), (6,)], lambda x, y: x - y, dtype=[a, b], low=-4, high=4, forward_only=True)

@pytest.mark.parametrize("a", TORCH_FULL)
def test_promote_tensor_scalar(device, a):
  x, tx = Tensor.ones(2, dtype=a), torch.ones(2, dtype=TORCH_DTYPES[a])
  for s in (2, 2.5, True, -3, 0.0):
    for name, f in [("mul", lambda p, q: p * q), ("rmul", lambda p, q: q * p), ("add", lambda p, q: p + q), ("radd", lambda p, q: q + p),
                    ("div", lambda p, q: p / q), ("max", lambda p, q: p.maximum(q) if isinstance(p, Tensor) else torch.maximum(p, torch.tensor(q)))]:
      if name == "max": continue   # torch.maximum takes no scalar
      exp = f(tx, s).dtype
      got = f(x, s).dtype
      assert got.name == str(exp).replace("torch.", ""), f"{a} {name} {s!r}: {got.name} != {exp}"
    exp = (tx < s).dtype
    assert (x < s).dtype.name == "bool" == str(exp).replace("torch.", "")

def test_promotion_examples(device):
  assert (Tensor.ones(2, dtype="float16") * 2.0).dtype == dtypes.float16
  assert (Tensor.ones(2, dtype="bfloat16") + 1).dtype == dtypes.bfloat16
  assert (Tensor.ones(2, dtype="int32") * 2.5).dtype == dtypes.float32
  assert (Tensor.ones(2, dtype="int8") + 1000).dtype == dtypes.int8
  assert (Tensor.ones(2, dtype="uint8") * 2).dtype == dtypes.uint8
  assert (Tensor([True]) + Tensor([True])).dtype == dtypes.bool
  assert (Tensor([True]) * 3).dtype == dtypes.int64
  assert (Tensor([True]) * 3.0).dtype == dtypes.float32
  assert (Tensor([1, 2]) / 2).dtype == dtypes.float32
  assert (Tensor([1, 2], dtype="int16") / Tensor([1, 2], dtype="int16")).dtype == dtypes.float32
  assert (Tensor([1.0], dtype="float64") * 2.5).dtype == dtypes.float64
  assert (Tensor([1], dtype="uint8") + Tensor([1], dtype="int8")).dtype == dtypes.int16
  assert (Tensor([1], dtype="uint32") + Tensor([1], dtype="int32")).dtype == dtypes.int64   # numpy rule (torch refuses)

def test_promotion_scalar_values(device):
  helper_test_op(None, lambda x: x * 2.5, vals=[[1, 2, -3]], dtype="int32")
  helper_test_op(None, lambda x: x + 1000, vals=[[1, 2, -3]], dtype="int8")
  helper_test_op(None, lambda x: x * 2.0, vals=[[1.5, 2.25, -3.0]], dtype="float16")
  helper_test_op(None, lambda x: 3 - x, vals=[[1.5, 2.25, -3.0]], dtype="bfloat16")
  helper_test_op(None, lambda x: x + x, vals=[[True, False, True]], dtype="bool")
  helper_test_op(None, lambda x: x * 3, vals=[[True, False, True]], dtype="bool")
  helper_test_op(None, lambda x: x + 0.5, vals=[[True, False, True]], dtype="bool")
  helper_test_op(None, lambda x: x * x, vals=[[True, False, True]], dtype="bool")
  helper_test_op(None, lambda x: x + True, vals=[[1, 2]], dtype="int8")

# ------------------------------------------------------------------ arithmetic in each dtype

def _int_range(d: str) -> tuple[int, int]:
  return (0, 12) if d.startswith("u") else (-12, 12)

@pytest.mark.parametrize("d", ["int8", "uint8", "int16", "int32", "int64"])
def test_int_arith(device, d):
  lo, hi = _int_range(d)
  where = lambda x, y: torch.where(x > y, x, y) if isinstance(x, torch.Tensor) else (x > y).where(x, y)
  helper_test_op([(12,), (12,)], stacked(lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x.maximum(y),
                                         lambda x, y: x.minimum(y), where, lambda x, y: x * 3 + 1), dtype=d, low=lo, high=hi, seed=3)
  helper_test_op([(12,), (12,)], stacked(lambda x, y: x < y, lambda x, y: x == y, lambda x, y: x >= y), dtype=d, low=lo, high=hi, seed=3)
  helper_test_op([(12,), (12,)], lambda x, y: x / y, dtype=d, low=lo, high=hi, seed=3)
  helper_test_op(None, stacked(lambda x, y: x // y, lambda x, y: x % y), vals=[[7, 9, 0, 12, 3], [2, 4, 5, 5, 7]], dtype=d)
  helper_test_op([(3, 4)], lambda x: x.sum(1), dtype=d, low=lo, high=hi)
  helper_test_op([(3, 4)], lambda x: x.amax(0), lambda x: x.max(axis=0), dtype=d, low=lo, high=hi)

@pytest.mark.parametrize("d", ["uint16", "uint32", "uint64"])
def test_uint_wide_arith(device, d):
  # torch can't compute in these dtypes: numpy is the reference
  a = np.array([0, 1, 7, 200, np.iinfo(d).max - 1, np.iinfo(d).max], dtype=d)
  b = np.array([3, 1, 2, 100, 1, 2], dtype=d)
  x, y = Tensor(a), Tensor(b)
  ops = [("add", lambda p, q: p + q, lambda p, q: p + q), ("sub", lambda p, q: p - q, lambda p, q: p - q),
         ("mul", lambda p, q: p * q, lambda p, q: p * q), ("floordiv", lambda p, q: p // q, lambda p, q: p // q),
         ("mod", lambda p, q: p % q, lambda p, q: p % q), ("and", lambda p, q: p & q, lambda p, q: p & q),
         ("xor", lambda p, q: p ^ q, lambda p, q: p ^ q), ("max", lambda p, q: p.maximum(q), np.maximum),
         ("min", lambda p, q: p.minimum(q), np.minimum), ("shr", lambda p, q: p >> q, lambda p, q: p >> q)]
  with np.errstate(over="ignore"):
    for name, pf, nf in ops: assert pf(x, y).dtype.name == nf(a, b).dtype.name == d, name
    got = Tensor.stack([pf(x, y) for _, pf, _ in ops]).numpy()   # one kernel for all of them
    for i, (name, _, nf) in enumerate(ops): np.testing.assert_array_equal(got[i], nf(a, b), err_msg=f"{d} {name}")
    assert (x < y).dtype == dtypes.bool and (x < y).numpy().tolist() == (a < b).tolist()
    assert (~x).numpy().tolist() == (~a).tolist()
    assert x.max().item() == int(a.max()) and x.min().item() == int(a.min())
    assert (x / y).dtype == dtypes.float32

@pytest.mark.parametrize("d", FLOATS)
def test_float_arith(device, d):
  helper_test_op([(12,), (12,)], stacked(lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x / y,
                                         lambda x, y: x.maximum(y), lambda x, y: x.minimum(y), lambda x, y: x * 3 + 1, lambda x, y: -x),
                 dtype=d, low=0.5, high=3)
  helper_test_op([(12,), (12,)], lambda x, y: x < y, dtype=d, low=0.5, high=3)
  helper_test_op([(3, 4)], lambda x: x.sum(1), dtype=d)
  helper_test_op([(3, 4)], lambda x: x.amax(0), lambda x: x.max(axis=0), dtype=d)

@pytest.mark.parametrize("d", FLOATS)
def test_float_unary(device, d):
  tol = {"float16": (2e-3, 2e-3), "bfloat16": (2e-2, 2e-2), "float32": (1e-6, 1e-5), "float64": (1e-12, 1e-10)}[d]
  kw = dict(dtype=d, atol=tol[0], rtol=tol[1], grad_atol=tol[0], grad_rtol=tol[1])
  helper_test_op([(12,)], stacked(lambda x: x.exp(), lambda x: x.sin(), lambda x: x.cos(), lambda x: x.sigmoid(), lambda x: x.exp2(),
                                  lambda x: x.relu(), lambda x: x.tanh()), low=-2, high=2, **kw)
  helper_test_op([(12,)], stacked(lambda x: x.log(), lambda x: x.sqrt(), lambda x: x.log2(), lambda x: x.reciprocal()), low=0.5, high=3, **kw)

def test_float64_precision(device):
  # float64 must really compute in double (1 + 1e-12 is not representable in float32)
  helper_test_op(None, lambda x: (x + 1e-12) - x, vals=[[1.0, 2.0]], dtype="float64", atol=1e-20, rtol=1e-6)
  helper_test_op(None, lambda x: x.exp(), vals=[[1.0, 10.0, -5.0]], dtype="float64", atol=0, rtol=1e-14)
  helper_test_op(None, lambda x: x.sum(), vals=[[1.0, 1e-9, 1e-9, 1e-9]], dtype="float64", atol=0, rtol=1e-15)

def test_float16_overflow(device):
  helper_test_op(None, lambda x: x * 1000, vals=[[100.0, -100.0, 60.0]], dtype="float16", forward_only=True)
  helper_test_op(None, lambda x: x + x, vals=[[60000.0, 1.0]], dtype="float16", forward_only=True)

def test_bfloat16_range(device):
  # bfloat16 has float32's range
  helper_test_op(None, lambda x: x * 1e30, vals=[[1.0, -2.0]], dtype="bfloat16", forward_only=True, rtol=1e-2)

def test_int8_uint8_overflow_wraps(device):
  helper_test_op(None, lambda x: x * 3, vals=[[100, -100, 50]], dtype="int8")
  helper_test_op(None, lambda x: x + 100, vals=[[200, 100, 0]], dtype="uint8")
  helper_test_op(None, lambda x: x - 1, vals=[[0, 1]], dtype="uint8")
  helper_test_op(None, lambda x: -x, vals=[[-128, 127]], dtype="int8")

def test_int64_large(device):
  helper_test_op(None, lambda x: x * 3 + 1, vals=[[2**40, -2**41, 2**62 // 3]], dtype="int64")
  helper_test_op(None, lambda x, y: x // y, vals=[[2**50 + 7, -2**50], [3, 7]], dtype="int64")
  helper_test_op(None, lambda x: x.sum(), vals=[[2**40, 2**40, 1]], dtype="int64")

def test_int32_sum_is_int64(device):
  helper_test_op(None, lambda x: x.sum(), vals=[[2**30, 2**30, 2**30]], dtype="int32")

def test_bool_ops(device):
  v = [[True, False, True, False], [True, True, False, False]]
  helper_test_op(None, lambda x, y: x + y, vals=v, dtype="bool")
  helper_test_op(None, lambda x, y: x * y, vals=v, dtype="bool")
  helper_test_op(None, lambda x, y: x == y, vals=v, dtype="bool")
  helper_test_op(None, lambda x, y: x < y, vals=v, dtype="bool")
  helper_test_op(None, lambda x, y: x.maximum(y), vals=v, dtype="bool")
  helper_test_op(None, lambda x, y: x.minimum(y), vals=v, dtype="bool")
  helper_test_op(None, lambda x: x.sum(), vals=v[:1], dtype="bool")
  helper_test_op(None, lambda x: x.float() * 2, vals=v[:1], dtype="bool")

def test_default_float(device):
  from petagrad.helpers import Context
  with Context(DEFAULT_FLOAT="float16"):
    assert Tensor([1.5]).dtype == dtypes.float16
    assert Tensor.ones(2).dtype == dtypes.float16
    assert (Tensor([1, 2]) / 2).dtype == dtypes.float16
  assert Tensor([1.5]).dtype == dtypes.float32

# ------------------------------------------------------------------ float16 / bfloat16 sweep
# The op families of test_ops / test_nn_ops / test_math in the two half dtypes, forward and backward, against torch. The
# C renderer computes halves in float and rounds every result back (renderer/cstyle.py), so this checks its loads,
# stores, rounding and casts of halves, scalar and vector, on every kind of op. Many ops share one kernel (one compile);
# reductions run over every axis of a realized input, on a shape the optimizer vectorizes (`x.max(0)` of a (.., 32)
# float16 buffer runs in lanes of 16: it did not compile) and on odd sizes (scalar loops), NOOPT=1 too. CPU only: the
# PYTHON interpreter's halves are the rest of this file's business (and it takes minutes over these).

import torch.nn.functional as F
from petagrad.helpers import Context

HALF = ["float16", "bfloat16"]
HALF_SHAPES = {"vec": (2, 32, 32), "odd": (3, 5, 7)}
HALF_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}

def both(tf, pf):
  """One function from a torch one and a petagrad one (where the two spell an op differently)."""
  return lambda *xs: tf(*xs) if isinstance(xs[0], torch.Tensor) else pf(*xs)

def _minimum(x, y): return torch.minimum(x, y) if isinstance(x, torch.Tensor) else x.minimum(y)
def _maximum(x, y): return torch.maximum(x, y) if isinstance(x, torch.Tensor) else x.maximum(y)
def _where(c, x, y): return torch.where(c, x, y) if isinstance(x, torch.Tensor) else c.where(x, y)

HALF_UNARY = [  # inputs in [-2, 2]
  lambda x: -x, lambda x: x.abs(), lambda x: x.exp(), lambda x: x.exp2(), lambda x: x.square(), lambda x: x.sin(), lambda x: x.cos(),
  lambda x: x.sigmoid(), lambda x: x.tanh(), lambda x: x.relu(), lambda x: x.sign() * x, lambda x: x.trunc(), lambda x: x.floor(),
  lambda x: x.ceil(), lambda x: x.round(), lambda x: x.clip(-1, 1), lambda x: x * 3 + 1, lambda x: 2 - x, lambda x: x.erf(),
  lambda x: x.asinh(), lambda x: x.atan(), lambda x: x.sinh(), lambda x: x.cosh(), lambda x: x.expm1(), lambda x: (x * 0.4).tan(),
  both(F.gelu, lambda x: x.gelu()), both(lambda x: F.gelu(x, approximate="tanh"), lambda x: x.gelu(approximate="tanh")),
  both(F.silu, lambda x: x.silu()), both(F.elu, lambda x: x.elu()), both(F.selu, lambda x: x.selu()),
  both(lambda x: F.celu(x, 1.5), lambda x: x.celu(1.5)), both(lambda x: F.leaky_relu(x, 0.2), lambda x: x.leaky_relu(0.2)),
  both(lambda x: F.relu6(x * 4), lambda x: (x * 4).relu6()), both(lambda x: F.hardtanh(x, -0.5, 1.5), lambda x: x.hardtanh(-0.5, 1.5)),
  both(lambda x: F.hardsigmoid(x * 3), lambda x: (x * 3).hardsigmoid()), both(lambda x: F.hardswish(x * 3), lambda x: (x * 3).hardswish()),
  both(F.mish, lambda x: x.mish()), both(F.softplus, lambda x: x.softplus()), both(F.softsign, lambda x: x.softsign()),
  both(F.logsigmoid, lambda x: x.logsigmoid()), both(F.tanhshrink, lambda x: x.tanhshrink()),
  both(lambda x: F.hardshrink(x, 0.7), lambda x: x.hardshrink(0.7)), both(lambda x: F.threshold(x, 0.3, -2.0), lambda x: x.threshold(0.3, -2.0)),
]
HALF_POSITIVE = [  # inputs in [0.25, 3]
  lambda x: x.log(), lambda x: x.log2(), lambda x: x.sqrt(), lambda x: x.rsqrt(), lambda x: x.reciprocal(), lambda x: 1 / x,
  lambda x: x ** 2, lambda x: x ** 2.5, lambda x: x ** -1.5, lambda x: 2 ** x, lambda x: x ** x, lambda x: x.log1p(), lambda x: (x + 1).acosh(),
]
HALF_UNIT = [lambda x: x.asin(), lambda x: x.acos(), lambda x: x.atanh()]   # inputs in [-0.9, 0.9]
HALF_BINARY = [
  lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x / (y.abs() + 0.5), _maximum, _minimum,
  lambda x, y: _where(x > y, x * y, y - x), lambda x, y: x.atan2(y), lambda x, y: x.hypot(y),
  lambda x, y: x.lerp(y, 0.3), lambda x, y: (x < y) * x, lambda x, y: (x == x) * y,
]

def apart(*fns):
  """Like helpers.stacked, but op i reads its own slice x[i] (inputs get a leading dim of len(fns)): one kernel still,
  and each op's gradient is checked on its own instead of summed with every other op's (rounding errors add up)."""
  def f(*xs):
    outs = [fn(*(x[i] for x in xs)) for i, fn in enumerate(fns)]
    return torch.stack(outs) if isinstance(outs[0], torch.Tensor) else Tensor.stack(outs)
  return f

# where the ops above have a kink: a value that lands exactly on one (likely with 11 or 8 bits) takes a side by
# convention (torch: hardtanh's gradient is 0 at its ends, a max/min tie here splits it), which is not what this checks
HALF_KINKS = (0.0, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0)

def _half_data(shape: tuple[int, ...], d: str, low: float, high: float, seed: int) -> np.ndarray:
  """Uniform data, as the dtype rounds it, kept 4 ulps away from the kinks (and their negatives)."""
  x = torch.tensor(np.random.default_rng(seed).uniform(low, high, size=shape)).to(TORCH_DTYPES[d]).double().numpy()
  for k in HALF_KINKS:
    for kk in (k, -k):
      near = np.abs(x - kk) < 4 * HALF_EPS[d] * max(1.0, abs(kk))
      x = np.where(near, kk + 8 * HALF_EPS[d] * max(1.0, abs(kk)), x)
  return x

def _half_kw(d: str, ulps: float = 4, rulps: float = 0, **kw) -> dict:
  """helpers.DEFAULT_TOL, with an atol of a few units in the last place at 1.0: an op composed of primitives rounds to
  the dtype at every step (torch computes each op in float32 and rounds once), so a result near 0 (sin near pi, erf
  near 0) is off by a few ulps of its inputs; rulps widens rtol likewise where an op amplifies its inputs' rounding."""
  fa, fr = DEFAULT_TOL[d]
  a, r = max(fa, ulps * HALF_EPS[d]), max(fr, rulps * HALF_EPS[d])
  return dict(dtype=d, atol=a, rtol=r, grad_atol=a, grad_rtol=r, **kw)

def _half_op(shapes, fn, d: str, low: float = -2.0, high: float = 2.0, seed: int = 0, **kw) -> None:
  helper_test_op(None, fn, vals=[_half_data(tuple(sh), d, low, high, seed + i) for i, sh in enumerate(shapes)], **_half_kw(d, **kw))

def _cpu_only(device: str) -> None:
  if device != "CPU": pytest.skip("the C renderer's halves (the interpreter takes minutes over these)")

@pytest.mark.parametrize("noopt", [0, 1], ids=["opt", "noopt"])
@pytest.mark.parametrize("d", HALF)
def test_half_elementwise(device, d, noopt):
  _cpu_only(device)
  s = HALF_SHAPES["odd"][1:]
  with Context(NOOPT=noopt):
    _half_op([(len(HALF_UNARY), *s)], apart(*HALF_UNARY), d)
    _half_op([(len(HALF_POSITIVE), *s)], apart(*HALF_POSITIVE), d, low=0.25, high=3)
    _half_op([(len(HALF_UNIT), *s)], apart(*HALF_UNIT), d, low=-0.9, high=0.9, ulps=8, rulps=8)   # 1/(1 - x^2) amplifies
    _half_op([(len(HALF_BINARY), *s)] * 2, apart(*HALF_BINARY), d)
    _half_op([s, s[-1:]], stacked(*HALF_BINARY[:6]), d)   # broadcast: the gradient sums

def _reductions(a, full: bool = True):   # the reduce ops (a product accumulates like a sum), compositions that upcast (var)
  out = [lambda x: x.sum(a, keepdim=True), lambda x: x.amax(a, keepdim=True)]
  return out + [lambda x: (x * 0.25 + 1).prod(a, keepdim=True), lambda x: x.amin(a, keepdim=True), lambda x: x.var(a, keepdim=True)] if full else out

def _scans(a): return [lambda x: x.softmax(a), lambda x: x.log_softmax(a), lambda x: x.cumsum(a)]

@pytest.mark.parametrize("case", ["vec", "odd", "odd-noopt"])
@pytest.mark.parametrize("d", HALF)
def test_half_reduce(device, d, case):
  # every axis of a realized input, and all axes at once; each reduce is a kernel of its own. The vectorized shape
  # checks the reduce ops themselves (the kernels in lanes of 16 of a composition take seconds each to compile).
  _cpu_only(device)
  s, full = HALF_SHAPES[case.split("-")[0]], case != "vec"
  with Context(NOOPT=int(case.endswith("noopt"))):
    for a in range(len(s)):
      _half_op([s], stacked(*_reductions(a, full)), d, ulps=8)
      if full: _half_op([s], stacked(*_scans(a)), d, ulps=8)
      helper_test_op([s], stacked(lambda x: x.argmax(a, keepdim=True), lambda x: x.argmin(a, keepdim=True)), dtype=d, forward_only=True)
    if full: _half_op([s], stacked(*[lambda x, f=f: f(x).reshape(1) for f in (lambda x: x.sum(), lambda x: x.mean(), lambda x: x.amax())]), d, ulps=8)

@pytest.mark.parametrize("d", HALF)
def test_half_nn(device, d):
  _cpu_only(device)
  # the reported case: conv2d + max_pool2d in float16 did not compile
  _half_op([(2, 3, 8, 8), (8, 3, 3, 3)], both(lambda x, w: F.max_pool2d(F.conv2d(x, w, padding=1), 2),
                                              lambda x, w: x.conv2d(w, padding=1).max_pool2d()), d, ulps=8)
  _half_op([(2, 3, 7, 7), (4, 3, 3, 3), (4,)], both(lambda x, w, b: F.avg_pool2d(F.conv2d(x, w, b, stride=2), 2, 1),
                                                    lambda x, w, b: x.conv2d(w, b, stride=2).avg_pool2d(2, 1)), d, ulps=8, forward_only=True)
  _half_op([(9, 33), (33, 17)], lambda x, y: x @ y, d, ulps=16)
  _half_op([(4, 24), (24,), (24,)], both(lambda x, w, b: F.layer_norm(x, (24,), w, b), lambda x, w, b: x.layer_norm((24,), w, b)), d, ulps=8)
  t = np.random.default_rng(1).integers(0, 10, size=(6,))
  kw = {**_half_kw(d, ulps=8), "dtype": [d, "int64"]}
  helper_test_op(None, lambda x, t: F.cross_entropy(x, t), lambda x, t: x.cross_entropy(t), vals=[_half_data((6, 10), d, -2, 2, 0), t], **kw)
