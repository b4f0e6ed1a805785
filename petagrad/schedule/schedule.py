"""The scheduler: a lazy tensor graph -> an ordered list of kernels (fusion decisions) and copies.

Fusion rules (docs/fusion.md):
  * every node is computed inside the kernel of the nearest realized node above it, so elementwise
    chains fuse with each other and into the reduce that consumes them, and elementwise work after a
    reduce fuses into it; movement ops are index math;
  * a node is realized (gets its own buffer) when it is a target, a CONTIGUOUS, COPY or ASSIGN; a
    reduce is realized when its result is EXPANDed (fusing would recompute it once per expanded
    element) or when two different kernels would compute it; when nothing but an elementwise epilogue
    reads it (a convolution's bias, normalization, activation), the epilogue is realized instead;
  * an elementwise chain a reduce reads through a large EXPAND (a matmul's prologue: the gradient flowing
    into a weight gradient, an activation feeding the next layer) is realized when recomputing it per
    expanded element would cost more than a few ops (RECOMPUTE_COST);
  * a contraction (a reduce reading through a large EXPAND: matmul, convolution) that another reduce reads is
    realized: nested in that reduce's loop it would get no register tile;
  * a long contraction that walks both operands along strided rows (a weight gradient) is split into chunks: one
    kernel for the partial sums, one that adds them (SPLIT_REDUCE).

Launch groups: independent kernels with nothing to share (an optimizer updating every parameter, each
in its own buffer) cannot fuse into one loop nest, but they can run as one program: several loop nests one
after another in one compiled function, one launch. Elementwise kernels and small reductions that are
ready at the same time are grouped that way (`ScheduleItem.group`, up to GROUP_MAX per program).
"""
from __future__ import annotations
import heapq
from dataclasses import dataclass, field
from typing import Any
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp, symbolic_arg, binds_in, max_numel
from petagrad.uop.graph import is_disk, new_buffer, new_buffer_node, new_buffer_for, substitute, rebind, unbind, reshape_strides, view_strides   # noqa: F401  (some imported from here too)
from petagrad.dtype import dtypes
from petagrad.helpers import prod, strides_for_shape, GROUP_MAX, SPLIT_REDUCE


@dataclass(frozen=True)
class ScheduleItem:
  kind: str            # "kernel": compute value into a new buffer; "assign": into an existing one; "copy"; "collective": an
                       # ALLREDUCE or ALLGATHER of value's buffer over the MPI ranks into out (arg: the op and its arg)
  out: UOp             # a view over the output BUFFER
  value: UOp           # tensor graph over BUFFER views, CONST and IOTA
  # structure(SINK(out, value)) without the nodes: (key, BUFFER nodes in slot order), when already known
  structure: tuple[tuple, list[UOp]] | None = field(default=None, compare=False, repr=False)
  # consecutive items with the same group number (>= 0) run as one program (one launch); -1: alone
  group: int = -1
  arg: Any = None

def _is_buffer_view(u: UOp) -> bool: return u.base.op is Ops.BUFFER

# the nodes that always get a buffer of their own
_OWN_BUFFER = frozenset({Ops.COPY, Ops.ALLREDUCE, Ops.ALLGATHER, Ops.CONTIGUOUS})

def _kernel_walk(roots, realized: set[UOp], stop=None):
  """The nodes one kernel computes from `roots`, depth first: realized nodes and BUFFERs are yielded (they are
  its inputs) but not looked below; nor are nodes for which stop(u) is true."""
  stack, seen = list(roots), set()
  while stack:
    u = stack.pop()
    if u in seen: continue
    seen.add(u)
    yield u
    if u in realized or u.op is Ops.BUFFER or (stop is not None and stop(u)): continue
    stack.extend(u.src)

def _kernel_reduces(root: UOp, realized: set[UOp]) -> set[UOp]:
  """The REDUCE_AXIS nodes a kernel for `root` computes below its root."""
  srcs = root.src[1:] if root.op is Ops.ASSIGN else root.src
  return {u for u in _kernel_walk(srcs, realized) if u.op is Ops.REDUCE_AXIS and u not in realized}

def _top_reduces(root: UOp, realized: set[UOp]) -> set[UOp]:
  """The outermost REDUCE_AXIS nodes under root that are not already realized."""
  is_reduce = lambda u: u.op is Ops.REDUCE_AXIS
  return {u for u in _kernel_walk((root,), realized, is_reduce) if is_reduce(u) and u not in realized}

