"""Data types and the promotion lattice.

>>> from petagrad.dtype import dtypes, promote
>>> promote(dtypes.int8, dtypes.uint8)
dtypes.int16
"""
from __future__ import annotations
import math, struct
from dataclasses import dataclass
from typing import Any, Callable, Final
from petagrad.helpers import DEFAULT_FLOAT, DEFAULT_INT, user_frame

class _Interned(type):
  """DType(...) returns the one instance per value: dtypes key every UOp lookup, and with one instance per value
  their hash and == are the identity's (no Python-level call per lookup)."""
  _all: dict[tuple, DType] = {}
  def __call__(cls, name: str, itemsize: int, kind: str, fmt: str, count: int = 1) -> DType:
    key = (name, itemsize, kind, fmt, count)
    if (d := _Interned._all.get(key)) is None: d = _Interned._all[key] = super().__call__(name, itemsize, kind, fmt, count)
    return d

@dataclass(frozen=True, eq=False)
class DType(metaclass=_Interned):
  """A scalar element type. `kind` is 'b' (bool), 'i' (signed int), 'u' (unsigned int) or 'f' (float)."""
  name: str
  itemsize: int
  kind: str
  fmt: str          # struct format character of the storage (bfloat16 is stored as 'H')
  count: int = 1    # > 1: a vector of `count` scalars (only inside generated kernels)
  def __reduce__(self): return DType, (self.name, self.itemsize, self.kind, self.fmt, self.count)   # unpickles to the one instance
  def __repr__(self) -> str: return f"dtypes.{self.name}" if self.count == 1 else f"dtypes.{self.name}.vec({self.count})"
  def vec(self, n: int) -> DType:
    assert self.count == 1, "vectors of vectors are not a thing"
    return self if n == 1 else DType(self.name, self.itemsize, self.kind, self.fmt, n)
  def scalar(self) -> DType: return self if self.count == 1 else DType(self.name, self.itemsize, self.kind, self.fmt)
  @property
  def bits(self) -> int: return self.itemsize * 8
  @property
  def is_float(self) -> bool: return self.kind == 'f'
  @property
  def is_int(self) -> bool: return self.kind in 'iu'
  @property
  def is_unsigned(self) -> bool: return self.kind == 'u'
  @property
  def is_bool(self) -> bool: return self.kind == 'b'
  @property
  def min(self) -> int | float:
    if self.kind == 'b': return False
    if self.kind == 'u': return 0
    if self.kind == 'i': return -(1 << (self.bits - 1))
    return -math.inf
  @property
  def max(self) -> int | float:
    if self.kind == 'b': return True
    if self.kind == 'u': return (1 << self.bits) - 1
    if self.kind == 'i': return (1 << (self.bits - 1)) - 1
    return math.inf

class _DTypesMeta(type):
  # default_float / default_int read (and write) the DEFAULT_FLOAT / DEFAULT_INT flags, so Context(DEFAULT_FLOAT=...)
  # (a name or a DType) and `dtypes.default_float = dtypes.float16` both work
  @property
  def default_float(cls) -> DType: return to_dtype(str(DEFAULT_FLOAT.value))
  @default_float.setter
  def default_float(cls, d: DType | str) -> None: DEFAULT_FLOAT.value = DEFAULT_FLOAT.check(d, f"dtypes.default_float = {d!r} at {user_frame()}")
  @property
  def default_int(cls) -> DType: return to_dtype(str(DEFAULT_INT.value))
  @default_int.setter
  def default_int(cls, d: DType | str) -> None: DEFAULT_INT.value = DEFAULT_INT.check(d, f"dtypes.default_int = {d!r} at {user_frame()}")

