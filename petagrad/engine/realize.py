"""Realize: schedule -> lower -> optimize -> linearize -> render -> compile (cached) -> run, with stats
and DEBUG output.

Caches: scheduling and lowering are keyed by the graph's structure with its buffers abstracted away (a
repeated graph with new buffers skips both; lowered kernels are kept on disk too); programs are keyed by their
kernels' ASTs (memory, and on disk their generated source, so a new process skips code generation) and compiled
libraries by the source (disk, in the device's compiler). The kernels of one schedule that are not compiled yet
are compiled in parallel before the first one runs.
"""
from __future__ import annotations
import os, pickle, re, time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp, pretty, multi_seen, sint_str
from petagrad.device import Device, Program, Buffer, launch_waits
from petagrad.dtype import DType, dtypes
from petagrad.helpers import (DEBUG, NOOPT, BEAM, OMP, SANITIZE, EARLY_FREE, COMPILE_ALSO, GlobalCounters, code_cache_dir, content_hash,
                              cpu_threads, read_cached, write_cached)
from petagrad.schedule.schedule import ScheduleItem, Scheduled, schedule_cached, structure
from petagrad.schedule import multi
from petagrad.runtime import mpi
from petagrad.uop.graph import substitute, new_buffer_for, var_buffer, var_buffers, write_vars, unbind
from petagrad.device.world import is_local
from petagrad.codegen.lower import lower
from petagrad.codegen.linearize import linearize, concat_programs
from petagrad.codegen.group import merge_nests
from petagrad.codegen.opt import Kernel
from petagrad.codegen.heuristic import hand_coded_optimizations
from petagrad.codegen.search import beam_search
from petagrad.codegen.vector_memory import combine_memory
from petagrad.codegen.expand import expand_unrolled, vectorize
from petagrad.codegen.decompositions import decompose

@dataclass
class CompiledKernel:
  name: str
  device: str
  opts: list
  program: Program
  src: str
  flops: int
  params: list[DType]
  launch: tuple[int, int] = (1, 1)   # (work-groups, threads per group) on a GPU-style device

@dataclass(frozen=True)
class Part:
  """One kernel of a launch: its AST and, for each of its parameters, the position among the launch's buffers."""
  ast: UOp
  params: tuple[int, ...]

# an optimized kernel and the positions of its parameters among its program's (several make a launch group)
Member = tuple[Kernel, tuple[int, ...]]

_kernel_cache: dict[tuple, CompiledKernel] = {}

_NAME_CHARS = str.maketrans({"+": "p", "-": "s", "*": "m", "/": "d", "%": "r", "<": None, ">": None, "(": None, ")": None, " ": None, ",": None})

def kernel_name(ast: UOp, out_shape: tuple[int, ...]) -> str:
  reduces = [r for r in ast.toposort() if r.op is Ops.REDUCE]
  # (a symbolic size by its Variables, not their values: the name is the same for every value; <v>+1 -> vp1)
  shape = "_".join(str(s) if isinstance(s, int) else re.sub(r"\[\d+-\d+\]", "", sint_str(unbind(s))).translate(_NAME_CHARS)
                   for s in out_shape) or "1"
  if not reduces: return f"E_{shape}"
  rsize = "_".join(str(rr.arg[1]) for r in reduces[-1:] for rr in r.src[1:])
  return f"r_{shape}_{rsize}"

