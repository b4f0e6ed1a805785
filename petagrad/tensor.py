"""Tensor: the user API. A thin handle on a lazy UOp graph; every op here is composed from primitives.

>>> from petagrad import Tensor
>>> (Tensor([1.0, 2.0, 3.0]) * 2 + 1).tolist()
[3.0, 5.0, 7.0]
"""
from __future__ import annotations
import math, struct, weakref, itertools, operator, sys
from typing import Any, Sequence, Callable
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp
from petagrad.uop.gradient import compute_gradient, custom_backward
from petagrad.dtype import DType, dtypes, to_dtype, promote, promote_scalar, truncate, float_to_bf16_bits, bf16_bits_to_float, \
  fit_error, DTypeOverflowError
from petagrad.device import Device
from petagrad.helpers import prod, argfix, user_frame, flatten as flatten_list
from petagrad.schedule.schedule import new_buffer, new_buffer_node, substitute
from petagrad.engine.realize import realize_uops, write_hooks, check_hooks
from petagrad.mixin.indexing import IndexingMixin
from petagrad.mixin.ordering import OrderingMixin
from petagrad.mixin.math import MathMixin
from petagrad.mixin.nn import NNMixin

# "Already computed" lives with the tensors, never on IR nodes: a realized tensor holds a view of its buffer, and
# so does every node of a live lazy graph that the realize computed (the graphs of other live tensors are rewritten
# to read it: `_HandOver`). A graph built later, even one equal to a computed one, is computed again. A node that
# keeps its graph (a non-leaf that needs grad, a node inside another tensor's graph) is wrapped as
# CUSTOM_GRAD(view, graph) "computed": the forward reads the view while its buffer holds what the realize wrote
# (Buffer.writes, the buffer's version, is unchanged), else the graph is computed again; the gradient flows into the
# graph.
COMPUTED = "computed"
custom_backward[COMPUTED] = lambda ctx, node: (ctx,)

def computed_view(u: UOp) -> UOp | None:
  """The buffer view holding u's value, if u is a buffer view or a computed value whose buffer was not written since."""
  if u.op is Ops.CUSTOM_GRAD: return u.src[0] if u.arg[0] == COMPUTED and u.src[0].base.buffer.writes == u.arg[1] else None
  return u if u.base.op is Ops.BUFFER else None

def _computed(view: UOp, graph: UOp) -> UOp:
  """graph's value, held in view (as its buffer is now); gradients flow into graph."""
  if graph.op is Ops.CUSTOM_GRAD and graph.arg[0] == COMPUTED: graph = graph.src[1]   # computed again: one wrapper
  return UOp(Ops.CUSTOM_GRAD, graph.dtype, (view, graph), (COMPUTED, view.base.buffer.writes))

def _rebuild(root: UOp, memo: dict[UOp, UOp], stop: Callable[[UOp], UOp | None], make: Callable[[UOp, tuple], UOp]) -> UOp:
  """root's graph rebuilt children first into memo (node -> new node; shared by several roots, whose graphs then
  are walked once): stop(n) is n's new node without looking below it, or None; make(n, new sources) builds the
  others. Iterative."""
  stack, ready = [root], set()   # ready: nodes whose sources are on the stack above them (or done)
  while stack:
    n = stack[-1]
    if n in memo: stack.pop(); continue
    if (r := stop(n)) is not None: memo[n] = r; stack.pop(); continue
    if n not in ready and n.src:
      ready.add(n)
      for s in n.src:
        if s not in memo: stack.append(s)
      continue
    stack.pop()
    memo[n] = make(n, tuple(map(memo.__getitem__, n.src)))
  return memo[root]

def _same_or_new(n: UOp, src: tuple) -> UOp: return n if src == n.src else UOp(n.op, n.dtype, src, n.arg)

def _forward(u: UOp, done: dict[UOp, UOp], checks: list[UOp]) -> UOp:
  """u's graph as the scheduler computes it: computed values read their buffers (or are computed again from their
  graph when the buffer was written since), the inputs a CUSTOM_GRAD keeps for the backward only are dropped, and
  so are CHECKs (appended to `checks`: the realize computes their conditions alongside). Records every node it
  rebuilt in done (original -> forward)."""
  def stop(n: UOp) -> UOp | None: return computed_view(n) if n.op is Ops.CUSTOM_GRAD else None
  def make(n: UOp, src: tuple) -> UOp:
    if n.op is Ops.CUSTOM_GRAD: return src[1] if n.arg[0] == COMPUTED else src[0]   # stands for one of its sources
    if n.op is Ops.CHECK: checks.append(n); return src[0]
    return _same_or_new(n, src)
  return _rebuild(u, done, stop, make)

# every live tensor whose uop is not a view of a buffer (lazy), weakly: a realize hands what it computed to their
# graphs. Plain weak references without callbacks (every op makes a tensor: no Python call when one dies); dead ones
# are dropped when the table is read, or replaced when a new tensor gets the dead one's id
_lazy_tensors: dict[int, weakref.ref] = {}

def lazy_tensors() -> list[Tensor]:
  """Every live tensor that is not (a view of) a realized buffer."""
  out, dead = [], []
  for k, r in _lazy_tensors.items():
    if (t := r()) is not None and t._lazy_key == k: out.append(t)
    else: dead.append(k)
  for k in dead: del _lazy_tensors[k]
  return out

# while a TinyJit call runs: id -> (weak reference to the tensor, its uop before its first change in the call), for
# tensors that viewed a buffer when they changed (the JIT writes their new value back into that buffer)
uop_changes: dict[int, tuple[Any, UOp]] | None = None

def _raise_failed_checks(checks: dict[UOp, Any]) -> None:
  """Raise the exception of the first CHECK whose condition's buffer holds False (realize_all computed them)."""
  for c, buf in checks.items():
    for hook in check_hooks: hook(buf, *c.arg)
  for c, buf in checks.items():
    if not buf.as_bytes()[0]: raise c.arg[0](c.arg[1])

class _HandOver:
  """What a realize computed (values: node -> its buffer view; the targets and the intermediate kernels), put into the
  graphs that keep living. A computed node becomes
  * in a graph that needs grad: a computed wrapper whose graph reads the computed nodes below it (the gradient flows
    through it; computed again, it redoes only what changed);
  * in a graph that does not: its view when no tensor holds the buffer (an intermediate kernel's: nothing can write
    it in place), else a computed wrapper as above (a tensor holding it may write it);
  * an ASSIGN: its target's view (a write is never made again).
  Iterative, children first; only nodes under the graphs rewritten are visited."""
  def __init__(self, values: dict[UOp, UOp]):
    self.values = values
    self.memo: tuple[dict[UOp, UOp], dict[UOp, UOp]] = ({}, {})   # by mode: without grad, with grad
  def __call__(self, root: UOp, grad: bool) -> UOp:
    values = self.values
    def stop(n: UOp) -> UOp | None:
      v = values.get(n)
      return v if v is not None and (n.op is Ops.ASSIGN or not grad and not _has_views(v.base.buffer)) else None
    def make(n: UOp, src: tuple) -> UOp:
      new = _same_or_new(n, src)
      return new if (v := values.get(n)) is None else _computed(v, new)
    return _rebuild(root, self.memo[grad], stop, make)

class _ViewRef(weakref.ref):
  """A weak reference from a buffer's `views` to a tensor viewing it; it removes its entry when the tensor dies."""
  __slots__ = ("views", "key")
def _drop_view(r: _ViewRef) -> None:
  if r.views.get(r.key) is r: del r.views[r.key]

def _has_views(buf: Any) -> bool:
  """Does a live tensor view this buffer?"""
  return any(r() is not None for r in buf.views.values())

Scalar = int | float | bool

def _shape_str(t: Any) -> str: return f"{tuple(t.shape)} {t.dtype}" if isinstance(t, Tensor) else repr(t)

def _fail(exc: type[Exception], op: str, msg: str, *operands: Any) -> Exception:
  ops = ", ".join(_shape_str(o) for o in operands)
  return exc(f"{op}: {msg}" + (f" (operands: {ops})" if operands else "") + f"\n  at {user_frame()}")

def _resolve_axis(op: str, axis: int, ndim: int, t: Any = None) -> int:
  if not isinstance(axis, int) or isinstance(axis, bool): raise _fail(TypeError, op, f"axis must be an int, got {type(axis).__name__} {axis!r}", *_opt(t))
  if not -max(ndim, 1) <= axis < max(ndim, 1): raise _fail(IndexError, op, f"axis {axis} is out of range for a {ndim}-d tensor", *_opt(t))
  return axis % max(ndim, 1)

def _opt(t: Any) -> tuple:
  """The operands to name in an error: t, if there is one."""
  return () if t is None else (t,)

def _check_fits(op: str, x: Any, dtype: DType, fill: bool = True, *operands: Any) -> None:
  """Raise when the Python scalar x does not fit dtype (see dtype.fit_error): no silent wrapping of ints."""
  if (why := fit_error(x, dtype, fill)) is not None: raise _fail(DTypeOverflowError, op, why, *operands)

# index math in kernels is int64: a tensor has fewer elements than that
MAX_NUMEL = (1 << 63) - 1

def _shape_arg(op: str, args: Sequence, t: Any = None, wildcard: bool = False, name: str = "size") -> tuple[int, ...]:
  """f(2, 3) or f((2, 3)) -> (2, 3): ints (not bools; numpy ints are fine) >= 0 (or -1 with wildcard), with fewer
  than 2**63 elements. Anything else raises TypeError/ValueError naming op, at the call."""
  if len(args) == 1 and isinstance(args[0], (tuple, list)): args = tuple(args[0])
  if all(type(s) is int and s >= 0 for s in args):   # the common case: one pass, no conversions
    if prod(args) > MAX_NUMEL: raise _fail(ValueError, op, f"{name} {tuple(args)} has {prod(args)} elements, more than {MAX_NUMEL}", *_opt(t))
    return tuple(args)
  out = []
  for s in args:
    if isinstance(s, bool) or not hasattr(type(s), "__index__"):
      what = "one sequence of sizes or several ints" if isinstance(s, (tuple, list)) else "ints"
      raise _fail(TypeError, op, f"{name} must be {what}, got {type(s).__name__} {s!r} in {tuple(args)!r}", *_opt(t))
    v = operator.index(s)
    if v < 0 and not (wildcard and v == -1):
      raise _fail(ValueError, op, f"{name} must be non-negative{' (or -1)' if wildcard else ''}, got {v} in {tuple(args)!r}", *_opt(t))
    out.append(v)
  if prod(v for v in out if v >= 0) > MAX_NUMEL: raise _fail(ValueError, op, f"{name} {tuple(out)} has more than {MAX_NUMEL} elements", *_opt(t))
  return tuple(out)

