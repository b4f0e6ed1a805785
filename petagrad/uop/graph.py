"""Graph helpers every stage above the IR uses: rebuilding a graph with nodes substituted, new BUFFER nodes (for new
memory or for existing memory under a new identity), a test for a value that reads a buffer through another
view, and byte views (the bytes a view reads as a Buffer view of them: how DISK tensors are sliced and copied)."""
from __future__ import annotations
import itertools
from petagrad.device import Buffer
from petagrad.dtype import DType, dtypes
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp, symbolic_arg, sprod, smax
from petagrad.helpers import prod, strides_for_shape

_buffer_ids = itertools.count()

def new_buffer(device: str, size: int, dtype: DType) -> UOp:
  """A fresh BUFFER node (memory is allocated when a kernel first writes it)."""
  return new_buffer_node(Buffer(device, size, dtype), dtype)

def buffer_view(buf: UOp, shape: tuple) -> UOp:
  """buf (a BUFFER node) viewed as shape. A symbolic shape ((<v=3>, 64)) takes its first prod(shape) elements: the
  buffer holds as many as the largest value needs, and every value of the Variables reuses it."""
  n = sprod(shape)
  return buf.shrink(((0, n),)).reshape(shape) if isinstance(n, UOp) else buf.reshape(shape)

def new_buffer_for(device: str, shape: tuple, dtype: DType) -> UOp:
  """A fresh buffer for a value of shape (the most elements a symbolic shape can have), viewed as shape."""
  return buffer_view(new_buffer(device, smax(sprod(shape)), dtype), shape)

def new_buffer_node(buf: Buffer, dtype: DType) -> UOp:
  """A new BUFFER node for existing memory (a new identity: graphs over it are new graphs)."""
  u = UOp(Ops.BUFFER, dtype, (), (buf.device, buf.size, next(_buffer_ids)))
  u.buffer = buf
  return u

# Where kernels read a bound Variable's value: one int32 buffer per (Variable, device), kept for the process. A kernel
# compiled for the Variable reads it at run time, so one compile (and one JIT capture) serves every value; each
# realize writes the values its graph binds (write_vars) before the first launch.
_var_homes: dict[tuple, UOp] = {}
_var_values: dict[tuple, int] = {}

def var_buffer(var: tuple, device: str) -> UOp:
  """The BUFFER node holding the value of the Variable var (its DEFINE_VAR's arg: name, min, max) on device (made, and
  given the current value, on first use)."""
  if (u := _var_homes.get(key := (var, device))) is None:
    u = _var_homes[key] = UOp(Ops.BUFFER, dtypes.int32, (), (device, 1, ("var",) + tuple(var)))
  if u.buffer is None:
    u.buffer = Buffer(device, 1, dtypes.int32)
    if var in _var_values: _store_var(u.buffer, _var_values[var])
  return u

def var_buffers() -> list[Buffer]:
  """Every buffer a Variable's value is kept in (kernels read them; they are the same in every run)."""
  return [u.buffer for u in _var_homes.values() if u.buffer is not None]

def _store_var(buf: Buffer, value: int) -> None: buf.ensure_allocated().copyin(memoryview(value.to_bytes(4, "little", signed=True)))

def write_vars(binds: list[UOp]) -> None:
  """Give each bound Variable its value (BIND nodes) in every buffer kernels read it from. Two values for one
  Variable in one realize raise: each kernel reads one value."""
  seen: dict[tuple, int] = {}
  for b in binds:
    var, value = b.src[0].arg, b.arg
    if seen.setdefault(var, value) != value:
      raise ValueError(f"Variable {var[0]!r} is bound to both {seen[var]} and {value} in what one realize computes; realize the tensors "
                       "built with one value before binding another")
  for var, value in seen.items():
    if _var_values.get(var) == value: continue
    _var_values[var] = value
    for (v, _), u in _var_homes.items():
      if v == var and u.buffer is not None: _store_var(u.buffer, value)

