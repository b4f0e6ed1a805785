"""The call forms people already have (PyTorch 2.13 and tinygrad 0.14 code): indexing, pooling / interpolation /
padding, creation and random, DEFAULT_INT, and the errors of those ops. Each form is checked against torch; where
torch has no such call, against tinygrad 0.14's semantics (expected values hard-coded: tinygrad is never imported in
the test process, it raises the recursion limit)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from petagrad import Tensor, dtypes, Context, TinyJit
from helpers import helper_test_op, compare

def _i(v, lib): return torch.tensor(v) if lib is torch else Tensor(v)
def lib(x): return torch if isinstance(x, torch.Tensor) else Tensor

IDX = [[0, 2, 1, 0], [2, 2, 0, 1]]   # (2, 4) into a (3, 4) tensor along dim 0

# ====================================================================== 1. indexing forms
@pytest.mark.parametrize("reduce", ["add", "multiply"])
@pytest.mark.parametrize("value", [1.5, 2, -0.25])
def test_scatter_scalar_reduce(device, reduce, value):
  helper_test_op([(3, 4)], lambda x: x.scatter(0, _i(IDX, lib(x)), value, reduce=reduce), forward_only=True)

@pytest.mark.filterwarnings("ignore:The reduce argument")
@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_src_reduce(device, reduce):
  # torch deprecates reduce= with a tensor src but computes it (accumulating duplicates, self included)
  # (torch has no gradient for it; the gradient is scatter_reduce's, tested there)
  helper_test_op([(3, 4), (2, 4)], lambda x, s: x.scatter(0, _i(IDX, lib(x)), s, reduce=reduce), forward_only=True)

def test_scatter_value_keyword(device):
  helper_test_op([(3, 4)], lambda x: x.scatter(0, _i(IDX, lib(x))[:1], value=3.0))
  helper_test_op([(3, 4)], lambda x: x.scatter(1, index=_i([[1], [3], [0]], lib(x)), value=-1.0, reduce="add"), forward_only=True)
  helper_test_op([(3, 4), (2, 4)], lambda x, s: x.scatter(dim=0, index=_i(IDX, lib(x)), src=s))

def test_scatter_tinygrad_doc_values():
  # tinygrad 0.14's Tensor.scatter docstring examples
  assert Tensor.full((2, 4), 2.0).scatter(1, Tensor([[2], [3]]), 1.23, reduce="multiply").numpy().tolist() == \
    np.array([[2, 2, 2.46, 2], [2, 2, 2, 2.46]], np.float32).tolist()
  assert Tensor.full((2, 4), 2.0).scatter(1, Tensor([[2], [3]]), 1.23, reduce="add").numpy().tolist() == \
    np.array([[2, 2, 3.23, 2], [2, 2, 2, 3.23]], np.float32).tolist()

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_scalar(device, reduce, include_self):
  # a scalar src (petagrad and tinygrad-style code; torch wants a tensor): the same as a tensor filled with it
  idx = [[0, 2, 1, 0], [0, 2, 0, 1]]
  helper_test_op([(3, 4)], lambda x: x.scatter_reduce(0, torch.tensor(idx), torch.full((2, 4), 0.75), reduce, include_self=include_self),
                 lambda x: x.scatter_reduce(0, Tensor(idx), 0.75, reduce, include_self=include_self))

def test_scatter_reduce_scalar_int(device):
  idx = [[0, 2, 1, 0], [0, 2, 0, 1]]
  for reduce in ("sum", "prod", "amax", "amin", "mean"):
    helper_test_op([(3, 4)], lambda x: x.scatter_reduce(0, torch.tensor(idx), torch.full((2, 4), 3), reduce),
                   lambda x: x.scatter_reduce(0, Tensor(idx), 3, reduce), dtype="int64", low=-5, high=5)

@pytest.mark.parametrize("form", ["positional", "dim_kw", "index_kw", "axis_kw", "sparse_grad"])
def test_gather_forms(device, form):
  idx = [[1, 0, 3], [2, 2, 0]]
  calls = {
    "positional": (lambda x, i: torch.gather(x, 1, i), lambda x, i: x.gather(1, i)),
    "dim_kw": (lambda x, i: x.gather(dim=1, index=i), lambda x, i: x.gather(dim=1, index=i)),
    "index_kw": (lambda x, i: x.gather(1, index=i), lambda x, i: x.gather(1, index=i)),
    "axis_kw": (lambda x, i: x.gather(1, i), lambda x, i: x.gather(axis=1, index=i)),   # numpy-style spelling
    "sparse_grad": (lambda x, i: x.gather(1, i, sparse_grad=False), lambda x, i: x.gather(1, i, sparse_grad=False)),
  }
  tf, pf = calls[form]
  helper_test_op([(2, 4)], lambda x: tf(x, torch.tensor(idx)), lambda x: pf(x, Tensor(idx)))

def test_gather_both_spellings_raise():
  with pytest.raises(TypeError): Tensor([[1, 2]]).gather(dim=1, axis=1, index=Tensor([[0]]))

def test_take_along_dim_and_index_select_keywords(device):
  idx = [[1, 0, 3], [2, 2, 0]]
  helper_test_op([(2, 4)], lambda x: x.take_along_dim(indices=torch.tensor(idx), dim=1),
                 lambda x: x.take_along_dim(indices=Tensor(idx), dim=1))
  helper_test_op([(2, 4)], lambda x: x.take_along_dim(torch.tensor(idx), 1), lambda x: x.take_along_dim(Tensor(idx), axis=1))
  helper_test_op([(2, 4)], lambda x: x.take_along_dim(torch.tensor([[3, 1]]))[None], lambda x: x.take_along_dim(Tensor([[3, 1]]))[None])
  helper_test_op([(3, 4)], lambda x: x.index_select(dim=1, index=torch.tensor([3, 0])), lambda x: x.index_select(dim=1, index=Tensor([3, 0])))
  helper_test_op([(3, 4)], lambda x: x.index_select(1, torch.tensor([3, 0])), lambda x: x.index_select(axis=1, index=Tensor([3, 0])))

MASK = [[True, False, True, False], [False, False, False, False], [True, True, False, True]]

def test_masked_select_forms(device):
  helper_test_op([(3, 4)], lambda x: x.masked_select(_i(MASK, lib(x))))
  helper_test_op([(3, 4)], lambda x: x.masked_select(mask=_i(MASK, lib(x))))
  helper_test_op([(3, 4)], lambda x: x.masked_select(_i([True, False, True, True], lib(x))))   # broadcast

@pytest.mark.parametrize("size", [0, 2, 5, 8])
def test_masked_select_static_size(device, size):
  # tinygrad 0.14 / jax: exactly `size` elements, the selected ones in order, then fill_value (or cut at size)
  x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
  sel = x[np.array(MASK)]
  want = np.concatenate([sel[:size], np.full(max(0, size - len(sel)), 7.5, np.float32)])
  out = Tensor(x).masked_select(Tensor(MASK), size=size, fill_value=7.5)
  assert out.shape == (size,) and out.dtype == dtypes.float32
  np.testing.assert_array_equal(out.numpy(), want)
  # the tinygrad docstring example; the default fill_value is 0
  t = Tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8]])
  m = Tensor([[True, False, True], [False, True, False], [False, False, True]])
  assert t.masked_select(m, size=6, fill_value=-1).tolist() == [0, 2, 4, 8, -1, -1]
  assert t.masked_select(m, size=5).tolist() == [0, 2, 4, 8, 0]

def test_masked_select_static_gradient(device):
  x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=True)
  x.masked_select(Tensor(MASK), size=4, fill_value=0.0).mul(Tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
  tx = torch.arange(12, dtype=torch.float32).reshape(3, 4).requires_grad_()
  tx.masked_select(torch.tensor(MASK))[:4].mul(torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
  np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())

def test_masked_select_static_runs_in_jit():
  @TinyJit
  def f(x, m): return x.masked_select(m, size=3, fill_value=-1).realize()
  for k in range(3):
    m = np.zeros(6, bool); m[k:k + 2 * (k + 1):2] = True
    x = np.arange(6, dtype=np.int32) * 10
    want = list(x[m][:3]) + [-1] * (3 - len(x[m][:3]))
    assert f(Tensor(x), Tensor(m)).tolist() == want

@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 2), ()])
def test_nonzero_forms(device, shape):
  rng = np.random.default_rng(0)
  a = (rng.random(shape) > 0.5).astype(np.float32) * rng.integers(1, 5, shape) if shape else np.float32(3)
  helper_test_op(None, lambda x: x.nonzero(), vals=[a], forward_only=True)
  helper_test_op(None, lambda x: torch.stack(x.nonzero(as_tuple=True)) if shape else x.nonzero(as_tuple=True)[0],
                 lambda x: Tensor.stack(x.nonzero(as_tuple=True)) if shape else x.nonzero(as_tuple=True)[0], vals=[a], forward_only=True)
  helper_test_op(None, lambda x: torch.argwhere(x), lambda x: x.argwhere(), vals=[a], forward_only=True)
  for size in (0, 1, 4, 12):
    helper_test_op(None, lambda x: x.nonzero_static(size=size), lambda x: x.nonzero_static(size=size), vals=[a], forward_only=True)
    helper_test_op(None, lambda x: x.nonzero_static(size=size, fill_value=9), lambda x: x.nonzero(size=size, fill_value=9), vals=[a],
                   forward_only=True)
    if shape:
      helper_test_op(None, lambda x: torch.stack(x.nonzero_static(size=size, fill_value=0).unbind(1)),
                     lambda x: Tensor.stack(x.nonzero(size, as_tuple=True)), vals=[a], forward_only=True)

def test_nonzero_static_tinygrad_doc():
  assert Tensor([1, 0, 2, 0, 3]).nonzero().tolist() == [[0], [2], [4]]
  assert Tensor([[1, 0], [0, 2]]).nonzero(size=3, fill_value=-1).tolist() == [[0, 0], [1, 1], [-1, -1]]
  assert Tensor([[1, 0], [0, 2]]).nonzero(size=3).tolist() == [[0, 0], [1, 1], [0, 0]]   # tinygrad's default fill is 0
  assert Tensor([True, False, True]).nonzero(size=1).tolist() == [[0]]

def test_nonzero_as_tuple_is_keyword_only():
  # torch: nonzero(*, as_tuple=False); the one positional argument is tinygrad's size
  with pytest.raises(TypeError): torch.tensor([1, 0]).nonzero(True)
  with pytest.raises(TypeError, match="size must be an int"): Tensor([1, 0]).nonzero(True)
  assert Tensor([1, 0]).nonzero(as_tuple=True)[0].tolist() == [0]

@pytest.mark.parametrize("form", ["positional", "keyword", "default"])
def test_one_hot_forms(device, form):
  v = [0, 3, 1, 1]
  tf = {"positional": lambda x: F.one_hot(x, 5), "keyword": lambda x: F.one_hot(x, num_classes=5), "default": lambda x: F.one_hot(x)}[form]
  pf = {"positional": lambda x: x.one_hot(5), "keyword": lambda x: x.one_hot(num_classes=5), "default": lambda x: x.one_hot()}[form]
  helper_test_op(None, tf, pf, vals=[v], dtype="int64", forward_only=True)

def _written(value, idx=1, shape=(3, 2), dtype="float32"):
  pt = Tensor.zeros(*shape, dtype=dtype).contiguous().realize()
  tt = torch.zeros(*shape, dtype=getattr(torch, dtype))
  pt[idx] = value
  tt[idx] = torch.as_tensor(np.asarray(value)) if not isinstance(value, (int, float)) else value
  compare("setitem", pt, tt, 0, 0)

@pytest.mark.parametrize("value", [[5.0, 6.0], np.array([5.0, 6.0]), np.array([5, 6], np.int32), [[7.5, 8.5]], 4.0, (1, 2)],
                         ids=["list", "np_f64", "np_i32", "nested_list", "scalar", "tuple"])
def test_setitem_numpy_and_lists(device, value):
  _written(value)
  _written(value, idx=slice(0, 2))
  _written(value, idx=slice(None, None, 2))

def test_setitem_advanced_with_list_values(device):
  pt = Tensor.zeros(3, 2).contiguous().realize()
  tt = torch.zeros(3, 2)
  pt[Tensor([0, 2])] = [[5.0, 6.0], [7.0, 8.0]]
  tt[torch.tensor([0, 2])] = torch.tensor([[5.0, 6.0], [7.0, 8.0]])
  compare("setitem", pt, tt, 0, 0)
  pt[np.array([1])] = np.array([[1.5, 2.5]], np.float32)
  tt[np.array([1])] = torch.tensor([[1.5, 2.5]])
  compare("setitem", pt, tt, 0, 0)
  pi = Tensor.zeros(4, dtype=dtypes.int32).contiguous().realize()
  pi[1:3] = [1.7, -2.7]   # a float list into an int tensor: truncated, like torch
  ti = torch.zeros(4, dtype=torch.int32)
  ti[1:3] = torch.tensor([1.7, -2.7])
  compare("setitem", pi, ti, 0, 0)

def test_setitem_list_shape_mismatch_raises():
  t = Tensor.zeros(3, 2).contiguous().realize()
  with pytest.raises(RuntimeError): t[1] = [1.0, 2.0, 3.0]
  with pytest.raises(ValueError): t[1] = np.zeros(3)

@pytest.mark.parametrize("value", [np.array([[1, 2], [3, 4]], np.float32), [[1.0, 2.0], [3.0, 4.0]], np.array([[1, 2], [3, 4]], np.int64)],
                         ids=["numpy", "list", "numpy_int"])
def test_assign_numpy_and_lists(device, value):
  t = Tensor.zeros(2, 2).contiguous().realize()
  t.assign(value).realize()
  assert t.dtype == dtypes.float32 and t.tolist() == [[1.0, 2.0], [3.0, 4.0]]

# ====================================================================== 2. pooling, interpolation, padding, conv
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape,size,torch_mode", [((2, 3, 4, 5), (7, 3), "bilinear"), ((1, 2, 3, 4, 2), (5, 2, 3), "trilinear"),
                                                   ((2, 3, 5), (8,), "linear")], ids=["4d", "5d", "3d"])
def test_interpolate_linear_any_rank(device, shape, size, torch_mode, align_corners):
  # tinygrad's 'linear' is n-linear over every resized dim: torch's linear / bilinear / trilinear by rank
  helper_test_op([shape], lambda x: F.interpolate(x, size, mode=torch_mode, align_corners=align_corners),
                 lambda x: x.interpolate(size, mode="linear", align_corners=align_corners), atol=1e-5)
  helper_test_op([shape], lambda x: F.interpolate(x, size, mode=torch_mode, align_corners=align_corners),
                 lambda x: x.interpolate(size=size, mode=torch_mode, align_corners=align_corners), atol=1e-5)

@pytest.mark.parametrize("mode,torch_mode", [("linear", "bilinear"), ("bilinear", "bilinear"), ("trilinear", "trilinear")])
def test_interpolate_scale_factor_torch_names(mode, torch_mode):
  shape = (1, 2, 3, 4) if torch_mode == "bilinear" else (1, 2, 3, 2, 2)
  for ac in (None, False, True):
    helper_test_op([shape], lambda x: F.interpolate(x, scale_factor=2, mode=torch_mode, align_corners=ac),
                   lambda x: x.interpolate(scale_factor=2, mode=mode, align_corners=ac), atol=1e-5)

def test_interpolate_torch_names_check_rank():
  x = Tensor.ones(1, 1, 8)
  for mode in ("bilinear", "trilinear", "bicubic"):
    with pytest.raises(RuntimeError): F.interpolate(torch.ones(1, 1, 8), 4, mode=mode)
    with pytest.raises(RuntimeError): x.interpolate(4, mode=mode)
  with pytest.raises(ValueError): Tensor.ones(1, 1, 4, 4).interpolate(2, mode="nearest", align_corners=True)
  Tensor.ones(1, 1, 4, 4).interpolate(2, mode="nearest", align_corners=False)   # tinygrad passes False with every mode

def test_interpolate_tinygrad_forms():
  # tinygrad 0.14: interpolate(size, mode="linear", align_corners=False), any number of leading dims (its docstring example)
  t = Tensor([[1, 2, 3, 4], [21, 22, 23, 24], [41, 42, 43, 44]])
  tt = torch.tensor(t.tolist(), dtype=torch.float32)[None, None]
  want = F.interpolate(tt, (2, 3), mode="bilinear")[0, 0]
  np.testing.assert_allclose(t.float().interpolate(size=(2, 3), mode="linear").numpy(), want.numpy(), atol=1e-5)
  np.testing.assert_allclose(t.float().interpolate((2, 3), "linear").numpy(), want.numpy(), atol=1e-5)   # mode second
  want_ac = F.interpolate(tt, (2, 3), mode="bilinear", align_corners=True)[0, 0]
  np.testing.assert_allclose(t.float().interpolate((2, 3), "linear", True).numpy(), want_ac.numpy(), atol=1e-5)
  # an int input keeps its dtype, truncated (tinygrad casts the result back); torch rejects ints here
  out = t.interpolate(size=(2, 3), mode="linear")
  assert out.dtype == t.dtype and out.tolist() == [[6, 7, 8], [36, 37, 38]]
  # nearest on the last dims only, a 3-d input resized in its last 2 dims
  assert t.interpolate((4, 6), "nearest").tolist() == F.interpolate(tt, (4, 6), mode="nearest")[0, 0].int().tolist()
  x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  np.testing.assert_allclose(Tensor(x).interpolate((2, 5), "linear", True).numpy(),
                             F.interpolate(torch.tensor(x)[None], (2, 5), mode="bilinear", align_corners=True)[0].numpy(), atol=1e-5)
  with pytest.raises(TypeError): t.float().interpolate((2, 3), "linear", "area")   # two modes

def test_interpolate_area_any_rank():
  for shape, size in (((1, 2, 8), 3), ((1, 2, 6, 4), (4, 3)), ((1, 1, 4, 4, 6), (2, 3, 4))):
    helper_test_op([shape], lambda x: F.interpolate(x, size, mode="area"), lambda x: x.interpolate(size, mode="area"))

# padding of empty and size-1 dims: the value or the error torch gives, case by case
PAD_CASES = [(mode, L, pads) for mode in ("reflect", "replicate", "circular") for L in (0, 1, 2, 3)
             for pads in ((0, 0), (1, 0), (0, 1), (1, 1), (2, 2), (3, 0), (0, 3), (4, 4), (-1, 1), (1, -1), (-1, -1))]
PAD_SKIP = {("circular", 1, (1, -1)), ("circular", 1, (-1, 1))}   # torch reads uninitialized memory here (its result changes run to run)

@pytest.mark.parametrize("mode,L,pads", [c for c in PAD_CASES if c not in PAD_SKIP], ids=str)
def test_pad_modes_small_dims(mode, L, pads):
  x = np.arange(2 * L, dtype=np.float32).reshape(1, 2, L) + 1
  try: want, terr = F.pad(torch.tensor(x), pads, mode=mode).numpy(), None
  except Exception as e: want, terr = None, e
  if terr is not None:
    with pytest.raises(RuntimeError): Tensor(x).pad(pads, mode=mode).realize()
  else:
    got = Tensor(x).pad(pads, mode=mode).numpy()
    assert got.shape == want.shape and np.array_equal(got, want), (got, want)

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pads", [((1, 1, 1, 1), (1, 1, 0, 0)), ((1, 1, 1, 1), (0, 0, 1, 1)), ((1, 1, 1, 1), (1, 1, 1, 1)),
                                        ((1, 1, 1, 3), (1, 1, 0, 0)), ((1, 1, 2, 1), (0, 0, 1, 1)), ((1, 1, 2, 1), (0, 0, 0, 0))], ids=str)
def test_pad_modes_size1_2d(mode, shape, pads):
  x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
  try: want = F.pad(torch.tensor(x, requires_grad=True), pads, mode=mode)
  except RuntimeError:
    with pytest.raises(RuntimeError): Tensor(x).pad(pads, mode=mode).realize()
    return
  helper_test_op(None, lambda t: F.pad(t, pads, mode=mode), lambda t: t.pad(pads, mode=mode), vals=[x])
  assert want is not None

@pytest.mark.parametrize("cin,cout,stride,padding,groups", [(3, 5, 1, 0, 1), (3, 8, 1, 0, 1), (3, 16, 2, 0, 1), (4, 8, 1, 1, 2),
                                                            (3, 5, 2, 1, 1), (2, 3, 1, "same", 1)], ids=str)
def test_conv2d_1x1_bias_gradient(device, cin, cout, stride, padding, groups):
  # the weight, bias and input gradients of a 1x1 convolution (the channels-last path for cout % 8 == 0 too)
  helper_test_op([(2, cin, 5, 5), (cout, cin // groups, 1, 1), (cout,)],
                 lambda x, w, b: F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups),
                 lambda x, w, b: x.conv2d(w, b, groups=groups, stride=stride, padding=padding), atol=1e-5, grad_atol=1e-4)

def test_conv2d_1x1_bias_gradient_alone_and_layer():
  from petagrad import nn
  # only the bias needs a gradient; a loss that is not a plain sum
  x, w, b = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32), np.ones((5, 3, 1, 1), np.float32), np.zeros(5, np.float32)
  pb, tb = Tensor(b, requires_grad=True), torch.tensor(b, requires_grad=True)
  Tensor(x).conv2d(Tensor(w), pb).square().mean().backward()
  F.conv2d(torch.tensor(x), torch.tensor(w), tb).square().mean().backward()
  np.testing.assert_allclose(pb.grad.numpy(), tb.grad.numpy(), atol=1e-5, rtol=1e-5)
  layer, tlayer = nn.Conv2d(3, 8, 1), torch.nn.Conv2d(3, 8, 1)
  layer.weight, layer.bias = Tensor(tlayer.weight.detach().numpy(), requires_grad=True), Tensor(tlayer.bias.detach().numpy(), requires_grad=True)
  layer(Tensor(x)).relu().sum().backward()
  tlayer(torch.tensor(x)).relu().sum().backward()
  np.testing.assert_allclose(layer.bias.grad.numpy(), tlayer.bias.grad.numpy(), atol=1e-4, rtol=1e-5)
  np.testing.assert_allclose(layer.weight.grad.numpy(), tlayer.weight.grad.numpy(), atol=1e-4, rtol=1e-5)

POOL_KW = [dict(kernel_size=3), dict(kernel_size=3, stride=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, dilation=2),
           dict(kernel_size=3, stride=2, ceil_mode=True), dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0), dilation=(2, 1), ceil_mode=True)]

@pytest.mark.parametrize("kw", POOL_KW, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_max_pool_keyword_forms(kw):
  helper_test_op([(2, 3, 9, 8)], lambda x: F.max_pool2d(x, **kw), lambda x: x.max_pool2d(**kw))
  (pv, pi), (tv, ti) = helper_test_op([(2, 3, 9, 8)], lambda x: F.max_pool2d(x, **kw, return_indices=True),
                                      lambda x: x.max_pool2d(**kw, return_indices=True), forward_only=True)
  assert pi.dtype == dtypes.int64

@pytest.mark.parametrize("kw", [k for k in POOL_KW if "dilation" not in k], ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_avg_pool_keyword_forms(kw):
  helper_test_op([(2, 3, 9, 8)], lambda x: F.avg_pool2d(x, **kw), lambda x: x.avg_pool2d(**kw))
  helper_test_op([(2, 3, 9, 8)], lambda x: F.avg_pool2d(x, **kw, count_include_pad=False), lambda x: x.avg_pool2d(**kw, count_include_pad=False))

def test_pool_positional_order_is_tinygrads():
  # petagrad's pooling methods take tinygrad's positional order (kernel_size, stride, dilation, padding, ceil_mode, ...);
  # torch's F.max_pool2d is (kernel_size, stride, padding, dilation, ceil_mode, ...): port it with keywords
  helper_test_op([(1, 2, 9, 9)], lambda x: F.max_pool2d(x, 3, 2, 1, 2, True), lambda x: x.max_pool2d(3, 2, 2, 1, True))
  helper_test_op([(1, 2, 9, 9)], lambda x: F.avg_pool2d(x, 3, 2, 1, True), lambda x: x.avg_pool2d(3, 2, 1, 1, True))
  helper_test_op([(1, 2, 9)], lambda x: F.max_pool1d(x, 3, 2, 1, 2), lambda x: x.max_pool1d(3, 2, 2, 1))
  helper_test_op([(1, 2, 9)], lambda x: F.max_pool1d(x, kernel_size=3, stride=2, padding=1, dilation=2),
                 lambda x: x.max_pool1d(kernel_size=3, stride=2, padding=1, dilation=2))
  helper_test_op([(1, 2, 5, 5, 5)], lambda x: F.avg_pool3d(x, kernel_size=2, stride=1, padding=1, ceil_mode=True),
                 lambda x: x.avg_pool3d(kernel_size=2, stride=1, padding=1, ceil_mode=True))

# ====================================================================== 4. DEFAULT_INT: the index-producing ops follow dtypes.default_int
def _index_ops():
  x = Tensor([[1.0, 0.0, 3.0], [0.0, 5.0, 6.0]])
  return {
    "arange": Tensor.arange(3), "arange_neg": Tensor.arange(5, 0, -2), "nonzero": x.nonzero(), "nonzero_tuple": x.nonzero(as_tuple=True)[1],
    "nonzero_size": x.nonzero(size=5), "one_hot": Tensor([0, 2]).one_hot(3),
    "max_pool_indices": x.reshape(1, 1, 2, 3).max_pool2d(2, 1, return_indices=True)[1],
    "adaptive_max_pool_indices": x.reshape(1, 2, 3).adaptive_max_pool1d(2, return_indices=True)[1], "randint": Tensor.randint(4, low=0, high=3),
    "randint_torch": Tensor.randint(0, 3, (4,)), "randperm": Tensor.randperm(5), "multinomial": Tensor([1.0, 2.0, 3.0]).multinomial(2),
    "multinomial_replacement": Tensor([[1.0, 2.0], [3.0, 1.0]]).multinomial(3, replacement=True),
  }

@pytest.mark.parametrize("name", list(_index_ops()))
def test_default_int_index_ops(name):
  assert _index_ops()[name].dtype == dtypes.int64   # torch's
  with Context(DEFAULT_INT="int32"):   # tinygrad's
    t = _index_ops()[name]
    assert t.dtype == dtypes.int32
    t.realize()
  with Context(DEFAULT_INT="int64"): assert _index_ops()[name].dtype == dtypes.int64

def test_default_int_values_unchanged():
  with Context(DEFAULT_INT="int32"):
    x = Tensor([[1.0, 0.0, 3.0], [0.0, 5.0, 6.0]])
    assert x.nonzero().tolist() == [[0, 0], [0, 2], [1, 1], [1, 2]]
    assert Tensor([0, 2]).one_hot(3).tolist() == [[1, 0, 0], [0, 0, 1]]
    assert sorted(Tensor.randperm(6).tolist()) == list(range(6))
    assert x.reshape(1, 1, 2, 3).max_pool2d(2, 1, return_indices=True)[1].tolist() == [[[[4, 5]]]]

def test_arange_default_int_widens_when_the_range_does_not_fit():
  # tinygrad: an int range too large for default_int picks int64; an explicit dtype that cannot hold it raises
  with Context(DEFAULT_INT="int32"):
    t = Tensor.arange(2**31 - 2, 2**31 + 1)
    assert t.dtype == dtypes.int64 and t.tolist() == [2**31 - 2, 2**31 - 1, 2**31]
    assert Tensor.arange(-2**31 - 1, -2**31 + 1).dtype == dtypes.int64
    assert Tensor.arange(2**31 - 1).dtype == dtypes.int32
    assert Tensor.arange(3, 2**40, 2**39).dtype == dtypes.int64
    with pytest.raises(OverflowError): Tensor.arange(2**31 - 1, 2**31 + 1, dtype=dtypes.int32)
  assert Tensor.arange(2**40, 2**40 + 2).dtype == dtypes.int64

# ====================================================================== 3. creation and random forms
@pytest.mark.parametrize("args,kwargs", [((5,), {}), ((1, 7, 2), {}), ((0, 1, 0.25), {}), ((5, 0, -1), {}), ((1, -1, -0.5), {}),
                                         ((-3.5, 2.0, 0.7), {}), ((10, 0, -3), {}), ((), {"end": 5}), ((1,), {"end": 5, "step": 2}),
                                         ((), {"start": 2, "end": 9, "step": 3}), ((0.5, 3), {"dtype": torch.float64})], ids=str)
def test_arange_forms(device, args, kwargs):
  pk = {k: (getattr(dtypes, str(v).replace("torch.", "")) if k == "dtype" else v) for k, v in kwargs.items()}
  compare("arange", Tensor.arange(*args, **pk), torch.arange(*args, **kwargs), 1e-6, 1e-6)

def test_arange_tinygrad_stop_keyword_and_empty_ranges():
  assert Tensor.arange(1, stop=5).tolist() == [1, 2, 3, 4]
  assert Tensor.arange(5, 0).tolist() == [] and Tensor.arange(5, 0).dtype == dtypes.int64   # numpy / tinygrad: empty (torch raises)
  with pytest.raises(TypeError): Tensor.arange(0, stop=3, end=3)

@pytest.mark.parametrize("args,kwargs", [((0, 1, 5), {}), ((-2.5, 7, 11), {}), ((3, -1, 4), {}), ((0, 1, 1), {}), ((0, 1, 0), {}),
                                         ((), {"start": 0, "end": 1, "steps": 5}), ((0,), {"end": 10, "steps": 4, "dtype": torch.int64}),
                                         ((1, 2, 3), {"dtype": torch.float64})], ids=str)
def test_linspace_forms(device, args, kwargs):
  pk = {k: (getattr(dtypes, str(v).replace("torch.", "")) if k == "dtype" else v) for k, v in kwargs.items()}
  compare("linspace", Tensor.linspace(*args, **pk), torch.linspace(*args, **kwargs), 1e-6, 1e-6)
  assert Tensor.linspace(0, 1, 3, requires_grad=True).requires_grad

@pytest.mark.parametrize("args,kwargs", [((3,), {}), ((2, 4), {}), ((), {"n": 3, "m": 2}), ((3,), {"dtype": torch.int32}), ((0,), {}),
                                         ((3,), {"m": 1, "dtype": torch.bool})], ids=str)
def test_eye_forms(device, args, kwargs):
  pk = {k: (getattr(dtypes, str(v).replace("torch.", "")) if k == "dtype" else v) for k, v in kwargs.items()}
  compare("eye", Tensor.eye(*args, **pk), torch.eye(*args, **kwargs), 0, 0)

@pytest.mark.parametrize("fn", ["zeros", "ones", "empty"])
def test_shape_forms(device, fn):
  for args, kwargs in (((2, 3), {}), (((2, 3),), {}), (([2, 3],), {}), ((), {"size": (2, 3)}), ((), {"size": [2, 3]}), ((np.int64(2), 3), {})):
    t = getattr(Tensor, fn)(*args, **kwargs)
    assert t.shape == tuple(getattr(torch, fn)(*args, **kwargs).shape) == (2, 3) and t.dtype == dtypes.float32
    if fn != "empty": assert t.tolist() == getattr(torch, fn)(*args, **kwargs).tolist()
  assert getattr(Tensor, fn)(size=(2,), dtype=dtypes.int32).dtype == dtypes.int32
  with pytest.raises(TypeError): getattr(Tensor, fn)(2, size=(2,))
  for f in ("rand", "randn"): assert getattr(Tensor, f)(size=(2, 3)).shape == (2, 3)

def test_like_forms(device):
  x = Tensor([[1, 2, 3]])
  tx = torch.tensor([[1, 2, 3]])
  compare("full_like", x.full_like(3.5), torch.full_like(tx, 3.5), 0, 0)
  compare("full_like", Tensor.full_like(x, 7, dtype=dtypes.float16), torch.full_like(tx, 7, dtype=torch.float16), 0, 0)
  compare("ones_like", x.ones_like(dtype=dtypes.float32), torch.ones_like(tx, dtype=torch.float32), 0, 0)
  compare("ones_like", Tensor.ones_like(x, dtype="int8"), torch.ones_like(tx, dtype=torch.int8), 0, 0)
  compare("zeros_like", Tensor.zeros_like(x), torch.zeros_like(tx), 0, 0)
  assert Tensor.empty_like(x).shape == (1, 3) and Tensor.empty_like(x, dtype=dtypes.float64).dtype == dtypes.float64

def test_random_generator_none(device):
  for t in (Tensor.randn(2, 3, generator=None), Tensor.rand(2, 3, generator=None), Tensor.randint(0, 5, (2, 3), generator=None),
            Tensor.randperm(6, generator=None).reshape(2, 3), Tensor([[1.0, 2.0]]).multinomial(3, True, generator=None).reshape(1, 3)):
    assert t.shape[1] == 3
  with pytest.raises(TypeError, match="generator"): Tensor.randn(2, generator=torch.Generator())

@pytest.mark.parametrize("form", ["torch_high_size", "torch_low_high_size", "torch_keywords", "torch_size_kw", "tinygrad_shape", "tinygrad_tuple",
                                  "tinygrad_defaults"])
def test_randint_forms(device, form):
  call, shape, lo, hi = {
    "torch_high_size": (lambda: Tensor.randint(7, (40,)), (40,), 0, 7),
    "torch_low_high_size": (lambda: Tensor.randint(-3, 4, (5, 8)), (5, 8), -3, 4),
    "torch_keywords": (lambda: Tensor.randint(low=2, high=9, size=(40,)), (40,), 2, 9),
    "torch_size_kw": (lambda: Tensor.randint(3, 6, size=[40]), (40,), 3, 6),
    "tinygrad_shape": (lambda: Tensor.randint(5, 8, low=5, high=10), (5, 8), 5, 10),
    "tinygrad_tuple": (lambda: Tensor.randint((5, 8), low=-1, high=1), (5, 8), -1, 1),
    "tinygrad_defaults": (lambda: Tensor.randint(50), (50,), 0, 10),
  }[form]
  Tensor.manual_seed(1)
  t = call()
  v = t.numpy()
  assert t.shape == shape and t.dtype == dtypes.int64 and v.min() >= lo and v.max() < hi
  assert set(np.unique(v).tolist()) == set(range(lo, hi))   # every value appears (seeded)
  assert Tensor.randint(0, 5, (3,), dtype=dtypes.int8).dtype == dtypes.int8

def test_randint_bad_forms():
  with pytest.raises(TypeError): Tensor.randint(1, 2, 3, (4,))
  with pytest.raises(ValueError): Tensor.randint(5, 5, (3,))
  with pytest.raises(TypeError): Tensor.randint(1.5, (3,))

@pytest.mark.parametrize("form", ["class", "instance", "tuple", "kwargs"])
def test_scaled_uniform(device, form):
  # tinygrad: Tensor.uniform(*shape, low=-1, high=1) * prod(shape) ** -0.5, a class method tinygrad code also calls on a tensor
  Tensor.manual_seed(0)
  t = {"class": lambda: Tensor.scaled_uniform(64, 32), "instance": lambda: Tensor.ones(1).scaled_uniform(64, 32),
       "tuple": lambda: Tensor.scaled_uniform((64, 32)),
       "kwargs": lambda: Tensor.scaled_uniform(64, 32, dtype=dtypes.float16, requires_grad=True)}[form]()
  bound = (64 * 32) ** -0.5
  v = t.numpy().astype(np.float64)
  assert t.shape == (64, 32) and t.dtype == (dtypes.float16 if form == "kwargs" else dtypes.float32)
  assert v.min() >= -bound - 1e-3 and v.max() < bound + 1e-3 and v.max() > 0.9 * bound and v.min() < -0.9 * bound
  assert abs(v.mean()) < 0.05 * bound and abs(v.std() - bound / 3 ** 0.5) < 0.05 * bound   # uniform: std = bound / sqrt(3)
  if form == "kwargs": assert t.requires_grad

# ====================================================================== 5. errors: the Python type and RuntimeError (what torch code catches)
ERRORS = {
  "gather_known_index": (IndexError, lambda: Tensor([[1, 2]]).gather(1, Tensor([[5]]))),
  "gather_lazy_index": (IndexError, lambda: Tensor([[1, 2]]).gather(1, Tensor([[5]]) + 0).realize()),
  "getitem_lazy_index": (IndexError, lambda: Tensor([1.0, 2.0])[Tensor([3]) * 1].realize()),
  "one_hot_lazy_class": (IndexError, lambda: (Tensor([5]) + 0).one_hot(3).realize()),
  "gather_float_index": (TypeError, lambda: Tensor([[1, 2]]).gather(1, Tensor([[0.0]]))),
  "gather_ndim": (ValueError, lambda: Tensor([[1, 2]]).gather(1, Tensor([0]))),
  "scatter_bad_reduce": (ValueError, lambda: Tensor([1.0]).scatter(0, Tensor([0]), 1.0, reduce="max")),
  "scatter_no_src": (TypeError, lambda: Tensor([1.0]).scatter(0, Tensor([0]))),
  "scatter_src_and_value": (TypeError, lambda: Tensor([1.0]).scatter(0, Tensor([0]), 1.0, value=2.0)),
  "index_select_2d": (TypeError, lambda: Tensor([1.0]).index_select(0, Tensor([[0]]))),
  "masked_select_size": (ValueError, lambda: Tensor([1]).masked_select(Tensor([True]), size=-1)),
  "nonzero_size_type": (TypeError, lambda: Tensor([1]).nonzero(size=2.5)),
  "nonzero_fill_overflow": (OverflowError, lambda: Tensor([1]).nonzero(size=2, fill_value=2**70)),
  "interpolate_modes": (TypeError, lambda: Tensor.ones(1, 1, 4).interpolate(2, "linear", "area")),
  "interpolate_rank": (ValueError, lambda: Tensor.ones(1, 1, 4).interpolate(2, mode="bilinear")),
  "max_pool_kernel": (ValueError, lambda: Tensor.ones(1, 1, 2, 2).max_pool2d(3)),
  "arange_stop_and_end": (TypeError, lambda: Tensor.arange(0, 3, end=3)),
  "arange_step_0": (ValueError, lambda: Tensor.arange(0, 3, 0)),
  "linspace_missing": (TypeError, lambda: Tensor.linspace(0, 1)),
  "zeros_size_twice": (TypeError, lambda: Tensor.zeros(2, size=(2,))),
  "randint_bounds": (ValueError, lambda: Tensor.randint(5, 5, (2,))),
  "randint_args": (TypeError, lambda: Tensor.randint(1, 2, 3, (4,))),
  "randn_generator": (TypeError, lambda: Tensor.randn(2, generator=object())),
  "scaled_uniform_shape": (ValueError, lambda: Tensor.scaled_uniform(-1, 2)),
}

@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_are_runtime_errors(name):
  exc, fn = ERRORS[name]
  with pytest.raises(exc) as e: fn()
  assert isinstance(e.value, RuntimeError), type(e.value).__mro__
