"""Porting suite, PyTorch side: code written the way a PyTorch user writes it, with `torch.`/`F.` calls mapped to
petagrad only where the name exists on Tensor (`torch.cat` -> `Tensor.cat`, `F.normalize(x)` -> `x.normalize()`),
and method calls left exactly as written. Where one lambda serves both (`T` is `torch` or `Tensor`), it is the
same source text run on torch tensors and on petagrad Tensors, compared through test/helpers.py's
helper_test_op (shape, dtype, forward values, gradients under a random upstream gradient).

Runs on the default device only (Device.DEFAULT, CPU here); the PYTHON device is covered op by op in test/backend.

A case that fails today because a form is missing or differs carries a strict xfail naming the form; when the
form lands the case XPASSes (strict: a failure), and the mark must go. See INVENTORY.md.
"""
from __future__ import annotations
import warnings
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from petagrad import Tensor
from helpers import helper_test_op
from porting_helpers import xf, pg_from, assert_close

warnings.filterwarnings("ignore", message=".*degrees of freedom.*")

def op(shapes, fn, **kw):
  """fn(T, *xs): the same source on torch (T=torch) and petagrad (T=Tensor)."""
  return lambda: helper_test_op(shapes, lambda *xs: fn(torch, *xs), lambda *xs: fn(Tensor, *xs), **kw)
def opv(vals, fn, **kw): return op(None, fn, vals=vals, **kw)

IDX = [[0, 1, 2, 0], [2, 2, 1, 1]]
def _idx(T): return T.tensor(IDX) if T is torch else Tensor(IDX)

def t_max_dim():
  x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
  tv, ti = torch.tensor(x).max(dim=1)
  pv, pi = Tensor(x).max(dim=1)
  assert_close("values", pv, tv); assert_close("indices", pi, ti)
def t_max_dim_named():
  x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
  r = Tensor(x).max(dim=1)
  assert_close("values", r.values, torch.tensor(x).max(dim=1).values); assert_close("indices", r.indices, torch.tensor(x).max(dim=1).indices)
def t_min_dim():
  x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
  tv, ti = torch.tensor(x).min(1)
  pv, pi = Tensor(x).min(1)
  assert_close("values", pv, tv); assert_close("indices", pi, ti)

def _inplace(name):
  def run():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    y = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    tx, px = torch.tensor(x), Tensor(x).contiguous()
    def go(T, t, other):
      if name == "add_": r = t.add_(other)
      elif name == "mul_": r = t.mul_(2)
      elif name == "zero_": r = t.zero_()
      elif name == "sub_": r = t.sub_(other)
      elif name == "clamp_": r = t.clamp_(min=0)
      elif name == "fill_": r = t.fill_(3.0)
      return r
    tr, pr = go(torch, tx, torch.tensor(y)), go(Tensor, px, Tensor(y))
    assert pr is px, f"{name} must return self"
    assert_close(f"{name} result (the tensor itself)", px, tx)
  return run

def t_cpu():
  x = np.arange(6, dtype=np.float32)
  assert Tensor(x).cpu().numpy().tolist() == x.tolist()
def t_to_cpu(): assert Tensor([1.0]).to("cpu").tolist() == [1.0]
def t_detach_numpy(): assert Tensor([1.0], requires_grad=True).detach().numpy().tolist() == [1.0]

def _no_grad_check(ctx):
  w = Tensor([1.0, 2.0], requires_grad=True)
  with ctx():
    y = w * 2
  assert not y.requires_grad, "a result computed under no_grad must not require grad"
def t_no_grad_tensor(): _no_grad_check(Tensor.no_grad)
def t_no_grad_module():
  import petagrad
  _no_grad_check(petagrad.no_grad)
def t_no_grad_flag():   # tinygrad's spelling: the class flag
  w = Tensor([1.0, 2.0], requires_grad=True)
  Tensor.no_grad = True
  try: y = w * 2
  finally: Tensor.no_grad = False
  assert not y.requires_grad
