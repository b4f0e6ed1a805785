"""Hand-coded optimizations: good kernels by default, without search.

* merge adjacent output (and reduce) ranges when the index math stays as simple;
* reduce kernels: compute the output range that is contiguous in memory as SIMD lanes and unroll
  another output range (register tiling, as in a matmul micro-kernel), or, when the reduction itself runs
  over contiguous memory, take the lanes from the reduce range (partial sums combined at the end);
* spread the outermost output loop over the CPU threads when the kernel is big enough;
* GPU-style devices (work-groups): a long reduction to few outputs is shared by the threads of a work-group (GROUP),
  and neighbouring output elements go to the threads of one work-group (LOCAL);
* last (with NOOPT too): long float sums become nested blocks of partial sums (Kernel.block_sums).
"""
from __future__ import annotations
from typing import Any
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.codegen.opt import Kernel, Opt, OptOps, OptError, loads_stride, store_stride, int8_product
from petagrad.codegen.tensor_core import match_for
from petagrad.helpers import prod, NOOPT, cpu_threads

MIN_THREAD_WORK = 1 << 15   # loop iterations below which threads cost more than they give

def lanes_for(itemsize: int, vector_bytes: int = 64) -> int:
  """Lanes of one SIMD register (16 float32 in a 512-bit one, 8 in AVX2's 256 bits), at most 16."""
  return max(1, min(16, vector_bytes // itemsize))

def _lanes_dividing(n: int, size: int) -> int | None:
  """The widest of a full register's n lanes, half or a quarter of them (at least 4) that divides a range of size."""
  return next((w for w in (n, n // 2, n // 4) if w >= 4 and size % w == 0), None)

def hand_coded_optimizations(k: Kernel, target: Any) -> Kernel:
  """k optimized for target, the device's Renderer (what it allows: supports_vector, supports_threads, vector_bytes,
  dot4_lanes, vector_memory, tensor_cores; the work-group size is k.max_local)."""
  supports_vector, supports_threads, vector_bytes = target.supports_vector, target.supports_threads, target.vector_bytes
  k.normalize_ranges()
  if NOOPT: return block_sums(k, supports_vector)   # accuracy, not speed: with NOOPT too
  rs = k.ranges
  out = [r for r in rs if r.arg[2] == "global"]
  red = [r for r in rs if r.arg[2] == "reduce"]
  store_dtype = k.ast.src[0].src[2].dtype
  n = lanes_for(store_dtype.itemsize, vector_bytes)
  # (a reduce loop of symbolic length stays as it is, but it still makes the loads it streams: attention's weights @ V
  # over the cached positions takes its lanes from the head dim)
  sym_red = k.symbolic_ranges("reduce")
  if supports_vector and (red or sym_red):
    # register tiles sized to the register file: 32 vector registers with AVX-512, 16 with AVX2
    _tile_reduce(k, out, red + sym_red, n, tile_rows=8 if vector_bytes >= 64 else 4, dot4_lanes=target.dot4_lanes)
  if not red and not sym_red:
    if _unroll_stacked(k, out):
      if supports_vector: _vector_store(k, n)
    elif supports_vector: _tile_transpose(k, out)
  # tiny reduce loops (a 3x3 window) cost more in loop control than in work: unroll them
  if not NOOPT:
    for r in [r for r in k.ranges if r.arg[2] == "reduce" and 1 < r.arg[1] <= 4]:
      if k.unrolled_size() * r.arg[1] <= (72 if _gates_on(k, r) else 32): _try(k, Opt(OptOps.UNROLL, _axis(k, r), r.arg[1]))
  rs = k.ranges
  work = prod(r.arg[1] for r in k.ast.toposort() if r.op is Ops.RANGE)   # (loops of symbolic length at their largest)
  g = [r for r in rs if r.arg[2] == "global"]
  sym_out = k.symbolic_ranges("global")
  if supports_threads and not red and not sym_red and g and sym_out and g[0].arg[0] > sym_out[0].arg[0]:
    # an elementwise kernel whose (contiguous) int range lies inside a loop of symbolic length: the threads take an outer
    # part of it, so the inner part stays the innermost loop (threading all of it would leave the symbolic loop
    # innermost, strided: SwiGLU over (prompt_len, 2048) 0.86 ms)
    parts = next((p for p in (8, 4, 2) if g[0].arg[1] % p == 0 and g[0].arg[1] // p >= 16), None)
    if parts and _try(k, Opt(OptOps.TILE, _axis(k, g[0]), g[0].arg[1] // parts)): g = [r for r in k.ranges if r.arg[2] == "global"]
  if supports_threads and cpu_threads() > 1 and g and g[0].arg[1] >= 2 and work >= MIN_THREAD_WORK:
    k.apply(Opt(OptOps.THREAD, 0))
  if k.max_local and not _tensor_cores(k, target.tensor_cores): _work_groups(k, target.vector_memory)
  return block_sums(k, supports_vector)   # last: the loops left after unrolling and vectorizing are the ones that accumulate

def block_sums(k: Kernel, supports_vector: bool) -> Kernel:
  """Long float sums as nested blocks (Kernel.block_sums), the last step of every optimization path. A renderer with
  vectors is a C compiler's: it vectorizes a scalar sum over contiguous memory itself (`#pragma omp simd`), in up to
  one 512-bit register."""
  k.block_sums(64 if supports_vector else 0)
  return k

LOCAL_TARGET = 256   # threads per work-group the heuristic aims for (a multiple of every GPU's warp/wavefront)
GROUP_OUTPUTS = 4096 # a reduction with fewer outputs than this leaves most of a GPU idle with one thread per output...
GROUP_MIN = 256      # ...so when it is at least this long, a work-group shares each output's reduction

def _largest_divisor(n: int, most: int) -> int: return max(d for d in range(1, min(most, n) + 1) if n % d == 0)

GPU_TILE = 4        # register tile of a reduction with reuse (a matmul): 4 x 4 outputs per thread
VECTOR_OUTPUTS = 1 << 16   # an elementwise kernel this big gives each thread a vector of neighbouring outputs

def _work_groups(k: Kernel, vector_memory: int = 0) -> None:
  """A long reduction to few outputs: the threads of a work-group each sum a share of the longest reduce range and
  combine their sums (GROUP). A reduction to many outputs whose loads are reused along two output ranges (a matmul,
  a convolution): each thread computes a 4 x 4 tile of outputs, so every load feeds 4 accumulators (a 512 x 512 matmul
  on PoCL: 44 -> 11 ms). Then the threads of a work-group take neighbouring output elements: the innermost output
  ranges first (the ones contiguous in memory, so a group's loads and stores are coalesced), each split by its largest
  divisor that fits."""
  budget, picks = min(k.max_local, LOCAL_TARGET), []
  red = [r for r in k.ranges if r.arg[2] == "reduce"]
  outputs = prod(r.arg[1] for r in k.ranges if r.arg[2] == "global")
  if red and outputs < GROUP_OUTPUTS and prod(r.arg[1] for r in red) >= GROUP_MIN:
    r = max(red, key=lambda x: x.arg[1])
    if (d := _largest_divisor(r.arg[1], budget)) > 1 and _try(k, Opt(OptOps.GROUP, _axis(k, r), d)): budget //= d
  elif red and outputs >= GROUP_OUTPUTS * GPU_TILE * GPU_TILE:
    reused = [r for r in k.ranges if r.arg[2] == "global" and r.arg[1] % GPU_TILE == 0 and 0 in loads_stride(k.ast, r)[:-1]]
    for rid in [r.arg[0] for r in reused[-2:]]:
      _try(k, Opt(OptOps.UPCAST, _axis_of_id(k, rid), GPU_TILE))
  elif not red and vector_memory and outputs >= VECTOR_OUTPUTS and k.unrolled_size() == 1:
    # elementwise: each thread takes the n neighbouring elements of a 16-byte vector along the range its stores run along
    # (stride 1), so its contiguous loads and its store are one vector access each (codegen/vector_memory.py)
    g, store = [r for r in k.ranges if r.arg[2] == "global"], k.ast.src[0].src[2].dtype
    n = min(4, vector_memory // store.itemsize)
    if g and n >= 2 and g[-1].arg[1] % n == 0 and store_stride(k.ast, g[-1]) == 1: _try(k, Opt(OptOps.UPCAST, _axis(k, g[-1]), n))
  for r in reversed([r for r in k.ranges if r.arg[2] == "global"]):
    d = _largest_divisor(r.arg[1], budget)
    if d > 1: picks.append((r.arg[0], d)); budget //= d
    if budget < 2: break
  # applied outermost first: the innermost output range's threads are made last, so they are the fastest varying
  for rid, d in reversed(picks): _try(k, Opt(OptOps.LOCAL, _axis_of_id(k, rid), d))

def _tensor_cores(k: Kernel, tensor_cores: tuple) -> bool:
  """A half matmul on tensor cores (OptOps.TC): 4 warps to a block where the tiles split so, then each warp computes
  2 x 4 tiles of 16 x 8 (32 x 32 outputs), so each A fragment feeds 4 products and each B fragment 2. Returns whether
  it applied."""
  if (found := match_for(k.ast, tensor_cores)) is None: return False
  m, n = found[3].arg[0], found[4].arg[0]
  if not any(_try(k, Opt(OptOps.TC, 0, w)) for w in (4, 2, 1)): return False
  for rid, amount in ((n, 4), (m, 2)):   # (a single tile's range is gone)
    r = next((x for x in k.ranges if x.arg[0] == rid and x.arg[2] == "global"), None)
    if r is not None and r.arg[1] % amount == 0: _try(k, Opt(OptOps.UPCAST, _axis(k, r), amount))
  return True

STACKED_MAX = 64   # the most pieces of a cat/stack an elementwise kernel computes side by side

def _unroll_stacked(k: Kernel, out: list) -> bool:
  """An elementwise kernel that joins pieces (Tensor.cat and stack: each piece padded into place and selected where
  it lies; a Winograd transform's 36) evaluates, per element, every piece behind its mask. Unrolled along the joined
  ranges (the ones a mask compares with a constant), each step's masks are constants: one piece per output, and the
  loads the pieces share are read once (the input transform of a 4x4-tile Winograd convolution: 1 s -> 45 us).
  Returns whether it unrolled."""
  cmps = {x for u in k.ast.toposort() if u.op is Ops.LOAD and len(u.src) > 2 for x in u.src[2].toposort() if x.op is Ops.CMPLT}
  def joined(r: UOp) -> bool:
    # the places where a mask compares r with a constant cut it into pieces of one or two elements (a padded copy's
    # two cuts leave a long interior: its loop runs in pieces instead: linearize.py, _peel_points); a range no mask cuts
    # joins nothing (unrolled, a batch of 2 only copies the code and takes the budget from the pieces' ranges)
    cuts = {x.src[1].arg if x.src[0] is r else x.src[0].arg + 1 for x in cmps if r in x.src and all(y is r or y.op is Ops.CONST for y in x.src)}
    inner = {c for c in cuts if 0 < c < r.arg[1]}
    return bool(inner) and 2 * (len(inner) + 1) >= r.arg[1]
  done = False
  for rid in [r.arg[0] for r in sorted(out, key=lambda r: r.arg[1]) if 1 < r.arg[1] <= STACKED_MAX and joined(r)]:
    r = next(x for x in k.ranges if x.arg[0] == rid)
    if k.unrolled_size() * r.arg[1] <= STACKED_MAX and _try(k, Opt(OptOps.UPCAST, _axis(k, r), r.arg[1])): done = True
  return done

def _vector_store(k: Kernel, n: int) -> None:
  """Lanes along the innermost output range when the stores run along it: the C compiler's own vectorizer leaves a
  loop of masked loads scalar (the Winograd input transform: 84 -> 50 us)."""
  g = [x for x in k.ranges if x.arg[2] == "global"]
  if not g or store_stride(k.ast, g[-1]) != 1: return
  if (w := _lanes_dividing(n, g[-1].arg[1])): _try(k, Opt(OptOps.VECTOR, _axis(k, g[-1]), w))

TRANSPOSE_TILE = 8   # a transposing copy moves 8 x 8 blocks

def _tile_transpose(k: Kernel, out: list) -> None:
  """A copy that transposes (a weight's row-major copy for a matmul, heads moved in attention): the store runs along the
  innermost output range s, some load along another output range r and across rows along s. Element by element, the
  loads walk down a column: a new cache line each, whose lines share few cache sets when rows are a power of two apart
  (a 128 x 512 float transpose at 3 GB/s, 1024 x 1024 at 2 GB/s). In 8 x 8 blocks (s as vector lanes, r unrolled, the
  block's loop along r innermost) every cache line read is used whole while it is in L1: 8-20 GB/s."""
  t = TRANSPOSE_TILE
  if len(out) < 2 or out[-1].arg[1] % t: return
  s = out[-1]
  along_s = loads_stride(k.ast, s)
  if along_s[-1] != 1: return
  for r in reversed(out[:-1]):
    along_r = loads_stride(k.ast, r)
    if r.arg[1] % t == 0 and any(a == 1 and b is not None and b >= t for a, b in zip(along_r[:-1], along_s[:-1])): break
  else: return
  rid, sid = r.arg[0], s.arg[0]
  if not _try(k, Opt(OptOps.UPCAST, _axis(k, r), t)) or not _try(k, Opt(OptOps.VECTOR, _axis_of_id(k, sid), t)): return
  g = [x for x in k.ranges if x.arg[2] == "global"]
  if g and g[-1].arg[0] != rid and any(x.arg[0] == rid for x in g):   # (r's outer part innermost: the reads stream along rows)
    _try(k, Opt(OptOps.SWAP, _axis_of_id(k, rid), _axis(k, g[-1])))

def _axis(k: Kernel, r) -> int: return k.ranges.index(r)
def _axis_of_id(k: Kernel, rid: int) -> int:
  """The axis of the range with id rid (an optimization rebuilds the ranges: the id is what stays)."""
  return next(i for i, x in enumerate(k.ranges) if x.arg[0] == rid)

def _gates_on(k: Kernel, r: UOp) -> bool:
  """Does a load's mask depend on range r (a padded convolution's window)? Unrolled, r's masks are fixed per step of
  the loops around it, which compute them once."""
  return any(u.op is Ops.LOAD and len(u.src) > 2 and r in u.src[2].toposort() for u in k.ast.toposort())

def _depends_on_reduce(u, red: list) -> bool:
  nodes = u.src[1].toposort()
  return any(r in nodes for r in red)

def _try(k: Kernel, opt: Opt) -> bool:
  try: k.apply(opt); return True
  except OptError: return False

# A matrix-vector product (a decode step) reads each weight once: nothing to reuse, so its speed is the memory's. Its
# rows are read as a few long sequential streams per thread (_far_streams), never as adjacent rows interleaved (2 rows
# with software prefetches 4 KiB ahead read 8.5-9.5 GB/s on one core where one row reads 13-14, 2026-12-04).
STREAM_MIN = 1 << 18

def _streams_weights(k: Kernel, out: list, red: list, st: list[int]) -> bool:
  """Is this a matrix-vector product over a big operand: one load runs along the innermost reduction (stride st) and
  along the output (a weight, row after row, of at least STREAM_MIN elements), another stays put along every output
  range (the vector)?"""
  outs = [loads_stride(k.ast, o) for o in out]
  moving = [i for i, s in enumerate(st[:-1]) if s == 1 and any(o[i] != 0 for o in outs)]
  fixed = [i for i, s in enumerate(st[:-1]) if s == 1 and all(o[i] == 0 for o in outs)]
  if not moving or not fixed: return False
  sizes = [(x.arg[1], sx) for x, sx in zip(out, outs)] + [(x.arg[1], loads_stride(k.ast, x)) for x in red]
  return any(prod(n for n, sx in sizes if sx[i] != 0) >= STREAM_MIN for i in moving)

def int8_dot_over(k: Kernel, r: UOp) -> bool:
  """Is there a sum over range r of int8 products (int32(a) * int32(b), both moving with r)?"""
  return any(u.op is Ops.REDUCE and u.arg is Ops.ADD and r in u.src[1:] and
             any((ab := int8_product(x)) is not None and all(r in y.toposort() for y in ab) for x in u.src[0].toposort())
             for u in k.ast.toposort())

FAR_STREAMS = 4   # rows a matrix-vector product's thread reads side by side, each from its own part of the weight

def _far_streams(k: Kernel, out: list) -> None:
  """A matrix-vector product's rows in FAR_STREAMS parts, a row of each computed side by side (the parts unrolled,
  the rows within a part the loop the threads share): each thread reads FAR_STREAMS long sequential streams instead
  of one, so more cache misses are in flight. Adjacent rows would not do (2 or 4 rows interleaved: streams of one row,
  816 bytes of Q8_0, that the prefetchers learn anew every row; read 15 GB/s where one row reads 24). Far apart, on two
  threads (2026-12-05, 16384 x 16384 weights): Q8_0 18 -> 28-30 GB/s, with int8 activations 28 -> 29-40, float32 at
  the machine's read bandwidth either way."""
  o = out[-1] if out else None
  if o is None or o.src or o.arg[1] % FAR_STREAMS or o.arg[1] // FAR_STREAMS < 64: return
  rid = o.arg[0]
  if not _try(k, Opt(OptOps.TILE, _axis(k, o), o.arg[1] // FAR_STREAMS)): return
  _try(k, Opt(OptOps.UPCAST, _axis_of_id(k, rid), FAR_STREAMS))   # (the outer part keeps o's id)

def _tile_reduce(k: Kernel, out: list, red: list, n: int, tile_rows: int, dot4_lanes: tuple[int, ...] = ()) -> None:
  # loads the reduction streams through (they depend on a reduce range)
  streamed = [_depends_on_reduce(u, red) for u in k.ast.toposort() if u.op in (Ops.LOAD, Ops.STORE)]
  # vector lanes along an output range r: a streamed load is contiguous along r (or every other element: a
  # stride-2 pool, whose lanes are then loaded one by one but computed together) and none is gathered. Prefer
  # full-width lanes, then a contiguous store; a store whose lanes are written one by one (a convolution
  # vectorized over output channels) is fine when a long reduction amortizes it
  red_len = prod(x.arg[1] for x in red)
  cands = []
  for pos, r in enumerate(reversed(out)):
    st = loads_stride(k.ast, r)
    moving = [s for s, dep in zip(st[:-1], streamed[:-1]) if dep]
    w = _lanes_dividing(n, r.arg[1])
    if w is None or not (1 in moving or 2 in moving) or not all(s in (0, 1, 2) for s in moving) or (st[-1] != 1 and red_len < 64): continue
    cands.append(((w == n, st[-1] == 1, -pos), r, st, w))
  if cands:
    _, r, st, n = max(cands, key=lambda c: c[0])
    # a range where the vector loads do not move: unrolling it reuses each vector load (register tile)
    vloads = [i for i, (s, dep) in enumerate(zip(st[:-1], streamed[:-1])) if dep and s in (1, 2)]
    # (rows: the largest divisor of the range from 3 to tile_rows: a 14 x 14 or 7 x 7 image's rows tile by 7, where
    # a column strip of 8 vectors loads each weight vector for one pixel: ResNet-50's 256-channel 3x3 conv at 14 x 14
    # 3.0 -> 1.3 ms)
    rows = {o: max((d for d in range(3, tile_rows + 1) if o.arg[1] % d == 0), default=0) for o in out}
    others = [o for o in out if o is not r and rows[o] and all(loads_stride(k.ast, o)[i] == 0 for i in vloads)]
    if not _try(k, Opt(OptOps.VECTOR, _axis(k, r), n)): return
    vector_outer = r.arg[0] if r.arg[1] > n else None   # the split left an outer range (it keeps r's id)
    if others: _try(k, Opt(OptOps.UPCAST, _axis(k, others[-1]), rows[others[-1]]))
    # rows of symbolic count (x @ W over a prefill of any length) tile too, clamped at the last row
    elif (sym := k.symbolic_ranges("global")) and all(loads_stride(k.ast, sym[-1])[i] == 0 for i in vloads) and red_len >= 16:
      if _try(k, Opt(OptOps.CLAMP, len(sym) - 1, tile_rows)): others = [sym[-1]]
    # a matmul: two vectors per row. With AVX-512's 32 registers 8x2 accumulators (8 broadcasts and 2 vector loads
    # per step: measured 1.5x faster than 4x2, near the FMA peak); with AVX2's 16, 4x2 (8x2 spills: a 512^3 matmul
    # on one thread 29 -> 44 GFLOP/s);
    # a column reduction: wide strips (8 vectors) so each row read covers whole cache lines
    amt = 2 if others else 8
    vo = [x for x in k.ranges if x.arg[0] == vector_outer]
    while vo and amt > 1 and vo[0].arg[1] % amt: amt //= 2
    if vo and amt > 1: _try(k, Opt(OptOps.UPCAST, _axis(k, vo[0]), amt))
    if others:
      # loop order: the tile's vector operand (a K x 32 panel of a matmul's right side) stays in cache while
      # the innermost output loop walks the range it does not move along; the other operand streams
      g = [x for x in k.ranges if x.arg[2] == "global"]
      stay = [x for x in g if x.arg[0] == others[-1].arg[0]]
      if stay and stay[0] is not g[-1]: _try(k, Opt(OptOps.SWAP, _axis(k, stay[0]), _axis(k, g[-1])))
    return
  # reduction over contiguous memory: lanes from the reduce range
  # (with several reduce ranges, the innermost: a quantized weight's 32-element blocks, contiguous within a block;
  # not one of symbolic length)
  if not (fixed := [x for x in red if not x.src]): return
  r = fixed[-1]
  st = loads_stride(k.ast, r)
  # int8 products (a Q8_0 weight times int8 activations): as many lanes as int8s fill a vector the renderer has DOT4
  # for, 4 products per int32 lane (a Q8_0 block's 32 in one 256-bit vpdpbusd)
  if dot4_lanes and int8_dot_over(k, r): n = next((w for w in sorted(dot4_lanes, reverse=True) if r.arg[1] % w == 0), n)
  if r.arg[1] % n == 0 and 1 in st and (len(red) == 1 or all(s in (0, 1) for s in st[:-1])):
    # (rows of symbolic count reuse the weight: a product over many rows, not a matrix-vector one)
    stream = _streams_weights(k, out, red, st) and not any(0 in loads_stride(k.ast, x)[:-1] for x in k.symbolic_ranges("global"))
    _try(k, Opt(OptOps.VECTOR, _axis(k, r), n))
    # output ranges some load does not move along (A @ B.T: each row of A meets every row of B):
    # unroll them so each vector load feeds several accumulators, as many as the registers hold (4x4 with
    # AVX-512; 4x2 with AVX2: a 512^3 A @ B.T on one thread 28 -> 45 GFLOP/s); not in a matrix-vector product,
    # which reads one row at a time (STREAM_MIN)
    accumulators = 2 * tile_rows
    if stream: _far_streams(k, out)
    for o in [] if stream else [o for o in out if o.arg[1] % 4 == 0 and 0 in loads_stride(k.ast, o)[:-1]][-2:]:
      cur = [x for x in k.ranges if x.arg[0] == o.arg[0]]
      amt = min(4, accumulators)
      if cur and amt > 1 and _try(k, Opt(OptOps.UPCAST, _axis(k, cur[0]), amt)): accumulators //= amt
    # rows of symbolic count (a prefill of any prompt length: x @ W.T) tile too, clamped at the last row
    if accumulators >= 4 and (sym := k.symbolic_ranges("global")) and 0 in loads_stride(k.ast, sym[-1])[:-1]:
      _try(k, Opt(OptOps.CLAMP, len(sym) - 1, 4))
    # a plain row reduction has one accumulator, so every vector add waits for the previous one: two partial
    # sums keep the adder busy (measured here on row sums of 4096x4096 and 16384x256: 1.0-1.2 ms with two, 1.2 ms
    # with four, which also cost a longer combine at the end of every row)
    rest = [x for x in k.ranges if x.arg[2] == "reduce"]
    if k.unrolled_size() == 1 and rest and rest[0].arg[1] % 2 == 0 and rest[0].arg[1] >= 16: _try(k, Opt(OptOps.UNROLL, _axis(k, rest[0]), 2))
