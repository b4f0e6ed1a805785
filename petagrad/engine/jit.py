"""TinyJit: capture the kernels one call of a function runs, then replay them with new inputs.

The first call runs normally (and compiles); the second call runs while recording every launch; later
calls only swap in the new input buffers and launch the recorded kernels: no graph work in Python.

It refuses, with a clear error, what it cannot replay: inputs whose shape, dtype or device changed,
Python (non-tensor) arguments that changed, and reading a value to Python (`.item()`, `.numpy()`,
`.tolist()`) inside the function. Random numbers drawn inside are advanced on every replay.

Every call computes what it builds: a value counts as already computed only while a live tensor holds it
(tensor.py), so a capture that builds the same graph as the warm-up call (same input tensors every call,
the count in a cross-entropy, an embedding of the same tokens) records its kernels too. `@TinyJit` on a
method gives each instance its own capture.

State the function changes but does not realize is realized at the end of the call, so that its kernels
are captured too: a lazy write (BatchNorm's running statistics, a lazy assign, a tensor rebound to a new
lazy value) that existed before the call, or a lazy tensor created during the call and kept alive. The
JIT finds them without scanning the process: the tensor layer keeps a table of the live lazy tensors, and
during a call records each tensor that viewed a buffer when the call first changed it. A
tensor that held a buffer before the capture and holds a new value after it gets the new value written
into its old buffer (in place), so replays, which read that buffer, see every update. A new value that
cannot be written in place (an expanded view, another shape) raises JitError naming the tensor, and so does
a capture whose kernels read a buffer that only a tensor dropped during the call held (state rebound to a new
Tensor object, `self.h = self.h + x`: replays would read the old buffer forever), or a buffer that the warm-up
call computed from its inputs and the capture reads without rewriting (gradients accumulating across calls
without zero_grad).

`JIT=0` (the flag, `Context(JIT=0)` or the environment) turns it off: the function then runs eagerly on every call, as
in tinygrad. `TinyJit(fn, prune=True)` (or `@TinyJit(prune=True)`) drops from the capture the kernels whose results
are the same on every call (see TinyJit). Launches made under `Context(CAPTURING=0)` during the capture call run then
and are not replayed (tinygrad's CAPTURING).

>>> from petagrad import Tensor
>>> from petagrad.engine.jit import TinyJit
>>> f = TinyJit(lambda x: (x * 2 + 1).realize())
>>> [f(Tensor([float(i), 1.0])).tolist() for i in range(3)][-1]
[5.0, 3.0]
"""
from __future__ import annotations
import functools, time, weakref
from typing import Any, Callable, Generic, TypeVar
from petagrad.engine.realize import ExecItem, capture_hooks, check_hooks, finish_launches, write_hooks
from petagrad.engine.rng import rng_state_buffers, rng_state_bytes
from petagrad.device import Buffer, Device
from petagrad.helpers import CAPTURING, DEBUG, JIT, NO_GRAD, SANITIZE, TRAINING, GlobalCounters
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp, binds_in
from petagrad.uop.graph import new_buffer_node, substitute, reads_other_view, write_vars, var_buffers, unbind, rebind

R = TypeVar("R")

class JitError(RuntimeError):
  """The jitted function did something a replay cannot reproduce."""

class TensorLayer:
  """What TinyJit needs from the tensor layer above it, which fills this in when it loads (petagrad/tensor.py: the
  engine never imports it): the Tensor class (inputs and results are found with isinstance and rebuilt as
  tensor(uop)), the live lazy tensors, whether a live tensor views a buffer, the buffer view a computed value reads,
  and the table of the tensors changed during a call (swap_changes(new) installs new and returns the one before),
  and forget_unset_grads(): drop the grads backward() gave tensors whose requires_grad is unset (a replay does not
  make them, and a tensor used again, an input or state, would add each call's to the last's)."""
  tensor: Any = None
  lazy_tensors: Callable[[], list]
  has_views: Callable[[Buffer], bool]
  computed_view: Callable[[UOp], UOp | None]
  swap_changes: Callable[[dict | None], dict | None]
  forget_unset_grads: Callable[[], None]
  @classmethod
  def register(cls, tensor: Any, lazy_tensors: Callable[[], list], has_views: Callable[[Buffer], bool],
               computed_view: Callable[[UOp], UOp | None], swap_changes: Callable[[dict | None], dict | None],
               forget_unset_grads: Callable[[], None]) -> None:
    cls.tensor, cls.lazy_tensors, cls.has_views = tensor, staticmethod(lazy_tensors), staticmethod(has_views)
    cls.computed_view, cls.swap_changes = staticmethod(computed_view), staticmethod(swap_changes)
    cls.forget_unset_grads = staticmethod(forget_unset_grads)