class dtypes(metaclass=_DTypesMeta):
  """The namespace of all dtypes, as in tinygrad (`dtypes.float32`, `dtypes.default_float`)."""
  bool: Final = DType("bool", 1, 'b', '?')
  int8: Final = DType("int8", 1, 'i', 'b')
  int16: Final = DType("int16", 2, 'i', 'h')
  int32: Final = DType("int32", 4, 'i', 'i')
  int64: Final = DType("int64", 8, 'i', 'q')
  uint8: Final = DType("uint8", 1, 'u', 'B')
  uint16: Final = DType("uint16", 2, 'u', 'H')
  uint32: Final = DType("uint32", 4, 'u', 'I')
  uint64: Final = DType("uint64", 8, 'u', 'Q')
  float16: Final = DType("float16", 2, 'f', 'e')
  bfloat16: Final = DType("bfloat16", 2, 'f', 'H')
  float32: Final = DType("float32", 4, 'f', 'f')
  float64: Final = DType("float64", 8, 'f', 'd')
  # aliases, as in PyTorch
  half, float, double, bf16 = float16, float32, float64, bfloat16
  char, short, int, long = int8, int16, int32, int64
  uchar = uint8
  # the default dtypes of Python scalars, default_float and default_int, follow the DEFAULT_FLOAT and DEFAULT_INT
  # flags (properties of the metaclass)
  # the loop/index dtype of generated kernels
  index: Final = int64

  @staticmethod
  def all() -> list[DType]: return list(ALL_DTYPES)
  @staticmethod
  def from_py(x) -> DType:
    """The dtype a Python value would get: bool, default_int or default_float (lists: the widest element)."""
    if isinstance(x, (list, tuple)): return max((dtypes.from_py(v) for v in x), key=_py_rank, default=dtypes.default_float)
    if isinstance(x, bool): return dtypes.bool
    if isinstance(x, int): return dtypes.default_int
    if isinstance(x, float): return dtypes.default_float
    raise TypeError(f"cannot infer a dtype from {type(x).__name__} value {x!r}")

def _py_rank(d: DType) -> int: return {'b': 0, 'i': 1, 'u': 1, 'f': 2}[d.kind]

ALL_DTYPES: tuple[DType, ...] = (dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
                                 dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)
DTYPES_BY_NAME: dict[str, DType] = {d.name: d for d in ALL_DTYPES}
_INT_RANGE: dict[DType, tuple[int, int]] = {d: (int(d.min), int(d.max)) for d in ALL_DTYPES if d.is_int}   # fit_error's fast path

def to_dtype(x: DType | str) -> DType:
  if isinstance(x, DType): return x
  if isinstance(x, str) and (d := DTYPES_BY_NAME.get(x) or getattr(dtypes, x, None)) is not None and isinstance(d, DType): return d
  # accept numpy / torch dtype objects by name
  name = str(x).replace("torch.", "").replace("numpy.", "")
  if name in DTYPES_BY_NAME: return DTYPES_BY_NAME[name]
  raise TypeError(f"unknown dtype {x!r}; known: {', '.join(DTYPES_BY_NAME)}")

def _flag_dtype(kind: str, allowed: tuple[str, ...]) -> Callable[[Any], str]:
  """The `convert` hook of a dtype flag: a DType (or a torch/numpy dtype, by name) -> its name, which must be one of
  `allowed`; the flag itself checks names given as strings against its choices."""
  def convert(v: Any) -> str:
    try: d = to_dtype(v)
    except TypeError: raise TypeError(f"takes {kind} dtype or its name, got {type(v).__name__} {v!r}") from None
    if d.name not in allowed: raise ValueError(f"takes {kind} dtype ({', '.join(allowed)}), got {d!r}")
    return d.name
  return convert
DEFAULT_FLOAT.convert = _flag_dtype("a float", ("float16", "bfloat16", "float32", "float64"))
DEFAULT_INT.convert = _flag_dtype("an int", ("int32", "int64"))

def promote(a: DType, b: DType) -> DType:
  """Least common dtype of two tensor dtypes, following PyTorch (and numpy where PyTorch refuses)."""
  if a == b: return a
  if a.kind == 'b': return b
  if b.kind == 'b': return a
  if a.is_float or b.is_float:
    if a.is_float and b.is_float:
      if {a, b} == {dtypes.float16, dtypes.bfloat16}: return dtypes.float32
      return a if a.itemsize > b.itemsize else b
    return a if a.is_float else b
  if a.kind == b.kind: return a if a.itemsize > b.itemsize else b
  s, u = (a, b) if a.kind == 'i' else (b, a)
  if s.itemsize > u.itemsize: return s
  if u == dtypes.uint64: raise TypeError(f"no integer dtype holds both {s} and {u}; cast one of them explicitly")
  return {1: dtypes.int16, 2: dtypes.int32, 4: dtypes.int64}[u.itemsize]