def _int_arg(op: str, name: str, v: Any, t: Any = None, minimum: int | None = 0) -> int:
  """One int argument (a count, a size): not a bool or a float, and >= minimum."""
  if isinstance(v, bool) or not hasattr(type(v), "__index__"): raise _fail(TypeError, op, f"{name} must be an int, got {type(v).__name__} {v!r}", *_opt(t))
  v = operator.index(v)
  if minimum is not None and v < minimum: raise _fail(ValueError, op, f"{name} must be >= {minimum}, got {v}", *_opt(t))
  return v

def _scalar_arg(op: str, name: str, v: Any, t: Any = None) -> Scalar:
  """A Python number argument (a fill value, a bound): bool, int or float; numpy scalars become Python ones."""
  if type(v).__module__ == "numpy" and hasattr(v, "item") and getattr(v, "ndim", 0) == 0: v = v.item()
  if not isinstance(v, (bool, int, float)): raise _fail(TypeError, op, f"{name} must be a number (bool, int or float), got {type(v).__name__} {v!r}", *_opt(t))
  return v

def _dtype_arg(d: Any, op: str | None = None) -> DType:
  """A dtype argument (a DType, its name, a numpy/torch dtype): an unknown one raises TypeError naming the op (the
  calling method's name unless given) and the user's line."""
  try: return to_dtype(d)
  except TypeError as e:
    name = op or sys._getframe(1).f_code.co_name
    raise _fail(TypeError, "Tensor" if name == "__init__" else name, str(e)) from None

def _tensor_arg(op: str, name: str, x: Any, t: Any = None) -> Tensor:
  """An argument that must be a Tensor (not a list of them, a number or a string)."""
  if not isinstance(x, Tensor):
    hint = " (a list of Tensors: use Tensor.stack or cat)" if isinstance(x, (list, tuple)) and any(isinstance(e, Tensor) for e in x) else ""
    raise _fail(TypeError, op, f"{name} must be a Tensor, got {type(x).__name__}{hint}", *_opt(t))
  return x

def _scalar_operand(op: str, x: int, dt: DType, t: Any) -> None:
  """Raise for an int operand that no 64-bit int (or no float) holds: torch's OverflowError, named as the op."""
  raise _fail(DTypeOverflowError, op, fit_error(x, dt, False) or f"{x} does not fit {dt.name}", t)

class IntegerDivisionByZeroError(RuntimeError, ZeroDivisionError):
  """Integer division or remainder by zero. A RuntimeError like PyTorch's ("RuntimeError: ZeroDivisionError") and a
  ZeroDivisionError, so code ported from PyTorch or plain Python catches it either way."""

def _const_value(u: UOp) -> Any:
  """The value of a node that is one constant everywhere (a CONST seen through views, casts, CONTIGUOUS and
  DETACH: Tensor.zeros(3, dtype=dtypes.int32) before it is realized), else None. Never runs a kernel."""
  casts: list[DType] = []
  while u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.CAST, Ops.CONTIGUOUS, Ops.DETACH):
    if u.op is Ops.CAST: casts.append(u.dtype)
    u = u.src[0]
  if u.op is not Ops.CONST: return None
  v = u.arg
  for dt in reversed(casts): v = truncate(v, dt)
  return v

def _check_int_divisor(op: str, a: Tensor, b: Tensor) -> Tensor:
  """Integer division and remainder by zero raise, like PyTorch (floats give inf/nan); returns the divisor to divide
  by. A divisor that is a constant (a Python 0, Tensor.zeros(...) not yet realized) raises at the call; any other
  gets a data check (raised when the quotient is computed, naming op and the user's line). An empty result never
  raises."""
  if b.dtype.is_float or not b.numel(): return b
  if (v := _const_value(b.uop)) is not None:
    if v == 0: raise _fail(IntegerDivisionByZeroError, op, f"integer division by zero: the {b.dtype.name} divisor is 0 (ZeroDivisionError)", a, b)
    return b
  if b.uop.op is Ops.CHECK and b.uop.arg[0] is IntegerDivisionByZeroError: return b   # checked already (fmod via div)
  src = b.uop
  while src.op in (Ops.EXPAND, Ops.RESHAPE): src = src.src[0]   # test the divisor's own elements, not their broadcast
  return b._checked(Tensor(src).ne(0), IntegerDivisionByZeroError, op, f"integer division by zero: the {b.dtype.name} divisor holds a 0 (ZeroDivisionError)", a, b)

def _pack(values: list, dtype: DType) -> bytes:
  fmt = f"<{len(values)}{dtype.fmt}"
  if dtype.is_int:
    try: return struct.pack(fmt, *values)   # the common case: ints in range (struct checks the range, rejects floats)
    except struct.error: pass
    for v in values: _check_fits("Tensor", v, dtype, False)   # ints never wrap, floats must fit once truncated (torch)
  try:
    if dtype == dtypes.bfloat16: return struct.pack(f"<{len(values)}H", *(float_to_bf16_bits(float(v)) for v in values))
    return struct.pack(fmt, *(truncate(v, dtype) for v in values))
  except OverflowError:   # an int too big for any float
    for v in values: _check_fits("Tensor", v, dtype, False)
    raise

def _nested_shape(data: Any, op: str = "Tensor") -> tuple[int, ...]:
  shape: list[int] = []
  x = data
  while isinstance(x, (list, tuple)):
    shape.append(len(x))
    if not x: break
    x = x[0]
  return tuple(shape)

def _flatten_nested(data: Any, shape: tuple[int, ...]) -> list:
  out = [data]
  for d in shape:
    nxt = []
    for x in out:
      if not isinstance(x, (list, tuple)) or len(x) != d: raise _fail(ValueError, "Tensor", f"ragged nested sequence: expected length {d} at every level")
      nxt.extend(x)
    out = nxt
  for x in out:
    if isinstance(x, (list, tuple)): raise _fail(ValueError, "Tensor", "ragged nested sequence")
    if isinstance(x, Tensor): raise _fail(TypeError, "Tensor", "a list of Tensors is not accepted; use Tensor.stack")
  return out