# set while a jitted function runs (warm-up or capture): reading values to Python is not allowed then
jit_active: list[str] = []

def _leaves(x: Any) -> list:
  if isinstance(x, (list, tuple)): return [y for v in x for y in _leaves(v)]
  if isinstance(x, dict): return [y for k in sorted(x) for y in _leaves(x[k])]
  return [x]

class TinyJit(Generic[R]):
  """Decorator: `@TinyJit def step(x, y): ...` (tinygrad's name and semantics). With the flag JIT=0 the function runs
  eagerly on every call (its returned tensors realized), nothing captured or replayed.

  prune=True (tinygrad's keyword; also `@TinyJit(prune=True)`): the capture keeps only the kernels whose results can
  change from call to call: those that read (directly or through other kernels) an input, the random state, a buffer
  written in place (state the call updates) or one the function leaves for its next call, and those that write a
  tensor it returns. The others ran once, in the capture call, and replays read what they wrote: a constant
  computed from weights, say. Like tinygrad's, this holds only while what those kernels read does not change between
  calls: a tensor the function reads but is not given (a weight) that is updated outside it leaves their results stale.

  >>> from petagrad import Tensor
  >>> w = Tensor([1.0, 2.0]).realize()
  >>> step = TinyJit(lambda x: (x * (w * 2 + 1).realize()).realize(), prune=True)
  >>> [step(Tensor([float(i), 1.0])).tolist() for i in range(3)]
  [[0.0, 5.0], [3.0, 5.0], [6.0, 5.0]]
  >>> len(step.captured)   # w * 2 + 1 ran once, in the capture call; replays launch x * that
  1
  """
  def __new__(cls, fxn: Callable[..., R] | None = None, *, prune: bool = False) -> Any:
    # @TinyJit(prune=True): without the function, the decorator that makes one
    if fxn is None: return lambda f: cls(f, prune=prune)
    return super().__new__(cls)
  def __init__(self, fxn: Callable[..., R], *, prune: bool = False):
    if not callable(fxn): raise TypeError(f"TinyJit takes a function, got {type(fxn).__name__} {fxn!r}")
    self.fxn, self.prune = fxn, bool(prune)
    functools.update_wrapper(self, fxn)   # type: ignore[arg-type]
    if not hasattr(self, "__name__"): self.__name__ = getattr(fxn, "__name__", type(fxn).__name__)
    self._bound: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # instance -> its capture (methods)
    self.reset()

  # a capture holds buffers and views, no state of the model it is kept on: get_state_dict does not walk into it
  def _state_dict_items(self) -> dict[str, Any]: return {}

  def reset(self) -> None:
    self.cnt = 0
    self.captured: list[ExecItem] = []
    self.input_slots: list[tuple[int, int, int]] = []   # (exec item, buffer position, input index)
    self.rng_slots: list[tuple[Buffer, int]] = []
    self.checks: list[tuple[Buffer, type, str]] = []   # (condition buffer, exception, message) of each data check
    self.signature: tuple | None = None
    self.capture_binds: list[UOp] = []             # the capture call's bound Variables (replays rebind returned views)
    self.ret_views: Any = None
    self.out_bufs: list[Buffer] = []               # the returned buffers the captured kernels make, this call's
    self.out_slots: list[list[tuple[int, int]]] = []   # where each sits in the captured launches
    self._from_inputs: _Taint | None = None
    self.launch_list: Any = None   # the captured launches as one call of their device's (DeviceSpec.launch_list), or None
    self.totals: tuple = (0, 0, 0, [])   # their kernels, FLOPs, bytes and in-place writes (when they run as one call)

  def _inputs(self, args: tuple, kwargs: dict) -> tuple[list, list, list]:
    """The tensor arguments, the other arguments (bound Variables as the Variables: their values may change), and the
    bound Variables' BIND nodes (each replay writes their values where the captured kernels read them)."""
    Tensor = TensorLayer.tensor
    leaves = _leaves(list(args)) + _leaves(kwargs)
    tensors = [t for t in leaves if isinstance(t, Tensor)]
    consts = [unbind(v) if isinstance(v, UOp) else v for v in leaves if not isinstance(v, Tensor)]
    binds = [b for v in leaves if isinstance(v, UOp) for b in binds_in(v, [])]
    for t in tensors: binds_in(t.shape, binds)   # (an input of symbolic shape: its Variables' values change too)
    return tensors, consts, binds

  def __get__(self, obj: Any, objtype: Any = None) -> Any:
    """`@TinyJit` on a method: each instance gets its own capture (its kernels read that instance's state)."""
    if obj is None: return self
    try: bound = self._bound.get(obj)
    except TypeError: bound = None   # unhashable or not weakly referenceable: a new capture per lookup would never replay
    if bound is None:
      # the capture holds its instance weakly (the table's value must not keep its key alive)
      fxn, ref = self.fxn, weakref.ref(obj)
      bound = TinyJit(functools.update_wrapper(lambda *a, **kw: fxn(ref(), *a, **kw), fxn), prune=self.prune)
      try: self._bound[obj] = bound
      except TypeError:
        raise TypeError(f"TinyJit on a method needs instances that are hashable and weakly referenceable; "
                        f"{type(obj).__name__} is not: jit a function that takes the instance's tensors instead") from None
    return bound

  def __call__(self, *args, **kwargs) -> R:
    T, Tensor = TensorLayer, TensorLayer.tensor
    if not JIT:   # JIT=0: an eager call (as tinygrad's, the tensors it returns are realized); the capture state is kept
      ret = self.fxn(*args, **kwargs)
      Tensor.realize_all(*[t for t in _leaves(ret) if isinstance(t, Tensor)])
      return ret
    tensors, consts, binds = self._inputs(args, kwargs)
    T.forget_unset_grads()
    # inputs become contiguous buffers (the kernels read buffers; a tensor on several devices: one on each); inputs that
    # are buffers already (the usual replay) need no realize
    lazy = [t for t in tensors if not all(_plain_buffer(u) for u in _pieces(t.uop))]
    for t in lazy: t.uop = t.contiguous().uop
    if lazy: Tensor.realize_all(*tensors)
    nodes = [n for t in tensors for n in _input_nodes(t)]   # the inputs' BUFFER nodes, in order
    bufs = [n.buffer for n in nodes]
    sig = tuple((unbind(t.shape), t.dtype, t.device) for t in tensors)
    if self.cnt >= 2:
      if sig != self.signature[0]:   # type: ignore[index]
        raise JitError(f"TinyJit({self.__name__}): input shapes/dtypes/devices changed from {self.signature[0]} to {sig}; "   # type: ignore[index]
                       "make a new TinyJit (or call .reset()) for other shapes")
      if (mode := (bool(TRAINING), bool(NO_GRAD))) != self.signature[2]:   # type: ignore[index]
        raise JitError(f"TinyJit({self.__name__}): captured with (training, no_grad) = {self.signature[2]}, called with {mode}; "   # type: ignore[index]
                       "dropout, batch statistics and gradients are baked into the captured kernels: use one TinyJit for training "
                       "and another for evaluation")
      if len(consts) != len(self.signature[1]) or any(a is not b and a != b for a, b in zip(consts, self.signature[1])):   # type: ignore[index]
        raise JitError(f"TinyJit({self.__name__}): non-tensor arguments changed from {self.signature[1]} to {consts}; "   # type: ignore[index]
                       "their values are baked into the captured kernels: pass a value that changes as a Tensor, or make a new "
                       "TinyJit (or call .reset()) for each value")
      for ei, j, i in self.input_slots:
        self.captured[ei].bufs[j] = bufs[i]
        if self.launch_list is not None: self.launch_list.set(ei, j, bufs[i])
      # every call returns tensors of its own (as an eager call does): the outputs go into fresh buffers, so results
      # a caller keeps (a list of losses, a lazy running sum) are not overwritten by the next replay
      for k, slots in enumerate(self.out_slots):
        old = self.out_bufs[k]
        self.out_bufs[k] = fresh = Buffer(old.device, old.size, old.dtype)
        for e, j in slots:
          self.captured[e].bufs[j] = fresh
          if self.launch_list is not None: self.launch_list.set(e, j, fresh)
      last: tuple = (None, b"")
      for buf, n in self.rng_slots:   # (copies of one state on several devices share their start: the same words)
        if rng_state_buffers[buf][0] != last[0]: last = (rng_state_buffers[buf][0], rng_state_bytes(n))
        buf.copyin(memoryview(last[1]))
      if binds: write_vars(binds)
      st = time.perf_counter()
      if self.launch_list is not None and DEBUG < 2 and not SANITIZE and self.launch_list():
        GlobalCounters.time_sum_s += time.perf_counter() - st
        _counted(self.captured, self.totals)
      else:
        for ei in self.captured: ei.run()
      finish_launches()
      for buf, exc, msg in self.checks:   # the data checks the captured call made (an index out of range, ...)
        if not buf.as_bytes()[0]: raise exc(msg)
      self.cnt += 1
      if DEBUG >= 1: print(f"jit replay {self.__name__}: {len(self.captured)} kernels")
      # (a returned tensor of symbolic shape gets this call's values of its Variables)
      values = {a: b for a, b in zip(self.capture_binds, binds) if a is not b}
      return _rebuild(self.ret_views, nodes, self.out_bufs, values)

    # the state the call may change: the lazy tensors alive now, and (recorded as they change) the tensors that view
    # a buffer; buffers made from here on are the call's own
    before = {id(t): (weakref.ref(t), t.uop) for t in T.lazy_tensors()}
    first_new = Buffer.made
    outer_changes = T.swap_changes({})
    jit_active.append(self.__name__)
    recorded: list[ExecItem] = []
    # launches made under Context(CAPTURING=0) run now and are not replayed
    hook: Callable[[ExecItem], None] = lambda ei: recorded.append(ei) if CAPTURING else None
    if self.cnt == 0:   # the warm-up call: remember which new buffers hold values computed from its inputs
      self._from_inputs = _Taint(bufs)
      hook = self._from_inputs.see
    capture_hooks.append(hook)
    checks: list[tuple[Buffer, type, str]] = []
    check_hook = lambda buf, exc, msg: checks.append((buf, exc, msg))
    check_hooks.append(check_hook)
    try:
      ret = self.fxn(*args, **kwargs)
      out = [t for t in _leaves(ret) if isinstance(t, Tensor)]
      changes = T.swap_changes(outer_changes)
      # outputs and pending state in one schedule (readers of a buffer's old value run before its writes)
      Tensor.realize_all(*out, *_pending_state(self.__name__, before, changes, first_new, {id(t) for t in out}, self.cnt == 1))
    finally:
      T.swap_changes(outer_changes)
      jit_active.pop()
      capture_hooks.remove(hook)
      check_hooks.remove(check_hook)
    if self.cnt == 1:
      self.checks = checks
      _check_dropped_state(self.__name__, recorded, bufs, first_new)
      if self._from_inputs is not None: self._from_inputs.check(self.__name__, recorded, bufs)
      self._from_inputs = None
      self.captured = [ExecItem(ei.kernel, list(ei.bufs), ei.writes, ei.collective, ei.frees) for ei in recorded]
      self.signature = (sig, consts, (bool(TRAINING), bool(NO_GRAD)))
      self.capture_binds = binds
      # the buffers the call made and fully wrote that it returns: replays give them fresh memory
      made = {id(ei.bufs[w.out]): ei.bufs[w.out] for ei in self.captured for w in ei.writes
              if not w.in_place and ei.bufs[w.out].serial >= first_new}
      self.out_bufs = []
      self.ret_views = _views(ret, bufs, made, self.out_bufs)
      n_recorded = len(self.captured)
      if self.prune: self.captured = _prune(self.captured, bufs, self.out_bufs)
      _share_memory(self.captured, {id(b) for b, _, _ in checks})
      index = {id(b): i for i, b in enumerate(bufs)}
      self.input_slots = [(e, j, index[id(b)]) for e, ei in enumerate(self.captured) for j, b in enumerate(ei.bufs) if id(b) in index]
      # each random-state buffer once, in the order the calls drew them (kernels may read them in another order)
      rng = {id(b): b for ei in self.captured for b in ei.bufs if b in rng_state_buffers}
      self.rng_slots = [(b, rng_state_buffers[b][1]) for b in sorted(rng.values(), key=lambda b: rng_state_buffers[b][0])]
      self.out_slots = [[(e, j) for e, ei in enumerate(self.captured) for j, b in enumerate(ei.bufs) if b is ob] for ob in self.out_bufs]
      self.launch_list, self.totals = _launch_list(self.captured), _totals(self.captured)
      if DEBUG >= 1:
        pruned = f" (pruned from {n_recorded})" if self.prune else ""
        print(f"jit captured {self.__name__}: {len(self.captured)} kernels{pruned}, {len(self.input_slots)} input slots")
    self.cnt += 1
    return ret