def compile_kernels(device: str, todo: list[tuple[Kernel | list[Member], str, list[DType]]]) -> list[CompiledKernel | Exception]:
  """Expand, linearize and render each (optimized) kernel here, one after the other, then run the compiler on
  the sources side by side (it runs in subprocesses; all Python work stays in this thread) and load them.
  An entry is one kernel, or the members of a launch group (compiled into one program that runs them in order).
  A kernel that fails to compile gives its exception in its place."""
  dev = Device[device]
  progs, srcs = [], []
  for kk, name, params in todo:
    members = [(kk, tuple(range(len(params))))] if isinstance(kk, Kernel) else kk
    try:
      r = dev.renderer
      parts = [linearize(combine_memory(vectorize(expand_unrolled(decompose(k.ast, r.decompose_ops)), bool(r.shuffle), r.dot4_lanes),
                                        r.vector_memory), peel=not r.has_local) for k, _ in members]
      # a launch group's members (even a single merged nest) number their parameters by launch position
      prog = parts[0] if isinstance(kk, Kernel) else concat_programs(parts, [list(p) for _, p in members])
      src = dev.renderer.render(name, prog, params)
    except Exception as e: prog, src = None, e
    if DEBUG >= 5:
      for k, _ in members: print(f"--- kernel AST {name}\n{pretty(k.ast)}")
    if DEBUG >= 6 and prog is not None: print(f"--- linear program {name}\n{pretty(UOp(Ops.SINK, params[0], tuple(prog.uops)))}")
    if DEBUG >= 4: print(f"--- source {name}\n{src}")
    progs.append(prog); srcs.append(src)
    GlobalCounters.codegen_count += 1
  def build(i: int) -> bytes | Exception:
    if isinstance(srcs[i], Exception): return srcs[i]
    try: return dev.compiler.compile_cached(srcs[i], todo[i][1])
    except Exception as e: return e
  if len(todo) > 1:
    with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool: libs = list(pool.map(build, range(len(todo))))
  else: libs = [build(0)] if todo else []
  def applied(kk) -> list: return list(kk.applied) if isinstance(kk, Kernel) else [list(k.applied) for k, _ in kk]
  out: list[CompiledKernel | Exception] = []
  for (kk, name, params), prog, src, lib in zip(todo, progs, srcs, libs):
    if isinstance(lib, Exception): out.append(lib); continue
    launch = dev.renderer.launch_dims(prog)
    out.append(CompiledKernel(name, device, applied(kk), dev.program(name, lib, launch), src, prog.flops, params, launch))
  return out

def _code_flags() -> tuple[int, int, int, int]:
  """The flags that change the code generated for a kernel (they key the program caches and the launch plans)."""
  return (int(NOOPT), int(BEAM), cpu_threads(), int(SANITIZE))

def _kernel_key(device: str, parts: tuple[Part, ...]) -> tuple: return (device, parts, *_code_flags())

def _optimize(device: str, ast: UOp, params: list[DType]) -> Kernel:
  dev = Device[device]
  if BEAM >= 1 and not NOOPT:
    return beam_search(device, Kernel(ast, max_local=dev.renderer.max_local), params, int(BEAM), compile_kernels)
  r = dev.renderer
  return hand_coded_optimizations(Kernel(ast, max_local=r.max_local), r)

def _members(device: str, parts: tuple[Part, ...], params: list[DType]) -> list[Member]:
  return [(_optimize(device, p.ast, [params[i] for i in p.params]), p.params) for p in parts]

def _remember(key: tuple, launch: _Launch, ck: CompiledKernel) -> None:
  """Keep a launch's program in the memory cache; with COMPILE_ALSO, build its kernels for those targets first."""
  for target in [t for t in str(COMPILE_ALSO).split(",") if t]:
    ps = launch.params()
    if Device[target].renderer.launch_groups: todo = [(launch.parts, ps)]
    else: todo = [((Part(p.ast, tuple(range(len(p.params)))),), [ps[i] for i in p.params]) for p in launch.parts]   # one kernel each
    for built in compile_kernels(target, [(_members(target, parts, params), launch.name, params) for parts, params in todo]):
      if isinstance(built, Exception): raise built
  _kernel_cache[key] = ck

def get_kernel(launch: _Launch) -> CompiledKernel:
  """The compiled program running the launch's kernels in order, from the caches or generated and compiled now."""
  key = _kernel_key(launch.device, launch.parts)
  if (ck := _kernel_cache.get(key)) is None:
    if (ck := _load_generated(launch)) is None:
      params = launch.params()
      ck = compile_kernels(launch.device, [(_members(launch.device, launch.parts, params), launch.name, params)])[0]
      if isinstance(ck, Exception): raise ck
      _save_generated(launch, ck)
    _remember(key, launch, ck)
  return ck

