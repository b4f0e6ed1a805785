"""Snippets from the PyTorch and tinygrad docs and tests, ported the way a new user would (the import changes; a
torch.fn(x, ...) call becomes x.fn(...), F.fn becomes a Tensor method), compared with PyTorch: values, and the
gradient where the snippet has one. Each entry is (torch version, petagrad version); inputs come from the one helper.
"""
from __future__ import annotations
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from petagrad import Tensor, dtypes
from helpers import helper_test_op, compare

# name: (input shapes or None, torch fxn, petagrad fxn, helper kwargs)
SNIPPETS: dict = {
  # torch.gather docs: t = torch.tensor([[1, 2], [3, 4]]); torch.gather(t, 1, torch.tensor([[0, 0], [1, 0]]))
  "gather_doc": (None, lambda t: torch.gather(t, 1, torch.tensor([[0, 0], [1, 0]])), lambda t: t.gather(1, Tensor([[0, 0], [1, 0]])),
                 dict(vals=[[[1, 2], [3, 4]]], dtype="int64")),
  # torch.Tensor.scatter_ docs: src = torch.arange(1, 11).reshape((2, 5)); torch.zeros(3, 5, dtype=src.dtype).scatter_(0, index, src)
  "scatter_doc": (None, lambda src: torch.zeros(3, 5, dtype=src.dtype).scatter(0, torch.tensor([[0, 1, 2, 0]]), src),
                  lambda src: Tensor.zeros(3, 5, dtype=src.dtype).scatter(0, Tensor([[0, 1, 2, 0]]), src),
                  dict(vals=[np.arange(1, 11).reshape(2, 5)], dtype="int64")),
  # scatter_reduce docs: input.scatter_reduce(0, index, src, reduce="sum"), then "amax" with include_self=False
  "scatter_reduce_doc": (None,
    lambda x: torch.tensor([1., 2., 3., 4.]).scatter_reduce(0, torch.tensor([0, 1, 0, 1, 2, 1]), x, reduce="amax", include_self=False),
                         lambda x: Tensor([1., 2., 3., 4.]).scatter_reduce(0, Tensor([0, 1, 0, 1, 2, 1]), x, reduce="amax", include_self=False),
                         dict(vals=[[1., 2., 3., 4., 5., 6.]])),
  # torch.masked_select docs: mask = x.ge(0.5); torch.masked_select(x, mask)
  "masked_select_doc": ([(3, 4)], lambda x: torch.masked_select(x, x.ge(0.5)), lambda x: x.masked_select(x.ge(0.5)), {}),
  # torch.index_select docs: indices = torch.tensor([0, 2]); torch.index_select(x, 1, indices)
  "index_select_doc": ([(3, 4)], lambda x: torch.index_select(x, 1, torch.tensor([0, 2])), lambda x: x.index_select(1, Tensor([0, 2])), {}),
  # torch.topk docs: torch.topk(x, 3)
  "topk_doc": ([(5,)], lambda x: tuple(torch.topk(x, 3)), lambda x: tuple(x.topk(3)), {}),
  # torch.sort docs: sorted, indices = torch.sort(x, 0, descending=True)
  "sort_doc": ([(3, 4)], lambda x: tuple(torch.sort(x, 0, descending=True)), lambda x: tuple(x.sort(0, descending=True)), {}),
  # torch.argsort / take_along_dim docs: torch.take_along_dim(t, torch.argsort(t, dim=1), dim=1)
  "take_along_dim_doc": ([(2, 3)], lambda t: torch.take_along_dim(t, torch.argsort(t, dim=1), dim=1),
                         lambda t: t.take_along_dim(t.argsort(dim=1), dim=1), {}),
  # torch.cumsum / cummax docs
  "cumsum_doc": ([(10,)], lambda a: torch.cumsum(a, dim=0), lambda a: a.cumsum(0), {}),
  "cummax_doc": ([(10,)], lambda a: tuple(torch.cummax(a, dim=0)), lambda a: tuple(a.cummax(0)), {}),
  "logcumsumexp_doc": ([(10,)], lambda a: torch.logcumsumexp(a, dim=0), lambda a: a.logcumsumexp(0), {}),
  # torch.tril / torch.roll / torch.diag docs
  "tril_doc": ([(4, 6)], lambda b: torch.tril(b, diagonal=-1), lambda b: b.tril(diagonal=-1), {}),
  "roll_doc": ([(4, 2)], lambda x: torch.roll(x, shifts=(2, 1), dims=(0, 1)), lambda x: x.roll(shifts=(2, 1), dims=(0, 1)), {}),
  "diag_doc": ([(3,)], lambda a: torch.diag(a, 1), lambda a: a.diag(1), {}),
  # torch.einsum docs: trace, diagonal, batch matmul, bilinear
  "einsum_trace": ([(4, 4)], lambda a: torch.einsum("ii", a), lambda a: Tensor.einsum("ii", a), {}),
  "einsum_bmm": ([(3, 2, 5), (3, 5, 4)], lambda a, b: torch.einsum("bij,bjk->bik", a, b), lambda a, b: Tensor.einsum("bij,bjk->bik", a, b), {}),
  "einsum_bilinear": ([(2, 5), (3, 5, 4), (2, 4)], lambda l, A, r: torch.einsum("bn,anm,bm->ba", l, A, r),
                      lambda l, A, r: Tensor.einsum("bn,anm,bm->ba", l, A, r), {}),
  # F.one_hot docs: F.one_hot(torch.arange(0, 5) % 3)
  "one_hot_doc": (None, lambda a: F.one_hot(a % 3), lambda a: (a % 3).one_hot(), dict(vals=[np.arange(5)], dtype="int64")),
  # torch.repeat_interleave docs
  "repeat_interleave_doc": (None, lambda y: torch.repeat_interleave(y, torch.tensor([1, 2]), dim=0),
                            lambda y: y.repeat_interleave(Tensor([1, 2]), dim=0),
                            dict(vals=[[[1., 2.], [3., 4.]]])),
  # torch.meshgrid docs
  "meshgrid_doc": ([(3,), (4,)], lambda x, y: torch.meshgrid(x, y, indexing="ij"), lambda x, y: Tensor.meshgrid(x, y, indexing="ij"), {}),
  # torch.unique docs
  "unique_doc": (None, lambda t: torch.unique(t, sorted=True, return_inverse=True), lambda t: t.unique(sorted=True, return_inverse=True),
                 dict(vals=[[1, 3, 2, 3]], dtype="int64")),
  # F.cross_entropy docs: input = torch.randn(3, 5, requires_grad=True); target = torch.randint(5, (3,))
  "cross_entropy_doc": (None, lambda x, t: F.cross_entropy(x, t), lambda x, t: x.cross_entropy(t),
                        dict(vals=[np.linspace(-1, 1, 15).reshape(3, 5), [1, 0, 4]], dtype=["float32", "int64"])),
  "cross_entropy_probs": ([(3, 5), (3, 5)], lambda x, t: F.cross_entropy(x, t.softmax(dim=1), label_smoothing=0.1),
                          lambda x, t: x.cross_entropy(t.softmax(axis=1), label_smoothing=0.1), {}),
  # tinygrad: out.sparse_categorical_crossentropy(Y) (ignore_index -1 there)
  "sparse_categorical_crossentropy": (None, lambda x, y: F.cross_entropy(x, y, ignore_index=-1), lambda x, y: x.sparse_categorical_crossentropy(y),
                                      dict(vals=[np.linspace(-1, 1, 12).reshape(4, 3), [2, -1, 0, 1]], dtype=["float32", "int64"])),
  # F.conv2d docs (small): F.conv2d(inputs, filters, padding=1)
  "conv2d_doc": ([(1, 4, 5, 5), (8, 4, 3, 3)], lambda i, f: F.conv2d(i, f, padding=1), lambda i, f: i.conv2d(f, padding=1), dict(grad_atol=1e-4)),
  # pooling / interpolate as in torchvision-style code
  "max_pool2d": ([(1, 2, 6, 6)], lambda x: F.max_pool2d(x, 2), lambda x: x.max_pool2d(2), {}),
  "avg_pool2d_pad": ([(1, 2, 5, 5)], lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
                     lambda x: x.avg_pool2d(3, stride=2, padding=1, count_include_pad=False), {}),
  "interpolate_bilinear": ([(1, 2, 3, 4)], lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
                           lambda x: x.interpolate(size=(6, 8), mode="bilinear", align_corners=False), {}),
  # F.scaled_dot_product_attention docs
  "sdpa_causal": ([(2, 3, 4, 8), (2, 3, 4, 8), (2, 3, 4, 8)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                  lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True), {}),
  # F.layer_norm / F.group_norm as in a transformer block
  "layer_norm": ([(2, 3, 5), (5,), (5,)], lambda x, w, b: F.layer_norm(x, (5,), w, b), lambda x, w, b: x.layer_norm((5,), w, b), {}),
  "group_norm": ([(2, 4, 3)], lambda x: F.group_norm(x, 2), lambda x: x.group_norm(2), {}),
  # torch docs for math ops
  "lerp_doc": ([(4,), (4,)], lambda s, e: torch.lerp(s, e, 0.5), lambda s, e: s.lerp(e, 0.5), {}),
  "atan2_hypot": ([(4,), (4,)], lambda a, b: torch.atan2(a, b) + torch.hypot(a, b), lambda a, b: a.atan2(b) + a.hypot(b), {}),
  "nan_to_num_doc": (None, lambda x: torch.nan_to_num(x, nan=2.0, posinf=1.0), lambda x: x.nan_to_num(nan=2.0, posinf=1.0),
                     dict(vals=[[float("nan"), float("inf"), -float("inf"), 3.14]], forward_only=True)),
  "var_mean_doc": ([(4, 4)], lambda a: torch.var_mean(a, dim=1, keepdim=True), lambda a: a.var_mean(1, keepdim=True), {}),
  "std_unbiased": ([(3, 4)], lambda a: a.std(dim=1, correction=0), lambda a: a.std(1, correction=0), {}),
  "logsumexp_doc": ([(3, 3)], lambda a: torch.logsumexp(a, dim=1), lambda a: a.logsumexp(1), {}),
  "cdist_doc": ([(3, 2), (2, 2)], lambda a, b: torch.cdist(a, b, p=2.0), lambda a, b: a.cdist(b, p=2.0), {}),
  "cross_doc": ([(4, 3), (4, 3)], lambda a, b: torch.linalg.cross(a, b), lambda a, b: a.cross(b), {}),
  "norm_doc": ([(3, 3)], lambda a: torch.linalg.norm(a, ord=float("inf"), dim=(0, 1)), lambda a: a.norm(ord=float("inf"), dim=(0, 1)), {}),
  # tinygrad README: the matmul + backward example
  "tinygrad_readme": (None, lambda x, y: y.matmul(x).sum(), lambda x, y: y.matmul(x).sum(), dict(vals=[np.eye(3), [[2.0, 0, -2.0]]])),
  # a typical training-code line: masked_fill + softmax attention scores
  "masked_fill_scores": ([(2, 4, 4)], lambda s: s.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf")).softmax(-1),
                         lambda s: s.masked_fill(Tensor.ones(4, 4, dtype=dtypes.bool).triu(1), float("-inf")).softmax(-1), {}),
}

@pytest.mark.parametrize("name", list(SNIPPETS))
def test_ported_snippet(device, name):
  shapes, tf, pf, kw = SNIPPETS[name]
  helper_test_op(shapes, tf, pf, **kw)

def test_ported_setitem_snippets(device):
  # x[x > 0] = 0 and x[:, 1] = ... (in place, on a realized tensor), as in torch docs and tutorials
  a = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
  t, x = torch.tensor(a), Tensor(a).contiguous().realize()
  t[t > 0] = 0; x[x > 0] = 0
  t[:, 1] = torch.tensor([7.0, 8.0, 9.0]); x[:, 1] = Tensor([7.0, 8.0, 9.0])
  t[torch.tensor([0, 2]), -1] = -5.0; x[Tensor([0, 2]), -1] = -5.0
  compare("setitem", x, t, 0, 0)
