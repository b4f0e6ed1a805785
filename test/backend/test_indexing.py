"""Indexing vs PyTorch: advanced __getitem__, __setitem__, gather/scatter & co, masks; forward and gradients."""
import math, os, re
import numpy as np
import pytest
import torch
from petagrad import Tensor, dtypes, nn
from helpers import helper_test_op

def T(lib):
  """Index-tensor constructor for the library of x (torch or petagrad)."""
  return (lambda v, **k: torch.tensor(v)) if lib is torch else (lambda v, **k: Tensor(v, **k))

def lib_of(x): return torch if isinstance(x, torch.Tensor) else Tensor

# ------------------------------------------------------------------ __getitem__

GETITEM = {
  # name: (shape, index builder (x, tensor-ctor) -> x[...])
  "tensor_1d": ((5, 3), lambda x, t: x[t([0, 4, 2, 2])]),
  "tensor_negative": ((5, 3), lambda x, t: x[t([-1, 0, -5])]),
  "tensor_2d_index": ((5, 3), lambda x, t: x[t([[0, 1], [4, 3]])]),
  "tensor_0d_index": ((5, 3), lambda x, t: x[t(2)]),
  "list": ((5, 3), lambda x, t: x[[1, 3]]),
  "list_negative": ((5, 3), lambda x, t: x[[-1, -2]]),
  "nested_list_is_tuple": ((5, 3), lambda x, t: x[[[1, 4], [2, 0]]]),   # PyTorch reads a list of lists as a tuple
  "nested_list_2d": ((5, 3), lambda x, t: x[([[1], [3]],)]),
  "two_adjacent": ((4, 3, 2), lambda x, t: x[:, t([0, 2]), t([1, 0])]),
  "two_separated": ((4, 3, 2), lambda x, t: x[t([0, 3]), :, t([1, 0])]),
  "broadcast_indices": ((4, 3, 2), lambda x, t: x[t([[0], [3]]), t([1, 2, 0])]),
  "int_between_adv": ((3, 4, 2, 5), lambda x, t: x[:, t([0, 1]), 0, t([1, 4])]),
  "int_then_adv": ((3, 4, 5), lambda x, t: x[0, :, t([0, 1])]),
  "none_separates": ((3, 4, 5), lambda x, t: x[None, t([0, 1]), None, t([1, 2])]),
  "ellipsis": ((3, 4, 5), lambda x, t: x[..., t([4, 0])]),
  "ellipsis_first_adv": ((3, 4, 5), lambda x, t: x[t([2, 0]), ...]),
  "slice_and_adv": ((4, 5, 3), lambda x, t: x[1:3, t([0, 4, 1]), ::2]),
  "all_dims_adv": ((3, 4), lambda x, t: x[t([0, 2, 1]), t([3, 0, 1])]),
  "repeated_index": ((4, 2), lambda x, t: x[t([1, 1, 1, 0])]),
  "mask_full": ((3, 4), lambda x, t: x[x > 0]),
  "mask_row": ((4, 3), lambda x, t: x[t([True, False, True, True])]),
  "mask_list": ((4, 3), lambda x, t: x[:, [True, False, True]]),
  "mask_2d_of_3d": ((3, 4, 2), lambda x, t: x[x[:, :, 0] > 0]),
  "mask_and_adv": ((3, 4, 2), lambda x, t: x[t([True, False, True]), :, t([1, 0])]),
  "python_true": ((3, 2), lambda x, t: x[True]),
  "python_false": ((3, 2), lambda x, t: x[False]),
  "python_true_and_int": ((3, 2), lambda x, t: x[True, 1]),
  "empty_list": ((3, 2), lambda x, t: x[t([], dtype=dtypes.int64)] if lib_of(x) is Tensor else x[torch.tensor([], dtype=torch.long)]),
  "mask_all_false": ((3, 2), lambda x, t: x[x > 100]),
  "size0_dim_slice_adv": ((0, 3), lambda x, t: x[:, t([2, 0])]),
  "size1_dims": ((1, 1, 3), lambda x, t: x[t([0, 0]), :, t([2, 1])]),
  "noncontiguous_T": ((3, 4), lambda x, t: x.T[t([3, 0]), 1:]),
  "noncontiguous_flip": ((5, 2), lambda x, t: x.flip(0)[t([0, 1])] if lib_of(x) is Tensor else x.flip(0)[t([0, 1])]),
  "bool_tensor_0d": ((3, 2), lambda x, t: x[t(True)]),
}