def _counted(items: list[ExecItem], totals: tuple[int, int, int, list[tuple[int, int]]]) -> None:
  """What launching items one by one would have told the write hooks (their in-place writes) and GlobalCounters
  (totals: _totals(items), which a replay's buffer swaps leave as they are)."""
  for e, j in totals[3]:
    for hook in write_hooks: hook(items[e].bufs[j])
  GlobalCounters.kernel_count += totals[0]
  GlobalCounters.launch_count += len(items)
  GlobalCounters.global_ops += totals[1]
  GlobalCounters.global_mem += totals[2]

def _totals(items: list[ExecItem]) -> tuple[int, int, int, list[tuple[int, int]]]:
  """(kernels, FLOPs, bytes of their buffers, where their in-place writes go: (launch, buffer position)) of launches."""
  return (sum(len(ei.writes) for ei in items), sum(ei.kernel.flops for ei in items if ei.kernel is not None),
          sum(b.nbytes for ei in items for b in ei.bufs), [(e, w.out) for e, ei in enumerate(items) for w in ei.writes if w.in_place])

def _launch_list(items: list[ExecItem]) -> Any:
  """The captured launches as one call of their device (DeviceSpec.launch_list: the CPU's runs them back to back in C,
  no Python between them), when all are kernels of one such device and none gives memory back (the list points at
  fixed memory; `_share_memory` has planned the intermediates' memory instead); else None (launched one by one)."""
  if (device := _one_device(items)) is None or any(ei.frees for ei in items) or (make := Device[device].launch_list) is None: return None
  return make([ei.kernel.program for ei in items if ei.kernel is not None], [list(ei.bufs) for ei in items])

