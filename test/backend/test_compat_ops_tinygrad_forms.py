"""tinygrad 0.14 call forms that petagrad got wrong: sparse_categorical_crossentropy's class axis (the last), an int
one-hot target for cross_entropy, int-like arguments (numpy ints, int subclasses) to the movement ops, a dim named twice,
more than one Ellipsis, randint(shape) and uniform with an int dtype. Each is checked against PyTorch where it has the
call, else against tinygrad 0.14 itself, run in a subprocess on the same inputs (importing tinygrad here would raise
the recursion limit for every test in this process)."""
import importlib.util, json, os, subprocess, sys
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from petagrad import Tensor, dtypes
from helpers import helper_test_op

class MyInt(int): pass

# ====================================================================== tinygrad reference values
# (logits, targets, kwargs) cases; the logits are float32 (B, T, C) or (N, C) or (C,)
_X3 = (np.arange(2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5) / 7 - 1).round(4)
_Y3 = np.array([[1, 0, 4], [2, 3, 0]], dtype=np.int32)
_X2 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
_Y2 = np.array([2, 1, 0, 1], dtype=np.int32)
SCCE_CASES = {
  "btc": (_X3, _Y3, {}),
  "btc_ignore0": (_X3, _Y3, {"ignore_index": 0}),
  "btc_smoothing": (_X3, _Y3, {"label_smoothing": 0.2}),
  "btc_ignore_smoothing_sum": (_X3, _Y3, {"ignore_index": 4, "label_smoothing": 0.1, "reduction": "sum"}),
  "btc_none": (_X3, _Y3, {"ignore_index": 3, "reduction": "none"}),
  "nc": (_X2, _Y2, {}),
  "nc_ignore_smoothing": (_X2, _Y2, {"ignore_index": 1, "label_smoothing": 0.3}),
  "c": (_X2[0], np.array(2, dtype=np.int32), {}),
  "int_logits": (np.array([[0, 2, 3], [1, 2, 3]], dtype=np.int32), np.array([1, 2], dtype=np.int32), {}),
}

_TINYGRAD_SCRIPT = r"""
import json, sys, numpy as np
from tinygrad import Tensor
cases, out = json.loads(sys.stdin.read()), {}
for name, (x, xdt, y, kw) in cases["scce"].items():
  out["scce/" + name] = Tensor(np.array(x, dtype=xdt)).sparse_categorical_crossentropy(Tensor(np.array(y, dtype=np.int32)), **kw).tolist()
x = Tensor([[1.0, 2.0, 0.5], [0.1, 0.2, 3.0]])
for ls in (0.0, 0.2): out[f"ce_onehot/{ls}"] = x.cross_entropy(Tensor([1, 2]).one_hot(3), label_smoothing=ls).item()
out["shrink_myint"] = Tensor.arange(6).shrink(((type("MyInt", (int,), {})(1), 3),)).tolist()
for f in ("flip00", "flip1m1"):
  try: Tensor.arange(6).reshape(2, 3).flip((0, 0) if f == "flip00" else (1, -1)); out[f] = "ok"
  except Exception as e: out[f] = type(e).__name__
for name, call in (("randint_tuple", lambda: Tensor.randint((20, 23))), ("randint_tuple_kw", lambda: Tensor.randint((20, 23), low=0, high=10))):
  t = call(); out[name] = [list(t.shape), int(t.min().item()), int(t.max().item())]
try: Tensor.randint((3, 4), low=0, high=3, dtype="float32"); out["randint_float"] = "ok"
except Exception as e: out["randint_float"] = type(e).__name__
u = Tensor.uniform(1000, low=-100, high=100, dtype="int32")
out["uniform_int"] = [str(u.dtype), int(u.min().item()), int(u.max().item())]
print(json.dumps(out))
"""

@pytest.fixture(scope="module")
def tg():
  """tinygrad 0.14's results for the cases above (one subprocess for the module); skips without tinygrad."""
  if importlib.util.find_spec("tinygrad") is None: pytest.skip("tinygrad is not installed")
  cases = {"scce": {k: (x.tolist(), str(x.dtype), y.tolist(), kw) for k, (x, y, kw) in SCCE_CASES.items()}}
  env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "BEAM")} | {"DEV": "CPU"}
  r = subprocess.run([sys.executable, "-c", _TINYGRAD_SCRIPT], input=json.dumps(cases), capture_output=True, text=True, env=env, timeout=600)
  if r.returncode != 0: pytest.fail(f"the tinygrad reference run failed:\n{r.stderr[-3000:]}")
  return json.loads(r.stdout.strip().splitlines()[-1])

