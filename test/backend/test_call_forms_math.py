"""The math call forms code ported from PyTorch 2.13 or tinygrad 0.14 uses, against torch (forward and gradients):
pow at its edges, sigmoid & co at extreme inputs, normalize of a zero vector, dropout in attention only in training,
dot/clip/einsum/softmax/loss keyword forms, and user errors that are also RuntimeErrors."""
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from petagrad import Tensor
from helpers import helper_test_op

INF, NAN = math.inf, math.nan

def _np(x) -> np.ndarray: return x.detach().float().numpy() if isinstance(x, torch.Tensor) else x.float().numpy()

def _same(name: str, pg, tv, rtol: float = 1e-5, atol: float = 1e-6) -> None:
  """Values equal to torch's, inf and NaN included (same sign of inf, NaN where torch has NaN)."""
  a, b = _np(pg).astype(np.float64), _np(tv).astype(np.float64)
  assert a.shape == b.shape, f"{name}: shape {a.shape} != torch {b.shape}"
  np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)

# ------------------------------------------------------------------ 1. pow: values and gradients at the edges
XS = [0.0, -0.0, 2.0, -2.0, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0, INF, -INF, NAN]
YS = [0.0, 1.0, 2.0, 3.0, -1.0, -2.0, -3.0, 0.5, -0.5, 2.5, INF, -INF, NAN]

def _grid(dtype=torch.float32):
  xs = [x for x in XS for _ in YS]
  ys = [y for _ in XS for y in YS]
  return np.array(xs, dtype=np.float64), np.array(ys, dtype=np.float64)

def _pow_pair(xv, yv, f, dtype=torch.float32):
  tx, ty = torch.tensor(xv, dtype=dtype, requires_grad=True), torch.tensor(yv, dtype=dtype, requires_grad=True)
  px, py = Tensor(tx.detach().numpy(), requires_grad=True), Tensor(ty.detach().numpy(), requires_grad=True)
  to, po = f(tx, ty), f(px, py)
  to.sum().backward(); po.sum().backward()
  return (to, tx.grad, ty.grad), (po, px.grad, py.grad)

def _labels(xv, yv): return [f"({x}, {y})" for x, y in zip(xv, yv)]

def _check_grid(t, p, xv, yv):
  for name, tv, pv in zip(("forward", "d/dx", "d/dy"), t, p):
    if tv is None:
      assert pv is None or not np.any(_np(pv)), f"{name}: torch has no gradient, petagrad {pv.tolist()}"
      continue
    a, b = _np(pv).astype(np.float64), _np(tv).astype(np.float64)
    bad = [lab for lab, u, v in zip(_labels(xv, yv), a, b) if not (np.isnan(u) and np.isnan(v) or u == v or abs(u - v) <= 1e-5 * abs(v) + 1e-6)]
    assert not bad, f"{name} differs from torch at (x, y) = {bad}: petagrad {[a[i] for i, lab in enumerate(_labels(xv, yv)) if lab in bad]}, " \
                    f"torch {[b[i] for i, lab in enumerate(_labels(xv, yv)) if lab in bad]}"

def test_pow_tensor_tensor_grid(device):
  xv, yv = _grid()
  t, p = _pow_pair(xv, yv, lambda x, y: x ** y)
  _check_grid(t, p, xv, yv)

@pytest.mark.parametrize("y", [0, 0.0, 1, 2, 3, 4, -1, -2, -3, 0.5, -0.5, 2.5, 1.5, 17, -17, 20.0])
def test_pow_scalar_exponent_grid(device, y):
  xv = np.array(XS, dtype=np.float64)
  tx, px = torch.tensor(xv, dtype=torch.float32, requires_grad=True), Tensor(xv.astype(np.float32), requires_grad=True)
  to, po = tx ** y, px ** y
  to.sum().backward(); po.sum().backward()
  ys = [y] * len(xv)
  _check_grid((to, tx.grad), (po, px.grad), xv, ys)

