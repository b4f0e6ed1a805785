"""Autograd API vs PyTorch: backward() + .grad, gradient(), detach, accumulation, realize in the middle."""
import numpy as np
import pytest
import torch
from petagrad import Tensor
from petagrad.dtype import dtypes
from helpers import compare

def pair(data, dtype="float32"):
  return torch.tensor(data, dtype=getattr(torch, dtype), requires_grad=True), Tensor(data, dtype=dtype, requires_grad=True)

def check_grad(pt: Tensor, tt: torch.Tensor, atol=1e-6, rtol=1e-5):
  assert pt.grad is not None, "petagrad .grad is None"
  compare("grad", pt.grad, tt.grad, atol, rtol)

X = [[1.0, -2.0, 3.0], [0.5, 4.0, -1.5]]
W = [[0.5, -1.0], [2.0, 0.25], [-0.5, 1.5]]

def test_backward_fills_grad(device):
  tx, px = pair(X)
  tw, pw = pair(W)
  ((tx @ tw).relu() * 3).sum().backward()
  ((px @ pw).relu() * 3).sum().backward()
  check_grad(px, tx); check_grad(pw, tw)

def test_backward_returns_self_and_grad_is_lazy_tensor(device):
  _, px = pair(X)
  loss = (px * px).sum()
  assert loss.backward() is loss
  assert isinstance(px.grad, Tensor) and px.grad.shape == px.shape and px.grad.dtype == dtypes.float32
  assert px.grad.device == px.device

def test_backward_with_gradient_argument(device):
  tx, px = pair(X)
  g = [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]]
  (tx * tx).backward(torch.tensor(g))
  (px * px).backward(Tensor(g))
  check_grad(px, tx)

def test_backward_nonscalar_without_gradient_raises(device):
  _, px = pair(X)
  with pytest.raises(RuntimeError):
    (px * 2).backward()

def test_backward_without_requires_grad_raises(device):
  with pytest.raises(RuntimeError, match="can have a gradient"):   # an int graph: nothing can have a gradient
    (Tensor([1, 2]) * 2).sum().backward()
  x = Tensor([1.0, 2.0], requires_grad=False)
  (x * 2).sum().backward()   # (torch raises: nothing requires grad; tinygrad's rule gives the unset intermediates grads)
  assert x.grad is None
  a, b = Tensor.ones(4, requires_grad=True), Tensor.ones(4, requires_grad=True)
  assert not (a < b).requires_grad and not (a * 2).int().requires_grad   # a comparison or int result: none flows (torch)
  with pytest.raises(RuntimeError, match="does not require grad"): (a < b).sum().backward()

def test_grad_only_for_requires_grad(device):
  tx, px = pair(X)
  py = Tensor(W, requires_grad=False)
  ty = torch.tensor(W)
  (tx @ ty).sum().backward()
  (px @ py).sum().backward()
  check_grad(px, tx)
  assert py.grad is None and ty.grad is None

def test_unset_requires_grad_gets_a_grad(device):
  # tinygrad 0.14: every tensor is a parameter; backward fills the grad of every live float tensor of the graph whose
  # requires_grad was never set (intermediates too), next to the requires_grad=True ones
  tx, px = pair(X)
  py, ty = Tensor(W), torch.tensor(W, requires_grad=True)
  (tx @ ty).relu().sum().backward()
  mid = px @ py
  mid.relu().sum().backward()
  check_grad(px, tx)
  check_grad(py, ty)
  assert mid.grad is None   # computed from a requires_grad=True tensor: a non-leaf, as in torch
  x = Tensor([1.0, -2.0])
  h = x * 3
  h.relu().sum().backward()
  assert x.grad.tolist() == [3.0, 0.0] and h.grad.tolist() == [1.0, 0.0]
  assert Tensor([1, 2]).float().sum().backward() is not None   # an int tensor gets no grad, its float cast does

def test_unset_grad_dropped_by_a_write(device):
  # the input's grad is not computed by an optimizer step that writes what it reads: it is dropped
  from petagrad import nn, GlobalCounters
  def step_kernels(x_requires_grad):
    w, x = Tensor(W, requires_grad=True).realize(), Tensor(X, requires_grad=x_requires_grad).realize()
    (x @ w).relu().sum().backward()
    assert (x.grad is not None) == (x_requires_grad is None) and w.grad is not None
    GlobalCounters.reset()
    nn.optim.SGD([w], lr=0.1).step()
    assert x.grad is None
    return GlobalCounters.kernel_count
  assert step_kernels(None) == step_kernels(False)   # the step alone
  w = Tensor(W, requires_grad=True).realize()
  keep = Tensor(X, requires_grad=True).realize()   # marked: kept, and computed before the write
  (keep @ w).relu().sum().backward()
  want = keep.grad.numpy()
  w.assign(w * 0)
  np.testing.assert_allclose(keep.grad.numpy(), want)

