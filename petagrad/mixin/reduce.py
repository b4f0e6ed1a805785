"""Reductions: sum, prod, max/min, mean, var/std, any/all, argmax/argmin, logsumexp, softmax and log_softmax,
nansum/nanmean, count_nonzero. Each is one REDUCE_AXIS over the graph it reads (fused into one kernel with it)."""
from __future__ import annotations
import math
from typing import Any, NamedTuple
from petagrad.dtype import dtypes
from petagrad.helpers import prod
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp, sprod, smin
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import _fail, _resolve_axis, _dtype_arg, _is_int, axis_keywords

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
  @axis_keywords
  def prod(self, axis=None, keepdim: bool = False, dtype=None) -> Tensor:
    x = self.cast(_dtype_arg(dtype)) if dtype is not None else self
    if x.dtype.is_bool or (x.dtype.is_int and dtype is None): x = x.cast(dtypes.int64)
    return x._reduce(Ops.MUL, axis, keepdim, "prod")
  @axis_keywords
  def amax(self, axis=None, keepdim: bool = False) -> Tensor:
    """The maximum over `axis` (all by default; an int or a sequence of ints), a Tensor. The gradient is shared
    evenly by the elements that attain it, like torch.amax."""
    return self._reduce(Ops.MAX, axis, keepdim, "amax")
  @axis_keywords
  def amin(self, axis=None, keepdim: bool = False) -> Tensor:
    """The minimum over `axis` (all by default), a Tensor (torch.amin)."""
    if self.dtype.is_float: return -((-self)._reduce(Ops.MAX, axis, keepdim, "amin"))
    return self.bitwise_not()._reduce(Ops.MAX, axis, keepdim, "amin").bitwise_not()
  def max(self, *args, **kwargs):
    """The maximum, with PyTorch's and tinygrad's call forms:

    * `x.max()`, `x.max(axis=1)`, `x.max(axis=(0, 1), keepdim=True)`, `x.max((0, 1))`, `x.max(None)`: a Tensor of
      values (tinygrad's `axis=` keyword, an axis tuple, or no axis: as `amax`);
    * `x.max(1)`, `x.max(dim=1)`, `x.max(1, keepdim=True)`: `(values, indices)` (a namedtuple with `.values` and
      `.indices`, like torch.return_types.max); the index is the first maximum (a NaN counts as the maximum);
      the gradient goes to that element;
    * `x.max(other)` with a Tensor: the elementwise `maximum`, as torch.

    >>> Tensor([[1, 5, 2], [7, 0, 7]]).max(dim=1).indices.tolist()
    [1, 0]
    >>> Tensor([[1, 5, 2], [7, 0, 7]]).max(axis=1).tolist()
    [5, 7]
    """
    return self._extreme_call("max", args, kwargs)
  def min(self, *args, **kwargs):
    """The minimum, with the call forms of `max`: `x.min(1)` / `x.min(dim=1)` give `(values, indices)`,
    `x.min(axis=1)` and `x.min()` a Tensor, `x.min(other)` the elementwise `minimum`."""
    return self._extreme_call("min", args, kwargs)
  def _extreme_call(self, name: str, args: tuple, kwargs: dict):
    largest = name == "max"
    if args and isinstance(args[0], TensorMixin):   # torch.max(x, other): elementwise
      if len(args) > 1 or kwargs: raise _fail(TypeError, name, f"{name}(other) takes one Tensor and nothing else", self)
      return self.maximum(args[0]) if largest else self.minimum(args[0])
    if len(args) > 2: raise _fail(TypeError, name, f"takes at most 2 positional arguments (axis, keepdim), got {len(args)}", self)
    unknown = set(kwargs) - {"axis", "dim", "keepdim", "keepdims"}
    if unknown: raise _fail(TypeError, name, f"got an unexpected keyword argument {sorted(unknown)[0]!r}", self)
    if "keepdim" in kwargs and "keepdims" in kwargs: raise _fail(TypeError, name, "got both keepdim= and keepdims= (the same argument)", self)
    if "keepdims" in kwargs: kwargs["keepdim"] = kwargs.pop("keepdims")
    if len(args) == 2:
      if "keepdim" in kwargs: raise _fail(TypeError, name, "got keepdim twice (positional and keyword)", self)
      kwargs["keepdim"] = args[1]
    keepdim = kwargs.get("keepdim", False)
    if "axis" in kwargs and "dim" in kwargs: raise _fail(TypeError, name, "got both axis= and dim= (pass one)", self)
    if args and ("axis" in kwargs or "dim" in kwargs): raise _fail(TypeError, name, "got the axis twice (positional and keyword)", self)
    torch_form = "dim" in kwargs or (bool(args) and _is_int(args[0]))
    axis = args[0] if args else kwargs.get("dim", kwargs.get("axis"))
    if not torch_form or axis is None: return self.amax(axis, keepdim) if largest else self.amin(axis, keepdim)
    a, Result = _resolve_axis(name, axis, self.ndim, self), MaxResult if largest else MinResult
    if self.ndim == 0: return Result(self, type(self).zeros((), dtype=dtypes.default_int, device=self.device))
    if self.shape[a] == 0: self._check_extreme(name, axis, (a,))
    idx = self._arg_extreme(a, True, largest, name)
    n = self.shape[a]
    hit = type(self).arange(n, device=self.device).reshape((n,) + (1,) * (self.ndim - a - 1)) == idx
    vals = (hit & self).any(a, True) if self.dtype.is_bool else hit.where(self, 0).sum(a, True, dtype=self.dtype)   # the gradient goes to idx
    return Result(vals, idx) if keepdim else Result(vals.squeeze(a), idx.squeeze(a))
  @axis_keywords
  def nansum(self, axis=None, keepdim: bool = False, dtype=None) -> Tensor:
    """sum treating NaN as 0."""
    return (self.isnan().where(0, self) if self.dtype.is_float else self).sum(axis, keepdim, dtype)
  @axis_keywords
  def count_nonzero(self, dim=None) -> Tensor:
    """The number of nonzero elements (over dims `dim`, all by default), in dtypes.default_int (int64 unless
    DEFAULT_INT says otherwise: torch's int64, tinygrad's int32)."""
    return (self != 0).cast(dtypes.default_int).sum(dim, dtype=dtypes.default_int)

  # ------------------------------------------------------------ statistics
  @axis_keywords
  def mean(self, axis=None, keepdim: bool = False, dtype=None) -> Tensor:
    x = self._float("mean") if dtype is None else self.cast(_dtype_arg(dtype))
    # float16/bfloat16 divide in float32, like torch: the sum alone may overflow, and n may not fit (65504)
    if x.dtype in (dtypes.float16, dtypes.bfloat16): return x.float().mean(axis, keepdim).cast(x.dtype)
    n = prod(self.shape[a] for a in self._axes("mean", axis))
    s = x.sum(axis, keepdim)
    return s / n if n else s * float("nan")
  def _correction(self, name: str, axis, correction, unbiased):
    """var/std's arguments: torch's `unbiased=` (bool) or `correction=` (a number, None: 1), and torch's
    x.var(True) (a bool where the axis goes is `unbiased`). Returns (axis, correction)."""
    if isinstance(axis, bool):   # torch's var(unbiased) overload
      if unbiased is not None: raise _fail(TypeError, name, "got unbiased twice (positional and keyword)", self)
      axis, unbiased = None, axis
    if unbiased is not None:
      if not isinstance(unbiased, bool): raise _fail(TypeError, name, f"unbiased must be a bool, got {unbiased!r}", self)
      if correction not in (None, 1): raise _fail(TypeError, name, "give unbiased= or correction=, not both", self)
      return axis, int(unbiased)
    if correction is None: return axis, 1
    if isinstance(correction, bool) or not isinstance(correction, (int, float)):
      raise _fail(TypeError, name, f"correction must be a number, got {correction!r}", self)
    return axis, correction
  @axis_keywords
  def var(self, axis=None, keepdim: bool = False, correction=1, *, unbiased: bool | None = None) -> Tensor:
    """The variance: sum((x - mean)^2) / max(0, n - correction), like torch (inf where n <= correction and the
    sum of squares is > 0, NaN where it is 0: an empty or one-element reduction). `unbiased=False` is
    correction=0. The gradient is torch's, 2 * (x - mean) / (n - correction), also there."""
    axis, correction = self._correction("var", axis, correction, unbiased)
    x = self._float("var")
    if x.dtype in (dtypes.float16, dtypes.bfloat16): return x.float().var(axis, keepdim, correction).cast(x.dtype)   # as mean
    n = sprod(self.shape[a] for a in self._axes("var", axis))
    d = x - x.mean(axis, keepdim=True).detach()   # the mean's gradient term is 0: leave it out, as torch does
    ss = (d * d).sum(axis, keepdim)
    # a symbolic count: its value is known when the kernel runs, where ss / 0 is inf (NaN where ss is 0), as below
    if isinstance(n, UOp) and smin(n - correction) >= 0: return ss / (n - correction)
    if n - correction > 0: return ss / (n - correction)
    if n - correction == 0: return ss * math.inf   # ss / 0: inf, or NaN where ss is 0; the gradient 2d / 0 too
    # n < correction: torch divides the value by max(0, n - correction) = 0 but the gradient by n - correction
    s0 = ss.detach()
    return s0 * math.inf + (ss - s0) * (1 / (n - correction))
  @axis_keywords
  def std(self, axis=None, keepdim: bool = False, correction=1, *, unbiased: bool | None = None) -> Tensor:
    """sqrt(var) (see var); the gradient at a std of 0 is 0, like torch."""
    axis, correction = self._correction("std", axis, correction, unbiased)
    self._axes("std", axis)   # checked here so that a bad axis names std
    v = self.var(axis, keepdim, correction)
    return (v == 0).where(0.0, v).sqrt()
  @axis_keywords
  def var_mean(self, axis=None, keepdim: bool = False, correction=1, *, unbiased: bool | None = None) -> tuple[Tensor, Tensor]:
    """(var, mean), like torch.var_mean (same arguments as var)."""
    axis, correction = self._correction("var_mean", axis, correction, unbiased)
    return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  @axis_keywords
  def std_mean(self, axis=None, keepdim: bool = False, correction=1, *, unbiased: bool | None = None) -> tuple[Tensor, Tensor]:
    """(std, mean), like torch.std_mean (same arguments as std)."""
    axis, correction = self._correction("std_mean", axis, correction, unbiased)
    return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  @axis_keywords
  def nanmean(self, axis=None, keepdim: bool = False) -> Tensor:
    """mean over the non-NaN elements (NaN where all are NaN)."""
    x = self._float("nanmean")
    ok = x.isnan().logical_not()
    return ok.where(x, 0).sum(axis, keepdim) / ok.sum(axis, keepdim)

  # ------------------------------------------------------------ logical
  @axis_keywords
  def any(self, axis=None, keepdim: bool = False) -> Tensor:
    return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim, "any") if self.numel() else \
      self.cast(dtypes.bool).sum(axis, keepdim).cast(dtypes.bool)
  @axis_keywords
  def all(self, axis=None, keepdim: bool = False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()

  # ------------------------------------------------------------ arg extremes
  def _arg_extreme(self, axis, keepdim: bool, largest: bool, name: str) -> Tensor:
    if axis is None:
      if self.numel() == 0: raise _fail(IndexError, name, "cannot take the arg of an empty tensor; give the dim to reduce over", self)
      return self.flatten()._arg_extreme(0, False, largest, name).reshape(() if not keepdim else (1,) * self.ndim)
    a = _resolve_axis(name, axis, self.ndim, self)
    n = self.shape[a] if self.ndim else 1
    if n == 0: raise _fail(IndexError, name, f"expected reduction dim {a} to have non-zero size (no identity)", self)
    x = self.detach() if largest else (-self.detach() if self.dtype.is_float else self.detach().bitwise_not())
    # a computed float value is stored once: the max and the comparison below are two kernels, and each computing it
    # (the C compiler contracts a * b + c into one fused multiply-add in one and not the other) could give other bits,
    # so that no element equals the max and the index came out as n
    if x.dtype.is_float and x.uop.base.op is not Ops.BUFFER: x = x.contiguous()
    m = x.amax(a, keepdim=True)
    # first occurrence wins: score n-i at the extremes, take the max, turn it back into i
    rev = type(self).arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - a - 1))
    hit = (x == m) | ((x != x) & (m != m)) if x.dtype.is_float else (x == m)
    idx = n - hit.where(rev, 0).amax(a, keepdim=True)
    return (idx if keepdim else idx.squeeze(a)).cast(dtypes.default_int)
  @axis_keywords
  def argmax(self, axis=None, keepdim: bool = False) -> Tensor:
    """The index of the first maximum along `axis` (of the flattened tensor when None), in dtypes.default_int."""
    return self._arg_extreme(axis, keepdim, True, "argmax")
  @axis_keywords
  def argmin(self, axis=None, keepdim: bool = False) -> Tensor:
    """The index of the first minimum along `axis` (of the flattened tensor when None), in dtypes.default_int."""
    return self._arg_extreme(axis, keepdim, False, "argmin")

  # ------------------------------------------------------------ softmax
  @axis_keywords
  def softmax(self, axis: int = -1, dtype=None) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis` (3 kernels on a 2-D tensor)."""
    x = self._float("softmax") if dtype is None else self.cast(dtype)
    if any(self.shape[a] == 0 for a in self._axes("softmax", axis)): return x   # an empty dim: an empty result, like torch
    m = x.amax(axis, keepdim=True).detach()
    e = (x - m).exp()
    return e * e.sum(axis, keepdim=True).reciprocal()   # one division per row, a multiply per element (as torch)
  @axis_keywords
  def log_softmax(self, axis: int = -1, dtype=None) -> Tensor:
    x = self._float("log_softmax") if dtype is None else self.cast(dtype)
    if any(self.shape[a] == 0 for a in self._axes("log_softmax", axis)): return x   # an empty dim: an empty result, like torch
    m = x.amax(axis, keepdim=True).detach()
    s = x - m
    return s - s.exp().sum(axis, keepdim=True).log()
  @axis_keywords
  def logsumexp(self, axis=None, keepdim: bool = False) -> Tensor:
    x, axes = self._float("logsumexp"), self._axes("logsumexp", axis)
    # an empty reduction is log(0) = -inf, like torch (there is no max to shift by)
    if any(self.shape[a] == 0 for a in axes): return x.exp().sum(axis, keepdim).log()
    m = x.amax(axis, keepdim=True).detach()
    m = (m.abs() == float("inf")).where(0.0, m)
    out = (x - m).exp().sum(axis, keepdim=True).log() + m
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

class MaxResult(NamedTuple):
  """What x.max(dim) returns (torch.return_types.max): the values and the indices (dtypes.default_int)."""
  values: Any
  indices: Any
  def __repr__(self) -> str: return f"max(values={self.values!r}, indices={self.indices!r})"

class MinResult(NamedTuple):
  """What x.min(dim) returns (torch.return_types.min)."""
  values: Any
  indices: Any
  def __repr__(self) -> str: return f"min(values={self.values!r}, indices={self.indices!r})"
