"""Training mode and gradient mode (the TRAINING and NO_GRAD flags and their PyTorch/tinygrad spellings), PyTorch's
named in-place methods, .cpu(), and assign from arrays."""
from __future__ import annotations
import numpy as np
import pytest
import torch
import petagrad
from petagrad import Tensor, TinyJit, nn
from petagrad.engine.jit import JitError
from petagrad.helpers import Context
from helpers import compare

def test_training_is_the_flag():
  assert Tensor.training is False and Tensor([1.0]).training is False
  with Context(TRAINING=1): assert Tensor.training is True and Tensor([1.0]).training is True
  Tensor.training = True
  try:
    from petagrad.helpers import TRAINING
    assert int(TRAINING) == 1
  finally: Tensor.training = False
  assert Tensor.training is False

def test_train_context_and_decorator():
  with Tensor.train(): assert Tensor.training
  assert not Tensor.training
  @Tensor.train()
  def f() -> bool: return Tensor.training
  assert f() is True and Tensor.training is False
  with Tensor.train(), Tensor.train(False): assert not Tensor.training
  with nn.train(): assert Tensor.training
  m = nn.Linear(2, 2)
  m.train(); assert Tensor.training and m.training
  m.eval(); assert not Tensor.training

def test_dropout_follows_context_training():
  x = Tensor.ones(1000)
  assert x.dropout(0.5).tolist() == [1.0] * 1000                  # eval: the identity
  with Context(TRAINING=1): kept = (x.dropout(0.5) != 0).sum().item()
  assert 300 < kept < 700

@pytest.mark.parametrize("how", ["context", "function", "attribute", "test", "inference_mode", "flag"])
def test_no_grad(device, how):
  w = Tensor([1.0, 2.0], device=device, requires_grad=True)
  def under(f):
    if how == "attribute":
      Tensor.no_grad = True
      try: return f()
      finally: Tensor.no_grad = False
    ctx = {"context": Tensor.no_grad, "function": petagrad.no_grad, "test": Tensor.test, "inference_mode": Tensor.inference_mode,
           "flag": lambda: Context(NO_GRAD=1)}[how]()
    with ctx: return f()
  y = under(lambda: w * 3)
  assert not y.requires_grad and not bool(Tensor.no_grad)
  loss = (w * w).sum() + (y * w).sum()   # y is a constant for the gradient, as in torch
  loss.backward()
  tw = torch.tensor([1.0, 2.0], requires_grad=True)
  with torch.no_grad(): ty = tw * 3
  ((tw * tw).sum() + (ty * tw).sum()).backward()
  compare("grad", w.grad, tw.grad, 1e-6, 1e-6)

def test_jit_refuses_the_other_mode():
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x.dropout(0.5) * 2).realize()
  x = Tensor.ones(8).realize()
  with Tensor.train():
    for _ in range(3): f(x)
  with pytest.raises(JitError, match=r"captured with \(training, no_grad\) = \(True, False\), called with \(False, False\)"): f(x)

INPLACE = {
  "add_": (lambda t, o: t.add_(o), None), "add_alpha": (lambda t, o: t.add_(o, alpha=2), None),
  "sub_": (lambda t, o: t.sub_(o, alpha=0.5), None), "mul_": (lambda t, o: t.mul_(o), None), "div_": (lambda t, o: t.div_(o), None),
  "pow_": (lambda t, o: t.abs_().pow_(2), None), "neg_": (lambda t, o: t.neg_(), None), "zero_": (lambda t, o: t.zero_(), None),
  "fill_": (lambda t, o: t.fill_(2.5), None), "copy_": (lambda t, o: t.copy_(o), None),
  "clamp_": (lambda t, o: t.clamp_(min=-0.5), None), "clamp_max": (lambda t, o: t.clamp_(max=0.25), None),
  "clip_": (lambda t, o: t.clip_(-0.5, 0.5), None), "exp_": (lambda t, o: t.exp_(), None), "relu_": (lambda t, o: t.relu_(), None),
  "sigmoid_": (lambda t, o: t.sigmoid_(), None), "tanh_": (lambda t, o: t.tanh_(), None), "floor_": (lambda t, o: t.floor_(), None),
  "masked_fill_": (lambda t, o: t.masked_fill_(o > 0, 7.0), None), "lerp_": (lambda t, o: t.lerp_(o, 0.25), None),
  "addcmul_": (lambda t, o: t.addcmul_(o, o, value=0.5), None), "addcdiv_": (lambda t, o: t.addcdiv_(o, o.abs() + 1, value=2), None),
}

@pytest.mark.parametrize("name", list(INPLACE))
def test_inplace_methods_like_torch(device, name):
  f, _ = INPLACE[name]
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
  ta, pa = torch.tensor(a), Tensor(a, device=device).realize()
  view = pa[1:2]                      # a view of the buffer sees the write, as in torch
  tview = ta[1:2]
  r = f(pa, Tensor(b, device=device))
  f(ta, torch.tensor(b))
  assert r is pa
  compare("result", pa, ta, 1e-6, 1e-6)
  compare("view", view, tview, 1e-6, 1e-6)

def test_cpu_and_assign_from_arrays():
  x = Tensor([1.0, 2.0]).realize()
  assert x.cpu().device == "CPU" and x.cpu().tolist() == [1.0, 2.0]
  x.assign(np.array([3.0, 4.0], np.float32))
  assert x.tolist() == [3.0, 4.0]
  x.assign([5, 6])
  assert x.tolist() == [5.0, 6.0] and x.dtype == petagrad.dtypes.float32