# ====================================================================== 1. sparse_categorical_crossentropy (tinygrad's)
@pytest.mark.parametrize("case", list(SCCE_CASES))
def test_scce_vs_tinygrad(device, tg, case):
  x, y, kw = SCCE_CASES[case]
  got = Tensor(x).sparse_categorical_crossentropy(Tensor(y), **kw).numpy()
  np.testing.assert_allclose(got, np.array(tg["scce/" + case], dtype=np.float32), atol=1e-5, rtol=1e-5)

@pytest.mark.parametrize("kw", [{}, {"ignore_index": 2}, {"ignore_index": 0, "label_smoothing": 0.1, "reduction": "sum"},
                                {"ignore_index": 3, "reduction": "none"}])
def test_scce_classes_last_vs_torch(device, kw):
  # tinygrad's LM loss: (B, T, C) logits, (B, T) tokens = torch's cross_entropy with the classes moved to dim 1
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal((2, 5, 4)), rng.integers(0, 4, (2, 5))
  tkw = {"ignore_index": -1, **kw}
  helper_test_op(None, lambda a, b: F.cross_entropy(a.permute(0, 2, 1), b, **tkw), lambda a, b: a.sparse_categorical_crossentropy(b, **kw),
                 vals=[x, y], dtype=["float32", "int64"], atol=1e-5)

def test_scce_minus_one_targets(device):
  # the default ignore_index=-1 leaves -1 targets out of the sum and of the mean's count (torch's ignore_index=-1).
  # tinygrad 0.14 skips its mask for -1 and so counts them in the mean (a -1 row adds 0): documented difference
  helper_test_op(None, lambda a, b: F.cross_entropy(a.permute(0, 2, 1), b, ignore_index=-1), lambda a, b: a.sparse_categorical_crossentropy(b),
                 vals=[_X3, [[1, -1, 4], [-1, 3, 0]]], dtype=["float32", "int64"], atol=1e-5)

def test_scce_errors(device):
  x, y = Tensor(_X3), Tensor(_Y3)
  with pytest.raises(TypeError, match="ignore_index must be an int"): x.sparse_categorical_crossentropy(y, ignore_index=Tensor(_Y3))
  with pytest.raises(TypeError, match="integer class indices"): x.sparse_categorical_crossentropy(y.float())
  with pytest.raises(ValueError, match=r"Y must have shape \(2, 3\)"): x.sparse_categorical_crossentropy(Tensor([[1, 0], [2, 3]]))
  with pytest.raises(ValueError, match="label_smoothing"): x.sparse_categorical_crossentropy(y, label_smoothing=1.5)
  with pytest.raises(IndexError, match="out of bounds for 5 classes"): x.sparse_categorical_crossentropy(Tensor([[1, 0, 5], [2, 3, 0]]))
  with pytest.raises(RuntimeError): x.sparse_categorical_crossentropy(Tensor([[1, 0], [2, 3]]))   # torch's habit catches it too

# ====================================================================== 2. cross_entropy with an int one-hot target
@pytest.mark.parametrize("ls", [0.0, 0.2])
def test_cross_entropy_int_onehot_vs_tinygrad(device, tg, ls):
  got = Tensor([[1.0, 2.0, 0.5], [0.1, 0.2, 3.0]]).cross_entropy(Tensor([1, 2]).one_hot(3), label_smoothing=ls).item()
  assert got == pytest.approx(tg[f"ce_onehot/{ls}"], abs=1e-6)

