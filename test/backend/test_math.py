"""More math vs PyTorch: nan checks, hyperbolic / inverse trig, expm1/log1p, two-argument ops, norms, cross, cdist."""
import math
import numpy as np
import pytest
import torch
from petagrad import Tensor
from helpers import helper_test_op

INF, NAN = math.inf, math.nan

UNARY = {
  # name: (torch fxn, petagrad fxn or None, low, high)
  "sinh": (lambda x: x.sinh(), None, -4, 4),
  "cosh": (lambda x: x.cosh(), None, -4, 4),
  "asinh": (lambda x: x.asinh(), None, -4, 4),
  "acosh": (lambda x: x.acosh(), None, 1.01, 5),
  "atanh": (lambda x: x.atanh(), None, -0.95, 0.95),
  "asin": (lambda x: x.asin(), None, -0.95, 0.95),
  "acos": (lambda x: x.acos(), None, -0.95, 0.95),
  "atan": (lambda x: x.atan(), None, -4, 4),
  "arctan": (lambda x: x.arctan(), None, -4, 4),
  "expm1": (lambda x: x.expm1(), None, -2, 2),
  "log1p": (lambda x: x.log1p(), None, -0.9, 3),
  "frac": (lambda x: x.frac(), None, -3, 3),
  "nan_to_num": (lambda x: x.nan_to_num(), None, -3, 3),
}

@pytest.mark.parametrize("name", list(UNARY))
def test_unary(device, name):
  tf, pf, lo, hi = UNARY[name]
  helper_test_op([(3, 4)], tf, pf, low=lo, high=hi)

# special values: forward vs torch, including the signed zero and the branches of the piecewise forms
SPECIAL = {
  "sinh": [0.0, -0.0, 1e-8, -1e-6, 0.3, 19.9, 20.1, -50.0, 89.0, 100.0, INF, -INF, NAN],
  "cosh": [0.0, 1e-8, 20.0, -89.0, 100.0, INF, -INF, NAN],
  "asinh": [0.0, -0.0, 1e-8, -1e-6, 1e9, -1e30, INF, -INF, NAN],
  "acosh": [1.0, 1.0 + 1e-6, 2.0, 1e9, 1e30, INF, 0.5, NAN],
  "atanh": [0.0, -0.0, 1e-8, 0.5, -0.999, 1.0, -1.0, 2.0, NAN],
  "asin": [0.0, -0.0, 1e-8, 0.5, 0.9999, 1.0, -1.0, 1.5, NAN],
  "acos": [0.0, 1e-8, 0.5, 0.9999, -0.9999, 1.0, -1.0, 1.5, NAN],
  "atan": [0.0, -0.0, 1e-8, 0.2, 0.4142, 1.0, -1.0, 3.0, 1e20, INF, -INF, NAN],
  "expm1": [0.0, -0.0, 1e-10, -1e-7, 0.2499, 0.25, -0.25, 1.0, 88.0, 89.0, -100.0, INF, -INF, NAN],
  "log1p": [0.0, -0.0, 1e-10, -1e-7, 0.2499, -0.25, 1.0, -1.0, -2.0, 1e30, INF, NAN],
  "frac": [0.0, -0.0, 2.5, -2.5, 1e10, INF, -INF, NAN],
  "isnan": [0.0, 1.0, INF, -INF, NAN],
  "isinf": [0.0, 1.0, INF, -INF, NAN],
  "isfinite": [0.0, 1.0, INF, -INF, NAN, 3e38],
  "isposinf": [0.0, INF, -INF, NAN],
  "isneginf": [0.0, INF, -INF, NAN],
  "signbit": [0.0, -0.0, 1.0, -1.0, INF, -INF],
  "nan_to_num": [0.0, 1.0, INF, -INF, NAN],
}

@pytest.mark.parametrize("name", list(SPECIAL))
def test_special_values(device, name):
  helper_test_op(None, lambda x: getattr(x, name)(), vals=[SPECIAL[name]], forward_only=True)

@pytest.mark.parametrize("name", ["sinh", "asinh", "atan", "expm1", "log1p", "atanh", "asin"])
def test_accuracy_near_zero_float64(device, name):
  # relative accuracy where the naive formula cancels
  v = [1e-12, -3e-9, 1e-5, -2e-4, 0.01, -0.1]
  helper_test_op(None, lambda x: getattr(x, name)(), vals=[v], dtype="float64", rtol=1e-13, atol=0)

def test_signed_zero_results(device):
  for name in ("sinh", "asinh", "atan", "atanh", "asin", "expm1", "log1p"):
    assert np.signbit(getattr(Tensor([-0.0]), name)().numpy()[0]), name

