"""MULTI: one tensor held on several devices, and the rewrite of its graph into one graph per device.

A sharded tensor is built like any other: its graph is over the whole (logical) tensor, its device is the tuple of
device names, and gradients are taken on that graph. Where it starts, a MULTI node holds the per-device pieces
(`Tensor.shard`): split along an axis (axis=int; the pieces in device order, sizes as balanced as possible, the
last ones may be one shorter, or empty) or a whole copy on each device (axis=None, replicated).

Before scheduling, `lower` rewrites such a graph into one ordinary graph per device (`Sharded`): an op runs on each
device's piece. The rules are a table, one row per op kind:
  * elementwise ops need their operands laid out alike: a replicated operand is sliced where the others are split
    (no data moves), an operand split differently is moved (`reshard`: each device copies the parts it lacks);
  * movement ops follow the split axis (a permute moves it, a pad or shrink of it makes the pieces ragged); a
    reshape that cannot keep the pieces whole, an expand or a flip of the split axis first gathers the whole tensor;
  * a reduction over the split axis reduces each piece, then an allreduce combines them (`allreduce`: naive, ring,
    hierarchical; written in copies, slices and adds like any other graph) into a replicated result;
  * COPY to one device gathers the pieces there; MSELECT takes one device's piece of a given layout.
Every kernel the rewrite makes is an ordinary single-device kernel, and every transfer an ordinary COPY.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Callable
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp
from petagrad.dtype import dtypes
from petagrad.helpers import ALLREDUCE, RING_MIN_BYTES, prod
from petagrad.device.world import rank_of, rank

Bounds = tuple[tuple[int, int], ...]

def split_bounds(n: int, k: int) -> Bounds:
  """(start, end) of each of k pieces of n elements: balanced, the first n % k pieces one longer.

  >>> split_bounds(10, 4)
  ((0, 3), (3, 6), (6, 8), (8, 10))
  """
  out, start = [], 0
  for i in range(k):
    size = n // k + (1 if i < n % k else 0)
    out.append((start, start + size)); start += size
  return tuple(out)

@dataclass(frozen=True)
class Sharded:
  """A multi-device value lowered: one single-device graph per device (in device order), split along axis (or each
  one the whole value: axis None)."""
  shards: tuple[UOp, ...]
  axis: int | None
  @property
  def devices(self) -> tuple[str, ...]: return tuple(s.device for s in self.shards)
  @property
  def bounds(self) -> Bounds | None:
    if self.axis is None: return None
    out, start = [], 0
    for s in self.shards:
      out.append((start, start + s.shape[self.axis])); start += s.shape[self.axis]
    return tuple(out)
  @property
  def shape(self) -> tuple[int, ...]:
    s = self.shards[0].shape
    return s if self.axis is None else s[:self.axis] + (sum(x.shape[self.axis] for x in self.shards),) + s[self.axis + 1:]
  def map(self, fn: Callable[[UOp], UOp], axis: int | None | str = "same") -> Sharded:
    return Sharded(tuple(fn(s) for s in self.shards), self.axis if axis == "same" else axis)   # type: ignore[arg-type]

# ---------------------------------------------------------------- building blocks (ordinary graphs)

def _rank(device: str) -> int:
  """The MPI rank holding a device (this process's for a device named without a rank)."""
  r = rank_of(device)
  return rank() if r is None else r

def _spans_ranks(devices: tuple[str, ...]) -> bool: return len({_rank(d) for d in devices}) > 1

def copy_to(u: UOp, device: str) -> UOp:
  """u on device. Between processes data moves only by collectives (ALLREDUCE, ALLGATHER): a copy out of another
  rank's device is a bug of the rewrite, refused here. (A copy from this rank's own device to another rank's stands
  for that rank copying its own data: it is never run here.)"""
  if u.device == device: return u
  if (src := rank_of(u.device)) is not None and src != rank() and _rank(device) == rank():
    raise RuntimeError(f"internal error: a copy from {u.device} (rank {src}) to {device} of this rank ({rank()}): ranks exchange data by collectives")
  return u.copy_to_device(device)

def _rank_groups(devices: tuple[str, ...]) -> list[list[int]]:
  """The positions of each rank's devices, rank by rank; the devices must be ordered rank by rank (world.devices())."""
  groups: dict[int, list[int]] = {}
  for i, d in enumerate(devices): groups.setdefault(_rank(d), []).append(i)
  if [r for r in groups] != sorted(groups) or any(g != list(range(g[0], g[-1] + 1)) for g in groups.values()):
    raise RuntimeError(f"devices {devices}: a tensor spanning MPI ranks needs its devices ordered rank by rank (petagrad.device.world.devices())")
  return list(groups.values())

def _shrink_axis(u: UOp, axis: int, start: int, end: int) -> UOp:
  return u.shrink(tuple((start, end) if i == axis else (0, d) for i, d in enumerate(u.shape)))

def cat(pieces: list[UOp], axis: int) -> UOp:
  """The pieces (on one device) joined along axis: each padded into place, the pieces added (one kernel, as
  Tensor.cat)."""
  pieces = [p for p in pieces if p.shape[axis] > 0] or pieces[:1]
  if len(pieces) == 1: return pieces[0]
  total, off, out = sum(p.shape[axis] for p in pieces), 0, None
  for p in pieces:
    pp = p.pad(tuple((off, total - off - p.shape[axis]) if i == axis else (0, 0) for i in range(len(p.shape))))
    off += p.shape[axis]
    out = pp if out is None else out.alu(Ops.OR if p.dtype == dtypes.bool else Ops.ADD, pp)
  assert out is not None
  return out

def reshard(x: Sharded, axis: int | None, bounds: Bounds | None = None) -> Sharded:
  """x laid out split along axis at bounds (default: balanced) or replicated (axis None). A replicated x is sliced
  where it is kept (no data moves); otherwise each device copies the parts of the other devices' pieces it lacks."""
  n = len(x.shards)
  if axis is not None and bounds is None: bounds = split_bounds(x.shape[axis], n)
  if x.axis == axis and x.bounds == bounds: return x
  if x.axis is not None and _spans_ranks(x.devices): x = _allgather(x)   # every rank gets it all first (a collective)
  if x.axis == axis and x.bounds == bounds: return x
  if x.axis is None:   # replicated: every device already has all of it
    assert axis is not None and bounds is not None
    return Sharded(tuple(_shrink_axis(s, axis, b, e) for s, (b, e) in zip(x.shards, bounds)), axis)
  xb = x.bounds
  assert xb is not None
  out = []
  for i, dev in enumerate(x.devices):
    pieces = []
    for k, (s, (ob, oe)) in enumerate(zip(x.shards, xb)):
      if axis == x.axis:   # the same axis, other bounds: the overlap of the two ranges
        b, e = (bounds[i] if bounds is not None else (0, x.shape[axis]))
        lo, hi = max(b, ob), min(e, oe)
        if lo >= hi: continue
        piece = _shrink_axis(s, axis, lo - ob, hi - ob)
      else:
        piece = s if axis is None else _shrink_axis(s, axis, *bounds[i])   # type: ignore[index]
      if piece.size == 0: continue
      pieces.append(copy_to(piece, dev))
    if not pieces:   # this device's part is empty
      shape = tuple(0 if d == axis else size for d, size in enumerate(x.shape))
      pieces = [UOp.const(x.shards[i].dtype, 0, dev, shape)]
    out.append(cat(pieces, x.axis))
  return Sharded(tuple(out), axis)

def _allgather(x: Sharded) -> Sharded:
  """x split over the devices of several ranks, whole on every device: each rank joins its devices' pieces on its first
  device, an ALLGATHER over the ranks joins those (rank by rank), and each device gets a copy from its rank's first."""
  assert x.axis is not None
  groups = _rank_groups(x.devices)
  sizes = tuple(sum(x.shards[i].shape[x.axis] for i in g) for g in groups)
  ranks = tuple(_rank(x.devices[g[0]]) for g in groups)
  out: list[UOp] = [x.shards[0]] * len(x.shards)
  nd = len(x.shape)
  front = (x.axis,) + tuple(i for i in range(nd) if i != x.axis)   # MPI joins blocks of memory: the axis goes first
  back = tuple(front.index(i) for i in range(nd))
  for g in groups:
    lead = x.devices[g[0]]
    mine = cat([copy_to(x.shards[i], lead) for i in g], x.axis).permute(front)
    full = UOp(Ops.ALLGATHER, mine.dtype, (mine,), (0, sizes, ranks)).permute(back)
    for i in g: out[i] = copy_to(full, x.devices[i])
  return Sharded(tuple(out), None)

def gather(x: Sharded, device: str) -> UOp:
  """The whole of x on one device: the pieces copied there and joined (a replicated x: the copy already there, or the
  first device's). Across ranks every rank gathers (a collective): the device must be one of this rank's."""
  if x.axis is not None and _spans_ranks(x.devices): x = _allgather(x)
  if x.axis is None and _spans_ranks(x.devices): return copy_to(next(s for s in x.shards if _rank(s.device) == rank()), device)
  if x.axis is None: return next((s for s in x.shards if s.device == device), copy_to(x.shards[0], device))
  return cat([copy_to(s, device) for s in x.shards if s.shape[x.axis] > 0] or [copy_to(x.shards[0], device)], x.axis)

# ---------------------------------------------------------------- allreduce

def _combine(op: Ops, a: UOp, b: UOp) -> UOp:
  """a op b; narrow floats are combined in float32 and stored back narrow (what travels keeps the narrow dtype)."""
  if a.dtype in (dtypes.float16, dtypes.bfloat16): return a.cast(dtypes.float32).alu(op, b.cast(dtypes.float32)).cast(a.dtype)
  if op is Ops.ADD and a.dtype == dtypes.bool: return a.alu(Ops.OR, b)
  if op is Ops.MUL and a.dtype == dtypes.bool: return a.alu(Ops.AND, b)
  return a.alu(op, b)

def allreduce_naive(shards: tuple[UOp, ...], op: Ops) -> tuple[UOp, ...]:
  """Each device copies every other device's piece and combines them all (in device order: every device computes the
  same bits). n(n-1) transfers of the whole tensor: for small tensors, where a transfer costs its latency."""
  out = []
  for dev in (s.device for s in shards):
    acc = copy_to(shards[0], dev)
    for s in shards[1:]: acc = _combine(op, acc, copy_to(s, dev))
    out.append(acc)
  return tuple(out)

def allreduce_ring(shards: tuple[UOp, ...], op: Ops) -> tuple[UOp, ...]:
  """Reduce-scatter then all-gather around the ring of devices: the (flattened) tensor is cut into n chunks; chunk c
  travels from device c+1 around the ring, each device adding its own part, and ends complete on device c; then each
  complete chunk travels once around the ring. Each device sends and receives 2(n-1)/n of the tensor in all."""
  n, shape = len(shards), shards[0].shape
  flat = [s.reshape((prod(shape),)) for s in shards]
  chunks = split_bounds(prod(shape), n)
  done: list[UOp] = []   # chunk c, reduced, on device c
  for c, (b, e) in enumerate(chunks):
    acc = _shrink_axis(flat[(c + 1) % n], 0, b, e)
    for step in range(2, n + 1):
      k = (c + step) % n
      acc = _combine(op, copy_to(acc, shards[k].device), _shrink_axis(flat[k], 0, b, e))
    done.append(acc)
  have: list[list[UOp]] = [[] for _ in range(n)]   # device -> its copy of each chunk, in chunk order
  for c in range(n):
    piece = done[c]
    for step in range(n):
      k = (c + step) % n
      piece = copy_to(piece, shards[k].device)
      have[k].append(piece)
  return tuple(cat(have[k], 0).reshape(shape) for k in range(n))   # (each device's chunks are in chunk order)

def allreduce_hierarchical(shards: tuple[UOp, ...], op: Ops, groups: list[list[int]] | None = None) -> tuple[UOp, ...]:
  """Reduce inside each machine to its first device (the leader), allreduce among the leaders (ring), copy the result
  back to every device of each machine: the slow links between machines carry the tensor 2(m-1)/m times (m machines),
  not once per device. groups: the devices (positions) of each machine; by default they are all on this one (the
  devices of one process: a reduce to the first device and a copy back). Across MPI ranks, allreduce_ranks does this
  with the ranks of each machine.)"""
  if groups is None: groups = [list(range(len(shards)))]
  leaders = []
  for g in groups:
    lead = shards[g[0]].device
    acc = shards[g[0]]
    for i in g[1:]: acc = _combine(op, acc, copy_to(shards[i], lead))
    leaders.append(acc)
  reduced = allreduce_ring(tuple(leaders), op) if len(leaders) > 1 else tuple(leaders)
  out: list[UOp | None] = [None] * len(shards)
  for g, r in zip(groups, reduced):
    for i in g: out[i] = copy_to(r, shards[i].device)
  return tuple(o for o in out if o is not None)

def allreduce_ranks(shards: tuple[UOp, ...], op: Ops) -> tuple[UOp, ...]:
  """Across MPI ranks: each rank reduces its own devices' pieces on its first device (tensor ops), an ALLREDUCE combines
  those over the ranks through MPI (naive, ring or hierarchical by machine: runtime/mpi.py, the ALLREDUCE flag), and
  each device gets a copy from its rank's first. float16/bfloat16 go over MPI as float32 (MPI has no 16-bit floats),
  bools as int32."""
  groups = _rank_groups(tuple(s.device for s in shards))
  ranks = tuple(_rank(shards[g[0]].device) for g in groups)
  dt = shards[0].dtype
  wire = dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dtypes.int32 if dt == dtypes.bool else dt
  out: list[UOp] = list(shards)
  for g in groups:
    lead = shards[g[0]].device
    acc = shards[g[0]]
    for i in g[1:]: acc = _combine(op, acc, copy_to(shards[i], lead))
    red = UOp(Ops.ALLREDUCE, wire, (acc.cast(wire),), (op, ranks)).cast(dt)
    for i in g: out[i] = copy_to(red, shards[i].device)
  return tuple(out)

ALLREDUCES: dict[str, Callable[[tuple[UOp, ...], Ops], tuple[UOp, ...]]] = {
  "naive": allreduce_naive, "ring": allreduce_ring, "hier": allreduce_hierarchical}

def allreduce(shards: tuple[UOp, ...], op: Ops) -> tuple[UOp, ...]:
  """Every device gets op over all the pieces (same shape). Devices of several MPI ranks: allreduce_ranks. Devices of
  this process: the ALLREDUCE flag, or by size: naive below RING_MIN_BYTES or for 2 devices, else ring."""
  if len(shards) == 1: return shards
  if _spans_ranks(tuple(s.device for s in shards)): return allreduce_ranks(shards, op)
  choice = str(ALLREDUCE.value or "auto")
  if choice == "auto":
    nbytes = prod(shards[0].shape) * shards[0].dtype.itemsize
    choice = "naive" if nbytes < int(RING_MIN_BYTES) or len(shards) == 2 else "ring"
  if choice not in ALLREDUCES: raise ValueError(f"ALLREDUCE={choice!r}: expected one of auto, {', '.join(ALLREDUCES)}")
  if prod(shards[0].shape) < len(shards) and choice == "ring": choice = "naive"   # fewer elements than chunks
  return ALLREDUCES[choice](shards, op)

# ---------------------------------------------------------------- the rules: logical node -> per-device graphs

def _as_sharded(v, n: int, devices: tuple[str, ...], op: Ops) -> Sharded:
  if isinstance(v, Sharded):
    if v.devices != devices: raise RuntimeError(f"{op.name.lower()}: tensors are on different devices: {devices} and {v.devices}")
    return v
  if v.device_or_none is None: return Sharded((v,) * n, None)   # a constant of no device: the same everywhere
  raise RuntimeError(f"{op.name.lower()}: tensors are on different devices: {devices} and {v.device}")

def _aligned(node: UOp, srcs: list) -> tuple[list[Sharded], int | None]:
  """The sources laid out alike: as the first one split along an axis (the others resharded to it)."""
  first = next(s for s in srcs if isinstance(s, Sharded))
  devices = first.devices
  ss = [_as_sharded(s, len(devices), devices, node.op) for s in srcs]
  lead = next((s for s in ss if s.axis is not None and s.shards[0].shape != ()), None)
  if lead is None: return ss, None
  return [s if s.shape == () else reshard(s, lead.axis, lead.bounds) for s in ss], lead.axis

def _elementwise(node: UOp, srcs: list) -> Sharded:
  ss, axis = _aligned(node, srcs)
  return Sharded(tuple(node.replace(src=tuple(s.shards[i] for s in ss)) for i in range(len(ss[0].shards))), axis)

def _source(node: UOp, srcs: list) -> Sharded:
  """CONST and IOTA on a tuple of devices: the same on each."""
  return Sharded(tuple(node.replace(src=(UOp(Ops.DEVICE, dtypes.bool, (), d),)) for d in node.src[0].arg), None)

def _reshape(node: UOp, srcs: list) -> Sharded:
  x: Sharded = srcs[0]
  new = node.arg
  if x.axis is not None and prod(new) > 0:
    old, a = x.shape, x.axis
    prefix, old_inner = prod(old[:a]), prod(old[a + 1:])
    for na in range(len(new)):
      if prod(new[:na]) != prefix: continue
      inner = prod(new[na + 1:])
      if all(b * old_inner % inner == 0 for b, _ in x.bounds) and all(e * old_inner % inner == 0 for _, e in x.bounds):   # type: ignore[union-attr]
        return Sharded(tuple(s.reshape(new[:na] + ((e - b) * old_inner // inner,) + new[na + 1:])
                             for s, (b, e) in zip(x.shards, x.bounds)), na)   # type: ignore[arg-type]
  if x.axis is not None: x = reshard(x, None)   # the pieces would not stay whole: gather first
  return x.map(lambda s: s.reshape(new))

def _permute(node: UOp, srcs: list) -> Sharded:
  x: Sharded = srcs[0]
  return x.map(lambda s: s.permute(node.arg), None if x.axis is None else node.arg.index(x.axis))

def _expand(node: UOp, srcs: list) -> Sharded:
  x: Sharded = srcs[0]
  if x.axis is not None and node.arg[x.axis] != x.shape[x.axis]: x = reshard(x, None)
  return x.map(lambda s: s.expand(tuple(s.shape[i] if i == x.axis else d for i, d in enumerate(node.arg))))

def _pad(node: UOp, srcs: list) -> Sharded:
  x: Sharded = srcs[0]
  if x.axis is None: return x.map(lambda s: s.pad(node.arg))
  a, last = x.axis, len(x.shards) - 1
  def arg(i: int) -> tuple:
    return tuple(((p[0] if i == 0 else 0), (p[1] if i == last else 0)) if d == a else p for d, p in enumerate(node.arg))
  return Sharded(tuple(s.pad(arg(i)) for i, s in enumerate(x.shards)), a)

def _shrink(node: UOp, srcs: list) -> Sharded:
  x: Sharded = srcs[0]
  if x.axis is None: return x.map(lambda s: s.shrink(node.arg))
  a, (b, e) = x.axis, node.arg[x.axis]
  out = []
  for s, (ob, oe) in zip(x.shards, x.bounds):   # type: ignore[arg-type]
    lo, hi = min(max(b, ob), oe) - ob, min(max(e, ob), oe) - ob
    out.append(s.shrink(tuple((lo, max(lo, hi)) if d == a else r for d, r in enumerate(node.arg))))
  return Sharded(tuple(out), a)

def _flip(node: UOp, srcs: list) -> Sharded:
  x: Sharded = srcs[0]
  if x.axis is None or not node.arg[x.axis]: return x.map(lambda s: s.flip(node.arg))
  return reshard(reshard(x, None).map(lambda s: s.flip(node.arg)), x.axis, x.bounds)

def _reduce(node: UOp, srcs: list) -> Sharded:
  x: Sharded = srcs[0]
  op, axes = node.arg
  local = x.map(lambda s: s.reduce(op, axes) if prod(s.shape) else _identity(s, op, axes))
  if x.axis is None or x.axis not in axes: return local
  # a sum of float16/bfloat16 accumulates in float32 (Tensor.sum): the partial sums travel in the narrow dtype, as the
  # tensor itself would (half the bytes on the wire), and are combined in float32
  src = node.src[0]
  wire = src.src[0].dtype if src.op is Ops.CAST and src.src[0].dtype in (dtypes.float16, dtypes.bfloat16) and src.dtype == dtypes.float32 else None
  if wire is None: return Sharded(allreduce(local.shards, op), None)
  return Sharded(tuple(s.cast(node.dtype) for s in allreduce(tuple(s.cast(wire) for s in local.shards), op)), None)

def _identity(s: UOp, op: Ops, axes: tuple[int, ...]) -> UOp:
  """The reduction of an empty piece: op's identity, in the reduced shape."""
  shape = tuple(1 if i in axes else d for i, d in enumerate(s.shape))
  v = {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: s.dtype.min}[op]
  return UOp.const(s.dtype, v, s.device, shape)

def _multi(node: UOp, srcs: list) -> Sharded: return Sharded(tuple(srcs), node.arg)

def _mselect(node: UOp, srcs: list) -> UOp:
  i, axis, bounds = node.arg
  return reshard(srcs[0], axis, bounds).shards[i]

def _copy(node: UOp, srcs: list) -> Sharded | UOp:
  x, dest = srcs[0], node.src[1].arg
  if isinstance(dest, str): return gather(x, dest)   # to one device
  if not isinstance(x, Sharded): return Sharded(tuple(copy_to(x, d) for d in dest), None)   # to each of them
  if len(dest) == len(x.shards): return Sharded(tuple(copy_to(s, d) for s, d in zip(x.shards, dest)), x.axis)
  return Sharded(tuple(gather(x, d) for d in dest), None)

def _assign(node: UOp, srcs: list) -> Sharded:
  target, value = srcs
  if not isinstance(target, Sharded): raise RuntimeError(f"assign: value is on {value.devices}, target on {target.device}")
  v = reshard(_as_sharded(value, len(target.shards), target.devices, node.op), target.axis, target.bounds)
  return Sharded(tuple(node.replace(src=(t, s)) for t, s in zip(target.shards, v.shards)), target.axis)

RULES: dict[Ops, Callable[[UOp, list], Sharded | UOp]] = {
  Ops.CONST: _source, Ops.IOTA: _source, Ops.MULTI: _multi, Ops.MSELECT: _mselect, Ops.COPY: _copy, Ops.ASSIGN: _assign,
  Ops.RESHAPE: _reshape, Ops.PERMUTE: _permute, Ops.EXPAND: _expand, Ops.PAD: _pad, Ops.SHRINK: _shrink, Ops.FLIP: _flip,
  Ops.REDUCE_AXIS: _reduce,
  # (realize strips these; `layout` may meet them in a tensor's graph: the value is their first source)
  Ops.CUSTOM_GRAD: lambda node, srcs: srcs[0], Ops.CHECK: lambda node, srcs: srcs[0],
  Ops.AFTER: lambda node, srcs: srcs[0],   # (the order is kept on one device only)
  **{op: _elementwise for op in GroupOp.Elementwise | {Ops.DETACH, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD}}}

def lower(roots: list[UOp], memo: dict[UOp, Sharded | UOp] | None = None) -> dict[UOp, Sharded | UOp]:
  """Every node of the roots' graphs -> its per-device graphs (Sharded) or, on one device, its graph with the multi
  parts below it lowered. Iterative; memo: the map to fill (shared by calls over the same graphs)."""
  memo = {} if memo is None else memo
  for u in UOp(Ops.SINK, dtypes.bool, tuple(roots)).toposort():
    if u in memo or u.op is Ops.SINK: continue
    srcs = [memo[s] for s in u.src]
    if u.op is Ops.DEVICE or not (isinstance(u._device, tuple) or any(isinstance(s, Sharded) for s in srcs)):
      memo[u] = u if all(a is b for a, b in zip(srcs, u.src)) else u.replace(src=tuple(srcs))
      continue
    if (rule := RULES.get(u.op)) is None: raise RuntimeError(f"{u.op} is not supported on a tensor held on several devices")
    memo[u] = rule(u, srcs)
  return memo

def layout(u: UOp) -> tuple[int | None, Bounds | None]:
  """The axis a multi-device value is split along, and where (None, None: replicated)."""
  v = lower([u])[u]
  assert isinstance(v, Sharded)
  return v.axis, v.bounds
