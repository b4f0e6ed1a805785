"""Expansion of optimized ranges: unrolled ranges become copies, the vector range becomes SIMD lanes.

* upcast (output) range of size n: every STORE depending on it is copied n times with the range
  replaced by 0..n-1; reduces inside each copy stay separate, so each copy has its own accumulator.
* unroll (reduce) range of size n: the reduce's value becomes the combination of n copies.
* vector range of size n: every node depending on it becomes an n-lane vector node. Loads whose index
  grows by exactly 1 per lane become one vector load, by 2 per lane two vector loads and a shuffle (where the renderer
  has shuffles); other loads are gathered lane by lane.
"""
from __future__ import annotations
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp
from petagrad.uop.symbolic import simplify
from petagrad.uop.graph import substitute
from petagrad.dtype import dtypes
from petagrad.codegen.opt import int8_product

def _c(v: int) -> UOp: return UOp.const(dtypes.index, v)

def _ranges(ast: UOp, kind: str) -> list[UOp]:
  return sorted((u for u in ast.toposort() if u.op is Ops.RANGE and u.arg[2] == kind), key=lambda r: r.arg[0])

# the arg of the ops that combine the unrolled copies of a reduce's value: the linearizer may add the copies into the
# accumulator one by one instead (linearize.py: each product then becomes a fused multiply-add)
UNROLLED = "unrolled"

def _combine(op: Ops, vals: list[UOp], arg: str | None = None) -> UOp:
  """op over vals as a balanced tree: log2(n) dependent steps instead of n-1 (the lanes of a vector accumulator)."""
  if op is Ops.ADD and vals[0].dtype.is_bool: op = Ops.OR
  while len(vals) > 1:
    vals = [UOp(op, vals[i].dtype, (vals[i], vals[i + 1]), arg) if i + 1 < len(vals) else vals[i] for i in range(0, len(vals), 2)]
  return vals[0]

def tree_leaves(val: UOp, op: Ops, arg=None) -> list[UOp]:
  """The leaves of a tree of op nodes (only those whose arg is arg, when one is given), in order: with (ADD, UNROLLED)
  the copies an unrolled reduce's value adds up."""
  if val.op is op and (arg is None or val.arg == arg): return tree_leaves(val.src[0], op, arg) + tree_leaves(val.src[1], op, arg)
  return [val]

def _factor_shared(val: UOp) -> UOp:
  """An unrolled sum (UNROLLED adds) whose copies are products sharing a factor, the same node in each, multiplies by
  it once: a*d + b*d becomes (a + b)*d (the two 16-lane halves of a Q8_0 block both scaled by the block's d: a decode
  step 5-7% faster on one thread; on two the memory is the limit). Greedy: the factor most copies share first, then
  the others."""
  terms = tree_leaves(val, Ops.ADD, UNROLLED)
  factors = [tree_leaves(t, Ops.MUL) for t in terms]
  groups: list[UOp] = []
  left = list(range(len(terms)))
  while left:
    count: dict[UOp, int] = {}
    for i in left:
      for f in dict.fromkeys(factors[i]): count[f] = count.get(f, 0) + 1
    f, n = max(count.items(), key=lambda kv: kv[1])
    if n < 2: break
    with_f = [i for i in left if f in factors[i]]
    rests = []
    for i in with_f:
      rest = list(factors[i])
      rest.remove(f)
      rests.append(_combine(Ops.MUL, rest) if rest else UOp.const(val.dtype, 1.0))
    groups.append(UOp(Ops.MUL, val.dtype, (_combine(Ops.ADD, rests), f)))
    left = [i for i in left if i not in with_f]
  if not groups: return val
  return _combine(Ops.ADD, groups + [terms[i] for i in left], UNROLLED)

def _finished(op: Ops, val: UOp) -> UOp:
  """A reduce whose ranges are all unrolled or vectorized away: its value, started from the identity as a loop's
  accumulator is. That matters for a float sum only: a sum of -0.0s is +0.0 from the identity +0.0 (as with
  NOOPT, torch and numpy), -0.0 without it."""
  return UOp(Ops.ADD, val.dtype, (val, UOp.const(val.dtype, 0.0))) if op is Ops.ADD and val.dtype.is_float else val

