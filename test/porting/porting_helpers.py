"""Shared helpers for the porting suite: copy weights from torch, compare results, mark missing forms.

helper_test_op / compare (test/helpers.py) do the op-level checks; the helpers here serve whole programs,
where only values matter (a program's tensors are compared by value, shape first).
"""
from __future__ import annotations
from typing import Any
import numpy as np
import pytest
import torch
from petagrad import Tensor

def xf(reason: str, raises: Any = None):
  """strict xfail: the form named in `reason` is missing or differs today; the mark must go when it lands."""
  return pytest.mark.xfail(strict=True, reason=reason, **({"raises": raises} if raises is not None else {}))

def to_np(x: Any) -> np.ndarray:
  if isinstance(x, Tensor): return x.numpy()
  if isinstance(x, torch.Tensor): return x.detach().cpu().numpy()
  return np.asarray(x)

def pg_from(t: torch.Tensor | np.ndarray, requires_grad: bool | None = None) -> Tensor:
  """A petagrad Tensor with the same values as a torch tensor (via numpy, copied)."""
  out = Tensor(np.ascontiguousarray(to_np(t)).copy())
  if requires_grad is not None: out.requires_grad = requires_grad
  return out

def assert_close(name: str, pg: Any, tv: Any, atol: float = 1e-5, rtol: float = 1e-4) -> None:
  """Shape, then values (NaN equal to NaN)."""
  a, b = to_np(pg), to_np(tv)
  assert a.shape == b.shape, f"{name}: shape {a.shape} != torch {b.shape}"
  np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True, err_msg=f"{name}: values differ")

def copy_linear(dst: Any, src: torch.nn.Module) -> None:
  """torch Linear / Conv / norm module -> a petagrad layer with .weight / .bias of the same layout."""
  for n in ("weight", "bias"):
    t = getattr(src, n, None)
    if t is not None:
      p = pg_from(t, requires_grad=True)
      setattr(dst, n, p)

def copy_bn(dst: Any, src: torch.nn.Module) -> None:
  copy_linear(dst, src)
  for n in ("running_mean", "running_var"):
    if getattr(src, n, None) is not None and getattr(dst, n, None) is not None:
      getattr(dst, n).assign(pg_from(getattr(src, n))).realize()
