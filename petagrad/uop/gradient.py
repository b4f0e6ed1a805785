"""Autograd on the tensor graph: one rule per primitive, in a table. Gradients are lazy graph too.

Each rule gets the node and the gradient of its output, and returns one gradient (or None) per source.
"""
from __future__ import annotations
import math
from typing import Callable
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp
from petagrad.uop.graph import rebase
from petagrad.uop.rewrite import UPat, PatternMatcher
from petagrad.dtype import dtypes

def full_like(u: UOp, v) -> UOp:
  """A constant with u's shape, dtype and device (a broadcast scalar: no memory)."""
  return UOp.const(u.dtype, v, u.device, u.shape)

def _where(c: UOp, a: UOp, b: UOp) -> UOp: return UOp(Ops.WHERE, a.dtype, (c, a, b))
def _cmp(a: UOp, b: UOp) -> UOp: return UOp(Ops.CMPNE, dtypes.bool, (a, b))
def _equal(a: UOp, b: UOp) -> UOp: return _cmp(a, b).alu(Ops.XOR, full_like(_cmp(a, b), True))

def _stored(x: UOp) -> UOp:
  """x's values read from memory: its movement ops over a CONTIGUOUS copy of what is under them (the forward values of
  custom-gradient wrappers), so every reader sees the same bits, and a sliding-window view is not copied k times."""
  chain: list[UOp] = []
  while x.op in GroupOp.Movement or x.op is Ops.CUSTOM_GRAD:
    if x.op is not Ops.CUSTOM_GRAD: chain.append(x)
    x = x.src[0]
  if x.op is not Ops.BUFFER: x = UOp(Ops.CONTIGUOUS, x.dtype, (x,))
  for m in reversed(chain): x = UOp(m.op, m.dtype, (x, *m.src[1:]), m.arg)
  return x

def _reduce_grad(g: UOp, node: UOp) -> tuple:
  x, (op, axes) = node.src[0], node.arg
  ge = g.expand(x.shape)
  if op is Ops.ADD: return (ge,)
  out = node.expand(x.shape)
  if op is Ops.MAX:
    # ties share the gradient evenly (like torch.amax). The mask compares stored values with their own maximum: x
    # computed again in another kernel (other unrolls, other rounding) than the forward's maximum may equal it
    # nowhere, and the gradient would be 0/0
    if x.base.op is not Ops.BUFFER:
      x = _stored(x)
      out = x.reduce(Ops.MAX, axes).expand(x.shape)
    # the tie count is float32 for float16/bfloat16 (more than 65504 ties would count as inf) and for ints
    cdt = x.dtype if x.dtype in (dtypes.float32, dtypes.float64) else dtypes.float32
    mask = _equal(x, out).cast(cdt)
    count = mask.reduce(Ops.ADD, axes).expand(x.shape)
    share = mask.alu(Ops.FDIV, count)
    if cdt == x.dtype: return (ge * share,)
    return ((ge.cast(cdt) * share).cast(ge.dtype),)
  # product: the product of the other elements, exact when x has zeros
  zero = _equal(x, full_like(x, 0))
  nz = zero.cast(x.dtype).reduce(Ops.ADD, axes).expand(x.shape)
  safe_x = _where(zero, full_like(x, 1), x)
  p_nz = safe_x.reduce(Ops.MUL, axes).expand(x.shape)
  no_zero = _equal(nz, full_like(nz, 0))
  one_zero_here = _equal(nz, full_like(nz, 1)).alu(Ops.AND, zero)
  other = _where(no_zero, p_nz.alu(Ops.FDIV, safe_x), _where(one_zero_here, p_nz, full_like(x, 0)))
  return (ge * other,)

def _expand_grad(g: UOp, node: UOp) -> tuple:
  src = node.src[0]
  axes = tuple(i for i, (s, n) in enumerate(zip(src.shape, node.shape)) if s == 1 and n != 1)
  # float16/bfloat16 gradients sum their broadcast copies in float32 (as Tensor.sum does; bfloat16 has 8 bits)
  if g.dtype in (dtypes.float16, dtypes.bfloat16): return (g.cast(dtypes.float32).reduce(Ops.ADD, axes).cast(g.dtype),)
  return (g.reduce(Ops.ADD, axes),)

