"""UOp: the one immutable, hash-consed node type of petagrad's IR.

Structurally equal nodes are the same object, so `is`/`==` is structural equality and common
subexpressions merge for free.

>>> from petagrad.uop.uop import UOp
>>> from petagrad.dtype import dtypes
>>> UOp.const(dtypes.int32, 3) is UOp.const(dtypes.int32, 3)
True
"""
from __future__ import annotations
import struct, weakref, hashlib
from _weakref import _remove_dead_weakref
from typing import Any, Iterator
from petagrad.uop.ops import Ops, GroupOp
from petagrad.dtype import DType, dtypes, truncate
from petagrad.helpers import prod

def _arg_key(arg: Any) -> Any:
  # 1 == 1.0 == True and 0.0 == -0.0 in Python; the cache keeps them apart (floats by their bits)
  t = type(arg)
  if t is float: return (float, struct.pack('d', arg))
  if t is bool: return (bool, arg)
  if t is tuple:
    for a in arg:   # a plain loop: shapes and axes (all ints) are the common case, and a generator costs a frame
      if type(a) in (float, tuple, bool): return tuple(_arg_key(a) for a in arg)
  return arg

# the hash-consing table: key -> weak reference to the node. A plain dict of keyed references, as a WeakValueDictionary
# keeps them, without its Python-level get and set (every node built paid for them)
class _Ref(weakref.ref):
  __slots__ = ("key",)   # weakref.KeyedRef without its Python-level __new__ and __init__
_uop_cache: dict[tuple, _Ref] = {}
def _forget(ref: _Ref) -> None: _remove_dead_weakref(_uop_cache, ref.key)   # a node died: drop its entry

class UOpMeta(type):
  def __call__(cls, op: Ops, dtype: DType = dtypes.bool, src: tuple[UOp, ...] = (), arg: Any = None):
    key = (op, dtype, src, ak := _arg_key(arg))
    if (ref := _uop_cache.get(key)) is not None and (ret := ref()) is not None: return ret
    ret = super().__call__(op, dtype, src, arg)
    ret.argkey = ak
    ref = _uop_cache[key] = _Ref(ret, _forget)
    ref.key = key
    return ret

