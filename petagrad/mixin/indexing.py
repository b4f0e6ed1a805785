"""Indexing: __getitem__ (basic and advanced), __setitem__, gather, scatter, index_*, masked ops, one_hot.

How tensor indices work: an index tensor `i` into a dim of size n becomes a one-hot comparison
`i[..., None] == arange(n)`, and the selected values are `where(onehot, x, 0).sum(that dim)`. This is
one reduce kernel, it can never read out of bounds, and its gradient comes from the same composition.
The price is O(len(i) * n) work per selected row instead of O(len(i)).

Index range rules (the same on every device; nothing ever reads or writes out of bounds):
  * valid indices: `-n <= i < n` for `x[i]`, `x[i] = v` and `take_along_dim` (negatives count from
    the end, like PyTorch); `0 <= i < n` for `gather`, `scatter`, `scatter_add`, `scatter_reduce` and
    `index_select` (PyTorch rejects negative indices there, and so does petagrad).
  * known indices raise: Python ints, lists, tuples and numpy arrays, and index Tensors whose values
    already sit in memory (made from Python data or realized, at most KNOWN_INDEX_LIMIT elements, seen
    through reshape/expand/permute/flip only) are checked at the call: an invalid one raises IndexError
    naming the op, the bad index, the dim and its size, the operands and the user's line.
  * other indices (computed by a kernel that has not run yet, bigger ones, or read inside a TinyJit
    function) get a data check (Ops.CHECK): the realize that computes anything from them also computes
    "every index is valid" and raises IndexError naming the op, the dim and its size, the operands and
    the user's line when one is not (after each JIT replay too). The kernels themselves still never read
    out of bounds: an invalid index matches no row of the one-hot.
  * boolean masks (`x[mask]`, `masked_select`, `nonzero`) have a data-dependent shape: the mask is
    realized (computed and read back) at the call to learn how many elements are selected.
"""
from __future__ import annotations
import math, operator
from typing import Any
from petagrad.dtype import dtypes
from petagrad.helpers import prod, flatten as flatten_list, NO_GRAD
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp, canonical, smin, smax
from petagrad.uop.graph import is_disk
from petagrad.engine.jit import jit_active
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import TensorIndexError, _fail, _is_tensor, _resolve_axis as _resolve, _scalar_arg, _check_fits, _broadcast_shape, _int_arg
from petagrad.mixin.args import axis_keywords, _is_intlike, _symbolic_int

def _fill(op: str, value: Any, t: Tensor) -> Any:
  """A scalar written into t: a number that fits t's dtype (no wrapping, like torch), checked with op named."""
  v = _scalar_arg(op, "value", value, t)
  _check_fits(op, v, t.dtype, True, t)
  return v

def _zero_of(dt) -> Any: return False if dt.is_bool else 0

def _value_tensor(op: str, value: Any, t: Tensor) -> Tensor:
  """A value written into t that is not a Tensor: a scalar (checked to fit t's dtype), or a (nested) Python list or
  numpy array (made a tensor on t's device, then cast to t's dtype like torch's x[i] = [1.5, 2])."""
  if isinstance(value, (list, tuple)) or (type(value).__module__ == "numpy" and getattr(value, "ndim", 0) > 0):
    return type(t)(value, device=t.device)
  return type(t).full((), _fill(op, value, t), t.dtype, t.device)

def _select_static(x: Tensor, m: Tensor, size: int, fill: Any) -> tuple[Tensor, Tensor]:
  """x (N,), mask m (N,) -> (out (size,), hit (size,)): the selected elements of x in order, then fill (selected
  elements past `size` are dropped); hit says which rows were selected. A compare with the running count of the mask
  (no realize: the shape never depends on the data)."""
  T = type(x)
  fillt = T.full((size,), fill, x.dtype, x.device)
  if size == 0 or x.shape[0] == 0: return fillt, T.full((size,), False, dtypes.bool, x.device)
  slot = m.cast(dtypes.int64).cumsum(0) - 1                                                     # (N,) where each selected element goes
  sel = m.unsqueeze(0) & (slot.unsqueeze(0) == T.arange(size, device=x.device).unsqueeze(1))   # (size, N), one True per row at most
  hit = sel.any(1)
  return hit.where(_pick(x.unsqueeze(0), sel, 1), fillt), hit

def _pick(x: Tensor, mask: Tensor, axis, keepdim: bool = False) -> Tensor:
  """Sum of x over `axis` where mask is True, in x's dtype (exact when at most one element is selected)."""
  if x.dtype.is_bool: return (mask & x).any(axis, keepdim)
  return mask.where(x, 0).sum(axis, keepdim, dtype=x.dtype if x.dtype.is_int else None)

def _onehot(idx: Tensor, n: int, wrap: bool = True) -> Tensor:
  """idx.shape + (n,) booleans: idx[..., None] == arange(n). With wrap, negative indices count from the
  end; an index outside the valid range matches nothing (an all-False row)."""
  i = idx.cast(dtypes.int64)
  if wrap and not idx.dtype.is_unsigned: i = (i < 0).where(i + n, i)
  return i.unsqueeze(-1) == type(idx).arange(n, device=idx.device)

# index Tensors with at most this many elements whose values are already in a buffer are checked at the call
KNOWN_INDEX_LIMIT = 1 << 12   # reading back and scanning 4096 values costs ~0.2 ms

def _known_range(t: Tensor) -> tuple[int, int] | None:
  """(min, max) of an integer index tensor whose values can be read without running a kernel: its node is
  a BUFFER (made from Python data, or realized) seen through value-preserving views. None otherwise."""
  vals = _known_values(t)
  return None if vals is None else (min(vals), max(vals))

def _known_values(t: Tensor) -> memoryview | tuple[int] | None:
  """The values (in buffer order, possibly repeated by views) of an integer tensor readable without a kernel: a
  buffer's, or a constant's (Tensor(5), Tensor.full(...))."""
  if not t.dtype.is_int or t.numel() == 0: return None
  u = t.uop
  while u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.FLIP): u = u.src[0]
  if u.op is Ops.CONST: return (u.arg,)
  buf = getattr(u, "buffer", None) if u.op is Ops.BUFFER else None
  if buf is None or not buf.is_allocated or not 0 < buf.size <= KNOWN_INDEX_LIMIT: return None
  if jit_active: return None   # a jitted function's inputs change between calls
  return memoryview(buf.as_bytes()).cast(t.dtype.fmt)

