"""Creation ops vs PyTorch: Tensor(...) from Python data / numpy / bytes, full & co, arange, linspace, eye, random."""
import math
import numpy as np
import pytest
import torch
from petagrad import Tensor
from petagrad.device import Device
from petagrad.dtype import dtypes
from helpers import compare, TORCH_DTYPES

def check(pg: Tensor, tv: torch.Tensor, atol: float = 1e-6, rtol: float = 1e-6) -> None:
  compare("creation", pg, tv, atol, rtol)

# ------------------------------------------------------------------ Tensor(data)

NESTED = [
  1, 2.5, True, -7, [1, 2, 3], [1.5, 2.0], [True, False], [1, 2.5], [True, 2], [[1, 2], [3, 4]], [[[1.0], [2.0]], [[3.0], [4.0]]],
  [], [[]], [[], []], (1, 2, 3), [(1, 2), (3, 4)], [2**40, -2**40], [0.1, 1e30, -1e-30],
]

@pytest.mark.parametrize("data", NESTED, ids=str)
def test_from_python(device, data):
  check(Tensor(data), torch.tensor(data))

@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool", "uint32"])
def test_from_python_with_dtype(device, dtype):
  data = [[0, 1, 2], [3, 100, 7]]
  check(Tensor(data, dtype=dtype), torch.tensor(data, dtype=TORCH_DTYPES[dtype]))
  check(Tensor(data, dtype=getattr(dtypes, dtype)), torch.tensor(data, dtype=TORCH_DTYPES[dtype]))

def test_from_python_float_to_int_dtype(device):
  check(Tensor([1.7, -1.7, 2.5], dtype="int32"), torch.tensor([1.7, -1.7, 2.5]).to(torch.int32))

def test_from_python_special_floats(device):
  data = [float("inf"), float("-inf"), -0.0, 1e-45, 3.4e38]
  check(Tensor(data), torch.tensor(data))
  t = Tensor([float("nan")])
  assert math.isnan(t.item())

def test_from_scalar_is_0d(device):
  t = Tensor(3.0)
  assert t.shape == () and t.ndim == 0 and t.numel() == 1 and t.item() == 3.0
  assert Tensor(3).dtype == dtypes.int64 and Tensor(3.0).dtype == dtypes.float32 and Tensor(True).dtype == dtypes.bool

@pytest.mark.parametrize("npdt", ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "uint32", "bool"])
def test_from_numpy(device, npdt):
  a = (np.arange(12).reshape(3, 4) - 5).astype(npdt)
  t = Tensor(a)
  assert t.dtype.name == npdt and t.shape == (3, 4) and t.device == Device.DEFAULT
  np.testing.assert_array_equal(t.numpy(), a)

def test_from_numpy_noncontiguous(device):
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  np.testing.assert_array_equal(Tensor(a.T).numpy(), a.T)
  np.testing.assert_array_equal(Tensor(a[::2, ::-1]).numpy(), a[::2, ::-1])

def test_from_numpy_0d(device):
  t = Tensor(np.array(2.5, dtype=np.float32))
  assert t.shape == () and t.item() == 2.5
  assert Tensor(np.int32(3)).shape == ()

def test_from_numpy_empty(device):
  e = Tensor(np.zeros((0, 3), dtype=np.float32))
  assert e.shape == (0, 3) and e.numpy().shape == (0, 3)

def test_from_numpy_with_dtype(device):
  a = np.array([1.5, -2.5, 3.0])
  check(Tensor(a, dtype="float32"), torch.tensor(a, dtype=torch.float32))
  check(Tensor(a, dtype="int32"), torch.tensor(a).to(torch.int32))

def test_from_numpy_copies(device):
  a = np.array([1.0, 2.0], dtype=np.float32)
  t = Tensor(a)
  a[0] = 100
  assert t.tolist() == [1.0, 2.0]

