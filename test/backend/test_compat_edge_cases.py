"""Edge cases from the tinygrad test/backend triage, pinned against PyTorch: uint8 bilinear rounding, fp16 max-tie
gradients, circular pads wider than the cropped dim, roll with a 1-tuple shift, input checks torch makes (integer
negative powers, bool linspace, scatter dtypes), and the tinygrad flags accepted with no effect."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from petagrad import Tensor
from petagrad.dtype import dtypes
from petagrad.helpers import Context, TINYGRAD_NOOP_FLAGS
from helpers import helper_test_op

# ------------------------------------------------------------------ uint8 bilinear interpolate rounds like torch

@pytest.mark.parametrize("out_sz", [(10, 10), (9, 31), (70, 5), (3, 3), (64, 20), (128, 128)])
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_uint8_bilinear(out_sz, align_corners):
  v = np.random.default_rng(0).integers(0, 256, (2, 3, 64, 64), dtype=np.uint8)
  want = F.interpolate(torch.tensor(v), size=out_sz, mode="bilinear", align_corners=align_corners).numpy()
  got = Tensor(v).interpolate(size=out_sz, mode="linear", align_corners=align_corners)
  assert got.dtype == dtypes.uint8
  np.testing.assert_array_equal(got.numpy(), want)

@pytest.mark.parametrize("scale", [0.5, 1.7, (1.0, 0.3)])
def test_interpolate_uint8_bilinear_scale(scale):
  v = np.random.default_rng(1).integers(0, 256, (1, 2, 20, 24), dtype=np.uint8)
  want = F.interpolate(torch.tensor(v), scale_factor=scale, mode="bilinear").numpy()
  np.testing.assert_array_equal(Tensor(v).interpolate(scale_factor=scale, mode="linear").numpy(), want)

def test_interpolate_uint8_report_case():
  np.random.seed(0)
  v = np.random.uniform(0, 25, (1, 1, 8, 8)).astype(np.uint8)
  want = F.interpolate(torch.tensor(v), size=(3, 3), mode="bilinear").numpy()
  np.testing.assert_array_equal(Tensor(v).interpolate(size=(3, 3), mode="linear").numpy(), want)

def test_interpolate_uint8_tinygrad_form():   # tinygrad's TestOpsUint8.test_interpolate_bilinear
  helper_test_op([(2, 3, 64, 64)],
                 lambda x: F.interpolate((10 * x).relu().type(torch.uint8), size=(10, 10), mode="bilinear"),
                 lambda x: Tensor.interpolate((10 * x).relu().cast("uint8"), size=(10, 10), mode="linear"), forward_only=True)

@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_interpolate_uint8_nearest(mode):
  helper_test_op([(2, 3, 64, 64)],
                 lambda x: F.interpolate((10 * x).relu().type(torch.uint8), size=(10, 10), mode=mode),
                 lambda x: Tensor.interpolate((10 * x).relu().cast("uint8"), size=(10, 10), mode=mode), forward_only=True)

# ------------------------------------------------------------------ max gradient with more ties than fp16 can count

def test_max_grad_many_fp16_ties():
  t = Tensor.ones(70000, dtype=dtypes.half).contiguous()
  g = t.max().gradient(t)[0]
  tt = torch.ones(70000, dtype=torch.half, requires_grad=True)
  tt.max().backward()
  assert g.dtype == dtypes.half
  np.testing.assert_allclose(g.numpy().astype(np.float32), tt.grad.numpy().astype(np.float32))
  np.testing.assert_allclose(g.float().sum().item(), tt.grad.float().sum().item(), rtol=1e-3)

@pytest.mark.parametrize("op", ["max", "min", "amax", "amin"])
@pytest.mark.parametrize("dt", [dtypes.half, dtypes.bfloat16])
def test_max_grad_many_ties_axis(op, dt):
  # torch's amax(dim) backward counts the ties in fp16 and gives 0 here; the gradient shares 1 among the ties
  t = Tensor.ones(2, 70000, dtype=dt).contiguous()
  g = getattr(t, op)(axis=1).sum().gradient(t)[0]
  assert g.dtype == dt
  np.testing.assert_allclose(g.float().sum(1).numpy(), [1.0, 1.0], rtol=2e-3)

def test_max_grad_ties_float_unchanged():
  helper_test_op(None, lambda x: x.amax(1), vals=[[[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]])
  helper_test_op(None, lambda x: x.amin(0), vals=[[[1.0, 3.0, 3.0], [1.0, 2.0, 3.0]]])

# ------------------------------------------------------------------ circular pad with negative pads

@pytest.mark.parametrize("pad", [(1, -1, 1, -1), (-1, -1, -1, -1), (-2, 3, 0, 0), (2, 2, -3, 1), (0, 0, -2, 3)])
def test_pad_circular_negative(pad):
  helper_test_op([(1, 1, 5, 5)], lambda x: F.pad(x, pad, mode="circular"), lambda x: x.pad(pad, mode="circular"))

def test_pad_circular_wraps_crop_twice():
  # (-4, 3) keeps 1 column and wraps it 3 times; torch's forward repeats it (its backward, from overlapping copies, does not match)
  helper_test_op([(1, 1, 5, 5)], lambda x: F.pad(x, (-4, 3, 0, 0), mode="circular"), lambda x: x.pad((-4, 3, 0, 0), mode="circular"),
                 forward_only=True)

@pytest.mark.parametrize("pad, shape", [((3, -5, 1, -5), (1, 1, 1, 3)), ((3, -4, 0, 0), (1, 1, 5, 4)), ((5, -2, 0, 0), (1, 1, 5, 8))])
def test_pad_circular_wider_than_crop(pad, shape):
  # torch gives the shape but leaves values it cannot wrap uninitialized: compare the shape and the defined values
  x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
  got = Tensor(x).pad(pad, mode="circular")
  want = F.pad(torch.tensor(x), pad, mode="circular")
  assert got.shape == tuple(want.shape) == shape
  out = got.numpy()
  if pad == (3, -4, 0, 0): np.testing.assert_array_equal(out[..., 2:], want.numpy()[..., 2:])
  if pad == (5, -2, 0, 0):
    np.testing.assert_array_equal(out[..., 2:], want.numpy()[..., 2:])
    np.testing.assert_array_equal(out[0, 0, 0], [1, 2, 0, 1, 2, 0, 1, 2])   # wrapped around the 3 kept columns
  if pad == (3, -5, 1, -5): np.testing.assert_array_equal(out, np.zeros(shape))   # nothing left to wrap: zeros

# ------------------------------------------------------------------ roll with dims=None

@pytest.mark.parametrize("shifts, dims", [((1,), None), ([-3], None), ((2,), ()), (5, None)])
def test_roll_flat_one_tuple(shifts, dims):
  helper_test_op([(2, 4)], lambda x: torch.roll(x, shifts, dims) if dims is not None else torch.roll(x, shifts),
                 lambda x: x.roll(shifts, dims))

def test_roll_flat_two_shifts_raise():
  with pytest.raises(RuntimeError): Tensor.ones(2, 4).roll((1, 2))
  with pytest.raises(RuntimeError): torch.roll(torch.ones(2, 4), (1, 2))

# ------------------------------------------------------------------ input checks torch makes

@pytest.mark.parametrize("dt", ["int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize("e", [-1, -2])
def test_int_negative_int_power_raises(dt, e):
  v = [1, 0, 1] if dt in ("uint8", "bool") else [-2, 0, 2]
  with pytest.raises(RuntimeError, match="Integers to negative integer powers"): torch.tensor(v, dtype=getattr(torch, dt)) ** e
  with pytest.raises(RuntimeError, match="Integers to negative integer powers"): Tensor(v, dtype=dt) ** e
  with pytest.raises(RuntimeError, match="Integers to negative integer powers"): Tensor(v, dtype=dt).pow(e)

def test_int_power_still_allowed():
  x = [-2, 0, 2]
  for f in (lambda t: t ** 2, lambda t: t ** -2.0, lambda t: t ** 0, lambda t: 2 ** t):
    np.testing.assert_array_equal(f(Tensor(x)).numpy(), f(torch.tensor(x)).numpy())
  np.testing.assert_array_equal((Tensor([-2, 1, 2]) ** Tensor([2, 1, 1])).numpy(), [4, 1, 2])
  np.testing.assert_array_equal((Tensor([1.0, 2.0]) ** -2).numpy(), [1.0, 0.25])

def test_linspace_bool_raises():
  with pytest.raises(RuntimeError): torch.linspace(5, 10, 3, dtype=torch.bool)
  with pytest.raises(RuntimeError): Tensor.linspace(5, 10, 3, dtype="bool")
  with pytest.raises(RuntimeError): Tensor.linspace(5, 10, 3, dtype=dtypes.bool)
  np.testing.assert_array_equal(Tensor.linspace(5, 10, 3, dtype="int32").numpy(), torch.linspace(5, 10, 3, dtype=torch.int32).numpy())

SCATTERS = {
  "scatter": lambda x, i, s: x.scatter(1, i, s),
  "scatter_reduce": lambda x, i, s: x.scatter_reduce(1, i, s, reduce="sum"),
  "scatter_add": lambda x, i, s: x.scatter_add(1, i, s),
}

@pytest.mark.parametrize("name", list(SCATTERS))
def test_scatter_src_dtype_mismatch_raises(name):
  f = SCATTERS[name]
  with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
    f(torch.ones(3, 4).half(), torch.tensor([[0], [1], [2]]), torch.ones(3, 4))
  with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
    f(Tensor.ones(3, 4).half(), Tensor([[0], [1], [2]]), Tensor.ones(3, 4))

def test_scatter_same_dtype_and_scalar_ok():
  got = Tensor.ones(3, 4).half().scatter(1, Tensor([[0], [1], [2]]), 2.0)
  want = torch.ones(3, 4).half().scatter(1, torch.tensor([[0], [1], [2]]), 2.0)
  assert got.dtype == dtypes.half
  np.testing.assert_array_equal(got.numpy(), want.numpy())
  got = Tensor.ones(3, 4).half().scatter_reduce(0, Tensor([[0, 1, 2, 0]]), Tensor.ones(3, 4).half(), reduce="sum")
  want = torch.ones(3, 4).half().scatter_reduce(0, torch.tensor([[0, 1, 2, 0]]), torch.ones(3, 4).half(), reduce="sum")
  np.testing.assert_array_equal(got.numpy(), want.numpy())

# ------------------------------------------------------------------ tinygrad flags accepted with no effect

@pytest.mark.parametrize("name", ["CHECK_OOB", "DEVECTORIZE"])
def test_tinygrad_noop_flags(name):
  assert name in TINYGRAD_NOOP_FLAGS
  x = Tensor.arange(6).reshape(2, 3).float()
  with Context(**{name: 1}):
    assert TINYGRAD_NOOP_FLAGS[name].value == 1
    np.testing.assert_array_equal((x * 2).numpy(), np.arange(6).reshape(2, 3) * 2)
  with Context(**{name: 0}): assert TINYGRAD_NOOP_FLAGS[name].value == 0