def t_inference_mode():
  import petagrad
  _no_grad_check(petagrad.inference_mode)

# pow gradients: x at 0, y at 0, negative base with an integer exponent (torch's values, NaN where torch has NaN)
def t_pow_x0_tensor_exp(): opv([[0.0, 0.0, 0.0], [2.0, 3.0, 0.0]], lambda T, x, y: x.pow(y))()
def t_pow_y0_tensor_exp(): opv([[2.0, 0.5, 3.0], [0.0, 0.0, 0.0]], lambda T, x, y: x.pow(y))()
def t_pow_neg_base_int_tensor_exp_xgrad():
  opv([[-2.0, -3.0, -0.5], [3.0, 2.0, 2.0]], lambda T, x, y: x.pow(y.detach()))()
def t_pow_neg_base_int_tensor_exp_ygrad():   # torch: dy = x**y * log(x) = NaN for x < 0
  opv([[-2.0, -3.0, -0.5], [3.0, 2.0, 2.0]], lambda T, x, y: x.pow(y))()
def t_pow_neg_base_int_scalar(): opv([[-2.0, 0.0, 3.0, -0.5]], lambda T, x: x.pow(3))()
def t_pow_scalar_zero(): opv([[-2.0, 0.0, 3.0]], lambda T, x: x ** 0)()
def t_pow_sqrt_at_zero(): opv([[0.0, 4.0]], lambda T, x: x ** 0.5)()
def t_pow_neg_exp_at_zero(): opv([[0.0, 2.0], [-1.0, -1.0]], lambda T, x, y: x.pow(y))()
def t_rpow_neg(): opv([[2.0, 0.0, -1.0]], lambda T, x: 2.0 ** x)()

def t_var_size1_axis(): op([(1, 3)], lambda T, x: x.var(0))()
def t_var_size1_axis_correction0(): op([(1, 3)], lambda T, x: x.var(0, correction=0))()
def t_var_correction_gt_n(): op([(3, 3)], lambda T, x: x.var(0, correction=5))()
def t_var_correction_eq_n(): op([(3, 3)], lambda T, x: x.var(0, correction=3))()
def t_std_size1_axis(): op([(1, 3)], lambda T, x: x.std(0), forward_only=True)()

def t_conv1x1_bias_grad(): op([(2, 3, 4, 4), (5, 3, 1, 1), (5,)], lambda T, x, w, b: F.conv2d(x, w, b) if T is torch else x.conv2d(w, b))()
def t_conv1x1_stride2_bias_grad(): op([(2, 3, 5, 5), (5, 3, 1, 1), (5,)], lambda T, x, w, b: F.conv2d(x, w, b, stride=2) if T is torch else x.conv2d(w, b, stride=2))()

def _pad(mode, shape, pads):
  return op([shape], lambda T, x: F.pad(x, pads, mode=mode) if T is torch else x.pad(pads, mode=mode))

def _errors(kind):
  def run():
    a, b = (Tensor.ones(2, 3), Tensor.ones(4, 5))
    ta, tb = torch.ones(2, 3), torch.ones(4, 5)
    f = (lambda x, y: x @ y) if kind == "matmul" else (lambda x, y: x + y)
    with pytest.raises(RuntimeError): f(ta, tb)
    try:
      f(a, b)
    except RuntimeError as e:   # what the torch user's code catches
      assert isinstance(e, ValueError), f"{type(e).__mro__} is not also a ValueError"
    else:
      raise AssertionError("no error raised")
  return run

def _errors_value(kind):
  def run():
    f = (lambda x, y: x @ y) if kind == "matmul" else (lambda x, y: x + y)
    with pytest.raises(ValueError): f(Tensor.ones(2, 3), Tensor.ones(4, 5))
  return run