def compile_ahead(launches: list[_Launch]) -> None:
  """Compile the programs of a schedule that are not in the caches yet, side by side, before the first runs.
  With BEAM each kernel is searched (and timed on the device) on its own, when it is first needed."""
  todo: dict[tuple, _Launch] = {}
  for l in launches:
    if (key := _kernel_key(l.device, l.parts)) in _kernel_cache or key in todo: continue
    if (ck := _load_generated(l)) is not None: _remember(key, l, ck)
    else: todo[key] = l
  if len(todo) < 2 or BEAM: return
  by_device: dict[str, list[tuple[tuple, _Launch]]] = {}
  for key, l in todo.items(): by_device.setdefault(l.device, []).append((key, l))
  for device, group in by_device.items():
    built = compile_kernels(device, [(_members(device, l.parts, l.params()), l.name, l.params()) for _, l in group])
    for (key, l), ck in zip(group, built):
      if isinstance(ck, Exception): raise ck
      _save_generated(l, ck)
      _remember(key, l, ck)

# Generated programs on disk, keyed by the content of their kernels' ASTs (UOp.key), the flags that change the
# code, the device's compiler and petagrad's own code: a new process that runs the same kernels skips lowering's
# successors (optimization, expansion, linearization, rendering: ~10 ms of Python per kernel) as well as the C
# compiler (whose output is cached under the source).
def _generated_path(launch: _Launch) -> str:
  dev = Device[launch.device]
  key = content_hash(launch.device, dev.compiler.cache_key, repr((*_code_flags(), int(OMP))), *(f"{p.ast.key} {p.params}" for p in launch.parts))
  return str(code_cache_dir("generated") / f"{key}.pkl")

def _load_generated(launch: _Launch) -> CompiledKernel | None:
  if (hit := _read_pickle(_generated_path(launch))) is None: return None
  try: name, opts, src, flops, params, dims = hit
  except ValueError: return None   # written by an older petagrad
  if DEBUG.value >= 4: print(f"--- source {name} (generated by an earlier process: from the disk cache)\n{src}")
  dev = Device[launch.device]
  return CompiledKernel(name, launch.device, opts, dev.program(name, dev.compiler.compile_cached(src, name), dims), src, flops, params, dims)

def _save_generated(launch: _Launch, ck: CompiledKernel) -> None:
  write_cached(_generated_path(launch), pickle.dumps((ck.name, ck.opts, ck.src, ck.flops, ck.params, ck.launch)))

def _flatten(root: UOp) -> list[tuple]:
  """The graph as a flat list, children first, sources by position (pickling nested nodes would recurse as deep
  as the graph)."""
  nodes = list(root.toposort())
  index = {u: i for i, u in enumerate(nodes)}
  return [(u.op, u.dtype, tuple(index[s] for s in u.src), u.arg) for u in nodes]

def _unflatten(flat: list[tuple]) -> UOp:
  built: list[UOp] = []
  for op, dtype, src, arg in flat: built.append(UOp(op, dtype, tuple(built[i] for i in src), arg))
  return built[-1]

def _read_pickle(path: str):
  if (data := read_cached(path)) is None: return None
  try: return pickle.loads(data)
  except Exception: return None   # unreadable (another petagrad wrote it): make it again

# ---------------------------------------------------------------- lowering cache

_lower_cache: dict[tuple, tuple[UOp, list[int]]] = {}