@pytest.mark.parametrize("base", [2.0, 0.5, 0.0, -2.0, 1.0, 3])
def test_pow_scalar_base_grid(device, base):
  yv = np.array(YS, dtype=np.float64)
  ty, py = torch.tensor(yv, dtype=torch.float32, requires_grad=True), Tensor(yv.astype(np.float32), requires_grad=True)
  to, po = base ** ty, base ** py
  to.sum().backward(); po.sum().backward()
  _check_grid((to, ty.grad), (po, py.grad), [base] * len(yv), yv)

def test_pow_zero_exponent_grad_everywhere(device):
  # x ** 0.0: d/dx = 0 everywhere, x = 0 included
  helper_test_op(None, lambda x: x ** 0.0, vals=[[0.0, -1.0, 2.0, 0.5]])
  helper_test_op(None, lambda x, y: x ** y, vals=[[0.0, -1.0, 2.0, 0.5], [0.0, 0.0, 0.0, 0.0]])

def test_pow_rpow_grad_at_zero(device):
  # 2.0 ** x at x = 0: d/dx = 2 ** 0 * log 2
  helper_test_op(None, lambda x: 2.0 ** x, vals=[[0.0, 1.0, -1.0]])
  x = Tensor([0.0], requires_grad=True)
  (2.0 ** x).sum().backward()
  assert abs(x.grad.item() - math.log(2)) < 1e-6

def test_pow_zero_base(device):
  # 0 ** y: d/dy = 0 for y >= 0, -inf for y < 0; d/dx at y = -1 is -inf
  _check_grid(*_pow_pair([0.0] * 5, [1.0, 2.0, 0.5, -1.0, -2.5], lambda x, y: x ** y), [0.0] * 5, [1.0, 2.0, 0.5, -1.0, -2.5])
  _check_grid(*_pow_pair([0.0, 2.0], [-1.0, -1.0], lambda x, y: x.pow(y)), [0.0, 2.0], [-1.0, -1.0])

def test_pow_negative_base_int_exponent(device):
  (to, tdx, tdy), (po, pdx, pdy) = _pow_pair([-2.0, -3.0], [3.0, 2.0], lambda x, y: x ** y)
  assert po.tolist() == [-8.0, 9.0] and pdx.tolist() == [12.0, -6.0]
  assert all(math.isnan(v) for v in pdy.tolist()) and all(math.isnan(v) for v in tdy.tolist())   # log of a negative
  helper_test_op(None, lambda x: x ** 2, vals=[[-3.0, -0.5, 0.0, 2.0]])
  helper_test_op(None, lambda x: x ** 3, vals=[[-3.0, -0.5, 0.0, 2.0]])
  helper_test_op(None, lambda x: x.pow(-2), vals=[[-3.0, -0.5, 2.0]])

def test_pow_integer_exponent_tensor(device):
  # a float base with an integer exponent tensor: the exponent promotes, the base gets torch's gradient
  helper_test_op(None, lambda x, y: x ** y, vals=[[-2.0, 0.0, 1.5, 3.0], [3, 2, 0, -1]], dtype=["float32", "int64"])
  helper_test_op(None, lambda x, y: x ** y, vals=[[2, -3, 0, 4], [3, 2, 0, 1]], dtype=["int64", "int64"])

@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_pow_grid_dtypes(device, dtype):
  xv, yv = _grid()
  tdt = getattr(torch, dtype)
  tx, ty = torch.tensor(xv, dtype=tdt, requires_grad=True), torch.tensor(yv, dtype=tdt, requires_grad=True)
  px, py = Tensor(xv.astype(dtype), requires_grad=True), Tensor(yv.astype(dtype), requires_grad=True)
  to, po = tx ** ty, px ** py
  to.sum().backward(); po.sum().backward()
  rtol = 2e-3 if dtype == "float16" else 1e-12
  for name, tv, pv in (("forward", to, po), ("d/dx", tx.grad, px.grad), ("d/dy", ty.grad, py.grad)):
    _same(name, pv, tv, rtol=rtol, atol=0)

def test_pow_random_values(device):
  helper_test_op([(3, 4), (3, 4)], lambda x, y: x ** y, low=0.1, high=3)
  helper_test_op([(3, 4)], lambda x: x ** 2.7, low=0.1, high=3)
  helper_test_op([(3, 4)], lambda x: x ** -1.3, low=0.1, high=3)
  helper_test_op([(3, 4)], lambda x: 1.7 ** x, low=-3, high=3)