def t_lazy_read(kind):
  from petagrad import nn
  if kind in ("iadd", "iadd_realized"):
    x = Tensor([1.0, 2.0]).contiguous().realize()
    v = x * 1
    if kind == "iadd_realized": v.realize()
    x += 1
    assert v.tolist() == [1.0, 2.0], f"v = {v.tolist()}"
  elif kind == "assign":
    w = Tensor([1.0, 2.0]).contiguous().realize()
    s = (w * w).sum()
    w.assign(w * 0).realize()
    assert s.item() == 5.0, f"s = {s.item()}"
  else:
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = nn.optim.SGD([w], lr=0.5)
    loss = (w * w).sum()
    loss.backward(); opt.step()
    assert loss.item() == 5.0 and w.tolist() == [0.0, 0.0], f"loss = {loss.item()}, w = {w.tolist()}"

def t_grad_after_loss_realize(realize_loss: bool):
  """loss.backward(); loss.realize() (or loss.item()) then read the conv weight gradient (conv2d -> max_pool2d ->
  flatten -> matmul): it was NaN, the max gradient comparing values rounded by two different kernels."""
  rng = np.random.default_rng(0)
  xs, ws, fs = rng.standard_normal((4, 1, 6, 6)).astype(np.float32), rng.standard_normal((3, 1, 3, 3)).astype(np.float32), rng.standard_normal((4, 27)).astype(np.float32)
  w, fw = Tensor(ws, requires_grad=True), Tensor(fs, requires_grad=True)
  z = Tensor(xs).conv2d(w, padding=1).max_pool2d(2).flatten(1) @ fw.T
  loss = (z * z).sum()
  loss.backward()
  if realize_loss: loss.realize()
  tw, tf = torch.tensor(ws, requires_grad=True), torch.tensor(fs, requires_grad=True)
  tz = F.max_pool2d(F.conv2d(torch.tensor(xs), tw, padding=1), 2).flatten(1) @ tf.T
  (tz * tz).sum().backward()
  assert_close("conv weight grad", w.grad, tw.grad, 1e-3, 1e-4)
  assert_close("linear weight grad", fw.grad, tf.grad, 1e-3, 1e-4)
  assert_close("loss", loss, (tz * tz).sum(), 1e-3, 1e-4)