@pytest.mark.parametrize("tdtype", ["int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.2}, {"reduction": "none"}, {"reduction": "sum"}])
def test_cross_entropy_onehot_target_dtypes(device, tdtype, kw):
  # torch takes probabilities as floats only: the same one-hot as float32 is the reference
  hot = np.eye(4)[[1, 3, 0, 2, 1]]
  helper_test_op(None, lambda a, b: F.cross_entropy(a, b.float(), **kw), lambda a, b: a.cross_entropy(b, **kw),
                 vals=[np.random.default_rng(1).standard_normal((5, 4)), hot], dtype=["float32", tdtype], atol=1e-5)

def test_cross_entropy_onehot_spatial_and_weight(device):
  rng = np.random.default_rng(2)
  x, hot, w = rng.standard_normal((2, 3, 4)), np.moveaxis(np.eye(3)[rng.integers(0, 3, (2, 4))], -1, 1), np.array([0.5, 1.0, 2.0])
  helper_test_op(None, lambda a, b: F.cross_entropy(a, b.float(), weight=torch.tensor(w, dtype=torch.float32)),
                 lambda a, b: a.cross_entropy(b, weight=Tensor(w.astype(np.float32))), vals=[x, hot], dtype=["float32", "int64"], atol=1e-5)

def test_cross_entropy_class_indices_still_torch(device):
  # a target of another shape is class indices (torch), and nll_loss takes class indices only
  helper_test_op(None, lambda a, b: F.cross_entropy(a, b), lambda a, b: a.cross_entropy(b), vals=[_X2, [2, 1, 0, 1]], dtype=["float32", "int64"],
                 atol=1e-6)
  with pytest.raises(ValueError, match=r"class indices of shape \(4,\)"): Tensor(_X2).log_softmax(1).nll_loss(Tensor([2, 1, 0, 1]).one_hot(3))
  with pytest.raises(ValueError, match="class-index target must have shape"): Tensor(_X2).cross_entropy(Tensor([[1, 2]]))

# ====================================================================== 3. int-like arguments to the movement ops
INTLIKES = {"numpy_int64": np.int64, "numpy_int32": np.int32, "numpy_uint8": np.uint8, "int_subclass": MyInt}
MOVEMENT = {
  # name: f(x, I) on a (2, 3, 4) tensor with I wrapping every int argument; the same call works in torch
  "reshape": lambda x, I: x.reshape(I(4), I(-1)),
  "reshape_tuple": lambda x, I: x.reshape((I(6), I(4))),
  "view": lambda x, I: x.view(I(2), I(12)),
  "expand": lambda x, I: x[:, :1].expand(I(3), I(2), I(5), I(-1)),
  "permute": lambda x, I: x.permute(I(2), I(0), I(1)),
  "permute_tuple": lambda x, I: x.permute((I(1), I(2), I(0))),
  "flip": lambda x, I: x.flip(I(1)),
  "flip_tuple": lambda x, I: x.flip((I(0), I(2))),
  "transpose": lambda x, I: x.transpose(I(0), I(2)),
  "squeeze": lambda x, I: x[:, :1].squeeze(I(1)),
  "unsqueeze": lambda x, I: x.unsqueeze(I(3)),
  "flatten": lambda x, I: x.flatten(I(1)),
  "unflatten": lambda x, I: x.unflatten(I(2), (I(2), I(2))),
  "repeat": lambda x, I: x.repeat(I(2), I(1), I(1)),
  "roll": lambda x, I: x.roll(I(1), I(2)),
  "roll_flat": lambda x, I: x.roll(I(5)),
  "rot90": lambda x, I: x.rot90(I(1), (I(1), I(2))),
  "repeat_interleave": lambda x, I: x.repeat_interleave(I(2), I(1)),
  "narrow_getitem": lambda x, I: x[I(1), I(0):I(2)],
  "chunk": lambda x, I: x.chunk(I(2), I(2))[0],
  "unfold": lambda x, I: x.unfold(I(2), I(2), I(1)),
  "tile": lambda x, I: x.tile((I(1), I(2))),
  "sum_dims": lambda x, I: x.sum((I(0), I(2))),
}
PAD_SHRINK = {
  # petagrad/tinygrad forms (torch has no Tensor.shrink / pair-wise pad; its split takes no numpy int): checked against plain-int calls
  "split": lambda x, I: x.split(I(2), I(2))[1],
  "shrink": lambda x, I: x.shrink(((I(1), I(2)), None, (I(0), I(3)))),
  "pad_pairs": lambda x, I: x.pad(((I(1), I(0)), None, (I(0), I(2)))),
  "pad_flat": lambda x, I: x.pad((I(1), I(2), I(0), I(1))),
  "pad_to": lambda x, I: x.pad_to(I(3), None, I(5)),
  "shrink_to": lambda x, I: x.shrink_to(I(1), I(2), None),
}

@pytest.mark.parametrize("kind", list(INTLIKES))
@pytest.mark.parametrize("op", list(MOVEMENT))
def test_movement_intlike_vs_torch(device, op, kind):
  f, I = MOVEMENT[op], INTLIKES[kind]
  if kind == "numpy_uint8" and op in ("reshape", "expand"): I = lambda v, I=I: -1 if v == -1 else I(v)   # noqa: E731  (no -1 in uint8)
  helper_test_op([(2, 3, 4)], lambda x: f(x, I))

@pytest.mark.parametrize("kind", list(INTLIKES))
@pytest.mark.parametrize("op", list(PAD_SHRINK))
def test_pad_shrink_intlike(device, op, kind):
  x = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
  out, ref = PAD_SHRINK[op](x, INTLIKES[kind]), PAD_SHRINK[op](x, int)
  assert out.shape == ref.shape and all(type(s) is int for s in out.shape)
  np.testing.assert_equal(out.numpy(), ref.numpy())

def test_shrink_intlike_vs_tinygrad(device, tg):
  assert Tensor.arange(6).shrink(((MyInt(1), 3),)).tolist() == tg["shrink_myint"] == [1, 2]

@pytest.mark.parametrize("op", ["reshape", "permute", "flip", "transpose", "unsqueeze", "shrink", "pad", "expand", "sum"])
def test_movement_refuses_bool_and_float(device, op):
  # torch refuses a bool or a float as a size or a dim: TypeError (a RuntimeError too)
  x = Tensor.ones(2, 3)
  calls = {"reshape": lambda v: x.reshape(v, 6), "permute": lambda v: x.permute(v, 0), "flip": lambda v: x.flip(v),
           "transpose": lambda v: x.transpose(v, 0), "unsqueeze": lambda v: x.unsqueeze(v), "shrink": lambda v: x.shrink(((v, 2), None)),
           "pad": lambda v: x.pad(((v, 0), None)), "expand": lambda v: x.expand(v, 2, 3), "sum": lambda v: x.sum(v)}
  for v in (True, 1.0, np.float32(1.0)):
    with pytest.raises(TypeError): calls[op](v)

# ====================================================================== 4. a dim named twice
DUP = {
  "flip00": lambda x: x.flip((0, 0)), "flip2m1": lambda x: x.flip((2, -1)), "flip_args": lambda x: x.flip(2, 2),
  "permute": lambda x: x.permute(0, 0, 1), "permute_neg": lambda x: x.permute(0, -3, 1),
  "squeeze": lambda x: x[:1].squeeze((0, 0)), "squeeze_neg": lambda x: x[:1].squeeze((0, -3)),
  "sum": lambda x: x.sum((0, 0)), "amax": lambda x: x.amax((1, -2)), "mean": lambda x: x.mean((2, 2)),
  "std": lambda x: x.std((0, 0)), "logsumexp": lambda x: x.logsumexp((0, 0)), "any": lambda x: x.any((0, 0)),
}

@pytest.mark.parametrize("case", list(DUP))
def test_repeated_dim_raises_like_torch(device, case):
  f = DUP[case]
  with pytest.raises(RuntimeError): f(torch.zeros(2, 3, 4))
  with pytest.raises(RuntimeError) as e: f(Tensor.zeros(2, 3, 4))
  assert isinstance(e.value, ValueError)   # petagrad's user errors are both

def test_flip_repeated_dim_message(device, tg):
  assert tg["flip00"] == tg["flip1m1"] == "RuntimeError"   # tinygrad raises too
  with pytest.raises(RuntimeError, match="dim 0 appears multiple times"): Tensor.arange(6).reshape(2, 3).flip((0, 0))
  with pytest.raises(RuntimeError, match="dim 1 appears multiple times"): Tensor.arange(6).reshape(2, 3).flip((1, -1))

def test_distinct_dims_still_work(device):
  helper_test_op([(2, 3, 4)], lambda x: x.flip((0, -1)))
  helper_test_op([(1, 3, 1)], lambda x: x.squeeze((0, 2)))
  helper_test_op([(2, 3)], lambda x: x.roll((1, 1), (0, 0)))   # roll repeats a dim fine (torch: shifts add up)

# ====================================================================== 5. Ellipsis
ELLIPSIS_OK = {
  # torch 2.13 takes more than one '...': each skips the dims no index names, so a second is harmless when it skips
  # none or ends the index
  "two": (..., ...), "three": (..., ..., ...), "int_between": (..., 0, ...), "lead_int": (0, ..., ...),
  "between_ints": (0, ..., 1, ...), "none_between": (..., None, ...), "full": (0, 1, ..., 2, ...), "list": (..., [0, 1], ...),
}
ELLIPSIS_BAD = {"then_int": (..., ..., 0), "then_none": (..., ..., None), "int_after_second": (..., 0, ..., 1)}

@pytest.mark.parametrize("case", list(ELLIPSIS_OK))
def test_multiple_ellipsis_like_torch(device, case):
  idx = ELLIPSIS_OK[case]
  helper_test_op([(2, 3, 4)], lambda x: x[idx])

@pytest.mark.parametrize("case", list(ELLIPSIS_BAD))
def test_multiple_ellipsis_errors(device, case):
  idx = ELLIPSIS_BAD[case]
  with pytest.raises(IndexError): torch.zeros(2, 3, 4)[idx]
  with pytest.raises(IndexError, match="indices can only have a single ellipsis"): Tensor.zeros(2, 3, 4)[idx]

def test_multiple_ellipsis_setitem(device):
  t, x = torch.zeros(2, 3), Tensor.zeros(2, 3).contiguous()
  t[..., 1, ...] = 5; x[..., 1, ...] = 5
  np.testing.assert_equal(x.numpy(), t.numpy())

# ====================================================================== 6. random forms
@pytest.mark.parametrize("form", ["tuple", "tuple_kw", "list"])
def test_randint_one_sequence_is_the_shape(device, tg, form):
  call = {"tuple": lambda: Tensor.randint((20, 23)), "tuple_kw": lambda: Tensor.randint((20, 23), low=0, high=10),
          "list": lambda: Tensor.randint([20, 23])}[form]
  Tensor.manual_seed(3)
  v = call().numpy()
  assert v.shape == (20, 23) and v.dtype == np.int64 and set(np.unique(v).tolist()) == set(range(10))   # tinygrad's [0, 10)
  ref = tg["randint_tuple_kw" if form == "tuple_kw" else "randint_tuple"]
  assert ref[0] == [20, 23] and 0 <= ref[1] and ref[2] < 10

def test_randint_float_dtype(device, tg):
  # tinygrad's form (a shape, no size after the bounds) refuses a float dtype like tinygrad; torch's form takes it like torch
  assert tg["randint_float"] == "TypeError"
  for call in (lambda: Tensor.randint((3, 4), low=0, high=3, dtype=dtypes.float32), lambda: Tensor.randint(3, 4, dtype="float16"),
               lambda: Tensor.randint(5, dtype=dtypes.bool)):
    with pytest.raises(TypeError, match="integer dtype"): call()
  for t, tt in ((Tensor.randint(0, 10, (50,), dtype=dtypes.float32), torch.randint(0, 10, (50,), dtype=torch.float32)),
                (Tensor.randint(10, (50,), dtype=dtypes.float16), torch.randint(10, (50,), dtype=torch.float16)),
                (Tensor.randint(low=2, high=5, size=(50,), dtype=dtypes.float64), torch.randint(low=2, high=5, size=(50,), dtype=torch.float64))):
    v = t.numpy()
    assert str(tt.dtype) == f"torch.{t.dtype.name}" and tuple(tt.shape) == t.shape
    assert np.all(v == np.round(v)) and v.min() >= tt.min().item() - 8 and v.max() < 10

def test_randint_torch_forms_unchanged(device):
  assert Tensor.randint(7, (4, 5)).shape == (4, 5) and Tensor.randint(-3, 4, (6,)).shape == (6,)
  assert Tensor.randint(3, 6, size=[8]).shape == (8,) and Tensor.randint(4, 5, low=0, high=2).shape == (4, 5)
  with pytest.raises(TypeError): Tensor.randint((3,), (4,))   # a shape is no bound

def test_uniform_int_dtype(device, tg):
  # tinygrad: ((high - low) * rand).cast(dtype) + low: ints in [low, high)
  assert tg["uniform_int"][0] == "dtypes.int" and -100 <= tg["uniform_int"][1] and tg["uniform_int"][2] < 100
  Tensor.manual_seed(5)
  u = Tensor.uniform(3000, low=-100, high=100, dtype=dtypes.int32)
  assert u.dtype == dtypes.int32 and u.shape == (3000,)
  v = u.numpy()
  assert v.min() >= -100 and v.max() < 100 and len(np.unique(v)) > 190
  Tensor.manual_seed(5)
  np.testing.assert_equal(v, (Tensor.rand(3000) * 200).cast(dtypes.int32).numpy() - 100)   # the formula, on the same draw
  assert Tensor.uniform(2, 3, low=0, high=4, dtype="int8").dtype == dtypes.int8
  with pytest.raises(TypeError): Tensor.uniform(3, dtype=dtypes.bool)
  with pytest.raises(ValueError): Tensor.uniform(3, low=2.0, high=1.0)

def test_randperm_multinomial_numpy_ints(device):
  assert sorted(Tensor.randperm(np.int64(6)).tolist()) == list(range(6))
  assert Tensor([1.0, 2.0, 3.0]).multinomial(np.int32(4), True).shape == (4,)