class UOp(metaclass=UOpMeta):
  __slots__ = ("op", "dtype", "src", "arg", "argkey", "shape", "_device", "_bounds", "_key", "buffer", "__weakref__")
  op: Ops; dtype: DType; src: tuple[UOp, ...]; arg: Any
  argkey: Any   # arg as the hash-consing table keys it (floats by their bits): structural keys use it

  def __init__(self, op: Ops, dtype: DType = dtypes.bool, src: tuple[UOp, ...] = (), arg: Any = None):
    self.op, self.dtype, self.src, self.arg = op, dtype, src, arg
    self.shape: tuple[int, ...] = _shape_of(self)   # tensor-graph nodes: their shape (sources are built first: O(1))
    self._device: str | None = _device_of(self)
    self._bounds: tuple | None = None
    self._key: str | None = None
    self.buffer = None   # BUFFER nodes: the device Buffer once allocated (side data, not identity)

  def __reduce__(self): return UOp, (self.op, self.dtype, self.src, self.arg)
  def __repr__(self) -> str: return pretty(self)
  def replace(self, **kw) -> UOp:
    return UOp(kw.get("op", self.op), kw.get("dtype", self.dtype), kw.get("src", self.src), kw.get("arg", self.arg))

  @property
  def key(self) -> str:
    """Content hash of the whole subgraph (keys the caches). Computed without recursion."""
    if self._key is None:
      for u in self._missing("_key"):
        h = hashlib.sha256(f"{u.op.name}|{u.dtype!r}|{u.arg!r}|".encode())   # repr: vector dtypes too
        for s in u.src: h.update(s._key.encode())   # type: ignore[union-attr]
        u._key = h.hexdigest()[:32]
    return self._key   # type: ignore[return-value]

  def _missing(self, slot: str) -> list[UOp]:
    """Nodes below self whose cached `slot` is still None, children first (stops at computed nodes)."""
    out: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      u, done = stack.pop()
      if u in out: continue
      if done: out[u] = None; continue
      stack.append((u, True))
      for s in reversed(u.src):
        if s not in out and getattr(s, slot) is None: stack.append((s, False))
    return list(out)

  def toposort(self) -> dict[UOp, None]:
    """All nodes of the graph below (and including) self, children before parents. Iterative."""
    out: dict[UOp, None] = {}
    stack: list[tuple[UOp, bool]] = [(self, False)]
    while stack:
      u, done = stack.pop()
      if u in out: continue
      if done: out[u] = None; continue
      stack.append((u, True))
      for s in reversed(u.src):
        if s not in out: stack.append((s, False))
    return out

  # ------------------------------------------------------------ constructors
  @staticmethod
  def const(dtype: DType, value: Any, device: str | None = None, shape: tuple[int, ...] = ()) -> UOp:
    """A constant; with a shape, the scalar broadcast to it (no memory)."""
    c = UOp(Ops.CONST, dtype, (UOp(Ops.DEVICE, dtypes.bool, (), device),) if device is not None else (), truncate(value, dtype))
    return c.reshape((1,) * len(shape)).expand(tuple(shape)) if shape else c
  def alu(self, op: Ops, *src: UOp, dtype: DType | None = None) -> UOp:
    if dtype is None: dtype = dtypes.bool if op in GroupOp.Comparison else self.dtype
    return UOp(op, dtype, (self,) + src)
  def cast(self, dtype: DType) -> UOp: return self if self.dtype == dtype else UOp(Ops.CAST, dtype, (self,))
  def bitcast(self, dtype: DType) -> UOp: return UOp(Ops.BITCAST, dtype, (self,))
  def _c(self, x: Any) -> UOp: return x if isinstance(x, UOp) else UOp.const(self.dtype, x, self.device_or_none)
  def __add__(self, x): return self.alu(Ops.ADD, self._c(x))
  def __radd__(self, x): return self._c(x).alu(Ops.ADD, self)
  def __sub__(self, x): return self.alu(Ops.SUB, self._c(x))
  def __rsub__(self, x): return self._c(x).alu(Ops.SUB, self)
  def __mul__(self, x): return self.alu(Ops.MUL, self._c(x))
  def __rmul__(self, x): return self._c(x).alu(Ops.MUL, self)
  def __floordiv__(self, x): return self.alu(Ops.IDIV, self._c(x))
  def __mod__(self, x): return self.alu(Ops.MOD, self._c(x))
  def __neg__(self): return self.alu(Ops.NEG)
  def __lt__(self, x): return self.alu(Ops.CMPLT, self._c(x))
  def ne(self, x) -> UOp: return self.alu(Ops.CMPNE, self._c(x))
  def __and__(self, x): return self.alu(Ops.AND, self._c(x))
  def __or__(self, x): return self.alu(Ops.OR, self._c(x))
  def maximum(self, x) -> UOp: return self.alu(Ops.MAX, self._c(x))
  def where(self, a: UOp, b: UOp) -> UOp: return UOp(Ops.WHERE, a.dtype, (self, a, b))
  __hash__ = object.__hash__
  def __eq__(self, other) -> bool: return self is other   # structural equality == identity (hash-consed)
  def __bool__(self) -> bool: return True

  # ------------------------------------------------------------ tensor-graph views
  def reshape(self, shape: tuple[int, ...]) -> UOp: return self if self.shape == shape else UOp(Ops.RESHAPE, self.dtype, (self,), tuple(shape))
  def permute(self, order: tuple[int, ...]) -> UOp:
    return self if tuple(order) == tuple(range(len(order))) else UOp(Ops.PERMUTE, self.dtype, (self,), tuple(order))
  def expand(self, shape: tuple[int, ...]) -> UOp: return self if self.shape == shape else UOp(Ops.EXPAND, self.dtype, (self,), tuple(shape))
  def pad(self, arg: tuple[tuple[int, int], ...]) -> UOp:
    return self if all(a == (0, 0) for a in arg) else UOp(Ops.PAD, self.dtype, (self,), tuple(arg))
  def shrink(self, arg: tuple[tuple[int, int], ...]) -> UOp:
    return self if all(a == (0, s) for a, s in zip(arg, self.shape)) else UOp(Ops.SHRINK, self.dtype, (self,), tuple(arg))
  def bind(self, value: int) -> UOp:
    """This variable (a DEFINE_VAR) bound to value for one call: Variable("start_pos", 0, 1023).bind(5)."""
    if self.op is not Ops.DEFINE_VAR: raise TypeError(f"only a Variable can be bound, not {self.op}")
    name, lo, hi = self.arg
    if type(value) is not int and not hasattr(value, "__index__") or isinstance(value, bool):
      raise TypeError(f"Variable {name!r} must be bound to an int, got {type(value).__name__} {value!r}")
    if not lo <= int(value) <= hi: raise ValueError(f"Variable {name!r} bound to {int(value)}, outside its range [{lo}, {hi}]")
    return UOp(Ops.BIND, self.dtype, (self,), int(value))
  @property
  def symbolic(self) -> bool:
    """Is this an integer expression over Variables (bound or not)?"""
    return any(u.op in (Ops.DEFINE_VAR, Ops.BIND) for u in self.toposort())
  def flip(self, axes: tuple[bool, ...]) -> UOp: return self if not any(axes) else UOp(Ops.FLIP, self.dtype, (self,), tuple(axes))
  def copy_to_device(self, device: str) -> UOp:
    """A copy of this value on device (a COPY node; no node when it is there already)."""
    return self if self.device_or_none == device else UOp(Ops.COPY, self.dtype, (self, UOp(Ops.DEVICE, dtypes.bool, (), device)))
  def reduce(self, op: Ops, axes: tuple[int, ...]) -> UOp:
    assert len(set(axes)) == len(axes), f"an axis reduced twice: {axes}"
    axes = tuple(sorted(a for a in axes if self.shape[a] != 1)) if self.shape else ()
    return self if not axes else UOp(Ops.REDUCE_AXIS, self.dtype, (self,), (op, axes))

  @property
  def size(self) -> int: return prod(self.shape)

  @property
  def device(self) -> Any:
    """The device's name (str), or the tuple of names of a tensor held on several devices."""
    d = self.device_or_none
    if d is None: raise RuntimeError(f"{self.op} has no device")
    return d
  @property
  def device_or_none(self) -> Any: return self._device

  @property
  def base(self) -> UOp:
    """The node under any chain of movement ops."""
    u = self
    while u.op in GroupOp.Movement: u = u.src[0]
    return u

  # ------------------------------------------------------------ bounds (kernel index math)
  @property
  def vmin(self): return self.bounds[0]
  @property
  def vmax(self): return self.bounds[1]
  @property
  def bounds(self) -> tuple:
    if self._bounds is None:
      for u in self._missing("_bounds"): u._bounds = _bounds_of(u)
    return self._bounds   # type: ignore[return-value]

