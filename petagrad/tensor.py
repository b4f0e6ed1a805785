"""Tensor: the user API. A thin handle on a lazy UOp graph.

This file is the core: construction, the properties, the graph plumbing every op builds on (`_new`, `_checked`,
`_c`), realize and export, in-place writes, the "already computed" machinery and the autograd entry points. The
ops themselves are families of mixins in petagrad/mixin/ (elementwise, movement, reduce, ...), composed from these
primitives; they never import this module.

>>> from petagrad import Tensor
>>> (Tensor([1.0, 2.0, 3.0]) * 2 + 1).tolist()
[3.0, 5.0, 7.0]
"""
from __future__ import annotations
import os, struct, weakref
from typing import Any, Callable, cast
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp, sprod, sym_value
from petagrad.uop.gradient import compute_gradient, custom_backward
from petagrad.uop.graph import new_buffer, new_buffer_for, new_buffer_node, substitute, reads_other_view, is_disk, byte_view, view_buffers
from petagrad.uop.graph import is_row_major_view, rebase
from petagrad.schedule.multi import split_bounds, layout
from petagrad.dtype import DType, dtypes, to_dtype, promote, truncate, float_to_bf16_bits, bf16_bits_to_float
from petagrad.device import Buffer, Device
from petagrad.device.world import is_local
from petagrad.helpers import NO_GRAD, TRAINING, Context, prod
from petagrad.engine.realize import realize_uops, write_hooks, check_hooks
from petagrad.engine import jit
from petagrad.mixin.args import Scalar, _fail, _resolve_axis, _check_fits, _scalar_arg, _dtype_arg, _symbolic_int, _symbolic_value
from petagrad.mixin.args import _shape_arg, _int_arg, IntegerDivisionByZeroError   # noqa: F401  (imported from here by nn and tests)
from petagrad.mixin.elementwise import ElementwiseMixin
from petagrad.mixin.math import MathMixin
from petagrad.mixin.activation import ActivationMixin
from petagrad.mixin.movement import MovementMixin
from petagrad.mixin.indexing import IndexingMixin
from petagrad.mixin.reduce import ReduceMixin
from petagrad.mixin.linalg import LinalgMixin
from petagrad.mixin.creation import CreationMixin
from petagrad.mixin.random import RandomMixin
from petagrad.mixin.conv import ConvMixin
from petagrad.mixin.pool import PoolMixin
from petagrad.mixin.norm import NormMixin
from petagrad.mixin.loss import LossMixin
from petagrad.mixin.ordering import OrderingMixin

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
  """The buffer view holding u's value, if u is a buffer view or a computed value whose buffer was not written since
  (a MULTI of such views for a value held on several devices)."""
  if u.op is Ops.CUSTOM_GRAD: return u.src[0] if u.arg[0] == COMPUTED and _writes(u.src[0]) == u.arg[1] else None
  if u.op is Ops.MULTI: return u if view_buffers(u) is not None else None
  return u if u.base.op is Ops.BUFFER else None

def _writes(view: UOp) -> Any:
  """The version of the memory a view reads (its buffer's in-place writes so far; per device for a MULTI)."""
  return tuple(b.writes for b in view_buffers(view) or ()) if view.op is Ops.MULTI else view.base.buffer.writes

def _write_target(u: UOp) -> UOp | None:
  """The buffer view an in-place write to a tensor holding u goes into: u's movement ops over its buffer, through
  detach() (it shares the memory, as torch's); None when u is not a view of memory."""
  ops: list[UOp] = []
  while u.op in GroupOp.Movement or u.op is Ops.DETACH:
    if u.op is not Ops.DETACH: ops.append(u)
    u = u.src[0]
  if u.op is not Ops.BUFFER and not (u.op is Ops.MULTI and view_buffers(u) is not None): return None
  for m in reversed(ops): u = UOp(m.op, m.dtype, (u,), m.arg)
  return u

def _computed(view: UOp, graph: UOp) -> UOp:
  """graph's value, held in view (as its buffer is now); gradients flow into graph."""
  if graph.op is Ops.CUSTOM_GRAD and graph.arg[0] == COMPUTED: graph = graph.src[1]   # computed again: one wrapper
  return UOp(Ops.CUSTOM_GRAD, graph.dtype, (view, graph), (COMPUTED, _writes(view)))

def _expands_memory(n: UOp) -> bool:
  """Is n an elementwise function (ALU ops, casts, movement ops, constants: no reduce) of memory on its own device that
  holds fewer bytes than n's value (a quantized weight's decoded view: 34 bytes of Q8_0 blocks for 128 bytes of
  float32)? Then reading that memory again costs less than reading n's value, and keeping the value costs memory: a
  realize that computed n (a prefill decodes a weight once for its many rows) does not hand it to the live graphs,
  which go on reading the packed bytes."""
  if not isinstance(n.device, str) or any(not isinstance(d, int) for d in n.shape): return False
  stack, seen, read = [n], set(), 0
  while stack:
    u = stack.pop()
    if u in seen: continue
    seen.add(u)
    if u.op is Ops.BUFFER:
      if u.device != n.device or u.buffer is None: return False
      read += u.buffer.nbytes
    elif u.op in GroupOp.Elementwise or u.op in GroupOp.Movement or u.op in (Ops.CONST, Ops.DEVICE): stack.extend(u.src)
    else: return False
  return read < prod(n.shape) * n.dtype.itemsize

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

def _reads_buffers(root: UOp, bufs: set[Any], clean: set[UOp]) -> bool:
  """Does root's graph read the present value of one of bufs? clean: nodes known not to (the writes being realized
  are in it: what reads through them reads the new value); grows by the nodes of graphs that do not. An ASSIGN's
  target is written, not read."""
  seen, stack = set(), [root]
  while stack:
    n = stack.pop()
    if n in seen or n in clean: continue
    seen.add(n)
    if n.op is Ops.BUFFER:
      if n.buffer in bufs: return True
    else: stack.extend(n.src[1:] if n.op is Ops.ASSIGN else n.src)
  clean |= seen
  return False

def _old_value_readers(todo: list[Tensor], writes: list[UOp]) -> list[Tensor]:
  """The live lazy tensors that compute from a buffer one of writes (the ASSIGNs a realize of todo makes) overwrites:
  computed in the same realize, before the write (the scheduler orders old reads first), they hold what they would
  have held computed at once, as in PyTorch (`loss.backward(); opt.step(); loss.item()` is the loss before the step).
  A plain view of the buffer (movement ops and detach() only) is not computed: like a PyTorch view it shows the new
  values."""
  bufs, clean, skip = {b for w in writes for b in _target_buffers(w.src[0])}, set(writes), {id(t) for t in todo}
  return [t for t in lazy_tensors() if id(t) not in skip and _write_target(t.uop) is None and _reads_buffers(t.uop, bufs, clean)]

