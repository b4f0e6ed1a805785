"""Call forms of the reductions, scans, sorting and movement ops that code written for PyTorch 2.13 or tinygrad 0.14
uses: dim= and axis= (keepdim= and keepdims=), max/min with a dim (torch's (values, indices)), stack/cat forms,
reshape(None), pad_to/shrink_to, rearrange, the sliding-window unfold, var/std at the edges, DEFAULT_INT indices.
Compared with torch through helper_test_op; tinygrad-only forms against values worked out by hand."""
import math
import numpy as np
import pytest
import torch
from petagrad import Tensor, Context, dtypes
from helpers import helper_test_op

S = [(3, 4)]

# ------------------------------------------------------------------ 1. dim= and axis= everywhere
KW = {
  # name: (torch fxn, petagrad fxn with the other library's spelling)
  "prod_dim": (lambda x: x.prod(dim=1), lambda x: x.prod(axis=1)),
  "prod_keepdims": (lambda x: x.prod(1, keepdim=True), lambda x: x.prod(1, keepdims=True)),
  "amax_dim": (lambda x: x.amax(dim=1), None),
  "amax_axis": (lambda x: x.amax(dim=(0, 1)), lambda x: x.amax(axis=(0, 1))),
  "amin_dim": (lambda x: x.amin(dim=0, keepdim=True), None),
  "mean_dim": (lambda x: x.mean(dim=-1), None),
  "mean_axis": (lambda x: x.mean(dim=-1, keepdim=True), lambda x: x.mean(axis=-1, keepdims=True)),
  "var_dim": (lambda x: x.var(dim=0), None),
  "var_axis": (lambda x: x.var(dim=0, correction=0), lambda x: x.var(axis=0, correction=0)),
  "std_dim": (lambda x: x.std(dim=1, keepdim=True), None),
  "var_mean_dim": (lambda x: torch.var_mean(x, dim=1), lambda x: x.var_mean(dim=1)),
  "std_mean_axis": (lambda x: torch.std_mean(x, dim=1, keepdim=True), lambda x: x.std_mean(axis=1, keepdim=True)),
  "logsumexp_dim": (lambda x: x.logsumexp(dim=1), None),
  "logsumexp_axis": (lambda x: x.logsumexp(dim=1), lambda x: x.logsumexp(axis=1)),
  "softmax_dim": (lambda x: x.softmax(dim=0), None),
  "log_softmax_dim": (lambda x: x.log_softmax(dim=0), None),
  "nansum_dim": (lambda x: x.nansum(dim=1), lambda x: x.nansum(axis=1)),
  "nanmean_dim": (lambda x: x.nanmean(dim=1), None),
  "cumsum_axis": (lambda x: x.cumsum(dim=1), lambda x: x.cumsum(axis=1)),
  "cumprod_axis": (lambda x: x.cumprod(dim=1), lambda x: x.cumprod(axis=1)),
  "cummax_axis": (lambda x: x.cummax(dim=1), lambda x: x.cummax(axis=1)),
  "cummin_dim": (lambda x: x.cummin(dim=0), None),
  "logcumsumexp_axis": (lambda x: x.logcumsumexp(dim=1), lambda x: x.logcumsumexp(axis=1)),
  "flip_dims": (lambda x: x.flip(dims=(0,)), None),
  "roll_dims": (lambda x: x.roll(1, dims=1), None),
  "diff_dim": (lambda x: x.diff(dim=0), lambda x: x.diff(axis=0)),
}

@pytest.mark.parametrize("name", list(KW))
def test_axis_dim_keywords(device, name):
  tf, pf = KW[name]
  helper_test_op(S, tf, pf)

KW_NOGRAD = {
  "argmax_axis": (lambda x: x.argmax(dim=1), lambda x: x.argmax(axis=1)),
  "argmin_dim_keepdims": (lambda x: x.argmin(dim=1, keepdim=True), lambda x: x.argmin(dim=1, keepdims=True)),
  "any_dim": (lambda x: (x > 0).any(dim=1), None),
  "all_axis": (lambda x: (x > 0).all(dim=0), lambda x: (x > 0).all(axis=0)),
  "count_nonzero_axis": (lambda x: (x > 0).count_nonzero(dim=1), lambda x: (x > 0).count_nonzero(axis=1)),
  "sort_axis": (lambda x: x.sort(dim=0), lambda x: x.sort(axis=0)),
  "argsort_dim": (lambda x: x.argsort(dim=0, descending=True), None),
  "topk_axis": (lambda x: x.topk(2, dim=1), lambda x: x.topk(2, axis=1)),
  "topk_sorted_": (lambda x: x.topk(2, dim=0, sorted=True), lambda x: x.topk(2, dim=0, sorted_=True)),
  "median_axis": (lambda x: x.median(dim=1), lambda x: x.median(axis=1)),
  "quantile_axis": (lambda x: x.quantile(0.3, dim=1, keepdim=True), lambda x: x.quantile(0.3, axis=1, keepdims=True)),
}