def lower_cached(out: UOp, value: UOp, known: tuple[tuple, list[UOp]] | None = None) -> tuple[UOp, list[UOp]]:
  """lower(), keyed by the kernel's structure: buffers become numbered slots. `known`: the structure's key and
  buffers when the scheduler already has them."""
  key, bufs = known if known is not None else structure(UOp(Ops.SINK, out.dtype, (out, value)))[::2]
  if (hit := _lower_cache.get(key)) is None:
    # on disk too (index math simplification makes lowering the costliest step for a kernel of many views)
    path = str(code_cache_dir("lowered") / f"{content_hash(repr(key))}.pkl")
    if (stored := _read_pickle(path)) is not None: hit = (_unflatten(stored[0]), stored[1])
    else:
      placeholders = {b: UOp(Ops.BUFFER, b.dtype, (), (b.arg[0], b.arg[1], -1 - i)) for i, b in enumerate(bufs)}
      norm = substitute(UOp(Ops.SINK, out.dtype, (out, value)), placeholders)
      ast, params = lower(norm.src[0], norm.src[1])
      # (a Variable's buffer is the same for every graph: kept by what names it, (device, ("var", name, min, max)))
      hit = (ast, [(p.arg[0], p.arg[2]) if isinstance(p.arg[2], tuple) else -1 - p.arg[2] for p in params])
      write_cached(path, pickle.dumps((_flatten(ast), hit[1])))
    _lower_cache[key] = hit
  ast, order = hit
  return ast, [bufs[i] if isinstance(i, int) else var_buffer(i[1][1:], i[0]) for i in order]

# ---------------------------------------------------------------- running

@dataclass(frozen=True)
class Writes:
  """What one kernel of a launch does with the launch's buffers (positions in ExecItem.bufs)."""
  out: int
  ins: tuple[int, ...]
  in_place: bool = False   # an ASSIGN: the write hooks hear about it

@dataclass
class ExecItem:
  """One launch: a compiled program (or a copy when kernel is None), its buffers, and per kernel in it, which
  buffer it writes and which it reads (a launch group runs several kernels)."""
  kernel: CompiledKernel | None
  bufs: list[Buffer]
  writes: list[Writes]
  collective: tuple | None = None   # a copy that is an MPI collective: (Ops.ALLREDUCE or Ops.ALLGATHER, its arg)
  frees: tuple[Buffer, ...] = ()    # intermediate buffers this launch reads last: their memory is released after it
  def run(self) -> float:
    if SANITIZE: self._check_released()
    et = self._run()
    for b in self.frees: b.release()
    return et
  def _check_released(self) -> None:
    """SANITIZE=1: no launch reads a buffer whose memory was given back since a kernel last wrote it (the early free's
    safety: such a read would see another value's bytes)."""
    for w in self.writes:
      for i in w.ins:
        if self.bufs[i].released:
          name = self.kernel.name if self.kernel is not None else "copy"
          raise RuntimeError(f"{name} reads {self.bufs[i]!r} (parameter {i}), whose memory was given back after what was meant to be "
                             "its last reader: an early-free bug (EARLY_FREE=0 avoids it; please report it)")
      self.bufs[w.out].released = False
  def _run(self) -> float:
    if _in_flight: _settle(self.bufs)
    if self.collective is not None:
      out, src = self.bufs
      if (started := mpi.start_collective(self.collective, out.ensure_allocated(), src)) is not None:
        _in_flight.append((started, {id(out.base), id(src.base)}, (out, src)))
      GlobalCounters.global_mem += out.nbytes
      return 0.0
    if self.kernel is None:
      out, src = self.bufs
      out.copy_from(src)
      GlobalCounters.global_mem += out.nbytes
      if DEBUG.value >= 2: print(f"*** {out.device:7s} copy {out.nbytes:>10d} bytes from {src.device}")
      return 0.0
    k = self.kernel
    raw = [b.raw for b in self.bufs]
    st = time.perf_counter()
    if getattr(k.program, "sanitized", False): k.program(*raw, sizes=[b.size for b in self.bufs])   # bounds-checked (SANITIZE)
    else: k.program(*raw)
    if DEBUG.value >= 2: Device[k.device].synchronize()   # a device that queues launches: time the kernel itself
    et = time.perf_counter() - st
    for w in self.writes:
      if w.in_place:
        for hook in write_hooks: hook(self.bufs[w.out])
    mem = sum(b.nbytes for b in self.bufs)
    GlobalCounters.kernel_count += len(self.writes)
    GlobalCounters.launch_count += 1
    GlobalCounters.global_ops += k.flops
    GlobalCounters.global_mem += mem
    GlobalCounters.time_sum_s += et
    if DEBUG.value >= 2:
      print(f"*** {k.device:7s} {GlobalCounters.launch_count:4d} {k.name:30s} bufs {len(self.bufs):2d}  tm {et*1e6:9.2f}us  "
            f"{k.flops/max(et,1e-9)/1e9:8.2f} GFLOP/s {mem/max(et,1e-9)/1e9:8.2f} GB/s")
    if DEBUG.value >= 3: print(f"    opts: {k.opts or 'none'}")
    return et