def test_from_bytes(device):
  t = Tensor(b"\x01\x02\xff")
  assert t.dtype == dtypes.uint8 and t.tolist() == [1, 2, 255]
  raw = np.array([1.5, -2.0], dtype=np.float32).tobytes()
  t = Tensor(raw, dtype=dtypes.float32)
  assert t.shape == (2,) and t.tolist() == [1.5, -2.0]
  t = Tensor(bytearray(np.array([7, -1], dtype=np.int16).tobytes()), dtype="int16")
  assert t.tolist() == [7, -1]

def test_from_bytes_bad_size(device):
  with pytest.raises(ValueError):
    Tensor(b"\x01\x02\x03", dtype=dtypes.float32)

def test_device_argument(device):
  other = "PYTHON" if device == "CPU" else "CPU"
  t = Tensor([1, 2], device=other)
  assert t.device == other and t.tolist() == [1, 2]
  assert Tensor.zeros(2, device=other).device == other
  assert Tensor.arange(3, device=other).device == other
  assert Tensor.rand(2, device=other).device == other

def test_ragged_raises(device):
  with pytest.raises(ValueError):
    Tensor([[1, 2], [3]])

# ------------------------------------------------------------------ full, zeros, ones, empty

def test_zeros_ones(device):
  check(Tensor.zeros(2, 3), torch.zeros(2, 3))
  check(Tensor.zeros((2, 3)), torch.zeros((2, 3)))
  check(Tensor.ones(4), torch.ones(4))
  check(Tensor.ones(2, 3, dtype=dtypes.int32), torch.ones(2, 3, dtype=torch.int32))
  check(Tensor.zeros(3, dtype="bool"), torch.zeros(3, dtype=torch.bool))
  check(Tensor.zeros(), torch.zeros(()))
  check(Tensor.ones(()), torch.ones(()))

def test_full(device):
  check(Tensor.full((2, 3), 7), torch.full((2, 3), 7))
  check(Tensor.full((2, 3), 2.5), torch.full((2, 3), 2.5))
  check(Tensor.full((2,), True), torch.full((2,), True))
  check(Tensor.full((2, 2), -1, dtype=dtypes.int8), torch.full((2, 2), -1, dtype=torch.int8))
  check(Tensor.full((3,), 1.1, dtype="float16"), torch.full((3,), 1.1, dtype=torch.float16))
  check(Tensor.full((3,), 1.1, dtype="bfloat16"), torch.full((3,), 1.1, dtype=torch.bfloat16))
  check(Tensor.full(4, 3.0), torch.full((4,), 3.0))
  check(Tensor.full((), 3.0), torch.full((), 3.0))

def test_empty_shapes(device):
  check(Tensor.zeros(0), torch.zeros(0))
  check(Tensor.ones(2, 0, 3), torch.ones(2, 0, 3))
  check(Tensor.full((0, 4), 1.0), torch.full((0, 4), 1.0))
  assert Tensor.zeros(0, 3).tolist() == torch.zeros(0, 3).tolist()
  assert Tensor.zeros(2, 0).tolist() == torch.zeros(2, 0).tolist()

def test_empty(device):
  t = Tensor.empty(2, 3)
  assert t.shape == (2, 3) and t.dtype == dtypes.float32 and t.device == Device.DEFAULT
  assert Tensor.empty(4, dtype=dtypes.int16).numpy().shape == (4,)
  assert Tensor.empty(0).numel() == 0

def test_like(device):
  x = Tensor([[1, 2, 3]], dtype=dtypes.int32)
  tx = torch.tensor([[1, 2, 3]], dtype=torch.int32)
  check(x.zeros_like(), torch.zeros_like(tx))
  check(x.ones_like(), torch.ones_like(tx))
  check(x.full_like(5), torch.full_like(tx, 5))
  check(x.ones_like(dtype=dtypes.float32), torch.ones_like(tx, dtype=torch.float32))
  check(x.full_like(2.5, dtype="float16"), torch.full_like(tx, 2.5, dtype=torch.float16))
  assert x.empty_like().shape == (1, 3) and x.empty_like().dtype == dtypes.int32
  r = x.float().rand_like()
  assert r.shape == (1, 3) and r.dtype == dtypes.float32
  assert Tensor.zeros(2, dtype="float16").randn_like().dtype == dtypes.float16