def test_pow_double_backward(device):
  tx = torch.tensor([0.5, 2.0, -1.5], requires_grad=True)
  px = Tensor([0.5, 2.0, -1.5], requires_grad=True)
  (tg,) = torch.autograd.grad((tx ** 3).sum(), tx, create_graph=True)
  tg.sum().backward()
  (pg,) = (px ** 3).sum().gradient(px)
  (pgg,) = pg.sum().gradient(px)
  _same("d2/dx2", pgg, tx.grad)

# ------------------------------------------------------------------ 3. dropout in attention only in training
def _bert_like(x: Tensor, p: float) -> Tensor:
  """A BERT-style self-attention block: sdpa(dropout_p) + dropout + residual + layer norm."""
  b, s, h = x.shape
  q = x.reshape(b, s, 2, h // 2).transpose(1, 2)
  ctx = Tensor.scaled_dot_product_attention(q, q, q, None, p).transpose(1, 2).reshape(b, s, h)
  return (ctx.dropout(p) + x).layer_norm(h)

def test_sdpa_dropout_eval_is_identity(device):
  from petagrad import Context
  x = Tensor(np.random.default_rng(0).standard_normal((2, 5, 8)).astype(np.float32))
  assert Tensor.training is False
  ref = _bert_like(x, 0.0).numpy()
  np.testing.assert_array_equal(_bert_like(x, 0.1).numpy(), ref)   # eval: deterministic, the same as p = 0
  np.testing.assert_array_equal(_bert_like(x, 0.1).numpy(), ref)
  q = x.reshape(2, 5, 2, 4)
  np.testing.assert_array_equal(q.scaled_dot_product_attention(q, q, dropout_p=1.0).numpy(), q.scaled_dot_product_attention(q, q).numpy())
  # sdpa and dropout read the same switch: Tensor.training, nn.train(), Context(TRAINING=1)
  from petagrad import nn
  for mode in ("flag", "nn.train", "context"):
    old = Tensor.training
    try:
      if mode == "flag": Tensor.training = True
      ctxm = nn.train() if mode == "nn.train" else Context(TRAINING=1) if mode == "context" else Context()
      with ctxm:
        assert Tensor.training is True
        Tensor.manual_seed(3)
        out = q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy()
        assert not np.allclose(out, q.scaled_dot_product_attention(q, q).numpy()), mode
        assert (q.scaled_dot_product_attention(q, q, dropout_p=1.0).numpy() == 0).all(), mode
        assert (x.dropout(0.5).numpy() == 0).any(), mode
    finally:
      Tensor.training = old
  assert Tensor.training is False

def test_sdpa_dropout_matches_torch_module_in_eval(device):
  # torch's nn.MultiheadAttention(dropout=0.5).eval() does not drop: neither does sdpa(dropout_p=0.5) in eval
  torch.manual_seed(0)
  mha = torch.nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True).eval()
  xs = np.random.default_rng(1).standard_normal((2, 5, 8)).astype(np.float32)
  with torch.no_grad(): tout, _ = mha(torch.tensor(xs), torch.tensor(xs), torch.tensor(xs), need_weights=False)
  w, bias = Tensor(mha.in_proj_weight.detach().numpy()), Tensor(mha.in_proj_bias.detach().numpy())
  x = Tensor(xs)
  q, k, v = [x.linear(wi, bi).reshape(2, 5, 2, 4).transpose(1, 2) for wi, bi in zip(w.chunk(3), bias.chunk(3))]
  o = q.scaled_dot_product_attention(k, v, dropout_p=0.5).transpose(1, 2).reshape(2, 5, 8)
  o = o.linear(Tensor(mha.out_proj.weight.detach().numpy()), Tensor(mha.out_proj.bias.detach().numpy()))
  _same("mha eval", o, tout, rtol=1e-4, atol=1e-5)

def test_sdpa_dropout_errors(device):
  q = Tensor.ones(1, 2, 4)
  for bad in (1.5, -0.1):
    with pytest.raises(ValueError, match="dropout_p must be in"): q.scaled_dot_product_attention(q, q, dropout_p=bad)
  with pytest.raises(TypeError, match="dropout_p must be a float"): q.scaled_dot_product_attention(q, q, dropout_p="0.1")