@pytest.mark.parametrize("name", list(KW_NOGRAD))
def test_axis_dim_keywords_forward(device, name):
  tf, pf = KW_NOGRAD[name]
  helper_test_op(S, tf, pf, forward_only=True)

def test_both_spellings_raise():
  with pytest.raises(TypeError, match="prod"): Tensor.ones(2, 2).prod(dim=0, axis=0)
  with pytest.raises(TypeError, match="max"): Tensor.ones(2, 2).max(dim=0, axis=0)

# ------------------------------------------------------------------ 2. max/min with a dim: torch's (values, indices)
def test_max_dim_values_indices(device):
  helper_test_op(S, lambda x: x.max(1))
  helper_test_op(S, lambda x: x.max(dim=0, keepdim=True))
  helper_test_op(S, lambda x: x.min(1, True))
  helper_test_op(S, lambda x: x.min(dim=-1))

def test_max_dim_ties_gradient_to_first(device):
  # the value's gradient goes to the returned index only (torch), amax shares it between the ties
  helper_test_op(None, lambda x: x.max(1), vals=[[[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]])
  helper_test_op(None, lambda x: x.min(dim=1), vals=[[[1.0, 1.0, 3.0], [2.0, 2.0, 2.0]]])
  helper_test_op(None, lambda x: x.amax(1), vals=[[[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]])

def test_max_dim_int_bool_nan(device):
  helper_test_op(S, lambda x: x.max(1), dtype="int32", low=-5, high=5)
  helper_test_op(S, lambda x: x.min(0), dtype="int64", low=-5, high=5)
  helper_test_op(S, lambda x: x.max(1), dtype="bool")
  helper_test_op(None, lambda x: x.max(1), vals=[[[1.0, float("nan"), 3.0], [3.0, 1.0, 2.0]]], forward_only=True)

def test_max_forms():
  x = Tensor([[1, 5, 2], [7, 0, 7]])
  r = x.max(dim=1)
  assert type(r).__name__ == "MaxResult" and isinstance(r, tuple) and r.values.tolist() == [5, 7] and r.indices.tolist() == [1, 0]
  v, i = x.min(1)
  assert v.tolist() == [1, 0] and i.tolist() == [0, 1]
  assert x.max(axis=1).tolist() == [5, 7] and x.min(axis=0, keepdim=True).tolist() == [[1, 0, 2]]   # tinygrad's keyword: a Tensor
  assert x.max((0, 1)).item() == 7 and x.max(None).item() == 7 and x.max().item() == 7 and x.min().item() == 0
  assert x.max(Tensor([[3, 3, 3]])).tolist() == [[3, 5, 3], [7, 3, 7]] and x.min(Tensor(2)).tolist() == [[1, 2, 2], [2, 0, 2]]
  s = Tensor(4.0).max(0)
  assert s.values.shape == () and s.indices.item() == 0
  assert "values=" in repr(r)

# ------------------------------------------------------------------ 4. var/std at the edges, torch's argument forms
VAR_EDGE = {
  "var_corr_eq_n": ([(2, 3)], lambda x: x.var(1, correction=3)),
  "var_corr_gt_n": ([(2, 3)], lambda x: x.var(1, correction=5)),
  "var_size1": ([(1, 4)], lambda x: x.var(0)),
  "var_size0": ([(0, 4)], lambda x: x.var(0)),
  "var_all_size1": ([(1,)], lambda x: x.var()),
  "std_corr_eq_n": ([(2, 3)], lambda x: x.std(1, correction=3)),
  "std_corr_gt_n": ([(2, 3)], lambda x: x.std(1, correction=5)),
  "std_size1": ([(1, 4)], lambda x: x.std(0)),
  "var_float_corr": ([(2, 5)], lambda x: x.var(1, correction=0.5)),
  "var_mean_corr_gt_n": ([(2, 3)], lambda x: torch.var_mean(x, 1, correction=4)),
  "std_mean_size1": ([(1, 3)], lambda x: torch.std_mean(x, 0)),
}

@pytest.mark.parametrize("name", list(VAR_EDGE))
def test_var_std_edges(device, name):
  shapes, f = VAR_EDGE[name]
  fn = (lambda x: x.var_mean(1, correction=4)) if name == "var_mean_corr_gt_n" else (lambda x: x.std_mean(0)) if name == "std_mean_size1" else f
  helper_test_op(shapes, f, fn)

def test_var_std_constant_rows(device):
  # a std of 0: torch's gradient is 0 (not NaN); var with correction == n of equal values: NaN
  helper_test_op(None, lambda x: x.std(1), vals=[[[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]]])
  helper_test_op(None, lambda x: x.var(1, correction=3), vals=[[[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]]])

def test_var_unbiased_forms(device):
  helper_test_op(S, lambda x: x.var(unbiased=False))
  helper_test_op(S, lambda x: x.std(1, unbiased=False))
  helper_test_op(S, lambda x: x.var(False), lambda x: x.var(False))   # torch's var(unbiased) overload
  helper_test_op(S, lambda x: torch.var_mean(x, dim=0, unbiased=False), lambda x: x.var_mean(dim=0, unbiased=False))
  helper_test_op(S, lambda x: torch.std_mean(x, dim=(0, 1), correction=0), lambda x: x.std_mean(dim=(0, 1), correction=0))
  helper_test_op(S, lambda x: x.std(dim=1, correction=None), lambda x: x.std(dim=1, correction=None))
  with pytest.raises(TypeError): Tensor.ones(3).var(unbiased=1)

# ------------------------------------------------------------------ 3. movement call forms
def test_stack_forms(device):
  helper_test_op([(3, 4), (3, 4)], lambda a, b: torch.stack([a, b], 1), lambda a, b: Tensor.stack(a, b, dim=1))
  helper_test_op([(3, 4), (3, 4), (3, 4)], lambda a, b, c: torch.stack([a, b, c]), lambda a, b, c: a.stack(b, c))
  helper_test_op([(3, 4), (3, 4)], lambda a, b: torch.stack([a, b], -1), lambda a, b: Tensor.stack([a, b], -1))
  helper_test_op([(3, 4), (3, 4)], lambda a, b: torch.stack((a, b), dim=2), lambda a, b: Tensor.stack((a, b), axis=2))
  helper_test_op([(3, 4), (3, 4)], lambda a, b: torch.stack(tensors=[a, b], dim=1), lambda a, b: Tensor.stack(tensors=[a, b], dim=1))
  helper_test_op([(3, 4)], lambda a: torch.stack([a]), lambda a: a.stack())

def test_cat_forms(device):
  helper_test_op([(3, 4), (2, 4)], lambda a, b: torch.cat([a, b]), lambda a, b: Tensor.cat([a, b]))
  helper_test_op([(3, 4), (3, 2)], lambda a, b: torch.cat([a, b], 1), lambda a, b: Tensor.cat([a, b], 1))
  helper_test_op([(3, 4), (3, 2)], lambda a, b: torch.cat((a, b), dim=-1), lambda a, b: a.cat(b, dim=-1))
  helper_test_op([(3, 4), (3, 2)], lambda a, b: torch.cat((a, b), axis=1), lambda a, b: Tensor.cat((a, b), axis=1))
  helper_test_op([(3, 4), (3, 2)], lambda a, b: torch.cat(tensors=(a, b), dim=1), lambda a, b: Tensor.cat(tensors=(a, b), dim=1))
  helper_test_op([(3, 4), (1, 4), (2, 4)], lambda a, b, c: torch.cat([a, b, c]), lambda a, b, c: Tensor.cat(a, b, c))

def test_stack_cat_errors():
  a = Tensor.ones(2, 2)
  with pytest.raises(TypeError, match="dim="): a.cat(a, 1)
  with pytest.raises(TypeError, match="dim="): a.stack(a, 1)
  with pytest.raises(TypeError): Tensor.cat([a, a], 1, dim=1)
  with pytest.raises(TypeError): Tensor.stack([a, a], 0, 1)
  with pytest.raises(RuntimeError): Tensor.stack(a, Tensor.ones(3))   # shapes differ: also a RuntimeError, like torch
  with pytest.raises(ValueError): Tensor.cat([])

def test_reshape_none(device):
  helper_test_op([(2, 6)], lambda x: x.reshape(2, 3, 2), lambda x: x.reshape(None, 3, 2))
  helper_test_op([(2, 3, 4)], lambda x: x.reshape(2, 3, 2, 2), lambda x: x.reshape((None, None, 2, -1)))
  assert Tensor.ones(2, 3).view(None, 3).shape == (2, 3)
  with pytest.raises(ValueError): Tensor.ones(2, 3).reshape(6, None)   # None at a dim the input has not... dim 1 is 3: 6 * 3 != 6
  with pytest.raises(ValueError, match="no input dim"): Tensor.ones(6).reshape(6, None)

def test_pad_to_shrink_to(device):
  helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (0, 2, 0, 1)), lambda x: x.pad_to(4, 6))
  helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (0, 2)), lambda x: x.pad_to((None, 6)))
  helper_test_op([(3, 4)], lambda x: torch.nn.functional.pad(x, (0, 1, 0, 1), value=2.5), lambda x: x.pad_to(4, 5, value=2.5))
  helper_test_op([(3, 4)], lambda x: x[:2, :3], lambda x: x.shrink_to(2, 3))
  helper_test_op([(3, 4)], lambda x: x[:, :1], lambda x: x.shrink_to((None, 1)))
  t = Tensor.ones(2, 2)
  assert t.pad_to(2, 2) is t and t.shrink_to(None, None) is t
  with pytest.raises(ValueError): t.pad_to(1, 2)
  with pytest.raises(ValueError): t.shrink_to(3, 2)
  with pytest.raises(ValueError): t.pad_to(3)

