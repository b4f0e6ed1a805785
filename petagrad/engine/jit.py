"""TinyJit: capture the kernels one call of a function runs, then replay them with new inputs.

The first call runs normally (and compiles); the second call runs while recording every launch; later
calls only swap in the new input buffers and launch the recorded kernels: no graph work in Python.

It refuses, with a clear error, what it cannot replay: inputs whose shape, dtype or device changed,
Python (non-tensor) arguments that changed, and reading a value to Python (`.item()`, `.numpy()`,
`.tolist()`) inside the function. Random numbers drawn inside are advanced on every replay.

State the function changes but does not realize is realized at the end of the call, so that its kernels
are captured too: a lazy write (BatchNorm's running statistics, a lazy assign, a tensor rebound to a new
lazy value) that existed before the call, or a lazy tensor created during the call and kept alive. A
tensor that held a buffer before the capture and holds a new value after it gets the new value written
into its old buffer (in place), so replays, which read that buffer, see every update. A new value that
cannot be written in place (an expanded view, another shape) raises JitError naming the tensor, and so does
a capture whose kernels read a buffer that only a tensor dropped during the call held (state rebound to a new
Tensor object, `self.h = self.h + x`: replays would read the old buffer forever), or a buffer that the warm-up
call computed from its inputs and the capture reads without rewriting (gradients accumulating across calls
without zero_grad).

>>> from petagrad import Tensor
>>> from petagrad.engine.jit import TinyJit
>>> f = TinyJit(lambda x: (x * 2 + 1).realize())
>>> [f(Tensor([float(i), 1.0])).tolist() for i in range(3)][-1]
[5.0, 3.0]
"""
from __future__ import annotations
import functools, gc, weakref
from typing import Any, Callable, Generic, TypeVar
from petagrad.engine.realize import ExecItem, capture_hooks
from petagrad.device import Buffer
from petagrad.helpers import DEBUG

R = TypeVar("R")

class JitError(RuntimeError):
  """The jitted function did something a replay cannot reproduce."""

# set while a jitted function runs (warm-up or capture): reading values to Python is not allowed then
jit_active: list[str] = []

def _leaves(x: Any) -> list:
  if isinstance(x, (list, tuple)): return [y for v in x for y in _leaves(v)]
  if isinstance(x, dict): return [y for k in sorted(x) for y in _leaves(x[k])]
  return [x]