class Tensor(IndexingMixin, OrderingMixin, MathMixin, NNMixin):
  """A lazily evaluated n-dimensional array with autograd.

  >>> Tensor([[1, 2], [3, 4]]).sum(axis=0).tolist()
  [4, 6]
  """
  __slots__ = ("_uop", "_requires_grad", "_leaf", "grad", "_ctx", "_lazy_key", "__weakref__")
  training: bool = False
  _seed: int = 0
  _rng_counter: int = 0

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None, requires_grad: bool | None = None):
    dt = _dtype_arg(dtype) if dtype is not None else None
    self.grad: Tensor | None = None
    self._requires_grad: bool | None = None
    self._leaf = False
    if requires_grad is not None: self.requires_grad = requires_grad
    self._ctx: UOp | None = None   # a grad leaf's node before it was realized (graphs built earlier use it)
    if isinstance(data, UOp):
      if device is not None and data.device_or_none != (dev := Device.canonicalize(device)):
        data = UOp(Ops.COPY, data.dtype, (data, UOp(Ops.DEVICE, dtypes.bool, (), dev)))
      self.uop = data if dt is None else data.cast(dt)
      return
    dev = Device.canonicalize(device) if device is not None else Device.DEFAULT
    if isinstance(data, Tensor): raise _fail(TypeError, "Tensor", "Tensor(Tensor) is not supported; use .clone(), .to() or .cast()")
    if isinstance(data, (bool, int, float)):
      dt = dt or dtypes.from_py(data)
      _check_fits("Tensor", data, dt, False)
      self.uop = UOp.const(dt, data, dev)
      return
    if isinstance(data, (bytes, bytearray, memoryview)):
      raw = bytes(data)
      dt = dt or dtypes.uint8
      if len(raw) % dt.itemsize: raise _fail(ValueError, "Tensor", f"{len(raw)} bytes is not a whole number of {dt} elements")
      self.uop = self._from_bytes(raw, (len(raw) // dt.itemsize,), dt, dev)
      return
    if type(data).__module__ == "numpy" and hasattr(data, "dtype"):
      import numpy as np
      arr = np.ascontiguousarray(data).reshape(np.shape(data))   # ascontiguousarray makes 0-d arrays 1-d
      try: ndt = to_dtype(arr.dtype.name)
      except TypeError: raise _fail(TypeError, "Tensor", f"numpy dtype {arr.dtype} is not supported")
      self.uop = self._from_bytes(arr.tobytes(), tuple(arr.shape), ndt, dev)
      if dt is not None and dt != ndt: self.uop = self.uop.cast(dt)
      return
    if isinstance(data, (list, tuple)):
      shape = _nested_shape(data)
      flat = _flatten_nested(data, shape)
      try: dt = dt or (dtypes.from_py(flat) if flat else dtypes.default_float)
      except TypeError as e: raise _fail(TypeError, "Tensor", f"{e} (elements must be bools, ints or floats)") from None
      self.uop = self._from_bytes(_pack(flat, dt), shape, dt, dev)
      return
    raise _fail(TypeError, "Tensor", f"cannot make a Tensor from {type(data).__name__}")

  @staticmethod
  def _from_bytes(raw: bytes, shape: tuple[int, ...], dtype: DType, device: str) -> UOp:
    buf = new_buffer(device, prod(shape), dtype)
    buf.buffer.ensure_allocated().copyin(memoryview(raw))
    return buf.reshape(shape)

  # ------------------------------------------------------------ properties
  @property
  def shape(self) -> tuple[int, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def device(self) -> str: return self.uop.device
  @property
  def ndim(self) -> int: return len(self.shape)
  def dim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  def size(self, dim: int | None = None) -> tuple[int, ...] | int: return self.shape if dim is None else self.shape[_resolve_axis("size", dim, self.ndim, self)]
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.element_size()
  def __len__(self) -> int:
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def __repr__(self) -> str:
    return f"<Tensor {self.shape} {self.dtype} on {self.device}{' with grad' if self.grad is not None else ''}>"
  def __hash__(self) -> int: return id(self)
  def __bool__(self) -> bool:
    if self.numel() != 1: raise RuntimeError(f"the truth value of a tensor with {self.numel()} elements is ambiguous; use .any() or .all()")
    return bool(self.item())

  @property
  def uop(self) -> UOp: return self._uop
  @uop.setter
  def uop(self, u: UOp) -> None:
    key = id(self)
    if uop_changes is not None and key not in uop_changes and (old := getattr(self, "_uop", None)) is not None \
       and old.base.op is Ops.BUFFER:
      uop_changes[key] = (weakref.ref(self), old)
    self._uop = u
    # remember which tensors view which buffer (an in-place write gives them a fresh buffer node), and which are lazy
    if (u.op is Ops.BUFFER or u.op in GroupOp.Movement) and (b := u.base).op is Ops.BUFFER and b.buffer is not None:
      r = b.buffer.views[key] = _ViewRef(self, _drop_view)
      r.views, r.key = b.buffer.views, key
      self._lazy_key = None
    else:
      _lazy_tensors[key] = weakref.ref(self)
      self._lazy_key = key

  @property
  def requires_grad(self) -> bool | None: return self._requires_grad
  @requires_grad.setter
  def requires_grad(self, v: bool | None) -> None:
    self._requires_grad = v
    if v: self._leaf, _grad_leaves[id(self)] = True, self
  def requires_grad_(self, v: bool = True) -> Tensor:
    self.requires_grad = v
    return self

  # ------------------------------------------------------------ graph plumbing
  def _new(self, u: UOp, *parents: Tensor) -> Tensor:
    """A tensor computed from self (and parents) as u: needs grad (not a leaf) when one of them does."""
    t = Tensor.__new__(Tensor)   # what Tensor(u) does, without its argument checks: every op makes one
    t.grad, t._leaf, t._ctx = None, False, None
    t._requires_grad = True if self._requires_grad or any(p._requires_grad for p in parents) else None
    t.uop = u
    return t
  def _checked(self, ok: Tensor, exc: type[Exception], op: str, msg: str, *operands: Any) -> Tensor:
    """self, with a check that the bool tensor ok is true everywhere, made when self is realized (the data is not
    known before): otherwise the realize raises exc naming op, the operands and this user's line (as _fail).
    Checks run on every device and in JIT replays."""
    err = _fail(exc, op, msg, *operands)
    okall = ok.all() if ok.shape else ok
    return self._new(UOp(Ops.CHECK, self.dtype, (self.uop, okall.uop), (exc, str(err))), self)
  def _c(self, x: Scalar, dtype: DType | None = None) -> UOp:
    """A broadcast constant with this tensor's shape."""
    c = UOp.const(dtype or self.dtype, x, self.device)
    return c.reshape((1,) * self.ndim).expand(self.shape) if self.shape else c

  # ------------------------------------------------------------ realize / export
  def realize(self, *others: Tensor) -> Tensor:
    """Compute this tensor (and `others`) now. Returns self."""
    Tensor.realize_all(self, *others)
    return self

  @staticmethod
  def realize_all(*tensors: Tensor) -> None:
    """Compute every tensor given (in one schedule: shared work is done once)."""
    todo = [t for t in tensors if computed_view(t.uop) is None]
    if not todo: return
    done: dict[UOp, UOp] = {}
    targets: list[UOp] = []
    checks: list[UOp] = []
    for t in todo:
      tgt = _forward(t.uop, done, checks)
      # a tensor is its own memory: two tensors of one graph (two Tensor.zeros(3), the same sum built twice) are one
      # node, a target twice here, or already the buffer another tensor holds; sharing that buffer would let an
      # in-place write to one change the other, so this one gets a copy
      if (tgt.base.op is Ops.BUFFER and _has_views(tgt.base.buffer)) or tgt in targets: tgt = UOp(Ops.CONTIGUOUS, tgt.dtype, (tgt,))
      targets.append(tgt)
    # the conditions of the data checks in these graphs are computed in the same schedule (a condition's own graph
    # may hold checks too)
    oks: dict[UOp, UOp] = {}
    i = 0
    while i < len(checks):
      if checks[i] not in oks: oks[checks[i]] = UOp(Ops.CONTIGUOUS, dtypes.bool, (_forward(checks[i].src[1], done, checks),))
      i += 1
    becomes = realize_uops(targets + list(oks.values()))
    # a non-leaf that needs grad keeps its graph for backward (like PyTorch's autograd graph), and the graphs of the
    # other live lazy tensors read what this realize computed from now on
    skip = {id(t) for t in todo}
    others = [t for t in lazy_tensors() if id(t) not in skip]
    keep = [t for t in todo if t._requires_grad and not t._leaf]
    for t, tgt in zip(todo, targets):
      if t._requires_grad and not t._leaf: continue
      if t._requires_grad: t._ctx = t.uop   # graphs built before find the leaf by this node
      t.uop = becomes.get(tgt, tgt)
    if keep or others:
      hand = _HandOver({n: v for n, fwd in done.items() if (v := becomes.get(fwd)) is not None and n.base.op is not Ops.BUFFER})
      for t, tgt in zip(todo, targets):
        if t._requires_grad and not t._leaf: t.uop = _computed(becomes.get(tgt, tgt), hand(t.uop, True))
      for t in others:
        if (new := hand(t.uop, bool(t._requires_grad))) is not t.uop: t.uop = new
    # raised once the tensors hold what ran (a failed check must not leave an in-place write to be made again)
    if oks: _raise_failed_checks({c: becomes[ok].base.buffer for c, ok in oks.items()})

  def _buffer_view(self) -> UOp:
    """The realized view (movement ops over a BUFFER) holding this tensor's values."""
    self.realize()
    view = computed_view(self.uop)
    assert view is not None, "realize() left the tensor without a buffer"
    return view

  def _contiguous_buffer(self) -> UOp:
    """A BUFFER holding exactly this tensor's elements in row-major order."""
    u = self._buffer_view()
    if not (u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)):
      t = Tensor(UOp(Ops.CONTIGUOUS, u.dtype, (u,))).realize()
      u = t.uop
    return u.base

  def data(self) -> memoryview:
    """The raw bytes of the (realized, contiguous) tensor."""
    from petagrad.engine.jit import jit_active, JitError
    if jit_active:
      raise _fail(JitError, "TinyJit", f"reading a tensor's value into Python inside the jitted function {jit_active[-1]!r} "
                  "cannot be replayed; return the tensor instead", self)
    buf = self._contiguous_buffer()
    return memoryview(buf.buffer.as_bytes())

  def tolist(self) -> Any:
    """Nested Python lists (a Python scalar for 0-d tensors)."""
    raw = self.data()
    dt = self.dtype
    n = self.numel()
    vals = list(struct.unpack(f"<{n}{dt.fmt}", raw)) if n else []
    if dt == dtypes.bfloat16: vals = [bf16_bits_to_float(v) for v in vals]
    if not self.shape: return vals[0]
    for d in reversed(self.shape[1:]): vals = [vals[i:i + d] for i in range(0, len(vals), d)] if d else [[] for _ in range(len(vals) // max(d, 1))]
    if self.shape and len(self.shape) > 1 and 0 in self.shape[1:]:
      return _empty_nested(self.shape)
    return vals

  def item(self) -> Scalar:
    """The single value of a one-element tensor."""
    if self.numel() != 1: raise _fail(ValueError, "item", f"only one-element tensors can be converted to a Python scalar, this one has {self.numel()}", self)
    return self.reshape(()).tolist()

  def numpy(self):
    """A numpy copy of the tensor (bfloat16 becomes float32: numpy has no bfloat16)."""
    import numpy as np
    if self.dtype == dtypes.bfloat16: return self.cast(dtypes.float32).numpy()
    npdt = np.dtype(self.dtype.name if self.dtype != dtypes.bool else "bool")
    return np.frombuffer(bytes(self.data()), dtype=npdt).reshape(self.shape).copy()

  def to(self, device: str) -> Tensor:
    """This tensor on another device (a copy; the same tensor when already there)."""
    dev = Device.canonicalize(device)
    if dev == self.device: return self
    return self._new(UOp(Ops.COPY, self.dtype, (self.uop, UOp(Ops.DEVICE, dtypes.bool, (), dev))))

  def clone(self) -> Tensor: return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
  def contiguous(self) -> Tensor:
    """A tensor whose data is one row-major buffer (a no-op if it already is)."""
    u = self.uop
    if u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER) or u.op is Ops.CONTIGUOUS: return self
    return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (u,)), self)
  def detach(self) -> Tensor: return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)))
  def contiguous_backward(self) -> Tensor:
    """Identity in the forward pass; in the backward pass the gradient flowing into this tensor is realized
    into its own contiguous buffer (a kernel boundary), in this tensor's layout.

    >>> from petagrad import Tensor
    >>> x = Tensor([1.0, 2.0], requires_grad=True)
    >>> (x.contiguous_backward() * 3).sum().backward(); x.grad.tolist()
    [3.0, 3.0]
    """
    return self._new(UOp(Ops.CONTIGUOUS_BACKWARD, self.dtype, (self.uop,)), self)
  def assign(self, x: Tensor | Scalar) -> Tensor:
    """Write x into this tensor's buffer (in place: every view of the buffer sees it)."""
    if not isinstance(x, Tensor):
      _check_fits("assign", _scalar_arg("assign", "value", x, self), self.dtype, True, self)
      x = Tensor(self._c(x))
    if x.shape != self.shape: x = x._broadcast_to(self.shape, "assign")
    if x.device != self.device: raise _fail(RuntimeError, "assign", f"value is on {x.device}, target on {self.device}", self, x)
    if x.dtype != self.dtype: x = x.cast(self.dtype)
    if self.uop.base.op is not Ops.BUFFER:
      self.uop = x.uop   # nothing to write into yet: behave like rebinding
      return self
    if any(u.op in (Ops.EXPAND, Ops.PAD) for u in _movement_nodes(self.uop)):
      raise _fail(RuntimeError, "assign", "cannot assign to an expanded or padded view", self)
    if _reads_other_view(x.uop, self.uop):   # the kernel would overwrite values it still has to read
      x = Tensor(UOp(Ops.CONTIGUOUS, x.dtype, (x.uop,))).realize()
    out = Tensor(UOp(Ops.ASSIGN, self.dtype, (self.uop, x.uop))).realize()
    self.uop = out.uop if self.uop.base is out.uop.base else self.uop
    return self

  # ------------------------------------------------------------ creation
  @staticmethod
  def _dev(device: str | None) -> str: return Device.canonicalize(device) if device is not None else Device.DEFAULT
  @staticmethod
  def full(shape, fill_value: Scalar, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A tensor filled with one value (no memory until realized). The value must fit the dtype (no wrapping, like
    PyTorch: Tensor.full((2,), 300, dtype=dtypes.uint8) raises).

    >>> Tensor.full((2,), 7).tolist()
    [7, 7]
    """
    shape = _shape_arg("full", shape if isinstance(shape, (tuple, list)) else (shape,))
    fill_value = _scalar_arg("full", "fill_value", fill_value)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.from_py(fill_value)
    _check_fits("full", fill_value, dt)
    c = UOp.const(dt, fill_value, Tensor._dev(device))
    return Tensor(c.reshape((1,) * len(shape)).expand(shape) if shape else c, requires_grad=requires_grad)
  @staticmethod
  def zeros(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
    return Tensor.full(_shape_arg("zeros", shape), 0.0, _dtype_arg(dtype) if dtype is not None else dtypes.default_float, device, requires_grad)
  @staticmethod
  def ones(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
    return Tensor.full(_shape_arg("ones", shape), 1.0, _dtype_arg(dtype) if dtype is not None else dtypes.default_float, device, requires_grad)
  @staticmethod
  def empty(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
    """Uninitialized memory (here: a fresh buffer, zero-filled by the allocator)."""
    shape = _shape_arg("empty", shape)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    return Tensor(new_buffer(Tensor._dev(device), prod(shape), dt).reshape(shape), requires_grad=requires_grad)
  def full_like(self, fill_value: Scalar, dtype=None, device=None) -> Tensor:
    return Tensor.full(self.shape, fill_value, _dtype_arg(dtype) if dtype is not None else self.dtype, device or self.device)
  def zeros_like(self, dtype=None, device=None) -> Tensor: return self.full_like(0, dtype, device)
  def ones_like(self, dtype=None, device=None) -> Tensor: return self.full_like(1, dtype, device)
  def empty_like(self, dtype=None, device=None) -> Tensor: return Tensor.empty(self.shape, dtype=dtype or self.dtype, device=device or self.device)
  def rand_like(self, dtype=None, device=None) -> Tensor: return Tensor.rand(self.shape, dtype=dtype or (self.dtype if self.dtype.is_float else None), device=device or self.device)
  def randn_like(self, dtype=None, device=None) -> Tensor: return Tensor.randn(self.shape, dtype=dtype or (self.dtype if self.dtype.is_float else None), device=device or self.device)

  @staticmethod
  def arange(start: Scalar, stop: Scalar | None = None, step: Scalar = 1, dtype=None, device=None, requires_grad=None) -> Tensor:
    """Values from start (inclusive) to stop (exclusive) by step, like torch.arange; a range that runs against the
    step is empty (like numpy; torch raises), a value that does not fit the dtype raises.

    >>> Tensor.arange(1, 7, 2).tolist()
    [1, 3, 5]
    """
    if stop is None: start, stop = 0, start
    start, stop, step = (_scalar_arg("arange", k, v) for k, v in (("start", start), ("end", stop), ("step", step)))
    if step == 0: raise _fail(ValueError, "arange", "step must be nonzero")
    if not all(math.isfinite(v) for v in (start, stop, step)): raise _fail(RuntimeError, "arange", f"unsupported range: {start} -> {stop} by {step}")
    if all(isinstance(v, int) for v in (start, stop, step)): n = max(0, -((start - stop) // step))   # exact for big ints
    else: n = (stop - start) / step   # a float: ceil'd below once it is known to be a sane count
    if n > MAX_NUMEL: raise _fail(DTypeOverflowError, "arange", f"{n} elements cannot be counted in int64 without overflow (at most {MAX_NUMEL})")
    n = max(0, math.ceil(n))
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
    for v in ((start, start + (n - 1) * step) if n else ()): _check_fits("arange", v, dt)   # the first and the last value
    dev = Tensor._dev(device)
    idx = Tensor(UOp(Ops.IOTA, dtypes.int64, (UOp(Ops.DEVICE, dtypes.bool, (), dev),), n))
    if dt.is_float: return Tensor((idx.cast(dt) * step + start).uop if step != 1 or start else idx.cast(dt).uop, requires_grad=requires_grad)
    return Tensor((idx * step + start).cast(dt).uop if step != 1 or start else idx.cast(dt).uop, requires_grad=requires_grad)
  @staticmethod
  def linspace(start: Scalar, stop: Scalar, steps: int, dtype=None, device=None) -> Tensor:
    """`steps` evenly spaced values from start to stop, both included."""
    steps = _int_arg("linspace", "steps", steps)
    start, stop = _scalar_arg("linspace", "start", start), _scalar_arg("linspace", "end", stop)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    for v in (start, stop): _check_fits("linspace", v, dt)
    if steps == 1: return Tensor.full((1,), start, dt, device)
    step = (stop - start) / max(steps - 1, 1)
    idx = Tensor.arange(steps, device=device).cast(dtypes.float64 if dt == dtypes.float64 else dtypes.float32)
    # symmetric from both ends, like torch, so the last value is exactly `stop`
    half = steps // 2
    out = (idx < half).where(idx * step + start, stop - (steps - 1 - idx) * step)
    return out.cast(dt)
  @staticmethod
  def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad=None) -> Tensor:
    """The identity matrix (n x m)."""
    n = _int_arg("eye", "n", n)
    m = n if m is None else _int_arg("eye", "m", m)
    a, b = Tensor.arange(n, device=device), Tensor.arange(m, device=device)
    return Tensor((a.reshape(n, 1) == b.reshape(1, m)).cast(_dtype_arg(dtype) if dtype else dtypes.default_float).uop, requires_grad=requires_grad)

  # ------------------------------------------------------------ random (counter-based, runs inside kernels)
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Make Tensor.rand & co reproducible."""
    Tensor._seed, Tensor._rng_counter = int(seed), 0
  @staticmethod
  def _random_bits(shape: tuple[int, ...], device: str) -> Tensor:
    """uint32 random bits: a hash of (seed, call counter, element index), computed in the kernel.
    The counter and keys live in a small buffer (not in the kernel source), so a JIT replay can
    advance them without recompiling."""
    n = prod(shape)
    state = Tensor(_rng_state_buffer(n, device))
    ctr, k0, k1 = (state[i] for i in range(3))
    idx = Tensor(UOp(Ops.IOTA, dtypes.int64, (UOp(Ops.DEVICE, dtypes.bool, (), device),), n)).cast(dtypes.uint32)
    x = idx + ctr
    x = _hash32_t(x ^ k0) ^ k1
    x = _hash32_t(x)
    return x.reshape(shape)
  @staticmethod
  def rand(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
    """Uniform random numbers in [0, 1).

    >>> Tensor.manual_seed(0); 0 <= Tensor.rand(3).max().item() < 1
    True
    """
    shape = _shape_arg("rand", shape)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    if not dt.is_float: raise _fail(TypeError, "rand", f"dtype must be a float dtype, got {dt}")
    bits = Tensor._random_bits(shape, Tensor._dev(device))
    # 24 random bits -> [0, 1) exactly representable in float32
    u = (bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))
    if dt != dtypes.float32: u = u.cast(dt)
    if dt.itemsize < 4: u = (u < 1.0).where(u, 0.0)   # rounding up to 1.0 in low precision
    return Tensor(u.uop, requires_grad=requires_grad)
  @staticmethod
  def randn(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
    """Standard normal random numbers (Box-Muller)."""
    shape = _shape_arg("randn", shape)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    u = Tensor.rand(2, *shape, dtype=dtypes.float32, device=device)
    r = ((1 - u[0]).log() * -2).sqrt()
    out = r * (u[1] * (2 * math.pi)).cos()
    return Tensor(out.cast(dt).uop, requires_grad=requires_grad)
  @staticmethod
  def randint(*shape, low: int = 0, high: int = 10, dtype=dtypes.int32, device=None) -> Tensor:
    """Random integers in [low, high); both bounds must fit the dtype (like torch), high - low <= 2**32."""
    low, high = _int_arg("randint", "low", low, minimum=None), _int_arg("randint", "high", high, minimum=None)
    if high <= low: raise _fail(ValueError, "randint", f"high ({high}) must be > low ({low})")
    shape, dt = _shape_arg("randint", shape), _dtype_arg(dtype)
    for v in (low, high - 1): _check_fits("randint", v, dt)
    if high - low > 1 << 32: raise _fail(ValueError, "randint", f"high - low ({high - low}) must be at most 2**32 (32 random bits per value)")
    bits = Tensor._random_bits(shape, Tensor._dev(device)).cast(dtypes.uint64)
    return ((bits * (high - low)) >> 32).cast(dtypes.int64).add(low).cast(_dtype_arg(dtype))
  @staticmethod
  def uniform(*shape, low: float = 0.0, high: float = 1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    return Tensor((Tensor.rand(*shape, dtype=dt, device=device) * (high - low) + low).uop, requires_grad=requires_grad)
  @staticmethod
  def normal(*shape, mean: float = 0.0, std: float = 1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    return Tensor((Tensor.randn(*shape, dtype=dt, device=device) * std + mean).uop, requires_grad=requires_grad)

  # ------------------------------------------------------------ autograd
  def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
    """Gradients of this (scalar) tensor w.r.t. `targets`, as new lazy tensors.

    >>> x = Tensor([2.0, 3.0], requires_grad=True)
    >>> (x * x).sum().gradient(x)[0].tolist()
    [4.0, 6.0]
    """
    root = self.uop
    if gradient is None:
      if self.numel() != 1: raise _fail(RuntimeError, "backward", f"grad can be implicitly created only for scalar outputs, got shape {self.shape}", self)
      gradient = Tensor(self._c(1.0))
    elif gradient.shape != self.shape: raise _fail(ValueError, "backward", f"gradient shape {gradient.shape} != tensor shape {self.shape}", self, gradient)
    nodes = root.toposort()
    tnodes = [t._ctx if t._ctx is not None and t._ctx in nodes else t.uop for t in targets]
    grads = compute_gradient(root, gradient.uop, set(tnodes))
    out = []
    for t, n in zip(targets, tnodes):
      g = grads.get(n)
      out.append(Tensor(g) if g is not None else t.zeros_like())
    return out

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Accumulate d(self)/d(leaf) into `.grad` of every tensor with requires_grad=True in the graph."""
    nodes = self.uop.toposort()
    leaves = [t for t in list(_grad_leaves.values()) if t.requires_grad and (t.uop in nodes or t._ctx in nodes)]
    if not leaves: raise _fail(RuntimeError, "backward", "no tensor in the graph requires grad", self)
    for t, g in zip(leaves, self.gradient(*leaves, gradient=gradient)):
      if g.shape != t.shape: g = g.reshape(t.shape)
      t.grad = g if t.grad is None else (t.grad + g)
    return self

  # ------------------------------------------------------------ broadcasting and elementwise plumbing
  def _broadcast_to(self, shape: tuple[int, ...], op: str = "expand", *others) -> Tensor:
    if self.shape == shape: return self
    if len(shape) < self.ndim: raise _fail(ValueError, op, f"cannot broadcast shape {self.shape} to {shape}", self, *others)
    padded = (1,) * (len(shape) - self.ndim) + self.shape
    for s, n in zip(padded, shape):
      if s != n and s != 1: raise _fail(ValueError, op, f"shapes are not broadcastable: {self.shape} to {shape}", self, *others)
    return self._new(self.uop.reshape(padded).expand(shape), self)

  def _operands(self, op: str, x: Any, reverse: bool = False) -> tuple[Tensor, Tensor]:
    """Promote and broadcast (self, x) for a binary op; Python scalars do not widen the dtype."""
    if isinstance(x, Tensor):
      if x.device != self.device:
        raise _fail(RuntimeError, op, f"tensors are on different devices: {self.device} and {x.device}", self, x)
      if x.dtype is self.dtype and x.shape == self.shape: return (x, self) if reverse else (self, x)   # the common case
      try: dt = promote(self.dtype, x.dtype)
      except TypeError as e: raise _fail(TypeError, op, str(e), self, x) from None
      a, b = self, x
    elif isinstance(x, (int, float, bool)):
      # the common case again, built on the graph directly: the constant broadcast to self's shape
      dt = promote_scalar(self.dtype, x)
      # an int beyond 64 bits (or beyond any float) raises like torch; one in the 64-bit range wraps into an int dtype
      # like torch does (int8 + 1000, int8 == 300, int32 & 0xFFFFFFFF)
      if type(x) is int and (not -(1 << 63) <= x < (1 << 64) if dt.is_int else x.bit_length() > 1000): _scalar_operand(op, x, dt, self)
      a = self.cast(dt)
      b = a._new(a._c(x))
      b._requires_grad = None
      return (b, a) if reverse else (a, b)
    else:
      raise _fail(TypeError, op, f"unsupported operand type {type(x).__name__}", self)
    shape = _broadcast_shape(op, a, b)
    a, b = a.cast(dt)._broadcast_to(shape, op, a, b), b.cast(dt)._broadcast_to(shape, op, a, b)
    return (b, a) if reverse else (a, b)

  def _binop(self, op: Ops, x: Any, reverse: bool = False, name: str = "", dtype: DType | None = None) -> Tensor:
    a, b = self._operands(name or op.name.lower(), x, reverse)
    return a._new(UOp(op, dtype or (dtypes.bool if op in GroupOp.Comparison else a.dtype), (a.uop, b.uop)), b)
  def _unop(self, op: Ops) -> Tensor: return self._new(UOp(op, self.dtype, (self.uop,)), self)
  def _float(self, name: str) -> Tensor:
    """Self as a float tensor (ints and bools become the default float, like PyTorch's math functions)."""
    return self if self.dtype.is_float else self.cast(dtypes.default_float)

  def cast(self, dtype: DType | str) -> Tensor:
    """Convert elements to another dtype (floats to ints truncate toward zero)."""
    dt = _dtype_arg(dtype)
    return self if dt == self.dtype else self._new(self.uop.cast(dt), self)
  def bitcast(self, dtype: DType | str) -> Tensor:
    """Reinterpret the bits as another dtype of the same size."""
    dt = _dtype_arg(dtype)
    if dt.itemsize != self.dtype.itemsize: raise _fail(TypeError, "bitcast", f"{self.dtype} and {dt} differ in size", self)
    return self if dt == self.dtype else Tensor(self.uop.bitcast(dt))
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def bfloat16(self) -> Tensor: return self.cast(dtypes.bfloat16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)
  def is_floating_point(self) -> bool: return self.dtype.is_float

  # ------------------------------------------------------------ arithmetic
  def add(self, x, alpha: Scalar | None = None) -> Tensor:
    if alpha is not None: x = x * alpha
    if self.dtype.is_bool and isinstance(x, Tensor) and x.dtype.is_bool: return self._binop(Ops.OR, x, name="add")
    return self._binop(Ops.ADD, x)
  def sub(self, x, alpha: Scalar | None = None, reverse: bool = False) -> Tensor:
    if alpha is not None: x = x * alpha
    a, b = self._operands("sub", x, reverse)
    if a.dtype.is_bool: raise _fail(TypeError, "sub", "subtraction of bool tensors is not supported; use logical_xor", a, b)
    return a._new(UOp(Ops.SUB, a.dtype, (a.uop, b.uop)), b)
  def mul(self, x) -> Tensor:
    if self.dtype.is_bool and isinstance(x, Tensor) and x.dtype.is_bool: return self._binop(Ops.AND, x, name="mul")
    return self._binop(Ops.MUL, x)
  def div(self, x, rounding_mode: str | None = None, reverse: bool = False) -> Tensor:
    """True division (ints give floats); rounding_mode 'trunc' or 'floor' like torch.div."""
    if rounding_mode not in (None, "trunc", "floor"): raise _fail(ValueError, "div", f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}", self)
    a, b = self._operands("div", x, reverse)
    if rounding_mode is not None: b = _check_int_divisor("div", a, b)
    if rounding_mode == "trunc": return a._trunc_div(b)
    if rounding_mode == "floor": return a._floor_div(b)
    a, b = a._float("div"), b._float("div")
    return a._new(UOp(Ops.FDIV, a.dtype, (a.uop, b.uop)), b)
  def _trunc_div(self, b: Tensor) -> Tensor:
    if self.dtype.is_float: return (self / b).trunc()
    return self._new(UOp(Ops.IDIV, self.dtype, (self.uop, b.uop)), b)
  def _floor_div(self, b: Tensor) -> Tensor:
    if self.dtype.is_float: return (self / b).floor()
    q = self._trunc_div(b)
    fix = ((q * b).ne(self)) & ((self < 0) ^ (b < 0))
    return fix.where(q - 1, q)
  def floordiv(self, x, reverse: bool = False) -> Tensor:
    a, b = self._operands("floordiv", x, reverse)
    b = _check_int_divisor("floordiv", a, b)
    return a._floor_div(b)
  def mod(self, x, reverse: bool = False) -> Tensor:
    """Python-style remainder: the result has the sign of the divisor (torch.remainder)."""
    a, b = self._operands("remainder", x, reverse)
    b = _check_int_divisor("remainder", a, b)
    if a.dtype.is_float:
      r = a - (a / b).floor() * b
      # x % +-inf is x when the signs agree (or x is 0), else +-inf (Python and PyTorch)
      inf = (b.abs() == float("inf")) & (a.abs() != float("inf"))
      return inf.where(((a == 0) | ((a < 0) == (b < 0))).where(a, b), r)
    r = a._new(UOp(Ops.MOD, a.dtype, (a.uop, b.uop)), b)
    return ((r.ne(0)) & ((r < 0) ^ (b < 0))).where(r + b, r)
  remainder = mod
  def neg(self) -> Tensor:
    if self.dtype.is_bool: raise _fail(TypeError, "neg", "negation of a bool tensor is not supported; use logical_not", self)
    return self._unop(Ops.NEG)
  def reciprocal(self) -> Tensor: return self._float("reciprocal")._unop(Ops.RECIPROCAL)

  def __add__(self, x): return self.add(x)
  def __radd__(self, x): return self.add(x)
  def __sub__(self, x): return self.sub(x)
  def __rsub__(self, x): return self.sub(x, reverse=True)
  def __mul__(self, x): return self.mul(x)
  def __rmul__(self, x): return self.mul(x)
  def __truediv__(self, x): return self.div(x)
  def __rtruediv__(self, x): return self.div(x, reverse=True)
  def __floordiv__(self, x): return self.floordiv(x)
  def __rfloordiv__(self, x): return self.floordiv(x, reverse=True)
  def __mod__(self, x): return self.mod(x)
  def __rmod__(self, x): return self.mod(x, reverse=True)
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self.pow(x, reverse=True)
  def __neg__(self): return self.neg()
  def __pos__(self): return self
  def __abs__(self): return self.abs()
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return Tensor(x, device=self.device).matmul(self) if not isinstance(x, Tensor) else x.matmul(self)
  def __and__(self, x): return self.bitwise_and(x)
  def __rand__(self, x): return self.bitwise_and(x)
  def __or__(self, x): return self.bitwise_or(x)
  def __ror__(self, x): return self.bitwise_or(x)
  def __xor__(self, x): return self.bitwise_xor(x)
  def __rxor__(self, x): return self.bitwise_xor(x)
  def __invert__(self): return self.bitwise_not()
  def __lshift__(self, x): return self.lshift(x)
  def __rshift__(self, x): return self.rshift(x)
  def __rlshift__(self, x): return self.lshift(x, reverse=True)
  def __rrshift__(self, x): return self.rshift(x, reverse=True)
  # comparisons
  def __lt__(self, x): return self._binop(Ops.CMPLT, x, name="lt")
  def __gt__(self, x): return self._binop(Ops.CMPLT, x, reverse=True, name="gt")
  def __le__(self, x): return (self < x) | (self == x)   # not `not (a > b)`: both are False for NaN
  def __ge__(self, x): return (self > x) | (self == x)
  def __eq__(self, x): return self.ne(x).logical_not()   # type: ignore[override]
  def __ne__(self, x): return self.ne(x)   # type: ignore[override]
  def ne(self, x) -> Tensor: return self._binop(Ops.CMPNE, x, name="ne")
  def eq(self, x) -> Tensor: return self == x
  def lt(self, x) -> Tensor: return self < x
  def gt(self, x) -> Tensor: return self > x
  def le(self, x) -> Tensor: return self <= x
  def ge(self, x) -> Tensor: return self >= x
  # in place: the Tensor object is updated (PyTorch semantics for the object, lazily)
  def _inplace(self, r: Tensor, op: str) -> Tensor:
    if r.dtype != self.dtype and promote(r.dtype, self.dtype) != self.dtype:
      raise _fail(TypeError, op, f"result type {r.dtype} can't be cast to the desired output type {self.dtype}", self)
    r = r.cast(self.dtype)
    if self.uop.base.op is Ops.BUFFER and self.uop.op is not Ops.BUFFER or self.uop.op is Ops.BUFFER: return self.assign(r)
    self.uop = r.uop
    self.requires_grad = self.requires_grad or r.requires_grad
    return self
  def __iadd__(self, x): return self._inplace(self + x, "add_")
  def __isub__(self, x): return self._inplace(self - x, "sub_")
  def __imul__(self, x): return self._inplace(self * x, "mul_")
  def __itruediv__(self, x): return self._inplace(self / x, "div_")
  def __ifloordiv__(self, x): return self._inplace(self // x, "floor_divide_")
  def __imod__(self, x): return self._inplace(self % x, "remainder_")
  def __ipow__(self, x): return self._inplace(self ** x, "pow_")
  def __iand__(self, x): return self._inplace(self & x, "bitwise_and_")
  def __ior__(self, x): return self._inplace(self | x, "bitwise_or_")
  def __ixor__(self, x): return self._inplace(self ^ x, "bitwise_xor_")
  def __ilshift__(self, x): return self._inplace(self << x, "lshift_")
  def __irshift__(self, x): return self._inplace(self >> x, "rshift_")
  def __imatmul__(self, x): return self._inplace(self @ x, "matmul_")

  # ------------------------------------------------------------ logical and bitwise
  def _check_int_or_bool(self, op: str, *others: Tensor) -> None:
    for t in (self,) + others:
      if t.dtype.is_float: raise _fail(TypeError, op, f"needs integer or bool tensors, got {t.dtype}", self, *others)
  def bitwise_and(self, x) -> Tensor:
    a, b = self._operands("bitwise_and", x); a._check_int_or_bool("bitwise_and", b)
    return a._new(UOp(Ops.AND, a.dtype, (a.uop, b.uop)))
  def bitwise_or(self, x) -> Tensor:
    a, b = self._operands("bitwise_or", x); a._check_int_or_bool("bitwise_or", b)
    return a._new(UOp(Ops.OR, a.dtype, (a.uop, b.uop)))
  def bitwise_xor(self, x) -> Tensor:
    a, b = self._operands("bitwise_xor", x); a._check_int_or_bool("bitwise_xor", b)
    return a._new(UOp(Ops.XOR, a.dtype, (a.uop, b.uop)))
  def bitwise_not(self) -> Tensor:
    self._check_int_or_bool("bitwise_not")
    return self._new(UOp(Ops.XOR, self.dtype, (self.uop, self._c(True if self.dtype.is_bool else -1))))
  def lshift(self, x, reverse: bool = False) -> Tensor:
    a, b = self._operands("lshift", x, reverse); a._check_int_or_bool("lshift", b)
    return a._new(UOp(Ops.SHL, a.dtype, (a.uop, b.uop)))
  def rshift(self, x, reverse: bool = False) -> Tensor:
    a, b = self._operands("rshift", x, reverse); a._check_int_or_bool("rshift", b)
    return a._new(UOp(Ops.SHR, a.dtype, (a.uop, b.uop)))
  def logical_not(self) -> Tensor: return self.cast(dtypes.bool).bitwise_xor(True)
  # a scalar operand is taken as a bool right away (2**70 is True, no int constant that wraps first)
  def logical_and(self, x) -> Tensor: return self.cast(dtypes.bool).bitwise_and(_as_tensor(_truth("logical_and", x, self), self).cast(dtypes.bool))
  def logical_or(self, x) -> Tensor: return self.cast(dtypes.bool).bitwise_or(_as_tensor(_truth("logical_or", x, self), self).cast(dtypes.bool))
  def logical_xor(self, x) -> Tensor: return self.cast(dtypes.bool).bitwise_xor(_as_tensor(_truth("logical_xor", x, self), self).cast(dtypes.bool))

  # ------------------------------------------------------------ math
  def maximum(self, x) -> Tensor: return self._binop(Ops.MAX, x, name="maximum")
  def minimum(self, x) -> Tensor:
    a, b = self._operands("minimum", x)
    if a.dtype.is_float: return -((-a).maximum(-b))
    return a.bitwise_not().maximum(b.bitwise_not()).bitwise_not()
  def where(self, x, y) -> Tensor:
    """Elementwise `x if self else y` (self is the condition; a non-bool condition is true where it is nonzero,
    as in tinygrad, where torch asks for a bool tensor).

    >>> Tensor([True, False]).where(1, 2).tolist()
    [1, 2]
    """
    cond = self.cast(dtypes.bool)
    if not isinstance(x, Tensor): x = _scalar_arg("where", "input", x, cond)
    if not isinstance(y, Tensor): y = _scalar_arg("where", "other", y, cond)
    if isinstance(x, Tensor) and isinstance(y, Tensor):
      try: dt = promote(x.dtype, y.dtype)
      except TypeError as e: raise _fail(TypeError, "where", str(e), cond, x, y) from None
    elif isinstance(x, Tensor): dt = promote_scalar(x.dtype, y)
    elif isinstance(y, Tensor): dt = promote_scalar(y.dtype, x)
    else: dt = promote(dtypes.from_py(x), dtypes.from_py(y))
    for v in (x, y):   # a scalar must fit the result's dtype (like torch.where on int8 with 1000)
      if not isinstance(v, Tensor): _check_fits("where", v, dt, True, cond)
    xt, yt = _as_tensor(x, cond, dt).cast(dt), _as_tensor(y, cond, dt).cast(dt)
    for t in (xt, yt):
      if t.device != cond.device: raise _fail(RuntimeError, "where", f"tensors are on different devices: {cond.device} and {t.device}", cond, xt, yt)
    shape = _broadcast_shape("where", cond, xt, yt)
    c, xt, yt = cond._broadcast_to(shape, "where"), xt._broadcast_to(shape, "where"), yt._broadcast_to(shape, "where")
    return xt._new(UOp(Ops.WHERE, dt, (c.uop, xt.uop, yt.uop)), yt)
  def abs(self) -> Tensor: return self if self.dtype.is_bool or self.dtype.is_unsigned else self.maximum(-self)
  def sign(self) -> Tensor:
    if self.dtype.is_bool: return self
    return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype) if not self.dtype.is_unsigned else (self > 0).cast(self.dtype)
  def exp2(self) -> Tensor: return self._float("exp2")._unop(Ops.EXP2)
  def exp(self) -> Tensor: return (self._float("exp") * (1 / math.log(2)))._unop(Ops.EXP2)
  def log2(self) -> Tensor: return self._float("log2")._unop(Ops.LOG2)
  def log(self) -> Tensor: return self._float("log")._unop(Ops.LOG2) * math.log(2)
  def log10(self) -> Tensor: return self._float("log10")._unop(Ops.LOG2) * (math.log(2) / math.log(10))
  def sqrt(self) -> Tensor: return self._float("sqrt")._unop(Ops.SQRT)
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def square(self) -> Tensor: return self * self if not self.dtype.is_bool else self.cast(dtypes.int64).square()
  def sin(self) -> Tensor: return self._float("sin")._unop(Ops.SIN)
  def cos(self) -> Tensor:
    """cos(x) = sin(pi/2 - x), with the reduction by multiples of pi/2 done in float64 so large |x|
    keep their accuracy."""
    x = self._float("cos")
    if x.dtype == dtypes.float64: return ((math.pi / 2) - x)._unop(Ops.SIN)
    xd = x.cast(dtypes.float64)
    k = (xd * (2 / math.pi)).round_half_even()
    r = (xd - k * (math.pi / 2)).cast(x.dtype)    # |r| <= pi/4
    q = (k % 4).cast(dtypes.int32)
    c, s_ = ((math.pi / 2) - r)._unop(Ops.SIN), r._unop(Ops.SIN)   # cos(r), sin(r)
    return (q == 0).where(c, (q == 1).where(-s_, (q == 2).where(-c, s_)))
  def tan(self) -> Tensor: return self.sin() / self.cos()
  def trunc(self) -> Tensor: return self if not self.dtype.is_float else self._unop(Ops.TRUNC)
  def floor(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def sigmoid(self) -> Tensor:
    # one exp of -|x| (in (0, 1]): it never overflows, so no gradient becomes inf * 0 = nan
    x = self._float("sigmoid")
    pos = x >= 0
    e = pos.where(-x, x).exp()
    r = (1 + e).reciprocal()
    return pos.where(r, e * r)
  def tanh(self) -> Tensor: return 2 * (2 * self._float("tanh")).sigmoid() - 1
  def relu(self) -> Tensor: return ((self < 0) | (self == 0)).where(0, self)   # NaN stays NaN, like PyTorch
  def silu(self) -> Tensor: return self * self.sigmoid()
  swish = silu
  def erf(self) -> Tensor:
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)
    x = self._float("erf")
    pos = x >= 0
    a = pos.where(x, -x)   # |x| whose gradient at 0 is the right-hand one (erf is smooth there)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * (-(a * a)).exp()
    return pos.where(y, -y)
  def gelu(self, approximate: str = "none") -> Tensor:
    """GELU; approximate='tanh' for the tanh form (PyTorch's default is the exact erf form)."""
    if approximate == "tanh": return 0.5 * self * (1 + (math.sqrt(2 / math.pi) * (self + 0.044715 * self * self * self)).tanh())
    if approximate != "none": raise _fail(ValueError, "gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return 0.5 * self * (1 + (self * (1 / math.sqrt(2))).erf())
  def clip(self, min_=None, max_=None, min=None, max=None) -> Tensor:   # noqa: A002  (torch's keyword names)
    """Clamp into [min_, max_] (either may be None; torch's keywords min= and max= work too); the gradient passes
    where min_ <= x <= max_."""
    if min is not None: min_ = min
    if max is not None: max_ = max
    if min_ is None and max_ is None: raise _fail(ValueError, "clip", "at least one of min_ and max_ must be given", self)
    for v in (min_, max_):   # a bound must fit the result's dtype, like torch.clamp
      if v is not None and not isinstance(v, Tensor): _check_fits("clip", v, promote_scalar(self.dtype, _scalar_arg("clip", "bound", v, self)), True, self)
    x = self
    if min_ is not None: x = (x < min_).where(min_, x)
    if max_ is not None: x = (x > max_).where(max_, x)
    return x
  clamp = clip
  def pow(self, x, reverse: bool = False) -> Tensor:
    """self ** x (x ** self when reverse). Small integer exponents multiply exactly."""
    if self.dtype.is_bool and not (isinstance(x, Tensor) and x.dtype.is_float) and not isinstance(x, float):
      return self.cast(dtypes.int64).pow(x, reverse)   # bool ** int is int64 in PyTorch
    if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool) and float(x).is_integer() and abs(x) <= 16:
      n, base, acc = abs(int(x)), self, None
      while n:
        if n & 1: acc = base if acc is None else acc * base
        n >>= 1
        if n: base = base * base
      if acc is None:   # x ** 0 == 1, with a zero gradient (the graph keeps x, like PyTorch)
        one = self.ones_like() if not self.dtype.is_bool else self.ones_like(dtypes.int64)
        return Tensor.full(self.shape, True, dtypes.bool, self.device).where(one, self.cast(one.dtype))
      return acc.reciprocal() if x < 0 else acc
    if not reverse and isinstance(x, float) and x == 0.5: return self.sqrt()
    a, b = self._operands("pow", x, reverse)
    if a.dtype.is_bool: a, b = a.cast(dtypes.int64), b.cast(dtypes.int64)
    if not a.dtype.is_float:   # integer power through float, rounded back
      return a.cast(dtypes.float64).pow(b.cast(dtypes.float64)).round_half_even().cast(a.dtype)
    zero = a == 0
    # at a == 0 the log is -inf: take log2(1) there (no inf * 0 = nan in the gradient) and fix the value below
    mag = (b * zero.where(1.0, a.abs()).log2()).exp2()
    mag = zero.where((b > 0).where(0.0, float("inf")).cast(mag.dtype), mag)   # two scalars alone would be float32
    b_int = b.trunc() == b
    odd = b_int & ((b.abs() % 2) == 1)
    neg_result = (a < 0) & odd
    out = neg_result.where(-mag, mag)
    out = ((a < 0) & b_int.logical_not()).where(float("nan"), out)
    return (b == 0).where(1.0, out)
  def round_half_even(self) -> Tensor:
    if not self.dtype.is_float: return self
    f = self.floor()
    d = self - f
    even = (f % 2) == 0
    return (d > 0.5).where(f + 1, (d < 0.5).where(f, even.where(f, f + 1)))
  def round(self, decimals: int = 0) -> Tensor:
    """Round half to even, to `decimals` decimal places (like torch.round).

    >>> Tensor([0.5, 1.5, 1.2345]).round().tolist(), Tensor([1.2345]).round(decimals=2).tolist()
    ([0.0, 2.0, 1.0], [1.2300000190734863])
    """
    if not isinstance(decimals, int) or isinstance(decimals, bool): raise _fail(TypeError, "round", f"decimals must be an int, got {decimals!r}", self)
    if decimals == 0 or not self.dtype.is_float: return self.round_half_even()
    if abs(decimals) > 308: raise _fail(ValueError, "round", f"decimals must be in [-308, 308] (10**decimals must be a finite float), got {decimals}", self)
    scale = 10.0 ** decimals
    return (self * scale).round_half_even() / scale

  # ------------------------------------------------------------ movement
  def reshape(self, *shape) -> Tensor:
    """Same elements, new shape; one dimension may be -1.

    >>> Tensor.arange(6).reshape(2, -1).shape
    (2, 3)
    """
    shape = _shape_arg("reshape", shape, self, wildcard=True, name="shape")
    if shape.count(-1) > 1: raise _fail(ValueError, "reshape", f"only one dimension can be -1, got {shape}", self)
    if -1 in shape:
      rest = prod(s for s in shape if s != -1)
      if rest == 0 or self.numel() % rest: raise _fail(ValueError, "reshape", f"cannot reshape {self.shape} into {shape}", self)
      shape = tuple(self.numel() // rest if s == -1 else s for s in shape)
    if any(s < 0 for s in shape) or prod(shape) != self.numel():
      raise _fail(ValueError, "reshape", f"cannot reshape {self.shape} ({self.numel()} elements) into {shape}", self)
    return self._new(self.uop.reshape(tuple(shape)), self)
  view = reshape
  def permute(self, *order) -> Tensor:
    order = argfix(*order)
    if len(order) != self.ndim: raise _fail(ValueError, "permute", f"order {order} does not match {self.ndim} dims", self)
    norm = tuple(_resolve_axis("permute", o, self.ndim, self) for o in order)
    if sorted(norm) != list(range(self.ndim)): raise _fail(ValueError, "permute", f"order {order} is not a permutation", self)
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
  def type_as(self, other: Tensor) -> Tensor: return self.cast(_tensor_arg("type_as", "other", other, self).dtype)
  def new_full(self, size, fill_value, dtype=None, device=None) -> Tensor:
    """A tensor of `size` filled with fill_value, with this tensor's dtype and device unless given."""
    size = _shape_arg("new_full", size if isinstance(size, (tuple, list)) else (size,), self)
    return Tensor.full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device)
  def new_zeros(self, *size, dtype=None, device=None) -> Tensor: return self.new_full(_shape_arg("new_zeros", size, self), 0, dtype, device)
  def new_ones(self, *size, dtype=None, device=None) -> Tensor: return self.new_full(_shape_arg("new_ones", size, self), 1, dtype, device)
  def new_empty(self, *size, dtype=None, device=None) -> Tensor:
    return Tensor.empty(_shape_arg("new_empty", size, self), dtype=dtype or self.dtype, device=device or self.device)
  def expand(self, *shape) -> Tensor:
    """Broadcast size-1 dims to a bigger size (-1 keeps a dim). No copy."""
    shape = _shape_arg("expand", shape, self, wildcard=True)
    if len(shape) < self.ndim: raise _fail(ValueError, "expand", f"cannot expand {self.shape} to fewer dims {shape}", self)
    if -1 in shape[:len(shape) - self.ndim]: raise _fail(ValueError, "expand", f"-1 is not allowed in a new leading dim: {shape}", self)
    full = (1,) * (len(shape) - self.ndim) + self.shape
    new = tuple(f if s == -1 else s for s, f in zip(shape, full))
    return self._broadcast_to(new, "expand")
  def expand_as(self, other: Tensor) -> Tensor: return self.expand(_tensor_arg("expand_as", "other", other, self).shape)
  def pad(self, padding: Sequence, mode: str = "constant", value: Scalar = 0.0) -> Tensor:
    """Pad with `value`. `padding` is either one (before, after) pair per dim, or PyTorch's flat
    form (last dim first: left, right, top, bottom, ...). Negative padding crops. `value` must fit the dtype."""
    pairs = self._pad_pairs(padding)
    if mode != "constant": return self._pad_mode(pairs, mode)   # reflect / replicate / circular (mixin/nn.py)
    value = _scalar_arg("pad", "value", value, self)
    _check_fits("pad", value, self.dtype, True, self)
    x = self
    if any(b < 0 or a < 0 for b, a in pairs):
      x = x.shrink(tuple((-min(b, 0), s + min(a, 0)) for (b, a), s in zip(pairs, x.shape)))
      pairs = [(max(b, 0), max(a, 0)) for b, a in pairs]
    padded = x._new(x.uop.pad(tuple(pairs)), x)
    if value == 0: return padded
    mask = Tensor.ones(*x.shape, dtype=dtypes.bool, device=x.device).pad(pairs)
    return mask.where(padded, Tensor(UOp.const(self.dtype, value, self.device)))   # the value in self's dtype, like torch
  def _pad_pairs(self, padding: Any) -> list[tuple[int, int]]:
    """pad's padding argument -> one (before, after) pair of ints per dim, checked (the crop of negative pads too)."""
    def is_int(v: Any) -> bool: return not isinstance(v, bool) and hasattr(type(v), "__index__")
    if not isinstance(padding, (tuple, list)):
      raise _fail(TypeError, "pad", f"padding must be a sequence of ints or of (before, after) pairs, got {type(padding).__name__} {padding!r}", self)
    if all(is_int(p) for p in padding):
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise _fail(ValueError, "pad", f"flat padding {tuple(padding)} must have an even length of at most 2 * ndim = {2 * self.ndim}", self)
      pairs = [(0, 0)] * self.ndim
      for i in range(len(padding) // 2): pairs[self.ndim - 1 - i] = (operator.index(padding[2 * i]), operator.index(padding[2 * i + 1]))
    else:
      if len(padding) != self.ndim: raise _fail(ValueError, "pad", f"padding {tuple(padding)} must have one pair per dim ({self.ndim})", self)
      for p in padding:
        if p is not None and not (isinstance(p, (tuple, list)) and len(p) == 2 and all(is_int(v) for v in p)):
          raise _fail(TypeError, "pad", f"padding must be ints or (before, after) pairs of ints (or None), got {p!r} in {tuple(padding)!r}", self)
      pairs = [(0, 0) if p is None else (operator.index(p[0]), operator.index(p[1])) for p in padding]
    for d, ((b, a), s) in enumerate(zip(pairs, self.shape)):
      if s + min(b, 0) + min(a, 0) < 0: raise _fail(ValueError, "pad", f"negative padding {(b, a)} crops more than the size {s} of dim {d}", self)
    return pairs
  def shrink(self, arg: Sequence) -> Tensor:
    """Keep [start, end) of each dim (None keeps the dim)."""
    if not isinstance(arg, (tuple, list)) or len(arg) != self.ndim: raise _fail(ValueError, "shrink", f"need one (start, end) per dim, got {arg!r}", self)
    for a in arg:
      if a is not None and not (isinstance(a, (tuple, list)) and len(a) == 2 and all(type(v) is int for v in a)):
        raise _fail(TypeError, "shrink", f"bounds must be (start, end) pairs of ints (or None), got {a!r} in {tuple(arg)!r}", self)
    pairs = tuple((0, s) if a is None else tuple(a) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(pairs, self.shape):
      if not 0 <= b <= e <= s: raise _fail(ValueError, "shrink", f"bounds {pairs} are out of range for shape {self.shape}", self)
    return self._new(self.uop.shrink(pairs), self)
  def flip(self, *axis) -> Tensor:
    axis = argfix(*axis)
    axes = {_resolve_axis("flip", a, self.ndim, self) for a in axis}
    return self._new(self.uop.flip(tuple(i in axes for i in range(self.ndim))), self)
  def squeeze(self, dim: int | Sequence[int] | None = None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = {_resolve_axis("squeeze", d, self.ndim, self) for d in (tuple(dim) if isinstance(dim, (tuple, list)) else (dim,))}
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
    sizes = _shape_arg("unflatten", tuple(sizes) if isinstance(sizes, (tuple, list)) else (sizes,), self, wildcard=True, name="sizes")
    if not sizes: raise _fail(ValueError, "unflatten", "sizes must be non-empty", self)
    n, known = self.shape[d], prod(s for s in sizes if s != -1)
    if sizes.count(-1) > 1 or (known != n if -1 not in sizes else known == 0 or n % known):
      raise _fail(ValueError, "unflatten", f"sizes {sizes} do not multiply up to the size {n} of dim {d}", self)
    return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])
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
  def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
    """Concatenate along dim: each piece is padded into place and the pieces added (one kernel). Also callable
    torch-style, as Tensor.cat([a, b], dim=...). Mixed dtypes promote (like torch.cat)."""
    if isinstance(self, (list, tuple)):   # Tensor.cat([a, b]): the sequence came in as self
      if not self: raise _fail(ValueError, "cat", "needs at least one tensor")
      return Tensor.cat(*self, *others, dim=dim)
    ts = (self,) + others
    for t in ts:
      if not isinstance(t, Tensor): raise _fail(TypeError, "cat", f"expected Tensors, got {type(t).__name__}", *[u for u in ts if isinstance(u, Tensor)])
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
    out, off = None, 0
    for t in ts:
      pads = [(0, 0)] * self.ndim
      pads[d] = (off, total - off - t.shape[d])
      off += t.shape[d]
      p = t.cast(dt).pad(pads)
      out = p if out is None else (out | p if dt.is_bool else out + p)
    assert out is not None
    return out
  @staticmethod
  def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join same-shaped tensors along a new dim (torch.stack: one sequence of Tensors)."""
    if isinstance(tensors, Tensor): raise _fail(TypeError, "stack", "expects a sequence of Tensors, got one Tensor (Tensor.stack([a, b]))", tensors)
    if not isinstance(tensors, (list, tuple)): raise _fail(TypeError, "stack", f"expects a sequence of Tensors, got {type(tensors).__name__}")
    for t in tensors:
      if not isinstance(t, Tensor): raise _fail(TypeError, "stack", f"expects a sequence of Tensors, got a {type(t).__name__} in it")
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

  # ------------------------------------------------------------ reductions
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
  def mean(self, axis=None, keepdim: bool = False) -> Tensor:
    x = self._float("mean")
    # float16/bfloat16 divide in float32, like torch: the sum alone may overflow, and n may not fit (65504)
    if x.dtype in (dtypes.float16, dtypes.bfloat16): return x.float().mean(axis, keepdim).cast(x.dtype)
    n = prod(self.shape[a] for a in self._axes("mean", axis))
    s = x.sum(axis, keepdim)
    return s / n if n else s * float("nan")
  def var(self, axis=None, keepdim: bool = False, correction: int = 1) -> Tensor:
    x = self._float("var")
    if isinstance(correction, bool) or not isinstance(correction, (int, float)): raise _fail(TypeError, "var", f"correction must be a number, got {correction!r}", self)
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
  def any(self, axis=None, keepdim: bool = False) -> Tensor: return self.cast(dtypes.bool)._reduce(Ops.MAX, axis, keepdim, "any") if self.numel() else self.cast(dtypes.bool).sum(axis, keepdim).cast(dtypes.bool)
  def all(self, axis=None, keepdim: bool = False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()
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
    rev = Tensor.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - a - 1))
    hit = (x == m) | ((x != x) & (m != m)) if x.dtype.is_float else (x == m)
    idx = n - hit.where(rev, 0).max(a, keepdim=True)
    return (idx if keepdim else idx.squeeze(a)).cast(dtypes.int64)
  def argmax(self, axis=None, keepdim: bool = False) -> Tensor: return self._arg_extreme(axis, keepdim, True, "argmax")
  def argmin(self, axis=None, keepdim: bool = False) -> Tensor: return self._arg_extreme(axis, keepdim, False, "argmin")

  # ------------------------------------------------------------ linear algebra and softmax
  def matmul(self, w: Tensor, dtype=None) -> Tensor:
    """Matrix product with batching and broadcasting (1-D operands like torch.matmul)."""
    if not isinstance(w, Tensor): raise _fail(TypeError, "matmul", f"expected a Tensor, got {type(w).__name__}", self)
    x = self
    if x.ndim == 0 or w.ndim == 0: raise _fail(RuntimeError, "matmul", "both arguments need at least 1 dimension", x, w)
    if x.device != w.device: raise _fail(RuntimeError, "matmul", f"tensors are on different devices: {x.device} and {w.device}", x, w)
    kx, kw = x.shape[-1], w.shape[-2] if w.ndim > 1 else w.shape[0]
    if kx != kw: raise _fail(ValueError, "matmul", f"inner dimensions do not match: {x.shape} @ {w.shape}", x, w)
    try: dt = promote(x.dtype, w.dtype)
    except TypeError as e: raise _fail(TypeError, "matmul", str(e), x, w) from None
    wv = _right_operand_layout(w.reshape(kw, 1) if w.ndim == 1 else w)
    # built on the graph directly (one Tensor for the result, not one per step): (..., n, 1, k) * (..., 1, m, k),
    # summed over k
    xu, wu = x.uop.reshape((1, kx)) if x.ndim == 1 else x.uop, wv.uop
    bx, bw = xu.shape[:-2], wu.shape[:-2]
    nb = max(len(bx), len(bw))
    bx, bw = (1,) * (nb - len(bx)) + bx, (1,) * (nb - len(bw)) + bw
    if any(a != b and a != 1 and b != 1 for a, b in zip(bx, bw)):
      raise _fail(ValueError, "matmul", f"batch dimensions {xu.shape[:-2]} and {wu.shape[:-2]} are not broadcastable", x, w)
    n, m = xu.shape[-2], wu.shape[-1]
    full = tuple(b if a == 1 else a for a, b in zip(bx, bw)) + (n, m, kx)   # broadcast (1 with 0 is 0, not max)
    # cast before the expand: the gradient of a float16 operand then sums its broadcast copies in float32
    acc = dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt
    xr = xu.reshape(bx + (n, 1, kx)).cast(dt).cast(acc).expand(full)
    nw = len(wu.shape) - 2
    wr = wu.permute(tuple(range(nw)) + (nw + 1, nw)).reshape(bw + (1, m, kw)).cast(dt).cast(acc).expand(full)
    out = UOp(Ops.MUL, acc, (xr, wr)).reduce(Ops.ADD, (nb + 2,)).reshape(full[:-1])
    out = out.cast(_dtype_arg(dtype) if dtype else dt)
    if x.ndim == 1: out = out.reshape(out.shape[:-2] + out.shape[-1:])
    if w.ndim == 1: out = out.reshape(out.shape[:-1])
    return x._new(out, w)
  def dot(self, w: Tensor) -> Tensor: return self.matmul(w)
  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    _tensor_arg("linear", "weight", weight, self)
    if bias is not None: _tensor_arg("linear", "bias", bias, self)
    x = self.matmul(weight.T) if weight.ndim > 1 else self * weight
    return x + bias if bias is not None else x
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

PANEL = 32
def _right_operand_layout(w: Tensor) -> Tensor:
  """The layout a matmul reads its right operand in (values and gradients unchanged; at most one copy kernel):
  * a transposed view with a short reduction is copied row-major, so the kernel takes its lanes from the
    output columns instead of combining partial sums of a short reduction for every output;
  * a big row-major operand whose rows are a multiple of 1 KiB apart is read column panel by column panel, each
    row of a panel at the same cache-set offset, which thrashes the cache: it is copied into (N/32, K, 32)
    panels, read through a view."""
  if w.ndim >= 2 and w.uop.op is Ops.PERMUTE:
    # a transposed view (x @ W.T, a Linear layer) is read along its contiguous rows: lanes come from the
    # reduction, whose partial sums must be combined per output. With a short reduction that combining
    # dominates, so the weight is transposed once (a small copy) and the columns become the lanes.
    return w.contiguous() if w.shape[-2] <= 256 and w.shape[-1] % 16 == 0 and w.shape[-1] >= 64 else w
  if w.ndim != 2 or w.shape[0] < 512 or w.shape[1] < 256 or w.shape[1] % PANEL or (w.shape[1] * w.dtype.itemsize) % 1024: return w
  k, n = w.shape
  packed = w.reshape(k, n // PANEL, PANEL).permute(1, 0, 2).contiguous()
  return packed.permute(1, 0, 2).reshape(k, n)

def _hash32(x: int) -> int:
  x &= 0xffffffff
  x ^= x >> 16; x = (x * 0x7feb352d) & 0xffffffff
  x ^= x >> 15; x = (x * 0x846ca68b) & 0xffffffff
  return x ^ (x >> 16)

# random-state buffers -> (where in the stream they start, how many numbers they count for): a JIT replay refills
# them in stream order, so it draws the same numbers as the same calls run eagerly
rng_state_buffers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

def rng_state_bytes(n: int) -> bytes:
  """Take n numbers from the global stream: the (counter, key0, key1) words a random kernel reads."""
  base = Tensor._rng_counter
  Tensor._rng_counter += max(n, 1)
  k0 = _hash32(Tensor._seed & 0xffffffff ^ 0x9e3779b9)
  k1 = _hash32((Tensor._seed >> 32) ^ _hash32(base >> 32) ^ 0x85ebca6b)
  return struct.pack("<3I", base & 0xffffffff, k0, k1)

def _rng_state_buffer(n: int, device: str) -> UOp:
  buf = new_buffer(device, 3, dtypes.uint32)
  rng_state_buffers[buf.buffer] = (Tensor._rng_counter, n)
  buf.buffer.ensure_allocated().copyin(memoryview(rng_state_bytes(n)))
  return buf

def _hash32_t(x: Tensor) -> Tensor:
  # the same mixing function as _hash32, as uint32 tensor ops (runs inside the kernel)
  x = x ^ (x >> 16); x = x * 0x7feb352d
  x = x ^ (x >> 15); x = x * 0x846ca68b
  return x ^ (x >> 16)

def _broadcast_shape(op: str, *ts: Tensor) -> tuple[int, ...]:
  nd = max(t.ndim for t in ts)
  shapes = [(1,) * (nd - t.ndim) + t.shape for t in ts]
  out = []
  for dims in zip(*shapes):
    big = {d for d in dims if d != 1}
    if len(big) > 1: raise _fail(ValueError, op, f"shapes {' and '.join(str(t.shape) for t in ts)} are not broadcastable", *ts)
    out.append(big.pop() if big else 1)
  return tuple(out)

def _truth(op: str, x: Any, t: Tensor) -> Any:
  return x if isinstance(x, Tensor) else bool(_scalar_arg(op, "other", x, t))

def _as_tensor(x: Any, like: Tensor, dtype: DType | None = None) -> Tensor:
  if isinstance(x, Tensor): return x
  return Tensor(UOp.const(dtype or dtypes.from_py(x), x, like.device))

def _reads_other_view(value: UOp, target: UOp) -> bool:
  """Does `value` read target's buffer through any view other than `target` itself?"""
  buf = target.base
  for n in value.toposort():
    if n.op in GroupOp.Movement: continue
    for s in n.src:
      if s.base is buf and s is not target: return True
  return value.base is buf and value is not target and value.op in GroupOp.Movement

def _movement_nodes(u: UOp) -> list[UOp]:
  out = []
  while u.op in GroupOp.Movement: out.append(u); u = u.src[0]
  return out

def _empty_nested(shape: tuple[int, ...]) -> Any:
  if not shape: return []
  if shape[0] == 0: return []
  return [_empty_nested(shape[1:]) if len(shape) > 1 else [] for _ in range(shape[0])]

def _renew_buffer_node(buf) -> None:
  """After an in-place write to `buf`, every tensor viewing it gets a fresh BUFFER node over the same
  memory. Graphs built from now on are new nodes (so no result cached for the old contents is reused),
  while results realized before the write keep their values (like PyTorch)."""
  buf.writes += 1   # nodes realized into it held the old contents: realized_view forgets them
  tensors = [t for r in buf.views.values() if (t := r()) is not None]
  buf.views.clear()   # the tensors that still view it register again below (dead references go)
  if not tensors: return
  old = tensors[0].uop.base
  fresh = new_buffer_node(buf, old.dtype)
  for t in tensors:
    if t.uop.base.buffer is buf: t.uop = substitute(t.uop, {t.uop.base: fresh})

write_hooks.append(_renew_buffer_node)

# tensors on which the user set requires_grad=True (weakly): the leaves backward() fills
_grad_leaves: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