def _one_device(items: list[ExecItem]) -> str | None:
  """The device of the launches when all are kernels (no copies or collectives) of that one device, else None."""
  if not items or any(ei.kernel is None or ei.collective is not None for ei in items): return None
  devices = {ei.kernel.device for ei in items if ei.kernel is not None}
  return devices.pop() if len(devices) == 1 else None

def _share_memory(items: list[ExecItem], keep: set[int]) -> None:
  """Plan the memory of the captured intermediates once, instead of giving it back and taking it again in every
  replay: a buffer that a launch reads last (in its `frees`) is handed, from the next launch on, to an intermediate
  of the same device, dtype and size that a later launch first uses (in place of that one's buffer), as the
  allocator's pool would in an eager call; the planned buffers stay allocated and no replay frees them, so the
  launches can run as one call of their device (`_launch_list`) at about the eager call's peak memory. Only where all
  launches are kernels of one device (in order: the memory a launch reads is not written before it runs); a buffer
  some launch views or that a data check reads keeps its own memory. keep: ids of such buffers."""
  if _one_device(items) is None: return
  first: dict[int, int] = {}
  last: dict[int, int] = {}
  for e, ei in enumerate(items):
    for b in ei.bufs:
      first.setdefault(id(b), e)
      last[id(b)] = e
      if b._base is not None: keep.add(id(b._base))
  # a buffer is planned when its free comes after its last use and it is not viewed or checked
  planned = {id(b) for e, ei in enumerate(items) for b in ei.frees
             if b._base is None and b.external is None and id(b) not in keep and last.get(id(b), e + 1) <= e}
  free_now: dict[tuple, list[Buffer]] = {}   # (dtype, size) -> buffers no later launch reads
  given: dict[int, Buffer] = {}   # id of an intermediate -> the buffer whose memory it takes
  for e, ei in enumerate(items):
    for j, b in enumerate(ei.bufs):
      if id(b) in planned and first[id(b)] == e and id(b) not in given:
        given[id(b)] = (free_now.get((b.dtype, b.size)) or [b]).pop()
      ei.bufs[j] = given.get(id(b), b)
    for b in ei.frees:
      if id(b) in planned: free_now.setdefault((b.dtype, b.size), []).append(given[id(b)])
    ei.frees = tuple(b for b in ei.frees if id(b) not in planned)