def substitute(root: UOp, subst: dict[UOp, UOp], memo: dict[UOp, UOp] | None = None) -> UOp:
  """Rebuild root with the nodes in `subst` replaced (not looking below them). Iterative. `memo`: a dict holding subst
  that the walk fills with every node it rebuilt (several roots over shared graphs then walk them once)."""
  done: dict[UOp, UOp] = dict(subst) if memo is None else memo
  stack: list[tuple[UOp, bool]] = [(root, False)]
  while stack:
    u, ready = stack.pop()
    if u in done: continue
    if not ready:
      stack.append((u, True))
      stack.extend((s, False) for s in u.src if s not in done)
      continue
    new_src = tuple(map(done.__getitem__, u.src))
    done[u] = u if new_src == u.src else UOp(u.op, u.dtype, new_src, u.arg)
  return done[root]

def rebind(root: UOp, values: dict[UOp, UOp]) -> UOp:
  """root with the BIND nodes in `values` replaced, inside the args of views too (a symbolic size or offset holds them
  there): a graph made for one value of a Variable, for another."""
  if not values: return root
  def arg(a):
    if isinstance(a, tuple): return tuple(arg(x) for x in a)
    return substitute(a, values) if isinstance(a, UOp) else a
  done: dict[UOp, UOp] = {}
  for u in root.toposort():
    src = tuple(done[s] for s in u.src)
    a = arg(u.arg) if (u.op in GroupOp.Movement and symbolic_arg(u.arg)) or (u.op is Ops.IOTA and isinstance(u.arg, UOp)) else u.arg
    done[u] = values[u] if u in values else u if src == u.src and a is u.arg else UOp(u.op, u.dtype, src, a)
  return done[root]

def rebase(view: UOp, base: UOp) -> UOp:
  """view's movement ops applied over another node (a fresh BUFFER node for the same memory, a copy's source)."""
  chain = []
  while view.op in GroupOp.Movement: chain.append(view); view = view.src[0]
  for m in reversed(chain): base = m.replace(src=(base,) + m.src[1:])
  return base

def reshape_strides(old: tuple[int, ...], st: tuple[int, ...], new: tuple[int, ...]) -> tuple[int, ...] | None:
  """The strides of a reshape of a view (shape old, strides st) to shape new, or None where a group of merged axes is
  not evenly strided (the reshape would need a copy)."""
  if 0 in old or 0 in new: return strides_for_shape(new)   # (no elements: any strides describe it)
  dims = [(n, s) for n, s in zip(old, st) if n != 1]
  keep = [k for k, n in enumerate(new) if n != 1]
  res, i, k = [0] * len(new), 0, 0
  while k < len(keep):
    # the shortest runs of old and new dims with equal products
    i0, k0, size_old, size_new = i, k, dims[i][0], new[keep[k]]
    while size_old != size_new:
      if size_old < size_new: i += 1; size_old *= dims[i][0]
      else: k += 1; size_new *= new[keep[k]]
    if any(dims[a][1] != dims[a + 1][1] * dims[a + 1][0] for a in range(i0, i)): return None
    acc = dims[i][1]
    for kk in range(k, k0 - 1, -1): res[keep[kk]] = acc; acc *= new[keep[kk]]
    i, k = i + 1, k + 1
  return tuple(res)