CASES = [
  # ---- dim= / keepdim= keyword forms
  ("x.sum(dim=1, keepdim=True)", op([(3, 4)], lambda T, x: x.sum(dim=1, keepdim=True)), None),
  ("x.sum(1, keepdim=True)", op([(3, 4)], lambda T, x: x.sum(1, keepdim=True)), None),
  ("x.sum((0, 1))", op([(3, 4)], lambda T, x: x.sum((0, 1))), None),
  ("x.mean(dim=-1)", op([(3, 4)], lambda T, x: x.mean(dim=-1)), None),
  ("x.mean(-1)", op([(3, 4)], lambda T, x: x.mean(-1)), None),
  ("x.softmax(dim=-1)", op([(3, 4)], lambda T, x: x.softmax(dim=-1)), None),
  ("x.softmax(-1)", op([(3, 4)], lambda T, x: x.softmax(-1)), None),
  ("x.log_softmax(dim=1)", op([(3, 4)], lambda T, x: x.log_softmax(dim=1)), None),
  ("x.std(dim=0)", op([(3, 4)], lambda T, x: x.std(dim=0)), None),
  ("x.std(0)", op([(3, 4)], lambda T, x: x.std(0)), None),
  ("x.var(dim=0)", op([(3, 4)], lambda T, x: x.var(dim=0)), None),
  ("torch.std_mean(x, dim=0) -> Tensor.std_mean", op([(3, 4)], lambda T, x: T.std_mean(x, dim=0)), None),
  ("torch.std_mean(x, 0) -> Tensor.std_mean", op([(3, 4)], lambda T, x: T.std_mean(x, 0)), None),
  ("torch.var_mean(x, 0) -> Tensor.var_mean", op([(3, 4)], lambda T, x: T.var_mean(x, 0)), None),
  ("x.argmax(dim=1)", op([(3, 4)], lambda T, x: x.argmax(dim=1), forward_only=True), None),
  ("x.argmax(1)", op([(3, 4)], lambda T, x: x.argmax(1), forward_only=True), None),
  ("x.amax(dim=1)", op([(3, 4)], lambda T, x: x.amax(dim=1)), None),
  ("x.amax(1)", op([(3, 4)], lambda T, x: x.amax(1)), None),
  ("x.max(dim=1) -> (values, indices)", t_max_dim, None),
  ("x.max(dim=1).values/.indices", t_max_dim_named, None),
  ("x.min(1) -> (values, indices)", t_min_dim, None),
  ("x.max() (no dim)", op([(3, 4)], lambda T, x: x.max()), None),
  ("x.cumsum(dim=1)", op([(3, 4)], lambda T, x: x.cumsum(dim=1)), None),
  ("x.prod(dim=1)", op([(3, 4)], lambda T, x: x.prod(dim=1)), None),
  ("x.logsumexp(dim=1)", op([(3, 4)], lambda T, x: x.logsumexp(dim=1)), None),
  ("x.norm(dim=1)", op([(3, 4)], lambda T, x: x.norm(dim=1)), None),
  ("x.all(dim=1)", op([(3, 4)], lambda T, x: (x > 0).all(dim=1), forward_only=True), None),
  ("x.any(dim=1)", op([(3, 4)], lambda T, x: (x > 0).any(dim=1), forward_only=True), None),
  ("x.squeeze(dim=0)", op([(1, 4)], lambda T, x: x.squeeze(dim=0)), None),
  ("x.unsqueeze(dim=0)", op([(3, 4)], lambda T, x: x.unsqueeze(dim=0)), None),
  ("x.flatten(start_dim=1)", op([(2, 3, 4)], lambda T, x: x.flatten(start_dim=1)), None),
  ("x.transpose(0, 1)", op([(3, 4)], lambda T, x: x.transpose(0, 1)), None),
  ("x.permute(1, 0)", op([(3, 4)], lambda T, x: x.permute(1, 0)), None),
  ("x.view(-1)", op([(3, 4)], lambda T, x: x.view(-1)), None),
  ("x.size(1) / x.shape", lambda: (Tensor.ones(3, 4).size(1) == 4 and Tensor.ones(3, 4).size() == (3, 4)) or (_ for _ in ()).throw(AssertionError("size")), None),
  # ---- class-level functions
  ("Tensor.cat([a, b], dim=0)", op([(3, 4), (2, 4)], lambda T, a, b: T.cat([a, b], dim=0)), None),
  ("Tensor.cat((a, b), 1)", op([(3, 4), (3, 2)], lambda T, a, b: T.cat((a, b), 1)), None),
  ("Tensor.stack([a, b], dim=1)", op([(3, 4), (3, 4)], lambda T, a, b: T.stack([a, b], dim=1)), None),
  ("Tensor.where(c, a, b)", op([(3, 4), (3, 4)], lambda T, a, b: T.where(a > 0, a, b)), None),
  ("Tensor.zeros_like(x)", op([(3, 4)], lambda T, x: T.zeros_like(x) + x), None),
  ("Tensor.maximum(a, b)", op([(3, 4), (3, 4)], lambda T, a, b: T.maximum(a, b)), None),
  # ---- torch.Tensor.unfold (sliding window)
  ("x.unfold(0, 2, 1)", op([(5,)], lambda T, x: x.unfold(0, 2, 1)), None),
  ("x.unfold(1, 3, 2) 2-d", op([(3, 7)], lambda T, x: x.unfold(1, 3, 2)), None),
  ("F.unfold(x, 2) -> x.im2col(2)", op([(1, 2, 4, 4)], lambda T, x: F.unfold(x, 2) if T is torch else x.im2col(2)), None),
  # ---- clamp / clip
  ("x.clamp(min=0)", op([(3, 4)], lambda T, x: x.clamp(min=0)), None),
  ("x.clip(min=0)", op([(3, 4)], lambda T, x: x.clip(min=0)), None),
  ("x.clamp(-0.5, 0.5)", op([(3, 4)], lambda T, x: x.clamp(-0.5, 0.5)), None),
  ("x.clamp(max=0.5)", op([(3, 4)], lambda T, x: x.clamp(max=0.5)), None),
  # ---- indexing, selection, scatter
  ("x.masked_select(mask)", op([(3, 4)], lambda T, x: x.masked_select(x > 0)), None),
  ("x.nonzero()", op([(3, 4)], lambda T, x: (x > 0).nonzero(), forward_only=True), None),
  ("x.nonzero(as_tuple=True)", lambda: [assert_close(f"dim {i}", p, t) for i, (p, t) in enumerate(zip(Tensor([[0, 1], [1, 0]]).nonzero(as_tuple=True), torch.tensor([[0, 1], [1, 0]]).nonzero(as_tuple=True)))], None),
  ("x.scatter(0, idx, 1.0, reduce='add')", op([(3, 4)], lambda T, x: T.zeros(3, 4).scatter(0, _idx(T), 1.0, reduce="add") + x), None),
  ("x.scatter(0, idx, 1.0, reduce='multiply')", op([(3, 4)], lambda T, x: T.ones(3, 4).scatter(0, _idx(T), 2.0, reduce="multiply") * x), None),
  ("x.scatter(0, idx, 1.0)", op([(3, 4)], lambda T, x: x.scatter(0, _idx(T)[:1], 1.0)), None),
  ("x.scatter(0, idx, src)", op([(3, 4), (1, 4)], lambda T, x, s: x.scatter(0, _idx(T)[:1], s)), None),
  ("x.scatter_add(0, idx, src)", op([(3, 4), (2, 4)], lambda T, x, s: x.scatter_add(0, _idx(T), s)), None),
  ("x.scatter_reduce(0, idx, src, 'amax')", op([(3, 4), (2, 4)], lambda T, x, s: x.scatter_reduce(0, _idx(T), s, "amax"), forward_only=True), None),
  ("x.scatter_reduce(0, idx, src, 'amax') grad", op([(3, 4), (2, 4)], lambda T, x, s: x.scatter_reduce(0, _idx(T), s, "amax")), None),
  ("x.scatter_reduce(.., 'mean', include_self=False)", op([(3, 4), (2, 4)], lambda T, x, s: x.scatter_reduce(0, _idx(T), s, "mean", include_self=False)), None),
  ("x.gather(1, idx)", op([(2, 4)], lambda T, x: x.gather(1, _idx(T)[:, :3])), None),
  ("x.index_select(0, idx)", op([(3, 4)], lambda T, x: x.index_select(0, _idx(T)[0])), None),
  ("x[idx_tensor]", op([(3, 4)], lambda T, x: x[_idx(T)[0]]), None),
  ("x[mask] (bool mask getitem)", op([(3, 4)], lambda T, x: x[x > 0]), None),
  ("x.masked_fill(mask, 0)", op([(3, 4)], lambda T, x: x.masked_fill(x > 0, 0.0)), None),
  ("x.topk(2, dim=1)", lambda: [assert_close(n, p, t) for n, p, t in zip(("values", "indices"), Tensor([[1., 3, 2], [0, -1, 5]]).topk(2, dim=1), torch.tensor([[1., 3, 2], [0, -1, 5]]).topk(2, dim=1))], None),
  ("x.sort(dim=1)", lambda: [assert_close(n, p, t) for n, p, t in zip(("values", "indices"), Tensor([[1., 3, 2], [0, -1, 5]]).sort(dim=1), torch.tensor([[1., 3, 2], [0, -1, 5]]).sort(dim=1))], None),
  # ---- in-place methods
  ("x.add_(y)", _inplace("add_"), None),
  ("x.sub_(y)", _inplace("sub_"), None),
  ("x.mul_(2)", _inplace("mul_"), None),
  ("x.zero_()", _inplace("zero_"), None),
  ("x.fill_(3.0)", _inplace("fill_"), None),
  ("x.clamp_(min=0)", _inplace("clamp_"), None),
  ("x += y (augmented assign)", lambda: (lambda x: (x.__iadd__(Tensor([1.0])), assert_close("x", x, np.array([2.0]))))(Tensor([1.0]).contiguous()), None),
  # ---- device / grad mode
  ("x.cpu()", t_cpu, None),
  ("x.to('cpu')", t_to_cpu, None),
  ("x.detach().numpy()", t_detach_numpy, None),
  ("with Tensor.no_grad():", t_no_grad_tensor, None),
  ("with petagrad.no_grad():", t_no_grad_module, None),
  ("Tensor.no_grad = True (tinygrad flag)", t_no_grad_flag, None),
  ("with petagrad.inference_mode():", t_inference_mode, None),
  # ---- pow gradient edge cases
  ("x.pow(y) at x=0", t_pow_x0_tensor_exp, None),
  ("x.pow(y) at y=0 (dy = log x)", t_pow_y0_tensor_exp, None),
  ("x.pow(y) negative base, int exponent: dx", t_pow_neg_base_int_tensor_exp_xgrad, None),
  ("x.pow(y) negative base, int exponent: dy", t_pow_neg_base_int_tensor_exp_ygrad, None),
  ("x.pow(3) negative base", t_pow_neg_base_int_scalar, None),
  ("x ** 0", t_pow_scalar_zero, None),
  ("x ** 0.5 at 0", t_pow_sqrt_at_zero, None),
  ("x.pow(y) at x=0, y=-1", t_pow_neg_exp_at_zero, None),
  ("2.0 ** x (grad at x=0)", t_rpow_neg, None),
  # ---- var/std edge cases
  ("x.var(0) over a size-1 axis", t_var_size1_axis, None),
  ("x.var(0, correction=0) over a size-1 axis", t_var_size1_axis_correction0, None),
  ("x.var(0, correction=5) with n=3", t_var_correction_gt_n, None),
  ("x.var(0, correction=3) with n=3", t_var_correction_eq_n, None),
  ("x.std(0) over a size-1 axis", t_std_size1_axis, None),
  # ---- numerics at the edges
  ("x.sigmoid() at +-1000", opv([[-1000.0, 1000.0, 0.0, -88.0, 88.0]], lambda T, x: x.sigmoid()), None),
  ("F.logsigmoid at +-1000", opv([[-1000.0, 1000.0, 0.0]], lambda T, x: F.logsigmoid(x) if T is torch else x.logsigmoid()), None),
  ("x.softmax(-1) with large logits", opv([[[1000.0, 0.0, -1000.0]]], lambda T, x: x.softmax(-1)), None),
  ("F.normalize(zero vector) forward", opv([[[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]]], lambda T, x: F.normalize(x, dim=1) if T is torch else x.normalize(dim=1), forward_only=True), None),
  ("F.normalize(zero vector) gradient", opv([[[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]]], lambda T, x: F.normalize(x, dim=1) if T is torch else x.normalize(dim=1)), None),
  ("F.normalize(x, p=1, dim=0)", op([(3, 4)], lambda T, x: F.normalize(x, p=1, dim=0) if T is torch else x.normalize(p=1, dim=0)), None),
  ("x.log() at 0 and <0", opv([[0.0, -1.0, 1.0]], lambda T, x: x.log(), forward_only=True), None),
  ("x.sqrt() at 0", opv([[0.0, 4.0]], lambda T, x: x.sqrt()), None),
  ("x.abs() grad at 0", opv([[0.0, -1.0, 2.0]], lambda T, x: x.abs()), None),
  ("x.relu() grad at 0", opv([[0.0, -1.0, 2.0]], lambda T, x: x.relu()), None),
  ("x.clamp(0, 1) grad at the bounds", opv([[0.0, 1.0, 0.5, 2.0]], lambda T, x: x.clamp(0, 1)), None),
  ("x.max() grad with ties", opv([[1.0, 3.0, 3.0]], lambda T, x: x.max()), None),
  ("x.amax(1) grad with ties", opv([[[1.0, 3.0, 3.0]]], lambda T, x: x.amax(1)), None),
  # ---- padding of size-1 dims
  ("F.pad(x, (1,1), 'replicate') size-1 dim", _pad("replicate", (1, 1, 1), (1, 1)), None),
  ("F.pad(x, (2,1,1,2), 'replicate') 1x1", _pad("replicate", (1, 1, 1, 1), (2, 1, 1, 2)), None),
  ("F.pad(x, (1,1,0,0), 'reflect') with H=1", _pad("reflect", (1, 1, 1, 3), (1, 1, 0, 0)), None),
  ("F.pad(x, (0,0), 'reflect') size-1 dim", _pad("reflect", (1, 1, 1), (0, 0)), None),
  ("F.pad(x, (1,1), 'circular') size-1 dim", _pad("circular", (1, 1, 1), (1, 1)), None),
  ("F.pad(x, (1,2)) constant value", op([(2, 3)], lambda T, x: F.pad(x, (1, 2), value=0.5) if T is torch else x.pad((1, 2), value=0.5)), None),
  # ---- conv bias gradient
  ("F.conv2d 1x1 bias grad", t_conv1x1_bias_grad, None),
  ("F.conv2d 1x1 stride 2 bias grad", t_conv1x1_stride2_bias_grad, None),
  # ---- eager semantics of reads after in-place writes
  ("v = x * 1; x += 1; v (old value)", lambda: t_lazy_read("iadd"), None),
  ("s = (w * w).sum(); w.assign(0); s", lambda: t_lazy_read("assign"), None),
  ("loss.backward(); opt.step(); loss.item()", lambda: t_lazy_read("step"), None),
  ("v = (x * 1).realize(); x += 1; v", lambda: t_lazy_read("iadd_realized"), None),
  ("loss.backward(); w.grad (conv->pool->matmul)", lambda: t_grad_after_loss_realize(False), None),
  ("loss.backward(); loss.realize(); w.grad (conv->pool->matmul)", lambda: t_grad_after_loss_realize(True), None),
  # ---- errors
  ("a @ b bad shapes: except RuntimeError", _errors("matmul"), None),
  ("a + b not broadcastable: except RuntimeError", _errors("add"), None),
  ("a @ b bad shapes: except ValueError", _errors_value("matmul"), None),
  ("a + b not broadcastable: except ValueError", _errors_value("add"), None),
]

