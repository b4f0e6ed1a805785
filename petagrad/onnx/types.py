"""ONNX element types <-> petagrad dtypes, and numpy arrays <-> Tensors at the edges of a graph.

Most ONNX types are petagrad dtypes. The small float and int types petagrad has no dtype for (float8 in four
flavours, float4, int4/uint4, int2/uint2) are *emulated*: inside a graph such a value is held in a wider dtype
(float32 for the float types, int8/uint8 for the int types) and only ever holds values the ONNX type can represent,
because the one op that makes them (Cast, and the quantizers built on it) rounds with Tensor ops
(`round_to_type`). At the graph's edges an input is widened exactly (numpy's astype from ml_dtypes) and an output is
narrowed exactly (every value is representable), so numpy only converts and never computes.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Any
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.dtype import DType

# TensorProto.DataType numbers (onnx.proto); kept here so that the table does not need the onnx package to import
FLOAT, UINT8, INT8, UINT16, INT16, INT32, INT64, STRING, BOOL, FLOAT16, DOUBLE, UINT32, UINT64 = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13
COMPLEX64, COMPLEX128, BFLOAT16 = 14, 15, 16
FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ, UINT4, INT4, FLOAT4E2M1, FLOAT8E8M0, UINT2, INT2 = 17, 18, 19, 20, 21, 22, 23, 24, 25, 26
FLOAT6E2M3, FLOAT6E3M2 = 27, 28

NATIVE: dict[int, DType] = {
  FLOAT: dtypes.float32, UINT8: dtypes.uint8, INT8: dtypes.int8, UINT16: dtypes.uint16, INT16: dtypes.int16, INT32: dtypes.int32,
  INT64: dtypes.int64, BOOL: dtypes.bool, FLOAT16: dtypes.float16, DOUBLE: dtypes.float64, UINT32: dtypes.uint32,
  UINT64: dtypes.uint64, BFLOAT16: dtypes.bfloat16}
ONNX_OF: dict[DType, int] = {v: k for k, v in NATIVE.items()}

@dataclass(frozen=True)
class Emulated:
  """An ONNX type held in a wider petagrad dtype. Floats: `mant` mantissa bits, `emin` the exponent of the smallest
  normal number, `max` the largest finite value, `inf` whether it has infinities, `uz` 'unsigned zero' (no -0, one
  NaN); ints: the range [lo, hi]."""
  name: str
  holder: DType
  mant: int = 0
  emin: int = 0
  max: float = 0.0
  inf: bool = False
  uz: bool = False
  lo: int = 0
  hi: int = 0

EMULATED: dict[int, Emulated] = {
  FLOAT8E4M3FN: Emulated("float8e4m3fn", dtypes.float32, mant=3, emin=-6, max=448.0),
  FLOAT8E4M3FNUZ: Emulated("float8e4m3fnuz", dtypes.float32, mant=3, emin=-7, max=240.0, uz=True),
  FLOAT8E5M2: Emulated("float8e5m2", dtypes.float32, mant=2, emin=-14, max=57344.0, inf=True),
  FLOAT8E5M2FNUZ: Emulated("float8e5m2fnuz", dtypes.float32, mant=2, emin=-15, max=57344.0, uz=True),
  FLOAT4E2M1: Emulated("float4e2m1", dtypes.float32, mant=1, emin=0, max=6.0),
  FLOAT8E8M0: Emulated("float8e8m0", dtypes.float32, mant=0, emin=-127, max=2.0**127),
  INT4: Emulated("int4", dtypes.int8, lo=-8, hi=7),
  UINT4: Emulated("uint4", dtypes.uint8, lo=0, hi=15),
  INT2: Emulated("int2", dtypes.int8, lo=-2, hi=1),
  UINT2: Emulated("uint2", dtypes.uint8, lo=0, hi=3),
}

def type_name(elem_type: int) -> str:
  try:
    import onnx
    return onnx.TensorProto.DataType.Name(elem_type)
  except (ImportError, ValueError): return f"type {elem_type}"

def supported(elem_type: int) -> bool: return elem_type in NATIVE or elem_type in EMULATED

def to_dtype(elem_type: int, what: str = "") -> DType:
  """The petagrad dtype that holds values of this ONNX type (an emulated type's holder)."""
  if (d := NATIVE.get(elem_type)) is not None: return d
  if (e := EMULATED.get(elem_type)) is not None: return e.holder
  raise NotImplementedError(f"{what + ': ' if what else ''}ONNX type {type_name(elem_type)} is not supported by petagrad.onnx")

def np_dtype(elem_type: int) -> Any:
  from onnx import helper
  return helper.tensor_dtype_to_np_dtype(elem_type)

def from_numpy(arr: Any, elem_type: int | None = None, device: str | None = None) -> Tensor:
  """A numpy array (or numpy scalar) -> Tensor; elem_type says what ONNX type it holds (default: from its numpy dtype)."""
  import numpy as np
  arr = np.asarray(arr)
  if elem_type is None: elem_type = _elem_type_of(arr.dtype)
  if elem_type == BFLOAT16:   # the bytes as a bfloat16 buffer (numpy has no bfloat16 petagrad reads)
    return Tensor(np.ascontiguousarray(arr).tobytes(), dtype=dtypes.bfloat16, device=device).reshape(arr.shape)
  if elem_type in NATIVE: return Tensor(arr, device=device, dtype=NATIVE[elem_type]) if arr.dtype != np.dtype(NATIVE[elem_type].name) \
    else Tensor(arr, device=device)
  if (e := EMULATED.get(elem_type)) is not None: return Tensor(arr.astype(e.holder.name), device=device)   # exact: a widening
  raise NotImplementedError(f"ONNX type {type_name(elem_type)} (numpy {arr.dtype}) is not supported by petagrad.onnx")

def to_numpy(t: Tensor, elem_type: int | None = None) -> Any:
  """A Tensor -> numpy array of the ONNX type elem_type (default: the tensor's own dtype)."""
  import numpy as np
  if elem_type is None or elem_type == ONNX_OF.get(t.dtype): elem_type = ONNX_OF[t.dtype]
  if elem_type == BFLOAT16:
    if t.dtype != dtypes.bfloat16: raise TypeError(f"holds {t.dtype} but the graph declares BFLOAT16")
    return np.frombuffer(bytes(t.data()), dtype=np_dtype(BFLOAT16)).reshape(t.shape).copy()
  if elem_type in NATIVE:
    if t.dtype != NATIVE[elem_type]:
      raise TypeError(f"holds {t.dtype} but the graph declares {type_name(elem_type)}")
    return t.numpy()
  if elem_type in EMULATED: return t.numpy().astype(np_dtype(elem_type))   # exact: every value is representable
  raise NotImplementedError(f"ONNX type {type_name(elem_type)} is not supported by petagrad.onnx")

def _elem_type_of(npdt: Any) -> int:
  from onnx import helper
  try: return helper.np_dtype_to_tensor_dtype(npdt)
  except (KeyError, TypeError, ValueError): raise TypeError(f"numpy dtype {npdt} has no ONNX type") from None

def elem_type_of_array(arr: Any) -> int:
  import numpy as np
  return _elem_type_of(np.asarray(arr).dtype)

# ------------------------------------------------------------ rounding into an emulated type (Tensor ops only)
def _pow2(k: Tensor) -> Tensor:
  """2**k (float32) for int32 k in [-126, 127], built from the exponent bits (exact, unlike exp2)."""
  return ((k + 127).cast(dtypes.int32) * (1 << 23)).bitcast(dtypes.float32)

def _round_e8m0(x: Tensor, saturate: bool, round_mode: str) -> Tensor:
  """float8e8m0 (a bare exponent: 2**(e-127), 0xFF is NaN): the float32 exponent, rounded up/down/to nearest by the
  mantissa bits (onnx's rule), as the float32 value 2**(e-127)."""
  bits = x.cast(dtypes.float32).bitcast(dtypes.int32)
  ex = (bits // (1 << 23)).bitwise_and(0xFF)
  frac = bits.bitwise_and(0x7FFFFF)
  if round_mode == "up": inc = frac > 0
  elif round_mode == "nearest":
    g, r, st = bits.bitwise_and(0x400000) > 0, bits.bitwise_and(0x200000) > 0, bits.bitwise_and(0x1FFFFF) > 0
    inc = g & (r | st | (ex > 0))
  elif round_mode == "down": inc = ex < 0
  else: raise ValueError(f"round_mode must be 'up', 'down' or 'nearest', got {round_mode!r}")
  special = ex == 0xFF
  if saturate: inc = inc & (ex != 0xFE)
  ex = (inc & ~special).where(ex + 1, ex)
  val = (ex == 0).where(0x400000, ex * (1 << 23)).cast(dtypes.int32).bitcast(dtypes.float32)
  return (ex == 0xFF).where(float("nan"), val)

def round_to_type(x: Tensor, elem_type: int, saturate: bool = True, round_mode: str = "up") -> Tensor:
  """Round x to the nearest value of the ONNX type elem_type (ties to even), as ONNX Cast does, in Tensor ops; the
  result is held in the type's holder dtype. Native types are a plain cast."""
  if (e := EMULATED.get(elem_type)) is None: return x.cast(to_dtype(elem_type))
  if elem_type == FLOAT8E8M0: return _round_e8m0(x, saturate, round_mode)
  if e.holder.is_int:
    # int4/uint4/int2/uint2 (what onnx's tests expect, numpy's astype with ml_dtypes): floats truncate toward zero and
    # a value out of range (or NaN) becomes 0; ints keep their low bits (two's complement)
    if x.dtype.is_float:
      t = x.trunc()
      ok = (t >= e.lo) & (t <= e.hi)
      return ok.where(t, 0).cast(e.holder)
    bits = (e.hi - e.lo).bit_length()
    low = x.cast(dtypes.int64).bitwise_and((1 << bits) - 1)
    if e.lo < 0: low = (low > e.hi).where(low - (1 << bits), low)
    return low.cast(e.holder)
  f = x.cast(dtypes.float32)
  a = f.abs()
  # the exponent of a (float32 bits), at least emin: subnormals of the small type share the smallest exponent
  ex = ((a.bitcast(dtypes.int32) // (1 << 23)) - 127).maximum(e.emin)
  ulp = _pow2(ex - e.mant)
  q = (a / ulp).round_half_even() * ulp
  nan = f.isnan()
  over = q > e.max
  if saturate: q = over.where(e.max, q)   # beyond the range (infinities too) clamps to the largest value
  else:
    q = over.where(float("inf") if e.inf else float("nan"), q)
  q = f.signbit().where(-q, q)
  if e.uz: q = (q == 0).where(0.0, q)   # no negative zero
  return nan.where(float("nan"), q)