def test_nonleaf_grad_is_none(device):
  _, px = pair(X)
  mid = px * 2
  (mid * mid).sum().backward()
  assert mid.grad is None and px.grad is not None
  assert mid.requires_grad    # derived from a tensor that requires grad

def test_unused_leaf_grad_stays_none(device):
  _, px = pair(X)
  _, pw = pair(W)
  (px * 2).sum().backward()
  assert pw.grad is None

def test_grad_accumulates(device):
  tx, px = pair(X)
  for _ in range(2):
    (tx * tx).sum().backward()
    (px * px).sum().backward()
  check_grad(px, tx)
  (tx.exp()).sum().backward()
  (px.exp()).sum().backward()
  check_grad(px, tx, atol=1e-5)

def test_grad_reset(device):
  tx, px = pair(X)
  (px * 5).sum().backward()
  px.grad = None
  (px * px).sum().backward()
  (tx * tx).sum().backward()
  check_grad(px, tx)

def test_detach_stops_grad(device):
  tx, px = pair(X)
  (tx * tx.detach()).sum().backward()
  (px * px.detach()).sum().backward()
  check_grad(px, tx)
  d = px.detach()
  assert not d.requires_grad and d.tolist() == px.tolist()

def test_detach_whole_branch(device):
  tx, px = pair(X)
  ((tx * 3).detach() * tx + tx.exp().detach()).sum().backward()
  ((px * 3).detach() * px + px.exp().detach()).sum().backward()
  check_grad(px, tx)

def test_same_leaf_many_paths(device):
  tx, px = pair(X)
  def f(x):
    return (x * x).sum() + (x.exp() * x).mean() + x.sum(0).amax() if isinstance(x, torch.Tensor) else \
      (x * x).sum() + (x.exp() * x).mean() + x.sum(0).max()
  f(tx).backward(); f(px).backward()
  check_grad(px, tx, atol=1e-5)

def test_backward_after_item(device):
  tx, px = pair(X)
  tl, pl = (tx * tx).sum(), (px * px).sum()
  assert pl.item() == pytest.approx(tl.item())
  tl.backward(); pl.backward()
  check_grad(px, tx)

def test_backward_after_realize_and_numpy(device):
  tx, px = pair(X)
  tl, pl = (tx.exp() * 2).sum(), (px.exp() * 2).sum()
  pl.realize()
  pl.numpy()
  tl.backward(); pl.backward()
  check_grad(px, tx, atol=1e-5)