@pytest.mark.parametrize("fn", [pytest.param(f, id=name, marks=[m] if m else []) for name, f, m in CASES])
def test_form(fn): fn()

# ====================================================================== training loops, torch-style
class TorchMLP(torch.nn.Module):
  def __init__(self):
    super().__init__()
    self.fc1, self.fc2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)
  def forward(self, x): return self.fc2(torch.relu(self.fc1(x)))

def _train_loop(make_model, make_opt, steps=3, read_after_step=False):
  from petagrad import nn
  torch.manual_seed(0)
  tm = TorchMLP()
  model = make_model(nn)
  for mine, theirs in ((model.fc1, tm.fc1), (model.fc2, tm.fc2)):
    mine.weight.assign(pg_from(theirs.weight)).realize(); mine.bias.assign(pg_from(theirs.bias)).realize()
  opt, topt = make_opt(nn, model.parameters()), torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
  rng = np.random.default_rng(0)
  xs, ys = rng.standard_normal((5, 6)).astype(np.float32), rng.integers(0, 3, 5)
  x, y, tx, ty = Tensor(xs), Tensor(ys), torch.tensor(xs), torch.tensor(ys)
  with nn.train():
    for step in range(steps):
      opt.zero_grad()
      loss = model(x).cross_entropy(y)
      loss.backward()
      if not read_after_step: loss.realize()   # today: realize before the step, or the read sees the updated weights
      opt.step()
      topt.zero_grad()
      tl = F.cross_entropy(tm(tx), ty)
      tl.backward()
      topt.step()
      assert_close(f"loss at step {step}", loss, tl, 1e-5, 1e-4)
  assert_close("fc1.weight after training", model.fc1.weight, tm.fc1.weight, 1e-5, 1e-4)
  assert_close("fc2.bias after training", model.fc2.bias, tm.fc2.bias, 1e-5, 1e-4)