def test_zeros_requires_grad(device):
  w = Tensor.zeros(3, requires_grad=True)
  (w * Tensor([1.0, 2.0, 3.0])).sum().backward()
  assert w.grad is not None and w.grad.tolist() == [1.0, 2.0, 3.0]

# ------------------------------------------------------------------ arange, linspace, eye

ARANGE = [(5,), (0,), (2, 7), (0, 10, 3), (10, 0, -3), (-5, 5, 2), (5, -5, -2), (0.0, 1.0, 0.25), (1.5, -1.0, -0.5),
          (0, 1, 0.1), (3.0,), (1, 4.5), (-1.0, 1.0, 0.3), (10, 10), (0, -3, -1)]

@pytest.mark.parametrize("args", ARANGE, ids=str)
def test_arange(device, args):
  check(Tensor.arange(*args), torch.arange(*args), atol=1e-6)

def test_arange_empty_range(device):
  # torch raises for a range that runs against the step; petagrad gives an empty tensor like numpy
  assert Tensor.arange(7, 2).shape == (0,)
  assert Tensor.arange(0, 5, -1).shape == (0,)

def test_arange_dtype(device):
  check(Tensor.arange(5, dtype=dtypes.float32), torch.arange(5, dtype=torch.float32))
  check(Tensor.arange(0, 10, 2, dtype="int32"), torch.arange(0, 10, 2, dtype=torch.int32))
  check(Tensor.arange(1, 3, 0.5, dtype="float64"), torch.arange(1, 3, 0.5, dtype=torch.float64))
  check(Tensor.arange(5, dtype="int8"), torch.arange(5, dtype=torch.int8))

def test_arange_zero_step(device):
  with pytest.raises(ValueError):
    Tensor.arange(0, 5, 0)

LINSPACE = [(0, 1, 5), (-1, 1, 4), (1, 0, 3), (0, 10, 1), (2, 2, 3), (0, 1, 0), (-3.5, 7.25, 11), (0, 1, 2)]

@pytest.mark.parametrize("args", LINSPACE, ids=str)
def test_linspace(device, args):
  check(Tensor.linspace(*args), torch.linspace(*args), atol=1e-6)

def test_linspace_dtype(device):
  check(Tensor.linspace(0, 1, 7, dtype="float64"), torch.linspace(0, 1, 7, dtype=torch.float64), atol=1e-12)
  check(Tensor.linspace(0, 10, 6, dtype="int32"), torch.linspace(0, 10, 6, dtype=torch.int32))

def test_eye(device):
  check(Tensor.eye(3), torch.eye(3))
  check(Tensor.eye(2, 4), torch.eye(2, 4))
  check(Tensor.eye(4, 2), torch.eye(4, 2))
  check(Tensor.eye(3, dtype=dtypes.int32), torch.eye(3, dtype=torch.int32))
  check(Tensor.eye(1), torch.eye(1))
  check(Tensor.eye(0), torch.eye(0))

# ------------------------------------------------------------------ random

def test_rand_shape_range(device):
  Tensor.manual_seed(0)
  r = Tensor.rand(4, 5)
  assert r.shape == (4, 5) and r.dtype == dtypes.float32 and r.device == Device.DEFAULT
  a = r.numpy()
  assert a.min() >= 0 and a.max() < 1 and len(np.unique(a)) == 20
  assert Tensor.rand((2, 3)).shape == (2, 3)
  assert Tensor.rand().shape == ()
  assert Tensor.rand(0).shape == (0,)

@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_rand_dtypes(device, dtype):
  Tensor.manual_seed(1)
  a = Tensor.rand(50, dtype=dtype)
  assert a.dtype.name == dtype
  v = a.numpy()
  assert v.min() >= 0 and v.max() < 1