def _monotone_mask(valid: UOp, v: UOp) -> bool:
  """Is `valid` an AND of comparisons of affine functions of v (true on an interval of v)?"""
  from petagrad.uop.symbolic import decompose
  stack = [valid]
  while stack:
    x = stack.pop()
    if x.op is Ops.AND: stack.extend(x.src); continue
    if x.op is not Ops.CMPLT: return False
    for side in x.src:
      terms, _ = decompose(side)
      if any(v in t.toposort() for t in terms if t is not v): return False
  return True

def _copy_at(root: UOp, r: UOp, i: int) -> UOp:
  """root with range r at i (substitute), where a select whose condition is then constant is its chosen side: the
  copy never holds the others (a stack of 36 pieces unrolled along its range: each copy one piece, so the
  simplification of the copies is 36 pieces' work, not 36 x 36)."""
  rep: dict[UOp, UOp] = {r: _c(i)}
  for u in root.toposort():
    if u in rep or not any(s in rep for s in u.src): continue
    src = tuple(rep.get(s, s) for s in u.src)
    if u.op is Ops.WHERE and (cond := simplify(src[0])).op is Ops.CONST: rep[u] = src[1] if cond.arg else src[2]
    else: rep[u] = u.replace(src=src)
  return rep.get(root, root)

def expand_unrolled(ast: UOp) -> UOp:
  """Replace unroll (reduce) and upcast (output) ranges by copies of the code."""
  for r in _ranges(ast, "unroll"):
    reds = [u for u in ast.toposort() if u.op is Ops.REDUCE and r in u.src[1:]]
    subst = {}
    for red in reds:
      copies = [substitute(red.src[0], {r: _c(i)}) for i in range(r.arg[1])]
      rest = tuple(x for x in red.src[1:] if x is not r)
      val = _combine(red.arg, copies, UNROLLED if rest else None)
      subst[red] = UOp(Ops.REDUCE, red.dtype, (val, *rest), red.arg) if rest else _finished(red.arg, val)
    ast = substitute(ast, subst)
  shared = {u: u.replace(src=(_factor_shared(u.src[0]), *u.src[1:])) for u in ast.toposort()
            if u.op is Ops.REDUCE and u.arg is Ops.ADD and u.dtype.is_float and u.src[0].op is Ops.ADD and u.src[0].arg == UNROLLED}
  if shared: ast = substitute(ast, shared)
  for r in _ranges(ast, "upcast"):
    stores = []
    for s in ast.src:
      stores.extend([_copy_at(s, r, i) for i in range(r.arg[1])] if r in s.toposort() else [s])
    ast = UOp(Ops.SINK, ast.dtype, tuple(stores))
  return simplify(ast)

def _halves(op: Ops, acc: UOp) -> UOp:
  """A horizontal reduce of vector acc by halving: op of its low and high halves, again, down to one lane (log2(n)
  vector ops where a tree of scalars takes n-1 ops and n lane reads). For a renderer that can take several lanes of a
  vector at once (a GEP whose arg is a tuple of lanes)."""
  n = acc.dtype.count
  while n > 1:
    h = n // 2
    dt = acc.dtype.scalar().vec(h) if h > 1 else acc.dtype.scalar()
    lo, hi = (UOp(Ops.GEP, dt, (acc,), tuple(range(a, a + h)) if h > 1 else a) for a in (0, h))
    acc, n = UOp(op, dt, (lo, hi)), h
  return acc

def _every_other(load: UOp, base: UOp, n: int) -> UOp:
  """The load of elements base, base+2, ..., base+2(n-1) (a stride-2 convolution's or pooling's input along the
  vector) as two contiguous vector loads and one shuffle, not n scalar loads. The second load starts at base+n-1, not
  base+n, so that together they read base..base+2n-2: exactly the span of the elements wanted, never past it."""
  gate = load.src[2:]
  a = UOp(Ops.LOAD, load.dtype.vec(n), (load.src[0], base) + gate)
  b = UOp(Ops.LOAD, load.dtype.vec(n), (load.src[0], simplify(base + (n - 1))) + gate)
  # element base+2i is lane 2i of a while 2i < n, then lane 2i-(n-1) of b: lane 2i+1 of the pair (a, b)
  return UOp(Ops.GEP, load.dtype.vec(n), (a, b), tuple(2 * i if 2 * i < n else 2 * i + 1 for i in range(n)))