def test_grad_at_zero(device):
  # the odd functions keep derivative 1 at 0 (abs() would give 0 there)
  for name in ("sinh", "asinh", "atan", "atanh", "asin", "expm1", "log1p"):
    helper_test_op(None, lambda x: getattr(x, name)(), vals=[[0.0, -0.0]])

def test_unary_int_inputs(device):
  for name in ("sinh", "atan", "expm1", "log1p"):
    helper_test_op([(5,)], lambda x: getattr(x, name)(), dtype="int32", low=0, high=3)
  helper_test_op([(5,)], lambda x: x.isnan(), dtype="int32", low=0, high=3)
  helper_test_op([(5,)], lambda x: x.isinf(), dtype="int64", low=0, high=3)
  helper_test_op([(5,)], lambda x: x.isfinite(), dtype="uint8", low=0, high=3)
  helper_test_op([(5,)], lambda x: x.signbit(), dtype="int16", low=-3, high=3)
  with pytest.raises(TypeError, match=r"frac: needs a float tensor, got"): Tensor([1]).frac()

def test_unary_float16_and_shapes(device):
  helper_test_op([(2, 3)], lambda x: x.atan(), dtype="float16")
  helper_test_op([(2, 3)], lambda x: x.expm1(), dtype="float16")
  helper_test_op([(0, 3)], lambda x: x.asinh())
  helper_test_op([()], lambda x: x.log1p(), low=0, high=1)
  helper_test_op([(3, 2)], lambda x: x.T.sinh())

def test_isinf_flags(device):
  v = [[0.0, INF, -INF, NAN]]
  helper_test_op(None, lambda x: torch.isinf(x) & (x > 0), lambda x: x.isinf(True, False), vals=v, forward_only=True)
  helper_test_op(None, lambda x: torch.isinf(x) & (x < 0), lambda x: x.isinf(detect_positive=False), vals=v, forward_only=True)
  assert Tensor(v).isinf(False, False).tolist() == [[False] * 4]

def test_nan_to_num_args(device):
  v = [[0.5, INF, -INF, NAN]]
  helper_test_op(None, lambda x: x.nan_to_num(1.0, 2.0, -3.0), vals=v)
  helper_test_op(None, lambda x: x.nan_to_num(neginf=0.0), vals=v, dtype="float16")
  helper_test_op(None, lambda x: x.nan_to_num(), vals=v, dtype="float64")
  helper_test_op([(3,)], lambda x: x.nan_to_num(), dtype="int32")

# ------------------------------------------------------------------ two-argument ops

BINARY = {
  "atan2": (lambda x, y: torch.atan2(x, y), lambda x, y: x.atan2(y), -3, 3),
  "hypot": (lambda x, y: torch.hypot(x, y), lambda x, y: x.hypot(y), -3, 3),
  "copysign": (lambda x, y: torch.copysign(x, y), lambda x, y: x.copysign(y), -3, 3),
  "fmod": (lambda x, y: torch.fmod(x, y), lambda x, y: x.fmod(y), 0.5, 3),
  "xlogy": (lambda x, y: torch.xlogy(x, y), lambda x, y: x.xlogy(y), 0.1, 3),
  "lerp_tensor_weight": (lambda x, y: x.lerp(y, y / 4 + 0.5), lambda x, y: x.lerp(y, y / 4 + 0.5), -2, 2),
}

@pytest.mark.parametrize("name", list(BINARY))
def test_binary(device, name):
  tf, pf, lo, hi = BINARY[name]
  helper_test_op([(3, 4), (3, 4)], tf, pf, low=lo, high=hi)
  helper_test_op([(3, 1), (4,)], tf, pf, low=lo, high=hi)   # broadcasting

def test_fmod_signs_and_ints(device):
  helper_test_op(None, lambda x, y: torch.fmod(x, y), lambda x, y: x.fmod(y), vals=[[5.5, -5.5, 5.5, -5.5, 0.0], [2.0, 2.0, -2.0, -2.0, 3.0]])
  helper_test_op(None, lambda x, y: torch.fmod(x, y), lambda x, y: x.fmod(y), vals=[[7, -7, 7, -7], [3, 3, -3, -3]], dtype="int32")
  helper_test_op(None, lambda x: torch.fmod(x, 1.5), lambda x: x.fmod(1.5), vals=[[4.0, -4.0]])
  with pytest.raises(TypeError, match=r"fmod: not defined for bool"): Tensor([True]).fmod(Tensor([True]))

