"""Indexing: __getitem__ (basic and advanced), __setitem__, gather, scatter, masked ops."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any, Sequence
from petagrad.dtype import dtypes
from petagrad.helpers import prod, argfix, flatten as flatten_list
if TYPE_CHECKING: from petagrad.tensor import Tensor

def _fail(*a, **k):
  from petagrad.tensor import _fail as f
  return f(*a, **k)

class IndexingMixin:
  __slots__ = ()
  def __getitem__(self, idx) -> Tensor:
    """Basic indexing: ints, slices (any step, negative too), None and Ellipsis.

    >>> type(self).arange(10)[8:2:-3].tolist()
    [8, 5]
    """
    if not isinstance(idx, tuple): idx = (idx,)
    for i in idx:
      if isinstance(i, (IndexingMixin, list)): raise _fail(NotImplementedError, "getitem", "tensor/list indices are not supported yet", self)
      if not (i is None or i is Ellipsis or isinstance(i, (int, slice))) or isinstance(i, bool):
        raise _fail(TypeError, "getitem", f"unsupported index {i!r}", self)
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if sum(1 for i in idx if i is Ellipsis) > 1: raise _fail(IndexError, "getitem", "only one Ellipsis is allowed", self)
    if n_real > self.ndim: raise _fail(IndexError, "getitem", f"too many indices ({n_real}) for a {self.ndim}-d tensor", self)
    if Ellipsis in idx:
      e = idx.index(Ellipsis)
      idx = idx[:e] + (slice(None),) * (self.ndim - n_real) + idx[e + 1:]
    else: idx = idx + (slice(None),) * (self.ndim - n_real)
    x, dim, final_shape, flips = self, 0, [], []
    shrink, strides = [], []
    for i in idx:
      if i is None: final_shape.append(1); continue
      size = self.shape[dim]
      if isinstance(i, int):
        if not -size <= i < size: raise _fail(IndexError, "getitem", f"index {i} is out of bounds for dim {dim} with size {size}", self)
        i %= size
        shrink.append((i, i + 1)); strides.append(1); flips.append(False)
      else:
        if i.step == 0: raise _fail(ValueError, "getitem", "slice step cannot be zero", self)
        start, stop, step = i.indices(size)
        if step > 0:
          n = max(0, math.ceil((stop - start) / step))
          shrink.append((start, start + (n - 1) * step + 1) if n else (0, 0)); flips.append(False)
        else:
          n = max(0, math.ceil((start - stop) / -step))
          shrink.append((start - (n - 1) * -step, start + 1) if n else (0, 0)); flips.append(True)
        strides.append(abs(step))
        final_shape.append(n)
      dim += 1
    x = x.shrink(shrink)
    if any(flips): x = x.flip([d for d, f in enumerate(flips) if f])
    if any(s != 1 for s in strides):
      # stride s: pad each dim to a multiple of s, split it into (n, s), keep index 0 of the s part
      pads = [(0, (-sz) % s) for sz, s in zip(x.shape, strides)]
      x = x.pad(pads)
      x = x.reshape(flatten_list([(sz // s, s) for sz, s in zip(x.shape, strides)]))
      x = x.shrink(flatten_list([((0, sz), (0, 1)) for sz in x.shape[0::2]]))
    return x.reshape(tuple(final_shape))