class TinyJit(Generic[R]):
  """Decorator: `@TinyJit def step(x, y): ...` (tinygrad's name and semantics)."""
  def __init__(self, fxn: Callable[..., R]):
    self.fxn = fxn
    functools.update_wrapper(self, fxn)   # type: ignore[arg-type]
    self.reset()

  def reset(self) -> None:
    self.cnt = 0
    self.captured: list[ExecItem] = []
    self.input_slots: list[tuple[int, int, int]] = []   # (exec item, buffer position, input index)
    self.rng_slots: list[tuple[Buffer, int]] = []
    self.signature: tuple | None = None
    self.ret_views: Any = None
    self._from_inputs: _Taint | None = None

  def _inputs(self, args: tuple, kwargs: dict) -> tuple[list, list]:
    from petagrad.tensor import Tensor
    leaves = _leaves(list(args)) + _leaves(kwargs)
    tensors = [t for t in leaves if isinstance(t, Tensor)]
    consts = [v for v in leaves if not isinstance(v, Tensor)]
    return tensors, consts

  def __call__(self, *args, **kwargs) -> R:
    from petagrad.tensor import Tensor, rng_state_buffers, rng_state_bytes
    tensors, consts = self._inputs(args, kwargs)
    # inputs become contiguous buffers (the kernels read buffers)
    for t in tensors:
      if t.uop.base.op.name != "BUFFER" or t.uop.op.name not in ("BUFFER", "RESHAPE"): t.uop = t.contiguous().uop
    Tensor.realize_all(*tensors)
    bufs = [t._contiguous_buffer().buffer for t in tensors]
    sig = tuple((t.shape, t.dtype, t.device) for t in tensors)
    if self.cnt >= 2:
      if sig != self.signature[0]:   # type: ignore[index]
        raise JitError(f"TinyJit({self.fxn.__name__}): input shapes/dtypes/devices changed from {self.signature[0]} to {sig}; "   # type: ignore[index]
                       "make a new TinyJit (or call .reset()) for other shapes")
      if len(consts) != len(self.signature[1]) or any(a is not b and a != b for a, b in zip(consts, self.signature[1])):   # type: ignore[index]
        raise JitError(f"TinyJit({self.fxn.__name__}): non-tensor arguments changed from {self.signature[1]} to {consts}; "   # type: ignore[index]
                       "their values are baked into the captured kernels")
      for ei, j, i in self.input_slots: self.captured[ei].bufs[j] = bufs[i]
      for buf, n in self.rng_slots: buf.copyin(memoryview(rng_state_bytes(n)))
      for ei in self.captured: ei.run()
      self.cnt += 1
      if DEBUG >= 1: print(f"jit replay {self.fxn.__name__}: {len(self.captured)} kernels")
      return _rebuild(self.ret_views)

    before = _tensor_states()
    jit_active.append(self.fxn.__name__)
    recorded: list[ExecItem] = []
    hook: Callable[[ExecItem], None] = recorded.append
    if self.cnt == 0:   # the warm-up call: remember which new buffers hold values computed from its inputs
      self._from_inputs = _Taint(bufs)
      hook = self._from_inputs.see
    capture_hooks.append(hook)
    try:
      ret = self.fxn(*args, **kwargs)
      out = [t for t in _leaves(ret) if isinstance(t, Tensor)]
      # outputs and pending state in one schedule (readers of a buffer's old value run before its writes)
      Tensor.realize_all(*out, *_pending_state(self.fxn.__name__, before, {id(t) for t in out}, self.cnt == 1))
    finally:
      jit_active.pop()
      capture_hooks.remove(hook)
    if self.cnt == 1:
      _check_dropped_state(self.fxn.__name__, before, recorded, bufs)
      if self._from_inputs is not None: self._from_inputs.check(self.fxn.__name__, recorded, bufs)
      self._from_inputs = None
      self.captured = [ExecItem(ei.kernel, list(ei.bufs), ei.writes) for ei in recorded]
      index = {id(b): i for i, b in enumerate(bufs)}
      self.input_slots = [(e, j, index[id(b)]) for e, ei in enumerate(self.captured) for j, b in enumerate(ei.bufs) if id(b) in index]
      # each random-state buffer once, in the order the calls drew them (kernels may read them in another order)
      rng = {id(b): b for ei in self.captured for b in ei.bufs if b in rng_state_buffers}
      self.rng_slots = [(b, rng_state_buffers[b][1]) for b in sorted(rng.values(), key=lambda b: rng_state_buffers[b][0])]
      self.signature = (sig, consts)
      self.ret_views = _views(ret)
      if DEBUG >= 1: print(f"jit captured {self.fxn.__name__}: {len(self.captured)} kernels, {len(self.input_slots)} input slots")
    self.cnt += 1
    return ret

def _tensor_states() -> dict[int, tuple[Any, Any, Any]]:
  """Every live Tensor: id -> (a weak reference to it, its Buffer if it views a realized one else its lazy UOp, its UOp)."""
  from petagrad.tensor import Tensor
  return {id(o): (weakref.ref(o), _state(o), o.uop) for o in gc.get_objects() if issubclass(type(o), Tensor)}   # type(): no __class__ lookups on foreign objects

class _Taint:
  """Follows the warm-up call's launches: which buffers it allocated hold values computed (directly or not) from
  its inputs. The capture must not read such a buffer without writing it: a replay would read the warm-up call's
  value forever (gradients accumulated across calls without zero_grad, a cached result of the previous call)."""
  def __init__(self, inputs: list[Buffer]):
    self.tainted: weakref.WeakSet = weakref.WeakSet(inputs)   # depends on the inputs (also buffers written in place)
    self.new: weakref.WeakSet = weakref.WeakSet()              # ... and was allocated by the call (flagged if read later)
  def see(self, ei: ExecItem) -> None:
    for w in ei.writes:   # in order: a launch group's kernels see what the ones before them wrote
      if any(ei.bufs[i] in self.tainted for i in w.ins):
        self.tainted.add(ei.bufs[w.out])
        if not w.in_place: self.new.add(ei.bufs[w.out])
  def check(self, name: str, recorded: list[ExecItem], inputs: list[Buffer]) -> None:
    written = {id(ei.bufs[w.out]) for ei in recorded for w in ei.writes}
    skip = written | {id(b) for b in inputs}
    for ei in recorded:
      for b in (ei.bufs[i] for w in ei.writes for i in w.ins):
        if id(b) not in skip and b in self.new:
          raise JitError(f"TinyJit({name}): a kernel ({ei.kernel.name if ei.kernel else 'copy'}) reads a buffer ({b.size} x {b.dtype}) that the "
                         "previous call computed from its inputs and this call never rewrites, so replays would read that old value forever "
                         "(e.g. gradients accumulating across calls: call opt.zero_grad() inside the function; state kept in a new tensor "
                         "each call: update it in place with assign, or pass it in as an argument)")

