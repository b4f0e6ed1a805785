"""Kernel optimizations: transformations of a kernel's ranges, each checking its own legality.

A range is a loop variable `RANGE(arg=(id, size, kind))`. Kinds:
  global   an output loop (the outermost one may be spread over CPU threads: kind `thread`); on a device with
           work-groups (GPU-style), the output ranges are the work-group's id instead of loops
  local    an output range split off into the work-group: the thread's id in its group (LOCAL)
  group    a reduce range split off into the work-group (GROUP): each thread of the group sums its share, then the
           group combines the partial sums through local memory: REDUCE(REDUCE(x, outer ranges), group range)
  reduce   a reduction loop
  upcast   an output range unrolled into copies (register tiling: each copy keeps its own accumulator)
  unroll   a reduce range unrolled into copies (several partial sums)
  vector   one range computed as a vector of lanes (SIMD); at most one per kernel

Optimizations split a range into (outer, inner) and give the inner part a new kind, or merge two
adjacent ranges. The AST is rewritten by substituting each old range by an expression of the new ones.
Loops nest in the order of the range ids: a split's outer part and a merge keep the id of the range they
replace, so they keep its place.

>>> from petagrad.codegen.opt import Opt, OptOps
>>> Opt(OptOps.UPCAST, 0, 4)
Opt(op=OptOps.UPCAST, axis=0, amount=4)
"""
from __future__ import annotations
from dataclasses import dataclass, field
from enum import Enum, auto
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp
from petagrad.uop.symbolic import simplify
from petagrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite
from petagrad.uop.graph import substitute
from petagrad.dtype import dtypes
from petagrad.helpers import prod
from petagrad.codegen.tensor_core import apply_tensor_core

class OptOps(Enum):
  UPCAST = auto()    # split an output range, unroll the inner part
  UNROLL = auto()    # split a reduce range, unroll the inner part
  VECTOR = auto()    # split a range, compute the inner part as SIMD lanes
  THREAD = auto()    # spread the outermost output range over CPU threads
  LOCAL = auto()     # split an output range, its inner part runs as the threads of a work-group (GPU-style devices)
  GROUP = auto()     # split a reduce range, its inner part runs as the threads of a work-group that combine their sums
  SWAP = auto()      # exchange the loop positions of two output ranges (axis and amount are their indices)
  TILE = auto()      # split an output range into an outer loop (in its place) and an inner loop of `amount`
                     # nested innermost among the output loops: blocks that stay in cache
  BLOCK = auto()     # long float sums become nested blocks, each from a fresh accumulator (Kernel.block_sums; always
                     # applied last, never searched; amount: the bytes of the SIMD register the compiler fills on its own)
  TC = auto()        # a half matmul's tiles on tensor cores (codegen/tensor_core.py; axis ignored, amount: warps per block)
  CLAMP = auto()     # an output range of symbolic length (axis: its index among those, by id) in blocks of `amount`
                     # unrolled copies, the last block's extra copies clamped to its last row (Kernel.clamp_upcast)
  def __repr__(self) -> str: return f"OptOps.{self.name}"

@dataclass(frozen=True)
class Opt:
  op: OptOps
  axis: int          # index into Kernel.ranges (for THREAD: ignored)
  amount: int = 0

class OptError(ValueError):
  """An optimization that does not apply to this kernel."""

def _c(v: int) -> UOp: return UOp.const(dtypes.index, v)