def _prune(items: list[ExecItem], inputs: list[Buffer], outs: list[Buffer]) -> list[ExecItem]:
  """The captured launches whose results can change from one call to the next (TinyJit's prune=True), in order; the
  others ran in the capture call and their buffers keep what they wrote. A launch stays when one of its kernels
  reads a buffer that varies (an input, a random state, a buffer a kept launch wrote, a buffer the capture reads
  before it writes it: state left for the next call), writes one of those, writes in place, or writes a returned
  buffer (replays give those fresh memory). A launch group stays or goes whole."""
  varying = {id(b) for b in inputs} | {id(b) for ei in items for b in ei.bufs if b in rng_state_buffers}
  every_out = {id(ei.bufs[w.out]) for ei in items for w in ei.writes}
  written: set[int] = set()
  for ei in items:   # state a call leaves for the next: read before the capture writes it
    for w in ei.writes:
      varying |= {id(ei.bufs[i]) for i in w.ins if id(ei.bufs[i]) not in written and id(ei.bufs[i]) in every_out}
      written.add(id(ei.bufs[w.out]))
  returned = {id(b) for b in outs}
  kept = []
  for ei in items:
    if any(w.in_place or id(ei.bufs[w.out]) in varying or id(ei.bufs[w.out]) in returned or any(id(ei.bufs[i]) in varying for i in w.ins)
           for w in ei.writes):
      kept.append(ei)
      varying |= {id(ei.bufs[w.out]) for w in ei.writes}
  # what a dropped launch wrote is read by replays as the capture left it: its memory is never given back
  for ei in kept: ei.frees = tuple(b for b in ei.frees if id(b) in varying)
  return kept

