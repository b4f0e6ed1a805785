"""UOp: the one immutable, hash-consed node type of petagrad's IR.

Structurally equal nodes are the same object, so `is`/`==` is structural equality and common
subexpressions merge for free.

>>> from petagrad.uop.uop import UOp
>>> from petagrad.dtype import dtypes
>>> UOp.const(dtypes.int32, 3) is UOp.const(dtypes.int32, 3)
True
"""
from __future__ import annotations
import re, struct, weakref, hashlib
from _weakref import _remove_dead_weakref
from typing import Any, Iterator
from petagrad.uop.ops import Ops, GroupOp
from petagrad.dtype import DType, dtypes, truncate
from petagrad.helpers import prod, user_op
from petagrad.uop.alu import exec_alu

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

def _operand(x: Any) -> bool: return isinstance(x, (UOp, int, float))

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
  __slots__ = ("op", "dtype", "src", "arg", "argkey", "shape", "_device", "_bounds", "_key", "_simple", "buffer", "__weakref__")
  op: Ops; dtype: DType; src: tuple[UOp, ...]; arg: Any
  argkey: Any   # arg as the hash-consing table keys it (floats by their bits): structural keys use it

  def __init__(self, op: Ops, dtype: DType = dtypes.bool, src: tuple[UOp, ...] = (), arg: Any = None):
    self.op, self.dtype, self.src, self.arg = op, dtype, src, arg
    self.shape: tuple[int, ...] = _shape_of(self)   # tensor-graph nodes: their shape (sources are built first: O(1))
    self._device: str | None = _device_of(self)
    self._bounds: tuple | None = None
    self._key: str | None = None
    self._simple: UOp | bool | None = None   # what symbolic.simplify made of this node (True: itself)
    self.buffer = None   # BUFFER nodes: the device Buffer once allocated (side data, not identity)

  def __reduce__(self): return UOp, (self.op, self.dtype, self.src, self.arg)
  def __repr__(self) -> str: return sint_str(self) if _is_size_expr(self) else pretty(self)
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
  # (an operand that is neither a node nor a number, a Tensor say, gets its turn: `v - t` is the Tensor's __rsub__)
  def __add__(self, x): return self.alu(Ops.ADD, self._c(x)) if _operand(x) else NotImplemented
  def __radd__(self, x): return self._c(x).alu(Ops.ADD, self) if _operand(x) else NotImplemented
  def __sub__(self, x): return self.alu(Ops.SUB, self._c(x)) if _operand(x) else NotImplemented
  def __rsub__(self, x): return self._c(x).alu(Ops.SUB, self) if _operand(x) else NotImplemented
  def __mul__(self, x): return self.alu(Ops.MUL, self._c(x)) if _operand(x) else NotImplemented
  def __rmul__(self, x): return self._c(x).alu(Ops.MUL, self) if _operand(x) else NotImplemented
  def __floordiv__(self, x): return self.alu(Ops.IDIV, self._c(x)) if _operand(x) else NotImplemented
  def __mod__(self, x): return self.alu(Ops.MOD, self._c(x)) if _operand(x) else NotImplemented
  def __truediv__(self, x):
    # (a symbolic size is an int: true division of one has no node; say which op asked for it)
    if not _operand(x): return NotImplemented
    op, at = user_op()
    raise TypeError(f"{op}: cannot divide the symbolic size {sint_str(self)} by {x!r} with / (an op that needs a float of a size does "
                    f"not support symbolic sizes yet: docs/variables.md)\n  at {at}")
  def __neg__(self): return self.alu(Ops.NEG)
  def __lt__(self, x): return self.alu(Ops.CMPLT, self._c(x)) if _operand(x) else NotImplemented
  def __gt__(self, x): return self._c(x).alu(Ops.CMPLT, self) if _operand(x) else NotImplemented
  # (integers only: a <= b is a < b + 1; what a shape check in Python asks of a symbolic size)
  def __le__(self, x): return self.alu(Ops.CMPLT, self._c(x) + 1) if _operand(x) and self.dtype.is_int else NotImplemented
  def __ge__(self, x): return self._c(x).alu(Ops.CMPLT, self + 1) if _operand(x) and self.dtype.is_int else NotImplemented
  def ne(self, x) -> UOp: return self.alu(Ops.CMPNE, self._c(x))
  def __and__(self, x): return self.alu(Ops.AND, self._c(x))
  def __or__(self, x): return self.alu(Ops.OR, self._c(x))
  def maximum(self, x) -> UOp: return self.alu(Ops.MAX, self._c(x))
  def where(self, a: UOp, b: UOp) -> UOp: return UOp(Ops.WHERE, a.dtype, (self, a, b))
  __hash__ = object.__hash__
  def __eq__(self, other) -> bool: return self is other   # structural equality == identity (hash-consed)
  def __bool__(self) -> bool:
    # a comparison of symbolic sizes in Python (`if n < 4:`) holds only when it holds over the Variables' whole ranges;
    # otherwise it has no one answer: raise rather than take the node as true
    if self.op in (Ops.CMPLT, Ops.CMPNE) and self.src[0].dtype == dtypes.index:
      lo, hi = self.bounds
      if lo == hi: return bool(lo)
      op, at = user_op()
      raise TypeError(f"{op}: cannot decide {sint_str(self.src[0])} {'<' if self.op is Ops.CMPLT else '!='} {sint_str(self.src[1])} for every "
                      f"value of its Variables: {op} compares a symbolic size where it needs an int (not supported yet: docs/variables.md)"
                      f"\n  at {at}")
    return True

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
  if op is Ops.PAD: return tuple(canonical(d + b + a) for d, (b, a) in zip(s, arg))
  if op is Ops.SHRINK: return tuple(canonical(e - b) for b, e in arg)
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
  elif op is Ops.VECTORIZE: r = (min(x[0] for x in b), max(x[1] for x in b))   # (over the lanes)
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