def _max_grad(g: UOp, node: UOp) -> tuple:
  a, b = node.src
  half = full_like(a, 0.5)
  wa = _where(_cmp(a, b), _where(b < a, full_like(a, 1), full_like(a, 0)), half)
  return (g * wa, g * (full_like(a, 1) - wa))

def _multi_grad(g: UOp, node: UOp) -> tuple:
  """MULTI: each piece gets its part of the gradient. Copies on each device (axis None) are one value: the gradient
  goes to the first (it would count once per device otherwise)."""
  axis = node.arg
  if axis is None: return (UOp(Ops.MSELECT, g.dtype, (g,), (0, None, None)),) + (None,) * (len(node.src) - 1)
  bounds, start = [], 0
  for s in node.src: bounds.append((start, start + s.shape[axis])); start += s.shape[axis]
  return tuple(UOp(Ops.MSELECT, g.dtype, (g,), (i, axis, tuple(bounds))) for i in range(len(node.src)))

def _mselect_grad(g: UOp, node: UOp) -> tuple:
  """MSELECT: the gradient is g where the part came from (on every device when it was the whole value), 0 elsewhere."""
  i, axis, bounds = node.arg
  devices = node.src[0].device
  if axis is None: return (UOp(Ops.MULTI, g.dtype, tuple(g.copy_to_device(d) for d in devices), None),)
  def zeros(k: int) -> UOp:
    shape = node.src[0].shape[:axis] + (bounds[k][1] - bounds[k][0],) + node.src[0].shape[axis + 1:]
    return UOp.const(g.dtype, 0, devices[k], shape)
  return (UOp(Ops.MULTI, g.dtype, tuple(g if k == i else zeros(k) for k in range(len(devices))), axis),)

LN2 = math.log(2)

# (node, grad) -> gradients of node.src
grad_rules = PatternMatcher([
  (UPat(Ops.ADD, name="n"), lambda n, ctx: (ctx, ctx)),
  (UPat(Ops.SUB, name="n"), lambda n, ctx: (ctx, -ctx)),
  (UPat(Ops.NEG, name="n"), lambda n, ctx: (-ctx,)),
  (UPat(Ops.MUL, name="n"), lambda n, ctx: (ctx * n.src[1], ctx * n.src[0])),
  # d(a/b)/db = -(a/b)/b: no b*b that overflows while the result does not
  (UPat(Ops.FDIV, name="n"), lambda n, ctx: (ctx.alu(Ops.FDIV, n.src[1]), -(ctx * n).alu(Ops.FDIV, n.src[1]))),
  (UPat(Ops.MAX, name="n"), lambda n, ctx: _max_grad(ctx, n)),
  (UPat(Ops.WHERE, name="n"), lambda n, ctx: (None, _where(n.src[0], ctx, full_like(ctx, 0)), _where(n.src[0], full_like(ctx, 0), ctx))),
  (UPat(Ops.EXP2, name="n"), lambda n, ctx: (ctx * n * full_like(n, LN2),)),
  (UPat(Ops.LOG2, name="n"), lambda n, ctx: (ctx.alu(Ops.FDIV, n.src[0] * full_like(n, LN2)),)),
  (UPat(Ops.SIN, name="n"), lambda n, ctx: (ctx * (full_like(n, math.pi / 2) - n.src[0]).alu(Ops.SIN),)),
  (UPat(Ops.SQRT, name="n"), lambda n, ctx: (ctx.alu(Ops.FDIV, n * full_like(n, 2)),)),
  (UPat(Ops.RECIPROCAL, name="n"), lambda n, ctx: (-ctx * n * n,)),
  (UPat(Ops.CAST, name="n"), lambda n, ctx: (ctx.cast(n.src[0].dtype) if n.src[0].dtype.is_float else None,)),
  (UPat(Ops.REDUCE_AXIS, name="n"), lambda n, ctx: _reduce_grad(ctx, n)),
  (UPat(Ops.RESHAPE, name="n"), lambda n, ctx: (ctx.reshape(n.src[0].shape),)),
  (UPat(Ops.PERMUTE, name="n"), lambda n, ctx: (ctx.permute(tuple(sorted(range(len(n.arg)), key=lambda i: n.arg[i]))),)),
  (UPat(Ops.EXPAND, name="n"), lambda n, ctx: _expand_grad(ctx, n)),
  (UPat(Ops.PAD, name="n"), lambda n, ctx: (ctx.shrink(tuple((b, b + s) for (b, _), s in zip(n.arg, n.src[0].shape))),)),
  (UPat(Ops.SHRINK, name="n"), lambda n, ctx: (ctx.pad(tuple((b, s - e) for (b, e), s in zip(n.arg, n.src[0].shape))),)),
  (UPat(Ops.FLIP, name="n"), lambda n, ctx: (ctx.flip(n.arg),)),
  # the backward keeps the forward's kernel boundary: without it a chain of contiguous()-separated gathers
  # fuses into one kernel whose expression doubles with every stage
  (UPat({Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD}, name="n"), lambda n, ctx: (UOp(Ops.CONTIGUOUS, ctx.dtype, (ctx,)),)),
  (UPat(Ops.CUSTOM_GRAD, name="n"), lambda n, ctx: (None, *custom_backward[n.arg[0]](ctx, n))),
  (UPat({Ops.CHECK, Ops.AFTER}, name="n"), lambda n, ctx: (ctx, None)),
  (UPat(Ops.COPY, name="n"), lambda n, ctx: (ctx.copy_to_device(n.src[0].device), None)),
  (UPat(Ops.MULTI, name="n"), lambda n, ctx: _multi_grad(ctx, n)),
  (UPat(Ops.MSELECT, name="n"), lambda n, ctx: _mselect_grad(ctx, n)),
])
NO_GRAD = frozenset({Ops.DETACH, Ops.ASSIGN, Ops.BITCAST, Ops.TRUNC, Ops.IOTA, Ops.CONST, Ops.BUFFER}) | GroupOp.Comparison | GroupOp.IntOnly | \
  GroupOp.IntOrBool