def _refreshed(recorded: list[ExecItem], inputs: list[Buffer]) -> set[int]:
  """ids of the buffers every replay gives new contents: what the captured kernels write, the inputs, and the buffers
  of Variables' values (written before each replay)."""
  return {id(ei.bufs[w.out]) for ei in recorded for w in ei.writes} | {id(b) for b in inputs} | {id(b) for b in var_buffers()}

class _Taint:
  """Follows the warm-up call's launches: which buffers it allocated hold values computed (directly or not) from
  its inputs. The capture must not read such a buffer without writing it: a replay would read the warm-up call's
  value forever (gradients accumulated across calls without zero_grad, state kept from the previous call)."""
  def __init__(self, inputs: list[Buffer]):
    self.tainted: weakref.WeakSet = weakref.WeakSet(inputs)   # depends on the inputs (also buffers written in place)
    self.new: weakref.WeakSet = weakref.WeakSet()              # ... and was allocated by the call (flagged if read later)
  def see(self, ei: ExecItem) -> None:
    for w in ei.writes:   # in order: a launch group's kernels see what the ones before them wrote
      if any(ei.bufs[i] in self.tainted for i in w.ins):
        self.tainted.add(ei.bufs[w.out])
        if not w.in_place: self.new.add(ei.bufs[w.out])
  def check(self, name: str, recorded: list[ExecItem], inputs: list[Buffer]) -> None:
    skip = _refreshed(recorded, inputs)
    for ei in recorded:
      for b in (ei.bufs[i] for w in ei.writes for i in w.ins):
        if id(b) not in skip and b in self.new:
          raise JitError(f"TinyJit({name}): a kernel ({ei.kernel.name if ei.kernel else 'copy'}) reads a buffer ({b.size} x {b.dtype}) that the "
                         "previous call computed from its inputs and this call does not compute again, so replays would read that "
                         "old value forever. The usual cause is a gradient accumulating across calls: call opt.zero_grad() (or set "
                         ".grad = None) inside the function. If the function keeps a result for the next call, keep it in a "
                         "tensor it updates in place (t.assign(...)) or pass it in as an argument")

