"""Pins exec_alu, the scalar definition of every ALU op, against numpy on edge values.

Where numpy's semantics differ from petagrad's (C's) on purpose, the expected value is derived from
numpy explicitly: integer division and modulo truncate toward zero (numpy floors), a zero divisor
gives 0, shifts outside [0, bits) give 0 (or -1 for a right shift of a negative value), bool NEG is
logical not. Integers wrap around (C with -fwrapv); floats follow IEEE 754 (nan, inf, -0.0).
"""
from __future__ import annotations
import itertools, math
import numpy as np
import pytest
from petagrad.uop.alu import exec_alu
from petagrad.uop.ops import Ops, GroupOp
from petagrad.dtype import dtypes, DType

DTYPES = [dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.uint32, dtypes.float16, dtypes.float32, dtypes.float64]
NP = {dtypes.bool: np.bool_, dtypes.int8: np.int8, dtypes.uint8: np.uint8, dtypes.int32: np.int32, dtypes.int64: np.int64,
      dtypes.uint32: np.uint32, dtypes.float16: np.float16, dtypes.float32: np.float32, dtypes.float64: np.float64}

def edge_values(dt: DType) -> list:
  """Python scalars of dt: 0, +-1, small values, min, max (floats: -0.0, +-inf, nan, smallest normal and subnormal)."""
  if dt.is_bool: return [False, True]
  if dt.is_int:
    vals = [0, 1, 2, 3, 7, dt.max, dt.max - 1, dt.bits - 1, dt.bits, dt.bits + 1, 64]
    if not dt.is_unsigned: vals += [-1, -2, -3, -7, dt.min, dt.min + 1]
    return sorted({v for v in vals if dt.min <= v <= dt.max})
  fi = np.finfo(NP[dt])
  vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 3.0, 7.0, 1e-3, float(fi.max), float(fi.min), float(fi.tiny),
          float(fi.smallest_subnormal), -float(fi.smallest_subnormal), math.inf, -math.inf, math.nan]
  return [float(NP[dt](v)) for v in vals]

def same(got, want, dt: DType, rtol: float = 0.0) -> bool:
  """got (exec_alu's Python scalar) is want (a numpy scalar), with the Python type of dt's values."""
  if dt.is_bool: return type(got) is bool and got == bool(want)
  if dt.is_int: return type(got) is int and got == int(want)
  if type(got) is not float: return False
  want = float(want)
  if math.isnan(want) or math.isnan(got): return math.isnan(want) and math.isnan(got)
  if got == want: return math.copysign(1.0, got) == math.copysign(1.0, want)   # -0.0 is not 0.0
  return rtol > 0 and math.isfinite(got) and math.isfinite(want) and abs(got - want) <= rtol * abs(want)

def trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """C division from numpy's floor division (numpy gives 0 for a zero divisor, as petagrad does)."""
  q, r = np.floor_divide(a, b), np.remainder(a, b)
  return np.where((r != 0) & ((a < 0) != (b < 0)), q + 1, q).astype(a.dtype)

# numpy functions with the same semantics as exec_alu (on the dtypes each op supports)
BINARY = {
  Ops.ADD: np.add, Ops.SUB: np.subtract, Ops.MUL: np.multiply, Ops.FDIV: np.divide, Ops.IDIV: trunc_div, Ops.MOD: np.fmod,
  Ops.MAX: np.maximum, Ops.CMPLT: np.less, Ops.CMPNE: np.not_equal, Ops.AND: np.bitwise_and, Ops.OR: np.bitwise_or,
  Ops.XOR: np.bitwise_xor, Ops.SHL: np.left_shift, Ops.SHR: np.right_shift,
}
UNARY = {Ops.NEG: np.negative, Ops.EXP2: np.exp2, Ops.LOG2: np.log2, Ops.SIN: np.sin, Ops.SQRT: np.sqrt,
         Ops.RECIPROCAL: np.reciprocal, Ops.TRUNC: np.trunc}
# transcendental functions: numpy's float16/float32 versions are not correctly rounded; exec_alu computes in double
# and rounds once. Compared with numpy in float64 (then rounded to the dtype), with a tolerance of a few ulp.
RTOL = {dtypes.float16: 2e-3, dtypes.float32: 3e-7, dtypes.float64: 1e-15}

