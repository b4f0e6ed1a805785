"""Tensor.qr, Tensor.svd and Tensor.newton_schulz (tinygrad 0.14's) vs torch.linalg: Q^T Q = I, R upper triangular,
Q R = A; U diag(S) Vh = A, S = svdvals; Newton-Schulz orthogonalizes. Small float32 shapes (the CPU default device;
one 2x2 case per test device)."""
import numpy as np
import pytest
import torch
from petagrad import Tensor

def rand(shape, seed=0):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def eye_like(n, batch):
  return np.broadcast_to(np.eye(n, dtype=np.float32), batch + (n, n))

def mT(x): return np.swapaxes(x, -2, -1)

QR_SHAPES = [(3, 3), (5, 3), (3, 5), (1, 4), (4, 1), (2, 4, 3)]

@pytest.mark.parametrize("shape", QR_SHAPES)
def test_qr_complete(shape):
  a = rand(shape)
  Q, R = Tensor(a).qr()
  q, r = Q.numpy(), R.numpy()
  m, n = shape[-2:]
  assert q.shape == shape[:-2] + (m, m) and r.shape == shape
  np.testing.assert_allclose(mT(q) @ q, eye_like(m, shape[:-2]), atol=2e-6)
  np.testing.assert_allclose(q @ r, a, atol=3e-6)
  assert np.all(np.tril(r, -1) == 0)
  tq, tr = torch.linalg.qr(torch.tensor(a), mode="complete")
  # the same Householder sign convention as LAPACK: R agrees entry by entry (Q's columns past k are free for m > n)
  np.testing.assert_allclose(r, tr.numpy(), atol=3e-6)
  k = min(m, n)
  np.testing.assert_allclose(np.abs(q[..., :k]), np.abs(tq.numpy()[..., :k]), atol=3e-6)

@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 3)])
def test_qr_reduced_matches_torch(shape):
  a = rand(shape, 1)
  Q, R = Tensor(a).qr(mode="reduced")
  tq, tr = torch.linalg.qr(torch.tensor(a))
  assert Q.shape == tuple(tq.shape) and R.shape == tuple(tr.shape)
  # up to column signs: Q D, D R for a diagonal D of +-1
  d = np.sign(np.diagonal(R.numpy(), 0, -2, -1) * np.diagonal(tr.numpy(), 0, -2, -1))
  np.testing.assert_allclose(Q.numpy() * d[..., None, :], tq.numpy(), atol=3e-6)
  np.testing.assert_allclose(R.numpy() * d[..., :, None], tr.numpy(), atol=3e-6)

def test_qr_zero_column_and_rank_deficient():
  for a in ([[0.0, 1.0], [0.0, 2.0]], [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]):
    a = np.array(a, np.float32)
    Q, R = Tensor(a).qr()
    q, r = Q.numpy(), R.numpy()
    assert np.isfinite(q).all() and np.isfinite(r).all()
    np.testing.assert_allclose(mT(q) @ q, np.eye(len(a)), atol=2e-6)
    np.testing.assert_allclose(q @ r, a, atol=3e-6)

def test_qr_on_each_device(device):
  a = np.array([[3.0, 1.0], [4.0, 2.0]], np.float32)
  Q, R = Tensor(a).qr()
  np.testing.assert_allclose(R.numpy(), torch.linalg.qr(torch.tensor(a))[1].numpy(), atol=1e-6)
  np.testing.assert_allclose(Q.numpy() @ R.numpy(), a, atol=1e-6)

