"""Variables: symbolic integers bound per call, read by the kernels when they run (one compile, one JIT capture)."""
from __future__ import annotations
import numpy as np
import pytest
from petagrad import Tensor, Variable, TinyJit, GlobalCounters

def test_shrink_by_variable_compiles_once(device):
  x = np.arange(40, dtype=np.float32).reshape(10, 4)
  t = Tensor(x).realize()
  v = Variable("start", 0, 7)
  outs, compiles = [], []
  for i in (0, 3, 7, 5):
    b = v.bind(i)
    c0 = GlobalCounters.compile_count
    outs.append((t.shrink(((b, b + 3), None)) * 2).numpy())
    compiles.append(GlobalCounters.compile_count - c0)
  for i, o in zip((0, 3, 7, 5), outs): np.testing.assert_array_equal(o, x[i:i + 3] * 2)
  assert compiles[1:] == [0, 0, 0]   # the kernel reads the start when it runs

def test_index_slice_and_value(device):
  x = np.arange(30).reshape(10, 3).astype(np.int32)
  t = Tensor(x).realize()
  v = Variable("i", 1, 8)
  for i in (1, 4, 8):
    b = v.bind(i)
    np.testing.assert_array_equal(t[b].numpy(), x[i])
    np.testing.assert_array_equal(t[b - 1:b + 2, 1:].numpy(), x[i - 1:i + 2, 1:])
    np.testing.assert_array_equal((Tensor.arange(10) < b + 1).numpy(), np.arange(10) < i + 1)
    assert Tensor(b * 2 + 1).item() == 2 * i + 1
    np.testing.assert_array_equal((t + b).numpy(), x + i)

def test_pad_by_variable_and_gradient(device):
  v = Variable("p", 0, 6)
  for i in (0, 2, 6):
    b = v.bind(i)
    got = Tensor([1.0, 2.0]).pad(((b, 6 - b),), value=-1.0).numpy()
    np.testing.assert_array_equal(got, np.pad([1.0, 2.0], (i, 6 - i), constant_values=-1.0))
    w = Tensor(np.arange(8, dtype=np.float32), requires_grad=True)
    (w.shrink(((b, b + 2),)) * Tensor([3.0, 4.0])).sum().backward()
    want = np.zeros(8, np.float32); want[i:i + 2] = [3.0, 4.0]
    np.testing.assert_array_equal(w.grad.numpy(), want)

def test_write_at_variable_position(device):
  cache = Tensor.zeros(6, 2).contiguous().realize()
  v = Variable("pos", 0, 5)
  ref = np.zeros((6, 2), np.float32)
  for i in (2, 0, 5):
    cache[v.bind(i):v.bind(i) + 1].assign(Tensor([[i + 1.0, -i - 1.0]])).realize()
    ref[i] = [i + 1, -i - 1]
    np.testing.assert_array_equal(cache.numpy(), ref)

def test_jit_replays_one_capture_for_every_value(device):
  # a KV-cache-style step: write at the position, read what is valid so far
  cache = Tensor.zeros(8, 3).contiguous().realize()
  v = Variable("pos", 0, 7)
  @TinyJit
  def step(x: Tensor, pos) -> Tensor:
    cache[pos:pos + 1].assign(x.reshape(1, 3))
    return (cache * (Tensor.arange(8) < pos + 1).reshape(8, 1)).sum(0).realize()
  ref = np.zeros((8, 3), np.float32)
  for i in range(8):
    row = np.random.default_rng(i).standard_normal(3).astype(np.float32)
    ref[i] = row
    if i == 3: c0 = GlobalCounters.compile_count
    np.testing.assert_allclose(step(Tensor(row), v.bind(i)).numpy(), ref[:i + 1].sum(0), rtol=1e-6)
  assert step.cnt == 8 and GlobalCounters.compile_count == c0   # replays: nothing compiled for new positions

def test_bad_variables():
  v = Variable("n", 2, 5)
  with pytest.raises(ValueError, match="outside its range"): v.bind(6)
  with pytest.raises(TypeError): v.bind(2.5)
  with pytest.raises(ValueError): Variable("m", 5, 2)
  t = Tensor.arange(6)
  with pytest.raises(ValueError, match="must be bound"): t.shrink(((v, v + 1),))
  with pytest.raises(ValueError, match="out of range"): t.shrink(((v.bind(3), v.bind(3) + 2),))   # v + 2 reaches 7 > 6
  assert t.shrink(((0, v.bind(3)),)).shape == (v.bind(3),)   # a symbolic size (test_symbolic_shapes.py)
  with pytest.raises(ValueError, match="may be negative|out of range"): t.shrink(((v.bind(3), 2),))   # 2 - v < 0
  with pytest.raises(IndexError, match="out of bounds"): t[v.bind(3) + 1]
  a, b = t.shrink(((v.bind(2), v.bind(2) + 1),)), t.shrink(((v.bind(3), v.bind(3) + 1),))
  with pytest.raises(ValueError, match="bound to both"): Tensor.realize_all(a, b)