# ------------------------------------------------------------------ 5. user errors: ValueError (and the other Python types) and RuntimeError
ERRORS = {
  # name: (petagrad call, torch call or None, the Python type)
  "matmul inner dims": (lambda T: T.ones(2, 3) @ T.ones(4, 5), ValueError),
  "matmul batch dims": (lambda T: T.ones(2, 2, 3) @ T.ones(3, 3, 4), ValueError),
  "matmul 1-d": (lambda T: T.ones(3) @ T.ones(4), ValueError),
  "dot 2-d 1-d": (lambda T: T.ones(2, 3).dot(T.ones(4)) if T is Tensor else T.ones(2, 3).matmul(T.ones(4)), ValueError),
  "add not broadcastable": (lambda T: T.ones(2, 3) + T.ones(4, 5), ValueError),
  "mul not broadcastable": (lambda T: T.ones(2, 3) * T.ones(2), ValueError),
  "maximum not broadcastable": (lambda T: T.ones(2, 3).maximum(T.ones(4)), ValueError),
  "pow not broadcastable": (lambda T: T.ones(2, 3) ** T.ones(4), ValueError),
  "where not broadcastable": (lambda T: T.where(T.ones(2, 3) > 0, T.ones(4), T.ones(4)), ValueError),
  "bmm batch": (lambda T: T.ones(2, 3, 4).bmm(T.ones(3, 4, 5)), ValueError),
  "linear in features": (lambda T: T.ones(2, 3).linear(T.ones(4, 5)) if T is Tensor else F.linear(T.ones(2, 3), T.ones(4, 5)), ValueError),
  "einsum sizes": (lambda T: T.einsum("ij,jk->ik", T.ones(2, 3), T.ones(4, 5)), ValueError),
  "mse_loss shapes": (lambda T: T.ones(2, 3).mse_loss(T.ones(4)) if T is Tensor else F.mse_loss(T.ones(2, 3), T.ones(4)), ValueError),
  "layer_norm shape": (lambda T: T.ones(2, 3).layer_norm(4) if T is Tensor else F.layer_norm(T.ones(2, 3), (4,)), ValueError),
  "cross_entropy target": (lambda T: T.ones(2, 3).cross_entropy(T.tensor([0, 1, 2]) if T is torch else Tensor([0, 1, 2]))
                           if T is Tensor else F.cross_entropy(T.ones(2, 3), T.tensor([0, 1, 2])), ValueError),
  "softmax dim": (lambda T: T.ones(2).softmax(3), IndexError),
}

@pytest.mark.parametrize("name", list(ERRORS))
def test_user_errors_catch_both_ways(name):
  f, pytype = ERRORS[name]
  with pytest.raises((RuntimeError, IndexError, ValueError)): f(torch)   # torch raises for the same call (RuntimeError mostly)
  with pytest.raises(RuntimeError): f(Tensor)   # a torch user's `except RuntimeError`
  with pytest.raises(pytype): f(Tensor)         # a tinygrad / Python user's `except ValueError` (IndexError for a dim)
  try: f(Tensor)
  except RuntimeError as e:
    assert isinstance(e, pytype) and "operands" in str(e), f"{type(e).__mro__}: {e}"

# ------------------------------------------------------------------ 2. extreme inputs: no NaN forward or backward
EXTREME = [-1000.0, -100.0, -88.0, -20.0, -1.0, 0.0, 1.0, 20.0, 88.0, 100.0, 1000.0]
EXTREME_FNS = {
  "sigmoid": (lambda x: x.sigmoid(), None),
  "logsigmoid": (lambda x: F.logsigmoid(x), lambda x: x.logsigmoid()),
  "softplus": (lambda x: F.softplus(x), lambda x: x.softplus()),
  "softplus_beta": (lambda x: F.softplus(x, beta=2.0, threshold=10.0), lambda x: x.softplus(beta=2.0, threshold=10.0)),
  "tanh": (lambda x: x.tanh(), None),
  "silu": (lambda x: F.silu(x), lambda x: x.silu()),
  "log_softmax": (lambda x: x.log_softmax(-1), None),
  "softmax": (lambda x: x.softmax(-1), None),
  "bce_logits": (lambda x: F.binary_cross_entropy_with_logits(x, (x > 0).type_as(x)),
                 lambda x: x.binary_cross_entropy_with_logits((x > 0).type_as(x))),
}