def view_strides(u: UOp) -> tuple[int, ...] | None:
  """Element strides of u's axes in the row-major layout of the node under its movement ops (a realized buffer, or an
  elementwise chain whose loads are laid out like it), or None where they are irregular (a reshape that would need a
  copy). A reshape that merges axes unevenly and a later one that splits them back (a (batch, heads) pair merged for
  a product, then split again) leave regular strides: each axis is kept as its pieces (size, stride), outer first."""
  chain = []
  while u.op in GroupOp.Movement: chain.append(u); u = u.src[0]
  if not all(isinstance(n, int) for m in (u, *chain) for n in m.shape): return _view_strides_symbolic(u, chain)
  modes: list[list[tuple[int, int]]] | None = [[(n, s)] for n, s in zip(u.shape, strides_for_shape(u.shape))]
  for m in reversed(chain):
    assert modes is not None
    if m.op is Ops.EXPAND: modes = [[(b, 0)] if a != b else md for md, a, b in zip(modes, m.src[0].shape, m.shape)]
    elif m.op is Ops.PERMUTE: modes = [modes[i] for i in m.arg]
    elif m.op is Ops.RESHAPE: modes = _regroup(modes, m.shape)
    else:   # SHRINK, PAD and FLIP keep each axis's stride (up to its sign); an axis of several pieces changed is irregular
      if any(len(md) > 1 and n != a for md, a, n in zip(modes, m.src[0].shape, m.shape)): return None
      modes = [md if n == a else [(n, md[0][1])] for md, a, n in zip(modes, m.src[0].shape, m.shape)]
    if modes is None: return None
  out = []
  for md in modes:
    pieces = [p for p in md if p[0] != 1] or md[-1:]
    if any(pieces[i][1] != pieces[i + 1][1] * pieces[i + 1][0] for i in range(len(pieces) - 1)): return None
    out.append(pieces[-1][1])
  return tuple(out)