# while a TinyJit call runs: id -> (weak reference to the tensor, its uop before its first change in the call), for
# tensors that viewed a buffer when they changed (the JIT writes their new value back into that buffer)
uop_changes: dict[int, tuple[Any, UOp]] | None = None

def _swap_uop_changes(new: dict[int, tuple[Any, UOp]] | None) -> dict[int, tuple[Any, UOp]] | None:
  """Install `new` as the table of changed tensors (TinyJit, around a call); returns the table before."""
  global uop_changes
  old, uop_changes = uop_changes, new
  return old

def _raise_failed_checks(checks: dict[UOp, Any]) -> None:
  """Raise the exception of the first CHECK whose condition's buffer holds False (realize_all computed them)."""
  for c, buf in checks.items():
    for hook in check_hooks: hook(buf, *c.arg)
  for c, buf in checks.items():
    if not buf.as_bytes()[0]: raise c.arg[0](c.arg[1])

# the nodes of graphs a backward() has gone through. A graph kept for gradients (a non-leaf that needs grad) gets the
# values a realize computed inside it only where no backward went yet: after loss.backward(), as after PyTorch's
# (retain_graph=False), the forward's intermediate values are not kept for another backward pass, and their memory is
# given back (a second backward computes them again). The tensor's own value is still handed over.
backward_done: weakref.WeakSet = weakref.WeakSet()

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
    if grad and root in backward_done: return root if (v := values.get(root)) is None else _computed(v, root)
    def stop(n: UOp) -> UOp | None:
      if grad and n in backward_done: return n   # (see backward_done)
      v = values.get(n)
      return v if v is not None and _ends_walk(n, v, grad) else None
    def make(n: UOp, src: tuple) -> UOp:
      new = _same_or_new(n, src)
      return new if (v := values.get(n)) is None else _computed(v, new)
    return _rebuild(root, self.memo[grad], stop, make)

def _ends_walk(n: UOp, v: UOp, grad: bool, viewed: frozenset[int] | set[int] = frozenset()) -> bool:
  """Does the hand-over put computed node n's value v into a graph as it is, without looking below n? An ASSIGN always
  (its target's view); without grad, a value no tensor views (viewed: ids of buffers tensors are about to view)."""
  return n.op is Ops.ASSIGN or not grad and not any(id(b) in viewed or _has_views(b) for b in view_buffers(v) or ())

def _handed_buffers(values: dict[UOp, UOp], roots: list[tuple[UOp, bool]], viewed: set[int]) -> set[int]:
  """ids of the Buffers `_HandOver(values)` puts into the graphs of roots ((root, keeps its graph) pairs), found before
  the realize runs (its walk, without building anything). viewed: ids of the buffers tensors will view (the targets')."""
  out: set[int] = set()
  seen: tuple[set[UOp], set[UOp]] = (set(), set())
  for root, grad in roots:
    stack, done = [root], seen[grad]
    while stack:
      n = stack.pop()
      if n in done: continue
      done.add(n)
      if grad and n in backward_done and n is not root: continue
      if (v := values.get(n)) is not None:
        out.update(map(id, view_buffers(v) or ()))
        if _ends_walk(n, v, grad, viewed): continue
      stack.extend(n.src)
  return out

class _ViewRef(weakref.ref):
  """A weak reference from a buffer's `views` to a tensor viewing it; it removes its entry when the tensor dies."""
  __slots__ = ("views", "key")
def _drop_view(r: _ViewRef) -> None:
  if r.views.get(r.key) is r: del r.views[r.key]

def _new_memory(like: UOp) -> UOp:
  """Fresh memory for a value shaped like `like`: a buffer on its device, or on each of its devices, laid out as it is."""
  if not isinstance(like.device, tuple): return new_buffer_for(like.device, like.shape, like.dtype)
  axis, bounds = layout(like)
  shapes = [like.shape if axis is None else like.shape[:axis] + (e - b,) + like.shape[axis + 1:] for b, e in bounds or [(0, 0)] * len(like.device)]
  return UOp(Ops.MULTI, like.dtype, tuple(new_buffer(d, prod(sh), like.dtype).reshape(sh) for d, sh in zip(like.device, shapes)), axis)

def _target_buffers(target: UOp) -> list[Any]:
  """The Buffers an in-place write to target (movement ops over a BUFFER node or over a MULTI of them) goes into."""
  return [n.buffer for n in target.toposort() if n.op is Ops.BUFFER]

def _has_views(buf: Any) -> bool:
  """Does a live tensor view this buffer?"""
  return any(r() is not None for r in buf.views.values())

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
      if not isinstance(x, (list, tuple)) or len(x) != d:
        raise _fail(ValueError, "Tensor", f"ragged nested sequence: expected length {d} at every level")
      nxt.extend(x)
    out = nxt
  for x in out:
    if isinstance(x, (list, tuple)): raise _fail(ValueError, "Tensor", "ragged nested sequence")
    if isinstance(x, Tensor): raise _fail(TypeError, "Tensor", "a list of Tensors is not accepted; use Tensor.stack")
  return out

class _GradSwitch:
  """Tensor.no_grad: true while ops record no gradient (the NO_GRAD flag); calling it gives a context manager (and
  decorator) that turns gradients off inside: `with Tensor.no_grad(): ...`, like torch.no_grad()."""
  def __bool__(self) -> bool: return bool(NO_GRAD)
  def __call__(self, mode: bool = True) -> Context: return Context(NO_GRAD=int(bool(mode)))
  def __repr__(self) -> str: return f"Tensor.no_grad={bool(self)}"

class _TensorMeta(type):
  """Class-level switches that are flags (so Context(TRAINING=1) and Tensor.training = True are one switch)."""
  @property
  def training(cls) -> bool: return bool(TRAINING)
  @training.setter
  def training(cls, mode: bool) -> None: TRAINING.value = int(bool(mode))
  @property
  def no_grad(cls) -> _GradSwitch: return _GRAD_SWITCH
  @no_grad.setter
  def no_grad(cls, mode: bool) -> None: NO_GRAD.value = int(bool(mode))
_GRAD_SWITCH = _GradSwitch()