def supports(op: Ops, dt: DType) -> bool:
  if op in GroupOp.FloatOnly: return dt.is_float
  if op in GroupOp.IntOnly: return dt.is_int
  if op in GroupOp.IntOrBool: return not dt.is_float
  if op is Ops.SUB and dt.is_bool: return False   # numpy has no bool subtract: pinned in test_bool_table
  return True

def test_every_alu_op_is_covered():
  assert set(BINARY) | set(UNARY) | {Ops.WHERE} == set(GroupOp.ALU)

def cases(ops) -> list: return [pytest.param(op, dt, id=f"{op.name}-{dt.name}") for op in ops for dt in DTYPES if supports(op, dt)]

@pytest.mark.parametrize("op,dt", cases(BINARY))
def test_binary(op: Ops, dt: DType):
  vals = edge_values(dt)
  pairs = list(itertools.product(vals, vals))
  a, b = np.array([p[0] for p in pairs], NP[dt]), np.array([p[1] for p in pairs], NP[dt])
  with np.errstate(all="ignore"): want = BINARY[op](a, b)
  out_dt = dtypes.bool if op in GroupOp.Comparison else dt
  bad = []
  for (x, y), w in zip(pairs, want):
    if op is Ops.MAX and dt.is_float and x == y == 0 and math.copysign(1, x) != math.copysign(1, y): continue   # see test_max_signed_zero
    got = exec_alu(op, out_dt, (x, y))
    if not same(got, w, out_dt): bad.append(((x, y), got, w))
  assert not bad, f"{op.name} {dt.name}: (inputs, exec_alu, numpy) {bad[:8]}"

@pytest.mark.parametrize("op,dt", cases(UNARY))
def test_unary(op: Ops, dt: DType):
  vals = edge_values(dt)
  transcendental = op in (Ops.EXP2, Ops.LOG2, Ops.SIN)
  with np.errstate(all="ignore"):
    if dt.is_bool and op is Ops.NEG: want = np.logical_not(np.array(vals, np.bool_))   # bool NEG is logical not
    elif transcendental: want = UNARY[op](np.array(vals, np.float64)).astype(NP[dt])
    else: want = UNARY[op](np.array(vals, NP[dt]))
  bad = []
  for x, w in zip(vals, want):
    if op is Ops.TRUNC and -1 < x <= 0 and math.copysign(1, x) < 0: continue   # see test_trunc_keeps_sign_of_zero
    got = exec_alu(op, dt, (x,))
    if not same(got, w, dt, RTOL[dt] if transcendental else 0.0): bad.append((x, got, w))
  assert not bad, f"{op.name} {dt.name}: (input, exec_alu, numpy) {bad[:8]}"

@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: d.name)
def test_where(dt: DType):
  vals = edge_values(dt)[:6] + edge_values(dt)[-3:]
  for cnd, x, y in itertools.product([False, True], vals, vals):
    want = np.where(np.bool_(cnd), NP[dt](x), NP[dt](y))
    assert same(exec_alu(Ops.WHERE, dt, (cnd, x, y)), want, dt), (cnd, x, y)

# ------------------------------------------------------------ pinned where numpy has no opinion or differs

def test_int_division_truncates():
  for dt in (dtypes.int8, dtypes.int32, dtypes.int64):
    assert exec_alu(Ops.IDIV, dt, (-7, 2)) == -3 and exec_alu(Ops.MOD, dt, (-7, 2)) == -1
    assert exec_alu(Ops.IDIV, dt, (7, -2)) == -3 and exec_alu(Ops.MOD, dt, (7, -2)) == 1
    assert exec_alu(Ops.IDIV, dt, (-7, -2)) == 3 and exec_alu(Ops.MOD, dt, (-7, -2)) == -1
    # division by zero is defined as 0; min // -1 wraps to min, min % -1 is 0
    assert exec_alu(Ops.IDIV, dt, (5, 0)) == 0 and exec_alu(Ops.MOD, dt, (-5, 0)) == 0
    assert exec_alu(Ops.IDIV, dt, (dt.min, -1)) == dt.min and exec_alu(Ops.MOD, dt, (dt.min, -1)) == 0
  assert exec_alu(Ops.IDIV, dtypes.uint32, (2**32 - 1, 2)) == 2**31 - 1