@pytest.mark.parametrize("name", list(GETITEM))
def test_getitem(device, name):
  shape, f = GETITEM[name]
  helper_test_op([shape], lambda x: f(x, T(torch)), lambda x: f(x, T(Tensor)))

def test_getitem_int_dtypes(device):
  for dt in ("int32", "uint8", "bool", "float16"):
    helper_test_op([(4, 3)], lambda x: x[torch.tensor([3, 0]), 1:], lambda x: x[Tensor([3, 0]), 1:], dtype=dt, low=0, high=9, forward_only=True)

def test_getitem_index_dtypes(device):
  # int32 / uint8 / int8 index tensors work like int64
  x = Tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
  for dt in (dtypes.int32, dtypes.uint8, dtypes.int8, dtypes.int16):
    assert x[Tensor([2, 0], dtype=dt)].tolist() == [[5.0, 6.0], [1.0, 2.0]]

# ------------------------------------------------------------------ index range rules (module doc of petagrad/mixin/indexing.py)

def lazy(v, dtype=dtypes.int64) -> Tensor:
  """An index tensor whose values are computed by a kernel that has not run yet: not checkable at the call."""
  return Tensor(v, dtype=dtype) + 0

LAZY_BAD = {
  # an invalid index computed by a kernel: the realize of the result raises, naming the op (and the dim and size)
  "getitem": (lambda x: x[lazy([0, 2])], "getitem", "dim 0 with size 2"),
  "getitem_neg": (lambda x: x[lazy([-3])], "getitem", "-2 <= index < 2"),
  "getitem_huge": (lambda x: x[lazy([10 ** 9])], "getitem", "dim 0"),
  "getitem_uint8": (lambda x: x[:, lazy([2, 1], dtypes.uint8)], "getitem", "dim 1 with size 2"),
  "gather_neg": (lambda x: x.gather(1, lazy([[1, -1], [0, 0]])), "gather", "0 <= index < 2"),   # no negatives (PyTorch)
  "index_select": (lambda x: x.index_select(1, lazy([1, 7])), "index_select", "dim 1 with size 2"),
  "take_along_dim": (lambda x: x.take_along_dim(lazy([[-1], [-3]]), 1), "take_along_dim", "-2 <= index < 2"),
  "setitem": (lambda x: x.contiguous().realize().__setitem__(lazy([1, 3]), 5.0), "getitem", "index"),
  "scatter": (lambda x: x.scatter(1, lazy([[0, 3]]), 1.0), "scatter", "dim 1 with size 2"),
  "scatter_reduce": (lambda x: x.scatter_reduce(1, lazy([[7, 1]]), Tensor([[2.0, 3.0]]), "sum"), "scatter_reduce", "dim 1"),
  "scatter_add": (lambda x: x.scatter_add(0, lazy([[-1, 1]]), Tensor([[2.0, 3.0]])), "scatter_add", "0 <= index < 2"),
  "index_add": (lambda x: x.index_add(0, lazy([2]), Tensor([[1.0, 1.0]])), "index_add", "dim 0 with size 2"),
  "embedding": (lambda x: nn.Embedding(3, 2)(lazy([0, 3])), "Embedding", "0 <= index < 3"),
  "one_hot": (lambda x: lazy([0, 3]).one_hot(3), "one_hot", "num_classes=3"),
  "cross_entropy": (lambda x: x.cross_entropy(lazy([1, 5])), "cross_entropy", "2 classes"),
}

@pytest.mark.parametrize("name", sorted(LAZY_BAD))
def test_lazy_out_of_range_raises_when_computed(device, name):
  # not known at the call, so the realize that computes the result checks it (and no kernel reads out of bounds:
  # the PYTHON device checks every access)
  fn, op, text = LAZY_BAD[name]
  x = Tensor([[1.0, 2.0], [3.0, 4.0]])
  with pytest.raises(IndexError, match=rf"{op}: .*{re.escape(text)}") as e:
    out = fn(x)
    if out is not None: out.realize()
  assert os.path.basename(__file__) in str(e.value)   # the user's line that made the op