# ------------------------------------------------------------ symbolic sizes (sint: an int or an index expression)
def canonical(x: int | UOp) -> int | UOp:
  """A size in one canonical form: an int when the Variables cancel ((v + 3) - v is 3), else the sum of its terms in
  a fixed order plus a constant, so that equal sizes reached through different ops are the same node (shapes are
  compared by identity).

  >>> from petagrad import Variable
  >>> v = Variable("v", 1, 10).bind(4)
  >>> canonical((v + 3) - v), canonical(2 + v - 1) is canonical(v + 1)
  (3, True)
  """
  if not isinstance(x, UOp): return x
  terms, const = decompose(x)
  if not terms: return const
  out: UOp | None = None
  # (ordered by the terms without their Variables' values: every value of them gives the same structure)
  for t, k in sorted(terms.items(), key=lambda tk: _term_order(tk[0])):
    e = t if k == 1 else t * UOp.const(t.dtype, k)
    out = e if out is None else out + e
  return out + UOp.const(out.dtype, const) if const else out   # type: ignore[union-attr,return-value]

def _term_order(t: UOp) -> str:
  """A term's place in a canonical size: its text without the Variables' values (a kernel's index terms, which hold no
  bound Variables: their structure hash)."""
  return re.sub(r"=-?\d+>", ">", sint_str(t)) if _is_size_expr(t) else t.key

def sprod(xs) -> int | UOp:
  """The product of sizes (some may be symbolic), canonical."""
  return canonical(prod(xs))

