"""Property tests: random chains of ops, compared with PyTorch (forward values and gradients) on every test device.

Hypothesis draws an input shape and a chain of 1-4 ops from CHAIN_OPS (elementwise math, broadcasting binary ops,
reductions, movement, indexing, scans, sort, matmul, softmax, ...); the same chain runs in torch and in petagrad through
helper_test_op, which checks shape, dtype, values and the gradient of the input. derandomize=True: the same examples
in every run (CI stays reproducible); the shapes stay tiny so the PYTHON device (an interpreter) keeps up.
"""
from __future__ import annotations
from typing import Callable
import numpy as np
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from petagrad import Tensor
from helpers import helper_test_op

def _lib(x):
  return torch if isinstance(x, torch.Tensor) else Tensor

def _const(x, shape: tuple[int, ...], seed: int):
  """The same pseudo-random constant (values in [0.5, 1.5)) in the library of x."""
  a = np.random.default_rng(seed).uniform(0.5, 1.5, size=shape).astype(np.float32)
  return torch.tensor(a) if _lib(x) is torch else Tensor(a)

def _idx(x, v):
  return torch.tensor(v) if _lib(x) is torch else Tensor(v)

# name -> (fxn (same call in torch and petagrad; x is either), applies to shape). Smooth ops and distinct values
# only: ties (relu then max, ...) would make both libraries' gradients valid but different.
CHAIN_OPS: dict[str, tuple[Callable, Callable[[tuple[int, ...]], bool]]] = {
  "add_bcast": (lambda x: x + _const(x, x.shape[-1:], 1), lambda s: len(s) >= 1),
  "mul_bcast": (lambda x: x * _const(x, (x.shape[0],) + (1,) * (x.ndim - 1), 2), lambda s: len(s) >= 1),
  "div": (lambda x: x / _const(x, x.shape, 3), lambda s: True),
  "rsub_scalar": (lambda x: 1.5 - x, lambda s: True),
  "tanh": (lambda x: x.tanh(), lambda s: True),
  "sigmoid": (lambda x: x.sigmoid(), lambda s: True),
  "exp_clamped": (lambda x: x.clamp(-3, 3).exp(), lambda s: True),
  "log_abs": (lambda x: (x.abs() + 0.5).log(), lambda s: True),
  "sqrt_abs": (lambda x: (x * x + 0.25).sqrt(), lambda s: True),
  "sin": (lambda x: x.sin(), lambda s: True),
  "gelu": (lambda x: x.gelu() if _lib(x) is Tensor else torch.nn.functional.gelu(x), lambda s: True),
  "leaky_relu": (lambda x: x.leaky_relu(0.1) if _lib(x) is Tensor else torch.nn.functional.leaky_relu(x, 0.1), lambda s: True),
  "square": (lambda x: x.square(), lambda s: True),
  "sum0": (lambda x: x.sum(0), lambda s: len(s) >= 2),
  "sum_keep": (lambda x: x.sum(-1, keepdim=True), lambda s: len(s) >= 1),
  "mean": (lambda x: x.mean(-1), lambda s: len(s) >= 2),
  "amax": (lambda x: x.amax(-1), lambda s: len(s) >= 2 and s[-1] >= 1),
  "softmax": (lambda x: x.softmax(-1), lambda s: len(s) >= 1 and s[-1] >= 1),
  "log_softmax0": (lambda x: x.log_softmax(0), lambda s: len(s) >= 1 and s[0] >= 1),
  "T": (lambda x: x.T if x.ndim == 2 else x.permute(*reversed(range(x.ndim))), lambda s: len(s) >= 2),
  "flip": (lambda x: x.flip(0), lambda s: len(s) >= 1),
  "reshape_flat": (lambda x: x.reshape(-1), lambda s: len(s) >= 2),
  "unsqueeze_expand": (lambda x: x.unsqueeze(0).expand(2, *x.shape), lambda s: len(s) <= 2),
  "slice_step": (lambda x: x[::2], lambda s: len(s) >= 1),
  "pad": (lambda x: x.pad((1, 0)) if _lib(x) is Tensor else torch.nn.functional.pad(x, (1, 0)), lambda s: len(s) >= 1),
  "cat_self": (lambda x: x.cat(x * 2, dim=-1) if _lib(x) is Tensor else torch.cat([x, x * 2], dim=-1), lambda s: len(s) >= 1),
  "getitem_tensor": (lambda x: x[_idx(x, [0, -1, 0])], lambda s: len(s) >= 1 and s[0] >= 1),
  "getitem_mixed": (lambda x: x[:, _idx(x, [1, 0])], lambda s: len(s) >= 2 and s[1] >= 2),
  "gather": (lambda x: x.gather(-1, _idx(x, np.zeros(x.shape[:-1] + (2,), dtype=np.int64).tolist())), lambda s: len(s) >= 1 and s[-1] >= 1),
  "cumsum": (lambda x: x.cumsum(-1), lambda s: len(s) >= 1),
  "cumprod": (lambda x: x.cumprod(0), lambda s: len(s) >= 1),
  "sort": (lambda x: x.sort(-1)[0], lambda s: len(s) >= 1),
  "cummax": (lambda x: x.cummax(-1)[0], lambda s: len(s) >= 1),
  "logcumsumexp": (lambda x: x.logcumsumexp(0), lambda s: len(s) >= 1),
  "take_along_neg": (lambda x: torch.take_along_dim(x, _idx(x, np.full(x.shape[:-1] + (1,), -1).tolist()), -1) if _lib(x) is torch
                     else x.take_along_dim(_idx(x, np.full(x.shape[:-1] + (1,), -1).tolist()), -1), lambda s: len(s) >= 1 and s[-1] >= 1),
  "topk": (lambda x: x.topk(1, dim=-1)[0], lambda s: len(s) >= 1 and s[-1] >= 1),
  "matmul": (lambda x: x @ _const(x, (x.shape[-1], 2), 4), lambda s: len(s) >= 1),
  "where": (lambda x: (x > 0).where(x, x * 0.5) if _lib(x) is Tensor else torch.where(x > 0, x, x * 0.5), lambda s: True),
  "tril": (lambda x: x.tril(), lambda s: len(s) >= 2),
  "roll": (lambda x: x.roll(1, -1), lambda s: len(s) >= 1),
  "norm": (lambda x: x.norm(dim=-1, keepdim=True) if _lib(x) is Tensor else torch.linalg.norm(x, dim=-1, keepdim=True), lambda s: len(s) >= 1),
}