def _checked_index(op: str, index: Tensor, n: int, dim: int, negative_ok: bool, *operands: Any,
                   known: tuple[int, int] | None = None) -> Tensor:
  """index, checked against the valid range of a dim of size n (-n <= i < n when negative_ok, else 0 <= i < n):
  known values (`known`, or read from memory here) raise IndexError at the call; other indices get a data check,
  so computing anything from them raises IndexError naming the op and the user's line (in JIT replays too)."""
  lo = -n if negative_ok else 0
  rng = known if known is not None else _known_range(index)
  if rng is not None:
    bad = rng[0] if rng[0] < lo else rng[1] if rng[1] >= n else None
    if bad is None: return index
    why = f" ({op} takes no negative indices, like PyTorch)" if bad < 0 and -n <= bad else ""
    raise _fail(IndexError, op, f"index {bad} is out of bounds for dim {dim} with size {n}{why}", *operands)
  if not index.numel(): return index
  i = index.cast(dtypes.int64)   # n may not fit the index's own dtype
  ok = i < n if index.dtype.is_unsigned else (i >= lo) & (i < n)
  # TensorIndexError: the error raised when the check fails is an IndexError and a RuntimeError, as one raised at the call
  return index._checked(ok, TensorIndexError, op, f"an index is out of bounds for dim {dim} with size {n} (valid: {lo} <= index < {n})", *operands)

def _mask_positions(mask: Tensor) -> list[int]:
  """Realize a mask and return the flat positions of its True elements (row-major)."""
  raw = bytes((mask if mask.dtype.is_bool else mask.ne(0)).cast(dtypes.uint8).contiguous().data())
  return [i for i, b in enumerate(raw) if b]

def _list_to_index(op: str, x: Any, self: Tensor) -> Tensor:
  """A (nested) Python list or numpy array used as an index -> int64 or bool Tensor."""
  T = type(self)
  if type(x).__module__ == "numpy": x = x.tolist()
  flat = x
  while isinstance(flat, (list, tuple)) and flat and isinstance(flat[0], (list, tuple)): flat = [a for b in flat for a in b]
  if isinstance(flat, (list, tuple)) and not flat:
    shape = []
    y = x
    while isinstance(y, (list, tuple)):
      shape.append(len(y))
      if not y: break
      y = y[0]
    return T.zeros(*shape, dtype=dtypes.int64, device=self.device), None
  for v in flat:
    if _is_tensor(v): raise _fail(TypeError, op, "a list of Tensors is not a valid index; use Tensor.stack", self)
    if not isinstance(v, (int, bool)) and not (type(v).__module__ == "numpy" and hasattr(v, "dtype") and v.dtype.kind in "iub"):
      raise _fail(IndexError, op, f"list indices must be ints or bools, got {type(v).__name__}", self)
  if all(isinstance(v, bool) or (type(v).__module__ == "numpy" and v.dtype.kind == "b") for v in flat):
    return T(x, dtype=dtypes.bool, device=self.device), None
  vals = [int(v) for v in flat] if isinstance(flat, (list, tuple)) else [int(flat)]
  return T(x, dtype=dtypes.int64, device=self.device), (min(vals), max(vals))

def _basic_plan(op: str, self: Tensor, items: list) -> list:
  """items: ints, slices and None covering every dim of self. Returns one entry per item:
  None (new axis), ('int', i) or ('slice', lo, n, step, flipped) with lo the smallest selected position."""
  plan, dim = [], 0
  for i in items:
    if i is None: plan.append(None); continue
    size = self.shape[dim]
    if isinstance(i, int):
      if not -size <= i < size: raise _fail(IndexError, op, f"index {i} is out of bounds for dim {dim} with size {size}", self)
      plan.append(("int", i % size))
    elif isinstance(i, UOp) or isinstance(size, UOp) and not isinstance(i, int) or any(isinstance(b, UOp) for b in (i.start, i.stop)):
      plan.append(_symbolic_item(op, self, i, dim, size))
    else:
      if i.step == 0: raise _fail(ValueError, op, "slice step cannot be zero", self)
      try: start, stop, step = i.indices(size)
      except TypeError: raise _fail(TypeError, op, f"slice bounds must be ints or None, got {i!r}", self) from None
      if step > 0:
        n = max(0, math.ceil((stop - start) / step))
        plan.append(("slice", start if n else 0, n, step, False))
      else:
        n = max(0, math.ceil((start - stop) / -step))
        plan.append(("slice", start - (n - 1) * -step if n else 0, n, -step, True))
    dim += 1
  return plan

def _symbolic_item(op: str, self: Tensor, i: Any, dim: int, size: int) -> tuple:
  """A plan entry for an index or a slice of step 1 whose bounds are expressions over bound Variables (x[v], x[v:v + 4]):
  it must select the same number of elements for every value, inside the dim for every value in the Variables' ranges."""
  if isinstance(i, UOp): start, stop = i, i + 1
  else:
    if i.step not in (None, 1): raise _fail(ValueError, op, f"a slice by a Variable needs step 1, got {i.step}", self)
    start, stop = (0 if i.start is None else i.start), (size if i.stop is None else i.stop)
    for b in (start, stop):
      if not isinstance(b, UOp) and not _is_intlike(b): raise _fail(TypeError, op, f"slice bounds must be ints or None, got {i!r}", self)
      if not isinstance(b, UOp) and b < 0 and not isinstance(size, UOp):
        raise _fail(ValueError, op, f"a slice by a Variable takes no negative bounds, got {i!r}", self)
    # (an int bound of a dim of symbolic size: a negative one counts from its end)
    start, stop = (canonical(size + b) if isinstance(size, UOp) and isinstance(b, int) and b < 0 else b for b in (start, stop))
  n = canonical(stop - start)   # a symbolic length (x[:v]) is a symbolic size
  lo, hi = smin(start), smax(stop)
  if lo < 0 or hi > smax(size) or smin(n) < 0:
    raise _fail(IndexError, op, f"index from {lo} to {hi} over the Variables' ranges is out of bounds for dim {dim} with size {size}", self)
  return ("int", start) if isinstance(i, UOp) else ("slice", start, n, 1, False)