def sdiv_exact(x: int | UOp, d: int | UOp) -> int | UOp | None:
  """x / d when it divides exactly as sizes: by an int that divides every coefficient and the constant of x ((4*v) / 4
  is v), or by a symbolic size whose terms are x's with coefficients that are one int multiple of its ((8*v) / v is 8);
  else None."""
  if isinstance(d, UOp):
    if x is d: return 1
    (dt, dc), (xt, xc) = decompose(d), decompose(x) if isinstance(x, UOp) else ({}, x)
    if dc or xc or set(dt) != set(xt): return None
    ratios = {xt[t] // dt[t] if xt[t] % dt[t] == 0 else None for t in dt}
    return ratios.pop() if len(ratios) == 1 and None not in ratios else None
  if not isinstance(x, UOp): return x // d if d and x % d == 0 else None
  terms, const = decompose(x)
  if d == 0 or const % d or any(k % d for k in terms.values()): return None
  return canonical(sum((t * UOp.const(t.dtype, k // d) for t, k in terms.items()), UOp.const(x.dtype, const // d)))

def smax(x: int | UOp) -> int:
  """The largest value a size can take (over its Variables' ranges): what memory is allocated for."""
  return x if isinstance(x, int) else int(x.vmax)
def max_numel(shape) -> int:
  """The most elements a shape (some sizes symbolic) can hold: what heuristics weigh and memory is allocated for."""
  return prod(smax(s) for s in shape)
def smin(x: int | UOp) -> int: return x if isinstance(x, int) else int(x.vmin)

# the ops a size expression is made of (what canonical, the Tensor layer's size arithmetic and lowering's clamps build)
_SIZE_OPS = {Ops.CONST, Ops.BIND, Ops.DEFINE_VAR, Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.IDIV, Ops.MOD, Ops.NEG}
def sym_value(x: int | UOp) -> int:
  """A size's value under its Variables' bound values (a Variable that is not bound raises)."""
  if not isinstance(x, UOp): return x
  vals: dict[UOp, int] = {}
  nodes = x.toposort()
  bound = {u.src[0] for u in nodes if u.op is Ops.BIND}
  for u in nodes:
    if u.op is Ops.CONST or u.op is Ops.BIND: vals[u] = u.arg
    elif u.op is Ops.DEFINE_VAR:
      if u not in bound: raise ValueError(f"Variable {u.arg[0]!r} must be bound to a value here")
    elif u.op in _SIZE_OPS: vals[u] = exec_alu(u.op, u.dtype, tuple(vals[s] for s in u.src))
    else: raise ValueError(f"cannot evaluate {u.op} in a size")
  return int(vals[x])

_INFIX = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.IDIV: "//", Ops.MOD: "%"}
def _is_size_expr(u: UOp) -> bool:
  return u.dtype == dtypes.index and u.op is not Ops.CONST and all(x.op in _SIZE_OPS and not (x.op is Ops.CONST and x.src) for x in u.toposort())
def sint_str(x: int | UOp) -> str:
  """A size as people read it: 4, <v=3>, <v=3>+1 (a bound Variable with its value), <v[1-8]> (an unbound one, with its
  range: the repr keys caches, so it tells every expression apart)."""
  if not isinstance(x, UOp): return str(x)
  if x.op is Ops.CONST: return str(x.arg)
  if x.op is Ops.BIND: return f"<{x.src[0].arg[0]}[{x.src[0].arg[1]}-{x.src[0].arg[2]}]={x.arg}>"
  if x.op is Ops.DEFINE_VAR: return f"<{x.arg[0]}[{x.arg[1]}-{x.arg[2]}]>"
  if x.op is Ops.NEG: return f"-{sint_str(x.src[0])}"
  if x.op is Ops.MAX: return f"max({sint_str(x.src[0])}, {sint_str(x.src[1])})"
  if x.op not in _INFIX: return f"{x.op.name}({', '.join(sint_str(s) for s in x.src)})"   # (not a size: a kernel's expression)
  a, b = (sint_str(s) if s.op in (Ops.CONST, Ops.BIND, Ops.DEFINE_VAR) else f"({sint_str(s)})" for s in x.src)
  return f"{a}{_INFIX[x.op]}{b}"

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