def _shape_of(u: UOp) -> tuple[int, ...]:
  op, arg = u.op, u.arg
  if op is Ops.BUFFER: return (arg[1],)
  if op is Ops.IOTA: return (arg,)
  if op in (Ops.CONST, Ops.DEVICE, Ops.SINK) or op not in GroupOp.Movement and not u.src: return ()
  if op in (Ops.RESHAPE, Ops.EXPAND): return tuple(arg)
  s = u.src[0].shape
  if op is Ops.PERMUTE: return tuple(s[i] for i in arg)
  if op is Ops.PAD: return tuple(sint_int(d + b + a) for d, (b, a) in zip(s, arg))
  if op is Ops.SHRINK: return tuple(sint_int(e - b) for b, e in arg)
  if op is Ops.REDUCE_AXIS: return tuple(1 if i in arg[1] else d for i, d in enumerate(s))
  if op is Ops.ALLGATHER: return s[:arg[0]] + (sum(arg[1]),) + s[arg[0] + 1:]
  if op is Ops.MULTI: return s if arg is None else s[:arg] + (sum(x.shape[arg] for x in u.src),) + s[arg + 1:]
  if op is Ops.MSELECT: return s if arg[1] is None else s[:arg[1]] + (arg[2][arg[0]][1] - arg[2][arg[0]][0],) + s[arg[1] + 1:]
  if op is Ops.WHERE: return u.src[1].shape  # type: ignore[return-value]
  return s