# Collectives between MPI ranks that were started and have not completed (runtime/mpi.py): (the collective, the
# memory it reads and writes, its buffers kept alive). The launches after one run while it is under way, and the
# first that touches its memory waits for it: a gradient's allreduce overlaps the rest of the backward pass (the
# scheduler starts collectives as soon as they are ready). Every realize and JIT replay ends with none left.
_in_flight: list[tuple[mpi.Started, set[int], tuple]] = []

def _settle(bufs: list[Buffer]) -> None:
  """Before a launch over bufs: wait for the collectives under way on their memory, move the others along."""
  touched = {id(b.base) for b in bufs}
  keep, moved = [], False
  for entry in _in_flight:
    if entry[1] & touched: entry[0].wait()
    # one test moves every collective along (MPI's progress is global): the later ones are looked at when needed
    elif moved or not entry[0].test(): keep.append(entry); moved = True
  _in_flight[:] = keep

def finish_launches() -> None:
  """Wait for every collective still under way and every device's queued launches (the end of a realize or a JIT
  replay)."""
  while _in_flight: _in_flight.pop(0)[0].wait()
  for wait in launch_waits: wait()

# a JIT capturing a function's launches registers a callback here
capture_hooks: list[Callable[[ExecItem], None]] = []
# called with each buffer an in-place write (ASSIGN) changed, in eager runs and in JIT replays
write_hooks: list[Callable[[Buffer], None]] = []
# a JIT capturing a function registers a callback here: it hears of each data check a realize made (the bool buffer
# the check's kernel wrote, the exception to raise when it holds False), to make it again after every replay
check_hooks: list[Callable[[Buffer, type, str], None]] = []

def _lower_item(si: ScheduleItem) -> tuple[UOp, list[UOp]]:
  ast, bufs = lower_cached(si.out, si.value, si.structure)
  device = si.out.base.buffer.device
  for b in bufs:
    if b.arg[0] != device:
      raise RuntimeError(f"a kernel on {device} reads a buffer on {b.arg[0]}; move tensors with .to({device!r}) first")
  return ast, bufs

@dataclass
class _Launch:
  """Lowered schedule items that run as one program: the program's kernels (after merging, fewer than the items),
  its BUFFER nodes, and what each item writes and reads."""
  items: list[ScheduleItem]
  parts: tuple[Part, ...]
  bufs: list[UOp]
  writes: list[Writes]
  @property
  def device(self) -> str: return self.items[0].out.base.buffer.device
  @property
  def name(self) -> str:   # only needed to compile: not computed on every run
    first = kernel_name(self.parts[0].ast, self.items[0].out.shape)
    return first if len(self.items) == 1 else f"G{len(self.items)}_{first}"
  def params(self) -> list[DType]: return [b.dtype for b in self.bufs]