# what may lie between a reduce and the epilogue on top of it (no op that moves or repeats elements)
_EPILOGUE_OPS = frozenset({Ops.REDUCE_AXIS, Ops.RESHAPE, Ops.PERMUTE, Ops.CONTIGUOUS_BACKWARD, Ops.CUSTOM_GRAD, Ops.DETACH})

def _epilogue(base: UOp, realize: set[UOp], users: dict[UOp, list[UOp]]) -> bool:
  """Is base elementwise work on top of one reduce that nothing else reads (a convolution's bias, normalization and
  activation), with as many elements as it? Then it gets the buffer instead of the reduce: computed once per element
  in the reduce's kernel, not once per element read in the kernel that reads it through an expand."""
  if base in realize or base.op not in GroupOp.Elementwise: return False
  nodes = list(_kernel_walk((base,), realize, stop=lambda u: u.op is Ops.REDUCE_AXIS))
  inside = set(nodes)
  # the nodes computed from a reduce of this kernel, sources before users. (The walk yields a node shared by two
  # users after the first of them only, so its reverse is not such an order: passes over it until none joins)
  above: set[UOp] = set()
  grew = True
  while grew:
    grew = False
    for u in reversed(nodes):
      if u not in above and u not in realize and (u.op is Ops.REDUCE_AXIS or any(s in above for s in u.src)): above.add(u); grew = True
  # one reduce: a kernel computing two side by side (a SwiGLU's gate and up products, a residual block's two
  # convolutions) gets no register tile for either (a decode step's 2048 x 768 Q8_0 products: 63 -> 850 us)
  reduces = [u for u in above if u.op is Ops.REDUCE_AXIS]
  if len(reduces) != 1 or max_numel(reduces[0].shape) != max_numel(base.shape): return False
  for u in above:
    if u.op not in GroupOp.Elementwise and u.op not in _EPILOGUE_OPS: return False
    if u is not base and any(x not in inside for x in users.get(u, [])): return False
  return True

def _inputs(srcs: tuple[UOp, ...], realized: set[UOp]) -> set[UOp]:
  """The realized nodes directly under srcs (not looking below them)."""
  return {u for u in _kernel_walk(srcs, realized) if u in realized}

# Recomputing an elementwise chain below an EXPAND inside a reduce costs its ops once per expanded element (a
# matmul's prologue runs N times per input element); past this many op-equivalents the chain gets a buffer.
RECOMPUTE_COST, RECOMPUTE_FACTOR = 8, 4
# read through an expand this wide into at least RECOMPUTE_WIDE_WORK elements (the input vector of a matrix-vector
# product, repeated for each of hundreds of output rows) a chain costing RECOMPUTE_COST_WIDE already gets a buffer: a
# normalization before the projections of a decode step (Q8_0 2048 x 768: 121 -> 91 us, measured here). (A small
# statistic broadcast over a short row stays fused: its own kernel would cost more than the recompute.)
RECOMPUTE_WIDE, RECOMPUTE_WIDE_WORK, RECOMPUTE_COST_WIDE = 256, 1 << 16, 4
_OP_COST = {**{op: 1 for op in GroupOp.ALU}, **{op: 10 for op in GroupOp.Transcendental}, Ops.FDIV: 4, Ops.RECIPROCAL: 4,
            Ops.PAD: 2}   # a pad is a masked load: a compare and a select (a cat of n pieces is n of them)

# a bfloat16 op is a float32 op and a rounding to bfloat16 (a few integer ops) on devices without bfloat16 arithmetic
BF16_COST = 3

def _chain_cost(root: UOp, realized: set[UOp]) -> int:
  """Op-equivalents one element of root costs to compute inside another kernel (a load counts one)."""
  return sum(1 if (u in realized or u.op is Ops.BUFFER) else _OP_COST.get(u.op, 0) * (BF16_COST if u.dtype == dtypes.bfloat16 else 1)
             for u in _kernel_walk((root,), realized))

def _costly(u: UOp, realize: set[UOp], cost: int = RECOMPUTE_COST) -> bool:
  """Is u a computed node without a buffer whose element costs at least `cost` to compute in another kernel?"""
  return u not in realize and u.op not in (Ops.BUFFER, Ops.CONST, Ops.IOTA) and _chain_cost(u, realize) >= cost