@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("name", list(EXTREME_FNS))
def test_extreme_inputs_no_nan(device, name, dtype):
  tf, pf = EXTREME_FNS[name]
  vals = [v for v in EXTREME if dtype not in ("float16",) or abs(v) < 65504]
  pout, _ = helper_test_op(None, tf, pf, vals=[vals], dtype=dtype, atol=1e-6 if dtype in ("float32", "float64") else None)
  assert not np.isnan(pout.float().numpy()).any()

def test_sigmoid_extreme_grad_finite(device):
  for dt in ("float32", "float16", "bfloat16"):
    x = Tensor([-1000.0, -88.0, 88.0, 1000.0], dtype=dt, requires_grad=True)
    for f in (Tensor.sigmoid, Tensor.logsigmoid, Tensor.softplus, Tensor.tanh, Tensor.silu):
      x.grad = None
      y = f(x)
      y.sum().backward()
      assert np.isfinite(y.float().numpy()).all() and np.isfinite(x.grad.float().numpy()).all(), (f.__name__, dt, y.tolist(), x.grad.tolist())

def test_normalize_zero_vector(device):
  # torch clamps the norm to eps: the output is 0 and the gradient finite (upstream / eps)
  vals = [[[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]]]
  helper_test_op(None, lambda x: F.normalize(x, dim=1), lambda x: x.normalize(dim=1), vals=vals, grad_rtol=1e-5)
  helper_test_op(None, lambda x: F.normalize(x, dim=-1), lambda x: x.normalize(dim=-1), vals=vals, grad_rtol=1e-5)
  helper_test_op(None, lambda x: F.normalize(x, p=1.0, dim=1), lambda x: x.normalize(p=1.0, dim=1), vals=vals, grad_rtol=1e-5)
  helper_test_op(None, lambda x: F.normalize(x, dim=0, eps=1e-6), lambda x: x.normalize(dim=0, eps=1e-6), vals=[[[0.0, 1.0], [0.0, 2.0]]])
  for p in (0.5, 3.0, math.inf, -1.0):   # every p torch takes, the max norm too; zero elements and a zero vector
    helper_test_op(None, lambda x: F.normalize(x, p=p, dim=1), lambda x: x.normalize(p=p, dim=1), vals=vals, atol=1e-5, grad_atol=1e-5)
  helper_test_op(None, lambda x: F.normalize(x, dim=(0, 1)), lambda x: x.normalize(dim=(0, 1)), vals=vals, grad_rtol=1e-5)
  x = Tensor([[0.0, 0.0, 0.0]], requires_grad=True)
  x.normalize(dim=1).sum().backward()
  assert np.isfinite(x.grad.numpy()).all() and abs(x.grad.numpy()[0, 0] - 1e12) < 1e6

# ------------------------------------------------------------------ 4. call forms (torch and tinygrad spellings), forward and gradients
def test_dot_forms(device):
  helper_test_op([(4,), (4,)], lambda a, b: a.dot(b))                                  # 1-d . 1-d: a scalar
  helper_test_op([(3, 4), (4,)], lambda a, b: a.matmul(b), lambda a, b: a.dot(b))      # 2-d . 1-d: (3,)
  helper_test_op([(3,), (3, 4)], lambda a, b: a.matmul(b), lambda a, b: a.dot(b))      # 1-d . 2-d: (4,)
  helper_test_op([(3, 4), (4, 5)], lambda a, b: a.matmul(b), lambda a, b: a.dot(b))
  helper_test_op([(2, 3, 4), (4,)], lambda a, b: a.matmul(b), lambda a, b: a.dot(b))
  helper_test_op([(4,), (2, 4, 5)], lambda a, b: a.matmul(b), lambda a, b: a.dot(b))
  assert Tensor.ones(4).dot(Tensor.ones(4)).shape == ()
  assert Tensor.ones(3, 4).dot(Tensor.ones(4, 2), dtype="float64").dtype.name == "float64"

