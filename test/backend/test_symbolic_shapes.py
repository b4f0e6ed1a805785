"""Symbolic shapes: sizes that are expressions over bound Variables (x[:v], Tensor.arange(v)). One compile (and one
JIT capture) serves every value; results and gradients match torch on the concrete slices."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from petagrad import Tensor, Variable, TinyJit, GlobalCounters
from helpers import compare

V = Variable("n", 1, 12)
VALUES = (3, 12, 1, 7)

def _each_value(fn, device, values=VALUES) -> list[int]:
  """Run fn(bound n, n) for each value; the compiles each call made."""
  compiles = []
  for n in values:
    c0 = GlobalCounters.compile_count
    fn(V.bind(n), n)
    compiles.append(GlobalCounters.compile_count - c0)
  return compiles

def test_slice_ops_against_torch(device):
  xn = np.random.default_rng(0).standard_normal((12, 5)).astype(np.float32)
  x = Tensor(xn, device=device).realize()
  def check(b, n):
    y, ty = x[:b], torch.tensor(xn[:n])
    assert y.shape == (b, 5) and y.concrete_shape == (n, 5)
    compare("elementwise", (y * 2 + 1).exp(), (ty * 2 + 1).exp(), 1e-5, 1e-5)
    compare("sum0", y.sum(0), ty.sum(0), 1e-5, 1e-5)
    compare("sum", y.sum(), ty.sum(), 1e-4, 1e-5)
    compare("mean0", y.mean(0), ty.mean(0), 1e-5, 1e-5)
    compare("max0", y.max(0).values, ty.max(0).values, 0, 0)
    compare("argmax0", y.argmax(0), ty.argmax(0), 0, 0)
    compare("softmax0", y.softmax(0), ty.softmax(0), 1e-6, 1e-5)
    compare("logsumexp1", y.logsumexp(1), ty.logsumexp(1), 1e-5, 1e-5)
  compiles = _each_value(check, device)
  assert compiles[1:] == [0] * (len(VALUES) - 1), compiles   # one compile serves every value

def test_movement_ops(device):
  xn = np.arange(12 * 8, dtype=np.float32).reshape(12, 8)
  x = Tensor(xn, device=device).realize()
  def check(b, n):
    y = x[:b]
    np.testing.assert_array_equal(y.reshape(b, 2, 4).permute(1, 0, 2).numpy(), xn[:n].reshape(n, 2, 4).transpose(1, 0, 2))
    np.testing.assert_array_equal(y.reshape(-1).numpy(), xn[:n].reshape(-1))
    np.testing.assert_array_equal(y.reshape(b * 8).reshape(b, 8).numpy(), xn[:n])
    np.testing.assert_array_equal(y.reshape(8, b).numpy(), xn[:n].reshape(8, n))   # a reshape across the symbolic size
    np.testing.assert_array_equal(y.T.contiguous().numpy(), xn[:n].T)
    np.testing.assert_array_equal(y.flip(0).numpy(), xn[:n][::-1])
    np.testing.assert_array_equal(y[1:].numpy() if n > 1 else xn[1:n], xn[1:n])
    np.testing.assert_array_equal(y[:, 2:5].numpy(), xn[:n, 2:5])
    np.testing.assert_array_equal(Tensor.ones(1, 8, device=device).expand(b, 8).numpy(), np.ones((n, 8), np.float32))
    np.testing.assert_array_equal(Tensor.arange(b, device=device).numpy(), np.arange(n))
    np.testing.assert_array_equal(Tensor.cat(y, y * 2, dim=1).numpy(), np.concatenate([xn[:n], xn[:n] * 2], 1))
    np.testing.assert_array_equal(y.pad(((1, 2), None)).numpy(), np.pad(xn[:n], ((1, 2), (0, 0))))
    assert y.tolist() == xn[:n].tolist()
  _each_value(check, device)

def test_gradients_against_torch(device):
  rng = np.random.default_rng(1)
  xn, wn = rng.standard_normal((12, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
  for n in VALUES:
    x, w = Tensor(xn, requires_grad=True, device=device), Tensor(wn, requires_grad=True, device=device)
    tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    out = (x[:V.bind(n)] @ w).relu().softmax(0).mean(1).sum() + x[:V.bind(n)].square().mean()
    tout = (tx[:n] @ tw).relu().softmax(0).mean(1).sum() + tx[:n].square().mean()
    out.backward(); tout.backward()
    compare("loss", out, tout, 1e-5, 1e-5)
    compare("dx", x.grad, tx.grad, 1e-5, 1e-4)
    compare("dw", w.grad, tw.grad, 1e-5, 1e-4)

def test_attention_over_a_kv_cache_one_capture(device):
  """The decode pattern: attention over the first start_pos + 1 rows of a preallocated cache, one capture."""
  rng = np.random.default_rng(2)
  kn, vn = rng.standard_normal((2, 12, 8)).astype(np.float32), rng.standard_normal((2, 12, 8)).astype(np.float32)
  k, v = Tensor(kn, device=device).realize(), Tensor(vn, device=device).realize()
  @TinyJit
  def step(q: Tensor, pos) -> Tensor:
    return q.scaled_dot_product_attention(k[:, :pos + 1], v[:, :pos + 1]).realize()
  for p in (2, 5, 0, 11, 7):
    qn = rng.standard_normal((2, 1, 8)).astype(np.float32)
    out = step(Tensor(qn, device=device), Variable("pos", 0, 11).bind(p))
    want = torch.nn.functional.scaled_dot_product_attention(torch.tensor(qn), torch.tensor(kn[:, :p + 1]), torch.tensor(vn[:, :p + 1]))
    compare("attention", out, want, 1e-5, 1e-5)
  assert len(step.captured) >= 1 and step.cnt == 5

def test_symbolic_output_of_a_jit(device):
  x = Tensor(np.arange(24, dtype=np.float32).reshape(12, 2), device=device).realize()
  @TinyJit
  def f(b) -> Tensor: return (x[:b] * 3).realize()
  for n in (4, 9, 2, 12):
    out = f(V.bind(n))
    assert out.shape == (V.bind(n), 2)
    np.testing.assert_array_equal(out.numpy(), np.arange(24, dtype=np.float32).reshape(12, 2)[:n] * 3)

def test_sort_and_cumsum_along_a_symbolic_dim(device):
  xn = np.array([5, 3, 7, 1, 0, 2, 6, 4, 11, 9, 8, 10], dtype=np.float32)
  x = Tensor(xn, device=device).realize()
  for n in VALUES:
    y, ty = x[:V.bind(n)], torch.tensor(xn[:n])
    values, indices = y.sort(descending=True)
    tv, ti = ty.sort(descending=True)
    compare("sort values", values, tv, 0, 0)
    compare("sort indices", indices, ti, 0, 0)
    compare("cumsum", y.cumsum(0), ty.cumsum(0), 1e-6, 1e-6)

def test_cache_keys_tell_ranges_apart():
  """Kernels are cached (on disk too) under their structure; one name with two ranges must not share an entry."""
  a, b = Variable("same", 0, 8), Variable("same", 1, 8)
  assert repr(a) != repr(b) and repr(a.bind(3) + 1) != repr(b.bind(3) + 1)
  x = Tensor.arange(8).realize()
  assert x[:a.bind(0)].sum().item() == 0 and x[:b.bind(3)].sum().item() == 3 and x[:a.bind(3)].sum().item() == 3

def test_empty_value():
  v = Variable("m", 0, 4)
  x = Tensor.ones(4, 3)
  np.testing.assert_array_equal(x[:v.bind(0)].sum(0).numpy(), np.zeros(3, np.float32))
  assert x[:v.bind(0)].numpy().shape == (0, 3)

def test_errors():
  x = Tensor.ones(12, 4)
  a, b = x[:V.bind(3)], x[:Variable("m", 1, 12).bind(3)]
  with pytest.raises(ValueError):   # two symbolic sizes that are not the same expression do not broadcast
    (a + b).realize()
  with pytest.raises(TypeError, match="cannot decide"):   # an undecidable comparison of a symbolic size in Python
    if a.shape[0] < 5: pass
  assert not (a.shape[0] < 0)   # a comparison that holds for every value is decided
  with pytest.raises(IndexError, match="out of bounds"): x[:Variable("big", 1, 13).bind(2)]   # 13 > 12 rows
  with pytest.raises(ValueError, match="cannot reshape"): a.reshape(3, 4)
  with pytest.raises(ValueError, match="must be bound"): x[:Variable("free", 1, 12)]