def test_lazy_valid_indices(device):
  x = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  assert x[lazy([-1, -2, 0])].tolist() == [[3.0, 4.0], [1.0, 2.0], [1.0, 2.0]]   # negatives count from the end in getitem
  assert x.gather(1, lazy([[1, 1], [0, 1]])).tolist() == [[2.0, 2.0], [3.0, 4.0]]
  assert x.take_along_dim(lazy([[-1], [0]]), 1).tolist() == [[2.0], [3.0]]
  (x[lazy([1, 1])] * Tensor([[1.0, 2.0]])).sum().backward()   # the check passes the gradient through
  assert x.grad is not None and x.grad.tolist() == [[0.0, 0.0], [2.0, 4.0]]
  z = Tensor.zeros(3).contiguous().realize()
  z[lazy([1, -1])] = 5.0
  assert z.tolist() == [0.0, 5.0, 5.0]

KNOWN_BAD = {
  # name: (call, op named in the message, text in the message)
  "getitem_tensor": (lambda x: x[Tensor([0, 2])], "getitem", "index 2 is out of bounds for dim 0 with size 2"),
  "getitem_tensor_neg": (lambda x: x[:, Tensor([-4])], "getitem", "index -4 is out of bounds for dim 1 with size 3"),
  "getitem_numpy": (lambda x: x[np.array([1, 9])], "getitem", "index 9 is out of bounds"),
  "getitem_list": (lambda x: x[[0], [3]], "getitem", "index 3 is out of bounds for dim 1 with size 3"),
  "getitem_realized": (lambda x: x[(Tensor([1, 2]) * 2).realize()], "getitem", "index 4 is out of bounds"),
  "getitem_view": (lambda x: x[Tensor([[0, 5]]).T.expand(2, 3)], "getitem", "index 5 is out of bounds"),
  "getitem_int32": (lambda x: x[Tensor([2], dtype=dtypes.int32)], "getitem", "index 2 is out of bounds"),
  "setitem_tensor": (lambda x: x.__setitem__(Tensor([2]), 1.0), "setitem", "index 2 is out of bounds"),
  "gather": (lambda x: x.gather(1, Tensor([[0], [3]])), "gather", "index 3 is out of bounds for dim 1 with size 3"),
  "gather_negative": (lambda x: x.gather(0, Tensor([[-1, 0, 0]])), "gather", "no negative indices"),
  "index_select": (lambda x: x.index_select(1, Tensor([3])), "index_select", "index 3 is out of bounds"),
  "index_select_negative": (lambda x: x.index_select(0, Tensor([-1])), "index_select", "no negative indices"),
  "take_along_dim": (lambda x: x.take_along_dim(Tensor([[-4], [0]]), 1), "take_along_dim", "index -4 is out of bounds"),
  "take_along_dim_flat": (lambda x: x.take_along_dim(Tensor([6])), "take_along_dim", "index 6 is out of bounds for dim 0 with size 6"),
  "scatter": (lambda x: x.scatter(0, Tensor([[2, 0, 0]]), 1.0), "scatter", "index 2 is out of bounds"),
  "scatter_negative": (lambda x: x.scatter(1, Tensor([[-1]]), Tensor([[1.0]])), "scatter", "no negative indices"),
  "scatter_add": (lambda x: x.scatter_add(1, Tensor([[3]]), Tensor([[1.0]])), "scatter_add", "index 3 is out of bounds"),
  "scatter_reduce": (lambda x: x.scatter_reduce(0, Tensor([[0, 5, 1]]), Tensor([[1.0, 2.0, 3.0]]), "amax"), "scatter_reduce", "index 5"),
}

@pytest.mark.parametrize("name", list(KNOWN_BAD))
def test_known_out_of_range_raises(device, name):
  # index values that can be read without running a kernel are checked at the call, like PyTorch
  import sys
  fn, op, text = KNOWN_BAD[name]
  x = Tensor.zeros(2, 3).contiguous().realize()
  _line = sys._getframe().f_lineno + 2
  with pytest.raises(IndexError) as e:
    fn(x)
  msg = str(e.value)
  assert msg.startswith(op + ":") and text in msg and "(2, 3) dtypes.float32" in msg, msg
  assert "test_indexing.py" in msg, msg

def test_known_in_range_matches_torch(device):
  # negative indices where PyTorch takes them (getitem, setitem, take_along_dim), checked values in range
  helper_test_op(None, lambda x, i: x[i], vals=[np.linspace(-1, 1, 6).reshape(2, 3), np.array([-2, 1, -1])], dtype=["float32", "int64"])
  helper_test_op(None, lambda x, i: torch.take_along_dim(x, i, 1), lambda x, i: x.take_along_dim(i, 1),
                 vals=[np.linspace(-1, 1, 6).reshape(2, 3), np.array([[-1, 0], [-3, 2]])], dtype=["float32", "int64"])
  _setitem_both((4,), lambda x, L: x.__setitem__(V(L, [-1, -4]), V(L, [7.0, 8.0])))