def _launches(items: list[ScheduleItem]) -> list[_Launch | ScheduleItem]:
  """The schedule's copies (as they are) and its programs: a kernel alone, or a run of items of one group (where
  consecutive elementwise kernels of one shape share a loop nest: codegen/group.py)."""
  out: list[_Launch | ScheduleItem] = []
  for si in items:
    if si.kind in ("copy", "collective"): out.append(si); continue
    if si.out.size == 0: continue   # nothing to compute
    ast, bufs = _lower_item(si)
    last = out[-1] if out else None
    if si.group >= 0 and isinstance(last, _Launch) and last.items[-1].group == si.group and Device[last.device].renderer.launch_groups:
      pos = {b: i for i, b in enumerate(last.bufs)}
      for b in bufs:
        if b not in pos: pos[b] = len(last.bufs); last.bufs.append(b)
      last.items.append(si)
      last.parts += (Part(ast, tuple(pos[b] for b in bufs)),)
    else: out.append(_Launch([si], (Part(ast, tuple(range(len(bufs)))),), list(bufs), []))
  for l in out:
    if not isinstance(l, _Launch): continue
    l.writes = [Writes(p.params[0], p.params[1:], si.kind == "assign") for si, p in zip(l.items, l.parts)]
    if len(l.parts) > 1:
      l.parts = tuple(Part(a, p) for a, p in merge_nests([(p.ast, p.params) for p in l.parts], [id(b.buffer) for b in l.bufs]))
  return out

def _buffers(launch: _Launch | ScheduleItem) -> list[Buffer]:
  if isinstance(launch, ScheduleItem): return [launch.out.base.buffer, launch.value.base.buffer]
  return [b.buffer for b in launch.bufs]

def _exec_item(launch: _Launch | ScheduleItem, frees: tuple[Buffer, ...]) -> ExecItem:
  if isinstance(launch, ScheduleItem): return ExecItem(None, _buffers(launch), [Writes(0, (1,))], launch.arg, frees)
  return ExecItem(get_kernel(launch), _buffers(launch), launch.writes, None, frees)

def last_uses(launches: list[list[Any]], freeable: Callable[[Any], bool], never: set[int]) -> list[tuple]:
  """Per launch (given as the list of its buffers, or of their slots), the freeable ones it uses last; those in `never`
  (by id: what a collective touches, read while later launches run) are not freed."""
  last: dict[int, tuple[int, Any]] = {}
  for i, bufs in enumerate(launches):
    for b in bufs: last[id(b)] = (i, b)
  out: list[list[Any]] = [[] for _ in launches]
  for k, (i, b) in last.items():
    if k not in never and freeable(b): out[i].append(b)
  return [tuple(f) for f in out]

def run_schedule(items: list[ScheduleItem], freeable: Callable[[Buffer], bool] = lambda b: False) -> list[ExecItem]:
  """Compile (what is not cached) and run the items; returns what ran. The buffers for which freeable(buffer) holds
  (intermediate values nothing reads after this schedule) give their memory back after the launch that reads them
  last."""
  launches = _launches(items)
  if len(launches) > 1: compile_ahead([l for l in launches if isinstance(l, _Launch)])
  bufs = [_buffers(l) for l in launches]
  never = {id(b) for l, bs in zip(launches, bufs) if isinstance(l, ScheduleItem) and l.kind == "collective" for b in bs}
  return [_launch(_exec_item(l, f)) for l, f in zip(launches, last_uses(bufs, freeable, never))]

def _launch(ei: ExecItem) -> ExecItem:
  for hook in capture_hooks: hook(ei)
  ei.run()
  return ei

# ---------------------------------------------------------------- launch plans

@dataclass(frozen=True)
class _Plan:
  """What a schedule template ran, over its slots: per launch, the program and where each of its buffers comes from
  ((False, i): the graph's input i; (True, j): the schedule's output j). A repeated graph runs it directly: no
  rebinding of the schedule's items, no lowering or program lookups."""
  kernels: dict    # the program cache it was made under (a swapped cache invalidates it)
  launches: list[tuple[CompiledKernel | None, list[tuple], list[Writes], tuple | None]]   # (None, buf): a Variable's buffer
  wake: Program | None   # the first program that runs on worker threads: woken before the launches

