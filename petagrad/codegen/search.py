"""BEAM search: time candidate optimizations of a kernel on the real device, keep the best `width`,
extend them, until nothing improves. The winner is cached on disk per kernel and device.

`BEAM=2 python train.py` searches every new kernel once; later runs read the cache. Candidates are timed, and the
winner returned, with long float sums blocked (Kernel.block_sums): the search never trades that accuracy for speed.
"""
from __future__ import annotations
import json, time
from typing import Any, Callable
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.uop.graph import substitute
from petagrad.uop.symbolic import simplify
from petagrad.codegen.opt import Kernel, Opt, OptOps, OptError
from petagrad.codegen.heuristic import block_sums, int8_dot_over
from petagrad.codegen.tensor_core import match_for
from petagrad.device import Device, Buffer
from petagrad.dtype import DType
from petagrad.helpers import DEBUG, cache_dir, content_hash, cpu_threads, read_cached, write_cached

MAX_UNROLLED = 64     # copies of the loop body an unroll/upcast combination may create
MAX_DEPTH = 5

def actions(k: Kernel, target: Any) -> list[Opt]:
  """The optimizations to try next on k for target (the device's Renderer: what it allows)."""
  supports_vector, dot4_lanes = target.supports_vector, target.dot4_lanes
  out: list[Opt] = []
  # tensor cores (a half matmul not optimized yet): 1, 2 or 4 warps to a block, then the other actions on top
  if not k.applied and match_for(k.ast, target.tensor_cores) is not None:
    out += [Opt(OptOps.TC, 0, w) for w in (1, 2, 4)]
  for i, r in enumerate(k.ranges):
    kind, size = r.arg[2], r.arg[1]
    if kind == "global":
      out += [Opt(OptOps.UPCAST, i, a) for a in (2, 4, 8) if size % a == 0 and size > a]
      out += [Opt(OptOps.TILE, i, a) for a in (8, 32) if size % a == 0 and size > a]
      if supports_vector: out += [Opt(OptOps.VECTOR, i, a) for a in (8, 16) if size % a == 0]
      if k.max_local: out += [Opt(OptOps.LOCAL, i, a) for a in (2, 4, 8, 16, 32, 64, 128, 256) if size % a == 0 and a <= k.max_local]
      out += [Opt(OptOps.UNROLL, i, a) for a in (2, 4) if size % a == 0 and size > a]
      if k.max_local: out += [Opt(OptOps.GROUP, i, a) for a in (16, 32, 64, 128, 256) if size % a == 0 and a <= k.max_local]
      # (a sum of int8 products: as many int8 lanes as the renderer's DOT4 vectors hold, 4 products per int32 lane)
      wide = tuple(w for w in dot4_lanes if w > 16) if dot4_lanes and int8_dot_over(k, r) else ()
      if supports_vector: out += [Opt(OptOps.VECTOR, i, a) for a in (8, 16, *wide) if size % a == 0]
  g = [i for i, r in enumerate(k.ranges) if r.arg[2] == "global"]
  out += [Opt(OptOps.SWAP, a, b) for a, b in zip(g, g[1:])]   # loop order: adjacent output loops exchanged
  if target.supports_threads and cpu_threads() > 1: out.append(Opt(OptOps.THREAD, 0))
  return out

def _clone(k: Kernel) -> Kernel:
  c = Kernel(k.ast, list(k.applied), max_local=k.max_local)
  c.next_id = k.next_id
  return c

def _finished(k: Kernel, supports_vector: bool) -> Kernel:
  """A copy of k as it will run: long float sums blocked (the search never chooses that, and never undoes it)."""
  return block_sums(_clone(k), supports_vector)