def test_known_check_limit_and_losses(device, monkeypatch):
  # above KNOWN_INDEX_LIMIT elements the values are not read back: the lazy rule applies
  import petagrad.mixin.indexing as I
  monkeypatch.setattr(I, "KNOWN_INDEX_LIMIT", 2)
  with pytest.raises(IndexError, match=r"getitem: an index is out of bounds for dim 0 with size 2"): Tensor([1.0, 2.0])[Tensor([0, 1, 7])].tolist()
  with pytest.raises(IndexError, match=r"getitem: index 7 is out of bounds"): Tensor([1.0, 2.0])[Tensor([0, 7])]
  monkeypatch.undo()
  # class-index targets: ignore_index is allowed, other known out-of-range targets raise, lazy ones add nothing
  x = Tensor.ones(2, 3)
  assert x.cross_entropy(Tensor([1, -100])).item() == pytest.approx(math.log(3))
  with pytest.raises(IndexError, match=r"cross_entropy: target 5 is out of bounds for 3 classes"): x.cross_entropy(Tensor([5, -100]))
  assert x.cross_entropy(lazy([1, -100]), reduction="sum").item() == pytest.approx(math.log(3))
  with pytest.raises(IndexError, match=r"cross_entropy: a target is out of bounds for 3 classes"): x.cross_entropy(lazy([1, 5])).item()

def test_known_check_skipped_in_jit(device):
  # inside TinyJit the index is an input that changes between calls: not read back, checked by every replay
  from petagrad.engine.jit import TinyJit
  x = Tensor([1.0, 2.0, 3.0]).realize()
  @TinyJit
  def f(i: Tensor) -> Tensor: return (x[i] * 1).realize()
  outs = [f(Tensor([k, -1])).tolist() for k in (0, 1, 2, 1)]
  assert outs == [[1.0, 3.0], [2.0, 3.0], [3.0, 3.0], [2.0, 3.0]] and f.cnt == 4
  with pytest.raises(IndexError, match=r"getitem: an index is out of bounds for dim 0 with size 3"): f(Tensor([0, 5]))

def test_getitem_errors(device):
  x = Tensor.ones(3, 4)
  with pytest.raises(IndexError, match=r"getitem: index 3 is out of bounds for dim 0 with size 3"): x[3]
  with pytest.raises(IndexError, match=r"index 5 is out of bounds for dim 1 with size 4"): x[:, [0, 5]]
  with pytest.raises(IndexError, match=r"index -4 is out of bounds"): x[[-4]]
  with pytest.raises(IndexError, match=r"too many indices \(3\) for a 2-d tensor"): x[0, 0, 0]
  with pytest.raises(IndexError, match=r"too many indices"): x[Tensor([True]).reshape(1, 1, 1)]
  with pytest.raises(IndexError, match=r"integer or bool tensors, got dtypes.float32"): x[Tensor([0.0])]
  with pytest.raises(IndexError, match=r"shape of the mask \(4,\) does not match"): x[Tensor([True, False, True, True])]
  with pytest.raises(IndexError, match=r"single ellipsis"): x[..., ..., 0]   # (x[..., ...] works, as in torch 2.13)
  with pytest.raises(TypeError, match=r"unsupported index"): x["a"]
  with pytest.raises(TypeError, match=r"list of Tensors"): x[[[Tensor(0)]]]
  with pytest.raises(ValueError, match=r"slice step cannot be zero"): x[::0]
  with pytest.raises(IndexError) as e: x[:, 9]
  assert "(3, 4)" in str(e.value) and "float32" in str(e.value) and "test_indexing.py" in str(e.value)   # operands and the user's line

def test_getitem_one_kernel_forward(device):
  # the one-hot gather fuses into one reduce kernel
  from petagrad.helpers import GlobalCounters
  x = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3)).realize()
  i = Tensor([3, 1]).realize()
  GlobalCounters.reset()
  out = x[i].realize()
  assert GlobalCounters.kernel_count == 1
  assert out.tolist() == [[9.0, 10.0, 11.0], [3.0, 4.0, 5.0]]

