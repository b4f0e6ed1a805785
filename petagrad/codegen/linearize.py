"""Linearizer: a kernel AST -> the linear program (a list of UOps) that renderers print.

Every node is placed in the innermost loop it depends on: the output ("global") ranges open first; each
REDUCE becomes an accumulator, a loop nest over its ranges holding the nodes that depend on them (each right
inside the innermost of those loops it depends on), and an update. Nodes that do not depend on a reduce's ranges
are hoisted before its loop.

An elementwise kernel whose masks compare an output loop with constants (a padded copy: `0 < x`, `x < 17`) runs that
loop as consecutive loops over the pieces between those constants (`peel`), where each mask is known: the border
pieces store zeros, the middle one is a plain copy the C compiler vectorizes (no per-element selects).

A REDUCE over work-group ranges only (kind `group`, GPU-style devices) stays a REDUCE in the linear program: the
threads of the group combine their values through local memory (the renderer prints it). Its group ranges are launch
indices, listed with the output ranges.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp
from petagrad.dtype import DType
from petagrad.helpers import prod
from petagrad.uop.symbolic import simplify
from petagrad.uop.graph import substitute
from petagrad.codegen.expand import UNROLLED, tree_leaves

def reduce_identity(op: Ops, dtype: DType):
  if op is Ops.ADD: return 0
  if op is Ops.MUL: return 1
  assert op is Ops.MAX
  return dtype.min

@dataclass
class LinearProgram:
  uops: list[UOp]
  flops: int = 0                       # ALU work on data (not index math), over the whole launch
  global_ranges: list[UOp] = field(default_factory=list)
  # index math (computed from loop variables and constants): in bounds by construction, so it never overflows
  index_math: frozenset[UOp] = frozenset()

@dataclass
class _Scope:
  owner: UOp | None                   # the REDUCE that opens it (None: the kernel's root)
  depth: int
  nodes: list[UOp] = field(default_factory=list)

MAX_PEEL_PIECES = 16    # copies of an elementwise kernel's body that splitting its loops may make (a 2-d pad: 9)...
MAX_PEEL_NODES = 4000   # ...and of its nodes in all (a cat of many tensors, a sum of many shifted pads keep their masks)

def _is_index_math(u: UOp, index_math: set[UOp]) -> bool:
  """Is u computed from loop variables and constants only (given the nodes known to be)?"""
  return u.op in (Ops.RANGE, Ops.CONST) or (u.op in GroupOp.ALU and all(s in index_math for s in u.src))

def _peel_points(order: list[UOp], r: UOp) -> list[int]:
  """Where the masks of a kernel change along loop r: the constants r is compared with (r < c holds below c, c < r
  from c + 1 on), inside the loop's span."""
  pts = set()
  for u in order:
    if u.op is Ops.CMPLT:
      a, b = u.src
      if a is r and b.op is Ops.CONST: pts.add(int(b.arg))
      elif b is r and a.op is Ops.CONST: pts.add(int(a.arg) + 1)
  return sorted(p for p in pts if 0 < p < r.arg[1])

def _known_gates(body: UOp) -> UOp:
  """Loads whose mask is known: always (a plain load) or never (0, no load). A vector load under a lane mask whose lanes
  agree within a piece (simplified to one bool: lane + 4*r < 29 is r < 6 for every lane 0..3) is a load under that
  gate."""
  uniform = {u: UOp(Ops.LOAD, u.dtype, u.src[:3]) for u in body.toposort() if u.op is Ops.LOAD and len(u.src) == 4 and u.src[2].dtype.count == 1}
  if uniform: body = substitute(body, uniform)
  known = {u: (UOp(Ops.LOAD, u.dtype, u.src[:2]) if u.src[2].arg else UOp.const(u.dtype, 0)) for u in body.toposort()
           if u.op is Ops.LOAD and len(u.src) == 3 and u.src[2].op is Ops.CONST and (u.src[2].arg or u.dtype.count == 1)}
  return simplify(substitute(body, known)) if known else body