def _buffers(k: Kernel, params: list[DType], device: str) -> list[Buffer]:
  """Scratch buffers big enough for every index the kernel touches (kept alive while timing: a freed
  buffer's memory goes back to the allocator's pool)."""
  # The buffers hold zeros, so an index computed from loaded data (a gather's, a Variable's) is computed from zeros:
  # its bound is taken with those loads as 0 (their own bounds are the dtype's, far beyond any buffer).
  sizes = [1] * len(params)
  for u in k.ast.toposort():
    if u.op in (Ops.LOAD, Ops.STORE):
      idx = u.src[1]
      if any(x.op is Ops.LOAD for x in idx.toposort()):
        idx = simplify(substitute(idx, {x: UOp.const(x.dtype, 0) for x in idx.toposort() if x.op is Ops.LOAD}))
      sizes[u.src[0].arg] = max(sizes[u.src[0].arg], int(idx.vmax) + 1)
  bufs = [Buffer(device, s, dt).ensure_allocated() for s, dt in zip(sizes, params)]
  for b in bufs: b.copyin(memoryview(bytes(b.nbytes)))
  return bufs

def _time(ck, raw: list, runs: int = 3) -> float:
  sync = Device[ck.device].synchronize   # a device that queues launches returns before its kernel is done
  ck.program(*raw)
  sync()
  best = float("inf")
  for _ in range(runs):
    st = time.perf_counter()
    ck.program(*raw)
    sync()
    best = min(best, time.perf_counter() - st)
  return best

def beam_search(device: str, k: Kernel, params: list[DType], width: int, compile_kernels: Callable[[str, list], list]) -> Kernel:
  """The best optimizations of k found by timing candidates on the device. compile_kernels(device, [(kernel, name, params)])
  builds candidates side by side (the engine passes its compiler in: codegen never imports the engine above it);
  each result is a compiled kernel (ck.program(*raw buffers) runs it) or the exception that building it raised."""
  dev = Device[device]
  key = content_hash("beam", device, k.ast.key, str(width), str(cpu_threads()), type(dev.compiler).__name__, dev.compiler.cache_key)
  path = cache_dir() / "beam" / f"{key}.json"
  base = _clone(k)
  base.normalize_ranges()
  vec = dev.renderer.supports_vector
  if (stored := read_cached(path)) is not None:
    for o in json.loads(stored): base.apply(Opt(OptOps[o[0]], o[1], o[2]))
    return block_sums(base, vec)
  bufs = _buffers(base, params, device)
  raw = [b.raw for b in bufs]
  def measure(cand: Kernel, ck) -> float:
    try:
      if isinstance(ck, Exception): raise ck
      return _time(ck, raw)
    except Exception as e:   # a candidate that does not compile (or run) is not a winner
      if DEBUG >= 3: print(f"beam: candidate {cand.applied} failed: {e}")
      return float("inf")
  beam = [(measure(base, compile_kernels(device, [(_finished(base, vec), "beam_candidate", params)])[0]), base)]
  best_t, best = beam[0]
  seen = {tuple(base.applied)}
  for _ in range(MAX_DEPTH):
    cands: list[Kernel] = []
    for _, kk in beam:
      for a in actions(kk, dev.renderer):
        c = _clone(kk)
        try: c.apply(a)
        except OptError: continue
        if c.unrolled_size() > MAX_UNROLLED or tuple(c.applied) in seen: continue
        seen.add(tuple(c.applied))
        cands.append(c)
    if not cands: break
    # compile side by side (the compiler runs in subprocesses), then time one at a time
    built = compile_kernels(device, [(_finished(c, vec), "beam_candidate", params) for c in cands])
    timed = sorted(((measure(c, ck), c) for c, ck in zip(cands, built)), key=lambda x: x[0])[:width]
    if not timed or timed[0][0] >= best_t: break
    beam = timed
    best_t, best = timed[0]
    if DEBUG >= 2: print(f"beam: {best_t*1e6:9.2f} us with {best.applied}")
  write_cached(path, json.dumps([(o.op.name, o.axis, o.amount) for o in best.applied]).encode())
  return block_sums(best, vec)
