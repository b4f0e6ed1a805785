"""More torch names vs PyTorch (forward and gradient): logaddexp & co, clamp_min/max, nan-reductions, isclose,
products (mv, bmm, addmm, baddbmm, inner, tensordot, kron), order statistics (median, quantile), searching
(searchsorted, bucketize, bincount), diff, flips/rot90, unbind, index_add/index_copy/index_fill."""
import math
import numpy as np
import pytest
import torch
from petagrad import Tensor
from helpers import helper_test_op

NAN = float("nan")

# ------------------------------------------------------------------ elementwise
@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2"])
def test_logaddexp(device, name):
  helper_test_op([(3, 4), (4,)], lambda a, b: getattr(a, name)(b), low=-3, high=3)
  helper_test_op(None, lambda a, b: getattr(a, name)(b),
                 vals=[[-math.inf, math.inf, 1000.0, -1000.0, 0.0], [-math.inf, math.inf, 999.0, 5.0, -math.inf]], forward_only=True)

def test_unary_extras(device):
  helper_test_op([(2, 5)], lambda x: x.logit(eps=1e-3), low=0.05, high=0.95)
  helper_test_op([(2, 5)], lambda x: torch.logit(x), lambda x: x.logit(), low=0.05, high=0.95)
  helper_test_op(None, lambda x: x.sinc(), vals=[[0.0, 0.5, -1.25, 2.0, 0.2, -0.02]])
  helper_test_op([(4,)], lambda x: x.deg2rad() + x.rad2deg())
  helper_test_op([(4,)], lambda x: x.deg2rad(), dtype="int32", low=-90, high=90)

def test_clamp_min_max(device):
  helper_test_op([(3, 4)], lambda x: x.clamp_min(0.25))
  helper_test_op([(3, 4)], lambda x: x.clamp_max(-0.5))
  helper_test_op([(3, 4), (4,)], lambda x, m: x.clamp_min(m))
  helper_test_op([(3, 4)], lambda x: x.clamp_max(1), dtype="int32", low=-4, high=4)

def test_nan_reductions(device):
  v = [[1.0, NAN, 2.0], [NAN, NAN, NAN], [0.5, -1.0, 3.0]]
  helper_test_op(None, lambda x: x.nansum(), vals=[v])
  helper_test_op(None, lambda x: x.nansum(1, keepdim=True), lambda x: x.nansum(1, keepdim=True), vals=[v])
  helper_test_op(None, lambda x: x.nanmean(1), vals=[v], forward_only=True)   # an all-NaN row: torch's gradient there is NaN, ours 0
  helper_test_op(None, lambda x: x.nanmean(0), vals=[[[1.0, NAN], [3.0, -2.0]]])
  helper_test_op([(3, 4)], lambda x: x.nansum(0), dtype="int32", low=-3, high=3)

def test_count_nonzero_isclose(device):
  helper_test_op(None, lambda x: x.count_nonzero(), vals=[[[0.0, 1.0, -2.0], [0.0, 0.0, NAN]]])
  helper_test_op(None, lambda x: x.count_nonzero(dim=1), vals=[[[0, 1, 2], [0, 0, 3]]], dtype="int32")
  a, b = [1.0, NAN, math.inf, 1.0, -math.inf, 0.0], [1.0 + 1e-9, NAN, math.inf, 1.1, math.inf, 1e-9]
  helper_test_op(None, lambda x, y: x.isclose(y), vals=[a, b], forward_only=True)
  helper_test_op(None, lambda x, y: torch.isclose(x, y, equal_nan=True), lambda x, y: x.isclose(y, equal_nan=True), vals=[a, b], forward_only=True)
  helper_test_op(None, lambda x, y: x.isclose(y), vals=[[1, 2], [1, 3]], dtype="int32")
  assert Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.0 + 1e-7])) is True
  assert Tensor([1.0, 2.0]).allclose(Tensor([1.0, 2.1])) is False

# ------------------------------------------------------------------ products
def test_products(device):
  helper_test_op([(3, 4), (4,)], lambda a, v: a.mv(v))
  helper_test_op([(2, 3, 4), (2, 4, 5)], lambda a, b: a.bmm(b))
  helper_test_op([(3, 5), (3, 4), (4, 5)], lambda s, a, b: torch.addmm(s, a, b, beta=0.5, alpha=2), lambda s, a, b: s.addmm(a, b, beta=0.5, alpha=2))
  helper_test_op([(5,), (3, 4), (4, 5)], lambda s, a, b: torch.addmm(s, a, b), lambda s, a, b: s.addmm(a, b))
  helper_test_op([(2, 3, 5), (2, 3, 4), (2, 4, 5)], lambda s, a, b: torch.baddbmm(s, a, b, alpha=0.5), lambda s, a, b: s.baddbmm(a, b, alpha=0.5))
  helper_test_op([(2, 3), (4, 3)], lambda a, b: torch.inner(a, b), lambda a, b: a.inner(b))
  helper_test_op([(2, 3, 4), (3, 4, 5)], lambda a, b: torch.tensordot(a, b), lambda a, b: a.tensordot(b))
  helper_test_op([(2, 3, 4), (4, 3, 2)], lambda a, b: torch.tensordot(a, b, dims=([1, 2], [1, 0])),
                 lambda a, b: a.tensordot(b, dims=([1, 2], [1, 0])))
  helper_test_op([(3,), (2,)], lambda a, b: torch.tensordot(a, b, dims=0), lambda a, b: a.tensordot(b, dims=0))
  helper_test_op([(2, 3), (3, 2)], lambda a, b: torch.kron(a, b), lambda a, b: a.kron(b))
  helper_test_op([(2,), (2, 3)], lambda a, b: torch.kron(a, b), lambda a, b: a.kron(b))
  helper_test_op([(2, 2), (2, 2)], lambda a, b: torch.kron(a, b), lambda a, b: a.kron(b), dtype="int32", low=-3, high=3)