def promote_scalar(t: DType, x) -> DType:
  """The result dtype of `tensor(t) op python_scalar`: a scalar never widens within its category (PyTorch rule)."""
  if isinstance(x, bool): return t
  if isinstance(x, int): return dtypes.default_int if t.is_bool else t
  if isinstance(x, float): return t if t.is_float else dtypes.default_float
  raise TypeError(f"unsupported scalar {x!r} of type {type(x).__name__}")

class DTypeOverflowError(RuntimeError, OverflowError):
  """A Python value that a dtype cannot hold. Both a RuntimeError (what PyTorch raises for "value cannot be converted
  to type ... without overflow") and an OverflowError (what it raises for ints beyond 64 bits), so code ported from
  PyTorch catches it either way."""

def fit_error(x, dtype: DType, fill: bool = True) -> str | None:
  """Why the Python scalar x does not fit dtype (None when it does). Ints must lie in the dtype's range (no wrapping);
  floats going into an int dtype must be finite and in range once truncated. For float dtypes an int too big for a
  float never fits; with `fill` (full, masked_fill, pad values, ... as in PyTorch) a finite value that would round to
  inf does not fit either, while data (Tensor([1e6], dtype=float16)) and arithmetic operands may become inf."""
  if isinstance(x, bool) or dtype.kind == 'b': return None
  if type(x) is float and dtype.kind == 'f' and (-65504.0 <= x <= 65504.0 or not fill): return None   # fits every float dtype
  if type(x) is int and ((r := _INT_RANGE.get(dtype)) is not None and r[0] <= x <= r[1] or dtype.kind == 'f' and (-65504 <= x <= 65504 or (not fill and x.bit_length() <= 1000))): return None
  shown = f"an int of {x.bit_length()} bits" if isinstance(x, int) and x.bit_length() > 64 else f"value {x!r}"
  bad = f"{shown} cannot be converted to type {dtype.name} without overflow"
  if dtype.kind in 'iu':
    if isinstance(x, float):
      if math.isnan(x) or math.isinf(x): return bad
      x = int(x)
    return None if not isinstance(x, int) or dtype.min <= x <= dtype.max else f"{bad} (its range is [{dtype.min}, {dtype.max}])"
  if isinstance(x, int):
    try: x = float(x)
    except OverflowError: return bad
  if fill and isinstance(x, float) and not math.isinf(x) and math.isinf(truncate(x, dtype)): return bad
  return None

def truncate(x, dtype: DType):
  """Round/wrap a Python value to what `dtype` can hold (C semantics: ints wrap, floats round to nearest)."""
  dtype = dtype.scalar()   # a vector constant holds its lane value (a bfloat16 vector is not `dtypes.bfloat16`)
  if dtype.kind == 'b': return bool(x)
  if dtype.kind in 'iu':
    if isinstance(x, float):
      if math.isnan(x) or math.isinf(x): return 0 if dtype.kind == 'u' else dtype.min
      x = int(x)
    x = int(x) & ((1 << dtype.bits) - 1)
    if dtype.kind == 'i' and x >= (1 << (dtype.bits - 1)): x -= 1 << dtype.bits
    return x
  x = float(x)
  if dtype == dtypes.float64: return x
  if dtype == dtypes.bfloat16: return bf16_bits_to_float(float_to_bf16_bits(x))
  try: return struct.unpack(dtype.fmt, struct.pack(dtype.fmt, x))[0]
  except OverflowError: return math.copysign(math.inf, x)

def float_to_bf16_bits(x: float) -> int:
  """float -> bfloat16 bits, round to nearest even (NaN stays NaN)."""
  if math.isnan(x): return 0x7fc0
  try: u = struct.unpack('I', struct.pack('f', x))[0]
  except OverflowError: u = 0x7f800000 if x > 0 else 0xff800000
  return ((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff

def bf16_bits_to_float(b: int) -> float: return struct.unpack('f', struct.pack('I', (b & 0xffff) << 16))[0]
