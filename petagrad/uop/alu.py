"""The living definition of every ALU op: what it computes on Python scalars.

Used by constant folding and by the PYTHON device; the C renderers must agree with it (tests check).
Integer ops wrap like C with -fwrapv; integer division and modulo truncate toward zero like C, and a
zero divisor gives 0 (instead of a crash: documented in docs/ops.md).

>>> from petagrad.uop.alu import exec_alu
>>> from petagrad.uop.ops import Ops
>>> from petagrad.dtype import dtypes
>>> exec_alu(Ops.IDIV, dtypes.int32, (-7, 2))
-3
"""
from __future__ import annotations
import math, struct
from typing import Any, Callable
from petagrad.uop.ops import Ops
from petagrad.dtype import DType, dtypes, truncate

def _fdiv(a: float, b: float) -> float:
  if b == 0:
    if a == 0 or math.isnan(a): return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)
  return a / b

def _idiv(a: int, b: int) -> int:
  if b == 0: return 0
  q = abs(a) // abs(b)
  return q if (a < 0) == (b < 0) else -q

def _mod(a: int, b: int) -> int: return 0 if b == 0 else a - _idiv(a, b) * b

def _max(a, b):
  if isinstance(a, float) and math.isnan(a): return a
  return a if a > b else b

def _exp2(x: float) -> float:
  try: return 2.0 ** x
  except OverflowError: return math.inf

def _log2(x: float) -> float:
  if math.isnan(x) or x < 0: return math.nan
  if x == 0: return -math.inf
  return math.log2(x)

def _sin(x: float) -> float: return math.nan if math.isinf(x) else math.sin(x)
def _sqrt(x: float) -> float: return math.nan if x < 0 or math.isnan(x) else math.sqrt(x)
def _trunc(x: float) -> float: return x if math.isinf(x) or math.isnan(x) else math.copysign(float(math.trunc(x)), x)

# op -> python function of the (already dtype-correct) operands; results are truncated to the dtype after
PYTHON_ALU: dict[Ops, Callable[..., Any]] = {
  Ops.NEG: lambda x: not x if isinstance(x, bool) else -x, Ops.EXP2: _exp2, Ops.LOG2: _log2, Ops.SIN: _sin, Ops.SQRT: _sqrt,
  Ops.RECIPROCAL: lambda x: _fdiv(1.0, x), Ops.TRUNC: _trunc,
  Ops.ADD: lambda a, b: a + b, Ops.SUB: lambda a, b: a - b, Ops.MUL: lambda a, b: a * b, Ops.FDIV: _fdiv,
  Ops.IDIV: _idiv, Ops.MOD: _mod, Ops.MAX: _max, Ops.CMPLT: lambda a, b: a < b, Ops.CMPNE: lambda a, b: a != b,
  Ops.AND: lambda a, b: a & b, Ops.OR: lambda a, b: a | b, Ops.XOR: lambda a, b: a ^ b,
  Ops.SHL: lambda a, b: a << b if 0 <= b < 64 else 0, Ops.SHR: lambda a, b: a >> b if 0 <= b < 64 else (-1 if a < 0 else 0),
  Ops.WHERE: lambda c, a, b: a if c else b,
}

def exec_alu(op: Ops, dtype: DType, srcs: tuple) -> Any:
  """Compute one ALU op on Python scalars and round/wrap the result to `dtype`."""
  if op is Ops.ADD and dtype.is_bool: return bool(srcs[0] or srcs[1])
  if op is Ops.MUL and dtype.is_bool: return bool(srcs[0] and srcs[1])
  return truncate(PYTHON_ALU[op](*srcs), dtype)

def exec_cast(x: Any, src: DType, dst: DType) -> Any:
  if dst.is_bool: return bool(x != 0) if not (isinstance(x, float) and math.isnan(x)) else True
  if dst.is_int and src.is_float:
    if math.isnan(x) or math.isinf(x): return truncate(0, dst)   # C leaves this undefined; we pick 0
    return truncate(math.trunc(x), dst)
  return truncate(x, dst)

def exec_bitcast(x: Any, src: DType, dst: DType) -> Any:
  from petagrad.dtype import float_to_bf16_bits, bf16_bits_to_float
  raw = struct.pack('H', float_to_bf16_bits(x)) if src == dtypes.bfloat16 else struct.pack(src.fmt, x)
  if dst == dtypes.bfloat16: return bf16_bits_to_float(struct.unpack('H', raw)[0])
  return struct.unpack(dst.fmt, raw)[0]