_INT32_LANES = (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG, Ops.MAX, Ops.IDIV, Ops.MOD, Ops.VECTORIZE)

def _int32_lanes(x: UOp) -> UOp | None:
  """Index math x (a vector of lanes or a scalar) computed in 32-bit integers, where it and everything it is computed
  from fits in them (None where not). A lane mask compares vectors of indices: in 64-bit lanes those take several
  instructions each on x86 (GCC splits or scalarizes them), in 32-bit lanes one."""
  if not (-(1 << 31) <= x.vmin and x.vmax < (1 << 31)): return None
  if x.dtype.count == 1: return x if x.dtype == dtypes.int32 else x.cast(dtypes.int32)   # (broadcast by the op reading it)
  if x.op not in _INT32_LANES or None in (src := tuple(map(_int32_lanes, x.src))): return None
  return UOp(x.op, dtypes.int32.vec(x.dtype.count), src, x.arg)

def _dot4_lanes(x: UOp) -> UOp | None:
  """The n-lane vector x, a sum of int8 products (each widened to int32, maybe converted to float or int64 and scaled by
  a scalar), whose lanes a reduce adds up, as an n/4-lane vector with the same lane sum: every product becomes a DOT4
  of its int8 operands (exact in int32; the float conversion and the scale then apply to 4 products at once, which
  is the same sum). None where x has another form."""
  if x.dtype.count % 4: return None
  m = x.dtype.count // 4
  if (ab := int8_product(x)) is not None: return UOp(Ops.DOT4, dtypes.int32.vec(m), ab)
  if x.op is Ops.REDUCE and x.arg is Ops.ADD:   # (a long sum in blocks, Kernel.block_sums: the blocks' sums add up too)
    if (inner := _dot4_lanes(x.src[0])) is None: return None
    return UOp(Ops.REDUCE, inner.dtype, (inner, *x.src[1:]), x.arg)
  if x.op is Ops.ADD and all(s.dtype.count == x.dtype.count for s in x.src):
    if None in (src := tuple(_dot4_lanes(s) for s in x.src)): return None
    return UOp(Ops.ADD, src[0].dtype, src, x.arg)
  if x.op is Ops.MUL and x.dtype.is_float and (scalar := [s for s in x.src if s.dtype.count == 1]) and len(scalar) == 1:
    if (inner := _dot4_lanes(next(s for s in x.src if s.dtype.count > 1))) is None: return None
    return UOp(Ops.MUL, x.dtype.scalar().vec(m), (inner, scalar[0]))
  if x.op is Ops.CAST and x.src[0].dtype.scalar() == dtypes.int32 and (x.dtype.is_float or x.dtype.scalar() in (dtypes.int32, dtypes.int64)):
    if (inner := _dot4_lanes(x.src[0])) is None: return None
    return UOp(Ops.CAST, x.dtype.scalar().vec(m), (inner,))
  return None

