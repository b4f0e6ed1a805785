"""Realize: schedule -> lower -> linearize -> render -> compile (cached) -> run, with stats and DEBUG output."""
from __future__ import annotations
import time
from dataclasses import dataclass
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp, pretty
from petagrad.device import Device, Program, CompileError
from petagrad.dtype import DType
from petagrad.helpers import DEBUG, NOOPT, GlobalCounters, prod
from petagrad.schedule.schedule import ScheduleItem, create_schedule
from petagrad.codegen.lower import lower
from petagrad.codegen.linearize import linearize
from petagrad.codegen.opt import Kernel
from petagrad.codegen.heuristic import hand_coded_optimizations
from petagrad.codegen.expand import expand_unrolled, vectorize

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

def get_kernel(device: str, ast: UOp, params: list[DType], out_shape: tuple[int, ...]) -> CompiledKernel:
  key = (device, ast, int(NOOPT))   # the optimization flags change the kernel
  if (k := _kernel_cache.get(key)) is not None: return k
  dev = Device[device]
  k = hand_coded_optimizations(Kernel(ast), dev.renderer.supports_vector, dev.renderer.supports_threads)
  prog = linearize(vectorize(expand_unrolled(k.ast)))
  name = kernel_name(ast, out_shape)
  src = dev.renderer.render(name, prog, params)
  if DEBUG >= 5: print(f"--- kernel AST {name}\n{pretty(ast)}")
  if DEBUG >= 6: print(f"--- linear program {name}\n{pretty(UOp(Ops.SINK, params[0], tuple(prog.uops)))}")
  if DEBUG >= 4: print(f"--- source {name}\n{src}")
  lib = dev.compiler.compile_cached(src, name)
  ck = _kernel_cache[key] = CompiledKernel(name, device, k.applied, dev.program(name, lib), src, prog.flops, params)
  return ck

def run_schedule(items: list[ScheduleItem]) -> None:
  for si in items:
    out_buf = si.out.base.buffer
    if si.kind == "copy":
      src_buf = si.value.base.buffer
      out_buf.ensure_allocated().copyin(memoryview(src_buf.as_bytes()))
      GlobalCounters.global_mem += out_buf.nbytes
      if DEBUG >= 2: print(f"*** {out_buf.device:7s} copy {out_buf.nbytes:>10d} bytes from {src_buf.device}")
      continue
    if si.out.size == 0: continue   # nothing to compute
    ast, bufs = lower(si.out, si.value)
    device = out_buf.device
    for b in bufs:
      if b.arg[0] != device:
        raise RuntimeError(f"a kernel on {device} reads a buffer on {b.arg[0]}; move tensors with .to({device!r}) first")
    k = get_kernel(device, ast, [b.dtype for b in bufs], si.out.shape)
    raw = [b.buffer.ensure_allocated().raw for b in bufs]
    st = time.perf_counter()
    k.program(*raw)
    et = time.perf_counter() - st
    mem = sum(b.buffer.nbytes for b in bufs)
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += k.flops
    GlobalCounters.global_mem += mem
    GlobalCounters.time_sum_s += et
    if DEBUG >= 2:
      print(f"*** {device:7s} {GlobalCounters.kernel_count:4d} {k.name:30s} bufs {len(bufs):2d}  tm {et*1e6:9.2f}us  "
            f"{k.flops/max(et,1e-9)/1e9:8.2f} GFLOP/s {mem/max(et,1e-9)/1e9:8.2f} GB/s")
    if DEBUG >= 3: print(f"    opts: {k.opts or 'none'}")

def realize_uops(targets: list[UOp]) -> dict[UOp, UOp]:
  """Compute every target; returns the map from realized graph nodes to their buffer views."""
  st, k0, c0 = time.perf_counter(), GlobalCounters.kernel_count, GlobalCounters.compile_count
  items, becomes = create_schedule(targets)
  run_schedule(items)
  if DEBUG >= 1 and items:
    print(f"realize: {len(items)} items, {GlobalCounters.kernel_count - k0} kernels, "
          f"{GlobalCounters.compile_count - c0} compiled, {(time.perf_counter() - st)*1e3:.2f} ms")
  return becomes

__all__ = ["realize_uops", "run_schedule", "get_kernel", "CompileError", "prod"]