def _realize_expanded_chains(order: list[UOp], realize: set[UOp]) -> None:
  """Give a buffer to every costly elementwise chain a reduce would read through a large EXPAND."""
  for r in order:
    if r.op is not Ops.REDUCE_AXIS: continue
    for e in _kernel_walk(r.src, realize, stop=lambda u: u.op is Ops.EXPAND):
      if e.op is not Ops.EXPAND or e in realize or max_numel(e.shape) < RECOMPUTE_FACTOR * max_numel(e.src[0].shape): continue
      base = e.src[0].base   # below the movement ops: they are index math
      wide = max_numel(e.shape) >= max(RECOMPUTE_WIDE * max_numel(e.src[0].shape), RECOMPUTE_WIDE_WORK)
      need = RECOMPUTE_COST_WIDE if wide else RECOMPUTE_COST
      if not _costly(base, realize, need): continue
      # a costly piece the chain itself expands (the index of a one-hot `idx[:, None] == arange(n)`) gets the buffer
      # first: the small index is stored, not the n-times larger chain, which may then be cheap enough to fuse
      # (a gather stays a reduce over the comparison, which codegen/collapse.py turns into one load)
      for ie in _kernel_walk((base,), realize, stop=lambda u: u.op is Ops.EXPAND):
        if ie.op is Ops.EXPAND and _costly(ie.src[0].base, realize): realize.add(ie.src[0].base)
      if _chain_cost(base, realize) >= need: realize.add(base)

def _expanded_operands(r: UOp, realize: set[UOp], factor: int) -> list[UOp]:
  """The EXPANDs reduce r's kernel reads real data through (not a broadcast constant or index), each at least `factor`
  times its source's size: a contraction's operands."""
  stop = lambda u: u.op in (Ops.EXPAND, Ops.REDUCE_AXIS) or u.op in _OWN_BUFFER
  return [e for e in _kernel_walk(r.src, realize, stop) if e.op is Ops.EXPAND and e not in realize
          and max_numel(e.shape) >= factor * max_numel(e.src[0].shape) and e.src[0].base.op not in (Ops.CONST, Ops.IOTA)]

def _contraction(r: UOp, realize: set[UOp]) -> bool:
  """Is reduce r a contraction (a matmul, a convolution): does it read two operands, each through a large EXPAND (x
  along the output columns, w along the rows)? A broadcast constant or one broadcast statistic is not one."""
  return len(_expanded_operands(r, realize, RECOMPUTE_FACTOR)) >= 2

def _realize_nested_contractions(order: list[UOp], realize: set[UOp]) -> None:
  """Give a buffer to every contraction another reduce reads: nested in that reduce's loop, its output dims become
  reduce dims there, and a reduce dim gets no register tile (a matmul summed to a loss ran ~30x slower nested)."""
  for r in order:
    if r.op is not Ops.REDUCE_AXIS: continue
    for inner in _kernel_walk(r.src, realize, stop=lambda u: u.op is Ops.REDUCE_AXIS):
      if inner.op is Ops.REDUCE_AXIS and inner not in realize and _contraction(inner, realize): realize.add(inner)

# A contraction whose operands are both read along strided rows (a weight gradient, the sum over batch x tokens of
# grad[t, o] * x[t, i]) streams K rows of both operand panels for every register tile; past a few hundred rows the
# panels no longer stay in the L1 cache and each tile reads them again from L2. Split into chunks of about
# SPLIT_CHUNK rows (one kernel writes the partial sums, a second adds them), a chunk's panels stay cached across the
# tiles: the blocking over K a BLAS does. (A 768 x 256 weight gradient over 16 x 128 tokens, two cores: 10.9 -> 4.6 ms.)
# Operands contiguous along the reduction (a forward x @ W.T) are read as a few sequential streams: left alone.
SPLIT_CHUNK, SPLIT_MIN_CHUNK, SPLIT_MIN_REUSE = 256, 64, 32

def _merged_reduce(r: UOp) -> tuple[UOp, tuple[int, ...]]:
  """r's source and reduced axes, adjacent reduced axes merged into one (batch x tokens: one range the chunks split
  evenly, not a short outer range and a long inner one)."""
  src, red = r.src[0], r.arg[1]
  if len(red) > 1 and red == tuple(range(red[0], red[-1] + 1)):
    src = src.reshape(src.shape[:red[0]] + (prod(src.shape[a] for a in red),) + src.shape[red[-1] + 1:])
    red = (red[0],)
  return src, red