@pytest.mark.parametrize("read_after_step", [False, True], ids=["loss_realized_before_step", "loss_read_after_step"])
def test_mlp_loop_user_class_parameters(read_after_step):
  """A plain user class with a parameters() method (what a torch user writes without nn.Module)."""
  from petagrad.nn.state import get_parameters
  class MLP:
    def __init__(self, nn): self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)
    def __call__(self, x): return self.fc2(self.fc1(x).relu())
    def parameters(self): return get_parameters(self)
  _train_loop(MLP, lambda nn, ps: nn.optim.SGD(ps, lr=0.1, momentum=0.9), read_after_step=read_after_step)

def test_mlp_loop_nn_module():
  def make(nn):
    class MLP(nn.Module):
      def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)
      def forward(self, x): return self.fc2(self.fc1(x).relu())
    return MLP()
  _train_loop(make, lambda nn, ps: nn.optim.SGD(ps, lr=0.1, momentum=0.9))

@pytest.mark.parametrize("read_after_step", [False, True], ids=["loss_realized_before_step", "loss_read_after_step"])
def test_cnn_loop_torch_style(read_after_step):
  """A small CNN trained with Adam: conv -> relu -> max_pool2d(2) -> flatten -> linear, 3 steps, vs torch."""
  from petagrad import nn
  from petagrad.nn.state import get_parameters
  torch.manual_seed(0)
  tc, tl = torch.nn.Conv2d(1, 3, 3, padding=1), torch.nn.Linear(3 * 3 * 3, 4)
  class CNN:
    def __init__(self): self.conv, self.fc = nn.Conv2d(1, 3, 3, padding=1), nn.Linear(27, 4)
    def __call__(self, x): return self.fc(x.conv2d(self.conv.weight, self.conv.bias, padding=1).relu().max_pool2d(2).flatten(1))
    def parameters(self): return get_parameters(self)
  m = CNN()
  for mine, theirs in ((m.conv, tc), (m.fc, tl)):
    mine.weight.assign(pg_from(theirs.weight)).realize(); mine.bias.assign(pg_from(theirs.bias)).realize()
  opt, topt = nn.optim.Adam(m.parameters(), lr=0.01), torch.optim.Adam(list(tc.parameters()) + list(tl.parameters()), lr=0.01)
  rng = np.random.default_rng(0)
  xs, ys = rng.standard_normal((4, 1, 6, 6)).astype(np.float32), rng.integers(0, 4, 4)
  for step in range(3):
    opt.zero_grad(); loss = m(Tensor(xs)).cross_entropy(Tensor(ys)); loss.backward()
    # the loss realized with the gradients, or read only after the step (then it is computed with the step, before
    # the writes: the value torch logs)
    if not read_after_step: Tensor.realize(loss, *[p.grad for p in m.parameters()])
    opt.step()
    topt.zero_grad(); tloss = F.cross_entropy(tl(F.max_pool2d(F.relu(tc(torch.tensor(xs))), 2).flatten(1)), torch.tensor(ys)); tloss.backward(); topt.step()
    assert_close(f"loss at step {step}", loss, tloss, 1e-5, 1e-4)
  assert_close("conv.weight after training", m.conv.weight, tc.weight, 1e-5, 1e-4)