def Variable(name: str, min_val: int, max_val: int) -> UOp:
  """A symbolic integer in [min_val, max_val] (tinygrad's name), bound to a value for each call with `.bind(n)`. A bound
  Variable can be a view's offset (`x.shrink(((v, v + 1), None))`, `x[:, v:v + 4]`, a pad of `(v, n - v)`) and a value
  (`Tensor.arange(n) < v + 1`, `Tensor(v)`): the kernels read it when they run, so they are compiled once for every
  value, and a TinyJit that is passed the bound Variable replays one capture for each. A size may depend on it too
  (a symbolic shape: `x[:v]`, `Tensor.arange(v)`; docs/variables.md).

  >>> from petagrad import Tensor, Variable
  >>> x = Tensor.arange(10)
  >>> v = Variable("start", 0, 8)
  >>> [x.shrink(((v.bind(i), v.bind(i) + 2),)).tolist() for i in (0, 5)]
  [[0, 1], [5, 6]]
  >>> [x[:v.bind(i)].sum().item() for i in (3, 5)]
  [3, 10]
  """
  if not isinstance(name, str) or not name: raise TypeError(f"Variable: name must be a non-empty string, got {name!r}")
  for what, b in (("min_val", min_val), ("max_val", max_val)):
    if type(b) is not int: raise TypeError(f"Variable {name!r}: {what} must be an int, got {type(b).__name__} {b!r}")
  if not 0 <= min_val <= max_val < 2 ** 31:
    raise ValueError(f"Variable {name!r}: need 0 <= min_val <= max_val < 2**31, got [{min_val}, {max_val}]")
  return UOp(Ops.DEFINE_VAR, dtypes.index, (), (name, min_val, max_val))

