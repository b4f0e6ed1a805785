"""TinyJit: capture once, replay with new inputs, and refuse what cannot be replayed."""
from __future__ import annotations
import numpy as np
import pytest
from petagrad import Tensor, GlobalCounters
from petagrad.engine.jit import TinyJit, JitError

def test_replay_matches_eager(device):
  @TinyJit
  def f(x, y): return (x @ y + 1).relu().sum(0)
  for _ in range(4):
    xn, yn = np.random.randn(3, 4).astype(np.float32), np.random.randn(4, 5).astype(np.float32)
    np.testing.assert_allclose(f(Tensor(xn), Tensor(yn)).numpy(), np.maximum(xn @ yn + 1, 0).sum(0), rtol=1e-5, atol=1e-6)
  assert f.cnt == 4

def test_replay_runs_only_captured_kernels():
  @TinyJit
  def f(x): return (x * 2).sum() + x.max()
  x = Tensor.rand(16).realize()
  for _ in range(3): f(x)
  GlobalCounters.reset()
  f(x)
  assert GlobalCounters.kernel_count == len(f.captured)

def test_shape_change_raises():
  f = TinyJit(lambda x: (x + 1).realize())
  for _ in range(3): f(Tensor.rand(4))
  with pytest.raises(JitError, match="shapes"):
    f(Tensor.rand(5))

def test_dtype_change_raises():
  f = TinyJit(lambda x: (x + 1).realize())
  for _ in range(3): f(Tensor.rand(4))
  with pytest.raises(JitError):
    f(Tensor.rand(4).cast("float64"))

def test_python_value_change_raises():
  f = TinyJit(lambda x, k: (x * k).realize())
  for _ in range(3): f(Tensor.rand(4), 2.0)
  with pytest.raises(JitError, match="non-tensor"):
    f(Tensor.rand(4), 3.0)

def test_item_inside_raises():
  f = TinyJit(lambda x: x.sum().item())
  with pytest.raises(JitError, match="Python"):
    f(Tensor.rand(3))

def test_random_advances_on_replay():
  f = TinyJit(lambda x: (x + Tensor.rand(8)).realize())
  outs = [f(Tensor.zeros(8)).numpy() for _ in range(5)]
  for a, b in zip(outs, outs[1:]): assert not np.allclose(a, b)

def test_assign_state_in_jit():
  w = Tensor.zeros(4).contiguous().realize()
  @TinyJit
  def step(x):
    w.assign(w + x)
    return w
  for i in range(5): step(Tensor.ones(4))
  np.testing.assert_allclose(w.numpy(), [5.0] * 4)

def test_training_step_in_jit():
  Tensor.manual_seed(1)
  w = Tensor.randn(4, 2, requires_grad=True).realize()
  x = Tensor.randn(8, 4).realize()
  y = Tensor.randn(8, 2).realize()
  @TinyJit
  def step(x, y):
    loss = ((x @ w - y) ** 2).mean()
    loss.backward()
    w.assign(w.detach() - 0.1 * w.grad)
    w.grad = None
    return loss
  losses = [step(x, y).item() for _ in range(6)]
  assert losses[-1] < losses[0]
  wn, xn, yn = None, x.numpy(), y.numpy()