def _regroup(modes: list[list[tuple[int, int]]], shape: tuple[int, ...]) -> list[list[tuple[int, int]]] | None:
  """The (size, stride) pieces of each axis of a reshape to shape: the pieces in row-major order, regrouped (a piece
  split where an axis ends inside it), or None where an axis ends inside a piece it does not divide."""
  if 0 in shape: return [[(n, s)] for n, s in zip(shape, strides_for_shape(shape))]   # (no elements: any strides)
  flat = [p for md in modes for p in md if p[0] != 1]
  out = []
  for n in shape:
    axis, size = [], 1
    while size < n:
      sz, st = flat.pop(0)
      if n % (size * sz) == 0: axis.append((sz, st)); size *= sz; continue
      need = n // size
      if sz % need: return None
      axis.append((need, st * (sz // need))); flat.insert(0, (sz // need, st)); size = n
    out.append(axis or [(1, 0)])
  return out

def _view_strides_symbolic(u: UOp, chain: list[UOp]) -> tuple[int, ...] | None:
  st: tuple[int, ...] | None = strides_for_shape(u.shape)
  for m in reversed(chain):
    if m.op is Ops.EXPAND: st = tuple(0 if a != b else s for s, a, b in zip(st, m.src[0].shape, m.shape))
    elif m.op is Ops.PERMUTE: st = tuple(st[i] for i in m.arg)
    elif m.op is Ops.RESHAPE: st = reshape_strides(m.src[0].shape, st, m.shape)
    if st is None: return None   # (SHRINK, PAD and FLIP keep each axis's stride, up to its sign)
  return st

def is_row_major_view(u: UOp) -> bool:
  """Is u reshapes and permutes of a whole BUFFER that read it in its own row-major order (a permute undone by the
  inverse permute, a stored layout viewed back)? Its contiguous() is then the buffer as it is."""
  b = u
  while b.op in (Ops.RESHAPE, Ops.PERMUTE): b = b.src[0]
  if b.op is not Ops.BUFFER or not all(isinstance(n, int) for n in u.shape): return False
  if 0 in u.shape: return u.op is Ops.RESHAPE and u.src[0] is b   # no elements: no order to check
  st = view_strides(u)
  return st is not None and all(a == c for a, c, n in zip(st, strides_for_shape(u.shape), u.shape) if n != 1)

def unbind(x):
  """x (an int, a symbolic expression or a tuple of them) with every bound Variable replaced by the Variable itself:
  what a kernel compiled for every value sees."""
  if isinstance(x, tuple): return tuple(unbind(v) for v in x)
  if not isinstance(x, UOp): return x
  return substitute(x, {u: u.src[0] for u in x.toposort() if u.op is Ops.BIND})

def reads_other_view(value: UOp, target: UOp) -> bool:
  """Does `value` read target's buffer through any view other than `target` itself? (A kernel writing target in
  place would then overwrite values it still has to read.)"""
  buf = target.base
  for n in value.toposort():
    if n.op in GroupOp.Movement: continue
    for s in n.src:
      if s.base is buf and s is not target: return True
  return value.base is buf and value is not target and value.op in GroupOp.Movement

def is_disk(device) -> bool:
  """Is device a DISK device (a file: byte-range views and copies, no kernels; runtime/ops_disk.py)?"""
  return isinstance(device, str) and device.startswith("DISK")

def view_buffers(u: UOp) -> list[Buffer] | None:
  """The Buffers u views: its buffer's for movement ops over a BUFFER node that has one, one per device for a MULTI of
  such views (a realized multi-device tensor); None when u is not a view of memory."""
  if u.op is Ops.MULTI:
    out: list[Buffer] = []
    for s in u.src:
      if (b := view_buffers(s)) is None: return None
      out += b
    return out
  b = u.base
  return [b.buffer] if b.op is Ops.BUFFER and b.buffer is not None else None

def byte_range(view: UOp) -> tuple[Buffer, int] | None:
  """(buffer, byte offset) when view, movement ops over a BUFFER node that has a Buffer, reads one contiguous run of
  that buffer's bytes in row-major order (then its bytes are the view.size elements from the offset); None when it
  does not (a step, a transpose, an expand or a pad of more than one element)."""
  ops: list[UOp] = []
  u = view
  while u.op in GroupOp.Movement: ops.append(u); u = u.src[0]
  if u.op is not Ops.BUFFER or u.buffer is None: return None
  shape, strides, offset = (u.arg[1],), (1,), 0   # the view as strides over the buffer's elements
  def contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    return 0 in shape or all(st == prod(shape[i + 1:]) for i, (d, st) in enumerate(zip(shape, strides)) if d > 1)
  for m in reversed(ops):
    if m.op is Ops.RESHAPE:
      if not contiguous(shape, strides): return None
      shape = m.arg
      strides = tuple(prod(shape[i + 1:]) for i in range(len(shape)))
    elif m.op is Ops.SHRINK:
      if symbolic_arg(m.arg): return None   # (its offset is known when the kernel runs)
      offset += sum(b * st for (b, _), st in zip(m.arg, strides))
      shape = tuple(e - b for b, e in m.arg)
    elif m.op is Ops.PERMUTE: shape, strides = tuple(shape[i] for i in m.arg), tuple(strides[i] for i in m.arg)
    elif m.op is Ops.EXPAND: shape, strides = m.arg, tuple(st if d == n else 0 for d, n, st in zip(shape, m.arg, strides))
    elif m.op is Ops.FLIP:
      offset += sum((d - 1) * st for d, st, f in zip(shape, strides, m.arg) if f)
      strides = tuple(-st if f else st for st, f in zip(strides, m.arg))
    else: return None   # a pad reads nothing for its padding
  if not contiguous(shape, strides): return None
  return u.buffer, (offset if prod(shape) else 0) * u.dtype.itemsize

def byte_view(view: UOp, dtype: DType, shape: tuple[int, ...]) -> UOp | None:
  """The bytes view reads (see byte_range) as a new BUFFER node of dtype, reshaped to shape, over a view of its buffer
  (Buffer.view: no copy); None when they are not one contiguous run or not shape's size in dtype."""
  if (r := byte_range(view)) is None or prod(shape) * dtype.itemsize != view.size * view.dtype.itemsize: return None
  buf, offset = r
  return new_buffer_node(buf.view(offset, prod(shape), dtype), dtype).reshape(shape)