# ------------------------------------------------------------------ __setitem__

def _setitem_both(shape, f, dtype=np.float32):
  a = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
  x, t = Tensor(a).contiguous().realize(), torch.tensor(a)
  f(x, Tensor); f(t, torch)
  np.testing.assert_allclose(x.numpy(), t.numpy())
  return x

def V(lib, v): return torch.tensor(v) if lib is torch else Tensor(v)

SETITEM = {
  "int": ((3, 4), lambda x, L: x.__setitem__(1, 7.0)),
  "slice": ((3, 4), lambda x, L: x.__setitem__((slice(None), slice(1, 3)), -1.0)),
  "slice_tensor_value": ((3, 4), lambda x, L: x.__setitem__((slice(0, 2), 2), V(L, [10.0, 20.0]))),
  "broadcast_value": ((3, 4), lambda x, L: x.__setitem__(slice(1, None), V(L, [1.0, 2.0, 3.0, 4.0]))),
  "strided": ((4, 6), lambda x, L: x.__setitem__((slice(None, None, 2), slice(1, None, 3)), -5.0)),
  "negative_step": ((5,),
                    lambda x, L: x.__setitem__(slice(3, 0, -1) if L is Tensor else [3, 2, 1], V(L, [1.0, 2.0, 3.0]))),   # torch has no negative steps
  "tensor_index": ((4, 3), lambda x, L: x.__setitem__(V(L, [2, 0]), V(L, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))),
  "negative_tensor_index": ((4, 3), lambda x, L: x.__setitem__(V(L, [-1]), 0.5)),
  "duplicates_last_wins": ((4, 3), lambda x, L: x.__setitem__(V(L, [0, 0]), V(L, [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]))),
  "two_tensor_indices": ((4, 3), lambda x, L: x.__setitem__((V(L, [0, 3]), V(L, [2, 1])), V(L, [8.0, 9.0]))),
  "mask": ((3, 4), lambda x, L: x.__setitem__(x > 5, 0.0)),
  "list_and_slice": ((3, 4), lambda x, L: x.__setitem__((slice(None), [0, 3]), 1.5)),
  "ellipsis": ((2, 3, 2), lambda x, L: x.__setitem__((Ellipsis, 1), 3.0)),
  "self_overlap": ((6,), lambda x, L: x.__setitem__(slice(1, None), x[:-1] * 1)),
  "leading_one_value": ((3, 4), lambda x, L: x.__setitem__(0, V(L, [[1.0, 2.0, 3.0, 4.0]]))),
  "empty_selection": ((3, 4), lambda x, L: x.__setitem__(slice(2, 2), 1.0)),
}

@pytest.mark.parametrize("name", list(SETITEM))
def test_setitem(device, name):
  shape, f = SETITEM[name]
  _setitem_both(shape, f)

def test_setitem_int_dtype(device):
  _setitem_both((3, 4), lambda x, L: x.__setitem__((V(L, [1, 2]), slice(None)), 7), dtype=np.int32)
  _setitem_both((3, 4), lambda x, L: x.__setitem__(x > 6, -1), dtype=np.int64)

def test_setitem_views_see_write(device):
  x = Tensor.zeros(3, 4).contiguous().realize()
  v = x[1]
  x[1, 2:] = 5.0
  assert v.tolist() == [0.0, 0.0, 5.0, 5.0]
  x[Tensor([0])] = 1.0
  assert x.tolist()[0] == [1.0] * 4

def test_setitem_lazy_tensor(device):
  # a tensor that is not realized yet: the new value replaces the graph
  x = Tensor.arange(6).reshape(2, 3) * 2
  x[0, 1] = -1
  x[Tensor([1]), Tensor([2])] = 100
  assert x.tolist() == [[0, -1, 4], [6, 8, 100]]

def test_setitem_errors(device):
  x = Tensor.zeros(3, 4).contiguous().realize()
  with pytest.raises(ValueError, match=r"setitem: value of shape \(3,\) cannot be broadcast to the indexed shape \(4,\)"):
    x[0] = Tensor([1.0, 2.0, 3.0])
  with pytest.raises(IndexError, match=r"setitem: index 4 is out of bounds"): x[4] = 1.0
  with pytest.raises(IndexError, match=r"index 7 is out of bounds"): x[[0, 7]] = 1.0

# ------------------------------------------------------------------ gather / scatter & co