_plans: dict[tuple, _Plan] = {}

def _plan(ran: list[ExecItem], sched: Scheduled) -> _Plan | None:
  where = {id(b.buffer): (False, i) for i, b in enumerate(sched.inputs)}
  where.update({id(b.buffer): (True, j) for j, b in enumerate(sched.outputs)})
  where.update({id(b): (None, b) for b in var_buffers()})   # the same in every run
  if any(id(b) not in where for ei in ran for b in ei.bufs): return None
  wake = next((ei.kernel.program for ei in ran if ei.kernel is not None and ei.kernel.program.uses_workers), None)
  return _Plan(_kernel_cache, [(ei.kernel, [where[id(b)] for b in ei.bufs], ei.writes, ei.collective) for ei in ran], wake)

def realize_uops(targets: list[UOp], keep: Callable[[dict[UOp, UOp]], set[int]] | None = None) -> dict[UOp, UOp]:
  """Compute every target; returns the map from realized graph nodes to their buffer views (a MULTI of them for a
  value held on several devices).

  keep: given that map before anything runs, the ids of the Buffers the caller reads after the realize besides the
  targets' (what it hands to other live graphs); the memory of the other buffers the realize makes is given back after
  the last kernel that reads them (EARLY_FREE; one device only). Without keep every buffer lives until the end."""
  if not multi_seen[0]: return _realize_single(targets, keep=keep)
  memo = multi.lower(targets)
  lowered = [memo[t] for t in targets]
  if all(v is t for v, t in zip(lowered, targets)): return _realize_single(targets, keep=keep)   # nothing on several devices
  # each process computes the pieces on its own devices (the devices of other MPI ranks: device/world.py)
  flat = [s for v in lowered for s in (v.shards if isinstance(v, multi.Sharded) else (v,)) if is_local(s.device)]
  # (what the ranks must agree on: the graphs, less the copy that gathers a result onto each rank's own device)
  common = [t.src[0] if t.op is Ops.COPY and isinstance(t.src[0].device, tuple) else t for t in targets]
  becomes = _realize_single(flat, agree_on=lambda: _program_key(common))
  # what the logical nodes became: the targets (what they lowered to may be views already), and the nodes whose
  # per-device graphs this realize computed. The pieces other ranks hold: a buffer of their shape on their device,
  # never allocated here (every rank's tensors have the same structure)
  wanted = set(targets)
  def view_of(s: UOp) -> UOp:
    if is_local(s.device) or s.base.op is Ops.BUFFER: return becomes.get(s, s)
    if s.op is Ops.ASSIGN and s.src[0].base.op is Ops.BUFFER: return s.src[0]   # (its rank writes that memory in place)
    if s not in becomes: becomes[s] = new_buffer_for(s.device, s.shape, s.dtype)
    return becomes[s]
  for n, v in memo.items():
    parts = v.shards if isinstance(v, multi.Sharded) else (v,)
    if v is n or not (n in wanted or any(s in becomes for s in parts if is_local(s.device))): continue
    views = [view_of(s) for s in parts]
    if not all(x.base.op is Ops.BUFFER for x in views): continue
    becomes[n] = UOp(Ops.MULTI, n.dtype, tuple(views), v.axis) if isinstance(v, multi.Sharded) else views[0]
  return becomes

def _program_key(roots: list[UOp]) -> tuple:
  """What the MPI ranks must agree on before running the roots' graph: its structure, with each realized value (a view
  of memory) as a buffer of its shape. The views differ between ranks (a rank holds its own pieces as the views its
  kernels left, another rank's as plain buffers of their shape) while the program is the same."""
  sink = UOp(Ops.SINK, dtypes.bool, tuple(roots))
  def leaf(u: UOp) -> UOp: return UOp(Ops.RESHAPE, u.dtype, (UOp(Ops.BUFFER, u.dtype, (), (u.device, 0, 0)),), u.shape)
  views = {u: leaf(u) for u in sink.toposort() if (u.op is Ops.BUFFER or u.op in GroupOp.Movement) and u.base.op is Ops.BUFFER}
  return structure(substitute(sink, views))[0]