class Tensor(ElementwiseMixin, MathMixin, ActivationMixin, MovementMixin, IndexingMixin, ReduceMixin, LinalgMixin, CreationMixin,
             RandomMixin, ConvMixin, PoolMixin, NormMixin, LossMixin, OrderingMixin, metaclass=_TensorMeta):
  """A lazily evaluated n-dimensional array with autograd.

  >>> Tensor([[1, 2], [3, 4]]).sum(axis=0).tolist()
  [4, 6]
  """
  __slots__ = ("_uop", "_requires_grad", "_leaf", "grad", "_ctx", "_lazy_key", "_stale", "__weakref__")
  # Tensor.training (the TRAINING flag) and Tensor.no_grad (NO_GRAD) are properties of the class (_TensorMeta); read on
  # an instance too
  training = property(lambda self: bool(TRAINING), doc="The training mode (class-wide: Tensor.training).")

  @staticmethod
  def train(mode: bool = True) -> Context:
    """Training mode for a block or a function: `with Tensor.train(): ...`, `@Tensor.train()` (Context(TRAINING=1)).

    >>> with Tensor.train(): Tensor.training
    True
    """
    return Context(TRAINING=int(bool(mode)))
  @staticmethod
  def test(mode: bool = True) -> Context:
    """No gradients for a block (tinygrad's old Tensor.test(); torch.inference_mode()): Tensor.no_grad(mode)."""
    return _GRAD_SWITCH(mode)
  inference_mode = test

  def __init__(self, data: Any, device: str | None = None, dtype: DType | str | None = None, requires_grad: bool | None = None):
    self.grad: Tensor | None = None
    self._stale: set[int] | None = None   # ids of the buffers it views that were written in place since it last looked
    self._requires_grad: bool | None = None
    self._leaf = False
    self._ctx: UOp | None = None   # a grad leaf's node before it was realized (graphs built earlier use it)
    self._set_data(data, device, dtype)
    if requires_grad is not None: self.requires_grad = requires_grad
  def _set_data(self, data: Any, device: str | None, dtype: DType | str | None) -> None:
    dt = _dtype_arg(dtype) if dtype is not None else None
    if isinstance(data, UOp) and data.device_or_none is None and _symbolic_int("Tensor", data):
      data = _symbolic_value(data, Device.canonicalize(device) if device is not None else Device.DEFAULT)   # a bound Variable's value: 0-d int32
      device = None
    if isinstance(data, UOp):
      if device is not None and data.device_or_none != (dev := Device.canonicalize(device)):
        data = data.copy_to_device(dev)
      self.uop = data if dt is None else data.cast(dt)
      return
    if isinstance(data, os.PathLike):   # a file: all its bytes, on DISK (nothing is read)
      self.uop = _file_buffer(data, dt or dtypes.uint8)
      if device is not None and (dev := Device.canonicalize(device)) != self.uop.device: self.uop = self.to(dev).uop
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
  def _from_bytes(raw: bytes, shape: tuple[int, ...], dtype: DType, device: str | tuple[str, ...]) -> UOp:
    if isinstance(device, tuple):   # a copy on each device (the devices of other MPI ranks: each rank fills its own)
      return UOp(Ops.MULTI, dtype, tuple(Tensor._from_bytes(raw, shape, dtype, d) for d in device), None)
    buf = new_buffer(device, prod(shape), dtype)
    if not is_local(device): return buf.reshape(shape)
    buf.buffer.ensure_allocated().copyin(memoryview(raw))
    return buf.reshape(shape)

  @staticmethod
  def from_blob(ptr: int, shape: tuple[int, ...] | list[int] | int, dtype: DType | str | None = None, device: str | None = None,
                requires_grad: bool | None = None) -> Tensor:
    """A tensor over the memory at host address ptr (tinygrad's from_blob; a numpy array's `a.ctypes.data`), in
    row-major order, without copying it or taking ownership: the memory must stay valid (keep its owner alive) while
    the tensor and the tensors that view it live, and petagrad never frees it. Kernels read it when they run, so a
    write through the owner before a realize is seen; in-place writes to the tensor (`t.assign(...)`) write it. dtype
    defaults to the default float; the device must keep its buffers in host memory (CPU, PYTHON), else ValueError.

    >>> import numpy as np
    >>> a = np.arange(4, dtype=np.float32)
    >>> t = Tensor.from_blob(a.ctypes.data, (2, 2), dtype="float32")
    >>> a[0] = 10.0
    >>> (t + 1).tolist()
    [[11.0, 2.0], [3.0, 4.0]]
    """
    if isinstance(ptr, bool) or not isinstance(ptr, int):
      raise _fail(TypeError, "from_blob", f"ptr must be an int address, got {type(ptr).__name__} {ptr!r}")
    size = _shape_arg("from_blob", shape if isinstance(shape, (tuple, list)) else (shape,))
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    buf = new_buffer(Device.canonicalize(device) if device is not None else Device.DEFAULT, prod(size), dt)
    try: cast(Buffer, buf.buffer).use_external(ptr)
    except ValueError as e: raise _fail(ValueError, "from_blob", str(e)) from None
    return Tensor(buf.reshape(size), requires_grad=requires_grad)

  # ------------------------------------------------------------ properties
  @property
  def shape(self) -> tuple[int, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def device(self) -> str | tuple[str, ...]:
    """The device's name; for a tensor held on several devices (shard, to(devices)), the tuple of their names."""
    return self.uop.device
  @property
  def ndim(self) -> int: return len(self.shape)
  def dim(self) -> int: return len(self.shape)
  def numel(self) -> int | UOp: return sprod(self.shape)
  def size(self, dim: int | None = None) -> tuple[int, ...] | int:
    return self.shape if dim is None else self.shape[_resolve_axis("size", dim, self.ndim, self)]
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
  def uop(self) -> UOp:
    if self._stale is not None: self._renew()
    return self._uop
  @uop.setter
  def uop(self, u: UOp) -> None:
    key = id(self)
    view = (u.op is Ops.BUFFER or u.op in GroupOp.Movement) and (b := u.base).op is Ops.BUFFER and b.buffer is not None
    bufs = [b.buffer] if view else view_buffers(u) if u.op is Ops.MULTI else None
    if not view and is_disk(u.device_or_none): raise _disk_no_kernels(u)   # DISK holds views of its file only
    if uop_changes is not None and key not in uop_changes and (old := getattr(self, "_uop", None)) is not None \
       and (old.base.op is Ops.BUFFER or old.op is Ops.MULTI and view_buffers(old) is not None):
      uop_changes[key] = (weakref.ref(self), old)
    self._uop, self._stale = u, None   # (a node set after a write stands, as it would had the write renewed at once)
    # remember which tensors view which buffer (an in-place write gives them a fresh buffer node), and which are lazy
    if bufs is not None:
      for buf in bufs:
        r = buf.views[key] = _ViewRef(self, _drop_view)
        r.views, r.key = buf.views, key
      self._lazy_key = None
    else:
      # (re-inserted at the end: the registry's order is the order tensors became lazy, the same in every process that runs
      # the program; a key kept in place would carry the position of a dead tensor whose id this one reuses, and MPI
      # ranks would realize the old-value readers in different orders: _old_value_readers)
      _lazy_tensors.pop(key, None)
      _lazy_tensors[key] = weakref.ref(self)
      self._lazy_key = key

  def _renew(self) -> None:
    """Fresh nodes for the buffers written in place since this tensor last looked (_renew_buffer_node)."""
    stale, self._stale = self._stale, None
    u = self._uop
    def fresh(v: UOp) -> UOp:
      b = v.base
      return rebase(v, _current_node(b.buffer)) if b.op is Ops.BUFFER and b.buffer is not None and id(b.buffer) in stale else v
    self.uop = u.replace(src=tuple(fresh(s) for s in u.src)) if u.op is Ops.MULTI else fresh(u)

  @property
  def requires_grad(self) -> bool | None: return self._requires_grad
  @requires_grad.setter
  def requires_grad(self, v: bool | None) -> None:
    was, self._requires_grad = self._requires_grad, v
    if v and not was and not self._leaf and self.uop.base.op is not Ops.BUFFER and computed_view(self.uop) is None and self.uop.op is not Ops.ASSIGN:
      # a leaf is its own memory: a lazy value (Tensor.zeros(3) twice is one node, hash-consed) goes into a buffer of its
      # own, or two leaves made alike would be one gradient target and get the sum of both gradients
      self.uop = UOp(Ops.ASSIGN, self.dtype, (_new_memory(self.uop), self.uop))
    if v: self._leaf, _grad_leaves[id(self)] = True, self
  def requires_grad_(self, v: bool = True) -> Tensor:
    self.requires_grad = v
    return self
  @property
  def is_param(self) -> bool:
    """tinygrad 0.14's flag: False for a buffer (no grad from backward(), skipped by optimizers): requires_grad=False."""
    return self._requires_grad is not False
  @is_param.setter
  def is_param(self, v: bool) -> None: self.requires_grad = (None if self._requires_grad is False else self._requires_grad) if v else False
  def is_param_(self, is_param: bool = True) -> Tensor:
    """Set is_param and return self (tinygrad: `Tensor.zeros(3).is_param_(False)` is a buffer).

    >>> Tensor.zeros(2).is_param_(False).requires_grad
    False
    """
    self.is_param = is_param
    return self

  # ------------------------------------------------------------ graph plumbing
  def _new(self, u: UOp, *parents: Tensor) -> Tensor:
    """A tensor computed from self (and parents) as u: needs grad (not a leaf) when one of them does."""
    t = Tensor.__new__(Tensor)   # what Tensor(u) does, without its argument checks: every op makes one
    t.grad, t._leaf, t._ctx, t._stale = None, False, None, None
    # (a comparison's or an int cast's result does not: gradients do not flow through it, as in PyTorch)
    t._requires_grad = True if (self._requires_grad or any(p._requires_grad for p in parents)) and u.dtype.is_float else None
    if t._requires_grad and NO_GRAD.value:   # under no_grad: a result that gradients do not flow through
      t._requires_grad, u = None, UOp(Ops.DETACH, u.dtype, (u,))
    t.uop = u
    return t
  def _checked(self, ok: Tensor, exc: type[Exception], op: str, msg: str, *operands: Any) -> Tensor:
    """self, with a check that the bool tensor ok is true everywhere, made when self is realized (the data is not
    known before): otherwise the realize raises exc naming op, the operands and this user's line (as _fail).
    Checks run on every device and in JIT replays."""
    err = _fail(exc, op, msg, *operands)
    okall = ok.all() if ok.shape else ok
    return self._new(UOp(Ops.CHECK, self.dtype, (self.uop, okall.uop), (type(err), str(err))), self)
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
    given = len(todo)
    for i, t in enumerate(todo):   # (todo grows below while this runs)
      tgt = _forward(t.uop, done, checks)
      # a tensor is its own memory: two tensors of one graph (two Tensor.zeros(3), the same sum built twice) are one
      # node, a target twice here, or already the buffer another tensor holds; sharing that buffer would let an
      # in-place write to one change the other, so this one gets a copy
      if (bufs := view_buffers(tgt)) is not None and any(map(_has_views, bufs)) or tgt in targets: tgt = UOp(Ops.CONTIGUOUS, tgt.dtype, (tgt,))
      targets.append(tgt)
      # the given tensors forwarded (done holds their graphs): the tensors that read what they write come along
      if i == given - 1 and (writes := [n for n in done if n.op is Ops.ASSIGN]): todo += _drop_unset_grads(_old_value_readers(todo, writes))
    # the conditions of the data checks in these graphs are computed in the same schedule (a condition's own graph
    # may hold checks too)
    oks: dict[UOp, UOp] = {}
    i = 0
    while i < len(checks):
      if checks[i] not in oks: oks[checks[i]] = UOp(Ops.CONTIGUOUS, dtypes.bool, (_forward(checks[i].src[1], done, checks),))
      i += 1
    # a non-leaf that needs grad keeps its graph for backward (like PyTorch's autograd graph), and the graphs of the
    # other live lazy tensors read what this realize computed from now on
    skip = {id(t) for t in todo}
    others = [t for t in lazy_tensors() if id(t) not in skip]
    keep = [t for t in todo if t._requires_grad and not t._leaf]
    # (a float tensor whose requires_grad is unset may get a gradient too, tinygrad's rule: its graph is kept as well)
    unset_grad = not NO_GRAD.value
    modes = [bool(t._requires_grad) or (unset_grad and t._requires_grad is None and t.dtype.is_float) for t in others]
    values: list[dict[UOp, UOp]] = []   # node -> what it became, made once (before the launches when the engine asks)
    todo_uops = {t.uop for t in todo}   # (asked for: kept even where recomputing would read less, _expands_memory)
    def computed(becomes: dict[UOp, UOp]) -> dict[UOp, UOp]:
      # (a detach() of a buffer view is a view too: it keeps reading the buffer, as torch's shares the memory)
      if not values: values.append({n: v for n, fwd in done.items() if (v := becomes.get(fwd)) is not None and n.base.op is not Ops.BUFFER
                                    and not (n.op is Ops.DETACH and n.src[0].base.op is Ops.BUFFER) and (n in todo_uops or not _expands_memory(n))})
      return values[0]
    def handed(becomes: dict[UOp, UOp]) -> set[int]:
      # what this realize computed that the graphs kept below will read: the buffers the engine must not free early
      if not keep and not others: return set()
      viewed = {id(b) for tgt in targets if (v := becomes.get(tgt)) is not None for b in view_buffers(v) or ()}
      return _handed_buffers(computed(becomes), [(t.uop, True) for t in keep] + [(t.uop, m) for t, m in zip(others, modes)], viewed)
    becomes = realize_uops(targets + list(oks.values()), keep=handed)
    for t, tgt in zip(todo, targets):
      if t._requires_grad and not t._leaf: continue
      if t._requires_grad: t._ctx = t.uop   # graphs built before find the leaf by this node
      t.uop = becomes.get(tgt, tgt)
    if keep or others:
      hand = _HandOver(computed(becomes))
      for t, tgt in zip(todo, targets):
        if t._requires_grad and not t._leaf: t.uop = _computed(becomes.get(tgt, tgt), hand(t.uop, True))
      for t, keep_graph in zip(others, modes):
        if (new := hand(t.uop, keep_graph)) is not t.uop: t.uop = new
    # raised once the tensors hold what ran (a failed check must not leave an in-place write to be made again)
    if oks: _raise_failed_checks({c: next(b for b in view_buffers(becomes[ok]) or () if is_local(b.device)) for c, ok in oks.items()})

  def _buffer_view(self) -> UOp:
    """The realized view (movement ops over a BUFFER) holding this tensor's values."""
    self.realize()
    view = computed_view(self.uop)
    assert view is not None, "realize() left the tensor without a buffer"
    return view

  def _contiguous_buffer(self) -> UOp:
    """A BUFFER holding exactly this tensor's elements in row-major order (of a symbolic shape: as its first elements)."""
    u = self._buffer_view()
    # (a symbolic shape's values are the first elements of its buffer, which has room for the largest: a row-major prefix)
    if (u.op is Ops.RESHAPE and u.src[0].op is Ops.SHRINK and u.src[0].arg[0][0] == 0 and isinstance(u.src[0].arg[0][1], UOp)
        and u.src[0].src[0].op is Ops.BUFFER): return u.base
    if not (u.op is Ops.BUFFER or (u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER)):
      t = Tensor(UOp(Ops.CONTIGUOUS, u.dtype, (u,))).realize()
      u = t.uop
    return u.base

  def data(self) -> memoryview:
    """The raw bytes of the (realized, contiguous) tensor."""
    if jit.jit_active:
      raise _fail(jit.JitError, "TinyJit", f"reading a tensor's value into Python inside the jitted function {jit.jit_active[-1]!r} "
                  "cannot be replayed; return the tensor instead", self)
    if is_disk(self.device): return memoryview(cast(Buffer, _disk_bytes(self, "data").base.buffer).as_bytes())   # its bytes only
    if isinstance(self.device, tuple):   # the pieces gathered on this process's first device (across MPI ranks: on each rank's)
      return self.to(next(d for d in self.device if is_local(d))).data()
    buf = self._contiguous_buffer()
    mem = memoryview(buf.buffer.as_bytes())
    # a symbolic shape: the elements its Variables' values give (the buffer holds room for the largest)
    return mem[:sym_value(self.numel()) * self.dtype.itemsize] if isinstance(self.numel(), UOp) else mem

  @property
  def concrete_shape(self) -> tuple[int, ...]:
    """The shape with each symbolic size replaced by its value under the bound Variables (the shape itself otherwise).

    >>> from petagrad import Variable
    >>> Tensor.ones(8, 2)[:Variable("n", 1, 8).bind(3)].concrete_shape
    (3, 2)
    """
    return tuple(sym_value(s) for s in self.shape)

  def tolist(self) -> Any:
    """Nested Python lists (a Python scalar for 0-d tensors)."""
    raw = self.data()
    dt, shape = self.dtype, self.concrete_shape
    n = prod(shape)
    vals = list(struct.unpack(f"<{n}{dt.fmt}", raw)) if n else []
    if dt == dtypes.bfloat16: vals = [bf16_bits_to_float(v) for v in vals]
    if not shape: return vals[0]
    for d in reversed(shape[1:]): vals = [vals[i:i + d] for i in range(0, len(vals), d)] if d else [[] for _ in range(len(vals) // max(d, 1))]
    if shape and len(shape) > 1 and 0 in shape[1:]:
      return _empty_nested(shape)
    return vals

  def item(self) -> Scalar:
    """The single value of a one-element tensor."""
    if self.numel() != 1:
      raise _fail(ValueError, "item", f"only one-element tensors can be converted to a Python scalar, this one has {self.numel()}", self)
    return self.reshape(()).tolist()

  def numpy(self):
    """A numpy copy of the tensor (bfloat16 becomes float32: numpy has no bfloat16)."""
    import numpy as np
    if self.dtype == dtypes.bfloat16: return (self.to(Device.DEFAULT) if is_disk(self.device) else self).cast(dtypes.float32).numpy()
    npdt = np.dtype(self.dtype.name if self.dtype != dtypes.bool else "bool")
    return np.frombuffer(bytes(self.data()), dtype=npdt).reshape(self.concrete_shape).copy()

  def to(self, device: str) -> Tensor:
    """This tensor on another device (a lazy copy; the same tensor when already there). From DISK the copy reads
    exactly the bytes the view covers; to DISK ("DISK:/path") the bytes are written into the file now (docs/disk.md).

    >>> Tensor([1, 2]).to("PYTHON").device
    'PYTHON'
    """
    dev = Device.canonicalize(device)
    if dev == self.device: return self
    if is_disk(dev): return _write_file(self, dev)
    # from DISK: a copy of exactly the bytes the view covers (a Buffer view of them), as any copy of a buffer
    src = _disk_bytes(self, "to") if is_disk(self.device) else self.uop
    return self._new(src.copy_to_device(dev))

  def shard(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """This tensor held on several devices (tinygrad's shard): split along axis, the pieces in device order (sizes as
    balanced as possible: 10 rows on 4 devices are 3, 3, 2, 2), or a whole copy on each device (axis None). Every op
    works on the result (docs/multi.md); a reduction over the split axis combines the pieces (an allreduce).

    >>> t = Tensor([[1, 2], [3, 4]]).shard(("CPU:0", "CPU:1"), axis=0)
    >>> t.device, (t * 10).sum().item()
    (('CPU', 'CPU:1'), 100)
    """
    devs = Device.canonicalize(tuple(devices) if isinstance(devices, (tuple, list)) else (devices,))
    if axis is not None: axis = _resolve_axis("shard", axis, self.ndim, self)
    if is_disk(self.device) or any(is_disk(d) for d in devs):
      raise _fail(RuntimeError, "shard", "DISK tensors cannot be held on several devices", self)
    bounds = split_bounds(self.shape[axis], len(devs)) if axis is not None else None
    if isinstance(self.device, tuple):   # from another layout
      src = self if len(self.device) == len(devs) else self.to(devs[0])
    else: src = self
    pieces = []
    for i, d in enumerate(devs):
      if isinstance(src.device, tuple): p = UOp(Ops.MSELECT, self.dtype, (src.uop,), (i, axis, bounds))
      else: p = src.uop if axis is None else src.uop.shrink(tuple(bounds[i] if a == axis else (0, n) for a, n in enumerate(self.shape)))  # type: ignore[index]
      pieces.append(p.copy_to_device(d))
    return self._new(UOp(Ops.MULTI, self.dtype, tuple(pieces), axis), self)
  def shard_(self, devices: tuple[str, ...] | list[str], axis: int | None = None) -> Tensor:
    """Hold this tensor (the object) on several devices: self.replace(self.shard(devices, axis)) (tinygrad's shard_)."""
    return self.replace(self.shard(devices, axis))

  def replace(self, x: Tensor) -> Tensor:
    """Make this tensor (the object) hold x's value, of the same shape: tinygrad's rebinding, no copy, no in-place write.

    >>> t = Tensor([1.0, 2.0]); _ = t.replace(Tensor([3.0, 4.0])); t.tolist()
    [3.0, 4.0]
    """
    if not isinstance(x, Tensor): raise _fail(TypeError, "replace", f"expected a Tensor, got {type(x).__name__}", self)
    if x.shape != self.shape: raise _fail(ValueError, "replace", f"shape {x.shape} != {self.shape}", self, x)
    self.uop = x.uop
    if x._requires_grad: self._requires_grad = True
    return self
  def to_(self, device: str) -> Tensor:
    """Move this tensor (the object) to another device (tinygrad's to_: self.replace(self.to(device)))."""
    return self.replace(self.to(device))
  def clone(self) -> Tensor: return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
  def contiguous(self) -> Tensor:
    """A tensor whose data is one row-major buffer (a no-op if it already is)."""
    u = self.uop
    if u.op in (Ops.BUFFER, Ops.CONTIGUOUS) or is_row_major_view(u): return self
    if is_disk(self.device): return Tensor(_disk_bytes(self, "contiguous"))   # its bytes are one run already (or it raises)
    return self._new(UOp(Ops.CONTIGUOUS, self.dtype, (u,)), self)
  def detach(self) -> Tensor: return Tensor(self.uop) if is_disk(self.device) else Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)))
  def contiguous_backward(self) -> Tensor:
    """Identity in the forward pass; in the backward pass the gradient flowing into this tensor is realized
    into its own contiguous buffer (a kernel boundary), in this tensor's layout.

    >>> from petagrad import Tensor
    >>> x = Tensor([1.0, 2.0], requires_grad=True)
    >>> _ = (x.contiguous_backward() * 3).sum().backward(); x.grad.tolist()
    [3.0, 3.0]
    """
    return self._new(UOp(Ops.CONTIGUOUS_BACKWARD, self.dtype, (self.uop,)), self)
  def assign(self, x: Tensor | Scalar) -> Tensor:
    """Write x into this tensor's buffer (in place: every view of the buffer sees it). Into a DISK tensor, x (from any
    device) is written into the file at once."""
    if is_disk(self.device): return _write_into_file(self, x)
    if isinstance(x, (int, float, bool)):
      _check_fits("assign", _scalar_arg("assign", "value", x, self), self.dtype, True, self)
      x = Tensor(self._c(x))
    elif not isinstance(x, Tensor): x = Tensor(x, device=self.device, dtype=self.dtype)   # a list or an array
    if x.shape != self.shape: x = x._broadcast_to(self.shape, "assign")
    if x.device != self.device: raise _fail(RuntimeError, "assign", f"value is on {x.device}, target on {self.device}", self, x)
    if x.dtype != self.dtype: x = x.cast(self.dtype)
    target = self.uop
    while target.op is Ops.BITCAST:   # a same-size bitcast view writes the value's bits
      x, target = x.bitcast(target.src[0].dtype), target.src[0]
    if (view := _write_target(target)) is None and target.op in GroupOp.Movement and target.base.op not in (Ops.CONST, Ops.IOTA):
      # a view of a lazy tensor (c = t.clone(); c[:, 1:2].assign(v)): compute what it views, so the write lands in the
      # memory the viewed tensor holds (the realize hands its buffer to every live graph holding it, this one too)
      base = target.base
      owner = next((t for t in lazy_tensors() if t.uop is base), None)
      if owner is None: owner = Tensor(base)
      owner.realize()
      if owner.uop.base.op is Ops.BUFFER: target = substitute(target, {base: owner.uop})
      if self.uop.op is not Ops.BITCAST: self.uop = target   # (a view of the owner's buffer from now on)
      view = _write_target(target)
    if view is None:
      # nothing to write into yet: behave like rebinding, to a copy when x is (a view of) memory (no aliasing: a later
      # write to this tensor must not change x)
      self.uop = x.uop if x.uop.base.op is not Ops.BUFFER else UOp(Ops.CONTIGUOUS, x.dtype, (x.uop,))
      if x._requires_grad: self._requires_grad = True
      return self
    target = view
    if any(u.op in (Ops.EXPAND, Ops.PAD) for u in _movement_nodes(target)):
      raise _fail(RuntimeError, "assign", "cannot assign to an expanded or padded view", self)
    if reads_other_view(x.uop, target):   # the kernel would overwrite values it still has to read
      x = Tensor(UOp(Ops.CONTIGUOUS, x.dtype, (x.uop,))).realize()
    out = Tensor(UOp(Ops.ASSIGN, target.dtype, (target, x.uop))).realize()
    if target is self.uop: self.uop = out.uop if self.uop.base is out.uop.base else self.uop
    return self

  # ------------------------------------------------------------ autograd
  def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
    """Gradients of this (scalar) tensor w.r.t. `targets`, as new lazy tensors.

    >>> x = Tensor([2.0, 3.0], requires_grad=True)
    >>> (x * x).sum().gradient(x)[0].tolist()
    [4.0, 6.0]
    """
    root = self.uop
    if gradient is None:
      if self.numel() != 1:
        raise _fail(RuntimeError, "backward", f"grad can be implicitly created only for scalar outputs, got shape {self.shape}", self)
      gradient = Tensor(self._c(1.0))
    elif gradient.shape != self.shape:
      raise _fail(ValueError, "backward", f"gradient shape {gradient.shape} != tensor shape {self.shape}", self, gradient)
    nodes = root.toposort()
    tnodes = [t._ctx if t._ctx is not None and t._ctx in nodes else t.uop for t in targets]
    grads = compute_gradient(root, gradient.uop, set(tnodes))
    out = []
    for t, n in zip(targets, tnodes):
      g = grads.get(n)
      out.append(Tensor(g) if g is not None else t.zeros_like())
    return out

  def backward(self, gradient: Tensor | None = None) -> Tensor:
    """Accumulate d(self)/d(t) into `t.grad` of the tensors of the graph: those with requires_grad=True (PyTorch), and
    every live float tensor whose requires_grad was never set (None: tinygrad 0.14's rule, where any tensor is a
    parameter). requires_grad=False tensors get none. The grad of an unset tensor is dropped, not computed, when a
    tensor it reads is written in place (an optimizer step): set requires_grad=True on what you read after a step.

    >>> x = Tensor([1.0, 2.0])
    >>> _ = (x * x).sum().backward(); x.grad.tolist()
    [2.0, 4.0]
    """
    nodes = self.uop.toposort()
    marked = [t for t in list(_grad_leaves.values()) if t.requires_grad and (t.uop in nodes or t._ctx in nodes)]
    if marked and not self._requires_grad:   # (PyTorch's error: a comparison or an int cast stops the gradient)
      raise _fail(RuntimeError, "backward", f"the {self.dtype} result does not require grad: no tensor that requires grad reaches it "
                                            "through differentiable ops", self)
    unset = [t for t in _live_tensors_of(nodes) if t._requires_grad is None and t.dtype.is_float]   # (marked ones are True)
    if not marked and not unset: raise _fail(RuntimeError, "backward", "no tensor in the graph can have a gradient", self)
    backward_done.update(nodes)
    for t, g in zip(marked + unset, self.gradient(*marked, *unset, gradient=gradient)):
      if g.shape != t.shape: g = g.reshape(t.shape)
      t.grad = g if t.grad is None else (t.grad + g)
      # (as PyTorch's .grad without create_graph: no gradient flows through it, so a realize that computes it hands
      # its value over, not the whole forward and backward graph under it, which would keep every activation alive)
      if t.grad._requires_grad is None: t.grad._requires_grad = False
      if t._requires_grad is None: _unset_grads[id(t.grad)] = (weakref.ref(t.grad), weakref.ref(t))
    return self

  # ------------------------------------------------------------ in-place operators
  # in place: the Tensor object is updated (PyTorch semantics for the object, lazily)
  def _inplace(self, r: Tensor, op: str) -> Tensor:
    if r.dtype != self.dtype and promote(r.dtype, self.dtype) != self.dtype:
      raise _fail(TypeError, op, f"result type {r.dtype} can't be cast to the desired output type {self.dtype}", self)
    r = r.cast(self.dtype)
    if self.uop.base.op is Ops.BUFFER and self.uop.op is not Ops.BUFFER or self.uop.op is Ops.BUFFER: return self.assign(r)
    self.uop = r.uop
    if r._requires_grad: self._requires_grad = True   # (computed from what needs grad: not a leaf of its own)
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
  def cpu(self) -> Tensor:
    """This tensor on the CPU device (PyTorch's .cpu())."""
    return self.to("CPU")

# PyTorch's named in-place methods: name -> the result written into the tensor (through _inplace: a realized tensor
# is written in place, every view of its buffer sees it)
_INPLACE_METHODS: dict[str, Callable[..., Tensor]] = {
  "add_": lambda t, x, alpha=None: t.add(x, alpha=alpha), "sub_": lambda t, x, alpha=None: t.sub(x, alpha=alpha),
  "mul_": lambda t, x: t.mul(x), "div_": lambda t, x, rounding_mode=None: t.div(x, rounding_mode=rounding_mode),
  "pow_": lambda t, x: t.pow(x), "neg_": lambda t: t.neg(), "abs_": lambda t: t.abs(),
  "clamp_": lambda t, min=None, max=None: t.clip(min, max), "clip_": lambda t, min=None, max=None: t.clip(min, max),   # noqa: A006
  "zero_": lambda t: t.zeros_like(), "fill_": lambda t, value: t.full_like(value), "copy_": lambda t, src: _as_value(t, src),
  "exp_": lambda t: t.exp(), "log_": lambda t: t.log(), "sqrt_": lambda t: t.sqrt(), "relu_": lambda t: t.relu(),
  "sigmoid_": lambda t: t.sigmoid(), "tanh_": lambda t: t.tanh(), "floor_": lambda t: t.floor(), "ceil_": lambda t: t.ceil(),
  "round_": lambda t: t.round(), "trunc_": lambda t: t.trunc(), "masked_fill_": lambda t, mask, value: t.masked_fill(mask, value),
  "lerp_": lambda t, end, weight: t.lerp(end, weight), "addcmul_": lambda t, a, b, value=1: t + value * a * b,
  "addcdiv_": lambda t, a, b, value=1: t + value * a / b,
  "uniform_": lambda t, a=0.0, b=1.0: Tensor.uniform(*t.shape, low=a, high=b, dtype=t.dtype, device=t.device),
  "normal_": lambda t, mean=0.0, std=1.0: Tensor.normal(*t.shape, mean=mean, std=std, dtype=t.dtype, device=t.device),
}

def _inplace_method(name: str, f: Callable[..., Tensor]) -> Callable[..., Tensor]:
  def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor: return self._inplace(f(self, *args, **kwargs), name)
  method.__name__ = method.__qualname__ = name
  method.__doc__ = f"In place: {name[:-1]}'s result written into this tensor (PyTorch's Tensor.{name})."
  return method

for _name, _f in _INPLACE_METHODS.items(): setattr(Tensor, _name, _inplace_method(_name, _f))

def _as_value(t: Tensor, src: Any) -> Tensor:
  """src (a Tensor, a scalar, a nested list or an array) as a tensor of t's device, broadcast to t's shape."""
  if not isinstance(src, Tensor): src = Tensor(src, device=t.device, dtype=t.dtype if not isinstance(src, (int, float, bool)) else None)
  return src.to(t.device).expand(t.shape) if src.shape != t.shape else src.to(t.device)

def _movement_nodes(u: UOp) -> list[UOp]:
  out = []
  while u.op in GroupOp.Movement: out.append(u); u = u.src[0]
  return out

# ------------------------------------------------------------ DISK tensors (runtime/ops_disk.py, docs/disk.md)
# A DISK tensor is always movement ops over a BUFFER of its file: the uop setter refuses anything else on DISK, bitcast
# makes a Buffer view (mixin/elementwise.py); reads, copies and writes go through the bytes the view covers.

def _file_buffer(path: os.PathLike, dtype: DType) -> UOp:
  """The whole file at path as a flat DISK tensor of dtype: mapped now (its size is fixed now), nothing read."""
  full = os.path.abspath(os.fsdecode(path))
  if not os.path.exists(full): raise FileNotFoundError(f"DISK:{full}: no such file")
  size = os.path.getsize(full)
  if size % dtype.itemsize: raise _fail(ValueError, "Tensor", f"DISK:{full}: {size} bytes is not a whole number of {dtype} elements")
  buf = new_buffer(f"DISK:{full}", size // dtype.itemsize, dtype)
  cast(Buffer, buf.buffer).ensure_allocated()   # (a directory or an unreadable file raises here)
  return buf

def _disk_no_kernels(u: UOp) -> Exception:
  return _fail(RuntimeError, u.base.op.name.lower(), f"{u.device} runs no kernels (a DISK tensor is bytes of a file: it can be "
               "sliced, reshaped, bitcast and copied); copy it to a compute device first, e.g. t.to('CPU')")

def _disk_bytes(t: Tensor, op: str) -> UOp:
  """The bytes of DISK tensor t as a BUFFER node over a view of its file (reshaped to t's shape); RuntimeError when
  they are not one contiguous run."""
  if (v := byte_view(t.uop, t.dtype, t.shape)) is None:
    raise _fail(RuntimeError, op, f"this view of {t.device} is not one contiguous byte range of the file (a step, a transpose or "
                "an expand): DISK copies byte ranges only; copy a slice that holds it (e.g. whole rows) with .to('CPU') and take the "
                "view there", t)
  return v

def _write_file(t: Tensor, device: str) -> Tensor:
  """t's bytes written into the file of DISK device `device` from its start (created or grown), now: t.to('DISK:...')."""
  raw = t.data()
  buf = new_buffer(device, t.numel(), t.dtype)
  cast(Buffer, buf.buffer).ensure_allocated().copyin(raw)
  return Tensor(buf.reshape(t.shape))

def _write_into_file(t: Tensor, x: Any) -> Tensor:
  """t.assign(x) for a DISK tensor t: x (a tensor on any device, an array or a scalar) is cast, broadcast and written
  into t's bytes of the file now; lazy tensors reading the file (through any tensor of it) are computed first: they
  read the old bytes."""
  view = cast(Buffer, _disk_bytes(t, "assign").base.buffer)
  if not isinstance(x, Tensor): x = Tensor.full(t.shape, x, dtype=t.dtype) if isinstance(x, (bool, int, float)) else Tensor(x, dtype=t.dtype)
  if x.shape != t.shape: x = x._broadcast_to(t.shape, "assign")
  if x.dtype != t.dtype: x = x.cast(t.dtype)
  raw = x.data()
  if readers := [r for r in lazy_tensors() if any(n.op is Ops.BUFFER and n.arg[0] == t.device for n in r.uop.toposort())]:
    Tensor.realize_all(*readers)
  view.copyin(raw)
  for hook in write_hooks: hook(view.base)   # as every in-place write: tensors viewing the file get fresh nodes
  return t

def _empty_nested(shape: tuple[int, ...]) -> Any:
  if not shape: return []
  if shape[0] == 0: return []
  return [_empty_nested(shape[1:]) if len(shape) > 1 else [] for _ in range(shape[0])]

def _renew_buffer_node(buf) -> None:
  """After an in-place write to `buf`, every tensor viewing it gets a fresh BUFFER node over the same
  memory. Graphs built from now on are new nodes (so no result cached for the old contents is reused),
  while results realized before the write keep their values (like PyTorch). The write only marks the tensors: each
  takes its fresh node when it is next looked at (Tensor._renew). A JIT replay writes every parameter and optimizer
  state, which nothing looks at before the next replay (renewing them at once cost 13-19 us per write: 1-2 ms of a GPT
  training step)."""
  buf.writes += 1   # nodes realized into it held the old contents: realized_view forgets them
  for r in list(buf.views.values()):
    if (t := r()) is None: continue
    if t._stale is None: t._stale = {id(buf)}
    else: t._stale.add(id(buf))

def _current_node(buf) -> UOp:
  """The BUFFER node of buf's contents since its last in-place write: one node, shared by every tensor that views it."""
  if buf.node is not None and buf.node[0] == buf.writes and (u := buf.node[1]()) is not None: return u
  u = new_buffer_node(buf, buf.dtype)
  buf.node = (buf.writes, weakref.ref(u))   # (weakly: the node refers to buf)
  return u

write_hooks.append(_renew_buffer_node)

# tensors on which the user set requires_grad=True (weakly): the leaves backward() fills
_grad_leaves: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
# the grads backward() gave tensors with requires_grad None: id(grad) -> (grad, its tensor), weakly. A write to what
# one reads drops it instead of computing it first (an optimizer step would otherwise compute the input's gradient)
_unset_grads: dict[int, tuple[weakref.ref, weakref.ref]] = {}

def _live_tensors_of(nodes: dict[UOp, Any]) -> list[Tensor]:
  """The live tensors whose node is one of nodes: lazy ones and those viewing a buffer of the graph."""
  out = [t for t in lazy_tensors() if t.uop in nodes]
  for b in {n.buffer for n in nodes if n.op is Ops.BUFFER and n.buffer is not None}:
    out += [t for r in list(b.views.values()) if (t := r()) is not None and t.uop in nodes]
  return out

def _drop_unset_grad(entry: tuple[weakref.ref, weakref.ref]) -> None:
  """Take an entry's grad off its tensor (when the tensor still holds it)."""
  if (owner := entry[1]()) is not None and (g := entry[0]()) is not None and owner.grad is g: owner.grad = None

def _drop_unset_grads(readers: list[Tensor]) -> list[Tensor]:
  """readers less the grads of unset tensors (backward's tinygrad rule), which are dropped from their tensors."""
  keep = []
  for t in readers:
    if (entry := _unset_grads.pop(id(t), None)) is not None and entry[0]() is t: _drop_unset_grad(entry)
    else: keep.append(t)
  for k in [k for k, (g, o) in _unset_grads.items() if g() is None or o() is None]: del _unset_grads[k]
  return keep

# what TinyJit (petagrad/engine/jit.py) needs from this layer: the engine below never imports it
def _forget_unset_grads() -> None:
  """Drop every grad backward() gave a tensor whose requires_grad is unset (TinyJit, at each call)."""
  for entry in _unset_grads.values(): _drop_unset_grad(entry)
  _unset_grads.clear()

jit.TensorLayer.register(Tensor, lazy_tensors, _has_views, computed_view, _swap_uop_changes, _forget_unset_grads)