# has a node on several devices been made? (until then realize skips the multi-device rewrite: schedule/multi.py)
multi_seen = [False]

def _device_of(u: UOp) -> str | tuple[str, ...] | None:
  """The device name, or for a tensor held on several (MULTI and what is computed from it) the tuple of their names."""
  if u.op is Ops.BUFFER: return u.arg[0]
  if u.op is Ops.DEVICE:
    if type(u.arg) is tuple: multi_seen[0] = True
    return u.arg
  if u.op is Ops.COPY: return u.src[1].arg
  if u.op is Ops.MULTI:
    multi_seen[0] = True
    return tuple(s._device for s in u.src)   # type: ignore[misc]
  if u.op is Ops.MSELECT: return u.src[0]._device[u.arg[0]]   # type: ignore[index]
  return u.src[-1]._device if u.src else None

def _bounds_of(u: UOp) -> tuple:
  """Interval [vmin, vmax] a kernel expression can take (ints and bools; floats get the dtype range)."""
  dt, op = u.dtype, u.op
  full = (dt.min, dt.max)
  if op is Ops.CONST: return (u.arg, u.arg)
  if op is Ops.RANGE: return (0, u.arg[1] - 1)
  if op is Ops.DEFINE_VAR: return u.arg[1:]
  if op is Ops.BIND: return u.src[0].arg[1:]   # (what a kernel compiled for every value may assume)
  if dt.is_float or not u.src: return full
  b = [s._bounds for s in u.src]
  if op is Ops.ADD: r = (b[0][0] + b[1][0], b[0][1] + b[1][1])
  elif op is Ops.SUB: r = (b[0][0] - b[1][1], b[0][1] - b[1][0])
  elif op is Ops.NEG: r = (not b[0][1], not b[0][0]) if dt.is_bool else (-b[0][1], -b[0][0])   # bool NEG is logical not
  elif op is Ops.MUL:
    prods = [x * y for x in b[0] for y in b[1]]
    r = (min(prods), max(prods))
  elif op is Ops.IDIV and b[1][0] > 0:
    # C division truncates toward zero: monotonic in the dividend; a larger divisor moves the quotient toward 0
    (lo, hi), (dlo, dhi) = b
    r = (_tdiv(lo, dlo if lo < 0 else dhi), _tdiv(hi, dhi if hi < 0 else dlo))
  elif op is Ops.MOD and b[1][0] > 0:
    # C remainder has the sign of the dividend and |x % c| < c, |x % c| <= |x|
    (lo, hi), (clo, chi) = b
    if clo == chi and lo >= 0 and lo // clo == hi // clo: r = (lo % clo, hi % clo)
    elif clo == chi and hi <= 0 and (-hi) // clo == (-lo) // clo: r = (-((-lo) % clo), -((-hi) % clo))
    else: r = (max(lo, -(chi - 1)) if lo < 0 else 0, min(hi, chi - 1) if hi > 0 else 0)
  elif op is Ops.MAX: r = (max(b[0][0], b[1][0]), max(b[0][1], b[1][1]))
  elif op is Ops.CMPLT:
    if b[0][1] < b[1][0]: return (True, True)
    if b[0][0] >= b[1][1]: return (False, False)
    return (False, True)
  elif op is Ops.CMPNE:
    if b[0][1] < b[1][0] or b[0][0] > b[1][1]: return (True, True)
    if b[0][0] == b[0][1] == b[1][0] == b[1][1]: return (False, False)
    return (False, True)
  elif op is Ops.AND and dt.is_bool: return (bool(b[0][0] and b[1][0]), bool(b[0][1] and b[1][1]))
  elif op is Ops.OR and dt.is_bool: return (bool(b[0][0] or b[1][0]), bool(b[0][1] or b[1][1]))
  elif op is Ops.WHERE:
    if b[0][0] == b[0][1]: r = b[1] if b[0][0] else b[2]   # the condition is known
    else: r = (min(b[1][0], b[2][0]), max(b[1][1], b[2][1]))
  elif op is Ops.CAST and u.src[0].dtype.is_int | u.src[0].dtype.is_bool and dt.is_int: r = (int(b[0][0]), int(b[0][1]))
  else: return full
  if dt.is_bool: return (bool(r[0]), bool(r[1]))
  if r[0] < dt.min or r[1] > dt.max: return full   # may wrap
  return r