@settings(max_examples=20, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), shape=st.lists(st.integers(1, 4), min_size=1, max_size=3))
def test_random_chain_vs_torch(device, data, shape):
  names: list[str] = []
  s = tuple(shape)
  for _ in range(data.draw(st.integers(1, 4), label="length")):
    # shapes are tracked with a torch dry run (cheap) so every drawn op applies
    options = [n for n, (_, ok) in CHAIN_OPS.items() if ok(s)]
    name = data.draw(st.sampled_from(options), label="op")
    s = tuple(CHAIN_OPS[name][0](torch.zeros(s)).shape)
    names.append(name)
    if int(np.prod(s)) > 64: break
  def chain(x):
    for n in names: x = CHAIN_OPS[n][0](x)
    return x
  helper_test_op([tuple(shape)], chain, seed=len(names), grad_atol=1e-4, grad_rtol=2e-3, atol=1e-5, rtol=2e-3)

@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), dtype=st.sampled_from(["int32", "int64", "int8"]))
def test_random_int_chain_vs_numpy(device, data, shape, dtype):
  # integer chains against numpy: exact values (wrapping arithmetic, floor division by nonzero constants)
  ops = {
    "add": (lambda x: x + 3, lambda a: a + a.dtype.type(3)),
    "mul": (lambda x: x * 2, lambda a: a * a.dtype.type(2)),
    "floordiv": (lambda x: x // 3, lambda a: a // a.dtype.type(3)),
    "neg": (lambda x: -x, lambda a: -a),
    "maximum": (lambda x: x.maximum(1), lambda a: np.maximum(a, a.dtype.type(1))),
    "flip": (lambda x: x.flip(0), lambda a: np.flip(a, 0)),
    "cumsum": (lambda x: x.cumsum(0), lambda a: np.cumsum(a, 0, dtype=np.int64)),
    "sort": (lambda x: x.sort(-1)[0], lambda a: np.sort(a, -1, kind="stable")),
    "sum0": (lambda x: x.sum(0), lambda a: a.sum(0, dtype=np.int64)),
    "T": (lambda x: x.permute(*reversed(range(x.ndim))), lambda a: a.transpose()),
    "getitem": (lambda x: x[Tensor([0, -1])], lambda a: a[[0, -1]]),
  }
  rng = np.random.default_rng(data.draw(st.integers(0, 1000), label="seed"))
  a = rng.integers(-20, 20, size=tuple(shape)).astype(dtype)
  x = Tensor(a)
  log = [f"{a.dtype}{a.shape}"]
  for _ in range(data.draw(st.integers(1, 4), label="length")):
    name = data.draw(st.sampled_from(sorted(ops)), label="op")
    if a.ndim == 0 and name in ("flip", "cumsum", "sort", "sum0", "getitem"): continue
    pf, nf = ops[name]
    x, a = pf(x), nf(a)
    log.append(name)
  got = x.numpy()
  assert got.shape == a.shape and got.dtype == a.dtype, f"{' -> '.join(log)}: {got.shape} {got.dtype} != {a.shape} {a.dtype}"
  np.testing.assert_array_equal(got, a, err_msg=" -> ".join(log))
