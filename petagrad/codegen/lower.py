"""Lowering: a kernel's tensor graph -> a kernel AST of loops over ranges with explicit index math.

Movement ops never copy: walking from the kernel output down to the buffers, each one rewrites the
tuple of index expressions (and a validity mask for padding). A reduce opens new ranges.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Callable
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp, symbolic_arg, sprod, smax
from petagrad.uop.symbolic import simplify
from petagrad.dtype import dtypes
from petagrad.helpers import strides_for_shape
from petagrad.uop.graph import substitute, var_buffer
from petagrad.uop.rewrite import graph_rewrite
from petagrad.codegen.collapse import collapse_rules

Idx = tuple[UOp, ...]
TRUE = UOp.const(dtypes.bool, True)

def _c(v: int | UOp) -> UOp: return v if isinstance(v, UOp) else UOp.const(dtypes.index, v)

Sz = Callable[[int | UOp], UOp]   # a size (int or symbolic) as a kernel expression (Variables read from their buffers)

def _segments(old: tuple, new: tuple) -> list[tuple[int, int, int, int]]:
  """Split a reshape into consecutive runs of old and new dims with equal products (old[a:b] <-> new[c:d]), the
  smallest such runs: each run's index math stays apart from the others' (a size-1 dim added next to <v=3> does not
  turn its index into a division by v), and a dim a run keeps as it is passes its index through (a slice's reshape
  that drops size-1 dims builds no division: a Winograd output transform's 1,233 reshapes took 0.7 s to lower)."""
  out, a, c = [], 0, 0
  while a < len(old) and c < len(new):
    b, d = a + 1, c + 1
    while sprod(old[a:b]) is not sprod(new[c:d]) and sprod(old[a:b]) != sprod(new[c:d]):
      if b < len(old) and (d == len(new) or smax(sprod(old[a:b])) <= smax(sprod(new[c:d]))): b += 1
      elif d < len(new): d += 1
      else: raise RuntimeError(f"cannot map the reshape {old} -> {new} to index math")   # (the Tensor layer checked the sizes)
    out.append((a, b, c, d))
    a, c = b, d
  if out: out[-1] = (out[-1][0], len(old), out[-1][2], len(new))   # trailing size-1 dims join the last run
  else: out = [(0, len(old), 0, len(new))]
  return out

def _reshape(u: UOp, idx: Idx, valid: UOp, sz: Sz) -> tuple[Idx, UOp]:
  old, new = u.src[0].shape, u.shape
  out: list[UOp] = []
  for a, b, c, d in _segments(old, new):
    if b - a == 1 and d - c == 1:   # a dim kept as it is
      out.append(idx[c])
      continue
    flat: UOp | None = None
    for i, st in zip(idx[c:d], strides_for_shape([sz(s) for s in new[c:d]])):
      term = i if isinstance(st, int) and st == 1 else i * _c(st)
      flat = term if flat is None else flat + term
    if flat is None: flat = _c(0)   # (no new dims: a reshape to a scalar)
    for k, (s, st) in enumerate(zip(old[a:b], strides_for_shape([sz(s) for s in old[a:b]]))):
      q = flat if isinstance(st, int) and st == 1 else flat // _c(st)
      out.append(_c(0) if s == 1 else (q % sz(s) if k else q))
  return tuple(out), valid

def _permute(u: UOp, idx: Idx, valid: UOp, sz: Sz) -> tuple[Idx, UOp]:
  out: list[UOp] = [_c(0)] * len(idx)
  for i, p in enumerate(u.arg): out[p] = idx[i]
  return tuple(out), valid

def _expand(u: UOp, idx: Idx, valid: UOp, sz: Sz) -> tuple[Idx, UOp]:
  return tuple(_c(0) if s == 1 and n != 1 else i for i, s, n in zip(idx, u.src[0].shape, u.shape)), valid

def _pad(u: UOp, idx: Idx, valid: UOp, sz: Sz) -> tuple[Idx, UOp]:
  out = []
  for i, (b, _), s in zip(idx, u.arg, u.src[0].shape):
    valid = valid & (_c(b - 1) < i) & (i < _c(b + sz(s)))   # always-true bounds fold away in simplify
    out.append(i - _c(b))
  return tuple(out), valid

def _shrink(u: UOp, idx: Idx, valid: UOp, sz: Sz) -> tuple[Idx, UOp]: return tuple(i + _c(b) for i, (b, _) in zip(idx, u.arg)), valid
def _flip(u: UOp, idx: Idx, valid: UOp, sz: Sz) -> tuple[Idx, UOp]:
  return tuple(sz(s) - 1 - i if f else i for i, f, s in zip(idx, u.arg, u.shape)), valid

# how each movement op maps its output indices to its input's: rules as data
VIEW_RULES: dict[Ops, Callable[[UOp, Idx, UOp, Sz], tuple[Idx, UOp]]] = {
  Ops.RESHAPE: _reshape, Ops.PERMUTE: _permute, Ops.EXPAND: _expand, Ops.PAD: _pad, Ops.SHRINK: _shrink, Ops.FLIP: _flip}

@dataclass
class Lowering:
  """State of lowering one kernel: its buffers (params), its ranges, and the Variables it reads (from buffers on its
  device)."""
  bufs: list[UOp]
  device: str = ""
  range_count: int = 0
  vars: dict[UOp, UOp] = field(default_factory=dict)
  def param(self, buf: UOp) -> UOp:
    if buf not in self.bufs: self.bufs.append(buf)
    return UOp(Ops.DEFINE_GLOBAL, buf.dtype, (), self.bufs.index(buf))
  def var(self, var: UOp) -> UOp:
    """Variable var's value in this kernel: loaded from its buffer, clamped to its range (the bounds the index math and
    the memory-safety reasoning rely on hold even if the buffer held something else)."""
    if (v := self.vars.get(var)) is None:
      _, lo, hi = var.arg
      x = UOp(Ops.LOAD, dtypes.int32, (self.param(var_buffer(var.arg, self.device)), _c(0))).cast(dtypes.index).maximum(_c(lo))
      v = self.vars[var] = -((-x).maximum(_c(-hi)))
    return v
  def sz(self, x: int | UOp) -> int | UOp:
    """A size or offset (an int, or an expression over Variables) with the Variables replaced by their values in this
    kernel."""
    if not isinstance(x, UOp): return x
    return substitute(x, {u: self.var(u.src[0] if u.op is Ops.BIND else u) for u in x.toposort() if u.op in (Ops.BIND, Ops.DEFINE_VAR)})
  def concrete(self, node: UOp) -> UOp:
    """A movement op whose arg holds Variables, with them replaced by their values in this kernel."""
    if not symbolic_arg(node.arg): return node
    return node.replace(arg=tuple(tuple(self.sz(v) for v in p) if type(p) is tuple else self.sz(p) for p in node.arg))
  def view(self, node: UOp, idx: Idx, valid: UOp) -> tuple[Idx, UOp]:
    """The indices (and validity) into node's source for indices idx into the movement op node."""
    # (a shrink's or pad's offsets are read as values; shapes stay as they are, their sizes converted where used)
    return _simp_ctx(*VIEW_RULES[node.op](self.concrete(node) if node.op in (Ops.SHRINK, Ops.PAD) else node, idx, valid, self.sz))
  def new_range(self, end: int | UOp, kind: str) -> UOp:
    """A loop 0..end-1. A symbolic end (a Variable's value, read when the kernel runs) is the RANGE's source; its arg
    holds the largest end (what bounds analysis and the memory it indexes assume), and optimizations leave it alone."""
    self.range_count += 1
    if isinstance(end, UOp): return UOp(Ops.RANGE, dtypes.index, (self.sz(end),), (self.range_count - 1, smax(end), kind))
    return UOp(Ops.RANGE, dtypes.index, (), (self.range_count - 1, end, kind))

def _simp_ctx(idx: Idx, valid: UOp) -> tuple[Idx, UOp]:
  s = simplify(UOp(Ops.SINK, dtypes.bool, idx + (valid,)))
  return s.src[:-1], s.src[-1]

def lower(out_view: UOp, value: UOp) -> tuple[UOp, list[UOp]]:
  """Kernel AST (a SINK of one STORE) computing `value` into the buffer under `out_view`.
  Returns the AST and the BUFFER nodes in parameter order (the output is parameter 0)."""
  assert out_view.base.op is Ops.BUFFER, f"kernel output must be a buffer view, got {out_view.base.op}"
  ctx = Lowering([], out_view.base.arg[0])
  out_param = ctx.param(out_view.base)   # (parameter 0, before any Variable's buffer: a symbolic size reads one)
  out_ranges = tuple(ctx.new_range(s, "global") if s != 1 else _c(0) for s in out_view.shape)
  # where the output goes: walk the output view down to its buffer
  u, idx, valid = out_view, out_ranges, TRUE
  while u.op in GroupOp.Movement:
    idx, valid = ctx.view(u, idx, valid)
    u = u.src[0]
  store_idx = idx[0]
  val = _build(value, out_ranges, ctx)
  store = UOp(Ops.STORE, dtypes.bool, (out_param, store_idx, val))
  # a sum that picks one element by an index comparison (a gather) is one gated load (codegen/collapse.py)
  return _used_params(simplify(graph_rewrite(simplify(UOp(Ops.SINK, dtypes.bool, (store,))), collapse_rules)), ctx.bufs)

def _used_params(ast: UOp, bufs: list[UOp]) -> tuple[UOp, list[UOp]]:
  """The AST with only the buffers it still reads or writes as parameters, renumbered 0..n-1 in order: simplification
  may drop every load of a buffer (`m.where(x, x)` is x), and a parameter nothing uses must not take a slot that
  the launch (a group, a launch plan) would bind to another buffer."""
  used = sorted({u.arg for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL})
  if used == list(range(len(bufs))): return ast, bufs
  renum = {u: UOp(Ops.DEFINE_GLOBAL, u.dtype, (), used.index(u.arg)) for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL}
  return substitute(ast, renum), [bufs[i] for i in used]

def _build(root: UOp, idx: Idx, ctx: Lowering) -> UOp:
  """Iterative top-down walk: each (node, index context) pair becomes one kernel expression."""
  memo: dict[tuple, UOp] = {}
  # stack entries: (node, idx, valid, children contexts or None, extra)
  stack: list[tuple] = [(root, idx, TRUE, None, None)]
  while stack:
    node, idx, valid, kids, extra = stack.pop()
    key = (node, idx, valid)
    if key in memo: continue
    if kids is None:
      kids, extra = _children(node, idx, valid, ctx)
      stack.append((node, idx, valid, kids, extra))
      stack.extend((k[0], k[1], k[2], None, None) for k in kids if k not in memo)
      continue
    memo[key] = _combine(node, idx, valid, [memo[k] for k in kids], extra, ctx)
  return memo[(root, idx, TRUE)]

def _children(node: UOp, idx: Idx, valid: UOp, ctx: Lowering) -> tuple[list[tuple], object]:
  op = node.op
  if op in GroupOp.Movement:
    cidx, cvalid = ctx.view(node, idx, valid)
    return [(node.src[0], cidx, cvalid)], (valid, cvalid)
  if op is Ops.REDUCE_AXIS:
    rops, axes = node.arg
    rngs = [ctx.new_range(node.src[0].shape[a], "reduce") for a in axes]
    cidx = list(idx)
    for a, r in zip(axes, rngs): cidx[a] = r
    return [(node.src[0], tuple(cidx), valid)], rngs
  if op in (Ops.BUFFER, Ops.CONST, Ops.IOTA, Ops.BIND): return [], None
  if op in (Ops.CUSTOM_GRAD, Ops.AFTER): return [(node.src[0], idx, valid)], None   # the other sources: backward / order only
  if op in GroupOp.Elementwise or op in (Ops.DETACH, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD):
    return [(s, idx, valid) for s in node.src], None
  raise RuntimeError(f"cannot lower {op} inside a kernel")

def _combine(node: UOp, idx: Idx, valid: UOp, vals: list[UOp], extra, ctx: Lowering) -> UOp:
  op = node.op
  if op is Ops.BUFFER:
    src = (ctx.param(node), idx[0]) + (() if valid is TRUE else (valid,))
    return UOp(Ops.LOAD, node.dtype, src)
  if op is Ops.CONST: return UOp.const(node.dtype, node.arg)
  if op is Ops.IOTA: return idx[0].cast(node.dtype)
  if op is Ops.BIND: return ctx.var(node.src[0]).cast(node.dtype)
  if op is Ops.PAD:
    _, cvalid = extra
    if cvalid is valid: return vals[0]
    # padded positions read as 0 (the loads below are also gated, so nothing is read out of bounds)
    mask = simplify(cvalid)
    # a load gated by this very mask already reads 0 where it does not hold (a pad straight over a buffer)
    if vals[0].op is Ops.LOAD and vals[0].src[2:] == (mask,): return vals[0]
    return UOp(Ops.WHERE, node.dtype, (mask, vals[0], UOp.const(node.dtype, 0)))
  if op in GroupOp.Movement or op in (Ops.DETACH, Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.CUSTOM_GRAD, Ops.AFTER): return vals[0]
  if op is Ops.REDUCE_AXIS:
    if any(r.arg[1] == 0 for r in extra):   # an empty reduction is its identity
      return UOp.const(node.dtype, {Ops.ADD: 0, Ops.MUL: 1, Ops.MAX: node.dtype.min}[node.arg[0]])
    return UOp(Ops.REDUCE, node.dtype, (vals[0], *extra), node.arg[0])
  return UOp(op, node.dtype, tuple(vals), node.arg)
