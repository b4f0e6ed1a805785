"""Realize: schedule -> lower -> optimize -> linearize -> render -> compile (cached) -> run, with stats
and DEBUG output.

Caches: scheduling and lowering are keyed by the graph's structure with its buffers abstracted away (a
repeated graph with new buffers skips both); compiled kernels are keyed by the AST (memory) and by the source
(disk, in the device's compiler). The kernels of one schedule that are not compiled yet are compiled in
parallel before the first one runs.
"""
from __future__ import annotations
import os, time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp, pretty
from petagrad.device import Device, Program, Buffer
from petagrad.dtype import DType
from petagrad.helpers import DEBUG, NOOPT, BEAM, GlobalCounters, cpu_threads
from petagrad.schedule.schedule import ScheduleItem, create_schedule_cached, structure, substitute
from petagrad.codegen.lower import lower
from petagrad.codegen.linearize import linearize
from petagrad.codegen.opt import Kernel
from petagrad.codegen.heuristic import hand_coded_optimizations
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

_kernel_cache: dict[tuple, CompiledKernel] = {}

def kernel_name(ast: UOp, out_shape: tuple[int, ...]) -> str:
  reduces = [r for r in ast.toposort() if r.op is Ops.REDUCE]
  shape = "_".join(str(s) for s in out_shape) or "1"
  if not reduces: return f"E_{shape}"
  rsize = "_".join(str(rr.arg[1]) for r in reduces[-1:] for rr in r.src[1:])
  return f"r_{shape}_{rsize}"

def compile_kernels(device: str, todo: list[tuple[Kernel, str, list[DType]]]) -> list[CompiledKernel | Exception]:
  """Expand, linearize and render each (optimized) kernel here, one after the other, then run the compiler on
  the sources side by side (it runs in subprocesses; all Python work stays in this thread) and load them.
  A kernel that fails to compile gives its exception in its place."""
  dev = Device[device]
  progs, srcs = [], []
  for k, name, params in todo:
    try:
      prog = linearize(vectorize(expand_unrolled(decompose(k.ast, dev.renderer.decompose_ops))))
      src = dev.renderer.render(name, prog, params)
    except Exception as e: prog, src = None, e
    if DEBUG >= 5: print(f"--- kernel AST {name}\n{pretty(k.ast)}")
    if DEBUG >= 6 and prog is not None: print(f"--- linear program {name}\n{pretty(UOp(Ops.SINK, params[0], tuple(prog.uops)))}")
    if DEBUG >= 4: print(f"--- source {name}\n{src}")
    progs.append(prog); srcs.append(src)
  def build(i: int) -> bytes | Exception:
    if isinstance(srcs[i], Exception): return srcs[i]
    try: return dev.compiler.compile_cached(srcs[i], todo[i][1])
    except Exception as e: return e
  if len(todo) > 1:
    with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool: libs = list(pool.map(build, range(len(todo))))
  else: libs = [build(0)] if todo else []
  return [lib if isinstance(lib, Exception) else CompiledKernel(name, device, list(k.applied), dev.program(name, lib), src, prog.flops, params)
          for (k, name, params), prog, src, lib in zip(todo, progs, srcs, libs)]

def compile_kernel(device: str, k: Kernel, name: str, params: list[DType]) -> CompiledKernel:
  """Expand, linearize, render and compile one (optimized) kernel."""
  ck = compile_kernels(device, [(k, name, params)])[0]
  if isinstance(ck, Exception): raise ck
  return ck

def _kernel_key(device: str, ast: UOp) -> tuple: return (device, ast, int(NOOPT), int(BEAM), cpu_threads())   # these flags change the kernel

def _optimize(device: str, ast: UOp, params: list[DType]) -> Kernel:
  dev = Device[device]
  if BEAM >= 1 and not NOOPT:
    from petagrad.codegen.search import beam_search
    return beam_search(device, Kernel(ast), params, int(BEAM))
  return hand_coded_optimizations(Kernel(ast), dev.renderer.supports_vector, dev.renderer.supports_threads)

def get_kernel(device: str, ast: UOp, params: list[DType], out_shape: tuple[int, ...]) -> CompiledKernel:
  key = _kernel_key(device, ast)
  if (ck := _kernel_cache.get(key)) is None:
    ck = _kernel_cache[key] = compile_kernel(device, _optimize(device, ast, params), kernel_name(ast, out_shape), params)
  return ck

def compile_ahead(wanted: list[tuple[str, UOp, list[DType], tuple[int, ...]]]) -> None:
  """Compile the kernels of a schedule that are not in the cache yet, side by side, before the first runs.
  With BEAM each kernel is searched (and timed on the device) on its own, when it is first needed."""
  todo: dict[tuple, tuple] = {}
  for device, ast, params, shape in wanted:
    if (key := _kernel_key(device, ast)) not in _kernel_cache and key not in todo: todo[key] = (device, ast, params, shape)
  if len(todo) < 2 or BEAM: return
  by_device: dict[str, list[tuple]] = {}
  for key, (device, ast, params, shape) in todo.items(): by_device.setdefault(device, []).append((key, ast, params, shape))
  for device, group in by_device.items():
    built = compile_kernels(device, [(_optimize(device, ast, params), kernel_name(ast, shape), params) for _, ast, params, shape in group])
    for (key, *_), ck in zip(group, built):
      if isinstance(ck, Exception): raise ck
      _kernel_cache[key] = ck