def _graph_buffers(tensors: list) -> set[int]:
  """ids of the Buffers the graphs of these (lazy) tensors read."""
  seen: set = set()
  out: set[int] = set()
  for t in tensors:
    for u in t.uop.toposort():
      if u.op.name == "BUFFER" and u.buffer is not None and u not in seen: seen.add(u); out.add(id(u.buffer))
  return out

def _check_dropped_state(name: str, recorded: list[ExecItem], inputs: list[Buffer], first_new: int) -> None:
  """Refuse a capture whose kernels read a buffer from before the call that no live tensor holds any more: the
  function replaced the tensor holding it with a new one (`self.h = self.h + x`), and replays would read the old
  buffer forever."""
  _has_views, lazy_tensors = TensorLayer.has_views, TensorLayer.lazy_tensors
  skip = _refreshed(recorded, inputs)
  old = {id(b): b for ei in recorded for w in ei.writes for b in (ei.bufs[i] for i in w.ins)
         if id(b) not in skip and b.serial < first_new and b not in rng_state_buffers and not _has_views(b)}
  if not old: return
  held = _graph_buffers(lazy_tensors())
  for i, b in old.items():
    if i not in held:
      raise JitError(f"TinyJit({name}): the captured kernels read a buffer ({b.size} x {b.dtype}) from before the call whose tensor "
                     "the call dropped, probably by rebinding state to a new tensor (self.h = self.h + x); replays would read its old "
                     "value forever. Update it in place (self.h.assign(self.h + x)) or pass it in as an argument and return it")

def _is_pending(t: Any, new: bool) -> bool:
  """Is t a lazy value (not a view of a realized buffer)? A tensor created during the call counts only when it
  depends on some buffer (a lazy constant is the same on every call)."""
  u = t.uop
  if TensorLayer.computed_view(u) is not None: return False
  return not new or any(n.op.name == "BUFFER" for n in u.toposort())

def _pending_state(name: str, before: dict[int, tuple[Any, Any]], changes: dict[int, tuple[Any, Any]], first_new: int,
                   skip: set[int], capture: bool) -> list:
  """The tensors whose state the call changed without realizing it (see the module docstring), made ready to
  realize. In the capture call, a tensor that viewed a buffer from before the call gets its new value written into
  that buffer (the warm-up call behaves like an eager one)."""
  todo: list = []
  state = set()   # ids of the tensors that viewed an older buffer when the call first changed them
  for i, (ref, view) in changes.items():
    old_bufs = [p.base.buffer for p in _pieces(view)]
    if i in skip or (t := ref()) is None or old_bufs[0].serial >= first_new: continue   # (the call's own buffer: a new tensor, below)
    state.add(i)
    cur = t.uop
    if [p.base.buffer if p.base.op is Ops.BUFFER else None for p in _pieces(cur)] == old_bufs: continue   # the same memory (a write renewed its node)
    if not capture:
      if _is_pending(t, False): todo.append(t)   # the warm-up call: realizing it into a new buffer is enough
      continue
    # t viewed a buffer before the call and holds another value now: write the value into that buffer, in place
    movements = []
    for p in _pieces(view):
      u = p
      while u.op in GroupOp.Movement: movements.append(u.op); u = u.src[0]
    if view.shape != t.shape or view.dtype != t.dtype or Ops.EXPAND in movements or Ops.PAD in movements:
      raise JitError(f"TinyJit({name}): the call gave {t!r} (before: a view {view.shape} of a buffer) a new value without "
                     "writing it into its buffer, so replays would not update it; write it in place with t.assign(value)")
    # fresh nodes: no stale cached graphs
    target = substitute(view, {p.base: new_buffer_node(p.base.buffer, p.base.dtype) for p in _pieces(view)})
    value = t.uop
    if reads_other_view(value, view): value = UOp(Ops.CONTIGUOUS, value.dtype, (value,))
    t.uop = UOp(Ops.ASSIGN, t.dtype, (target, value))
    todo.append(t)
  for t in TensorLayer.lazy_tensors():
    if id(t) in skip or id(t) in state: continue
    old = before.get(id(t))
    if old is not None and old[0]() is t:   # lazy before the call: pending if the call changed it
      if old[1] is not t.uop and _is_pending(t, False): todo.append(t)
    elif _is_pending(t, True): todo.append(t)   # new: realize it when it depends on a buffer
  return todo