@pytest.mark.parametrize("shape", [(4, 3, 6), (1, 1, 6), (2, 1, 4)])
def test_realize_loss_after_backward_max_pool(device, shape):
  # the loss realized after backward() and before the grads: its forward kernel (conv fused into the pool's max,
  # unrolled) rounds the maximum differently from the conv the backward computes again; a max gradient that compared
  # the two matched nowhere and gave 0/0 = NaN for every conv weight
  n, c, hw = shape
  rng = np.random.default_rng(0)
  data = [rng.standard_normal(s).astype(np.float32) for s in ((n, 1, hw, hw), (c, 1, 3, 3), (4, c * (hw // 2) ** 2))]
  (tx, px), (tw, pw), (tf, pf) = [pair(d) for d in data]
  tz = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(tx, tw, padding=1), 2).flatten(1) @ tf.T
  pz = px.conv2d(pw, padding=1).max_pool2d(2).flatten(1) @ pf.T
  tl, pl = (tz * tz).sum(), (pz * pz).sum()
  tl.backward(); pl.backward()
  pl.realize()
  check_grad(pw, tw, atol=1e-3, rtol=1e-4)
  check_grad(pf, tf, atol=1e-3, rtol=1e-4)

def test_backward_through_realized_intermediate(device):
  tx, px = pair(X)
  ty, py = tx * 3, px * 3
  assert py.tolist() == ty.tolist()       # realizes py
  (ty * ty).sum().backward()
  (py * py).sum().backward()
  check_grad(px, tx)

def test_leaf_realized_before_use(device):
  tx, px = pair(X)
  px.realize()
  px.numpy()
  (tx * 2).sum().backward(); (px * 2).sum().backward()
  check_grad(px, tx)

def test_backward_twice_from_same_graph_accumulates(device):
  tx, px = pair(X)
  tl, pl = (tx * tx).sum(), (px * px).sum()
  tl.backward(retain_graph=True); tl.backward()
  pl.backward(); pl.backward()
  check_grad(px, tx)

def test_gradient_api(device):
  tx, px = pair(X)
  tw, pw = pair(W)
  tl, pl = ((tx @ tw).tanh()).sum(), ((px @ pw).tanh()).sum()
  tg = torch.autograd.grad(tl, [tx, tw])
  pg = pl.gradient(px, pw)
  assert isinstance(pg, list) and len(pg) == 2
  for p, t in zip(pg, tg): compare("gradient", p, t, 1e-6, 1e-5)
  assert px.grad is None and pw.grad is None     # gradient() does not touch .grad

def test_gradient_wrt_intermediate(device):
  tx, px = pair(X)
  tm, pm = tx * 2, px * 2
  tl, pl = (tm * tm).sum(), (pm * pm).sum()
  compare("gradient", pl.gradient(pm)[0], torch.autograd.grad(tl, [tm])[0], 1e-6, 1e-6)

def test_gradient_with_upstream(device):
  tx, px = pair(X)
  g = [[1.0, 0.0, -1.0], [2.0, 0.5, 3.0]]
  tg = torch.autograd.grad(tx.sin(), [tx], grad_outputs=torch.tensor(g))[0]
  pg = px.sin().gradient(px, gradient=Tensor(g))[0]
  compare("gradient", pg, tg, 1e-6, 1e-5)

def test_gradient_unconnected_target_is_zero(device):
  _, px = pair(X)
  _, pw = pair(W)
  gx, gw = (px * 2).sum().gradient(px, pw)
  assert gw.shape == pw.shape and np.all(gw.numpy() == 0)
  assert np.all(gx.numpy() == 2)

def test_gradient_without_requires_grad(device):
  # like tinygrad: gradient() works on any tensor in the graph
  x = Tensor([1.0, 2.0, 3.0])
  (g,) = (x * x).sum().gradient(x)
  assert g.tolist() == [2.0, 4.0, 6.0]

def test_second_order(device):
  tx, px = pair([1.0, 2.0, -0.5])
  tg = torch.autograd.grad((tx ** 3).sum(), [tx], create_graph=True)[0]
  tgg = torch.autograd.grad(tg.sum(), [tx])[0]
  pg = (px ** 3).sum().gradient(px)[0]
  pgg = pg.sum().gradient(px)[0]
  compare("second order", pgg, tgg, 1e-6, 1e-6)

def test_grad_dtype_follows_leaf(device):
  for d in ("float16", "bfloat16", "float64"):
    tx, px = pair([1.0, 2.0, 3.0], d)
    (tx * tx).sum().backward()
    (px * px).sum().backward()
    assert px.grad.dtype.name == d
    check_grad(px, tx, atol=1e-2, rtol=1e-2)

def test_grad_through_cast_to_int_is_zero_or_absent(device):
  # torch: casting to int cuts the graph (the int result has no grad_fn)
  _, px = pair([1.5, 2.5])
  y = (px.int().float() * px).sum()
  y.backward()
  assert px.grad.tolist() == [1.0, 2.0]

def test_requires_grad_flag(device):
  x = Tensor([1.0], requires_grad=True)
  assert x.requires_grad is True
  y = Tensor([1.0])
  assert not y.requires_grad
  assert (x * y).requires_grad
  assert not (y * 2).requires_grad
  assert y.requires_grad_() is y and y.requires_grad

def test_inplace_on_tensor_that_requires_grad(device):
  tx, px = pair(X)
  ty, py = tx * 1, px * 1
  ty += tx; ty *= 2
  py += px; py *= 2
  ty.sum().backward(); py.sum().backward()
  check_grad(px, tx)

def test_zero_size_grad(device):
  tx = torch.zeros(0, 3, requires_grad=True)
  px = Tensor.zeros(0, 3, requires_grad=True)
  ((tx * 2).sum() + 1).backward()
  ((px * 2).sum() + 1).backward()
  check_grad(px, tx)

def test_leaves_made_alike_are_separate(device):
  # Tensor.zeros(3) twice is one graph node (hash-consing); as leaves they are two tensors with their own gradients
  a, b = Tensor.zeros(3, requires_grad=True), Tensor.zeros(3, requires_grad=True)
  (a * 2 + b * 5).sum().backward()
  assert a.grad.tolist() == [2.0] * 3 and b.grad.tolist() == [5.0] * 3
  c, d = Tensor(3.5, requires_grad=True), Tensor(3.5, requires_grad=True)
  (c + d * 3).backward()
  assert (c.grad.item(), d.grad.item(), c.item()) == (1.0, 3.0, 3.5)
  z = Tensor.zeros(3)
  z += a * 4   # in place, from a tensor that needs grad: not a leaf of its own, the gradient reaches a
  a.grad = None
  z.sum().backward()
  assert a.grad.tolist() == [4.0] * 3

def test_unset_graphs_survive_a_realize(device):
  # tinygrad's test_accumulate_gradients: a realize of one gradient hands its kernels' results to the other live
  # graphs; an unset tensor's graph is kept for its gradient (a second backward reaches x again)
  rng = np.random.default_rng(0)
  x, w = Tensor(rng.standard_normal((1, 3)).astype(np.float32)), Tensor(rng.standard_normal((3, 3)).astype(np.float32))
  out = (x @ w).relu().log_softmax().sum()
  out.backward()
  g1 = x.grad.numpy()
  out.backward()
  out.backward()
  np.testing.assert_allclose(x.grad.numpy(), 3 * g1, rtol=1e-6)