def _split_plan(r: UOp) -> tuple[int, int] | None:
  """(axis, part) to split reduce r at (axes of _merged_reduce's source): the reduced axes inside `axis` stay in a
  chunk, and `part` elements of axis itself; None where r is not a long contraction over strided rows."""
  if r.arg[0] is not Ops.ADD or int(SPLIT_REDUCE) <= 0 or not all(isinstance(n, int) for n in r.src[0].shape): return None
  if prod(r.src[0].shape[a] for a in r.arg[1]) < int(SPLIT_REDUCE): return None
  if len(ops := _expanded_operands(r, set(), SPLIT_MIN_REUSE)) < 2: return None
  for e in ops:
    # (an operand expanded below a reshape, as a quantized weight's blocks are, is not read along r's axes: left alone)
    st = view_strides(e) if e.shape == r.src[0].shape else None
    if st is None or abs(st[r.arg[1][-1]]) == 1: return None   # read along the reduction: sequential streams
  src, red = _merged_reduce(r)
  inner = 1
  for a in reversed(red):
    n = src.shape[a]
    if inner * n <= SPLIT_CHUNK: inner *= n; continue
    part = next(d for d in range(SPLIT_CHUNK // inner, 0, -1) if n % d == 0)
    return (a, part) if inner * part >= SPLIT_MIN_CHUNK else None
  return None

def _store_strides(r: UOp, users: dict[UOp, list[UOp]]) -> tuple[int, ...] | None:
  """Strides of r's axes in the buffer r is stored to when only reshapes and permutes lie between them (a weight
  gradient written transposed), else None."""
  chain = [r]
  while len(us := users.get(chain[-1], ())) == 1 and us[0].op in (Ops.RESHAPE, Ops.PERMUTE): chain.append(us[0])
  st: tuple[int, ...] | None = strides_for_shape(chain[-1].shape)
  for m in reversed(chain[1:]):   # from the stored node down to r: each op undone
    if m.op is Ops.PERMUTE: st = tuple(st[m.arg.index(i)] for i in range(len(m.arg)))
    else: st = reshape_strides(m.shape, st, m.src[0].shape)
    if st is None: return None
  return st

def _split_reduce(r: UOp, axis: int, part: int, store: tuple[int, ...] | None) -> UOp:
  """r as a sum of chunk sums: the partial sums (CONTIGUOUS: a buffer of their own, laid out like r's store so the
  kernel adding them reads and writes along the same axis), then a reduce over them."""
  src, red = _merged_reduce(r)
  if store is not None and red != r.arg[1]: store = store[:r.arg[1][0]] + (0,) + store[r.arg[1][-1] + 1:]   # merged: one
  n = src.shape[axis]
  inside, outer = tuple(a for a in red if a > axis), tuple(a for a in red if a <= axis)
  if part > 1:   # axis -> (n // part, part): the first counts the chunks, the second is inside each
    src = src.reshape(src.shape[:axis] + (n // part, part) + src.shape[axis + 1:])
    inside = (axis + 1,) + tuple(a + 1 for a in inside)
    if store is not None: store = store[:axis] + (0, 0) + store[axis + 1:]
  partial = src.reduce(Ops.ADD, inside)
  # the chunk axes outermost, then r's axes as its store orders them
  order = tuple(sorted(range(len(partial.shape)), key=lambda a: (a not in outer, -(store[a] if store else 0), a)))
  inverse = tuple(order.index(a) for a in range(len(order)))
  partial = UOp(Ops.CONTIGUOUS, r.dtype, (partial.permute(order),)).permute(inverse)
  return partial.reduce(Ops.ADD, outer).reshape(r.shape)

def _split_long_reduces(order: list[UOp]) -> dict[UOp, UOp]:
  """{reduce: its split form} for every long contraction over strided rows among the nodes of order (a toposort)."""
  plans = {u: p for u in order if u.op is Ops.REDUCE_AXIS and (p := _split_plan(u)) is not None}
  if not plans: return {}
  users: dict[UOp, list[UOp]] = {}
  for u in order:
    for s in u.src: users.setdefault(s, []).append(u)
  return {r: _split_reduce(r, *p, _store_strides(r, users)) for r, p in plans.items()}

def create_schedule(targets: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  """Kernels (in dependency order) that realize `targets`, and what each realized node becomes."""
  order = UOp(Ops.SINK, dtypes.bool, tuple(targets)).toposort()
  split = _split_long_reduces(list(order))
  if not split: return _create_schedule(targets)
  memo = dict(split)
  items, becomes = _create_schedule([substitute(t, split, memo) for t in targets])
  # the callers know the graph's own nodes: a node above a split reduce was rebuilt (memo: old -> new)
  out = {u: v for u, v in becomes.items() if u in order}
  out.update((u, becomes[n]) for u, n in memo.items() if n is not u and n in becomes)
  return items, out

def _create_schedule(targets: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp]]:
  sink = UOp(Ops.SINK, dtypes.bool, tuple(targets))
  order = [u for u in sink.toposort() if u.op is not Ops.SINK]
  # a target that is a view of something realized anyway (a copy, a collective, a contiguous) is that view of its
  # buffer: no kernel copies it into another
  viewed = {t for t in targets if t.op in GroupOp.Movement and t.base.op in _OWN_BUFFER}
  realize: set[UOp] = {t for t in targets if not _is_buffer_view(t) and t not in viewed}
  has_reduce: dict[UOp, bool] = {}
  users: dict[UOp, list[UOp]] = {}
  for u in order:
    for x in u.src: users.setdefault(x, []).append(u)
  for u in order:
    if u.op in (Ops.CONTIGUOUS, Ops.ASSIGN): realize.add(u)
    if u.op in (Ops.COPY, Ops.ALLREDUCE, Ops.ALLGATHER):   # between buffers: the source gets one too
      realize.add(u)
      if u.src[0].op is not Ops.BUFFER and not (u.src[0].op is Ops.RESHAPE and u.src[0].src[0].op is Ops.BUFFER): realize.add(u.src[0])
    if (u.op is Ops.EXPAND or (u.op is Ops.PAD and max_numel(u.src[0].shape) > 1)) and has_reduce[u.src[0]]:
      # the reduces under an expand get buffers (fusing would recompute them per expanded element), and
      # so do those under a pad of more than one element (a cat/chunk gradient adds padded pieces: each
      # element would evaluate every piece); the cheap elementwise work after them is recomputed, unless it is
      # all their result is for (a convolution's normalization and activation): then it is their kernel's epilogue
      if _epilogue(u.src[0].base, realize, users): realize.add(u.src[0].base)
      else: realize.update(_top_reduces(u.src[0], realize))
      has_reduce[u.src[0]] = False
    has_reduce[u] = u not in realize and (u.op is Ops.REDUCE_AXIS or any(has_reduce.get(s, False) for s in u.src))
  _realize_expanded_chains(order, realize)
  _realize_nested_contractions(order, realize)
  # a reduce shared by two kernels gets its own buffer instead of being computed twice
  while True:
    counts: dict[UOp, int] = {}
    for r in realize:
      for red in _kernel_reduces(r, realize): counts[red] = counts.get(red, 0) + 1
    shared = {red for red, c in counts.items() if c > 1}
    if not shared: break
    realize |= shared

  items: list[ScheduleItem] = []
  becomes: dict[UOp, UOp] = {}
  producers: list[UOp] = []
  for u in order:
    if u not in realize: continue
    producers.append(u)
    if u.op is Ops.ASSIGN:
      out = substitute(u.src[0], becomes)
      items.append(ScheduleItem("assign", out, substitute(u.src[1], becomes)))
    elif u.op in (Ops.COPY, Ops.ALLREDUCE, Ops.ALLGATHER):
      src = substitute(u.src[0], becomes)
      out = new_buffer_for(u.device, u.shape, u.dtype)
      items.append(ScheduleItem("copy", out, src) if u.op is Ops.COPY else ScheduleItem("collective", out, src, arg=(u.op, u.arg)))
    else:
      out = new_buffer_for(u.device, u.shape, u.dtype)
      items.append(ScheduleItem("kernel", out, substitute(u.src[0] if u.op is Ops.CONTIGUOUS else u, becomes)))
    becomes[u] = out
  for t in viewed: becomes[t] = substitute(t, becomes)
  return _order_and_group(items, producers, realize), becomes

def structure(root: UOp) -> tuple[tuple, list[UOp], list[UOp], list[UOp]]:
  """A key for root's graph with its BUFFER nodes as numbered slots and its bound Variables without their values
  (the same structure over new buffers, or with other values, gives the same key), the graph's nodes in topological
  order, its BUFFER nodes in slot order, and its BIND nodes (the values the kernels read when they run)."""
  nodes = list(root.toposort())
  index = {u: i for i, u in enumerate(nodes)}
  slot = index.__getitem__
  bufs: list[UOp] = []
  binds: list[UOp] = []
  parts = []
  for u in nodes:
    if u.op is Ops.BUFFER:
      parts.append((Ops.BUFFER, u.dtype, u.arg[0], u.arg[1], len(bufs)))
      bufs.append(u)
    elif u.op is Ops.BIND:
      parts.append((Ops.BIND, u.dtype, u.src[0].arg, tuple(map(slot, u.src))))
      binds.append(u)
    elif (u.op in GroupOp.Movement and symbolic_arg(u.arg)) or (u.op is Ops.IOTA and isinstance(u.arg, UOp)):
      parts.append((u.op, u.dtype, unbind(u.arg), tuple(map(slot, u.src))))   # offsets and symbolic sizes
      binds_in(u.arg, binds)
    else: parts.append((u.op, u.dtype, u.argkey, tuple(map(slot, u.src))))   # 0.0 and -0.0 differ
  return tuple(parts), nodes, bufs, binds

def _slot(b: UOp, name: tuple) -> UOp: return UOp(Ops.BUFFER, b.dtype, (), (b.arg[0], b.arg[1], name))

def _rebind(it: ScheduleItem, subst: dict[UOp, UOp]) -> ScheduleItem:
  """The item over other buffers (`subst` maps each old BUFFER node to its new one)."""
  known = None if it.structure is None else (it.structure[0], [subst[b] for b in it.structure[1]])
  return ScheduleItem(it.kind, substitute(it.out, subst), substitute(it.value, subst), known, it.group, it.arg)

@dataclass(frozen=True)
class _Template:
  items: list[ScheduleItem]            # over slot BUFFERs
  becomes: list[tuple[int, UOp]]       # (position in the graph's topological order, view over slot BUFFERs)
  inputs: list[UOp]                    # slots of the graph's buffers, in slot order
  outputs: list[UOp]                   # slots of the buffers the schedule allocates
  binds: list[UOp]                     # the bound Variables of the graph it was made for (structure's order)

_schedule_cache: dict[tuple, _Template] = {}

@dataclass
class Scheduled:
  """A graph's schedule, from the cache: `key` names its structure; `subst` maps the template's slot BUFFERs to this
  graph's inputs and to freshly made outputs (`outputs`, in slot order); `becomes` as create_schedule's."""
  key: tuple
  inputs: list[UOp]
  outputs: list[UOp]
  becomes: dict[UOp, UOp]
  template: _Template
  subst: dict[UOp, UOp]
  fresh: list[ScheduleItem] | None = None   # the items, when they were just scheduled (not rebound)
  binds: list[UOp] = field(default_factory=list)   # the graph's bound Variables (write_vars before the launches)
  def items(self) -> list[ScheduleItem]:
    return self.fresh if self.fresh is not None else [_rebind(it, self.subst) for it in self.template.items]

def schedule_cached(targets: list[UOp]) -> Scheduled:
  """create_schedule, skipped for a graph whose structure was scheduled before: the cached kernels get this
  graph's buffers and freshly allocated outputs (rebound only when asked for: a launch plan may not need them)."""
  key, nodes, bufs, binds = structure(UOp(Ops.SINK, dtypes.bool, tuple(targets)))
  key = (key, int(GROUP_MAX), int(SPLIT_REDUCE))   # the flags change the schedule
  if (t := _schedule_cache.get(key)) is not None:
    outs = [new_buffer(o.arg[0], o.arg[1], o.dtype) for o in t.outputs]
    # (and the Variables' values: a symbolic shape of a view the schedule hands back holds them; the kernels read theirs
    # when they run)
    subst = {**dict(zip(t.inputs, bufs)), **dict(zip(t.outputs, outs))}
    values = {a: b for a, b in zip(t.binds, binds) if a is not b}
    return Scheduled(key, bufs, outs, {nodes[i]: rebind(substitute(v, subst), values) for i, v in t.becomes}, t, subst, binds=binds)
  items, becomes = create_schedule(targets)
  # each kernel's own structure, kept with the template: a repeated graph's kernels then skip computing it
  items = [it if it.kind in ("copy", "collective") else
           ScheduleItem(it.kind, it.out, it.value, structure(UOp(Ops.SINK, it.out.dtype, (it.out, it.value)))[::2], it.group)
           for it in items]
  slots = {b: _slot(b, ("in", i)) for i, b in enumerate(bufs)}
  outs = [it.out.base for it in items if it.kind != "assign"]
  slots.update({b: _slot(b, ("out", j)) for j, b in enumerate(outs)})
  index = {u: i for i, u in enumerate(nodes)}
  if len(_schedule_cache) >= 4096: _schedule_cache.clear()   # bounded: graphs of many shapes
  t = _schedule_cache[key] = _Template([_rebind(it, slots) for it in items],
                                       [(index[n], substitute(v, slots)) for n, v in becomes.items()],
                                       [slots[b] for b in bufs], [slots[b] for b in outs], binds)
  return Scheduled(key, bufs, outs, becomes, t, {v: k for k, v in slots.items()}, items, binds)

# a reduction joins a launch group only when its whole loop nest is this small. A group holds at most GROUP_MAX
# kernels (one compile unit: a bigger one compiles slower, and a change in one kernel recompiles all of it)
GROUP_REDUCE_WORK = 1 << 16
# a kernel of more elements than this that reads a group member at other elements starts the next group
GROUP_CHAIN_WORK = 1 << 13

def _groupable(u: UOp, realize: set[UOp]) -> bool:
  """May the kernel computing the realized node u share a program with others? Elementwise kernels and small
  reductions: for them the launch costs as much as the work. A big kernel gains nothing from a group."""
  if u.op in (Ops.COPY, Ops.ALLREDUCE, Ops.ALLGATHER) or max_numel(u.shape) == 0: return False
  reduces = _kernel_reduces(u, realize) | ({u} if u.op is Ops.REDUCE_AXIS else set())
  return all(max_numel(r.src[0].shape) <= GROUP_REDUCE_WORK for r in reduces)

def _moved_inputs(u: UOp, realized: set[UOp]) -> set[UOp]:
  """The realized nodes the kernel for u reads through a view that moves elements (a permute, shrink, pad, flip or
  expand on the way): it reads them at other elements than it writes, so it cannot share a loop nest with them."""
  srcs = u.src[1:] if u.op is Ops.ASSIGN else u.src
  stack, seen, out = [(s, False) for s in srcs], set(), set()
  while stack:
    v, moved = stack.pop()
    if (v, moved) in seen: continue
    seen.add((v, moved))
    if v in realized or v.op is Ops.BUFFER:
      if moved: out.add(v)
      continue
    stack.extend((s, moved or (v.op in GroupOp.Movement and v.op is not Ops.RESHAPE)) for s in v.src)
  return out

def _cluster_shapes(members: list[int], after: list[set[int]], items: list[ScheduleItem]) -> list[int]:
  """The group's kernels in a dependency order that keeps kernels of one output shape together (consecutive
  elementwise kernels of one shape become one loop nest: codegen/group.py): the next kernel has the last one's
  shape if one is ready, else it is the smallest ready one (a step counter, a bias correction: the scalars the
  bigger kernels read)."""
  inside, placed, order = set(members), set(), []
  while len(order) < len(members):
    ready = [i for i in members if i not in placed and (after[i] & inside) <= placed]
    last = items[order[-1]].out.shape if order else None
    i = next((i for i in ready if items[i].out.shape == last), None)
    if i is None: i = min(ready, key=lambda i: max_numel(items[i].out.shape))
    placed.add(i); order.append(i)
  return order

def _between_devices(it: ScheduleItem) -> bool:
  """A copy from one compute device to another (not a file's bytes, DISK, going in)."""
  src, dst = it.value.device, it.out.device
  return src != dst and not is_disk(src) and not is_disk(dst)

def _order_and_group(items: list[ScheduleItem], producers: list[UOp], realize: set[UOp]) -> list[ScheduleItem]:
  """Dependency order, plus: a kernel that reads a buffer's old value runs before the ASSIGN that overwrites it
  (unless it consumes that ASSIGN's result). Groupable kernels that are ready together get one group number:
  kernels that must wait for nothing else run first, so the groups collect as many kernels as they can."""
  groupable = [int(GROUP_MAX) > 1 and _groupable(u, realize) for u in producers]
  # what another device sends: a copy between two compute devices of this process (1), a collective between MPI ranks (2)
  sent = [2 if it.kind == "collective" else 1 if it.kind == "copy" and _between_devices(it) else 0 for it in items]
  if not any(it.kind == "assign" for it in items) and sum(groupable) < 2 and not any(sent): return items
  pos = {u: i for i, u in enumerate(producers)}
  after: list[set[int]] = []
  for u in producers:   # the realized nodes each kernel consumes directly
    srcs = u.src[1:] if u.op is Ops.ASSIGN else u.src
    after.append({pos[r] for r in _inputs(srcs, realize) if r in pos})
  if any(it.kind == "assign" for it in items):
    ancestors: list[set[int]] = []
    for d in after: ancestors.append(set(d).union(*(ancestors[j] for j in d)))
    # by memory, not by node: a lazy write goes through a fresh BUFFER node over the same memory (nn/_inplace.py)
    memory = lambda b: id(b.buffer if b.buffer is not None else b)
    reads = [{memory(b) for b in it.value.toposort() if b.op is Ops.BUFFER} for it in items]
    for a, it in enumerate(items):
      if it.kind != "assign": continue
      target = memory(it.out.base)
      for j, rd in enumerate(reads):
        if j != a and target in rd and a not in ancestors[j]: after[a].add(j)
  # Kahn's algorithm, the lowest schedule position first among the ready kernels
  waiting = [len(a) for a in after]
  users: list[list[int]] = [[] for _ in items]
  for i, a in enumerate(after):
    for d in a: users[d].append(i)
  ready_alone: list[tuple[bool, int]] = []
  ready_group: list[int] = []
  # a kernel that reads what another device sent waits until nothing else is ready. A collective's readers: it then has
  # the rest of the work's time to complete (a gradient's allreduce beside the rest of the backward pass, the
  # optimizer's updates after it, as DDP orders them), and the ranks' skew is absorbed instead of waited for at each
  # update. A copy's readers (released first): each device of this process gets the work it can do alone before the
  # work that waits for another (devices that run their launches side by side: the CPU devices' queues, GPUs)
  on_network: list[list[int]] = [[], [], []]   # by what they wait for: (nothing), a copy, a collective
  delayed = [False] * len(items)   # released from on_network: nothing else was ready
  def release(i: int) -> None:
    # a collective first: it runs while the kernels after it do (engine/realize.py)
    if not delayed[i] and (wait := max((sent[j] for j in after[i]), default=0)): on_network[wait].append(i)
    elif groupable[i]: heapq.heappush(ready_group, i)
    else: heapq.heappush(ready_alone, (items[i].kind != "collective", i))
  for i, w in enumerate(waiting):
    if w == 0: release(i)
  def finish(i: int) -> None:
    for u in users[i]:
      waiting[u] -= 1
      if waiting[u] == 0: release(u)
  out: list[ScheduleItem] = []
  groups = 0
  while ready_alone or ready_group or on_network[1] or on_network[2]:
    if not ready_alone and not ready_group:
      k = 1 if on_network[1] else 2
      waited, on_network[k] = on_network[k], []
      for i in waited:
        delayed[i] = True
        release(i)
    if ready_alone:   # what must run alone runs first: more kernels are ready for the next group
      i = heapq.heappop(ready_alone)[1]
      out.append(items[i]); finish(i)
      continue
    # every ready kernel, and those that become ready through the group (it runs its kernels in order)
    device = items[ready_group[0]].out.base.arg[0]
    members: list[int] = []
    other_device: list[int] = []
    later: list[int] = []
    while ready_group and len(members) < int(GROUP_MAX):
      i = heapq.heappop(ready_group)
      if items[i].out.base.arg[0] != device: other_device.append(i); continue
      # a big kernel that reads a member at other elements waits for the next group: it would not share a loop nest
      # with it, its launch costs nothing next to its work, and a chain of them (a sort's stages) would make every
      # group a different program to compile
      if max_numel(items[i].out.shape) > GROUP_CHAIN_WORK and members and \
         any(producers[j] in _moved_inputs(producers[i], realize) for j in after[i] & set(members)):
        later.append(i); continue
      members.append(i); finish(i)
    for i in other_device + later: heapq.heappush(ready_group, i)
    for i in _cluster_shapes(members, after, items):
      it = items[i]
      out.append(it if len(members) == 1 else ScheduleItem(it.kind, it.out, it.value, it.structure, groups))
    groups += 1
  if len(out) < len(items): raise RuntimeError("these in-place writes read each other's old values in a cycle; realize one of them first")
  return out