REARRANGE = {
  # formula, sizes, input shape, numpy reference
  "flatten": ("b c h w -> b (c h w)", {}, (2, 3, 2, 2), lambda a: a.reshape(2, 12)),
  "transpose": ("a b c -> b (a c)", {}, (3, 2, 2), lambda a: a.transpose(1, 0, 2).reshape(2, 6)),
  "split_sizes": ("b (h w) c -> b h w c", {"h": 2}, (2, 6, 3), lambda a: a.reshape(2, 2, 3, 3)),
  "split_permute": ("(b n) c -> n b c", {"n": 2}, (6, 3), lambda a: a.reshape(3, 2, 3).transpose(1, 0, 2)),
  "ellipsis": ("b ... c -> c b ...", {}, (2, 3, 4, 5), lambda a: a.transpose(3, 0, 1, 2)),
  "ellipsis_group": ("b ... -> b (...)", {}, (2, 3, 4), lambda a: a.reshape(2, 12)),
  "unit_dims": ("a 1 b -> b () a 1", {}, (2, 1, 3), lambda a: a.reshape(2, 3).T.reshape(3, 1, 2, 1)),
  "pixel_shuffle": ("b (c h2 w2) h w -> b c (h h2) (w w2)", {"h2": 2, "w2": 2}, (1, 8, 2, 3),
                    lambda a: a.reshape(1, 2, 2, 2, 2, 3).transpose(0, 1, 4, 2, 5, 3).reshape(1, 2, 4, 6)),
}

