"""Movement ops: reshape, permute, expand, pad (constant and the reflect/replicate/circular modes), shrink, flip,
squeeze, cat, stack, split, repeat, roll, rot90. Views: they never copy (index math in the kernel that reads them),
except repeat_interleave with per-element repeats, which gathers.
"""
from __future__ import annotations
import math, operator
from typing import Any, Sequence
from petagrad.dtype import dtypes, promote
from petagrad.helpers import prod, argfix, flatten as flatten_list
from petagrad.uop.uop import UOp, canonical, smin, smax, sprod, sdiv_exact
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import Scalar, _fail, _resolve_axis, _unique_dims, _is_intlike, _check_fits, _shape_arg, _int_arg, _scalar_arg, \
  _tensor_arg, axis_keywords, _symbolic_int

class MovementMixin(TensorMixin):
  __slots__ = ()

  # ------------------------------------------------------------ shapes
  def _broadcast_to(self, shape: tuple[int, ...], op: str = "expand", *others) -> Tensor:
    if self.shape == shape: return self
    if len(shape) < self.ndim: raise _fail(ValueError, op, f"cannot broadcast shape {self.shape} to {shape}", self, *others)
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    for s, n in zip(padded, shape):
      if s != n and s != 1: raise _fail(ValueError, op, f"shapes are not broadcastable: {self.shape} to {shape}", self, *others)
    return self._new(self.uop.reshape(padded).expand(shape), self)
  def reshape(self, *shape) -> Tensor:
    """Same elements, new shape; one dimension may be -1, and None keeps the input's size of that dim (tinygrad).

    >>> Tensor.arange(6).reshape(2, -1).shape
    (2, 3)
    """
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)): shape = tuple(shape[0])
    if any(s is None for s in shape):   # tinygrad: None keeps that dim
      if any(s is None for s in shape[self.ndim:]):
        raise _fail(ValueError, "reshape", f"None at dim >= {self.ndim} in {shape}: no input dim to keep", self)
      shape = tuple(self.shape[i] if s is None else s for i, s in enumerate(shape))
    shape = _shape_arg("reshape", shape, self, wildcard=True, name="shape", symbolic=True)
    if shape.count(-1) > 1: raise _fail(ValueError, "reshape", f"only one dimension can be -1, got {shape}", self)
    if -1 in shape:
      rest = sprod(s for s in shape if not (isinstance(s, int) and s == -1))
      # (symbolic sizes divide when the quotient is a size: (4*v) / 4 is v, (8*v) / v is 8)
      n = sdiv_exact(self.numel(), rest)
      if n is None: raise _fail(ValueError, "reshape", f"cannot reshape {self.shape} into {shape}", self)
      shape = tuple(n if isinstance(s, int) and s == -1 else s for s in shape)
    if sprod(shape) is not self.numel() and sprod(shape) != self.numel():
      raise _fail(ValueError, "reshape", f"cannot reshape {self.shape} ({self.numel()} elements) into {shape}", self)
    return self._new(self.uop.reshape(tuple(shape)), self)
  view = reshape
  def expand(self, *shape) -> Tensor:
    """Broadcast size-1 dims to a bigger size (-1 keeps a dim). No copy."""
    shape = _shape_arg("expand", shape, self, wildcard=True, symbolic=True)
    if len(shape) < self.ndim: raise _fail(ValueError, "expand", f"cannot expand {self.shape} to fewer dims {shape}", self)
    if -1 in shape[:len(shape) - self.ndim]: raise _fail(ValueError, "expand", f"-1 is not allowed in a new leading dim: {shape}", self)
    full = (1,) * (len(shape) - self.ndim) + self.shape
    new = tuple(f if s == -1 else s for s, f in zip(shape, full))
    return self._broadcast_to(new, "expand")
  def expand_as(self, other: Tensor) -> Tensor: return self.expand(_tensor_arg("expand_as", "other", other, self).shape)
  def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = set(_unique_dims("squeeze", tuple(dim) if isinstance(dim, (tuple, list)) else (dim,), self.ndim, self))
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))
  def unsqueeze(self, dim: int) -> Tensor:
    d = _resolve_axis("unsqueeze", dim, self.ndim + 1, self)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0: return self.reshape(1)
    s, e = _resolve_axis("flatten", start_dim, self.ndim, self), _resolve_axis("flatten", end_dim, self.ndim, self)
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
    """Split dim into `sizes` (one of them may be -1), like torch.unflatten."""
    d = _resolve_axis("unflatten", dim, self.ndim, self)
    sizes = _shape_arg("unflatten", tuple(sizes) if isinstance(sizes, (tuple, list)) else (sizes,), self, wildcard=True, name="sizes", symbolic=True)
    if not sizes: raise _fail(ValueError, "unflatten", "sizes must be non-empty", self)
    n, known = self.shape[d], prod(s for s in sizes if s != -1)
    if sizes.count(-1) > 1 or (known != n if -1 not in sizes else known == 0 or n % known):
      raise _fail(ValueError, "unflatten", f"sizes {sizes} do not multiply up to the size {n} of dim {d}", self)
    return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])

  # ------------------------------------------------------------ axis order and direction
  def permute(self, *order) -> Tensor:
    order = argfix(*order)
    if len(order) != self.ndim: raise _fail(ValueError, "permute", f"order {order} does not match {self.ndim} dims", self)
    norm = _unique_dims("permute", order, self.ndim, self)
    return self._new(self.uop.permute(norm), self)
  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    order = list(range(self.ndim))
    if self.ndim == 0: return self
    a, b = _resolve_axis("transpose", dim0, self.ndim, self), _resolve_axis("transpose", dim1, self.ndim, self)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  @property
  def T(self) -> Tensor: return self.permute(tuple(reversed(range(self.ndim))))
  def t(self) -> Tensor:
    """The transpose of a matrix (a 0-d or 1-d tensor is returned as is), like torch.Tensor.t."""
    if self.ndim > 2: raise _fail(ValueError, "t", f"expects a tensor with at most 2 dims, got {self.ndim}-d", self)
    return self.transpose(0, 1) if self.ndim == 2 else self
  @property
  def mT(self) -> Tensor:
    """The last two dims swapped (a batch of matrices transposed)."""
    if self.ndim < 2: raise _fail(ValueError, "mT", f"needs at least 2 dims, got shape {self.shape}", self)
    return self.transpose(-2, -1)
  mH = mT   # no complex dtypes: the conjugate transpose is the transpose
  def flip(self, *axis, dims=None, dim=None, **kw) -> Tensor:
    """Reverse the order along the given dims: x.flip(0, 1), x.flip((0, 1)), x.flip(dims=(0,)) (torch), x.flip(axis=0) (tinygrad)."""
    if "axis" in kw: kws = [("axis", kw.pop("axis"))]
    else: kws = []
    if kw: raise _fail(TypeError, "flip", f"got an unexpected keyword argument {next(iter(kw))!r}", self)
    kws += [(n, v) for n, v in (("dims", dims), ("dim", dim)) if v is not None]
    if len(kws) + bool(axis) > 1: raise _fail(TypeError, "flip", "give the dims once (positional, dims=, dim= or axis=)", self)
    if kws: axis = (kws[0][1],)
    axes = set(_unique_dims("flip", argfix(*axis), self.ndim, self))   # flip((0, 0)) raises like torch (not a double flip)
    return self._new(self.uop.flip(tuple(i in axes for i in range(self.ndim))), self)
  def flipud(self) -> Tensor:
    """Flip dim 0 (needs at least 1 dim)."""
    if self.ndim < 1: raise _fail(ValueError, "flipud", "needs at least 1 dim", self)
    return self.flip(0)
  def fliplr(self) -> Tensor:
    """Flip dim 1 (needs at least 2 dims)."""
    if self.ndim < 2: raise _fail(ValueError, "fliplr", f"needs at least 2 dims, got {self.ndim}", self)
    return self.flip(1)
  def rot90(self, k: int = 1, dims: Sequence[int] = (0, 1)) -> Tensor:
    """Rotate by 90 degrees k times in the plane of dims, from the first towards the second (torch.rot90)."""
    k = _int_arg("rot90", "k", k, self, None)
    if not isinstance(dims, (tuple, list)) or len(dims) != 2: raise _fail(ValueError, "rot90", f"dims must have 2 entries, got {dims!r}", self)
    if self.ndim < 2: raise _fail(ValueError, "rot90", f"needs at least 2 dims, got {self.ndim}", self)
    a, b = _resolve_axis("rot90", dims[0], self.ndim, self), _resolve_axis("rot90", dims[1], self.ndim, self)
    if a == b: raise _fail(ValueError, "rot90", f"dims must differ, got {tuple(dims)}", self)
    k %= 4
    if k == 0: return self
    if k == 2: return self.flip((a, b))
    return self.flip(b).transpose(a, b) if k == 1 else self.flip(a).transpose(a, b)
  def roll(self, shifts: int | Sequence[int], dims: int | Sequence[int] | None = None) -> Tensor:
    """Shift elements along dims, wrapping around (a view: repeat twice + shrink). dims=None: flat."""
    if dims is None or (isinstance(dims, (tuple, list)) and not dims):   # torch: a 1-element shifts works too
      if isinstance(shifts, (tuple, list)) and len(shifts) == 1: shifts = shifts[0]
      if not _is_intlike(shifts): raise _fail(ValueError, "roll", f"with dims=None, shifts must be one int, got {shifts!r}", self)
      return self.flatten().roll(shifts, 0).reshape(self.shape)
    sh = tuple(shifts) if isinstance(shifts, (tuple, list)) else (shifts,)
    ds = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    sh = tuple(_int_arg("roll", "shifts", v, self, None) for v in sh)
    if len(sh) != len(ds): raise _fail(ValueError, "roll", f"shifts {sh} and dims {ds} must have the same length", self)
    x = self if self.ndim else self.reshape(1)
    for s, d in zip(sh, ds):
      d = _resolve_axis("roll", d, x.ndim, self)
      n = x.shape[d]
      if n == 0 or s % n == 0: continue
      s %= n
      reps = [1] * x.ndim; reps[d] = 2
      x = x.repeat(reps).shrink(tuple((n - s, 2 * n - s) if k == d else (0, z) for k, z in enumerate(x.shape)))
    return x.reshape(self.shape)

  # ------------------------------------------------------------ crop and pad
  def shrink(self, arg: Sequence) -> Tensor:
    """Keep [start, end) of each dim (None keeps the dim)."""
    if not isinstance(arg, (tuple, list)) or len(arg) != self.ndim:
      raise _fail(ValueError, "shrink", f"need one (start, end) per dim, got {arg!r}", self)
    for a in arg:
      if a is not None and not (isinstance(a, (tuple, list)) and len(a) == 2 and all(_is_intlike(v) or _symbolic_int("shrink", v, self) for v in a)):
        raise _fail(TypeError, "shrink", f"bounds must be (start, end) pairs of ints (or None), got {a!r} in {tuple(arg)!r}", self)
    idx = lambda v: v if isinstance(v, UOp) else operator.index(v)   # numpy ints -> ints
    pairs = tuple((0, s) if a is None else (idx(a[0]), idx(a[1])) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(pairs, self.shape):
      if isinstance(b, UOp) or isinstance(e, UOp):
        # bounds that are expressions over Variables: every value in their ranges must stay inside the dim (the size
        # e - b may depend on them: a symbolic size)
        n = canonical(e - b)
        lo, hi = smin(b), smax(e)
        if lo < 0 or hi > smax(s) or smin(n) < 0:
          raise _fail(ValueError, "shrink", f"bounds from {lo} to {hi} over the Variables' ranges are out of range for a dim of {s} "
                      f"(shape {self.shape})", self)
      elif not 0 <= b <= e <= s: raise _fail(ValueError, "shrink", f"bounds {pairs} are out of range for shape {self.shape}", self)
    return self._new(self.uop.shrink(pairs), self)
  def _to_shape(self, op: str, shape: tuple) -> tuple:
    shape = argfix(*shape)
    if len(shape) != self.ndim: raise _fail(ValueError, op, f"shape {shape} must have one size per dim ({self.ndim})", self)
    return tuple(s if n is None else _int_arg(op, "size", n, self) for s, n in zip(self.shape, shape))
  def pad_to(self, shape, *args, value: Scalar = 0) -> Tensor:
    """Pad at the end of each dim up to `shape` (tinygrad's pad_to; None keeps a dim), with `value`.

    >>> Tensor([[1, 2]]).pad_to(2, None).tolist()
    [[1, 2], [0, 0]]
    """
    new = self._to_shape("pad_to", (shape,) + args)
    if any(n < s for s, n in zip(self.shape, new)): raise _fail(ValueError, "pad_to", f"cannot pad {self.shape} to the smaller {new}", self)
    return self.pad(tuple((0, n - s) for s, n in zip(self.shape, new)), value=value) if new != self.shape else self
  def shrink_to(self, shape, *args) -> Tensor:
    """Keep the first `shape[i]` elements of each dim (tinygrad's shrink_to; None keeps a dim)."""
    new = self._to_shape("shrink_to", (shape,) + args)
    if any(n > s for s, n in zip(self.shape, new)): raise _fail(ValueError, "shrink_to", f"cannot shrink {self.shape} to the larger {new}", self)
    return self.shrink(tuple((0, n) for n in new)) if new != self.shape else self
  def pad(self, padding: Sequence, mode: str = "constant", value: Scalar = 0.0) -> Tensor:
    """Pad with `value`. `padding` is either one (before, after) pair per dim, or PyTorch's flat
    form (last dim first: left, right, top, bottom, ...). Negative padding crops. `value` must fit the dtype."""
    symbolic = isinstance(padding, (tuple, list)) and any(isinstance(p, (tuple, list)) and any(_symbolic_int("pad", v, self) for v in p)
                                                           for p in padding)
    pairs = self._symbolic_pad_pairs(padding, mode) if symbolic else self._pad_pairs(padding)
    if mode != "constant":   # reflect / replicate / circular (below)
      # the dims the padding names (the last len/2 of the flat form, the pairs that are not None): torch refuses to
      # reflect or replicate an empty one even with zero pads
      named = range(self.ndim - len(padding) // 2, self.ndim) if all(not isinstance(p, (tuple, list)) for p in padding) else \
        [d for d, p in enumerate(padding) if p is not None]
      if mode in ("reflect", "replicate") and (empty := [d for d in named if self.shape[d] == 0]):
        raise _fail(ValueError, "pad", f"{mode} padding {tuple(padding)} names the empty dim {empty[0]} of {self.shape}", self)
      return self._pad_mode(pairs, mode)
    value = _scalar_arg("pad", "value", value, self)
    _check_fits("pad", value, self.dtype, True, self)
    x = self
    if not symbolic and any(b < 0 or a < 0 for b, a in pairs):
      x = x.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, x.shape)))
      pairs = [(max(b, 0), max(a, 0)) for b, a in pairs]
    padded = x._new(x.uop.pad(tuple(pairs)), x)
    if value == 0: return padded
    mask = type(self).ones(*x.shape, dtype=dtypes.bool, device=x.device).pad(pairs)
    return mask.where(padded, type(self)(UOp.const(self.dtype, value, self.device)))   # the value in self's dtype, like torch
  def _symbolic_pad_pairs(self, padding: Sequence, mode: str) -> tuple:
    """pad's (before, after) pairs when some are expressions over Variables, checked: mode 'constant' and never negative
    over the Variables' ranges. The padded size may depend on their values (a symbolic size: (v, 0)) or not ((v, n - v))."""
    if mode != "constant": raise _fail(ValueError, "pad", f"padding by a Variable supports mode 'constant' only, got {mode!r}", self)
    if len(padding) != self.ndim: raise _fail(ValueError, "pad", f"need one (before, after) pair per dim, got {tuple(padding)!r}", self)
    pairs = tuple((0, 0) if p is None else tuple(v if isinstance(v, UOp) else operator.index(v) for v in p) for p in padding)
    for (b, a), s in zip(pairs, self.shape):
      if (b.vmin if isinstance(b, UOp) else b) < 0 or (a.vmin if isinstance(a, UOp) else a) < 0:
        raise _fail(ValueError, "pad", f"padding {pairs} may be negative over the Variables' ranges", self)
    return pairs
  def _pad_pairs(self, padding: Any) -> list[tuple[int, int]]:
    """pad's padding argument -> one (before, after) pair of ints per dim, checked (the crop of negative pads too)."""
    if not isinstance(padding, (tuple, list)):
      raise _fail(TypeError, "pad", f"padding must be a sequence of ints or of (before, after) pairs, got {type(padding).__name__} {padding!r}", self)
    if all(_is_intlike(p) for p in padding):
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise _fail(ValueError, "pad", f"flat padding {tuple(padding)} must have an even length of at most 2 * ndim = {2 * self.ndim}", self)
      pairs = [(0, 0)] * self.ndim
      for i in range(len(padding) // 2): pairs[self.ndim - 1 - i] = (operator.index(padding[2 * i]), operator.index(padding[2 * i + 1]))
    else:
      if len(padding) != self.ndim: raise _fail(ValueError, "pad", f"padding {tuple(padding)} must have one pair per dim ({self.ndim})", self)
      for p in padding:
        if p is not None and not (isinstance(p, (tuple, list)) and len(p) == 2 and all(_is_intlike(v) for v in p)):
          raise _fail(TypeError, "pad", f"padding must be ints or (before, after) pairs of ints (or None), got {p!r} in {tuple(padding)!r}", self)
      pairs = [(0, 0) if p is None else (operator.index(p[0]), operator.index(p[1])) for p in padding]
    for d, ((b, a), s) in enumerate(zip(pairs, self.shape)):
      if s + min(b, 0) + min(a, 0) < 0: raise _fail(ValueError, "pad", f"negative padding {(b, a)} crops more than the size {s} of dim {d}", self)
    return pairs
  def pad_mode(self, padding: Sequence, mode: str = "constant", value: float = 0.0) -> Tensor:
    """Pad with mode 'constant', 'reflect', 'replicate' or 'circular' (torch.nn.functional.pad). `padding` is torch's flat
    form (last dim first: left, right, top, bottom, ...) or one (before, after) pair per dim."""
    return self.pad(padding, mode=mode, value=value)   # Tensor.pad parses the padding and routes the modes here
  def _pad_mode(self, pairs: Sequence[tuple[int, int]], mode: str) -> Tensor:
    """Non-constant padding with one (before, after) pair per dim (the hook the core Tensor.pad calls)."""
    if mode == "reflect": return self._pad_reflect(pairs)
    if mode == "replicate": return self._pad_replicate(pairs)
    if mode == "circular": return self._pad_circular(pairs)
    raise _fail(ValueError, "pad", f"mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}", self)
  def _pad_each(self, pairs, piece, mode: str) -> Tensor:
    """Reflect or replicate: the positive parts of pairs padded with piece(x, axis, length, pad, left), then the negative
    parts cropped, in torch's order (a side cropped by k shows the padded input from k on: reflect [1 2] by (-1, 1) is
    [2 1])."""
    for ax, ((b, a), L) in enumerate(zip(pairs, self.shape)):
      if (b or a) and L + b + a <= 0:
        raise _fail(ValueError, "pad", f"{mode} padding {tuple(pairs)}: the input (size {L} in dim {ax}) is too small, "
                                       f"the output would have size {L + b + a}", self)
    x = self
    for ax, (b, a) in enumerate((max(b, 0), max(a, 0)) for b, a in pairs):
      if not b and not a: continue
      L = x.shape[ax]
      parts = [p for p in (piece(x, ax, L, b, True), x, piece(x, ax, L, a, False)) if p is not None]
      x = parts[0].cat(*parts[1:], dim=ax)
    if not any(b < 0 or a < 0 for b, a in pairs): return x
    return x.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, x.shape)))
  def _pad_reflect(self, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """Reflect about the edge (the edge is not repeated): [a b c d] pad 2 -> [c b a b c d c b]."""
    for ax, ((b, a), L) in enumerate(zip(pairs, self.shape)):
      if b >= L or a >= L: raise _fail(ValueError, "pad", f"reflect padding {tuple(pairs)} must be smaller than the dim ({L} in dim {ax})", self)
    def piece(x, ax, L, p, left):
      if not p: return None
      rng = (1, p + 1) if left else (L - 1 - p, L - 1)
      return x.shrink(tuple(rng if i == ax else None for i in range(x.ndim))).flip(ax)
    return self._pad_each(pairs, piece, "reflect")
  def _pad_replicate(self, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """Repeat the edge value: [a b c] pad 2 -> [a a a b c c c]."""
    for ax, ((b, a), L) in enumerate(zip(pairs, self.shape)):
      if L == 0 and (b > 0 or a > 0): raise _fail(ValueError, "pad", f"cannot replicate-pad an empty dim {ax}", self)
    def piece(x, ax, L, p, left):
      if not p: return None
      e = x.shrink(tuple(((0, 1) if left else (L - 1, L)) if i == ax else None for i in range(x.ndim)))
      return e.expand(tuple(p if i == ax else s for i, s in enumerate(e.shape)))
    return self._pad_each(pairs, piece, "replicate")
  def _pad_circular(self, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """Wrap around: [a b c] pad 1 -> [c a b c a]."""
    for ax, ((b, a), L) in enumerate(zip(pairs, self.shape)):
      if b > L or a > L: raise _fail(ValueError, "pad", f"circular padding {tuple(pairs)} must be at most the dim ({L} in dim {ax})", self)
    # torch's order: crop first (negative pads), then wrap around the crop: out[k] = crop[(k - before) % C] (a pad wider
    # than the crop wraps more than once, where torch leaves the values uninitialized; zeros where the crop is empty)
    crops = [L + min(b, 0) + min(a, 0) for (b, a), L in zip(pairs, self.shape)]
    x = self.shrink(tuple((-min(b, 0), L + min(a, 0)) for (b, a), L in zip(pairs, self.shape)))
    for ax, ((b, a), C) in enumerate(zip(pairs, crops)):
      b, a = max(b, 0), max(a, 0)
      if not b and not a: continue
      if C == 0:
        x = x.pad(tuple((b, a) if i == ax else (0, 0) for i in range(x.ndim)))
        continue
      st, n = (-b) % C, C + b + a
      x = x.repeat(*((st + n + C - 1) // C if i == ax else 1 for i in range(x.ndim)))
      x = x.shrink(tuple((st, st + n) if i == ax else None for i in range(x.ndim)))
    return x

  # ------------------------------------------------------------ repeat, join and split
  def repeat(self, *repeats) -> Tensor:
    """Tile the tensor `repeats[i]` times along dim i (torch.Tensor.repeat)."""
    repeats = _shape_arg("repeat", repeats, self, name="repeats")
    if len(repeats) < self.ndim: raise _fail(ValueError, "repeat", f"need at least {self.ndim} repeat counts, got {repeats}", self)
    base = self.reshape((1,) * (len(repeats) - self.ndim) + self.shape)
    inter = flatten_list([(1, s) for s in base.shape])
    exp = flatten_list([(r, s) for r, s in zip(repeats, base.shape)])
    return base.reshape(inter).expand(exp).reshape(tuple(r * s for r, s in zip(repeats, base.shape)))
  def tile(self, *dims) -> Tensor:
    """torch.tile: repeat with `dims` padded with leading 1s to the tensor's dims."""
    dims = _shape_arg("tile", dims, self, name="dims")
    return self.repeat((1,) * (self.ndim - len(dims)) + dims)
  def repeat_interleave(self, repeats, dim: int | None = None, output_size: int | None = None) -> Tensor:
    """Repeat each element `repeats` times along dim (flat when dim is None). Per-element repeats
    (a list or tensor) realize to learn the output size."""
    x = self.flatten() if dim is None else self
    d = 0 if dim is None else _resolve_axis("repeat_interleave", dim, self.ndim, self)
    if _is_intlike(repeats):
      repeats = operator.index(repeats)
      if repeats < 0: raise _fail(ValueError, "repeat_interleave", f"repeats must be >= 0, got {repeats}", self)
      y = x.unsqueeze(d + 1)
      y = y.expand(y.shape[:d + 1] + (repeats,) + y.shape[d + 2:])
      return y.reshape(x.shape[:d] + (x.shape[d] * repeats,) + x.shape[d + 1:])
    if not isinstance(repeats, (TensorMixin, list, tuple)):
      raise _fail(TypeError, "repeat_interleave",
                  f"repeats must be an int, a sequence of ints or an integer Tensor, got {type(repeats).__name__} {repeats!r}", self)
    if isinstance(repeats, TensorMixin) and not repeats.dtype.is_int:
      raise _fail(TypeError, "repeat_interleave", f"repeats must be an integer Tensor, got {repeats.dtype}", self, repeats)
    reps = repeats.tolist() if isinstance(repeats, TensorMixin) else [_int_arg("repeat_interleave", "repeats", r, self, None) for r in repeats]
    if isinstance(reps, int): reps = [reps]
    if len(reps) == 1: return self.repeat_interleave(int(reps[0]), dim)
    if len(reps) != x.shape[d]: raise _fail(ValueError, "repeat_interleave", f"repeats has {len(reps)} entries, dim {d} has size {x.shape[d]}", self)
    if any(r < 0 for r in reps): raise _fail(ValueError, "repeat_interleave", "repeats must be >= 0", self)
    idx = [i for i, r in enumerate(reps) for _ in range(r)]
    it = type(self)(idx, dtype=dtypes.int64, device=self.device) if idx else type(self).zeros(0, dtype=dtypes.int64, device=self.device)
    return x.index_select(d, it)
  @axis_keywords
  def cat(self=None, *others: Tensor, dim: int = 0, tensors=None) -> Tensor:
    """Concatenate along dim: each piece is padded into place and selected where it lies (one kernel). The call forms:
    a.cat(b, c, dim=1) and Tensor.cat(a, b) (tinygrad), Tensor.cat([a, b]), Tensor.cat([a, b], 1) and
    Tensor.cat(tensors=[a, b], dim=1) (torch.cat); axis= for dim=. Mixed dtypes promote (like torch.cat)."""
    if self is None and tensors is not None: self = tensors
    elif tensors is not None: raise _fail(TypeError, "cat", "got the tensors twice (positional and tensors=)")
    if isinstance(self, (list, tuple)):   # Tensor.cat([a, b]) / Tensor.cat([a, b], 1): the sequence came in as self
      dim = _seq_dim("cat", others, dim)
      if not self: raise _fail(ValueError, "cat", "needs at least one tensor")
      return MovementMixin.cat(*self, dim=dim)
    if self is None: raise _fail(TypeError, "cat", "needs the tensors to concatenate")
    ts = (self,) + others
    for t in ts:
      if not isinstance(t, TensorMixin):
        hint = " (pass the dim as dim=)" if isinstance(t, int) else ""
        raise _fail(TypeError, "cat", f"expected Tensors, got {type(t).__name__}{hint}", *[u for u in ts if isinstance(u, TensorMixin)])
    if self.ndim == 0: raise _fail(ValueError, "cat", "a 0-d tensor cannot be concatenated (unsqueeze it, or use stack)", *ts)
    d = _resolve_axis("cat", dim, self.ndim, self)
    for t in ts:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise _fail(ValueError, "cat", f"shapes must match except in dim {d}", *ts)
      if t.device != self.device: raise _fail(RuntimeError, "cat", f"tensors are on different devices: {self.device} and {t.device}", *ts)
    dt = self.dtype
    try:
      for t in others: dt = promote(dt, t.dtype)
    except TypeError as e: raise _fail(TypeError, "cat", str(e), *ts) from None
    total = sum(t.shape[d] for t in ts)
    # each piece padded into place and selected where it lies (not the padded pieces added: -0.0 stays -0.0, and in a
    # kernel unrolled along dim d each element is one piece's); where it lies is a padded constant, a mask of the view
    out, off = None, 0
    for t in ts:
      pads = [(0, 0)] * self.ndim
      pads[d] = (off, total - off - t.shape[d])
      p = t.cast(dt).pad(pads)
      out = p if out is None else type(self).ones(*t.shape, dtype=dtypes.bool, device=self.device).pad(pads).where(p, out)
      off += t.shape[d]
    assert out is not None
    return out
  @axis_keywords
  def stack(self=None, *others: Tensor, dim: int = 0, tensors=None) -> Tensor:
    """Join same-shaped tensors along a new dim. The call forms: Tensor.stack([a, b], dim), Tensor.stack([a, b], 1)
    and Tensor.stack(tensors=[a, b]) (torch.stack), Tensor.stack(a, b, dim=1) and a.stack(b, c) (tinygrad)."""
    if self is None and tensors is not None: self = tensors
    elif tensors is not None: raise _fail(TypeError, "stack", "got the tensors twice (positional and tensors=)")
    if isinstance(self, TensorMixin): tensors = (self,) + others
    elif isinstance(self, (list, tuple)): tensors, dim = self, _seq_dim("stack", others, dim)
    else: raise _fail(TypeError, "stack", f"expects a sequence of Tensors, got {type(self).__name__}")
    for t in tensors:
      if not isinstance(t, TensorMixin):
        hint = " (pass the dim as dim=)" if isinstance(t, int) else ""
        raise _fail(TypeError, "stack", f"expects Tensors, got a {type(t).__name__}{hint}", *[u for u in tensors if isinstance(u, TensorMixin)])
    if not tensors: raise _fail(ValueError, "stack", "needs at least one tensor")
    d = _resolve_axis("stack", dim, tensors[0].ndim + 1, tensors[0])
    for t in tensors:
      if t.shape != tensors[0].shape: raise _fail(ValueError, "stack", "all tensors must have the same shape", *tensors)
    return tensors[0].unsqueeze(d).cat(*[t.unsqueeze(d) for t in tensors[1:]], dim=d)
  def split(self, sizes: int | Sequence[int], dim: int = 0) -> list[Tensor]:
    d = _resolve_axis("split", dim, self.ndim, self)
    n = self.shape[d]
    if not isinstance(sizes, (tuple, list)):
      sizes = _int_arg("split", "split_size", sizes, self, minimum=1)
      sizes = [min(sizes, n - i) for i in range(0, n, sizes)] or [0]
    else: sizes = list(_shape_arg("split", (tuple(sizes),), self, name="split sizes"))
    if sum(sizes) != n: raise _fail(ValueError, "split", f"sizes {tuple(sizes)} do not add up to {n}", self)
    out, off = [], 0
    for s in sizes:
      out.append(self.shrink(tuple((off, off + s) if i == d else None for i in range(self.ndim))))
      off += s
    return out
  def chunk(self, chunks: int, dim: int = 0) -> list[Tensor]:
    d = _resolve_axis("chunk", dim, self.ndim, self)
    chunks = _int_arg("chunk", "chunks", chunks, self, minimum=1)
    return self.split(max(1, math.ceil(self.shape[d] / chunks)), d)
  def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along dim, each without that dim (views).

    >>> [t.tolist() for t in Tensor([[1, 2], [3, 4]]).unbind(1)]
    [[1, 3], [2, 4]]
    """
    if self.ndim == 0: raise _fail(IndexError, "unbind", "a 0-d tensor has no dim to unbind", self)
    d = _resolve_axis("unbind", dim, self.ndim, self)
    return tuple(self.shrink(tuple((i, i + 1) if k == d else None for k in range(self.ndim))).squeeze(d) for i in range(self.shape[d]))

  # ------------------------------------------------------------ windows and einops
  def unfold(self, dimension: int, size: int, step: int) -> Tensor:
    """The windows of `size` elements, `step` apart, along `dimension`: that dim becomes the number of windows
    (L - size) // step + 1 and a last dim of `size` is added (torch.Tensor.unfold, tinygrad's unfold; a view).
    torch.nn.functional.unfold (im2col) is `im2col`.

    >>> Tensor.arange(5).unfold(0, 2, 2).tolist()
    [[0, 1], [2, 3]]
    """
    size, step = _int_arg("unfold", "size", size, self), _int_arg("unfold", "step", step, self, minimum=1)
    if self.ndim == 0:
      _resolve_axis("unfold", dimension, 0, self)
      if size > 1: raise _fail(ValueError, "unfold", f"size {size} is larger than the 1 element of a 0-d tensor", self)
      return self.reshape(1).shrink(((0, size),))
    d = _resolve_axis("unfold", dimension, self.ndim, self)
    L = self.shape[d]
    if size > L: raise _fail(ValueError, "unfold", f"size {size} is larger than dim {d} (size {L})", self)
    n = (L - size) // step + 1
    if size == 0:
      return self.shrink(tuple((0, 0) if i == d else None for i in range(self.ndim))).reshape(self.shape[:d] + (n,) + self.shape[d + 1:] + (0,))
    rest = [i for i in range(self.ndim) if i != d]
    w = self.permute(*rest, d)._pool((size,), step)                                     # (*rest, n, size)
    return w.permute(*range(d), self.ndim - 1, *range(d, self.ndim - 1), self.ndim)
  def rearrange(self, formula: str, **sizes: int) -> Tensor:
    """einops-style rearrange (as tinygrad 0.14's): 'b c h w -> b (c h w)', '(b n) c -> b n c' with sizes=
    (`n=2`), '...' for the dims not named, '1' or '()' for a dim of size 1. Reshapes and a permute (a view).

    >>> Tensor.arange(6).reshape(2, 3).rearrange("a b -> b a").shape
    (3, 2)
    >>> Tensor.arange(6).rearrange("(a b) -> b a", a=2).tolist()
    [[0, 3], [1, 4], [2, 5]]
    """
    if not isinstance(formula, str) or formula.count("->") != 1:
      raise _fail(ValueError, "rearrange", f"formula must be a string with one '->', got {formula!r}", self)
    lhs, rhs = (_einops_side(self, side, formula) for side in formula.split("->"))
    lnames, rnames = _einops_names(lhs), _einops_names(rhs)
    if len(set(lnames)) != len(lnames) or sorted(lnames) != sorted(rnames):
      raise _fail(ValueError, "rearrange", f"each axis name must appear once on each side of {formula!r}", self)
    for k, v in sizes.items():
      if k not in lnames: raise _fail(ValueError, "rearrange", f"size given for {k!r}, which the left side of {formula!r} does not name", self)
      _int_arg("rearrange", k, v, self)
    if "..." in lnames:   # the dims the ellipsis stands for, each its own name
      if "..." not in lhs: raise _fail(ValueError, "rearrange", f"'...' inside parentheses on the left of {formula!r}", self)
      k = self.ndim - (len(lhs) - 1)
      if k < 0: raise _fail(ValueError, "rearrange", f"{formula!r} names {len(lhs) - 1} dims, the input has {self.ndim}", self)
      ell = [f"...{i}" for i in range(k)]
      lhs = [x for g in lhs for x in ([[e] for e in ell] if g == "..." else [g])]
      rhs = [x for g in rhs for x in ([[e] for e in ell] if g == "..." else [[e for n in g for e in (ell if n == "..." else [n])]])]
      lnames, rnames = _einops_names(lhs), _einops_names(rhs)
    if len(lhs) != self.ndim: raise _fail(ValueError, "rearrange", f"{formula!r} names {len(lhs)} dims, the input has {self.ndim}", self)
    size: dict[str, int] = {}
    for g, L in zip(lhs, self.shape):
      known = prod(sizes[n] for n in g if n in sizes)
      unknown = [n for n in g if n not in sizes]
      if len(unknown) > 1: raise _fail(ValueError, "rearrange", f"cannot infer the sizes of {unknown} in a dim of size {L}; give all but one", self)
      if unknown and (known == 0 or L % known):
        raise _fail(ValueError, "rearrange", f"sizes {dict((n, sizes[n]) for n in g if n in sizes)} do not divide {L}", self)
      if not unknown and known != L: raise _fail(ValueError, "rearrange", f"the dim of size {L} is not {' * '.join(g) or '1'} = {known}", self)
      size.update({n: sizes.get(n, L // known if n in unknown else 0) for n in g})
    x = self.reshape(tuple(size[n] for n in lnames)).permute(*[lnames.index(n) for n in rnames])
    return x.reshape(tuple(prod(size[n] for n in g) for g in rhs))

def _seq_dim(op: str, extra: tuple, dim: Any) -> Any:
  """Tensor.cat([a, b], 1): the dim given positionally after the sequence."""
  if not extra: return dim
  if len(extra) > 1 or isinstance(extra[0], TensorMixin) or (dim != 0):
    raise _fail(TypeError, op, f"takes one sequence of Tensors and a dim, got {len(extra) + 1} positional arguments{' and dim=' if dim != 0 else ''}")
  return extra[0]

def _einops_names(side: list) -> list[str]: return [n for g in side for n in (["..."] if g == "..." else g)]

def _einops_side(t: Any, side: str, formula: str) -> list:
  """One side of a rearrange formula -> its dims, each the list of axis names it groups ([] is a dim of size 1), or
  the string '...' for an ellipsis outside parentheses (the dims it covers)."""
  toks = side.replace("\u2026", "...").replace("(", " ( ").replace(")", " ) ").split()
  out: list = []
  group: list[str] | None = None
  for tok in toks:
    if tok == "(":
      if group is not None: raise _fail(ValueError, "rearrange", f"nested parentheses in {formula!r}", t)
      group = []
    elif tok == ")":
      if group is None: raise _fail(ValueError, "rearrange", f"unbalanced parentheses in {formula!r}", t)
      out.append(group); group = None
    elif tok == "1": out.append([]) if group is None else None
    elif tok == "..." and group is None: out.append("...")
    elif tok == "..." or (tok.isidentifier() and not tok.startswith("_") and not tok.endswith("_")):
      out.append([tok]) if group is None else group.append(tok)
    else: raise _fail(ValueError, "rearrange", f"invalid axis name {tok!r} in {formula!r}", t)
  if group is not None: raise _fail(ValueError, "rearrange", f"unbalanced parentheses in {formula!r}", t)
  if _einops_names(out).count("...") > 1: raise _fail(ValueError, "rearrange", f"more than one '...' on a side of {formula!r}", t)
  return out
