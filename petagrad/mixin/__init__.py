"""The Tensor ops, in families: each module holds one mixin class that `petagrad.tensor.Tensor` inherits.

  elementwise.py  arithmetic and its operators, comparisons, logical and bitwise ops, casts, where, clip, pow,
                  rounding, remainders, nan/inf checks
  math.py         exp/log, trig, hyperbolic and their inverses, erf and other special functions
  activation.py   relu, gelu, sigmoid, softplus & co
  movement.py     reshape, permute, expand, pad (and its modes), shrink, flip, squeeze, cat, stack, split, repeat, roll,
                  unfold (the sliding window), rearrange, pad_to/shrink_to
  indexing.py     __getitem__/__setitem__, gather, scatter, index_*, masked ops, one_hot
  reduce.py       sum, mean, var, max, argmax, any/all, logsumexp, softmax
  linalg.py       matmul and the other products, einsum, norms, cross, cdist, attention
  creation.py     full/zeros/ones/arange/linspace/eye, *_like, new_*, meshgrid
  random.py       manual_seed, rand/randn/randint/uniform/normal, dropout, multinomial, initializers
  conv.py         sliding windows, convolution and its transpose, im2col (F.unfold) and fold
  pool.py         max/avg/adaptive pooling and unpooling, interpolate
  norm.py         layer/batch/instance/group/rms norm, normalize
  loss.py         cross entropy and the other losses
  ordering.py     sort, topk, cumulative scans, triangles and diagonals, unique, median/quantile, searchsorted
  args.py         the argument checks and the error helper shared by all of them and the core

A mixin never imports petagrad.tensor (test/unit/test_layering.py checks it). It is written against the primitives
the Tensor core provides, listed by the `Tensor` protocol below:

  * `self.uop`, `self.shape`, `self.dtype`, `self.device`, `self.ndim`, `self.numel()`, `self.requires_grad`: the
    tensor's graph node and what it says;
  * `self._new(uop, *parents)`: a tensor computed from self (and parents) as uop; the way every op makes its result;
  * `self._checked(ok, exc, op, msg, *operands)`: self with a data check that raises exc when it is computed;
  * `self._c(value, dtype)`: a constant node broadcast to self's shape;
  * `self.realize()`, `self.item()`, `self.tolist()`, `self.data()`, `self.contiguous()`, `self.detach()`,
    `self.assign(x)` (an in-place write), `self.replace(x)` (rebinds the tensor object to x's graph), `self.clone()`:
    computing, reading back and writing;
  * `type(self)` (and `cls` in the class methods) is the Tensor class: `type(self)(data, device=..., dtype=...)`
    makes a tensor (from Python data or a UOp), `type(self).full(...)`, `cls.arange(...)` & co the other ops;
  * `isinstance(x, TensorMixin)` asks whether x is a tensor (Tensor is the one class that combines the mixins).

Every other op a mixin calls (`self.reshape`, `x.sum()`, ...) is a method of another mixin, reached through self.
"""
from __future__ import annotations
from typing import Any, Protocol
from petagrad.dtype import DType
from petagrad.uop.uop import UOp

class TensorMixin:
  """The root of every op mixin: `isinstance(x, TensorMixin)` is how a mixin asks 'is x a Tensor'."""
  __slots__ = ()

class Tensor(Protocol):
  """The primitives of the Tensor core that the mixins build on (for annotations only: a mixin never instantiates
  or isinstance-checks this protocol; it uses type(self) and TensorMixin). At run time every op of every mixin is
  there too, through the class that combines them."""
  @property
  def uop(self) -> UOp: ...
  @property
  def shape(self) -> tuple[int, ...]: ...
  @property
  def dtype(self) -> DType: ...
  @property
  def device(self) -> str: ...
  @property
  def ndim(self) -> int: ...
  @property
  def requires_grad(self) -> bool | None: ...
  def numel(self) -> int: ...
  def _new(self, u: UOp, *parents: Tensor) -> Tensor: ...
  def _checked(self, ok: Tensor, exc: type[Exception], op: str, msg: str, *operands: Any) -> Tensor: ...
  def _c(self, x: Any, dtype: DType | None = None) -> UOp: ...
  def realize(self, *others: Tensor) -> Tensor: ...
  def item(self) -> Any: ...
  def tolist(self) -> Any: ...
  def data(self) -> memoryview: ...
  def contiguous(self) -> Tensor: ...
  def detach(self) -> Tensor: ...
  def clone(self) -> Tensor: ...
  def assign(self, x: Any) -> Tensor: ...
  def replace(self, x: Tensor) -> Tensor: ...
  def __getattr__(self, name: str) -> Any: ...   # the ops of the other mixins