def _pieces(u: UOp) -> tuple[UOp, ...]:
  """A tensor's per-device parts: the sources of a MULTI, or the tensor itself."""
  return u.src if u.op is Ops.MULTI else (u,)

def _plain_buffer(u: UOp) -> bool: return u.op is Ops.BUFFER or u.op is Ops.RESHAPE and u.src[0].op is Ops.BUFFER

def _input_nodes(t: Any) -> list[UOp]:
  """The BUFFER nodes holding a (realized, contiguous) input tensor: one, or one per device."""
  u = t.uop
  return [p.base for p in _pieces(u)] if u.op is Ops.MULTI or _plain_buffer(u) else [t._contiguous_buffer()]

def _views(x: Any, inputs: list[Buffer], made: dict[int, Buffer], outs: list[Buffer]) -> Any:
  """What the function returned, with each tensor as the buffer view it is: a view of an input buffer remembers which
  input, a view of a buffer the call made (`made`, by id) which output (appended to outs), so a replay returns the
  same views of that call's inputs and outputs. A tensor on several devices: the same for each device's view."""
  if isinstance(x, TensorLayer.tensor) or isinstance(x, UOp):
    view = x._buffer_view() if not isinstance(x, UOp) else x
    if view.op is Ops.MULTI: return ("M", (view.arg, [_views(v, inputs, made, outs) for v in view.src]))
    b = view.base.buffer
    if (i := next((i for i, ib in enumerate(inputs) if ib is b), None)) is not None: return ("I", (i, view))
    if id(b) in made:
      if not any(o is b for o in outs): outs.append(b)
      return ("O", (next(k for k, o in enumerate(outs) if o is b), view))
    return ("T", view)
  if isinstance(x, (list, tuple)): return (type(x), [_views(v, inputs, made, outs) for v in x])
  if isinstance(x, dict): return (dict, {k: _views(v, inputs, made, outs) for k, v in x.items()})
  return ("V", x)

def _rebuild(v: Any, inputs: list, outs: list[Buffer], values: dict[UOp, UOp]) -> Any:
  """The returned structure again, over this call's inputs (tensors) and output buffers, with this call's values of
  the Variables (BIND nodes: capture's -> this call's) in symbolic shapes."""
  Tensor = TensorLayer.tensor
  kind, val = v
  if kind == "M":
    axis, parts = val
    views = [_rebuild(p, inputs, outs, values).uop for p in parts]
    return Tensor(UOp(Ops.MULTI, views[0].dtype, tuple(views), axis))
  if kind == "T": return Tensor(val)
  if kind == "I":
    i, view = val
    return Tensor(rebind(substitute(view, {view.base: inputs[i]}), values))
  if kind == "O":
    k, view = val
    return Tensor(rebind(substitute(view, {view.base: new_buffer_node(outs[k], view.base.dtype)}), values))
  if kind == "V": return val
  if kind is dict: return {k: _rebuild(x, inputs, outs, values) for k, x in val.items()}
  return kind(_rebuild(x, inputs, outs, values) for x in val)