def test_idiv(device):
  helper_test_op(None, lambda x, y: torch.div(x, y, rounding_mode="trunc"), lambda x, y: x.idiv(y), vals=[[7, -7, 7, -7, 0], [2, 2, -2, -2, 5]],
                 dtype="int32")
  helper_test_op(None, lambda x: torch.div(x, 3, rounding_mode="trunc"), lambda x: x.idiv(3), vals=[[7, -7, 8, -8]], dtype="int64")
  helper_test_op(None, lambda x: torch.div(x, 2, rounding_mode="trunc"), lambda x: x.idiv(2), vals=[[7, 255, 0]], dtype="uint8")

def test_atan2_special(device):
  y = [0.0, -0.0, 0.0, -0.0, 1.0, -1.0, INF, INF, -INF, 1.0, 0.0, NAN, 1.0, -INF]
  x = [0.0, 0.0, -0.0, -0.0, 0.0, -0.0, INF, -INF, -INF, INF, -1.0, 1.0, NAN, 1.0]
  helper_test_op(None, lambda a, b: torch.atan2(a, b), lambda a, b: a.atan2(b), vals=[y, x], forward_only=True)
  helper_test_op(None, lambda a, b: torch.atan2(a, b), lambda a, b: a.atan2(b), vals=[[1e-30, 3.0, -2.0], [-1.0, -1e-20, -5.0]], dtype="float64",
                 rtol=1e-14, forward_only=True)

def test_hypot_special(device):
  a = [0.0, 3e38, 1e-40, INF, NAN, INF, 3.0]
  b = [0.0, 3e38, 1e-40, NAN, INF, 0.0, 4.0]
  helper_test_op(None, lambda x, y: torch.hypot(x, y), lambda x, y: x.hypot(y), vals=[a, b], forward_only=True)
  helper_test_op(None, lambda x, y: torch.hypot(x, y), lambda x, y: x.hypot(y), vals=[[1e30, 3.0], [1e30, -4.0]])   # no overflow in the gradient

def test_copysign_special(device):
  helper_test_op(None, lambda x, y: torch.copysign(x, y), lambda x, y: x.copysign(y), vals=[[1.0, 2.0, -3.0, INF, NAN], [-0.0, 0.0, INF, -1.0, -1.0]],
                 forward_only=True)
  helper_test_op(None, lambda x, y: torch.copysign(x, y), lambda x, y: x.copysign(y), vals=[[1, -2, 3], [-1, 1, 0]], dtype="int32")

def test_xlogy_special(device):
  helper_test_op(None, lambda x, y: torch.xlogy(x, y), lambda x, y: x.xlogy(y), vals=[[0.0, 0.0, 1.0, 2.0, 0.0], [0.0, NAN, 0.0, INF, INF]],
                 forward_only=True)
  helper_test_op(None, lambda x: torch.xlogy(x, 2.0), lambda x: x.xlogy(2.0), vals=[[0.0, 1.5]], forward_only=True)
  # gradient at x == 0 is 0 (torch's Tensor-other rule; its Scalar-other overload gives log(other) instead)
  helper_test_op(None, lambda x, y: torch.xlogy(x, y), lambda x, y: x.xlogy(y), vals=[[0.0, 1.5], [2.0, 2.0]])

def test_lerp(device):
  for w in (0.0, 0.5, 1.0, 1.5):
    helper_test_op([(3,), (3,)], lambda x, y: x.lerp(y, w))
  helper_test_op([(2, 3), (3,)], lambda x, y: x.lerp(y, 0.3))
  helper_test_op([(3,)], lambda x: torch.lerp(x, torch.tensor(2.0), 0.3), lambda x: x.lerp(2.0, 0.3))
  with pytest.raises(TypeError, match=r"lerp: needs float tensors"): Tensor([1]).lerp(Tensor([2]), 0.5)

# ------------------------------------------------------------------ norms, cross, cdist

@pytest.mark.parametrize("ord", [None, 1, 2, 3, 0.5, INF, -INF, 0])
def test_vector_norm(device, ord):
  helper_test_op([(3, 4)], lambda x: torch.linalg.norm(x, ord, dim=1), lambda x: x.norm(ord, dim=1), grad_atol=1e-4)
  helper_test_op([(3, 4)], lambda x: torch.linalg.norm(x, ord, dim=-2, keepdim=True), lambda x: x.norm(ord, dim=-2, keepdim=True), grad_atol=1e-4)

