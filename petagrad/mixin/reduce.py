"""Reductions: sum, prod, max/min, mean, var/std, any/all, argmax/argmin, logsumexp, softmax and log_softmax,
nansum/nanmean, count_nonzero. Each is one REDUCE_AXIS over the graph it reads (fused into one kernel with it)."""
from __future__ import annotations
from petagrad.dtype import dtypes
from petagrad.helpers import prod
from petagrad.uop.ops import Ops
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import _fail, _resolve_axis, _dtype_arg, axis_keywords

class ReduceMixin(TensorMixin):
  __slots__ = ()

  # ------------------------------------------------------------ axes
  def _axes(self, op: str, axis) -> tuple[int, ...]:
    """A reduction's axis argument (None, an int or a sequence of ints) -> the dims it names, checked with op named:
    a non-int raises TypeError, an out-of-range one IndexError, a repeated one ValueError."""
    if axis is None: return tuple(range(self.ndim))
    axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)   # anything else is checked as one axis
    out = tuple(_resolve_axis(op, a, self.ndim, self) for a in axes)
    if len(set(out)) != len(out): raise _fail(ValueError, op, f"repeated axis in {axis}", self)
    return out if self.ndim else ()
  def _check_extreme(self, name: str, axis, axes: tuple[int, ...]) -> None:
    """max/min/argmax/argmin have no identity: an empty reduction raises like torch (IndexError for an empty dim,
    RuntimeError for a full reduction of an empty tensor)."""
    if axis is None and self.numel() == 0:
      raise _fail(RuntimeError, name, "cannot reduce an empty tensor (no identity); give the dim to reduce over", self)
    if (bad := next((a for a in axes if self.shape[a] == 0), None)) is not None:
      raise _fail(IndexError, name, f"expected reduction dim {bad} to have non-zero size (no identity)", self)
  def _reduce(self, op: Ops, axis, keepdim: bool, name: str) -> Tensor:
    axes = self._axes(name, axis)
    if op is Ops.MAX and 0 in self.shape: self._check_extreme(name, axis, axes)
    r = self.uop.reduce(op, axes)
    return self._new(r if keepdim else r.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes)), self)

  # ------------------------------------------------------------ sums and extremes
  @axis_keywords
  def sum(self, axis=None, keepdim: bool = False, dtype=None) -> Tensor:
    """Sum over `axis` (all by default). Ints and bools sum as int64; float16/bfloat16 accumulate in float32.

    >>> Tensor([[1, 2], [3, 4]]).sum(1).tolist()
    [3, 7]
    """
    x = self.cast(_dtype_arg(dtype)) if dtype is not None else self
    if x.dtype.is_bool or (x.dtype.is_int and dtype is None): x = x.cast(dtypes.int64 if not x.dtype.is_unsigned or x.dtype.itemsize < 8 else x.dtype)
    if x.dtype in (dtypes.float16, dtypes.bfloat16): return x.float()._reduce(Ops.ADD, axis, keepdim, "sum").cast(x.dtype)
    return x._reduce(Ops.ADD, axis, keepdim, "sum")
  def prod(self, axis=None, keepdim: bool = False, dtype=None) -> Tensor:
    x = self.cast(_dtype_arg(dtype)) if dtype is not None else self
    if x.dtype.is_bool or (x.dtype.is_int and dtype is None): x = x.cast(dtypes.int64)
    return x._reduce(Ops.MUL, axis, keepdim, "prod")
  def max(self, axis=None, keepdim: bool = False) -> Tensor: return self._reduce(Ops.MAX, axis, keepdim, "max")
  def min(self, axis=None, keepdim: bool = False) -> Tensor:
    if self.dtype.is_float: return -((-self)._reduce(Ops.MAX, axis, keepdim, "min"))
    return self.bitwise_not()._reduce(Ops.MAX, axis, keepdim, "min").bitwise_not()
  amax, amin = max, min
  def nansum(self, axis=None, keepdim: bool = False) -> Tensor:
    """sum treating NaN as 0."""
    return (self.isnan().where(0, self) if self.dtype.is_float else self).sum(axis, keepdim)
  def count_nonzero(self, dim=None) -> Tensor:
    """The number of nonzero elements (over dims `dim`, all by default), int64."""
    return (self != 0).cast(dtypes.int64).sum(dim)

  # ------------------------------------------------------------ statistics
  def mean(self, axis=None, keepdim: bool = False) -> Tensor:
    x = self._float("mean")
    # float16/bfloat16 divide in float32, like torch: the sum alone may overflow, and n may not fit (65504)
    if x.dtype in (dtypes.float16, dtypes.bfloat16): return x.float().mean(axis, keepdim).cast(x.dtype)
    n = prod(self.shape[a] for a in self._axes("mean", axis))
    s = x.sum(axis, keepdim)
    return s / n if n else s * float("nan")
  def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    x = self._float("var")
    if isinstance(correction, bool) or not isinstance(correction, (int, float)):
      raise _fail(TypeError, "var", f"correction must be a number, got {correction!r}", self)
    if x.dtype in (dtypes.float16, dtypes.bfloat16): return x.float().var(axis, keepdim, correction).cast(x.dtype)   # as mean
    n = prod(self.shape[a] for a in self._axes("var", axis))
    d = x - x.mean(axis, keepdim=True)
    return (d * d).sum(axis, keepdim) / max(n - correction, 0) if n - correction > 0 else (d * d).sum(axis, keepdim) * float("nan")
  def std(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    self._axes("std", axis)   # checked here so that a bad axis names std
    return self.var(axis, keepdim, correction).sqrt()
  def var_mean(self, axis=None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self, axis=None, keepdim: bool = False, correction: int = 1) -> tuple[Tensor, Tensor]:
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def nanmean(self, axis=None, keepdim: bool = False) -> Tensor:
    """mean over the non-NaN elements (NaN where all are NaN)."""
    x = self._float("nanmean")
    ok = x.isnan().logical_not()
    return ok.where(x, 0).sum(axis, keepdim) / ok.sum(axis, keepdim)

  # ------------------------------------------------------------ logical
  def any(self, axis=None, keepdim: bool = False) -> Tensor:
    return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim, "any") if self.numel() else \
      self.cast(dtypes.bool).sum(axis, keepdim).cast(dtypes.bool)
  def all(self, axis=None, keepdim: bool = False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()

  # ------------------------------------------------------------ arg extremes
  def _arg_extreme(self, axis, keepdim: bool, largest: bool, name: str) -> Tensor:
    if axis is None:
      if self.numel() == 0: raise _fail(IndexError, name, "cannot take the arg of an empty tensor; give the dim to reduce over", self)
      return self.flatten()._arg_extreme(0, False, largest, name).reshape(() if not keepdim else (1,) * self.ndim)
    a = _resolve_axis(name, axis, self.ndim, self)
    n = self.shape[a] if self.ndim else 1
    if n == 0: raise _fail(IndexError, name, f"expected reduction dim {a} to have non-zero size (no identity)", self)
    x = self if largest else (-self if self.dtype.is_float else self.bitwise_not())
    m = x.max(a, keepdim=True)
    # first occurrence wins: score n-i at the extremes, take the max, turn it back into i
    rev = type(self).arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - a - 1))
    hit = (x == m) | ((x != x) & (m != m)) if x.dtype.is_float else (x == m)
    idx = n - hit.where(rev, 0).max(a, keepdim=True)
    return (idx if keepdim else idx.squeeze(a)).cast(dtypes.int64)
  def argmax(self, axis=None, keepdim: bool = False) -> Tensor: return self._arg_extreme(axis, keepdim, True, "argmax")
  def argmin(self, axis=None, keepdim: bool = False) -> Tensor: return self._arg_extreme(axis, keepdim, False, "argmin")

  # ------------------------------------------------------------ softmax
  def softmax(self, axis: int = -1, dtype=None) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis` (3 kernels on a 2-D tensor)."""
    x = self._float("softmax") if dtype is None else self.cast(dtype)
    if any(self.shape[a] == 0 for a in self._axes("softmax", axis)): return x   # an empty dim: an empty result, like torch
    m = x.max(axis, keepdim=True).detach()
    e = (x - m).exp()
    return e * e.sum(axis, keepdim=True).reciprocal()   # one division per row, a multiply per element (as torch)
  def log_softmax(self, axis: int = -1, dtype=None) -> Tensor:
    x = self._float("log_softmax") if dtype is None else self.cast(dtype)
    if any(self.shape[a] == 0 for a in self._axes("log_softmax", axis)): return x   # an empty dim: an empty result, like torch
    m = x.max(axis, keepdim=True).detach()
    s = x - m
    return s - s.exp().sum(axis, keepdim=True).log()
  def logsumexp(self, axis=None, keepdim: bool = False) -> Tensor:
    x, axes = self._float("logsumexp"), self._axes("logsumexp", axis)
    # an empty reduction is log(0) = -inf, like torch (there is no max to shift by)
    if any(self.shape[a] == 0 for a in axes): return x.exp().sum(axis, keepdim).log()
    m = x.max(axis, keepdim=True).detach()
    m = (m.abs() == float("inf")).where(0.0, m)
    out = (x - m).exp().sum(axis, keepdim=True).log() + m
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))