@dataclass
class Kernel:
  """A kernel AST plus the optimizations applied to it so far."""
  ast: UOp
  applied: list[Opt] = field(default_factory=list)
  next_id: int = 0
  max_local: int = 0   # the most threads a work-group of the target may have (0: no work-groups)
  def __post_init__(self): self.next_id = max((r.arg[0] for r in self.ast.toposort() if r.op is Ops.RANGE), default=-1) + 1

  @property
  def ranges(self) -> list[UOp]:
    """Every RANGE the optimizations may change, output ranges first (in order), then the reduce ranges. A range with
    a symbolic end (its source: a Variable's value) is not one of them: it runs as the plain loop lowering made."""
    rs = [u for u in self.ast.toposort() if u.op is Ops.RANGE and not u.src]
    order = {"thread": 0, "global": 0, "local": 0, "upcast": 2, "vector": 3, "reduce": 1, "unroll": 2, "group": 1}
    return sorted(rs, key=lambda r: (order[r.arg[2]], r.arg[0]))

  def symbolic_ranges(self, kind: str) -> list[UOp]:
    """The ranges of symbolic length (a Variable's value, their source) of one kind, by id (OptOps.CLAMP's axis counts
    the output ones)."""
    return sorted((u for u in self.ast.toposort() if u.op is Ops.RANGE and u.src and u.arg[2] == kind), key=lambda r: r.arg[0])

  def new_range(self, size: int, kind: str) -> UOp:
    self.next_id += 1
    return UOp(Ops.RANGE, dtypes.index, (), (self.next_id - 1, size, kind))

  def replace_ranges(self, mapping: dict[UOp, UOp], new_ranges: tuple[UOp, ...], root: UOp | None = None) -> UOp:
    """The AST (or `root`, a part of it) with each old range replaced by an expression of `new_ranges`; a REDUCE over
    an old range now runs over the new ones."""
    ast = substitute(self.ast if root is None else root, mapping)
    exprs = set(mapping.values())
    def fix(red: UOp) -> UOp | None:
      if not any(x in exprs for x in red.src[1:]): return None
      rs = [x for x in red.src[1:] if x not in exprs]
      rs += [n for n in new_ranges if n.op is Ops.RANGE and n not in rs]
      return UOp(Ops.REDUCE, red.dtype, (red.src[0], *rs), red.arg)
    return simplify(graph_rewrite(ast, PatternMatcher([(UPat(Ops.REDUCE, name="red"), fix)])))

  def replace_range(self, r: UOp, expr: UOp, new_ranges: tuple[UOp, ...] = ()) -> None:
    self.ast = self.replace_ranges({r: expr}, new_ranges or (expr,))

  def split(self, r: UOp, amount: int, kind: str) -> tuple[UOp, UOp]:
    size = r.arg[1]
    if amount <= 1 or size < amount or size % amount: raise OptError(f"range of size {size} does not split by {amount}")
    outer = UOp(Ops.RANGE, dtypes.index, (), (r.arg[0], size // amount, r.arg[2]))   # keeps r's place in the loop order
    inner = self.new_range(amount, kind)
    self.replace_range(r, outer * _c(amount) + inner if size // amount > 1 else inner, (outer, inner) if size // amount > 1 else (inner,))
    return outer, inner

  def normalize_ranges(self) -> None:
    """The loop nest every optimization starts from: divided ranges split, then adjacent ranges merged."""
    self.split_divided_ranges()
    self.merge_ranges()

  def split_divided_ranges(self) -> None:
    """Split every range the index math divides (`r // c` and `r % c`, c dividing its size) into an outer
    range of size/c and an inner one of c, nested in its place: the index math becomes linear (a permuted
    view's reshape), so loads along the inner range are contiguous and vectorize. Ranges are then
    renumbered in loop order."""
    order = sorted((u for u in self.ast.toposort() if u.op is Ops.RANGE), key=lambda r: r.arg[0])
    while True:
      found = next(((u.src[0], u.src[1].arg) for u in self.ast.toposort() if u.op in (Ops.IDIV, Ops.MOD)
                    and u.src[0].op is Ops.RANGE and not u.src[0].src and u.src[1].op is Ops.CONST and u.src[0].arg[2] in ("global", "reduce")
                    and 1 < u.src[1].arg < u.src[0].arg[1] and u.src[0].arg[1] % u.src[1].arg == 0), None)
      if found is None: break
      r, c = found
      outer, inner = self.split(r, c, r.arg[2])
      i = order.index(r)
      order[i:i + 1] = [outer, inner]
    live = {u for u in self.ast.toposort() if u.op is Ops.RANGE}
    order = [r for r in order if r in live]
    if [r.arg[0] for r in order] != list(range(len(order))):
      self.ast = substitute(self.ast, {r: r.replace(arg=(i, *r.arg[1:])) for i, r in enumerate(order)})
      self.next_id = len(order)

  def merge_ranges(self) -> None:
    """Merge adjacent output (and reduce) ranges whose merged index math is no more complex: fewer
    and longer loops vectorize and thread better."""
    changed = True
    while changed:
      changed = False
      # most candidates are refused: each is first tried on the index math that reads a or b alone (the divisions are
      # there), not on the whole kernel (a Winograd output transform: 18 of 20 refused, 0.4 s of its build)
      roots = _index_math(self.ast)
      reads = {x: {r for r in x.toposort() if r.op is Ops.RANGE} for x in roots}
      for kind in ("global", "reduce"):
        rs = [r for r in self.ranges if r.arg[2] == kind]
        for a, b in zip(rs, rs[1:]):
          if kind == "reduce" and not _same_reduce(self.ast, a, b): continue
          m = UOp(Ops.RANGE, dtypes.index, (), (a.arg[0], a.arg[1] * b.arg[1], kind))   # takes a's place in the loop order
          mapping = {a: m // _c(b.arg[1]), b: m % _c(b.arg[1])}
          if touched := tuple(x for x in roots if a in reads[x] or b in reads[x]):
            part = UOp(Ops.SINK, dtypes.bool, touched)
            if _divmod_count(self.replace_ranges(mapping, (m,), part)) > _divmod_count(part): continue
          cand = self.replace_ranges(mapping, (m,))
          if _divmod_count(cand) <= _divmod_count(self.ast):
            self.ast, changed = cand, True
            break
        if changed: break

  def apply(self, opt: Opt) -> None:
    rs = self.ranges
    if opt.op is OptOps.BLOCK: return self.block_sums(opt.amount)
    if opt.op is OptOps.CLAMP:
      sym = self.symbolic_ranges("global")
      if not 0 <= opt.axis < len(sym) or opt.amount < 2: raise OptError(f"CLAMP needs a symbolic output range and an amount >= 2, got {opt}")
      self.clamp_upcast(sym[opt.axis], opt.amount)
      self.applied.append(opt)
      return
    if opt.op is OptOps.TC:
      if (why := apply_tensor_core(self, opt.amount)) is not None: raise OptError(why)
      self.applied.append(opt)
      return
    if opt.op is OptOps.THREAD:
      g = [r for r in rs if r.arg[2] == "global"]
      if not g or any(r.arg[2] == "thread" for r in rs): raise OptError("no output range to thread")
      r = g[0]
      self.replace_range(r, UOp(Ops.RANGE, dtypes.index, (), (r.arg[0], r.arg[1], "thread")))
      self.applied.append(opt)
      return
    if not 0 <= opt.axis < len(rs): raise OptError(f"axis {opt.axis} out of range ({len(rs)} ranges)")
    if opt.op is OptOps.SWAP:
      # output loops are independent, so any order computes the same values
      if not 0 <= opt.amount < len(rs) or opt.amount == opt.axis: raise OptError(f"SWAP needs two different ranges, got {opt.axis} and {opt.amount}")
      a, b = rs[opt.axis], rs[opt.amount]
      if a.arg[2] != "global" or b.arg[2] != "global": raise OptError("SWAP needs two output loops")
      self.ast = substitute(self.ast, {a: a.replace(arg=(b.arg[0], *a.arg[1:])), b: b.replace(arg=(a.arg[0], *b.arg[1:]))})
      self.applied.append(opt)
      return
    r = rs[opt.axis]
    kind = r.arg[2]
    if opt.op is OptOps.UPCAST and kind not in ("global", "thread", "upcast"): raise OptError("UPCAST needs an output range")
    if opt.op is OptOps.UNROLL and kind != "reduce": raise OptError("UNROLL needs a reduce range")
    if opt.op is OptOps.VECTOR:
      if any(x.arg[2] == "vector" for x in rs): raise OptError("only one vector range per kernel")
      if kind not in ("global", "reduce"): raise OptError("VECTOR needs an output or reduce range")
    if opt.op in (OptOps.LOCAL, OptOps.GROUP):
      if kind != ("global" if opt.op is OptOps.LOCAL else "reduce"):
        raise OptError(f"{opt.op.name} needs {'an output' if opt.op is OptOps.LOCAL else 'a reduce'} range")
      if self.local_size() * (opt.amount or r.arg[1]) > self.max_local: raise OptError(f"a work-group of at most {self.max_local} threads")
    if opt.op is OptOps.GROUP:
      red = [u for u in self.ast.toposort() if u.op is Ops.REDUCE and r in u.src[1:]]
      # (a half sum or product rounds at every step, in the order of the loop; a max is exact in any order)
      if any((u.dtype.scalar() in (dtypes.float16, dtypes.bfloat16) and u.arg is not Ops.MAX) or u.dtype.count > 1 for u in red):
        raise OptError("GROUP of a half sum or product, or of a vector")
      _, g = self.split(r, opt.amount or r.arg[1], "group")
      # the group's threads each reduce over the other ranges; one reduce over the group range combines their results
      def nest(red: UOp) -> UOp | None:
        if g not in red.src[1:] or len(red.src) == 2: return None
        inner = UOp(Ops.REDUCE, red.dtype, (red.src[0], *(x for x in red.src[1:] if x is not g)), red.arg)
        return UOp(Ops.REDUCE, red.dtype, (inner, g), red.arg)
      self.ast = graph_rewrite(self.ast, PatternMatcher([(UPat(Ops.REDUCE, name="red"), nest)]))
      self.applied.append(opt)
      return
    if opt.op is OptOps.TILE:
      if kind != "global": raise OptError("TILE needs an output loop")
      self.split(r, opt.amount, "global")   # the inner part gets the newest id: the innermost output loop
      self.applied.append(opt)
      return
    new_kind = {OptOps.UPCAST: "upcast", OptOps.UNROLL: "unroll", OptOps.VECTOR: "vector", OptOps.LOCAL: "local"}[opt.op]
    amount = opt.amount or r.arg[1]
    # (a work-group's ranges always get a new id: the newest local range varies fastest between neighbouring threads)
    if amount == r.arg[1] and opt.op is not OptOps.LOCAL:
      self.replace_range(r, UOp(Ops.RANGE, dtypes.index, (), (r.arg[0], r.arg[1], new_kind)))
    else: self.split(r, amount, new_kind)
    self.applied.append(opt)

  def clamp_upcast(self, r: UOp, amount: int) -> None:
    """An output range r of symbolic length e (its source) as an outer loop over ceil(e / amount) blocks and `amount`
    unrolled copies (a register tile over rows whose count is known only when the kernel runs): the copy computes row
    min(outer * amount + inner, e - 1), so the last block's extra copies redo row e - 1 and store the same value to it.
    No tail loop and no masked store; only an output range may do this (a reduction would count those rows twice)."""
    assert r.src and r.arg[2] == "global", "clamp_upcast takes an output range of symbolic length"
    e = r.src[0]
    outer = UOp(Ops.RANGE, dtypes.index, (simplify((e + _c(amount - 1)) // _c(amount)),), (r.arg[0], -(-r.arg[1] // amount), "global"))
    inner = self.new_range(amount, "upcast")
    row = outer * _c(amount) + inner
    last = e - _c(1)
    self.replace_range(r, -((-row).maximum(-last)), (outer, inner))   # min(row, e - 1)

  def block_sums(self, simd_bytes: int = 0) -> None:
    """Long float sums as blocks of partial sums. An accumulator that adds n values loses up to ~n*eps of the
    result (and stops growing once it is 2**24 times a term: 3e8 ones summed to 2**28 in 16 lanes). Every ADD reduce
    of floats whose accumulators add more than BLOCK_MIN values each (the product of its loop ranges: unrolled and
    vector ranges are separate partial sums already) becomes levels of nested reduces: the innermost block adds
    BLOCK_INNER values into a fresh accumulator, each level above adds BLOCK_OUTER block sums, so the error grows
    with the number of levels (log n) instead of with n. `simd_bytes`: the SIMD register the compiler fills on its
    own with a scalar sum over contiguous memory (`#pragma omp simd`); such a block is as many times longer as the
    register has lanes, BLOCK_INNER per lane.
    Runs after every other optimization (the heuristics, NOOPT and BEAM all end with it); a second call changes
    nothing."""
    memo: dict[tuple, UOp] = {}
    def rng(key: tuple, size: int) -> UOp:   # a new loop range, the same one for the same purpose (one loop nest)
      if key not in memo: memo[key] = self.new_range(size, "reduce")
      return memo[key]
    def fix(red: UOp) -> UOp | None:
      if red.arg is not Ops.ADD or not red.dtype.scalar().is_float: return None
      if any(r.src for r in red.src[1:]): return None   # (a loop of symbolic length is summed as it is)
      loops = [r for r in red.src[1:] if r.arg[2] == "reduce"]
      body = red.toposort()
      # a register tile (a matmul's 8x2 vectors, 4x2 with AVX2; A @ B.T's 4x4: two unrolled ranges) has no registers
      # left for a second set of accumulators: blocked only past a long K, in long inner blocks (whose loop is the
      # tile's loop as before; the outer sums live in memory). (A column sum's strips unroll one range: blocked.)
      upcast = [r for r in body if r.op is Ops.RANGE and r.arg[2] == "upcast"]
      tile = len(upcast) >= 2 and prod(r.arg[1] for r in upcast) >= TILE_ACCS
      if prod(r.arg[1] for r in loops) <= (TILE_MIN if tile else BLOCK_MIN): return None
      inner = TILE_INNER if tile else BLOCK_INNER
      scalar = not any(r.op is Ops.RANGE and r.arg[2] == "vector" for r in body)
      if not tile and simd_bytes and scalar and loops and 1 in loads_stride(red, loops[-1]):
        inner *= max(1, simd_bytes // red.dtype.itemsize)   # the compiler's lanes: BLOCK_INNER each
      unroll = tuple(r for r in red.src[1:] if r.arg[2] == "unroll")
      vec = tuple(r for r in red.src[1:] if r.arg[2] == "vector")
      # vector lanes stay apart through every level and every tail: they are combined once, at the end
      tree = _blocked(red, red.src[0], loops, unroll, (inner, BLOCK_OUTER), 0, rng)
      return UOp(Ops.REDUCE, red.dtype, (tree, *vec), red.arg) if vec else tree
    ast = graph_rewrite(self.ast, PatternMatcher([(UPat(Ops.REDUCE, name="red"), fix)]))
    if ast is not self.ast:
      self.ast = simplify(ast)
      self.applied.append(Opt(OptOps.BLOCK, 0, simd_bytes))

  def local_size(self) -> int: return prod(r.arg[1] for r in self.ranges if r.arg[2] in ("local", "group"))

  def unrolled_size(self) -> int:
    return prod(r.arg[1] for r in self.ranges if r.arg[2] in ("upcast", "unroll"))

# blocked float sums (Kernel.block_sums). The innermost block's length sets most of the error (1e8 copies of a
# constant: ~4e-5 relative error in blocks of 4096, ~3e-7 in blocks of 32, ~2e-7 in 16; torch's cascade sum ~6e-7).
# 32 rather than 16: gcc unrolls a loop of 16 whole, and a nest of them compiled 6x slower (a float16 sum: 40 s).
# Short sums (a 4096-long row is 128 steps in 32 lanes) keep their single loop.
BLOCK_MIN = 256
BLOCK_INNER = 32
BLOCK_OUTER = 16
TILE_ACCS = 8      # accumulators (upcast copies of two ranges) in one loop nest that make it a register tile
TILE_MIN = 4096    # a register tile's sums are blocked past this length only: a matmul's K up to 4096 is untouched
TILE_INNER = 256

def _blocked(red: UOp, x: UOp, loops: list[UOp], unroll: tuple[UOp, ...], sizes: tuple[int, int], level: int, rng) -> UOp:
  """The sum of x over `loops` (outermost first) and the unrolled ranges, as nested reduces: at most sizes[0]
  (level 0) or sizes[1] (above) adds into each accumulator; unrolled copies are added inside the innermost block.
  A loop whose length the block does not divide is split into q blocks and a tail, summed on its own and added at
  the end: no per-element masks."""
  b = sizes[0] if level == 0 else sizes[1]
  def reduce(val: UOp, rs) -> UOp: return UOp(Ops.REDUCE, red.dtype, (val, *rs), red.arg)
  if prod(r.arg[1] for r in loops) <= b: return reduce(x, (*loops, *unroll))
  # the innermost loops that fit in one block whole; the next one out is split so the block fills up
  rest, taken, p = list(loops), [], 1
  while p * rest[-1].arg[1] <= b:
    taken.insert(0, rest.pop())
    p *= taken[0].arg[1]
  r = rest.pop()
  c = b // p
  if c < 2: return _blocked(red, reduce(x, (*taken, *unroll)), rest + [r], (), sizes, level + 1, rng)
  q, t = divmod(r.arg[1], c)
  i = rng(("in", r, c), c)
  o = rng(("out", r, c), q) if q > 1 else None
  main = reduce(substitute(x, {r: o * _c(c) + i if o is not None else i}), (i, *taken, *unroll))
  out = _blocked(red, main, rest + ([o] if o is not None else []), (), sizes, level + 1, rng)
  if t == 0: return out
  # the tail: r's last t values. A range is one loop of the nest, so the tail's loops are ranges of its own: these
  # loops and those of the reduces inside x that depend on them (the blocks of the levels below)
  own = {g: rng(("tail", r, c, g), g.arg[1]) for g in _loops_under(x, {r, *rest, *taken}) if g is not r}
  j = rng(("tail", r, c), t)
  tail_x = substitute(x, {**own, r: _c(q * c) + j})
  tail = _blocked(red, tail_x, [own.get(g, g) for g in rest] + [j] + [own.get(g, g) for g in taken], unroll, sizes, level, rng)
  return UOp(Ops.ADD, red.dtype, (out, tail))

def _loops_under(x: UOp, rs: set[UOp]) -> list[UOp]:
  """The ranges in rs and the loop ranges of every reduce inside x that depends on one of them."""
  dep: set[UOp] = set()
  out: dict[UOp, None] = dict.fromkeys(r for r in rs if r.arg[2] == "reduce")
  for u in x.toposort():
    if u in rs or any(s in dep for s in u.src):
      dep.add(u)
      if u.op is Ops.REDUCE: out.update(dict.fromkeys(g for g in u.src[1:] if g.arg[2] == "reduce"))
  return list(out)

def _divmod_count(ast: UOp) -> int: return sum(1 for u in ast.toposort() if u.op in (Ops.IDIV, Ops.MOD))

def _index_math(ast: UOp) -> list[UOp]:
  """The largest integer (and boolean) expressions of a kernel: the indices and masks of its loads and stores, and the
  integer parts that feed its values. Every division and modulo of the kernel lies in one of them."""
  def integer(u: UOp) -> bool: return u.dtype.scalar() == dtypes.bool or u.dtype.scalar().is_int
  roots: dict[UOp, None] = {}
  for u in ast.toposort():
    if u.op in GroupOp.ALU and integer(u): continue
    for x in u.src:
      if integer(x) and x.op in GroupOp.ALU: roots[x] = None   # (not a store, or a reduce's ranges: replaced, not divided)
  return list(roots)

def _same_reduce(ast: UOp, a: UOp, b: UOp) -> bool:
  return any(u.op is Ops.REDUCE and a in u.src[1:] and b in u.src[1:] for u in ast.toposort())

def int8_product(x: UOp) -> tuple[UOp, UOp] | None:
  """(a, b) where x is an int32 product of two int8 values widened, int32(a) * int32(b); else None."""
  if x.op is not Ops.MUL or x.dtype.scalar() != dtypes.int32: return None
  if not all(s.op is Ops.CAST and s.src[0].dtype.scalar() == dtypes.int8 for s in x.src): return None
  return x.src[0].src[0], x.src[1].src[0]

def _index_step(idx: UOp, r: UOp) -> int | None:
  """The step of an index when r grows by one (None: not affine in r)."""
  if r not in idx.toposort(): return 0
  d = simplify(substitute(idx, {r: r + _c(1)}) - idx)
  return d.arg if d.op is Ops.CONST else None

def loads_stride(ast: UOp, r: UOp) -> list[int | None]:
  """For each LOAD/STORE, the step of its index when r grows by one (None: not affine in r)."""
  return [_index_step(u.src[1], r) for u in ast.toposort() if u.op in (Ops.LOAD, Ops.STORE)]

def store_stride(ast: UOp, r: UOp) -> int | None:
  """The step of the kernel's (last) store's index when r grows by one: loads_stride(ast, r)[-1] without the loads."""
  return _index_step([u for u in ast.toposort() if u.op is Ops.STORE][-1].src[1], r)

__all__ = ["Opt", "OptOps", "OptError", "Kernel", "loads_stride", "store_stride", "GroupOp"]