def test_product_errors(device):
  with pytest.raises(ValueError, match=r"mv: expects a 2-D and a 1-D tensor, got 1-D and 1-D"): Tensor.ones(3).mv(Tensor.ones(3))
  with pytest.raises(ValueError, match=r"bmm: batch sizes differ: 2 and 3"): Tensor.ones(2, 3, 4).bmm(Tensor.ones(3, 4, 5))
  with pytest.raises(ValueError, match=r"tensordot: contracted dims differ"): Tensor.ones(2, 3).tensordot(Tensor.ones(4, 2), 1)
  with pytest.raises(ValueError, match=r"addmm: shapes \(4, 4\) and \(3, 5\) are not broadcastable"):
    Tensor.ones(4, 4).addmm(Tensor.ones(3, 2), Tensor.ones(2, 5))
  with pytest.raises(ValueError, match=r"baddbmm: self of shape \(3, 1\) does not broadcast"):
    Tensor.ones(3, 1).baddbmm(Tensor.ones(1, 1, 2), Tensor.ones(1, 2, 1))

# ------------------------------------------------------------------ order statistics and searching
def test_median(device):
  helper_test_op([(5,)], lambda x: x.median())
  helper_test_op([(3, 4)], lambda x: x.median())
  helper_test_op([(3, 5)], lambda x: tuple(x.median(dim=1)))
  helper_test_op([(4, 3)], lambda x: tuple(x.median(dim=0, keepdim=True)))
  helper_test_op(None, lambda x: tuple(x.median(dim=1)), vals=[[[1.0, NAN, 2.0], [3.0, 1.0, 2.0]]], forward_only=True)
  helper_test_op([(3, 4)], lambda x: tuple(x.median(dim=-1)), dtype="int32", low=-9, high=9)

@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "nearest", "midpoint"])
def test_quantile(device, interpolation):
  helper_test_op([(3, 5)], lambda x: x.quantile(torch.tensor([0.1, 0.5, 1.0]), dim=1, interpolation=interpolation),
                 lambda x: x.quantile([0.1, 0.5, 1.0], dim=1, interpolation=interpolation))
  helper_test_op([(3, 5)], lambda x: x.quantile(0.3, dim=0, keepdim=True, interpolation=interpolation),
                 lambda x: x.quantile(0.3, dim=0, keepdim=True, interpolation=interpolation))

def test_quantile_whole_and_nan(device):
  helper_test_op([(2, 3)], lambda x: x.quantile(0.75))
  helper_test_op([(2, 3)], lambda x: x.quantile(torch.tensor([0.25, 0.5]), keepdim=True), lambda x: x.quantile(Tensor([0.25, 0.5]), keepdim=True))
  helper_test_op(None, lambda x: x.quantile(0.5, dim=1), vals=[[[1.0, NAN, 2.0], [3.0, 1.0, 2.0]]], forward_only=True)
  with pytest.raises(ValueError, match=r"quantile: q must be in \[0, 1\]"): Tensor.ones(3).quantile(1.5)
  with pytest.raises(TypeError, match=r"quantile: needs a float tensor"): Tensor([1, 2]).quantile(0.5)

def test_searchsorted_bucketize(device):
  seq, vals = [1, 3, 5, 7, 9], [[3, 6, 9], [3, 6, 10]]
  for right in (False, True):
    helper_test_op(None, lambda s, v: torch.searchsorted(s, v, right=right), lambda s, v: Tensor.searchsorted(s, v, right=right), vals=[seq, vals],
                   dtype="int64")
    helper_test_op(None, lambda v, b: torch.bucketize(v, b, right=right), lambda v, b: v.bucketize(b, right=right), vals=[vals, seq], dtype="int64")
  helper_test_op(None, lambda s, v: torch.searchsorted(s, v, side="right"), lambda s, v: Tensor.searchsorted(s, v, side="right"),
                 vals=[[[1.0, 2.0, 3.0], [0.0, 5.0, 9.0]], [[2.0, 0.5], [5.0, 10.0]]], forward_only=True)
  helper_test_op(None, lambda s, v: torch.searchsorted(s, v, out_int32=True), lambda s, v: Tensor.searchsorted(s, v, out_int32=True), vals=[seq, [4]],
                 dtype="int64")
  with pytest.raises(ValueError, match=r"searchsorted: the leading dims"): Tensor.searchsorted(Tensor.ones(2, 3), Tensor.ones(3, 1))