@pytest.mark.parametrize("form", ["min=", "max=", "min=max=", "pos", "clip(0, 1)", "clamp_min", "clamp_max", "tensor min=", "tensor max=",
                                  "tensor both", "clamp_min tensor", "clamp_max tensor", "tinygrad min_="])
def test_clip_forms(device, form):
  cases = {
    "min=": ([(3, 4)], lambda x: x.clamp(min=0.2), lambda x: x.clip(min=0.2)),
    "max=": ([(3, 4)], lambda x: x.clip(max=-0.3), lambda x: x.clamp(max=-0.3)),
    "min=max=": ([(3, 4)], lambda x: x.clamp(min=-0.5, max=0.5), None),
    "pos": ([(3, 4)], lambda x: x.clamp(-0.5, 0.5), lambda x: x.clip(-0.5, 0.5)),
    "clip(0, 1)": ([(3, 4)], lambda x: x.clip(0, 1), None),
    "clamp_min": ([(3, 4)], lambda x: x.clamp_min(0.1), None),
    "clamp_max": ([(3, 4)], lambda x: x.clamp_max(0.1), None),
    "tensor min=": ([(3, 4), (4,)], lambda x, m: x.clamp(min=m), None),
    "tensor max=": ([(3, 4), (3, 1)], lambda x, m: x.clip(max=m), None),
    "tensor both": ([(3, 4), (4,), (4,)], lambda x, lo, hi: x.clamp(lo - 1, hi + 1), None),
    "clamp_min tensor": ([(3, 4), (4,)], lambda x, m: x.clamp_min(m), None),
    "clamp_max tensor": ([(3, 4), (4,)], lambda x, m: x.clamp_max(m), None),
    "tinygrad min_=": ([(3, 4)], lambda x: x.clamp(-0.5, 0.5), lambda x: x.clip(min_=-0.5, max_=0.5)),
  }
  shapes, tf, pf = cases[form]
  helper_test_op(shapes, tf, pf)

def test_clip_needs_a_bound():
  with pytest.raises(ValueError, match="at least one"): Tensor.ones(2).clip()
  with pytest.raises(RuntimeError): Tensor.ones(2).clamp()

@pytest.mark.parametrize("formula,shapes", [
  ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
  ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),     # the ellipsis dims broadcast (2, 1) with (5,)
  ("...ij,...jk", [(2, 3, 4), (4, 5)]),                  # implicit output: ... first, then the letters used once
  ("b...,b...->b", [(3, 4, 2), (3, 4, 2)]),
  ("...i,...i->...", [(3, 4), (4,)]),
  ("i...->...", [(3, 2, 2)]),
  ("...ii->...i", [(2, 3, 3)]),
  ("ij,jk", [(3, 4), (4, 5)]),
  ("ij->ji", [(3, 4)]),
  ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
])
def test_einsum_forms(device, formula, shapes):
  helper_test_op(shapes, lambda *xs: torch.einsum(formula, *xs), lambda *xs: Tensor.einsum(formula, *xs), atol=1e-5)
  helper_test_op(shapes, lambda *xs: torch.einsum(formula, list(xs)), lambda *xs: Tensor.einsum(formula, list(xs)), atol=1e-5)   # tinygrad: a list

def test_einsum_list_tinygrad(device):
  helper_test_op([(3, 4), (4, 5)], lambda a, b: torch.einsum("ij,jk->ik", [a, b]), lambda a, b: Tensor.einsum("ij,jk->ik", [a, b]))
  helper_test_op([(3, 4), (4, 5)], lambda a, b: torch.einsum("ij,jk->ik", (a, b)), lambda a, b: Tensor.einsum("ij,jk->ik", (a, b)))