def linearize(sink: UOp, peel: bool = False) -> LinearProgram:
  """peel: the output loops of an elementwise kernel may be split where its masks change (loops, not launch indices: a
  device without work-groups)."""
  order = list(sink.toposort())
  # the ranges each node depends on (a REDUCE consumes its own)
  deps: dict[UOp, frozenset[UOp]] = {}
  for u in order:
    if u.op is Ops.RANGE: deps[u] = frozenset({u})
    else:
      d = frozenset().union(*(deps[s] for s in u.src))
      deps[u] = d - frozenset(u.src[1:]) if u.op is Ops.REDUCE else d
  # scopes: outer reduces first, so a reduce's parent scope is known before its body is placed.
  # Reduces over the same ranges in the same scope (copies made by UPCAST) share one loop nest,
  # each with its own accumulator: that is register tiling.
  root = _Scope(None, 0)
  scope_of_range: dict[UOp, _Scope] = {}
  group_of: dict[UOp, tuple] = {}
  groups: dict[tuple, list[UOp]] = {}
  group_scope: dict[tuple, _Scope] = {}
  def scope_for(d: frozenset[UOp]) -> _Scope:
    cands = [scope_of_range[r] for r in d if r in scope_of_range]
    return max(cands, key=lambda s: s.depth) if cands else root
  def grouped(u: UOp) -> bool: return u.op is Ops.REDUCE and len(u.src) > 1 and all(r.arg[2] == "group" for r in u.src[1:])
  for u in reversed(order):
    if u.op is Ops.REDUCE and not grouped(u):
      parent = scope_for(deps[u])
      key = (id(parent), u.src[1:])
      group_of[u] = key
      groups.setdefault(key, []).append(u)
      if key not in group_scope:
        group_scope[key] = _Scope(u, parent.depth + 1)
        for r in u.src[1:]: scope_of_range[r] = group_scope[key]
  for u in order:
    if u.op is Ops.RANGE or u.op is Ops.SINK: continue
    scope_for(deps[u]).nodes.append(u)
  # index math: computed from loop variables and constants only (not counted as FLOPs)
  index_math: set[UOp] = set()
  for u in order:
    if _is_index_math(u, index_math): index_math.add(u)
  # output loops: the threaded one outermost, then by id (a work-group's local ranges are output ranges too)
  global_ranges = sorted((u for u in order if u.op is Ops.RANGE and u.arg[2] in ("global", "thread", "local", "group")),
                         key=lambda r: (r.arg[2] != "thread", r.arg[0]))

  out: list[UOp] = []
  emitted: set[UOp] = set()
  new: dict[UOp, UOp] = {}
  flops = 0
  def emit_group(key: tuple, trip: int) -> None:
    nonlocal flops
    members = groups[key]
    ranges = members[0].src[1:]
    accs = []
    for u in members:
      init = UOp.const(u.dtype, reduce_identity(u.arg, u.dtype))
      acc = UOp(Ops.DEFINE_ACC, u.dtype, (init,), len(out))
      if init not in emitted: out.append(init); emitted.add(init)
      out.append(acc)
      accs.append(acc)
    # each node goes right inside the innermost of these loops it depends on: what depends on the outer loops only
    # (a quantized block's scale, the row part of an index) is computed once per outer iteration
    sc, pos = group_scope[key], {r: i for i, r in enumerate(ranges)}
    levels: list[list[UOp]] = [[] for _ in ranges]
    for u in sc.nodes: levels[max((pos[r] for r in deps[u] if r in pos), default=len(ranges) - 1)].append(u)
    inner_trip = trip
    for r, nodes in zip(ranges, levels):
      out.append(r)
      inner_trip *= r.arg[1]
      emit_scope(_Scope(sc.owner, sc.depth, nodes), inner_trip)
    for u, acc in zip(members, accs):
      val = new.get(u.src[0], u.src[0])   # (the value may be the loop index)
      # a register tile (several accumulators, so no add waits on its own accumulator's last one) adds an unrolled
      # sum's copies one by one: each product becomes a fused multiply-add (a 3x3 conv's tile: 3 FMAs, not a
      # multiply, 2 FMAs and an add). One accumulator keeps the copies' tree: one add on the loop-carried chain
      terms = tree_leaves(val, Ops.ADD, UNROLLED) if u.arg is Ops.ADD and len(members) >= 4 else [val]
      for t in terms: out.append(UOp(Ops.ACC_UPDATE, u.dtype, (acc, t), u.arg))
      flops += inner_trip * u.dtype.count
      new[u] = acc
    for r in reversed(ranges): out.append(UOp(Ops.ENDRANGE, r.dtype, (r,)))
  def emit_node(u: UOp, trip: int) -> None:
    nonlocal flops
    nu = u if not u.src else UOp(u.op, u.dtype, tuple(new.get(s, s) for s in u.src), u.arg)
    new[u] = nu
    if nu in emitted: return   # e.g. a constant that already is an accumulator's initial value
    emitted.add(nu)
    out.append(nu)
    if u.op in GroupOp.ALU and u not in index_math: flops += trip * u.dtype.count
    elif u.op is Ops.DOT4: flops += trip * u.dtype.count * 8   # (4 multiplies and 4 adds per lane)
    elif u.op is Ops.WMMA: flops += trip * 2 * 16 * 8 * 16 // 32   # (a warp's 16 x 8 x 16 multiply-adds, per thread)
  def emit_scope(sc: _Scope, trip: int) -> None:
    # a group is emitted when its last member comes up; nodes that need a member before then wait
    seen: dict[tuple, int] = {}
    waiting: set[UOp] = set()
    deferred: list[UOp] = []
    for u in sc.nodes:
      if u.op is Ops.REDUCE and not grouped(u):
        key = group_of[u]
        seen[key] = seen.get(key, 0) + 1
        if seen[key] < len(groups[key]): waiting.add(u); continue
        waiting.difference_update(groups[key])
        emit_group(key, trip)
        still = []
        for d in deferred:   # in order, so a deferred node sees the deferred nodes it needs
          if any(s in waiting for s in d.src): still.append(d)
          else: emit_node(d, trip); waiting.discard(d)
        deferred = still
        continue
      if any(s in waiting for s in u.src):
        waiting.add(u); deferred.append(u); continue
      emit_node(u, trip)
    assert not deferred, "a node waits for a reduce that never came"
  # a symbolic output loop's end (read from a Variable's buffer) is computed before the loops open
  for r in global_ranges:
    for e in (x for s in r.src for x in s.toposort()): emit_node(e, 1)
  pieces_of: dict[UOp, list[int]] = {}
  if peel and not groups:
    # the innermost loops first, while the copies of the body stay few (every piece is compiled: a max pool's backward,
    # a sum of 9 shifted pads, split every way kept gcc busy for 20 s)
    leaves = 1
    for r in reversed([r for r in global_ranges if r.arg[2] == "global" and not r.src]):
      if not (points := _peel_points(order, r)): continue
      if leaves * (len(points) + 1) > MAX_PEEL_PIECES or leaves * (len(points) + 1) * len(order) > MAX_PEEL_NODES: break
      pieces_of[r], leaves = points, leaves * (len(points) + 1)
  if pieces_of:
    # the loops' pieces one after another, each body simplified for its piece; what depends on no loop comes first
    outside = [u for u in root.nodes if not deps[u]]
    for u in outside: emit_node(u, 1)
    before, next_id, opened = set(emitted), [max(u.arg[0] for u in order if u.op is Ops.RANGE) + 1], set[UOp]()
    def emit_pieces(body: UOp, ranges: list[UOp], trip: int) -> None:
      if not ranges:
        emitted.clear(); emitted.update(before)   # (a node computed inside an earlier piece's loop is not visible here)
        for u in body.toposort():
          if u.op in (Ops.RANGE, Ops.SINK): continue
          if _is_index_math(u, index_math): index_math.add(u)
          emit_node(u, trip)
        return
      r, rest = ranges[0], ranges[1:]
      points = _peel_points(list(body.toposort()), r) if pieces_of.get(r) else []
      if not points:   # one loop (a loop of its own in each piece of an outer loop: every RANGE opens once)
        loop = r if r not in opened else UOp(Ops.RANGE, r.dtype, r.src, (next_id[0], *r.arg[1:]))
        if loop is not r:
          next_id[0] += 1
          body = substitute(body, {r: loop})
        opened.add(loop); index_math.add(loop)
        out.append(loop); emit_pieces(body, rest, trip * r.arg[1]); out.append(UOp(Ops.ENDRANGE, loop.dtype, (loop,)))
        return
      for lo, hi in zip([0] + points, points + [r.arg[1]]):
        piece = UOp(Ops.RANGE, r.dtype, (), (next_id[0], hi - lo, "global"))
        next_id[0] += 1
        index_math.add(piece)
        out.append(piece)
        emit_pieces(_known_gates(simplify(substitute(body, {r: piece + lo}))), rest, trip * (hi - lo))
        out.append(UOp(Ops.ENDRANGE, piece.dtype, (piece,)))
    emit_pieces(UOp(Ops.SINK, sink.dtype, tuple(u for u in sink.src if deps[u])), global_ranges, 1)
  else:
    for r in global_ranges: out.append(r)
    emit_scope(root, prod(r.arg[1] for r in global_ranges))
    for r in reversed(global_ranges): out.append(UOp(Ops.ENDRANGE, r.dtype, (r,)))
  return LinearProgram(_mma_accumulates(out), flops, global_ranges, frozenset(new[u] for u in index_math if u in new))