def test_bincount(device):
  helper_test_op(None, lambda x: x.bincount(), vals=[[1, 1, 3, 0]], dtype="int64")
  helper_test_op(None, lambda x: x.bincount(minlength=6), vals=[[1, 1, 3]], dtype="int32")
  helper_test_op(None, lambda x, w: x.bincount(w), lambda x, w: x.bincount(w), vals=[[1, 1, 3], [0.5, 1.0, 2.0]], dtype=["int64", "float32"],
                 forward_only=True)
  helper_test_op(None, lambda x: x.bincount(), vals=[np.zeros(0, np.int64)], dtype="int64")
  with pytest.raises(ValueError, match=r"bincount: values must be non-negative"): Tensor([-1, 2]).bincount()

def test_diff(device):
  helper_test_op([(3, 5)], lambda x: x.diff())
  helper_test_op([(3, 5)], lambda x: torch.diff(x, n=2, dim=0), lambda x: x.diff(n=2, dim=0))
  helper_test_op([(3, 4), (3, 1), (3, 2)], lambda x, p, a: torch.diff(x, dim=1, prepend=p, append=a),
                 lambda x, p, a: x.diff(dim=1, prepend=p, append=a))
  helper_test_op(None, lambda x: x.diff(), vals=[[True, False, False, True]], dtype="bool")
  helper_test_op(None, lambda x: x.diff(n=3), vals=[[1, 3, 6, 10]], dtype="int32")

def test_flips_rot90(device):
  helper_test_op([(2, 3)], lambda x: x.fliplr())
  helper_test_op([(3,)], lambda x: x.flipud())
  for k in (1, 2, 3, -1, 4):
    helper_test_op([(2, 3)], lambda x: torch.rot90(x, k), lambda x: x.rot90(k))
  helper_test_op([(2, 3, 4)], lambda x: torch.rot90(x, 1, [2, 0]), lambda x: x.rot90(1, (2, 0)))
  with pytest.raises(ValueError, match=r"fliplr: needs at least 2 dims"): Tensor.ones(3).fliplr()
  with pytest.raises(ValueError, match=r"rot90: dims must differ"): Tensor.ones(2, 2).rot90(1, (0, -2))

# ------------------------------------------------------------------ unbind, index_add / index_copy / index_fill
def test_unbind(device):
  helper_test_op([(3, 2)], lambda x: x.unbind())
  helper_test_op([(2, 3, 2)], lambda x: x.unbind(-2))
  with pytest.raises(IndexError, match=r"unbind: axis 2 is out of range"): Tensor.ones(2, 2).unbind(2)

def test_index_add_copy_fill(device):
  i = np.array([0, 2, 0])
  helper_test_op(None, lambda x, i, s: x.index_add(0, i, s, alpha=2), vals=[np.zeros((3, 2)), i, np.arange(6.0).reshape(3, 2)],
                 dtype=["float32", "int64", "float32"])
  helper_test_op(None, lambda x, i, s: x.index_add(1, i, s), vals=[np.ones((2, 3)), i, np.arange(6.0).reshape(2, 3)],
                 dtype=["float32", "int64", "float32"])
  helper_test_op(None, lambda x, i, s: x.index_copy(1, i, s), vals=[np.ones((2, 4)), np.array([3, 1]), np.arange(4.0).reshape(2, 2)],
                 dtype=["float32", "int64", "float32"])
  helper_test_op(None, lambda x, i: x.index_fill(1, i, -1.5), vals=[np.ones((2, 4)), np.array([3, -4])], dtype=["float32", "int64"])
  helper_test_op(None, lambda x, i: x.index_fill(0, i, 7), vals=[np.arange(6).reshape(3, 2), np.array([1])], dtype=["int32", "int64"])

def test_index_add_errors(device):
  x = Tensor.zeros(3, 2)
  with pytest.raises(IndexError, match=r"index_add: index -1 is out of bounds for dim 0 with size 3 \(index_add takes no negative"):
    x.index_add(0, Tensor([-1]), Tensor.ones(1, 2))
  with pytest.raises(IndexError, match=r"index_copy: index 3 is out of bounds"): x.index_copy(0, Tensor([3]), Tensor.ones(1, 2))
  with pytest.raises(ValueError, match=r"index_add: source must have shape \(2, 2\), got \(2, 3\)"): x.index_add(0, Tensor([0, 1]), Tensor.ones(2, 3))
  with pytest.raises(TypeError, match=r"index_fill: index must be a 0-d or 1-D integer Tensor"): x.index_fill(0, Tensor([[0]]), 1.0)
  # a lazy invalid index raises when the result is computed (the documented rule)
  with pytest.raises(IndexError, match=r"index_add: an index is out of bounds for dim 0 with size 3"):
    Tensor.zeros(3).index_add(0, Tensor([5, 1]) + 0, Tensor([1.0, 2.0])).tolist()
  assert Tensor.zeros(3).index_add(0, Tensor([2, 1]) + 0, Tensor([1.0, 2.0])).tolist() == [0.0, 2.0, 1.0]