def _apply_plan(x: Tensor, plan: list) -> Tensor:
  """Basic indexing: shrink, flip, stride (pad + reshape + shrink) and reshape. Views only."""
  dims = [p for p in plan if p is not None]
  shrink = [(p[1], p[1] + 1) if p[0] == "int" else (p[1], p[1] + (p[2] - 1) * p[3] + 1) if p[2] else (0, 0) for p in dims]
  x = x.shrink(shrink)
  flips = [d for d, p in enumerate(dims) if p[0] == "slice" and p[4]]
  if flips: x = x.flip(flips)
  strides = [p[3] if p[0] == "slice" else 1 for p in dims]
  if any(s != 1 for s in strides):
    # stride s: pad each dim to a multiple of s, split it into (n, s), keep index 0 of the s part
    x = x.pad([(0, (-sz) % s) for sz, s in zip(x.shape, strides)])
    x = x.reshape(flatten_list([(sz // s, s) for sz, s in zip(x.shape, strides)]))
    x = x.shrink(flatten_list([((0, sz), (0, 1)) for sz in x.shape[0::2]]))
  return x.reshape(tuple(1 if p is None else p[2] for p in plan if p is None or p[0] == "slice"))

def _unapply_plan(v: Tensor, plan: list, shape: tuple[int, ...]) -> Tensor:
  """The inverse of _apply_plan: put v (shaped like the indexing result) into a zero tensor of `shape`."""
  dims = [p for p in plan if p is not None]
  v = v.reshape(tuple(1 if p[0] == "int" else p[2] for p in dims))
  flips = [d for d, p in enumerate(dims) if p[0] == "slice" and p[4]]
  if flips: v = v.flip(flips)
  strides = [p[3] if p[0] == "slice" else 1 for p in dims]
  if any(s != 1 for s in strides):
    v = v.reshape(flatten_list([(sz, 1) for sz in v.shape]))
    v = v.pad(flatten_list([((0, 0), (0, s - 1)) for s in strides]))
    v = v.reshape(tuple(a * b for a, b in zip(v.shape[0::2], v.shape[1::2])))
    v = v.shrink([(0, (sz // s - 1) * s + 1) for sz, s in zip(v.shape, strides)])
  return v.pad([(p[1], size - p[1] - vs) for p, vs, size in zip(dims, v.shape, shape)])

class IndexingMixin(TensorMixin):
  __slots__ = ()

  def _parse_index(self, idx, op: str = "getitem"):
    """Normalize an index into (basic plan items, [(dim in the basic result, index tensor)]).

    Masks become one index tensor per mask dim (realizing the mask); Python bools become a new axis
    indexed by [0] (True) or [] (False), like PyTorch."""
    if isinstance(idx, list) and len(idx) < 32 and \
       any(isinstance(i, (list, tuple, slice)) or i is None or i is Ellipsis or _is_tensor(i) for i in idx):
      idx = tuple(idx)   # PyTorch (and old numpy): a short list holding sequences, slices, None or tensors is a tuple
    if not isinstance(idx, tuple): idx = (idx,)
    items: list = []   # None, Ellipsis, int, slice, ("adv", T, newaxis), ("mask", T)
    for i in idx:
      if type(i).__module__ == "numpy" and hasattr(i, "dtype") and getattr(i, "ndim", 1) == 0: i = i.item()
      elif type(i) is not int and _is_intlike(i) and type(i).__module__ != "numpy": i = operator.index(i)   # an int subclass, an int-like object
      static = None
      if isinstance(i, (list, tuple)) or (type(i).__module__ == "numpy" and hasattr(i, "dtype")):
        i, static = _list_to_index(op, i, self)
      if isinstance(i, bool):
        items.append(("adv", type(self)([0] if i else [], dtype=dtypes.int64, device=self.device).reshape(1 if i else 0), True))
      elif i is None or i is Ellipsis or isinstance(i, (int, slice)) or _symbolic_int(op, i, self): items.append(i)
      elif isinstance(i, TensorMixin):
        if i.device != self.device: raise _fail(RuntimeError, op, f"index is on {i.device}, tensor on {self.device}", self, i)
        if i.dtype.is_bool: items.append(("mask", i) if i.ndim else ("mask0", i))
        elif i.dtype.is_int: items.append(("adv", i, False, static))
        else: raise _fail(IndexError, op, f"tensors used as indices must be integer or bool tensors, got {i.dtype}", self, i)
      else: raise _fail(TypeError, op, f"unsupported index {i!r}", self)
    def consumed(i) -> int:
      if i is None or i is Ellipsis: return 0
      if isinstance(i, tuple): return i[1].ndim if i[0] == "mask" else 0 if i[0] == "mask0" or i[2] else 1
      return 1
    n_real = sum(consumed(i) for i in items)
    if len(ell := [k for k, i in enumerate(items) if i is Ellipsis]) > 1:
      # torch: every '...' skips the dims no index names, so a second one is harmless when there are none to skip or
      # nothing follows it (x[..., ...], x[..., 0, ...]) and indexes past the last dim otherwise
      if n_real < self.ndim and any(i is not Ellipsis for i in items[ell[1]:]):
        raise _fail(IndexError, op, "indices can only have a single ellipsis ('...'); a second one may only end the index", self)
      items = [i for k, i in enumerate(items) if k not in ell[1:]]
    if n_real > self.ndim: raise _fail(IndexError, op, f"too many indices ({n_real}) for a {self.ndim}-d tensor", self)
    if Ellipsis in [i for i in items if not isinstance(i, tuple)]:
      e = next(k for k, i in enumerate(items) if i is Ellipsis)
      items = items[:e] + [slice(None)] * (self.ndim - n_real) + items[e + 1:]
    else: items = items + [slice(None)] * (self.ndim - n_real)
    basic, adv, dim, out_dim = [], [], 0, 0
    for i in items:
      if isinstance(i, tuple) and i[0] == "mask0":
        i = ("adv", type(self)([0] if i[1].item() else [], dtype=dtypes.int64, device=self.device).reshape(1 if i[1].item() else 0), True)
      if isinstance(i, tuple) and i[0] == "mask":
        m = i[1]
        if m.shape != self.shape[dim:dim + m.ndim]:
          raise _fail(IndexError, op,
            f"the shape of the mask {m.shape} does not match the shape {self.shape[dim:dim + m.ndim]} of the indexed dims starting at dim {dim}",
            self, m)
        pos = _mask_positions(m)
        strides = [prod(m.shape[k + 1:]) for k in range(m.ndim)]
        for k in range(m.ndim):
          adv.append((out_dim, type(self)([(p // strides[k]) % m.shape[k] for p in pos] if pos else [], dtype=dtypes.int64,
                                          device=self.device).reshape(len(pos))))
          basic.append(slice(None)); dim += 1; out_dim += 1
      elif isinstance(i, tuple):
        t = i[1]
        if i[2]: basic.append(None)
        else:
          size = self.shape[dim]
          known = i[3] if len(i) > 3 and i[3] is not None else _known_range(t)
          if known is None and size == 0 and t.numel(): raise _fail(IndexError, op, f"index is out of bounds for dim {dim} with size 0", self, t)
          t = _checked_index(op, t, size, dim, True, self, t, known=known)
          basic.append(slice(None)); dim += 1
        adv.append((out_dim, t)); out_dim += 1
      else:
        basic.append(i)
        if i is not None: dim += 1
        if not isinstance(i, (int, UOp)): out_dim += 1
    return basic, adv

  def __getitem__(self, idx) -> Tensor:
    """Indexing like PyTorch: ints, slices (any step), None, Ellipsis, int tensors and lists (negative
    indices count from the end), boolean masks, and any mix of them. Advanced indices that are next
    to each other keep their place in the result; separated ones (by a slice or None) go first.

    >>> Tensor.arange(10)[8:2:-3].tolist()
    [8, 5]
    >>> Tensor([[1, 2], [3, 4]])[[1, 0], [0, 0]].tolist()
    [3, 1]

    Out-of-range tensor indices raise IndexError (see the module doc); a mask is realized to count its elements.
    """
    basic, adv = self._parse_index(idx, "getitem")
    plan = _basic_plan("getitem", self, basic)
    y = _apply_plan(self, plan)
    if not adv: return y
    return _advanced(y, adv, "getitem")

  def __setitem__(self, idx, value) -> None:
    """`x[idx] = value`: value (a Tensor or Python scalar) is broadcast to x[idx].shape and written
    into x in place. With duplicate tensor indices the last write wins (like PyTorch on the CPU).
    Basic indices with unit steps write straight into the buffer view; other indices build the new
    value with where/one-hot (O(len(idx) * numel) for tensor indices) and assign it."""
    if is_disk(self.device): self[idx].assign(value); return   # into the file, through the view's bytes
    basic, adv = self._parse_index(idx, "setitem")
    plan = _basic_plan("setitem", self, basic)
    target_shape = _advanced_shape(_apply_plan(self, plan), adv) if adv else _apply_plan(self, plan).shape
    v = value if isinstance(value, TensorMixin) else _value_tensor("setitem", value, self)
    if v.device != self.device: raise _fail(RuntimeError, "setitem", f"value is on {v.device}, tensor on {self.device}", self, v)
    while v.ndim > len(target_shape) and v.shape[0] == 1: v = v.reshape(v.shape[1:])
    try: v = v.cast(self.dtype)._broadcast_to(tuple(target_shape), "setitem")
    except ValueError:
      raise _fail(ValueError, "setitem", f"value of shape {v.shape} cannot be broadcast to the indexed shape {tuple(target_shape)}",
                  self, v) from None
    if prod(target_shape) == 0: return
    # a value that needs grad: the write is recorded (self becomes where(mask, value, self), as torch's autograd sees an
    # in-place write); views of self made before do not see it then
    grad = bool(v.requires_grad) and not NO_GRAD.value
    if not adv:
      view = _apply_plan(self, plan)
      simple = all(p is None or p[0] == "int" or p[3] == 1 for p in plan)
      movement = []
      u = self.uop
      while u.op not in (Ops.BUFFER,) and u.src and u.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.EXPAND, Ops.PAD):
        movement.append(u.op); u = u.src[0]
      if simple and not grad and self.uop.base.op is Ops.BUFFER and Ops.EXPAND not in movement and Ops.PAD not in movement:
        view.assign(v)
        return
      mask = _unapply_plan(type(self).full(v.shape, True, dtypes.bool, self.device), plan, self.shape)
      new = mask.where(_unapply_plan(v, plan, self.shape), self)
    else:
      n = self.numel()
      pos = type(self).arange(1, n + 1, device=self.device).reshape(self.shape)[idx].flatten() - 1   # -1: selects nothing
      new = _scatter_flat(self.flatten(), pos, v.flatten(), last_wins=True).reshape(self.shape)
    if grad: self.replace(new)
    else: self.assign(new)

  @axis_keywords
  def gather(self, dim: int, index: Tensor, sparse_grad: bool = False) -> Tensor:
    """out[i][j] = self[index[i][j]][j] for dim=0 (torch.gather). index has self's number of dims and
    index.size(d) <= self.size(d) for d != dim. Valid indices are 0 <= i < self.size(dim): an invalid
    index raises IndexError (at the call when it is known, else when the result is computed: see the module doc).

    >>> Tensor([[1, 2], [3, 4]]).gather(1, Tensor([[1, 1], [0, 1]])).tolist()
    [[2, 2], [3, 4]]

    Keywords: `dim=` (or tinygrad's/numpy's `axis=`), `index=`; torch's `sparse_grad` is accepted (the gradient is dense).
    """
    return _gather(self, dim, index, "gather", wrap=False)

  @axis_keywords
  def take_along_dim(self, indices: Tensor, dim: int | None = None) -> Tensor:
    """torch.take_along_dim: gather with broadcasting of the non-`dim` dims (dim=None: flat). Negative
    indices count from the end (like PyTorch here).

    >>> Tensor([[10, 30, 20]]).take_along_dim(Tensor([[1, -1]]), 1).tolist()
    [[30, 20]]
    """
    if not isinstance(indices, TensorMixin) or not indices.dtype.is_int:
      raise _fail(TypeError, "take_along_dim", "indices must be an integer Tensor", self, indices)
    if dim is None: return _gather(self.flatten(), 0, indices.flatten(), "take_along_dim", wrap=True, user=self)
    if indices.ndim != self.ndim: raise _fail(ValueError, "take_along_dim", f"indices must have {self.ndim} dims, got {indices.ndim}", self, indices)
    d = _resolve("take_along_dim", dim, self.ndim, self)
    shape = []
    for k, (a, b) in enumerate(zip(self.shape, indices.shape)):
      if k == d: continue
      if a != b and a != 1 and b != 1:
        raise _fail(ValueError, "take_along_dim", f"shapes {self.shape} and {indices.shape} are not broadcastable outside dim {d}", self, indices)
      shape.append(max(a, b) if a and b else 0)
    xs = tuple(shape[:d]) + (self.shape[d],) + tuple(shape[d:])
    is_ = tuple(shape[:d]) + (indices.shape[d],) + tuple(shape[d:])
    return _gather(self.expand(xs), d, indices.expand(is_), "take_along_dim", wrap=True, user=self)

  @axis_keywords
  def index_select(self, dim: int, index: Tensor) -> Tensor:
    """Select entries of `dim` at the positions in the 0-d or 1-D `index` (torch.index_select). Valid
    indices are 0 <= i < self.size(dim) (an invalid one raises IndexError: see the module doc).

    >>> Tensor([[1, 2, 3]]).index_select(1, Tensor([2, 0])).tolist()
    [[3, 1]]
    """
    if not isinstance(index, TensorMixin) or not index.dtype.is_int or index.ndim > 1:
      raise _fail(TypeError, "index_select", "index must be a 0-d or 1-D integer Tensor", self, index)
    if index.device != self.device: raise _fail(RuntimeError, "index_select", f"index is on {index.device}, tensor on {self.device}", self, index)
    x = self.reshape(1) if self.ndim == 0 else self
    d = _resolve("index_select", dim, x.ndim, self)
    n = x.shape[d]
    index = _checked_index("index_select", index, n, d, False, self, index)
    if n == 0 and index.numel(): raise _fail(IndexError, "index_select", f"index is out of bounds for dim {d} with size 0", self, index)
    out = _advanced(x, [(d, index.reshape(-1))], "index_select", wrap=False)
    return out.reshape(index.shape) if self.ndim == 0 else out

  def _index_along(self, op: str, dim: int, index: Tensor, like: tuple[int, ...] | None, negative_ok: bool) -> tuple[int, Tensor]:
    """Checks for index_add/index_copy/index_fill; returns (dim, index expanded to `like` along dim for scatter)."""
    if not isinstance(index, TensorMixin) or not index.dtype.is_int or index.ndim > 1:
      raise _fail(TypeError, op, "index must be a 0-d or 1-D integer Tensor", self, index)
    if index.device != self.device: raise _fail(RuntimeError, op, f"index is on {index.device}, tensor on {self.device}", self, index)
    d = _resolve(op, dim, self.ndim, self) if self.ndim else 0
    n = self.shape[d] if self.ndim else 1
    index = _checked_index(op, index, n, d, negative_ok, self, index)
    idx = index.reshape(-1)
    if negative_ok and not idx.dtype.is_unsigned: idx = (idx < 0).where(idx + n, idx)
    m = idx.shape[0]
    shape = like if like is not None else tuple(m if k == d else s for k, s in enumerate(self.shape))
    return d, idx.reshape(tuple(m if k == d else 1 for k in range(len(shape)))).expand(shape)

  def index_add(self, dim: int, index: Tensor, source: Tensor, alpha=1) -> Tensor:
    """Out-of-place torch.index_add: self with alpha * source[i] added at position index[i] along dim
    (duplicates add up). Valid indices: 0 <= i < self.size(dim).

    >>> Tensor.zeros(3).index_add(0, Tensor([0, 2, 0]), Tensor([1.0, 2.0, 3.0])).tolist()
    [4.0, 0.0, 2.0]
    """
    if not isinstance(source, TensorMixin): raise _fail(TypeError, "index_add", f"source must be a Tensor, got {type(source).__name__}", self, index)
    m = index.numel() if isinstance(index, TensorMixin) else 0
    want = tuple(m if k == (_resolve("index_add", dim, self.ndim, self) if self.ndim else 0) else s for k, s in enumerate(self.shape))
    if source.shape != want and not (self.ndim == 0 and source.numel() == 1):
      raise _fail(ValueError, "index_add", f"source must have shape {want}, got {source.shape}", self, index, source)
    if self.ndim == 0: return self.reshape(1).index_add(0, index, source.reshape(1), alpha).reshape(())
    d, idx = self._index_along("index_add", dim, index, source.shape, False)
    return self.scatter_reduce(d, idx, source * alpha if alpha != 1 else source, "sum")

  def index_copy(self, dim: int, index: Tensor, source: Tensor) -> Tensor:
    """Out-of-place torch.index_copy: self with self[index[i]] = source[i] along dim (duplicates: the last wins)."""
    if not isinstance(source, TensorMixin): raise _fail(TypeError, "index_copy", f"source must be a Tensor, got {type(source).__name__}", self, index)
    if self.ndim == 0: return self.reshape(1).index_copy(0, index, source.reshape(1)).reshape(())
    m = index.numel() if isinstance(index, TensorMixin) else 0
    want = tuple(m if k == _resolve("index_copy", dim, self.ndim, self) else s for k, s in enumerate(self.shape))
    if source.shape != want: raise _fail(ValueError, "index_copy", f"source must have shape {want}, got {source.shape}", self, index, source)
    d, idx = self._index_along("index_copy", dim, index, source.shape, False)
    return self.scatter(d, idx, source)

  def index_fill(self, dim: int, index: Tensor, value) -> Tensor:
    """Out-of-place torch.index_fill: the positions index along dim set to value (a scalar or 0-d tensor).
    Negative indices count from the end (like torch here)."""
    if isinstance(value, TensorMixin):
      if value.ndim: raise _fail(ValueError, "index_fill", f"value must be a 0-d tensor, got shape {value.shape}", self, value)
    if self.ndim == 0: return self.reshape(1).index_fill(0, index, value).reshape(())
    d, idx = self._index_along("index_fill", dim, index, None, True)
    hit = _onehot(idx.flatten() if idx.ndim else idx, self.shape[d], wrap=False).any(0) if idx.numel() else None
    if hit is None: return self
    hit = hit.reshape(tuple(self.shape[d] if k == d else 1 for k in range(self.ndim)))
    v = value.cast(self.dtype) if isinstance(value, TensorMixin) else type(self).full((), _fill("index_fill", value, self), self.dtype, self.device)
    return hit.where(v, self)

  def masked_fill(self, mask: Tensor, value) -> Tensor:
    """Where mask is True, `value` (a scalar or 0-d tensor), else self. Keeps self's dtype."""
    if not isinstance(mask, TensorMixin) or not mask.dtype.is_bool: raise _fail(TypeError, "masked_fill", "mask must be a bool Tensor", self, mask)
    if isinstance(value, TensorMixin):
      if value.ndim: raise _fail(ValueError, "masked_fill", f"value must be a 0-d tensor, got shape {value.shape}", self, value)
      value = value.cast(self.dtype)
    else: value = type(self).full((), _fill("masked_fill", value, self), self.dtype, self.device)
    out = mask.where(value, self)
    if out.shape != self.shape: raise _fail(ValueError, "masked_fill", f"mask of shape {mask.shape} does not broadcast to {self.shape}", self, mask)
    return out

  def masked_select(self, mask: Tensor, size: int | None = None, fill_value=0) -> Tensor:
    """The elements where mask (broadcast with self) is True, as a 1-D tensor (torch.masked_select). Realizes the mask
    to count them. With `size` (tinygrad's and jax's static shape): exactly `size` elements, the selected ones in order,
    then fill_value (more selected than size: the first size); nothing is realized, so it works inside TinyJit.

    >>> Tensor([1, 2, 3, 4]).masked_select(Tensor([True, False, True, False]), size=3, fill_value=-1).tolist()
    [1, 3, -1]
    """
    if not isinstance(mask, TensorMixin) or not mask.dtype.is_bool: raise _fail(TypeError, "masked_select", "mask must be a bool Tensor", self, mask)
    shape = _broadcast_shape("masked_select", self, mask)
    x, m = self.expand(shape), mask.expand(shape)
    if size is not None:
      size = _int_arg("masked_select", "size", size, self)
      return _select_static(x.flatten() if shape else x.reshape(1), m.flatten() if shape else m.reshape(1), size,
                            _fill("masked_select", fill_value, self))[0]
    return x.flatten()[m.flatten()] if shape else x.reshape(1)[m.reshape(1)]

  def nonzero(self, size: int | None = None, fill_value=0, *, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """Coordinates of the nonzero elements, shape (count, ndim), in dtypes.default_int (torch.nonzero: int64; tinygrad:
    int32). Realizes self to count them. as_tuple=True: one (count,) tensor per dim. With `size` (tinygrad's form,
    torch.nonzero_static): exactly `size` rows, then rows of fill_value; nothing is realized (works inside TinyJit).

    >>> Tensor([[1, 0], [0, 2]]).nonzero().tolist()
    [[0, 0], [1, 1]]
    >>> Tensor([1, 0, 2]).nonzero(size=3, fill_value=-1).tolist()
    [[0], [2], [-1]]
    """
    T, dt = type(self), dtypes.default_int
    mask = self if self.dtype.is_bool else self.ne(0)
    if size is not None:
      size = _int_arg("nonzero", "size", size, self)
      fill = _scalar_arg("nonzero", "fill_value", fill_value, self)
      _check_fits("nonzero", fill, dt, True, self)
      if self.ndim == 0: cols: list = []
      else:
        n = self.numel()
        flat, hit = _select_static(T.arange(n, device=self.device).cast(dtypes.int64), mask.flatten(), size, 0)
        cols = [hit.where((flat // prod(self.shape[k + 1:])) % self.shape[k], fill).cast(dt) for k in range(self.ndim)]
      if as_tuple: return tuple(cols)
      if not cols: return T.zeros(size, 0, dtype=dt, device=self.device)
      return T.stack(cols, dim=1)
    pos = _mask_positions(mask.reshape(1) if self.ndim == 0 else mask)
    n = len(pos)
    flat = T(pos, dtype=dt, device=self.device) if n else T.zeros(0, dtype=dt, device=self.device)
    cols = [(flat // prod(self.shape[k + 1:])) % self.shape[k] for k in range(self.ndim)]
    if as_tuple: return tuple(cols) if self.ndim else (T.zeros(n, dtype=dt, device=self.device),)
    if not cols: return T.zeros(n, 0, dtype=dt, device=self.device)
    return T.stack([c.reshape(n) for c in cols], dim=1)
  def nonzero_static(self, size: int, fill_value=-1) -> Tensor:
    """torch.nonzero_static: nonzero(size=size, fill_value=fill_value), with torch's default fill_value of -1."""
    return self.nonzero(size, fill_value)
  argwhere = nonzero

  @axis_keywords
  def scatter(self, dim: int, index: Tensor, src=None, reduce: str | None = None, *, value=None) -> Tensor:
    """Out-of-place torch.scatter: self with self[index[i][j]][j] = src[i][j] (dim=0). `src` may be a
    scalar (torch's `value=`). With duplicate indices the last one wins (torch leaves it unspecified); like torch's, the
    gradient of every src element is the gradient at its target, overwritten or not.
    reduce='add'|'multiply' (a Tensor src or a scalar) like torch (deprecated there) and tinygrad: scatter_reduce's
    'sum'/'prod' with include_self. Valid indices: 0 <= i < self.size(dim).

    >>> Tensor.zeros(4).scatter(0, Tensor([3, 0]), Tensor([1.0, 2.0])).tolist()
    [2.0, 0.0, 0.0, 1.0]
    >>> Tensor.full((4,), 2.0).scatter(0, Tensor([1, 1]), 3.0, reduce="add").tolist()
    [2.0, 8.0, 2.0, 2.0]
    """
    if value is not None:
      if src is not None: raise _fail(TypeError, "scatter", "got both src and value= (pass one)", self)
      src = value
    if src is None: raise _fail(TypeError, "scatter", "missing the values to scatter (src, or value=)", self)
    if reduce is not None:
      if reduce not in ("add", "multiply"): raise _fail(ValueError, "scatter", f"reduce must be 'add' or 'multiply', got {reduce!r}", self)
      return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod", include_self=True)
    return _scatter(self, dim, index, src, "scatter", None, True)

  @axis_keywords
  def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor:
    """Out-of-place torch.scatter_add: src values added at their index along dim (duplicates add up)."""
    return _scatter(self, dim, index, src, "scatter_add", "sum", True)

  @axis_keywords
  def scatter_reduce(self, dim: int, index: Tensor, src, reduce: str, include_self: bool = True) -> Tensor:
    """Out-of-place torch.scatter_reduce: reduce ('sum', 'prod', 'mean', 'amax', 'amin') the src values
    that go to the same place, together with self's value there when include_self. Gradients follow
    torch: amax/amin share the gradient evenly among self and the src values equal to the result.

    >>> Tensor([1.0, 1.0]).scatter_reduce(0, Tensor([1, 1, 0]), Tensor([5.0, 2.0, 3.0]), "sum").tolist()
    [4.0, 8.0]
    """
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise _fail(ValueError, "scatter_reduce", f"reduce must be one of 'sum', 'prod', 'mean', 'amax', 'amin', got {reduce!r}", self)
    return _scatter(self, dim, index, src, "scatter_reduce", reduce, include_self)

  def one_hot(self, num_classes: int = -1) -> Tensor:
    """One-hot vectors along a new last dim, in dtypes.default_int (torch's int64; tinygrad's int32 under
    DEFAULT_INT=int32); num_classes=-1: max + 1, which realizes self.
    Values outside [0, num_classes) raise IndexError when they are known at the call (see the index rules
    in petagrad/mixin/indexing.py) and give an all-zero row when they are lazy.

    >>> Tensor([0, 2]).one_hot(3).tolist()
    [[1, 0, 0], [0, 0, 1]]
    """
    if not self.dtype.is_int: raise _fail(TypeError, "one_hot", f"needs an integer tensor, got {self.dtype}", self)
    num_classes = _int_arg("one_hot", "num_classes", num_classes, self, None)
    if num_classes == -1: num_classes = int(self.max().item()) + 1 if self.numel() else 0
    if num_classes < 0: raise _fail(ValueError, "one_hot", f"num_classes must be >= 0 or -1, got {num_classes}", self)
    known = _known_range(self)   # values already in memory: checked like an index (torch raises), others when computed
    if known is not None and (known[0] < 0 or known[1] >= num_classes):
      bad = known[0] if known[0] < 0 else known[1]
      raise _fail(IndexError, "one_hot", f"class value {bad} is out of range for num_classes={num_classes}", self)
    x = self.cast(dtypes.int64)
    if known is None and self.numel():
      x = x._checked((x >= 0) & (x < num_classes), TensorIndexError, "one_hot", f"a class value is out of range for num_classes={num_classes}", self)
    return (x.unsqueeze(-1) == type(self).arange(num_classes, device=self.device)).cast(dtypes.default_int)


def _gather(self: Tensor, dim: int, index: Tensor, op: str, wrap: bool, user: Tensor | None = None) -> Tensor:
  """gather along dim; wrap: negative indices count from the end. `user` is the tensor named in errors."""
  me = self if user is None else user
  if not isinstance(index, TensorMixin) or not index.dtype.is_int: raise _fail(TypeError, op, "index must be an integer Tensor", me, index)
  if index.device != self.device: raise _fail(RuntimeError, op, f"index is on {index.device}, tensor on {self.device}", me, index)
  if index.ndim != self.ndim and not (self.ndim == 0 and index.ndim <= 1):
    raise _fail(ValueError, op, f"index must have as many dims as the input ({self.ndim}), got {index.ndim}", me, index)
  x = self.reshape((1,) * (index.ndim - self.ndim) + self.shape) if self.ndim == 0 else self
  d = _resolve(op, dim, x.ndim, me)
  for k, (a, b) in enumerate(zip(index.shape, x.shape)):
    if k != d and a > b: raise _fail(ValueError, op, f"index size {a} > input size {b} in dim {k}", me, index)
  n = x.shape[d]
  index = _checked_index(op, index, n, d, wrap, me, index)
  if n == 0 and index.numel(): raise _fail(IndexError, op, f"index is out of bounds for dim {d} with size 0", me, index)
  x = x.shrink(tuple((0, s) if k != d else (0, n) for k, s in enumerate(index.shape)))
  # oh: index.shape[:d+1] + (n,) + index.shape[d+1:]
  oh = _onehot(index, n, wrap).reshape(index.shape + (n,)).permute(*range(d + 1), index.ndim, *range(d + 1, index.ndim))
  return _pick(x.unsqueeze(d), oh, d + 1).reshape(index.shape)

def _advanced_shape(y: Tensor, adv: list) -> tuple[int, ...]:
  B = _broadcast_shape("getitem", *[t for _, t in adv])
  pos = [p for p, _ in adv]
  R = tuple(s for k, s in enumerate(y.shape) if k not in pos)
  if pos == list(range(pos[0], pos[0] + len(pos))): return R[:pos[0]] + B + R[pos[0]:]
  return B + R

def _advanced(y: Tensor, adv: list, op: str, wrap: bool = True) -> Tensor:
  """Apply tensor indices: adv is [(dim of y, int index tensor)], each dim of y indexed at most once."""
  B = _broadcast_shape(op, *[t for _, t in adv])
  pos = [p for p, _ in adv]
  rest = [k for k in range(y.ndim) if k not in pos]
  R = tuple(y.shape[k] for k in rest)
  k, nb = len(pos), len(B)
  yp = y.permute(*pos, *rest).reshape((1,) * nb + tuple(y.shape[p] for p in pos) + R)
  mask = None
  for j, (p, t) in enumerate(adv):
    n = y.shape[p]
    oh = _onehot(t._broadcast_to(B, op) if t.shape != B else t, n, wrap)     # B + (n,)
    oh = oh.reshape(B + (1,) * j + (n,) + (1,) * (k - j - 1) + (1,) * len(R))
    mask = oh if mask is None else mask & oh
  assert mask is not None
  out = _pick(yp, mask, tuple(range(nb, nb + k)))   # B + R
  if pos == list(range(pos[0], pos[0] + k)) and pos[0] > 0:   # adjacent: B takes their place
    q = pos[0]
    order = list(range(nb, nb + q)) + list(range(nb)) + list(range(nb + q, nb + len(R)))
    out = out.permute(order)
  return out

def _scatter_flat(x: Tensor, pos: Tensor, v: Tensor, last_wins: bool) -> Tensor:
  """x (N,) with x[pos[j]] = v[j]; duplicates: the largest j wins. pos out of [0, N) writes nothing."""
  T = type(x)
  n, m = x.shape[0], pos.shape[0]
  if m == 0 or n == 0: return x
  oh = pos.unsqueeze(1) == T.arange(n, device=x.device)          # (m, n)
  j1 = T.arange(1, m + 1, device=x.device).unsqueeze(1)          # (m, 1)
  win = oh.where(j1, 0).amax(0)                                    # (n,), 0: nobody writes here
  val = _pick(v.unsqueeze(1), oh & (j1 == win), 0)
  return (win > 0).where(val, x)

def _scatter(self: Tensor, dim: int, index: Tensor, src, op: str, reduce: str | None, include_self: bool) -> Tensor:
  if not isinstance(index, TensorMixin) or not index.dtype.is_int: raise _fail(TypeError, op, "index must be an integer Tensor", self, index)
  if index.device != self.device: raise _fail(RuntimeError, op, f"index is on {index.device}, tensor on {self.device}", self, index)
  if index.ndim != self.ndim: raise _fail(ValueError, op, f"index must have as many dims as self ({self.ndim}), got {index.ndim}", self, index)
  d = _resolve(op, dim, self.ndim, self) if self.ndim else 0
  if self.ndim == 0:
    return _scatter(self.reshape(1), 0, index.reshape(1), src.reshape(1) if isinstance(src, TensorMixin) else src, op, reduce,
                    include_self).reshape(())
  if isinstance(src, TensorMixin):
    if src.device != self.device: raise _fail(RuntimeError, op, f"src is on {src.device}, self on {self.device}", self, index, src)
    if src.dtype != self.dtype:   # torch: "scatter(): Expected self.dtype to be equal to src.dtype"
      raise _fail(TypeError, op, f"Expected self.dtype to be equal to src.dtype (self {self.dtype}, src {src.dtype})", self, index, src)
    if src.ndim != self.ndim: raise _fail(ValueError, op, f"src must have as many dims as self ({self.ndim}), got {src.ndim}", self, index, src)
    for k, (a, b) in enumerate(zip(index.shape, src.shape)):
      if a > b: raise _fail(ValueError, op, f"index size {a} > src size {b} in dim {k}", self, index, src)
    src = src.shrink(tuple((0, s) for s in index.shape)).cast(self.dtype)
  else:   # a Python scalar: every index writes (or reduces in) that value, as torch's scatter(dim, index, value, reduce=)
    src = type(self).full(index.shape, _fill(op, src, self), self.dtype, self.device)
  for k, (a, b) in enumerate(zip(index.shape, self.shape)):
    if k != d and a > b: raise _fail(ValueError, op, f"index size {a} > self size {b} in dim {k}", self, index)
  n = self.shape[d]
  index = _checked_index(op, index, n, d, False, self, index)
  if index.numel() == 0: return self
  if n == 0: raise _fail(IndexError, op, f"index is out of bounds for dim {d} with size 0", self, index)
  # oh[..., j (dim d), ..., k]: index[..., j, ...] == k; moved so that k sits right after dim d
  oh = _onehot(index, n, wrap=False).permute(*range(d + 1), index.ndim, *range(d + 1, index.ndim))   # I[:d+1] + (n,) + I[d+1:]
  s = src.unsqueeze(d + 1)
  hit = oh.any(d, keepdim=True)                                    # I[:d] + (1, n) + I[d+1:]
  if reduce is None:
    jj = type(self).arange(1, index.shape[d] + 1, device=self.device).reshape((index.shape[d],) + (1,) * (index.ndim - d))
    win = oh.where(jj, 0).amax(d, keepdim=True)
    val = _pick(s, oh & (jj == win), d, keepdim=True)
    # torch's gradient: every src element gets the gradient of its target, also the ones a duplicate overwrote
    if s.dtype.is_float: val = val + (oh & (jj != win)).where(_zero_value(s), 0).sum(d, keepdim=True)
  elif reduce in ("sum", "mean"):
    val = oh.where(s, 0).sum(d, keepdim=True, dtype=self.dtype if not self.dtype.is_bool else None)
  elif reduce == "prod":
    val = oh.where(s, 1).prod(d, keepdim=True, dtype=self.dtype if not self.dtype.is_bool else None)
  else:
    lo = self.dtype.min if reduce == "amax" else self.dtype.max
    val = oh.where(s, lo).amax(d, keepdim=True) if reduce == "amax" else oh.where(s, lo).amin(d, keepdim=True)
  # I[:d] + (1, n) + I[d+1:] -> n in dim d, then pad the other dims up to self's sizes
  val = val.squeeze(d)
  hit = hit.squeeze(d)
  pads = [(0, 0) if k == d else (0, s - i) for k, (s, i) in enumerate(zip(self.shape, index.shape))]
  val, hit = val.pad(pads), hit.pad(pads, value=False)
  if reduce is None: return hit.where(val, self)
  if reduce == "mean":
    cnt = oh.cast(dtypes.int64).sum(d).pad(pads)
    num = (val + self) if include_self else val
    den = (cnt + 1) if include_self else cnt
    out = num / den if self.dtype.is_float else num.div(den, rounding_mode="floor")
    return hit.where(out.cast(self.dtype), self)
  if reduce in ("sum", "prod"):
    if not include_self: return hit.where(val.cast(self.dtype), self)
    return hit.where((self + val if reduce == "sum" else self * val).cast(self.dtype), self)
  res = (self.maximum(val) if reduce == "amax" else self.minimum(val)) if include_self else val
  if not self.dtype.is_float: return hit.where(res, self)
  # torch's gradient: the result's gradient is shared evenly among self and the src elements equal to it (self
  # counts in the share even with include_self=False, where its own part is then dropped)
  R = hit.where(res, self).detach()
  Rs = R.shrink(tuple((0, n) if k == d else (0, i) for k, i in enumerate(index.shape))).unsqueeze(d)   # I[:d] + (1, n) + I[d+1:]
  src_eq = s.detach() == _pick(Rs, oh, d + 1, keepdim=True)                                        # I[:d+1] + (1,) + I[d+1:]
  cnt_src = (oh & src_eq).cast(self.dtype).sum(d).pad(pads)
  part_src = (oh & src_eq).where(_zero_value(s), 0).sum(d).pad(pads)
  eq_self = self.detach() == R
  part_self = (eq_self & hit.logical_not()).where(_zero_value(self), 0) if not include_self else eq_self.where(_zero_value(self), 0)
  share = (eq_self.cast(self.dtype) + cnt_src).maximum(1)
  return hit.where(R + (part_self + part_src) / share, self)

def _zero_value(t: Tensor) -> Tensor:
  """0 with gradient 1 with respect to t (where t is finite): routes a gradient without changing a value."""
  td = t.detach()
  return (td - td == 0).where(t - td, 0)