def test_gather(device):
  idx = np.array([[0, 2, 1], [2, 2, 0]])
  helper_test_op(None, lambda x, i: x.gather(1, i), vals=[np.linspace(-1, 1, 12).reshape(3, 4), idx], dtype=["float32", "int64"])
  helper_test_op(None, lambda x, i: x.gather(0, i), vals=[np.linspace(-1, 1, 12).reshape(3, 4), idx], dtype=["float32", "int64"])
  helper_test_op(None, lambda x, i: x.gather(-2, i), vals=[np.linspace(-1, 1, 12).reshape(3, 4), idx[:, :2]], dtype=["float32", "int64"])

def test_gather_3d_noncontiguous(device):
  idx = np.array([[[1, 0], [0, 0]], [[1, 1], [0, 1]]])
  helper_test_op(None, lambda x, i: x.permute(2, 0, 1).gather(2, i), vals=[np.linspace(-1, 1, 12).reshape(2, 3, 2), idx], dtype=["float32", "int64"])

def test_gather_empty_and_errors(device):
  helper_test_op(None, lambda x, i: x.gather(1, i), vals=[np.ones((2, 3)), np.zeros((2, 0), dtype=np.int64)], dtype=["float32", "int64"])
  x = Tensor.ones(2, 3)
  with pytest.raises(ValueError, match=r"gather: index must have as many dims as the input \(2\), got 1"): x.gather(0, Tensor([0]))
  with pytest.raises(ValueError, match=r"index size 3 > input size 2 in dim 0"): x.gather(1, Tensor([[0], [0], [0]]))
  with pytest.raises(IndexError, match=r"axis 2 is out of range"): x.gather(2, Tensor([[0]]))
  with pytest.raises(TypeError, match=r"integer Tensor"): x.gather(0, Tensor([[0.0]]))

def test_take_along_dim(device):
  helper_test_op(None, lambda x, i: torch.take_along_dim(x, i, 1), lambda x, i: x.take_along_dim(i, 1),
                 vals=[np.linspace(-1, 1, 12).reshape(3, 4), np.array([[3, 0]])], dtype=["float32", "int64"])
  helper_test_op(None, lambda x, i: torch.take_along_dim(x, i), lambda x, i: x.take_along_dim(i),
                 vals=[np.linspace(-1, 1, 6).reshape(2, 3), np.array([5, 0, 2])], dtype=["float32", "int64"])

def test_index_select(device):
  helper_test_op(None, lambda x, i: x.index_select(1, i), vals=[np.linspace(-1, 1, 12).reshape(3, 4), np.array([3, 0, 3])],
                 dtype=["float32", "int64"])
  helper_test_op(None, lambda x, i: x.index_select(-1, i), vals=[np.linspace(-1, 1, 4), np.array([1])], dtype=["float32", "int64"])
  with pytest.raises(TypeError, match=r"index_select: index must be a 0-d or 1-D integer Tensor"): Tensor.ones(2).index_select(0, Tensor([[0]]))

def test_scatter(device):
  # no duplicate targets: torch is deterministic then
  idx = np.array([[0, 1, 2], [2, 0, 1]])
  helper_test_op(None, lambda x, i, s: x.scatter(0, i, s), vals=[np.zeros((3, 3)), idx, np.arange(1.0, 7.0).reshape(2, 3)],
                 dtype=["float32", "int64", "float32"])
  helper_test_op(None, lambda x, i, s: x.scatter(1, i, s), vals=[np.zeros((2, 4)), np.array([[3, 0], [1, 2]]), np.arange(1.0, 5.0).reshape(2, 2)],
                 dtype=["float32", "int64", "float32"])
  # src bigger than index: only its leading part is used (torch's backward rejects this shape, so forward only)
  helper_test_op(None, lambda x, i, s: x.scatter(0, i, s), vals=[np.zeros((3, 3)), np.array([[2, 0, 1]]), np.arange(1.0, 10.0).reshape(3, 3)],
                 dtype=["float32", "int64", "float32"], forward_only=True)
  helper_test_op(None, lambda x, i: x.scatter(1, i, 2.5), vals=[np.zeros((2, 4)), np.array([[3], [1]])], dtype=["float32", "int64"])