@pytest.mark.parametrize("name", list(REARRANGE))
def test_rearrange(device, name):
  formula, sizes, shape, ref = REARRANGE[name]
  a = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
  out = Tensor(a).rearrange(formula, **sizes)
  np.testing.assert_array_equal(out.numpy(), ref(a))

def test_rearrange_grad(device):
  helper_test_op([(2, 6, 3)], lambda x: x.reshape(2, 2, 3, 3).permute(0, 3, 1, 2) * 2, lambda x: x.rearrange("b (h w) c -> b c h w", w=3) * 2)

@pytest.mark.parametrize("formula,sizes", [("a b c", {}), ("a b -> a", {}), ("a b -> a b c", {}), ("a a -> a a", {}), ("(a b) c -> a b c", {}),
                                           ("a b -> a b", {"z": 2}), ("(a b) c -> a b c", {"a": 5}), ("a b c d -> a b c d", {}),
                                           ("((a b)) -> a b", {}), ("a _b -> a _b", {}), ("a b -> b a", {"a": 3})])
def test_rearrange_errors(formula, sizes):
  with pytest.raises(ValueError, match="rearrange"): Tensor.ones(4, 2).rearrange(formula, **sizes)

UNFOLD = {
  "1d": ([(5,)], (0, 2, 1)),
  "1d_step": ([(8,)], (0, 2, 2)),
  "2d_last": ([(3, 7)], (1, 3, 2)),
  "2d_first": ([(6, 3)], (0, 4, 1)),
  "3d_mid_neg": ([(2, 7, 3)], (-2, 3, 3)),
  "full": ([(4, 3)], (0, 4, 5)),
  "size0": ([(3, 4)], (1, 0, 2)),
  "0d": ([()], (0, 1, 1)),
}