def test_rand_int_dtype_raises(device):
  with pytest.raises(TypeError):
    Tensor.rand(3, dtype=dtypes.int32)

def test_manual_seed_reproducible(device):
  Tensor.manual_seed(42)
  a, b = Tensor.rand(10).tolist(), Tensor.randn(10).tolist()
  c = Tensor.randint(10, low=0, high=100).tolist()
  Tensor.manual_seed(42)
  assert Tensor.rand(10).tolist() == a and Tensor.randn(10).tolist() == b and Tensor.randint(10, low=0, high=100).tolist() == c
  Tensor.manual_seed(43)
  assert Tensor.rand(10).tolist() != a

def test_successive_calls_differ(device):
  Tensor.manual_seed(0)
  a, b = Tensor.rand(8).tolist(), Tensor.rand(8).tolist()
  assert a != b

def test_random_same_on_all_devices(device):
  # the generator is a counter-based hash computed in the kernel: the device must not change the numbers
  Tensor.manual_seed(7)
  a = Tensor.rand(16, device="CPU").tolist()
  Tensor.manual_seed(7)
  b = Tensor.rand(16, device="PYTHON").tolist()
  assert a == b

def test_randn(device):
  Tensor.manual_seed(3)
  r = Tensor.randn(2, 3)
  assert r.shape == (2, 3) and r.dtype == dtypes.float32
  assert np.isfinite(r.numpy()).all()
  assert Tensor.randn(4, dtype="float16").dtype == dtypes.float16

def test_randint(device):
  Tensor.manual_seed(5)
  r = Tensor.randint(6, 7, low=-3, high=4)
  assert r.shape == (6, 7) and r.dtype == dtypes.default_int == dtypes.int64
  v = r.numpy()
  assert v.min() >= -3 and v.max() < 4
  assert set(np.unique(v).tolist()) == set(range(-3, 4))   # 42 draws from 7 values: all appear (seeded)
  assert Tensor.randint(3, high=5, dtype=dtypes.int64).dtype == dtypes.int64

def test_randint_bad_range(device):
  with pytest.raises(ValueError):
    Tensor.randint(3, low=5, high=5)

def test_uniform_normal(device):
  Tensor.manual_seed(9)
  u = Tensor.uniform(20, low=-3.0, high=-1.0).numpy()
  assert u.min() >= -3.0 and u.max() < -1.0
  n = Tensor.normal(3, 4, mean=10.0, std=0.01)
  assert n.shape == (3, 4)
  assert np.abs(n.numpy() - 10.0).max() < 0.1
  assert Tensor.uniform(3, dtype="float64").dtype == dtypes.float64

def test_random_requires_grad(device):
  w = Tensor.rand(3, requires_grad=True)
  (w * 2).sum().backward()
  assert w.grad is not None and w.grad.tolist() == [2.0, 2.0, 2.0]
  w = Tensor.randn(2, requires_grad=True)
  (w * w).sum().backward()
  np.testing.assert_allclose(w.grad.numpy(), 2 * w.numpy(), rtol=1e-6)

def test_rand_distribution():
  # statistics (CPU only: 10^5 numbers are too slow for the PYTHON interpreter)
  Tensor.manual_seed(1234)
  u = Tensor.rand(100_000, device="CPU").numpy().astype(np.float64)
  assert abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.005
  hist, _ = np.histogram(u, bins=10, range=(0, 1))
  assert hist.min() > 9000 and hist.max() < 11000
  n = Tensor.randn(100_000, device="CPU").numpy().astype(np.float64)
  assert abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02
  assert abs((np.abs(n) < 1).mean() - 0.6827) < 0.01
  r = Tensor.randint(100_000, low=0, high=10, device="CPU").numpy()
  counts = np.bincount(r, minlength=10)
  assert counts.min() > 9000 and counts.max() < 11000
  nn = Tensor.normal(100_000, mean=3.0, std=2.0, device="CPU").numpy()
  assert abs(nn.mean() - 3.0) < 0.05 and abs(nn.std() - 2.0) < 0.05