def test_scatter_duplicates_last_wins(device):
  out = Tensor.zeros(3).scatter(0, Tensor([1, 1, 1]), Tensor([1.0, 2.0, 3.0]))
  assert out.tolist() == [0.0, 3.0, 0.0]

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(device, reduce, include_self):
  # duplicate targets on purpose: the reduction makes them deterministic
  idx = np.array([[0, 1, 0], [2, 2, 1]])
  src = np.array([[0.5, -1.0, 1.5], [2.0, -0.25, 0.75]])
  helper_test_op(None, lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self),
                 vals=[np.array([[1.0, -2.0, 3.0, 0.3], [0.1, 0.7, -0.9, 2.0]]), idx, src], dtype=["float32", "int64", "float32"])

@pytest.mark.parametrize("reduce", ["amax", "amin", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_ties_grad(device, reduce, include_self):
  # duplicates that tie with each other and with self: torch shares amax/amin's gradient evenly among all the
  # elements equal to the result (self counted even with include_self=False); prod with zeros
  idx = np.array([[0, 1, 0, 3], [2, 2, 1, 2]])
  src = np.array([[1.0, 2.0, 1.0, 0.0], [3.0, 3.0, 0.0, 3.0]])
  base = np.array([[1.0, -2.0, 3.0, 0.0], [0.1, 0.7, 3.0, 2.0]])
  sgn = -1.0 if reduce == "amin" else 1.0
  helper_test_op(None, lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self),
                 vals=[sgn * base, idx, sgn * src], dtype=["float32", "int64", "float32"])

def test_scatter_duplicates_grad(device):
  # torch's scatter gradient gives every src element the gradient of its target, also when a duplicate overwrote it
  # (duplicates carry equal values here: torch does not say which duplicate wins)
  helper_test_op(None, lambda x, i, s: x.scatter(1, i, s),
                 vals=[np.ones((2, 4)), np.array([[0, 0, 1], [3, 3, 3]]), np.array([[2.0, 2.0, 3.0], [6.0, 6.0, 6.0]])],
                 dtype=["float32", "int64", "float32"])
  out = Tensor.ones(2, 4).scatter(1, Tensor([[0, 0, 1], [3, 3, 3]]), Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
  assert out.tolist() == [[2.0, 3.0, 1.0, 1.0], [1.0, 1.0, 1.0, 6.0]]   # petagrad: the last duplicate wins

def test_scatter_reduce_int(device):
  idx = np.array([0, 1, 0, 3])
  for red in ("sum", "amax", "amin", "prod", "mean"):
    helper_test_op(None, lambda x, i, s: x.scatter_reduce(0, i, s, red), vals=[np.array([1, 2, 3, 4, 5]), idx, np.array([7, -3, 2, 9])],
                   dtype=["int32", "int64", "int32"])

def test_scatter_add_and_errors(device):
  helper_test_op(None, lambda x, i, s: x.scatter_add(0, i, s), vals=[np.zeros(4), np.array([1, 1, 3]), np.array([1.0, 2.0, 3.0])],
                 dtype=["float32", "int64", "float32"])
  x = Tensor.zeros(3, 3)
  with pytest.raises(ValueError, match=r"scatter_reduce: reduce must be one of"): x.scatter_reduce(0, Tensor([[0]]), Tensor([[1.0]]), "max")
  with pytest.raises(ValueError, match=r"scatter: index must have as many dims as self"): x.scatter(0, Tensor([0]), Tensor([1.0]))
  with pytest.raises(ValueError, match=r"index size 2 > src size 1"): x.scatter(0, Tensor([[0, 1]]), Tensor([[1.0]]))

def test_masked_fill(device):
  m = np.array([[True, False, True], [False, False, True]])
  helper_test_op(None, lambda x, m: x.masked_fill(m, -7.0), vals=[np.linspace(-1, 1, 6).reshape(2, 3), m], dtype=["float32", "bool"])
  helper_test_op(None, lambda x, m: x.masked_fill(m, 3), vals=[np.linspace(-1, 1, 6).reshape(2, 3), m[0]], dtype=["float32", "bool"])
  helper_test_op(None, lambda x, m: x.masked_fill(m, 1), vals=[np.arange(6).reshape(2, 3), m], dtype=["int32", "bool"])
  with pytest.raises(ValueError, match=r"masked_fill: mask of shape \(2, 3\) does not broadcast to \(3,\)"):
    Tensor.ones(3).masked_fill(Tensor(m), 0.0)

def test_masked_select(device):
  m = np.array([[True, False, True], [False, False, True]])
  helper_test_op(None, lambda x, m: x.masked_select(m), vals=[np.linspace(-1, 1, 6).reshape(2, 3), m], dtype=["float32", "bool"])
  helper_test_op(None, lambda x, m: x.masked_select(m), vals=[np.linspace(-1, 1, 3), m], dtype=["float32", "bool"])
  helper_test_op(None, lambda x, m: x.masked_select(m), vals=[np.linspace(-1, 1, 6).reshape(2, 3), np.zeros(3, bool)], dtype=["float32", "bool"])

def test_nonzero(device):
  for v in ([[0, 1, 0], [2, 0, 3]], [0.0, -1.0, float("nan")], [[False, False]], 5, []):
    a = np.array(v)
    dt = "float32" if a.dtype.kind == "f" or a.size == 0 else "int32" if a.dtype.kind == "i" else "bool"
    helper_test_op(None, lambda x: x.nonzero(), vals=[a], dtype=dt)
  got = Tensor([[0, 1], [1, 1]]).nonzero(as_tuple=True)
  assert [t.tolist() for t in got] == [[0, 1, 1], [1, 0, 1]]

# ------------------------------------------------------------------ property test: random op chains vs numpy

from hypothesis import given, settings, strategies as st, HealthCheck

def _chain_ops():
  # (name, petagrad fxn, numpy fxn, applies-to(shape))
  return [
    ("add1", lambda x: x + 1.5, lambda a: a + 1.5, lambda s: True),
    ("mul", lambda x: x * x, lambda a: a * a, lambda s: True),
    ("relu", lambda x: x.relu(), lambda a: np.maximum(a, 0), lambda s: True),
    ("tanh", lambda x: x.tanh(), np.tanh, lambda s: True),
    ("T", lambda x: x.T, lambda a: a.T, lambda s: True),
    ("flip0", lambda x: x.flip(0), lambda a: np.flip(a, 0), lambda s: len(s) >= 1),
    ("slice", lambda x: x[1:], lambda a: a[1:], lambda s: len(s) >= 1 and s[0] >= 2),
    ("stride", lambda x: x[::2], lambda a: a[::2], lambda s: len(s) >= 1),
    ("sum0", lambda x: x.sum(0), lambda a: a.sum(0), lambda s: len(s) >= 2),
    ("max-1", lambda x: x.max(axis=-1, keepdim=True), lambda a: a.max(-1, keepdims=True), lambda s: len(s) >= 1 and s[-1] >= 1),
    ("take", lambda x: x[Tensor([0, -1, 0])], lambda a: a[[0, -1, 0]], lambda s: len(s) >= 1 and s[0] >= 1),
    ("take_last", lambda x: x[..., Tensor([1, 0])], lambda a: a[..., [1, 0]], lambda s: len(s) >= 1 and s[-1] >= 2),
    ("mask", lambda x: x[x > 0], lambda a: a[a > 0], lambda s: True),
    ("cumsum", lambda x: x.cumsum(0), lambda a: np.cumsum(a, 0), lambda s: len(s) >= 1),
    ("sort", lambda x: x.sort(-1)[0], lambda a: np.sort(a, -1), lambda s: len(s) >= 1),
    ("reshape", lambda x: x.reshape(-1), lambda a: a.reshape(-1), lambda s: True),
    ("unsq", lambda x: x.unsqueeze(0), lambda a: a[None], lambda s: len(s) < 3),
    ("pad", lambda x: x.pad(((1, 0),) + ((0, 0),) * (x.ndim - 1)), lambda a: np.pad(a, ((1, 0),) + ((0, 0),) * (a.ndim - 1)), lambda s: len(s) >= 1),
  ]

@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), shape=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_random_op_chains(device, data, shape):
  # runs on every test device (the `device` fixture); the gradient-checking chains are in test_op_chains.py
  ops = _chain_ops()
  rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 16)))
  a = rng.uniform(-2, 2, size=tuple(shape)).astype(np.float32)
  x, log = Tensor(a), [f"{a.shape}"]
  for _ in range(data.draw(st.integers(1, 5))):
    options = [o for o in ops if o[3](a.shape)]
    name, pf, nf, _ = data.draw(st.sampled_from(options))
    x, a = pf(x), nf(a)
    log.append(name)
    if a.size > 200: break
  np.testing.assert_allclose(x.numpy(), a, rtol=1e-5, atol=1e-5, err_msg=" -> ".join(log))