@pytest.mark.parametrize("name", list(UNFOLD))
def test_unfold_sliding(device, name):
  shapes, (d, size, step) = UNFOLD[name]
  helper_test_op(shapes, lambda x: x.unfold(d, size, step))

def test_unfold_errors_and_im2col():
  x = Tensor.ones(5)
  with pytest.raises(ValueError, match="unfold"): x.unfold(0, 6, 1)
  with pytest.raises(ValueError, match="unfold"): x.unfold(0, 2, 0)
  with pytest.raises(IndexError, match="unfold"): x.unfold(1, 2, 1)
  assert Tensor.ones(1, 2, 4, 4).im2col(2).shape == (1, 8, 9)   # torch.nn.functional.unfold lives on as im2col
  np.testing.assert_array_equal(Tensor.arange(8).unfold(0, 2, 2).numpy(), np.arange(8).reshape(4, 2))   # tinygrad's doc example

# ------------------------------------------------------------------ 5. indices and counts in dtypes.default_int
def _index_outputs(T):
  x = T.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 5.0]]) if T is torch else Tensor([[3.0, 1.0, 2.0], [0.0, 5.0, 5.0]])
  i = T.tensor([1, 2, 2, 0]) if T is torch else Tensor([1, 2, 2, 0])
  b = T.tensor([1.0, 2.5]) if T is torch else Tensor([1.0, 2.5])
  return {
    "argmax": x.argmax(1), "argmin": x.argmin(), "max_dim": x.max(1)[1], "min_dim": x.min(dim=0)[1],
    "sort": x.sort(1)[1], "argsort": x.argsort(0), "topk": x.topk(2)[1], "cummax": x.cummax(1)[1], "cummin": x.cummin(0)[1],
    "median": x.median(1)[1], "count_nonzero": x.count_nonzero(1), "bincount": i.bincount(), "unique_inverse": i.unique(return_inverse=True)[1],
    "unique_counts": i.unique(return_counts=True)[1], "unique_dim_counts": x.unique(dim=0, return_counts=True)[1],
    "searchsorted": T.searchsorted(b, x), "bucketize": x.bucketize(b) if T is Tensor else torch.bucketize(x, b),
  }

@pytest.mark.parametrize("default_int", ["int64", "int32"])
def test_default_int_indices(default_int):
  want = _index_outputs(torch)
  with Context(DEFAULT_INT=default_int):
    got = _index_outputs(Tensor)
    for k, t in want.items():
      assert got[k].dtype == dtypes.default_int == getattr(dtypes, default_int), (k, got[k].dtype)
      np.testing.assert_array_equal(got[k].numpy(), t.numpy(), err_msg=k)
    # sums, scans and products of ints stay int64, as torch (tinygrad would use the int's own dtype)
    v = Tensor([1, 2, 3], dtype=dtypes.int32)
    assert v.sum().dtype == v.cumsum(0).dtype == v.prod().dtype == (v > 1).sum().dtype == dtypes.int64
    assert Tensor.searchsorted(Tensor([1, 3]), Tensor([2]), out_int32=True).dtype == dtypes.int32

def test_return_types():
  x = Tensor([[3.0, 1.0, 2.0]])
  for r, name in ((x.sort(), "sort"), (x.topk(1), "topk"), (x.cummax(1), "cummax"), (x.cummin(1), "cummin"), (x.median(1), "median"),
                  (x.max(1), "max"), (x.min(1), "min")):
    assert isinstance(r, tuple) and len(r) == 2 and r.values is r[0] and r.indices is r[1] and repr(r).startswith(name + "("), name