def sint_int(x: int | UOp) -> int:
  """A size that is an int, or an expression over Variables in which they cancel ((v + 3) - v): that int."""
  if isinstance(x, int): return x
  terms, const = decompose(x)
  if terms: raise ValueError(f"a size must not depend on a Variable's value (symbolic sizes are not supported yet): {pretty(x)}")
  return const

def decompose(u: UOp) -> tuple[dict[UOp, int], int]:
  """u == sum(coef * term) + const, for integer ADD/SUB/MUL-by-constant trees."""
  terms: dict[UOp, int] = {}
  const = 0
  stack = [(u, 1)]
  while stack:
    x, k = stack.pop()
    if x.op is Ops.CONST: const += k * x.arg
    elif x.op is Ops.ADD: stack.extend((s, k) for s in x.src)
    elif x.op is Ops.SUB: stack.extend([(x.src[0], k), (x.src[1], -k)])
    elif x.op is Ops.NEG: stack.append((x.src[0], -k))
    elif x.op is Ops.MUL and x.src[1].op is Ops.CONST: stack.append((x.src[0], k * x.src[1].arg))
    elif x.op is Ops.MUL and x.src[0].op is Ops.CONST: stack.append((x.src[1], k * x.src[0].arg))
    else: terms[x] = terms.get(x, 0) + k
  return {t: k for t, k in terms.items() if k != 0}, const

def binds_in(x: Any, out: list) -> list:
  """The BIND nodes in x (an arg: ints, tuples, expressions), appended to out."""
  if isinstance(x, tuple):
    for v in x: binds_in(v, out)
  elif isinstance(x, UOp): out.extend(u for u in x.toposort() if u.op is Ops.BIND)
  return out

def symbolic_arg(arg: Any) -> bool:
  """Does a movement op's arg hold a symbolic expression?"""
  return type(arg) is tuple and any(isinstance(p, UOp) or (type(p) is tuple and any(isinstance(v, UOp) for v in p)) for p in arg)

def _tdiv(a: int, b: int) -> int:
  """C (truncating) integer division, b > 0."""
  return a // b if a >= 0 else -((-a) // b)

def pretty(u: UOp, limit: int = 400) -> str:
  """A readable multi-line listing of the graph under u (each node once, numbered)."""
  names: dict[UOp, str] = {}
  lines = []
  for i, n in enumerate(n for n in u.toposort()):
    names[n] = f"%{i}"
    srcs = ", ".join(names[s] for s in n.src)
    dt = n.dtype.name + (f"x{n.dtype.count}" if n.dtype.count > 1 else "")
    lines.append(f"%{i} = {n.op.name} {dt} ({srcs}) {n.arg!r}" if n.arg is not None else f"%{i} = {n.op.name} {dt} ({srcs})")
  if len(lines) > limit: lines = lines[:limit // 2] + [f"... {len(lines) - limit} more ..."] + lines[-limit // 2:]
  return "\n".join(lines)

def walk_unique(roots: list[UOp]) -> Iterator[UOp]:
  seen: set[UOp] = set()
  for r in roots:
    for u in r.toposort():
      if u not in seen: seen.add(u); yield u