def test_norm_whole_tensor(device):
  helper_test_op([(2, 3, 2)], lambda x: x.norm())                      # torch.Tensor.norm: 2-norm of everything
  helper_test_op([(2, 3)], lambda x: torch.linalg.norm(x), lambda x: x.norm())
  helper_test_op([(2, 3)], lambda x: torch.linalg.vector_norm(x, 1), lambda x: x.norm(1))
  helper_test_op([(2, 3)], lambda x: x.norm(dim=(0, 1), keepdim=True), lambda x: x.norm(dim=(0, 1), keepdim=True))
  helper_test_op([(0,)], lambda x: torch.linalg.norm(x), lambda x: x.norm())
  helper_test_op([(4,)], lambda x: torch.linalg.norm(x.float()), lambda x: x.norm(), dtype="int32", low=-3, high=3)

@pytest.mark.parametrize("ord", ["fro", None, 1, -1, INF, -INF])
def test_matrix_norm(device, ord):
  helper_test_op([(2, 3, 4)], lambda x: torch.linalg.norm(x, ord, dim=(1, 2)), lambda x: x.norm(ord, dim=(1, 2)))
  helper_test_op([(3, 4)], lambda x: torch.linalg.norm(x, ord, dim=(1, 0), keepdim=True), lambda x: x.norm(ord, dim=(1, 0), keepdim=True))

@pytest.mark.parametrize("ord", ["nuc", 2, -2])
def test_matrix_norm_from_singular_values(ord):
  helper_test_op([(2, 3, 4)], lambda x: torch.linalg.norm(x, ord, dim=(1, 2)), lambda x: x.norm(ord, dim=(1, 2)), atol=1e-4, forward_only=True)
  helper_test_op([(3, 4)], lambda x: torch.linalg.norm(x, ord, dim=(1, 0), keepdim=True), lambda x: x.norm(ord, dim=(1, 0), keepdim=True),
                 atol=1e-4, forward_only=True)
  if ord == "nuc": helper_test_op([(3, 4)], lambda x: x.norm(p="nuc"), lambda x: x.norm("nuc"), atol=1e-4, forward_only=True)

def test_norm_errors(device):
  x = Tensor.ones(2, 3)
  with pytest.raises(ValueError, match=r"norm: ord 'nuc' needs a 2-D tensor or a pair of dims, got 1 dims"): Tensor.ones(3).norm("nuc")
  with pytest.raises(ValueError, match=r"norm: ord 'fro2' needs a pair of dims"): x.norm("fro2", dim=0)
  with pytest.raises(ValueError, match=r"norm: dims must differ"): x.norm(1, dim=(0, -2))
  with pytest.raises(IndexError, match=r"norm: axis 2 is out of range"): x.norm(1, dim=(0, 2))

def test_cross(device):
  helper_test_op([(4, 3), (4, 3)], lambda x, y: torch.linalg.cross(x, y), lambda x, y: x.cross(y))
  helper_test_op([(3, 2), (3, 1)], lambda x, y: torch.linalg.cross(x, y, dim=0), lambda x, y: x.cross(y, dim=0))
  helper_test_op([(1, 3), (2, 3)], lambda x, y: torch.linalg.cross(x, y), lambda x, y: x.cross(y))
  helper_test_op([(2, 3), (2, 3)], lambda x, y: torch.linalg.cross(x, y), lambda x, y: x.cross(y), dtype="int32", low=-4, high=4)
  with pytest.raises(ValueError, match=r"cross: dim 1 must have size 3, got 4"): Tensor.ones(2, 4).cross(Tensor.ones(2, 4))

@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, 3.0, INF])
def test_cdist(device, p):
  helper_test_op([(3, 2), (4, 2)], lambda x, y: torch.cdist(x, y, p), lambda x, y: x.cdist(y, p), grad_atol=1e-4)

def test_cdist_batched_and_errors(device):
  helper_test_op([(2, 3, 2), (2, 1, 2)], lambda x, y: torch.cdist(x, y), lambda x, y: x.cdist(y))
  helper_test_op([(2, 3, 2), (2, 0, 2)], lambda x, y: torch.cdist(x, y), lambda x, y: x.cdist(y))
  with pytest.raises(ValueError, match=r"cdist: the last dims differ: 2 and 3"): Tensor.ones(2, 2).cdist(Tensor.ones(2, 3))
  with pytest.raises(ValueError, match=r"cdist: both inputs need at least 2 dims"): Tensor.ones(2).cdist(Tensor.ones(2, 2))

# ------------------------------------------------------------------ docs/ops.md covers the whole public API

def test_ops_md_lists_every_public_name():
  import os, re
  path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "ops.md")
  with open(path, encoding="utf-8") as f: text = f.read()
  listed = set(re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \|", text, re.MULTILINE))
  missing = sorted(n for n in dir(Tensor) if not n.startswith("_") and n not in listed)
  assert not missing, f"docs/ops.md has no row for {missing}: run `python docs/gen_ops.py` and commit docs/ops.md"