def test_einsum_sublist_form(device):
  # torch.einsum(op, [dims], op, [dims], ..., [out dims]): ints name the dims, Ellipsis is '...'
  for shapes, subs in ((((2, 3, 4), (4, 5)), ([0, 1, 2], [2, 3], [0, 1, 3])), (((2, 3, 4), (4, 5)), ([..., 2], [2, 3])),
                       (((3, 3),), ([0, 0], [0])), (((3, 4), (4,)), ([7, 51], [51], [7]))):
    def call(einsum, *xs): return einsum(*[v for x, s in zip(xs, subs) for v in (x, s)], *subs[len(xs):])
    helper_test_op(list(shapes), lambda *xs: call(torch.einsum, *xs), lambda *xs: call(Tensor.einsum, *xs), atol=1e-5)
  with pytest.raises(ValueError, match="sublist entries"): Tensor.einsum(Tensor.ones(2), [52])
  with pytest.raises(TypeError, match="sublist"): Tensor.einsum(Tensor.ones(2), "a")

@pytest.mark.parametrize("fn", ["softmax", "log_softmax", "softmin"])
def test_softmax_dim_forms(device, fn):
  tf = {"softmax": F.softmax, "log_softmax": F.log_softmax, "softmin": F.softmin}[fn]
  helper_test_op([(3, 4, 5)], lambda x: tf(x, dim=1), lambda x: getattr(x, fn)(dim=1))
  helper_test_op([(3, 4, 5)], lambda x: tf(x, dim=0), lambda x: getattr(x, fn)(axis=0))   # tinygrad's axis=
  helper_test_op([(3, 4, 5)], lambda x: tf(x, -1), lambda x: getattr(x, fn)(-1))
  helper_test_op([(3, 4)], lambda x: tf(x, dim=-1, dtype=torch.float64), lambda x: getattr(x, fn)(dim=-1, dtype="float64"))
  if fn != "softmin": helper_test_op([(3, 4)], lambda x: getattr(x, fn)(dim=0))   # the torch.Tensor method

LOSS_CASES = {
  # name: (torch function, petagrad method, keywords)
  "ce": (F.cross_entropy, "cross_entropy", {}),
  "ce label_smoothing": (F.cross_entropy, "cross_entropy", {"label_smoothing": 0.1}),
  "ce ignore_index": (F.cross_entropy, "cross_entropy", {"ignore_index": 2}),
  "ce reduction=sum": (F.cross_entropy, "cross_entropy", {"reduction": "sum"}),
  "ce reduction=none": (F.cross_entropy, "cross_entropy", {"reduction": "none"}),
  "ce all": (F.cross_entropy, "cross_entropy", {"ignore_index": 0, "label_smoothing": 0.2, "reduction": "sum"}),
  "nll": (lambda x, t, **kw: F.nll_loss(x.log_softmax(-1), t, **kw), None, {"ignore_index": 1, "reduction": "mean"}),
  "sparse_cce (tinygrad)": (F.cross_entropy, "sparse_categorical_crossentropy", {"label_smoothing": 0.1}),
}

@pytest.mark.parametrize("name", list(LOSS_CASES))
def test_loss_keywords(device, name):
  rng = np.random.default_rng(1)
  x = rng.standard_normal((5, 4))
  t = np.array([0, 2, 3, 2, 1])
  tf, meth, kw = LOSS_CASES[name]
  pf = (lambda a, b: getattr(a, meth)(b, **kw)) if meth else (lambda a, b: a.log_softmax(-1).nll_loss(b, **kw))
  helper_test_op(None, lambda a, b: tf(a, b, **kw), pf, vals=[x, t], dtype=["float32", "int64"], atol=1e-5)

def test_ce_probability_target_and_weight(device):
  rng = np.random.default_rng(2)
  x, p = rng.standard_normal((5, 4)), rng.dirichlet(np.ones(4), 5)
  helper_test_op(None, lambda a, b: F.cross_entropy(a, b, label_smoothing=0.1), lambda a, b: a.cross_entropy(b, label_smoothing=0.1),
                 vals=[x, p], atol=1e-5)
  w = np.array([0.5, 1.0, 2.0, 1.5], dtype=np.float32)
  helper_test_op(None, lambda a, t: F.cross_entropy(a, t, weight=torch.tensor(w), ignore_index=3),
                 lambda a, t: a.cross_entropy(t, weight=Tensor(w), ignore_index=3), vals=[x, np.array([0, 2, 3, 2, 1])], dtype=["float32", "int64"],
                 atol=1e-5)