def vectorize(ast: UOp, shuffles: bool = False, dot4_lanes: tuple[int, ...] = ()) -> UOp:
  """Turn the (single) vector range into SIMD lanes. shuffles: the renderer can take several lanes of a vector (or
  of a pair of vectors) at once: horizontal reduces of float and int lanes then halve the vector, and loads of every
  other element (stride 2 along the vector) are two vector loads and a shuffle. dot4_lanes: the vector sizes (int8
  lanes) the renderer has DOT4 for: a sum over such a vector of int8 products takes 4 products per lane (_dot4_lanes)."""
  vr = _ranges(ast, "vector")
  if not vr: return ast
  v = vr[0]
  n = v.arg[1]
  def lanes(u: UOp) -> list[UOp]: return [simplify(substitute(u, {v: _c(i)})) for i in range(n)]
  def contiguous_base(idx: UOp, step: int = 1) -> UOp | None:
    base = simplify(substitute(idx, {v: _c(0)}))
    return base if simplify(idx - base) is (v if step == 1 else simplify(v * step)) else None
  def shuffles_lanes(dt) -> bool:   # can the renderer take lanes of these vectors at once?
    return shuffles and n & (n - 1) == 0 and (dt.scalar().is_int or dt.scalar() in (dtypes.float32, dtypes.float64))
  depends: set[UOp] = set()   # nodes of the original AST that depend on v
  new: dict[UOp, UOp] = {}
  for u in ast.toposort():
    if u is v or any(s in depends for s in u.src): depends.add(u)
    src = tuple(new[s] for s in u.src)
    if u is v: new[u] = UOp(Ops.VECTORIZE, dtypes.index.vec(n), tuple(_c(i) for i in range(n)))
    elif u not in depends and u.op is not Ops.REDUCE and not any(x.dtype.count > 1 for x in src): new[u] = u if src == u.src else u.replace(src=src)
    elif u.op is Ops.LOAD:
      # index and validity are index math: work on the original scalar expressions
      valid = u.src[2] if len(u.src) > 2 else None
      base = contiguous_base(u.src[1])
      if base is not None and (valid is None or valid not in depends):
        new[u] = UOp(Ops.LOAD, u.dtype.vec(n), (u.src[0], base) + ((valid,) if valid is not None else ()))
      elif base is not None and valid is not None and _monotone_mask(valid, v):
        # contiguous but masked (padding): when the mask holds at both ends it holds for every lane,
        # so one vector load serves; otherwise each lane loads under its own mask
        every = simplify(substitute(valid, {v: _c(0)}) & substitute(valid, {v: _c(n - 1)}))
        new[u] = UOp(Ops.LOAD, u.dtype.vec(n), (u.src[0], base, new[valid], every))
      elif n >= 4 and shuffles_lanes(u.dtype) and (valid is None or valid not in depends) and (base := contiguous_base(u.src[1], 2)) is not None:
        new[u] = _every_other(u, base, n)
      else: new[u] = UOp(Ops.VECTORIZE, u.dtype.vec(n), tuple(lanes(u)))
    elif u.op is Ops.STORE:
      val = src[2]
      base = contiguous_base(u.src[1]) if u.src[1] in depends else None
      if base is not None and val.dtype.count == n: new[u] = UOp(Ops.STORE, u.dtype, (u.src[0], base, val))
      else:   # scatter lane by lane
        idxs = lanes(u.src[1]) if u.src[1] in depends else [u.src[1]] * n
        new[u] = UOp(Ops.SINK, u.dtype,
                     tuple(UOp(Ops.STORE, u.dtype, (u.src[0], idxs[i], UOp(Ops.GEP, val.dtype.scalar(), (val,), i) if val.dtype.count > 1 else val))
                                              for i in range(n)))
    elif u.op is Ops.REDUCE:
      val = src[0]
      rest = tuple(x for x in u.src[1:] if x is not v)
      if n in dot4_lanes and u.arg is Ops.ADD and v in u.src[1:] and (dot := _dot4_lanes(val)) is not None: val = dot
      acc = UOp(Ops.REDUCE, val.dtype, (val, *rest), u.arg) if rest else val
      # a reduce over the lanes combines them at the end (horizontal reduce)
      if v not in u.src[1:] or val.dtype.count == 1: new[u] = acc
      elif shuffles_lanes(val.dtype): new[u] = _halves(u.arg, acc)
      else: new[u] = _combine(u.arg, [UOp(Ops.GEP, u.dtype, (acc,), i) for i in range(val.dtype.count)])
      if not rest and v in u.src[1:]: new[u] = _finished(u.arg, new[u])
    elif u.op in GroupOp.Comparison and any(x.dtype == dtypes.index.vec(n) for x in src) and None not in (ns := tuple(map(_int32_lanes, src))):
      new[u] = UOp(u.op, u.dtype.vec(n), ns, u.arg)
    elif u.op in GroupOp.Elementwise:
      new[u] = UOp(u.op, u.dtype.vec(n) if any(x.dtype.count > 1 for x in src) else u.dtype, src, u.arg)
    elif u.op is Ops.SINK:
      stores: list[UOp] = []
      for x in src: stores.extend(x.src if x.op is Ops.SINK else [x])
      new[u] = UOp(Ops.SINK, u.dtype, tuple(stores))
    else: raise AssertionError(f"cannot vectorize {u.op}")
  return new[ast]