def check_svd(a, full_matrices, atol=5e-6):
  U, S, Vh = Tensor(a).svd(full_matrices=full_matrices)
  u, s, vh = U.numpy(), S.numpy(), Vh.numpy()
  b, k = a.shape[:-2], min(a.shape[-2:])
  tu, ts, tvh = torch.linalg.svd(torch.tensor(a), full_matrices=full_matrices)
  assert u.shape == tuple(tu.shape) and s.shape == tuple(ts.shape) and vh.shape == tuple(tvh.shape)
  np.testing.assert_allclose(s, torch.linalg.svdvals(torch.tensor(a)).numpy(), atol=atol, rtol=1e-5)
  assert np.all(s[..., :-1] >= s[..., 1:]) and np.all(s >= 0)
  np.testing.assert_allclose((u[..., :, :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=atol)
  np.testing.assert_allclose(mT(u) @ u, eye_like(u.shape[-1], b), atol=atol)
  np.testing.assert_allclose(vh @ mT(vh), eye_like(vh.shape[-2], b), atol=atol)
  return u, s, vh

@pytest.mark.parametrize("full_matrices", [True, False])
@pytest.mark.parametrize("shape", [(2, 2), (4, 4), (5, 3), (3, 5), (1, 3), (3, 1), (2, 3, 2), (2, 1, 3, 4)])
def test_svd(shape, full_matrices):
  check_svd(rand(shape, 2), full_matrices)

def test_svd_singular_vectors_match_torch_up_to_sign():
  a = rand((6, 4), 3)
  u, s, vh = check_svd(a, False)
  tu, _, tvh = torch.linalg.svd(torch.tensor(a), full_matrices=False)
  sg = np.sign(np.sum(u * tu.numpy(), axis=0))
  np.testing.assert_allclose(u * sg, tu.numpy(), atol=1e-5)
  np.testing.assert_allclose(vh * sg[:, None], tvh.numpy(), atol=1e-5)

@pytest.mark.parametrize("a", [np.eye(3), np.zeros((2, 3)), [[1.0, 1.0], [2.0, 2.0]], [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0],
                                                                                      [2.0, 4.0, 6.0]]], ids=["eye", "zeros", "rank1", "rank2_tall"])
def test_svd_degenerate(a):
  # repeated and zero singular values: U and Vh stay orthogonal (completed), no NaN
  u, s, vh = check_svd(np.array(a, np.float32), True)
  assert np.isfinite(u).all() and np.isfinite(vh).all()

def test_svd_on_each_device(device):
  a = np.array([[3.0, 0.0], [0.0, -4.0]], np.float32)
  U, S, Vh = Tensor(a).svd()
  np.testing.assert_allclose(S.numpy(), [4.0, 3.0], atol=1e-6)
  np.testing.assert_allclose((U.numpy() * S.numpy()) @ Vh.numpy(), a, atol=1e-6)

@pytest.mark.parametrize("params", [(2, -1.5, 0.5), (2.0, -1.4, 0.2, 0.2), (1.5, -0.5)])
@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4), (2, 2, 3)])
def test_newton_schulz_orthogonalizes(shape, params):
  a = rand(shape, 4)
  g = Tensor(a).newton_schulz(steps=25, params=params, eps=0.0).numpy()
  # the sign function of the singular values: U @ Vh
  tu, _, tvh = torch.linalg.svd(torch.tensor(a), full_matrices=False)
  np.testing.assert_allclose(g, (tu @ tvh).numpy(), atol=2e-3)

def test_newton_schulz_matches_muon_formula():
  a = rand((3, 5), 5)
  coefs = (3.4445, -4.7750, 2.0315)
  g = torch.tensor(a)
  x = g / (g.norm() + 1e-7)
  for _ in range(5):
    A = x @ x.T
    x = coefs[0] * x + (coefs[1] * A + coefs[2] * A @ A) @ x
  np.testing.assert_allclose(Tensor(a).newton_schulz(5, coefs).numpy(), x.numpy(), atol=1e-5)

@pytest.mark.parametrize("name", ["qr", "svd", "newton_schulz"])
def test_user_errors(name):
  args = (5, (2, -1.5, 0.5)) if name == "newton_schulz" else ()
  with pytest.raises(ValueError, match=name):
    getattr(Tensor([1.0, 2.0]), name)(*args)
  with pytest.raises(TypeError, match=name):
    getattr(Tensor([[1, 2], [3, 4]]), name)(*args)

def test_user_errors_arguments():
  with pytest.raises(ValueError, match="mode"): Tensor.ones(2, 2).qr(mode="r")
  with pytest.raises(ValueError, match="steps"): Tensor.ones(2, 2).newton_schulz(-1, (1.0,))
  with pytest.raises(TypeError, match="params"): Tensor.ones(2, 2).newton_schulz(2, ())