def test_norm_keywords(device):
  w, b = [(4,), (4,)]
  helper_test_op([(3, 4), w, b], lambda x, g, bb: F.layer_norm(x, normalized_shape=(4,), weight=g, bias=bb, eps=1e-3),
                 lambda x, g, bb: x.layer_norm(normalized_shape=(4,), weight=g, bias=bb, eps=1e-3), atol=1e-5)
  helper_test_op([(2, 3, 4)], lambda x: F.layer_norm(x, [3, 4]), lambda x: x.layer_norm([3, 4]), atol=1e-5)
  helper_test_op([(3, 4), w], lambda x, g: F.rms_norm(x, normalized_shape=[4], weight=g, eps=1e-3),
                 lambda x, g: x.rms_norm(normalized_shape=[4], weight=g, eps=1e-3), atol=1e-5)
  helper_test_op([(2, 3, 4)], lambda x: F.rms_norm(x, (3, 4)), lambda x: x.rms_norm((3, 4)), atol=1e-5)
  helper_test_op([(3, 4)], lambda x: F.layer_norm(x, (4,)), lambda x: x.layernorm(axis=-1, eps=1e-5), atol=1e-5)   # tinygrad's layernorm
  helper_test_op([(3, 4)], lambda x: F.normalize(x, dim=0), lambda x: x.normalize(dim=0))
  helper_test_op([(3, 4)], lambda x: F.normalize(x, p=3.0, dim=-1), lambda x: x.normalize(p=3.0, axis=-1))
  helper_test_op([(3, 4)], lambda x: F.glu(x, dim=1), lambda x: x.glu(dim=1))

def test_tensor_norm_p_keyword(device):
  helper_test_op([(3, 4)], lambda x: x.norm(p=1, dim=1, keepdim=True))
  helper_test_op([(3, 4)], lambda x: x.norm(p=1, dim=(0, 1)))   # torch.Tensor.norm: a vector norm over both dims
  helper_test_op([(3, 4)], lambda x: x.norm(p="fro", dim=(0, 1)))
  helper_test_op([(3, 4)], lambda x: x.norm(p=3))
  helper_test_op([(3, 4)], lambda x: torch.linalg.norm(x, ord=1, dim=(0, 1)), lambda x: x.norm(1, (0, 1)))   # ord: linalg's matrix norm
  helper_test_op([(3, 4)], lambda x: x.norm(dim=1), lambda x: x.norm(axis=1))
  helper_test_op(None, lambda x: x.norm(dim=1), vals=[[[0.0, 0.0], [3.0, 4.0]]])   # gradient 0 at a zero vector, as torch
  with pytest.raises(TypeError, match="both ord= and p="): Tensor.ones(3).norm(2, p=2)

@pytest.mark.parametrize("p", [0.5, 0.3, 1.5, 3.0, -1.0, -2.5])
def test_norm_p_at_zero_elements(device, p):
  # |x|**p for p < 1 has an infinite slope at 0; torch's gradient there is 0 (zero vectors and zero elements alike)
  helper_test_op(None, lambda x: x.norm(p=p, dim=1), vals=[[[0.0, 0.0, 0.0], [0.0, 2.0, -1.0], [1.0, 2.0, 3.0]]], atol=1e-5, grad_atol=1e-5)

def test_linear_torch_layout(device):
  # petagrad follows F.linear: weight (out, in) like nn.Linear.weight (tinygrad's x.linear takes (in, out)), by design
  helper_test_op([(3, 4), (5, 4), (5,)], lambda x, w, b: F.linear(x, w, b), lambda x, w, b: x.linear(w, b))
  helper_test_op([(3, 4), (5, 4)], lambda x, w: F.linear(x, w), lambda x, w: x.linear(w))

def test_sequential(device):
  helper_test_op([(3, 4)], lambda x: torch.relu(x * 2).tanh(), lambda x: x.sequential([lambda t: t * 2, Tensor.relu, Tensor.tanh]))
  from petagrad import nn
  lin = nn.Linear(4, 3)
  x = Tensor.ones(2, 4)
  np.testing.assert_allclose(x.sequential([lin, Tensor.relu]).numpy(), lin(x).relu().numpy())
  assert x.sequential([]) is x
  with pytest.raises(TypeError, match="sequential"): x.sequential(Tensor.relu)