def _check_dropped_state(name: str, before: dict[int, tuple[Any, Any, Any]], recorded: list[ExecItem], inputs: list[Buffer]) -> None:
  """Refuse a capture whose kernels read a buffer that only a tensor dropped during the call held: the function
  replaced that tensor with a new one (`self.h = self.h + x`), and replays would read the old buffer forever."""
  from petagrad.tensor import realized_buffers
  written = {id(ei.bufs[w.out]) for ei in recorded for w in ei.writes}
  read = {id(ei.bufs[i]) for ei in recorded for w in ei.writes for i in w.ins} - written - {id(b) for b in inputs}
  if not read: return
  held = {id(st) for _, st, _ in _tensor_states().values() if isinstance(st, Buffer)}
  held |= {id(b) for b in realized_buffers()}
  for ref, st, u in before.values():
    if ref() is None and isinstance(st, Buffer) and id(st) in read and id(st) not in held:
      raise JitError(f"TinyJit({name}): the captured kernels read a buffer ({u.shape}, {u.dtype}) whose tensor the call dropped, "
                     "probably by rebinding state to a new tensor (self.h = self.h + x); replays would read its old value forever. "
                     "Update it in place (self.h.assign(self.h + x)) or pass it in as an argument")

def _state(t: Any) -> Any:
  b = t.uop.base
  return b.buffer if b.op.name == "BUFFER" else t.uop

def _is_pending(t: Any, new: bool) -> bool:
  """Is t a lazy value (not a view of a realized buffer, not realized already)? A tensor created during the call
  counts only when it depends on some buffer (a lazy constant is the same on every call)."""
  from petagrad.tensor import realized_view
  u = t.uop
  if u.base.op.name == "BUFFER" or realized_view(u) is not None: return False
  return not new or any(n.op.name == "BUFFER" for n in u.toposort())

def _pending_state(name: str, before: dict[int, tuple[Any, Any, Any]], skip: set[int], capture: bool) -> list:
  """The tensors whose state the call changed without realizing it (see the module docstring), made ready to
  realize. In the capture call, a tensor that viewed a buffer before the call gets its new value written into
  that buffer (the warm-up call behaves like an eager one)."""
  from petagrad.tensor import _reads_other_view
  from petagrad.uop.ops import Ops, GroupOp
  from petagrad.uop.uop import UOp
  from petagrad.schedule.schedule import new_buffer_node, substitute
  todo: list = []
  for i, (ref, st, _) in _tensor_states().items():
    if i in skip or (t := ref()) is None: continue
    old = before.get(i)
    if old is not None and old[0]() is not t: old = None   # an id reused by a new tensor
    if old is not None and old[1] is st: continue      # unchanged: the same buffer, or the same lazy graph
    was_buffer = old is not None and isinstance(old[1], Buffer)
    if not (_is_pending(t, old is None) or (was_buffer and isinstance(st, Buffer))): continue
    if not was_buffer or not capture:
      if _is_pending(t, old is None): todo.append(t)   # new, or lazy before the call too: realizing it into a new buffer is enough
      continue
    # t viewed a buffer before the call and holds another value now: write the value into that buffer, in place
    view = old[2]
    movements = []
    u = view
    while u.op in GroupOp.Movement: movements.append(u.op); u = u.src[0]
    if view.shape != t.shape or view.dtype != t.dtype or Ops.EXPAND in movements or Ops.PAD in movements:
      raise JitError(f"TinyJit({name}): the call gave {t!r} (before: a view {view.shape} of a buffer) a new value without "
                     "writing it into its buffer, so replays would not update it; write it in place with t.assign(value)")
    target = substitute(view, {view.base: new_buffer_node(old[1], view.base.dtype)})   # a fresh node: no stale cached graphs
    value = t.uop
    if _reads_other_view(value, view): value = UOp(Ops.CONTIGUOUS, value.dtype, (value,))
    t.uop = UOp(Ops.ASSIGN, t.dtype, (target, value))
    todo.append(t)
  return todo

def _views(x: Any) -> Any:
  from petagrad.tensor import Tensor
  if isinstance(x, Tensor): return ("T", x._buffer_view())
  if isinstance(x, (list, tuple)): return (type(x), [_views(v) for v in x])
  if isinstance(x, dict): return (dict, {k: _views(v) for k, v in x.items()})
  return ("V", x)

def _rebuild(v: Any) -> Any:
  from petagrad.tensor import Tensor
  kind, val = v
  if kind == "T": return Tensor(val)
  if kind == "V": return val
  if kind is dict: return {k: _rebuild(x) for k, x in val.items()}
  return kind(_rebuild(x) for x in val)