# buffers smaller than this are not freed early: they matter little to the peak, and giving them back and taking them
# again on every replay costs time (a decode step's vectors: the allocator pools only bigger ones) and cache warmth
FREE_MIN_BYTES = 1 << 16

def _freeable(sched: Scheduled, targets: list[UOp], keep: Callable[[dict[UOp, UOp]], set[int]] | None) -> Callable[[Buffer], bool]:
  """Which buffers a realize may release early: the ones its schedule makes (outputs) of at least FREE_MIN_BYTES that
  are no target's, not kept by the caller and not viewed by a tensor. (keep, a walk of the live graphs, is asked only
  when there is such a buffer.)"""
  big = {id(o.buffer) for o in sched.outputs if o.buffer.nbytes >= FREE_MIN_BYTES}
  if keep is None or not EARLY_FREE or not big: return lambda b: False
  held = keep(sched.becomes)
  for t in targets:
    if (v := sched.becomes.get(t)) is not None and v.base.op is Ops.BUFFER: held.add(id(v.base.buffer))
  made = big - held
  return lambda b: id(b) in made and not b.views

def _realize_single(targets: list[UOp], agree_on: Callable[[], tuple] | None = None,
                    keep: Callable[[dict[UOp, UOp]], set[int]] | None = None) -> dict[UOp, UOp]:
  """Realize graphs of single-device nodes. agree_on: gives the structure of the (multi-device) graph they were lowered
  from (only computed when the schedule holds collectives between MPI ranks: the ranks first check that they all run
  the same graph). keep: as realize_uops's."""
  st, k0, l0, c0 = time.perf_counter(), GlobalCounters.kernel_count, GlobalCounters.launch_count, GlobalCounters.compile_count
  sched = schedule_cached(targets)
  if sched.binds: write_vars(sched.binds)
  if agree_on is not None and (colls := [(it.arg, it.out.shape, it.out.dtype.name) for it in sched.template.items if it.kind == "collective"]):
    mpi.agree(agree_on(), colls, colls[0][0][1][-1])   # (the ranks: the last of a collective's arguments)
  ins = [b.buffer for b in sched.inputs]
  first: dict[int, int] = {}
  # the plan depends on which inputs share memory (launch groups merge loop nests by memory) and on the flags
  key = (sched.key, tuple(first.setdefault(id(b), i) for i, b in enumerate(ins)), *_code_flags())
  freeable = _freeable(sched, targets, keep)
  if (plan := _plans.get(key)) is not None and plan.kernels is _kernel_cache:
    if plan.wake is not None: plan.wake.wake()   # its workers wake while the launches are prepared
    outs = [b.buffer for b in sched.outputs]
    bufs = [[i if out is None else outs[i] if out else ins[i] for out, i in slots] for _, slots, _, _ in plan.launches]
    never = {id(b) for (_, _, _, coll), bs in zip(plan.launches, bufs) if coll is not None for b in bs}
    for (kernel, _, writes, coll), bs, frees in zip(plan.launches, bufs, last_uses(bufs, freeable, never)):
      _launch(ExecItem(kernel, bs, writes, coll, frees))
    n = len(plan.launches)
  else:
    items = sched.items()
    ran = run_schedule(items, freeable)
    if (p := _plan(ran, sched)) is not None:
      if len(_plans) >= 4096: _plans.clear()
      _plans[key] = p
    n = len(items)
  finish_launches()
  if DEBUG.value >= 1 and n:
    print(f"realize: {len(sched.template.items)} items, {GlobalCounters.kernel_count - k0} kernels in {GlobalCounters.launch_count - l0} launches, "
          f"{GlobalCounters.compile_count - c0} compiled, {(time.perf_counter() - st)*1e3:.2f} ms")
  return sched.becomes