# ---------------------------------------------------------------- lowering cache

_lower_cache: dict[tuple, tuple[UOp, list[int]]] = {}

def lower_cached(out: UOp, value: UOp, known: tuple[tuple, list[UOp]] | None = None) -> tuple[UOp, list[UOp]]:
  """lower(), keyed by the kernel's structure: buffers become numbered slots. `known`: the structure's key and
  buffers when the scheduler already has them."""
  key, bufs = known if known is not None else structure(UOp(Ops.SINK, out.dtype, (out, value)))[::2]
  if (hit := _lower_cache.get(key)) is None:
    placeholders = {b: UOp(Ops.BUFFER, b.dtype, (), (b.arg[0], b.arg[1], -1 - i)) for i, b in enumerate(bufs)}
    norm = substitute(UOp(Ops.SINK, out.dtype, (out, value)), placeholders)
    ast, params = lower(norm.src[0], norm.src[1])
    hit = _lower_cache[key] = (ast, [-1 - p.arg[2] for p in params])
  ast, order = hit
  return ast, [bufs[i] for i in order]

# ---------------------------------------------------------------- running

@dataclass
class ExecItem:
  """One launch: a compiled kernel (or a copy when kernel is None) and its buffers, output first."""
  kernel: CompiledKernel | None
  bufs: list[Buffer]
  writes_in_place: bool = False   # an ASSIGN: the write hooks hear about it
  def run(self) -> float:
    if self.kernel is None:
      out, src = self.bufs
      out.ensure_allocated().copyin(memoryview(src.as_bytes()))
      GlobalCounters.global_mem += out.nbytes
      if DEBUG >= 2: print(f"*** {out.device:7s} copy {out.nbytes:>10d} bytes from {src.device}")
      return 0.0
    k = self.kernel
    raw = [b.ensure_allocated().raw for b in self.bufs]
    st = time.perf_counter()
    k.program(*raw)
    et = time.perf_counter() - st
    if self.writes_in_place:
      for hook in write_hooks: hook(self.bufs[0])
    mem = sum(b.nbytes for b in self.bufs)
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += k.flops
    GlobalCounters.global_mem += mem
    GlobalCounters.time_sum_s += et
    if DEBUG >= 2:
      print(f"*** {k.device:7s} {GlobalCounters.kernel_count:4d} {k.name:30s} bufs {len(self.bufs):2d}  tm {et*1e6:9.2f}us  "
            f"{k.flops/max(et,1e-9)/1e9:8.2f} GFLOP/s {mem/max(et,1e-9)/1e9:8.2f} GB/s")
    if DEBUG >= 3: print(f"    opts: {k.opts or 'none'}")
    return et

# a JIT capturing a function's launches registers a callback here
capture_hooks: list[Callable[[ExecItem], None]] = []
# called with each buffer an in-place write (ASSIGN) changed, in eager runs and in JIT replays
write_hooks: list[Callable[[Buffer], None]] = []

def _lower_item(si: ScheduleItem) -> tuple[UOp, list[UOp]]:
  ast, bufs = lower_cached(si.out, si.value, si.structure)
  device = si.out.base.buffer.device
  for b in bufs:
    if b.arg[0] != device:
      raise RuntimeError(f"a kernel on {device} reads a buffer on {b.arg[0]}; move tensors with .to({device!r}) first")
  return ast, bufs

def to_exec_item(si: ScheduleItem, lowered: tuple[UOp, list[UOp]] | None = None) -> ExecItem | None:
  out_buf = si.out.base.buffer
  if si.kind == "copy": return ExecItem(None, [out_buf, si.value.base.buffer])
  if si.out.size == 0: return None   # nothing to compute
  ast, bufs = lowered or _lower_item(si)
  return ExecItem(get_kernel(out_buf.device, ast, [b.dtype for b in bufs], si.out.shape), [b.buffer for b in bufs], si.kind == "assign")

def run_schedule(items: list[ScheduleItem]) -> None:
  lowered = [_lower_item(si) if si.kind != "copy" and si.out.size else None for si in items]
  compile_ahead([(si.out.base.buffer.device, lw[0], [b.dtype for b in lw[1]], si.out.shape) for si, lw in zip(items, lowered) if lw is not None])
  for si, lw in zip(items, lowered):
    if (ei := to_exec_item(si, lw)) is None: continue
    for hook in capture_hooks: hook(ei)
    ei.run()

def realize_uops(targets: list[UOp]) -> dict[UOp, UOp]:
  """Compute every target; returns the map from realized graph nodes to their buffer views."""
  st, k0, c0 = time.perf_counter(), GlobalCounters.kernel_count, GlobalCounters.compile_count
  items, becomes = create_schedule_cached(targets)
  run_schedule(items)
  if DEBUG >= 1 and items:
    print(f"realize: {len(items)} items, {GlobalCounters.kernel_count - k0} kernels, "
          f"{GlobalCounters.compile_count - c0} compiled, {(time.perf_counter() - st)*1e3:.2f} ms")
  return becomes