def _mma_accumulates(out: list[UOp]) -> list[UOp]:
  """A tensor-core product whose 4 results are only added to 4 accumulators (acc_i += wmma[i], the reduce over the
  steps of 16) takes the accumulators as its C (D = A @ B + C in the mma instruction), and the updates become plain
  assignments (acc_i = wmma[i]): no float add per result after each mma. The accumulators hold their values from the
  product to the updates: nothing between them writes one (their updates are the only writes), so C reads the same."""
  if not any(u.op is Ops.WMMA for u in out): return out   # (every kernel is linearized: most have no tensor-core product)
  users: dict[UOp, list[UOp]] = {}
  pos = {u: i for i, u in enumerate(out)}
  for u in out:
    for s in u.src: users.setdefault(s, []).append(u)
  loops = [i for i, u in enumerate(out) if u.op in (Ops.RANGE, Ops.ENDRANGE)]
  swap: dict[UOp, UOp] = {}
  for u in out:
    if u.op is not Ops.WMMA or len(u.src) != 12: continue
    geps = users.get(u, [])
    if any(g.op is not Ops.GEP for g in geps) or sorted(g.arg for g in geps) != [0, 1, 2, 3]: continue
    geps = sorted(geps, key=lambda g: g.arg)
    ups = [users.get(g, []) for g in geps]
    if not all(len(x) == 1 and x[0].op is Ops.ACC_UPDATE and x[0].arg is Ops.ADD and x[0].src[1] is g for x, g in zip(ups, geps)): continue
    updates = [x[0] for x in ups]
    accs = [x.src[0] for x in updates]
    # four accumulators, each updated only here, in the same loop iteration as the product (no loop opens or closes
    # between them: an update in an inner loop would otherwise add the product again at every inner step)
    if len(set(accs)) != 4 or any(sum(y.op is Ops.ACC_UPDATE for y in users[a]) != 1 for a in accs): continue
    if any(pos[u] < i < pos[x] for x in updates for i in loops) or any(pos[x] < pos[u] for x in updates): continue
    w = UOp(Ops.WMMA, u.dtype, u.src + tuple(accs), u.arg)
    swap[u] = w
    for g, x in zip(geps, updates):
      swap[g] = UOp(Ops.GEP, g.dtype, (w,), g.arg)
      swap[x] = UOp(Ops.ACC_UPDATE, x.dtype, (x.src[0], swap[g]), Ops.ASSIGN)
  return [swap.get(u, u) for u in out] if swap else out

def concat_programs(progs: list[LinearProgram], params: list[list[int]]) -> LinearProgram:
  """One program that runs `progs` one after another (a launch group): each program's parameter i becomes
  parameter params[k][i] of the whole. Every loop nest closes before the next program starts, so a program
  sees everything the ones before it wrote. Renderers take a node's latest emission as its value, so a node that
  appears in two programs (the same load, say) is computed again in each."""
  out: list[UOp] = []
  index_math: set[UOp] = set()
  for prog, pmap in zip(progs, params):
    new: dict[UOp, UOp] = {}
    for u in prog.uops:
      if u.op is Ops.DEFINE_GLOBAL: nu = UOp(Ops.DEFINE_GLOBAL, u.dtype, (), pmap[u.arg])
      else: nu = UOp(u.op, u.dtype, tuple(new.get(s, s) for s in u.src), u.arg) if u.src else u
      new[u] = nu
      out.append(nu)
    index_math.update(new[u] for u in prog.index_math if u in new)
  return LinearProgram(out, sum(p.flops for p in progs), [r for p in progs for r in p.global_ranges], frozenset(index_math))