# name -> backward(ctx, node) giving the gradient of each of node.src[1:] (None: no gradient), for CUSTOM_GRAD nodes;
# the layer that builds such a node registers its backward here (the convolution: petagrad/mixin/conv.py)
custom_backward: dict[str, Callable[[UOp, UOp], tuple[UOp | None, ...]]] = {}

def _stored_view(u: UOp) -> bool:
  """Is u a view of memory: of a buffer, or of a MULTI of buffer views (a realized tensor on several devices)?"""
  b = u.base
  return b.op is Ops.BUFFER or b.op is Ops.MULTI and all(s.base.op is Ops.BUFFER for s in b.src)

def _layout_copy_source(u: UOp) -> UOp | None:
  """For a view of a CONTIGUOUS of a view of a buffer (a copy made only to change the layout), the same view
  of the copy's source."""
  copy = u.base
  if copy.op is not Ops.CONTIGUOUS or not _stored_view(copy.src[0]): return None
  return rebase(u, copy.src[0])

def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """Gradients of root w.r.t. every node on a path to a target (reverse mode, iterative)."""
  order = list(root.toposort())
  on_path: set[UOp] = set()
  for u in order:   # children first: a node is on a path if it is a target or a source is
    if u.op is Ops.DETACH: continue
    if u in targets or any(s in on_path for s in u.src): on_path.add(u)
  grads: dict[UOp, UOp] = {root: root_grad}
  for u in reversed(order):
    if u not in grads or u not in on_path or u.op in NO_GRAD or not u.src: continue
    fn_out = None
    # the backward reads a layout copy's source view, not the copy: the copy's layout was chosen for the
    # forward kernel (a transposed weight), the backward kernels read the other way round
    srcs = tuple(_layout_copy_source(s) or s for s in u.src)
    n = u if srcs == u.src else u.replace(src=srcs)
    for pat, fn, _ in grad_rules.by_op.get(u.op, []):
      if pat.match(u, {}): fn_out = fn(n=n, ctx=grads[u]); break
    if fn_out is None: raise RuntimeError(f"no gradient rule for {u.op}")
    for s, g in zip(u.src, fn_out):
      if g is None or s not in on_path: continue
      grads[s] = grads[s] + g if s in grads else g
  return grads