def test_int_wraparound():
  assert exec_alu(Ops.ADD, dtypes.int8, (127, 1)) == -128
  assert exec_alu(Ops.SUB, dtypes.uint8, (0, 1)) == 255
  assert exec_alu(Ops.MUL, dtypes.int32, (2**30, 4)) == 0
  assert exec_alu(Ops.NEG, dtypes.int64, (dtypes.int64.min,)) == dtypes.int64.min
  assert exec_alu(Ops.NEG, dtypes.uint32, (1,)) == 2**32 - 1
  assert exec_alu(Ops.SHL, dtypes.int8, (1, 7)) == -128

def test_shifts_out_of_range():
  for dt in (dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32):
    for s in (dt.bits, dt.bits + 1, 64, 1000, -1):
      if not dt.min <= s <= dt.max: continue
      assert exec_alu(Ops.SHL, dt, (1, s)) == 0
      assert exec_alu(Ops.SHR, dt, (dt.max, s)) == 0
      if not dt.is_unsigned: assert exec_alu(Ops.SHR, dt, (-5, s)) == -1

def test_bool_table():
  T, F = True, False
  for a, b in itertools.product([F, T], [F, T]):
    assert exec_alu(Ops.ADD, dtypes.bool, (a, b)) is (a or b)
    assert exec_alu(Ops.MUL, dtypes.bool, (a, b)) is (a and b)
    assert exec_alu(Ops.SUB, dtypes.bool, (a, b)) is (a != b)   # C: (bool)(a - b)
    assert exec_alu(Ops.MAX, dtypes.bool, (a, b)) is (a or b)
    assert exec_alu(Ops.CMPLT, dtypes.bool, (a, b)) is (not a and b)
    assert exec_alu(Ops.CMPNE, dtypes.bool, (a, b)) is (a != b)
    assert exec_alu(Ops.XOR, dtypes.bool, (a, b)) is (a != b)
  assert exec_alu(Ops.NEG, dtypes.bool, (True,)) is False and exec_alu(Ops.NEG, dtypes.bool, (False,)) is True

def test_max_signed_zero():
  # like the C renderer's ((a!=a)||(a>b)) ? a : b: equal zeros give the second operand; nan wins from either side
  for dt in (dtypes.float16, dtypes.float32, dtypes.float64):
    assert math.copysign(1, exec_alu(Ops.MAX, dt, (0.0, -0.0))) == -1
    assert math.copysign(1, exec_alu(Ops.MAX, dt, (-0.0, 0.0))) == 1
    assert math.isnan(exec_alu(Ops.MAX, dt, (math.nan, 1.0))) and math.isnan(exec_alu(Ops.MAX, dt, (1.0, math.nan)))

def test_float_rounding_to_dtype():
  # results are rounded to the dtype (to nearest even): float16 overflows to inf from 65520 on, float32 sums round
  assert exec_alu(Ops.ADD, dtypes.float16, (65504.0, 8.0)) == 65504.0
  assert exec_alu(Ops.ADD, dtypes.float16, (65504.0, 16.0)) == math.inf
  assert exec_alu(Ops.ADD, dtypes.float16, (2048.0, 1.0)) == 2048.0 and exec_alu(Ops.ADD, dtypes.float16, (2050.0, 1.0)) == 2052.0
  assert exec_alu(Ops.ADD, dtypes.float32, (1.0, 2.0**-24)) == 1.0
  assert exec_alu(Ops.ADD, dtypes.float64, (1.0, 2.0**-52)) == 1.0 + 2.0**-52
  assert exec_alu(Ops.EXP2, dtypes.float64, (1e308,)) == math.inf and exec_alu(Ops.EXP2, dtypes.float64, (-1e308,)) == 0.0

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_trunc_keeps_sign_of_zero(dt: DType):
  for x in (-0.5, -0.0, -0.999):
    assert math.copysign(1.0, exec_alu(Ops.TRUNC, dt, (x,))) == -1.0, x
