"""Seeded random op graphs (hypothesis) against an exact numpy reference, on every test device.

Each example is a small DAG of tensor ops over 1-4 random input tensors of any dtype: elementwise unary, binary and
ternary ops with broadcasting and dtype promotion, casts, bitwise and integer ops, reductions, movement ops (reshape,
permute, expand, pad, shrink, flip, slicing with negative steps, cat, stack), matmul, with 0- and 1-sized dims
everywhere.
1-4 of its nodes are realized together with `Tensor.realize_all(...)` (so launch groups form), some intermediates are
realized on their own first and then built upon. The graph is written as Python code and run with `exec`: a failure
prints that program, a copy-pasteable repro. docs/testing.md says how to run the long run and reproduce a failure.

The reference runs alongside the generator, op by op, in numpy: integers as exact Python ints, floats in float64
rounded to the node's dtype after every op (torch rounds bfloat16), and for every element a bound on how far
petagrad may legitimately be (0: exact; inf: not compared). The bound grows with each op's rounding (petagrad fuses,
keeps float16 in float32 registers, contracts to FMA and uses polynomial exp2/log2), so exact results (integer
ops, float ops on values of a coarse grid) are compared exactly and others within what the rounding explains.
Elements are not compared where the semantics legitimately differ: integer overflow, float->int casts out of range
(undefined in C), results that are not finite, and comparisons or casts of floats too close to call.

After the run: every node's shape and dtype, the values of every realized tensor, and every input's values
(a kernel writing into the wrong buffer shows up as a changed input or an earlier result); then the same program
runs again, with every cache warm, and is checked again.

    THREADS=1 python -m pytest -q -p no:warnings test/backend/test_fuzz_graphs.py      # the CI budget
    FUZZ_GRAPHS_EXAMPLES=10000 TEST_DEVICES=CPU THREADS=1 python -m pytest -q -p no:warnings test/backend/test_fuzz_graphs.py
"""
from __future__ import annotations
import collections, math, os, random, tempfile, traceback
from dataclasses import dataclass
from typing import Any, Callable
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, seed as hypothesis_seed, settings, strategies as st
from petagrad import Tensor, dtypes
from petagrad.dtype import DType
from petagrad.engine import realize

# ------------------------------------------------------------------ budget (environment variables of this file only)
# FUZZ_GRAPHS_EXAMPLES: graphs per device (the long run); unset: the CI budget below, derandomized (the same graphs
# in every run). FUZZ_GRAPHS_SEED: the seed of a run with FUZZ_GRAPHS_EXAMPLES (random and printed when unset).
# FUZZ_GRAPHS_REPORT=path: keep going after a failing graph, append each one (message and program, not shrunk) to
# path and fail at the end (hypothesis stops at the first failure and shrinks it otherwise).
CI_EXAMPLES = {"CPU": 350, "PYTHON": 200, "CL": 200}   # CL (PoCL): each new kernel builds in 1-3 s
LONG_EXAMPLES = int(os.environ.get("FUZZ_GRAPHS_EXAMPLES", "0") or 0)
LONG_SEED = int(os.environ["FUZZ_GRAPHS_SEED"]) if os.environ.get("FUZZ_GRAPHS_SEED") else random.randrange(1 << 32)
REPORT_PATH = os.environ.get("FUZZ_GRAPHS_REPORT", "")
# elements per tensor: the PYTHON device interprets one scalar at a time
MAX_ELEMS = {"PYTHON": 64}
MAX_ELEMS_DEFAULT = 1024
MAX_OPS = 18
WIDE = 0.1   # the share of input tensors with values across the whole range of their dtype
# the graphs being run, written before they run: if the process dies (a crash in a kernel), the repro is there
DUMP_PATH = os.environ.get("FUZZ_GRAPHS_DUMP") or os.path.join(tempfile.gettempdir(), "petagrad_fuzz_last_graphs.py")
RECENT: collections.deque[str] = collections.deque(maxlen=5)

# ------------------------------------------------------------------ dtypes
B = dtypes.bool
SIGNED = (dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64)
UNSIGNED = (dtypes.uint8, dtypes.uint16, dtypes.uint32, dtypes.uint64)
INTS = SIGNED + UNSIGNED
F16, BF16, F32, F64 = dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64
FLOATS = (F16, BF16, F32, F64)
ALL_DTYPES = (B,) + INTS + FLOATS
MANT = {F16: 11, BF16: 8, F32: 24, F64: 53}                 # significand bits
TINY = {F16: 2.0 ** -14, BF16: 2.0 ** -126, F32: 2.0 ** -126, F64: 2.0 ** -1022}   # smallest normal
FMAX = {F16: 65504.0, BF16: float(torch.finfo(torch.bfloat16).max), F32: float(np.finfo(np.float32).max), F64: float(np.finfo(np.float64).max)}
INF = math.inf

def unit(dt: DType) -> float: return 2.0 ** (1 - MANT[dt])   # the spacing of floats in [1, 2)

def promote(a: DType, b: DType) -> DType | None:
  """The dtype of a binary op on two tensors (PyTorch's lattice; numpy's where PyTorch has none); None: no dtype
  holds both (uint64 with a signed int raises TypeError by design)."""
  if a is b: return a
  if a is B or b is B: return b if a is B else a
  if a in FLOATS or b in FLOATS:
    if a in FLOATS and b in FLOATS:
      if {a, b} == {F16, BF16}: return F32
      return a if a.itemsize >= b.itemsize else b
    return a if a in FLOATS else b
  if (a in SIGNED) == (b in SIGNED): return a if a.itemsize >= b.itemsize else b
  s, u = (a, b) if a in SIGNED else (b, a)
  if s.itemsize > u.itemsize: return s
  return None if u is dtypes.uint64 else {1: dtypes.int16, 2: dtypes.int32, 4: dtypes.int64}[u.itemsize]

def scalar_dtype(t: DType, x: bool | int | float) -> DType:
  """The dtype of `tensor op python_scalar`: a scalar never widens within its kind."""
  if isinstance(x, bool): return t
  if isinstance(x, int): return dtypes.int64 if t is B else t
  return t if t in FLOATS else F32

def float_of(dt: DType) -> DType: return dt if dt in FLOATS else F32   # what exp/log/div/mean compute in

# ------------------------------------------------------------------ the reference
def fround(x: np.ndarray, dt: DType) -> np.ndarray:
  """float64 values rounded to dt (kept as float64)."""
  x = np.asarray(x, dtype=np.float64)
  with np.errstate(all="ignore"):
    if dt is F64: return x.copy()
    if dt is F32: return x.astype(np.float32).astype(np.float64)
    if dt is F16: return x.astype(np.float16).astype(np.float64)
  return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).to(torch.float64).numpy().reshape(x.shape)

def pyints(x: Any) -> np.ndarray:
  """An object array of exact Python ints."""
  a = np.asarray(x, dtype=object)
  return np.array([int(v) for v in a.flat], dtype=object).reshape(a.shape)

def wrap(v: np.ndarray, dt: DType) -> np.ndarray:
  """Python ints reduced modulo 2**bits into dt's range (C conversion; torch and numpy do the same)."""
  m = 1 << dt.bits
  return pyints([(int(x) - int(dt.min)) % m + int(dt.min) for x in np.asarray(v, dtype=object).flat]).reshape(np.shape(v))

def _clean(e: np.ndarray) -> np.ndarray:
  e = np.asarray(e, dtype=np.float64)
  return np.where(np.isnan(e), INF, e)

@dataclass
class Ref:
  """The reference value of one node: v (bool: np.bool_; ints: exact Python ints; floats: float64 holding values of
  dt) and e, a float64 bound on |petagrad - v| per element (0: exact; inf: not compared)."""
  v: np.ndarray
  e: np.ndarray
  dt: DType
  def __post_init__(self) -> None:   # reductions to 0-d give numpy or Python scalars
    if self.dt in INTS: self.v = self.v if isinstance(self.v, np.ndarray) and self.v.dtype == object else pyints(self.v)
    else: self.v = np.asarray(self.v)
    if self.dt is B: self.v = self.v.astype(bool)
    elif self.dt in FLOATS: self.v = self.v.astype(np.float64)
    self.e = np.asarray(self.e, dtype=np.float64)
    assert self.e.shape == self.v.shape, (self.e.shape, self.v.shape)
  @property
  def shape(self) -> tuple[int, ...]: return tuple(self.v.shape)
  @property
  def numel(self) -> int: return int(np.prod(self.shape, dtype=np.int64))
  def view(self, fn: Callable[[np.ndarray], np.ndarray]) -> Ref:
    """A movement op: the same index function on values and bounds."""
    return Ref(fn(self.v), fn(self.e), self.dt)

def farith(v: Any, e: Any, dt: DType, c: Any = 2.0, always: bool = False) -> Ref:
  """A computed float result: round the exact value v to dt; when it was not exact (or its inputs were not), add
  c units in the last place (petagrad rounds differently: in float32 registers, with FMA, with polynomials)."""
  with np.errstate(all="ignore"):
    v = np.asarray(v, dtype=np.float64)
    r = fround(v, dt)
    e = _clean(np.broadcast_to(e, v.shape))
    inexact = np.ones(v.shape, bool) if always else (r != v) | (e > 0)
    e = e + np.where(inexact, np.asarray(c) * (np.abs(r) * unit(dt) + TINY[dt]), 0.0)
    # overflow depends on where petagrad rounds (a fused float16 chain stays in float32), and inf/nan results on
    # the order of evaluation (NaN propagation in max): not compared
    e = np.where(np.isfinite(r) & (np.abs(r) + e < FMAX[dt]), _clean(e), INF)
  return Ref(r, e, dt)

def iarith(v: Any, e: Any, dt: DType) -> Ref:
  """A computed integer result (exact Python ints): elements that overflow dt are not compared (petagrad builds with
  -fwrapv, yet a fused chain may keep a narrow int in a wider register: overflow semantics are not pinned)."""
  v = pyints(v)
  lo, hi = int(dt.min), int(dt.max)
  ok = np.array([lo <= x <= hi for x in v.flat], dtype=bool).reshape(v.shape)
  return Ref(wrap(v, dt), np.where(ok, _clean(np.broadcast_to(e, v.shape)), INF), dt)

def const(x: bool | int | float, dt: DType, shape: tuple[int, ...]) -> Ref:
  if dt is B: v: np.ndarray = np.full(shape, bool(x))
  elif dt in INTS: v = wrap(np.full(shape, int(x), dtype=object), dt)
  else: v = fround(np.full(shape, float(x)), dt)
  return Ref(v, np.zeros(shape), dt)

def cast(r: Ref, dt: DType) -> Ref:
  """Tensor.cast: floats to ints truncate toward zero, ints to narrower ints wrap, anything to bool is `!= 0`."""
  if r.dt is dt: return r
  s = r.dt
  if dt is B:
    nz = (r.v != 0).astype(bool)
    # a float within its error bound of 0 could be either
    e = np.where((r.e > 0) & (np.abs(r.v.astype(np.float64)) <= r.e), INF, r.e) if s in FLOATS else r.e
    return Ref(nz, np.where(np.isinf(e), INF, 0.0), B)
  if dt in FLOATS:
    if s is B: return farith(r.v.astype(np.float64), r.e, dt)
    if s in INTS:
      fv = np.array([float(x) for x in r.v.flat], dtype=np.float64).reshape(r.shape)
      exact = np.array([float(x) == x for x in r.v.flat], dtype=bool).reshape(r.shape)
      ref = farith(fv, r.e, dt)
      return Ref(ref.v, np.where(exact, ref.e, ref.e + 2 * (np.abs(ref.v) * unit(dt) + TINY[dt])), dt)
    return farith(r.v, r.e, dt)
  if s is B: return Ref(pyints(r.v.astype(np.int64)), r.e, dt)
  if s in INTS: return Ref(wrap(r.v, dt), r.e, dt)   # modular (C conversion with -fwrapv; torch and numpy agree)
  # float -> int: truncation; out of range is undefined in C (and differs in torch): not compared
  with np.errstate(all="ignore"):
    fin = np.isfinite(r.v)
    t = np.where(fin, np.trunc(r.v), 0.0)
    vals = pyints([int(x) for x in t.flat]).reshape(r.shape)
    ok = np.array([int(dt.min) <= x <= int(dt.max) for x in vals.flat], dtype=bool).reshape(r.shape) & fin
    lo, hi = np.trunc(np.where(fin, r.v - r.e, 0.0)), np.trunc(np.where(fin, r.v + r.e, 0.0))
    sure = (r.e == 0) | ((lo == t) & (hi == t) & np.isfinite(r.e))
  return Ref(wrap(np.where(ok, vals, 0), dt), np.where(ok & sure, 0.0, INF), dt)

def bcast(*rs: Ref) -> list[Ref]:
  shape = np.broadcast_shapes(*(r.shape for r in rs))
  return [Ref(np.broadcast_to(r.v, shape), np.broadcast_to(r.e, shape), r.dt) for r in rs]

def emax(*es: np.ndarray) -> np.ndarray:
  """The bound of an exact (integer or bool) op: inf when any input is not compared."""
  out = np.zeros(np.broadcast_shapes(*(np.shape(e) for e in es)))
  for e in es: out = np.maximum(out, e)
  return np.where(out > 0, INF, 0.0)

def ref_binary(op: str, a: Ref, b: Ref) -> Ref:
  """a op b, both already of the result dtype and shape."""
  dt = a.dt
  ea, eb = a.e, b.e
  if op in ("lt", "gt", "le", "ge", "eq", "ne"):
    if dt is B: x, y = a.v.astype(np.int64), b.v.astype(np.int64)
    else: x, y = a.v, b.v
    res = {"lt": lambda: x < y, "gt": lambda: x > y, "le": lambda: x <= y, "ge": lambda: x >= y, "eq": lambda: x == y, "ne": lambda: x != y}[op]()
    res = np.asarray(res).astype(bool)
    if dt in FLOATS:
      with np.errstate(all="ignore"):
        close = (ea + eb > 0) & ~(np.abs(x - y) > ea + eb)
      return Ref(res, np.where(close | np.isinf(ea) | np.isinf(eb), INF, 0.0), B)
    return Ref(res, emax(ea, eb), B)
  if op in ("maximum", "minimum"):
    pick = (a.v >= b.v) if op == "maximum" else (a.v <= b.v)
    pick = np.asarray(pick).astype(bool)
    v = np.where(pick, a.v, b.v)
    if dt in FLOATS: return Ref(v, _clean(np.maximum(ea, eb)), dt)
    return Ref(pyints(v) if dt in INTS else v.astype(bool), emax(ea, eb), dt)
  if dt is B:   # bool add/mul are or/and (PyTorch)
    fn = {"add": np.logical_or, "or": np.logical_or, "mul": np.logical_and, "and": np.logical_and, "xor": np.logical_xor}[op]
    return Ref(fn(a.v, b.v), emax(ea, eb), B)
  if dt in INTS:
    x, y = a.v, b.v
    res = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y, "and": lambda: x & y, "or": lambda: x | y,
           "xor": lambda: x ^ y, "floordiv": lambda: x // y, "mod": lambda: x % y}[op]()
    return iarith(res, emax(ea, eb), dt)
  with np.errstate(all="ignore"):
    x, y = a.v, b.v
    if op == "add": return farith(x + y, ea + eb, dt)
    if op == "sub": return farith(x - y, ea + eb, dt)
    if op == "mul": return farith(x * y, np.abs(x) * eb + np.abs(y) * ea + ea * eb, dt)
    if op == "div":
      q = x / y
      den = np.abs(y) - eb
      # petagrad may divide as a multiply by the reciprocal: not correctly rounded
      return farith(q, np.where(den > 0, (ea + np.abs(q) * eb) / np.where(den > 0, den, 1.0), INF), dt, c=4.0, always=True)
  raise AssertionError(f"no reference for {op} on {dt}")

def ref_unary(op: str, a: Ref) -> Ref:
  dt = a.dt
  if op == "neg": return Ref(-a.v, a.e, dt) if dt in FLOATS else iarith(-a.v, a.e, dt)
  if op == "abs":
    if dt is B or dt in UNSIGNED: return a
    return Ref(np.abs(a.v), a.e, dt) if dt in FLOATS else iarith(np.abs(a.v), a.e, dt)
  if op == "invert": return Ref(~a.v, a.e, B) if dt is B else Ref(wrap(-a.v - 1, dt), a.e, dt)
  if op == "relu":
    if dt in FLOATS: return Ref(np.where(a.v > 0, a.v, 0.0), a.e, dt)
    return Ref(pyints(np.where(np.asarray(a.v > 0).astype(bool), a.v, 0)), a.e, dt)
  x = cast(a, float_of(dt))
  f, v, e = x.dt, x.v, x.e
  u = unit(f)
  with np.errstate(all="ignore"):
    if op == "exp":   # exp2(x * log2(e)): the product's rounding is a relative error of |x| units in the result
      r = np.exp(v)
      return farith(r, r * np.expm1(e), f, c=4.0 + 2.0 * np.abs(v), always=True)
    if op == "log":   # log2(x) * ln(2)
      lo = v - e
      prop = np.where(lo > 0, np.log(v) - np.log(np.where(lo > 0, lo, 1.0)), INF)
      return farith(np.log(v), prop + 4 * u, f, c=4.0, always=True)
    if op == "sqrt":
      lo = v - e
      prop = np.where(lo >= 0, np.sqrt(v + e) - np.sqrt(np.maximum(lo, 0.0)), INF)
      return farith(np.sqrt(v), prop, f)
    if op == "sin": return farith(np.sin(v), np.minimum(e, 2.0) + 4 * u * (1 + np.abs(v)), f, c=4.0, always=True)
    if op == "sigmoid":
      s = 1 / (1 + np.exp(-v))
      return farith(s, e / 4 + 8 * u, f, c=4.0 + 2.0 * np.abs(v), always=True)
  raise AssertionError(f"no reference for {op}")

def exact_sum(v: np.ndarray, acc: DType) -> bool:
  """Every partial sum of these floats, in any order, is exact in acc (they sit on one grid and stay small)."""
  if not np.all(np.isfinite(v)): return False
  for k in range(0, 40):
    s = v * 2.0 ** k
    if np.all(s == np.floor(s)): return bool(np.sum(np.abs(s)) < 2.0 ** MANT[acc])
  return False

def sig_bits(v: np.ndarray) -> np.ndarray:
  """The number of significant bits of each float (0 for 0, many for inf/nan)."""
  out = np.zeros(v.shape, dtype=np.int64)
  for i, x in np.ndenumerate(v):
    if not np.isfinite(x): out[i] = 1 << 20
    elif x != 0:
      n = abs(float(x).as_integer_ratio()[0])
      out[i] = (n // (n & -n)).bit_length()
  return out

def sum_dtype(dt: DType) -> DType:
  """Ints and bools sum (and prod) as int64, except uint64 sums that stay uint64 (Tensor.sum's docstring)."""
  if dt is B or dt in INTS: return dtypes.uint64 if dt is dtypes.uint64 else dtypes.int64
  return dt

def ref_reduce(op: str, a: Ref, axes: tuple[int, ...], keepdim: bool) -> Ref:
  if op in ("sum", "prod"):
    out = sum_dtype(a.dt) if op == "sum" else (dtypes.int64 if a.dt is B or a.dt in INTS else a.dt)
    x = cast(a, out)
    if out in INTS:
      fn = np.sum if op == "sum" else np.prod
      v = fn(x.v, axis=axes, keepdims=keepdim) if x.v.size else fn(x.v, axis=axes, keepdims=keepdim, initial=0 if op == "sum" else 1)
      e = np.max(x.e, axis=axes, keepdims=keepdim, initial=0.0)
      return iarith(v, np.where(e > 0, INF, 0.0), out)
    with np.errstate(all="ignore"):
      n = int(np.prod([a.shape[i] for i in axes], dtype=np.int64))
      if op == "sum":
        acc = F32 if out in (F16, BF16) else out   # float16/bfloat16 accumulate in float32, then round
        s = np.sum(x.v, axis=axes, keepdims=keepdim)
        term = 0.0 if exact_sum(x.v, acc) else 2.0 * n * unit(acc) * np.sum(np.abs(x.v), axis=axes, keepdims=keepdim)
        r = farith(s, np.sum(x.e, axis=axes, keepdims=keepdim) + term, acc)
        return cast(r, out)
      p = np.prod(x.v, axis=axes, keepdims=keepdim)
      mag = np.prod(np.abs(x.v), axis=axes, keepdims=keepdim)
      prop = np.prod(np.abs(x.v) + x.e, axis=axes, keepdims=keepdim) - mag
      # every partial product is exact when the factors' significant bits add up to at most the dtype's
      exact = np.sum(sig_bits(x.v), axis=axes, keepdims=keepdim) <= MANT[out]
      # a partial product may overflow (to inf: inf * 0 is nan) even where the whole product is small or 0 (the order
      # of the factors is the kernel's): not compared where the largest partial product could pass the dtype's max
      partial = np.prod(np.maximum(np.abs(x.v) + x.e, 1.0), axis=axes, keepdims=keepdim)
      return farith(p, np.where(partial >= FMAX[out], INF, prop + np.where(exact, 0.0, 2.0 * n * unit(out) * mag)), out)
  if op in ("max", "min"):
    fn = np.max if op == "max" else np.min
    if a.dt in INTS: v: np.ndarray = pyints(fn(a.v, axis=axes, keepdims=keepdim))
    else: v = np.asarray(fn(a.v, axis=axes, keepdims=keepdim))
    e = np.max(a.e, axis=axes, keepdims=keepdim, initial=0.0)
    return Ref(v, e if a.dt in FLOATS else np.where(e > 0, INF, 0.0), a.dt)
  if op == "mean":   # the sum in the float dtype, divided by the count (0 elements: nan, not compared)
    f = float_of(a.dt)
    s = ref_reduce("sum", cast(a, f), axes, keepdim)
    n = int(np.prod([a.shape[i] for i in axes], dtype=np.int64))
    with np.errstate(all="ignore"):
      return farith(s.v / n if n else s.v * np.nan, s.e / max(n, 1), f, always=True)
  raise AssertionError(op)

def ref_matmul(a: Ref, b: Ref) -> Ref:
  """a @ b: products and sums in the accumulator (float32 for float16/bfloat16), then the promoted dtype."""
  dt = promote(a.dt, b.dt)
  assert dt is not None
  acc = F32 if dt in (F16, BF16) else dt
  x, y = cast(cast(a, dt), acc), cast(cast(b, dt), acc)
  if len(x.shape) == 1: x = x.view(lambda v: v[None, :])
  if len(y.shape) == 1: y = y.view(lambda v: v[:, None])
  xs, ys = x.view(lambda v: v[..., :, None, :]), y.view(lambda v: np.swapaxes(v, -1, -2)[..., None, :, :])
  p = ref_binary("mul", *bcast(xs, ys))
  if acc in INTS:
    s = np.sum(p.v, axis=-1) if p.v.shape[-1] else np.zeros(p.v.shape[:-1], dtype=object)
    out = iarith(s, np.max(p.e, axis=-1, initial=0.0), dt)
  else: out = cast(ref_reduce("sum", p, (len(p.shape) - 1,), False), dt)
  if len(a.shape) == 1: out = out.view(lambda v: v.reshape(v.shape[:-2] + v.shape[-1:]))
  if len(b.shape) == 1: out = out.view(lambda v: v.reshape(v.shape[:-1]))
  return out

# ------------------------------------------------------------------ the graph and its Python program
def fmt_value(x: Any, dt: DType) -> str:
  if dt is B: return "True" if x else "False"
  if dt in INTS: return str(int(x))
  return repr(float(x))

def fmt_nested(v: Any, dt: DType) -> str:
  """Python source of the nested list of an array's values (v.tolist() of ints are exact Python ints)."""
  if isinstance(v, np.ndarray): v = v.tolist()
  if isinstance(v, list): return "[" + ", ".join(fmt_nested(x, dt) for x in v) + "]"
  return fmt_value(v, dt)

def fmt_slice(s: Any) -> str:
  if s is None: return "None"
  if isinstance(s, int): return str(s)
  a = "" if s.start is None else str(s.start)
  b = "" if s.stop is None else str(s.stop)
  return f"{a}:{b}" + ("" if s.step is None else f":{s.step}")

class Graph:
  """The program (inputs, one line per node, realizes) and the reference of every node. A plain class: hypothesis
  prints a failing example with its repr, the program."""
  def __init__(self, device: str):
    self.device = device
    self.inputs: list[str] = []
    self.lines: list[str] = []
    self.refs: dict[str, Ref] = {}
    self.realized: list[str] = []   # realized before the end (checked again at the end)
    self.outputs: list[str] = []
    self.count = 0
  def add(self, code: str, ref: Ref) -> str:
    self.count += 1
    name = f"t{self.count}"
    self.lines.append(f"{name} = {code}")
    self.refs[name] = ref
    return name
  def program(self) -> str:
    head = ["from petagrad import Tensor, dtypes, Device", f"Device.DEFAULT = {self.device!r}"]
    tail = [f"Tensor.realize_all({', '.join(self.outputs)})"]
    return "\n".join(head + self.lines + tail) + "\n"
  def jit_program(self) -> str:
    """The program with its ops in a TinyJit function of the inputs, called three times (warm-up, capture, replay: the
    replay reuses the capture's planned memory for the intermediates) on the same inputs; the checked tensors are
    what the last call returns."""
    head = ["from petagrad import Tensor, dtypes, Device, TinyJit", f"Device.DEFAULT = {self.device!r}"]
    ins = [ln for ln in self.lines if ln.split(" = ")[0] in self.inputs]
    body = [ln for ln in self.lines if ln not in ins]
    checked = list(dict.fromkeys(self.outputs + self.realized))
    fn = [f"def step({', '.join(self.inputs)}):", *[f"  {ln}" for ln in body], f"  return {{{', '.join(f'{n!r}: {n}' for n in checked)}}}"]
    tail = ["jitted = TinyJit(step)", f"for _ in range(3): out = jitted({', '.join(self.inputs)})", "globals().update(out)"]
    return "\n".join(head + ins + fn + tail) + "\n"
  def __repr__(self) -> str: return f"<the program of {len(self.refs)} nodes above>"

def input_values(rng: np.random.Generator, shape: tuple[int, ...], dt: DType) -> np.ndarray:
  """Exact values of dt. Floats sit mostly on a grid of eighths in [-4, 4] (sums and products stay exact, so they
  are compared exactly); 'wide' tensors reach the ends of the integer range or larger floats."""
  wide = rng.random() < WIDE
  if dt is B: return rng.random(shape) < 0.5
  if dt in INTS:
    lo, hi = int(dt.min), int(dt.max)
    if wide:
      pool = [lo, lo + 1, -1, 0, 1, 2, hi - 1, hi] if dt in SIGNED else [0, 1, 2, hi // 2, hi - 1, hi]
      return pyints([pool[i] for i in rng.integers(0, len(pool), size=shape).reshape(-1)]).reshape(shape)
    return pyints(rng.integers(max(lo, -8), min(hi, 16) + 1, size=shape))
  if wide: return fround(rng.uniform(-300, 300, size=shape), dt)
  return fround(rng.integers(-32, 33, size=shape) / 8.0, dt)

# ------------------------------------------------------------------ the generator
SHAPE_DIMS = [3, 4, 2, 5, 1, 6, 8, 16, 32, 7, 64, 2, 1, 3, 4, 5]   # hypothesis draws both ends of a list most often
UNARY_OPS = ["neg", "abs", "exp", "log", "sqrt", "sin", "relu", "sigmoid", "invert"]
BINARY_CODE = {"add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}", "div": "{a} / {b}", "maximum": "{a}.maximum({b})",
               "minimum": "{a}.minimum({b})", "lt": "{a} < {b}", "gt": "{a} > {b}", "le": "{a} <= {b}", "ge": "{a} >= {b}",
               "eq": "{a} == {b}", "ne": "{a} != {b}", "and": "{a} & {b}", "or": "{a} | {b}", "xor": "{a} ^ {b}",
               "floordiv": "{a} // {b}", "mod": "{a} % {b}"}
UNARY_CODE = {"neg": "-{x}", "abs": "{x}.abs()", "exp": "{x}.exp()", "log": "{x}.log()", "sqrt": "{x}.sqrt()", "sin": "{x}.sin()",
              "relu": "{x}.relu()", "sigmoid": "{x}.sigmoid()", "invert": "~{x}"}
MOVEMENT_OPS = ["getitem", "reshape", "reshape", "permute", "expand", "expand", "pad", "pad", "shrink", "flip", "getitem", "transpose",
                "unsqueeze", "squeeze"]
# binary first: hypothesis draws index 0 about twice as often as the others
CATEGORIES = ["binary"] * 7 + ["unary"] * 3 + ["where"] * 2 + ["cast"] * 2 + ["reduce"] * 3 + ["movement"] * 7 + ["cat"] * 2 + \
             ["stack", "matmul", "contiguous"]

def unary_ok(op: str, dt: DType) -> bool:
  if op == "neg": return dt is not B and dt not in UNSIGNED   # -x of an unsigned int is an overflow (wraps): excluded
  if op == "relu": return dt is not B                         # torch has no relu for bool
  if op == "invert": return dt is B or dt in INTS
  return True

def binary_ok(op: str, dt: DType) -> bool:
  if op == "sub": return dt is not B                          # bool - bool raises by design (torch too)
  if op in ("and", "or", "xor"): return dt not in FLOATS
  if op in ("floordiv", "mod", "lshift", "rshift"): return dt in INTS
  return True

DIVISORS = [3, 5, 7, 10, 2, 4, 6, 9, 16, 100, 127, 255, 1000, 65535, 1 << 20, -2, -3, -7, -10, -128, -1000, 1]

def scalars_for(dt: DType) -> list[bool | int | float]:
  """Python scalars that are exact in dt's kind (a float pad or operand on an int tensor promotes to float32)."""
  if dt is B: return [True, False, 2, 1.5]
  if dt in UNSIGNED: return [1, 2, 3, 7, 0.5, -1.25]
  if dt in SIGNED: return [1, 2, 3, -1, -3, 0.5, -1.25]
  return [0.5, -1.5, 2.0, 0.25, 3.0, -0.75, 2, -1]

class Gen:
  def __init__(self, draw: Callable, device: str, shard_over: tuple[str, ...] | None = None):
    self.draw, self.g = draw, Graph(device)
    self.cap = MAX_ELEMS.get(device, MAX_ELEMS_DEFAULT)
    self.shard_over = shard_over   # inputs held on these devices, each split along a drawn axis or replicated

  def choice(self, xs: list) -> Any: return xs[self.draw(st.integers(0, len(xs) - 1))]
  def coin(self, n: int = 2) -> bool:
    """True once in n (hypothesis draws the low end of a range more often; it shrinks toward False)."""
    return self.draw(st.integers(0, n - 1)) == n - 1
  def pick(self, pred: Callable[[Ref], bool] = lambda r: True, exclude: tuple[str, ...] = ()) -> str | None:
    """A node, most often a recent one (shrinks toward the newest: long chains)."""
    names = [n for n, r in self.g.refs.items() if pred(r) and n not in exclude]
    if not names: return None
    return names[len(names) - 1 - self.draw(st.integers(0, len(names) - 1))]
  def ref(self, name: str) -> Ref: return self.g.refs[name]

  # ---- inputs
  def base_shape(self) -> tuple[int, ...]:
    shape = [0 if self.coin(15) else self.choice(SHAPE_DIMS) for _ in range(self.choice([2, 1, 3, 0, 2, 4, 3, 2]))]
    while int(np.prod(shape, dtype=np.int64)) > self.cap: shape[int(np.argmax(shape))] -= 1
    return tuple(shape)

  def add_input(self, base: tuple[int, ...], i: int) -> None:
    drop = self.draw(st.integers(0, len(base))) if self.coin(3) else 0
    shape = tuple(1 if self.coin(5) else s for s in base[drop:])
    dt = self.choice(list(ALL_DTYPES))
    vals = input_values(np.random.default_rng(self.draw(st.integers(0, 2 ** 32 - 1))), shape, dt)
    name = f"a{i}"
    if int(np.prod(shape, dtype=np.int64)) == 0:
      self.g.lines.append(f"{name} = Tensor.empty({', '.join(map(str, shape))}, dtype=dtypes.{dt.name})")
    else:
      self.g.lines.append(f"{name} = Tensor({fmt_nested(np.asarray(vals), dt)}, dtype=dtypes.{dt.name})")
    if self.shard_over is not None:
      axis = self.choice([None, *range(len(shape))])
      self.g.lines[-1] += f".shard({self.shard_over!r}, axis={axis})"
    self.g.inputs.append(name)
    self.g.refs[name] = Ref(np.asarray(vals), np.zeros(shape), dt)

  # ---- ops
  def scalar(self, dt: DType) -> bool | int | float: return self.choice(scalars_for(dt))

  def unary(self) -> str | None:
    op = self.choice(UNARY_OPS)
    x = self.pick(lambda r: unary_ok(op, r.dt))
    if x is None: return None
    r = self.ref(x)
    with np.errstate(invalid="ignore"): positive = bool(np.all((r.v.astype(np.float64) - r.e) > 0))
    if op in ("log", "sqrt") and not positive and not self.coin(4):
      # mostly keep the domain: log/sqrt of |x| + 0.5 (the rest: nan/-inf where x <= 0, not compared)
      x = self.g.add(f"{x}.abs() + 0.5", self.binary_ref("add", ref_unary("abs", r), 0.5))
      r = self.ref(x)
    return self.g.add(UNARY_CODE[op].format(x=x), ref_unary(op, r))

  def binary_ref(self, op: str, a: Ref | bool | int | float, b: Ref | bool | int | float) -> Ref:
    """The reference of `a op b` where either may be a Python scalar."""
    if isinstance(a, Ref) and isinstance(b, Ref): dt = promote(a.dt, b.dt)
    elif isinstance(a, Ref): dt = scalar_dtype(a.dt, b)   # type: ignore[arg-type]
    else: dt = scalar_dtype(b.dt, a)                      # type: ignore[union-attr]
    assert dt is not None
    shape = np.broadcast_shapes(*(x.shape for x in (a, b) if isinstance(x, Ref)))
    ra = cast(a, dt) if isinstance(a, Ref) else const(a, dt, shape)
    rb = cast(b, dt) if isinstance(b, Ref) else const(b, dt, shape)
    if op == "div":
      f = float_of(dt)
      ra, rb = cast(ra, f), cast(rb, f)
    ra, rb = bcast(ra, rb)
    return ref_binary(op, ra, rb)

  def compatible(self, a: Ref, b: Ref) -> bool:
    try: shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError: return False
    return int(np.prod(shape, dtype=np.int64)) <= self.cap and promote(a.dt, b.dt) is not None

  def binary(self) -> str | None:
    a = self.pick()
    assert a is not None
    ra = self.ref(a)
    how = self.choice(["node", "node", "node", "scalar", "rscalar", "self", "shift"])
    if how == "shift":   # by a Python int: shifting by a tensor or past the width is undefined in C
      if ra.dt not in INTS: return None
      op, k = self.choice(["lshift", "rshift"]), self.draw(st.integers(0, 3))
      return self.g.add(f"{a} {'<<' if op == 'lshift' else '>>'} {k}", self.shift_ref(op, ra, k))
    b = a if how == "self" else self.pick(lambda r: self.compatible(ra, r), exclude=(a,)) if how == "node" else None
    if b is None and how in ("node", "self"): how = "scalar"
    if how in ("scalar", "rscalar"):
      s = self.scalar(ra.dt)
      dt = scalar_dtype(ra.dt, s)
      op = self.choice([o for o in BINARY_CODE if binary_ok(o, dt) and not (how == "rscalar" and o in ("maximum", "minimum"))])
      if op in ("floordiv", "mod") and how == "scalar" and self.coin():   # divisions by constants become multiply-shifts
        s = self.choice([d for d in DIVISORS if int(dt.min) <= d <= int(dt.max)])
      if op in ("floordiv", "mod") and not (self.int_divisor_ok(s, ra) if how == "scalar" else self.int_divisor_ok(ra, s)): return None
      lhs, rhs = (ra, s) if how == "scalar" else (s, ra)
      code = BINARY_CODE[op].format(a=a, b=repr(s)) if how == "scalar" else BINARY_CODE[op].format(a=repr(s), b=a)
      return self.g.add(code, self.binary_ref(op, lhs, rhs))
    assert b is not None
    rb = self.ref(b)
    dt = promote(ra.dt, rb.dt)
    assert dt is not None
    op = self.choice([o for o in BINARY_CODE if binary_ok(o, dt)])
    if op in ("floordiv", "mod") and not self.int_divisor_ok(rb, ra):
      if not np.all(rb.e == 0): return None
      # a zero divisor raises in torch (petagrad defines it as 0): replace its zeros by 3
      b = self.g.add(f"({b} == 0).where(3, {b})", self.where_ref(self.binary_ref("eq", rb, 0), 3, rb))
      rb = self.ref(b)
      if promote(ra.dt, rb.dt) is None or not self.int_divisor_ok(rb, ra): return None
    return self.g.add(BINARY_CODE[op].format(a=a, b=b), self.binary_ref(op, ra, rb))

  def int_divisor_ok(self, d: Ref | bool | int | float, n: Ref | bool | int | float) -> bool:
    """n // d and n % d are defined the same in torch and petagrad: d is known exactly and never 0 (torch raises,
    petagrad gives 0 for a zero in data), and min // -1 (an overflow) cannot occur."""
    if isinstance(d, Ref) and isinstance(n, Ref): dt = promote(d.dt, n.dt)
    elif isinstance(d, Ref): dt = scalar_dtype(d.dt, n)   # type: ignore[arg-type]
    else: dt = scalar_dtype(n.dt, d)                      # type: ignore[union-attr]
    if dt not in INTS: return True
    dv = cast(d, dt) if isinstance(d, Ref) else const(d, dt, ())
    nv = cast(n, dt) if isinstance(n, Ref) else const(n, dt, ())
    if not np.all(dv.e == 0) or any(x == 0 for x in dv.v.flat): return False
    may_be_min = any(x == int(dt.min) for x in nv.v.flat) or not np.all(nv.e == 0)
    return not (dt in SIGNED and any(x == -1 for x in dv.v.flat) and may_be_min)

  def shift_ref(self, op: str, a: Ref, k: int) -> Ref:
    if op == "rshift": return Ref(pyints([x >> k for x in a.v.flat]).reshape(a.shape), a.e, a.dt)
    r = iarith(pyints([x << k for x in a.v.flat]).reshape(a.shape), a.e, a.dt)
    # shifting a negative number left is undefined in C: not compared
    return Ref(r.v, np.where(np.array([x < 0 for x in a.v.flat], dtype=bool).reshape(a.shape), INF, r.e), r.dt)

  def where_ref(self, c: Ref, x: Ref | bool | int | float, y: Ref | bool | int | float) -> Ref:
    if isinstance(x, Ref) and isinstance(y, Ref): dt = promote(x.dt, y.dt)
    elif isinstance(x, Ref): dt = scalar_dtype(x.dt, y)   # type: ignore[arg-type]
    elif isinstance(y, Ref): dt = scalar_dtype(y.dt, x)
    else: dt = promote(dtypes.from_py(x), dtypes.from_py(y))
    assert dt is not None
    cb = cast(c, B)
    shape = np.broadcast_shapes(*(r.shape for r in (cb, x, y) if isinstance(r, Ref)))
    rx = cast(x, dt) if isinstance(x, Ref) else const(x, dt, shape)
    ry = cast(y, dt) if isinstance(y, Ref) else const(y, dt, shape)
    cb, rx, ry = bcast(cb, rx, ry)
    v = np.where(cb.v, rx.v, ry.v)
    e = np.where(cb.e > 0, INF, np.where(cb.v, rx.e, ry.e))
    return Ref(pyints(v) if dt in INTS else v, e, dt)

  def where(self) -> str | None:
    c = self.pick()
    assert c is not None
    rc = self.ref(c)
    def fits(*rs: Ref) -> bool:
      try: shape = np.broadcast_shapes(*(r.shape for r in rs))
      except ValueError: return False
      return int(np.prod(shape, dtype=np.int64)) <= self.cap
    x = self.pick(lambda r: fits(rc, r))
    if x is None: return None
    rx = self.ref(x)
    how = self.choice(["node", "node", "same", "scalar"])
    if how == "scalar":
      s = self.scalar(rx.dt)
      swap = self.coin()
      code = f"{c}.where({s!r}, {x})" if swap else f"{c}.where({x}, {s!r})"
      return self.g.add(code, self.where_ref(rc, s, rx) if swap else self.where_ref(rc, rx, s))
    y = x if how == "same" else self.pick(lambda r: fits(rc, rx, r) and promote(rx.dt, r.dt) is not None, exclude=(x,))
    if y is None: return None
    return self.g.add(f"{c}.where({x}, {y})", self.where_ref(rc, rx, self.ref(y)))

  def cast_op(self) -> str | None:
    x = self.pick()
    assert x is not None
    dt = self.choice(list(ALL_DTYPES))
    if dt is self.ref(x).dt: return None
    return self.g.add(f"{x}.cast(dtypes.{dt.name})", cast(self.ref(x), dt))

  def reduce(self) -> str | None:
    op = self.choice(["sum", "sum", "max", "min", "prod", "mean"])
    x = self.pick()
    assert x is not None
    r = self.ref(x)
    nd = len(r.shape)
    if self.coin(5) or nd == 0:
      axes, arg = tuple(range(nd)), ""
    else:
      axes = tuple(sorted(i for i in range(nd) if self.coin()))
      if not axes: axes = (self.draw(st.integers(0, nd - 1)),)
      neg = self.coin(3)
      shown = [a - nd if neg else a for a in axes]
      arg = f"axis={shown[0]}" if len(axes) == 1 and self.coin() else f"axis={tuple(shown)}"
    # max/min over a 0-sized dim raise by design (no identity)
    if op in ("max", "min") and any(r.shape[a] == 0 for a in axes): return None
    keepdim = self.coin()
    args = ", ".join(a for a in (arg, "keepdim=True" if keepdim else "") if a)
    return self.g.add(f"{x}.{op}({args})", ref_reduce(op, r, axes, keepdim))

  def new_shape(self, n: int) -> tuple[int, ...]:
    if n == 0:
      shape = [self.choice([0, 1, 2, 3]) for _ in range(self.draw(st.integers(1, 4)))]
      if 0 not in shape: shape[self.draw(st.integers(0, len(shape) - 1))] = 0
      return tuple(shape)
    shape, rest = [], n
    for _ in range(self.draw(st.integers(0 if n == 1 else 1, 4)) - 1):
      d = self.choice([d for d in range(1, rest + 1) if rest % d == 0])
      shape.append(d)
      rest //= d
    if n > 1 or shape or self.coin(): shape.append(rest)
    if self.coin(4) and len(shape) < 5: shape.insert(self.draw(st.integers(0, len(shape))), 1)
    return tuple(shape)

  def movement(self) -> str | None:
    x = self.pick()
    assert x is not None
    r = self.ref(x)
    nd, shape = len(r.shape), r.shape
    ok = [o for o in MOVEMENT_OPS if (nd >= 2 or o not in ("permute", "transpose")) and (nd >= 1 or o in ("reshape", "expand", "unsqueeze"))]
    op = self.choice([o for o in ok if o != "squeeze" or 1 in shape])
    if op == "reshape":
      s = self.new_shape(r.numel)
      return self.g.add(f"{x}.reshape({s})" if len(s) != 1 else f"{x}.reshape({s[0]})", r.view(lambda a: a.reshape(s)))
    if op == "permute" and nd >= 2:
      p = tuple(self.draw(st.permutations(list(range(nd)))))
      return self.g.add(f"{x}.permute{p}", r.view(lambda a: a.transpose(p)))
    if op == "transpose" and nd >= 2:
      i, j = self.draw(st.integers(0, nd - 1)), self.draw(st.integers(0, nd - 1))
      if self.coin(3): return self.g.add(f"{x}.T", r.view(lambda a: a.transpose(tuple(reversed(range(nd))))))
      return self.g.add(f"{x}.transpose({i}, {j - nd if self.coin() else j})", r.view(lambda a: np.swapaxes(a, i, j)))
    if op == "expand":
      lead = tuple(self.choice([1, 2, 3]) for _ in range(self.draw(st.integers(0, 2)) if self.coin() else 0))
      new = lead + tuple(self.choice([0, 1, 2, 3, 4, 2, 3]) if s == 1 else s for s in shape)
      if new == shape or int(np.prod(new, dtype=np.int64)) > self.cap: return None
      spec = tuple(-1 if (k >= len(lead) and shape[k - len(lead)] == s and self.coin(4)) else s for k, s in enumerate(new))
      return self.g.add(f"{x}.expand{spec}" if len(spec) != 1 else f"{x}.expand({spec[0]})", r.view(lambda a: np.broadcast_to(a, new)))
    if op == "pad" and nd >= 1:
      pads = [(self.choice([0, 0, 1, 2]), self.choice([0, 0, 1, 2])) for _ in range(nd)]
      new = tuple(s + b + e for s, (b, e) in zip(shape, pads))
      if int(np.prod(new, dtype=np.int64)) > self.cap: return None
      # any scalar that fits: PyTorch converts it to the tensor's dtype (1.5 pads an int tensor with 1); a negative
      # value for an unsigned tensor raises by design (torch too)
      value = self.choice([0] + [v for v in scalars_for(r.dt) if not (r.dt in UNSIGNED and v < 0)])
      if self.coin(3):   # PyTorch's flat form: last dim first
        flat = tuple(p for b, e in reversed(pads) for p in (b, e))
        spec = repr(flat)
      else:
        spec = repr(tuple(None if p == (0, 0) and self.coin(3) else p for p in pads))
      code = f"{x}.pad({spec})" if value == 0 else f"{x}.pad({spec}, value={value!r})"
      cv = const(value, r.dt, ())
      def padfn(a: np.ndarray, fill: Any) -> np.ndarray:
        out = np.empty(new, dtype=a.dtype)
        out[...] = fill
        out[tuple(slice(b, b + s) for s, (b, e) in zip(shape, pads))] = a
        return out
      fill = cv.v[()] if r.dt is not B else bool(cv.v[()])
      return self.g.add(code, Ref(padfn(r.v, fill), padfn(r.e, 0.0), r.dt))
    if op == "shrink" and nd >= 1:
      arg = []
      for s in shape:
        b = self.draw(st.integers(0, s))
        arg.append((b, self.draw(st.integers(b, s))))
      spec = tuple(None if (b, e) == (0, s) and self.coin() else (b, e) for (b, e), s in zip(arg, shape))
      return self.g.add(f"{x}.shrink({spec!r})", r.view(lambda a: a[tuple(slice(b, e) for b, e in arg)]))
    if op == "flip" and nd >= 1:
      axes = [i for i in range(nd) if self.coin()] or [0]
      shown = [a - nd if self.coin(3) else a for a in axes]
      return self.g.add(f"{x}.flip({', '.join(map(str, shown))})", r.view(lambda a: np.flip(a, tuple(axes))))
    if op == "getitem" and nd >= 1:
      idx: list[Any] = []
      for s in shape[:self.draw(st.integers(1, nd))]:
        kind = self.choice(["slice", "slice", "slice", "int", "none"])
        if kind == "int" and s > 0: idx.append(self.draw(st.integers(-s, s - 1)))
        elif kind == "none": idx.append(None); idx.append(slice(None, None, self.choice([None, -1])))
        else:
          bound = st.one_of(st.none(), st.integers(-s - 1, s + 1))
          idx.append(slice(self.draw(bound), self.draw(bound), self.choice([None, 1, 2, 3, -1, -1, -2, -3])))
      key = tuple(idx)
      new = np.empty(shape)[key].shape
      if int(np.prod(new, dtype=np.int64)) > self.cap: return None
      return self.g.add(f"{x}[{', '.join(fmt_slice(k) for k in key)}]", r.view(lambda a: a[key]))
    if op == "unsqueeze":
      d = self.draw(st.integers(-nd - 1, nd))
      return self.g.add(f"{x}.unsqueeze({d})", r.view(lambda a: np.expand_dims(a, d)))
    if op == "squeeze" and 1 in shape:
      if self.coin():
        return self.g.add(f"{x}.squeeze()", r.view(lambda a: a.reshape(tuple(s for s in shape if s != 1))))
      d = self.choice([i for i, s in enumerate(shape) if s == 1])
      return self.g.add(f"{x}.squeeze({d})", r.view(lambda a: np.squeeze(a, d)))
    return None

  def cat(self) -> str | None:
    a = self.pick(lambda r: len(r.shape) >= 1)
    if a is None: return None
    ra = self.ref(a)
    d = self.draw(st.integers(0, len(ra.shape) - 1))
    def fits(r: Ref) -> bool:
      return len(r.shape) == len(ra.shape) and all(x == y for i, (x, y) in enumerate(zip(r.shape, ra.shape)) if i != d) \
        and promote(ra.dt, r.dt) is not None
    pieces = [a]
    for _ in range(self.draw(st.integers(1, 2))):
      b = self.pick(lambda r: fits(r) and all(promote(self.ref(p).dt, r.dt) is not None for p in pieces))
      if b is None: break
      pieces.append(b)
    if len(pieces) == 1: pieces.append(a)
    refs = [self.ref(p) for p in pieces]
    dt = refs[0].dt
    for r in refs[1:]:
      dt = promote(dt, r.dt)
      if dt is None: return None
    new = list(ra.shape); new[d] = sum(r.shape[d] for r in refs)
    if int(np.prod(new, dtype=np.int64)) > self.cap: return None
    cs = [cast(r, dt) for r in refs]
    dim = d - len(ra.shape) if self.coin(3) else d
    return self.g.add(f"{a}.cat({', '.join(pieces[1:])}, dim={dim})",
                      Ref(np.concatenate([c.v for c in cs], axis=d), np.concatenate([c.e for c in cs], axis=d), dt))

  def stack(self) -> str | None:
    a = self.pick()
    assert a is not None
    ra = self.ref(a)
    pieces = [a]
    for _ in range(self.draw(st.integers(1, 2))):
      b = self.pick(lambda r: r.shape == ra.shape and all(promote(self.ref(p).dt, r.dt) is not None for p in pieces))
      if b is None: break
      pieces.append(b)
    refs = [self.ref(p) for p in pieces]
    dt = refs[0].dt
    for r in refs[1:]:
      dt = promote(dt, r.dt)
      if dt is None: return None
    if ra.numel * len(refs) > self.cap: return None
    d = self.draw(st.integers(0, len(ra.shape)))
    cs = [cast(r, dt) for r in refs]
    return self.g.add(f"Tensor.stack([{', '.join(pieces)}], dim={d})",
                      Ref(np.stack([c.v for c in cs], axis=d), np.stack([c.e for c in cs], axis=d), dt))

  def matmul(self) -> str | None:
    """x @ w, with w another node whose dims fit, or a transposed view of x itself."""
    x = self.pick(lambda r: len(r.shape) >= 1 and r.dt is not B)
    if x is None: return None
    rx = self.ref(x)
    k = rx.shape[-1]
    def out_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
      if len(b) == 0 or (b[-2] if len(b) >= 2 else b[0]) != k: return None
      try: batch = np.broadcast_shapes(a[:-2], b[:-2])
      except ValueError: return None
      full = tuple(batch) + ((a[-2],) if len(a) >= 2 else ()) + ((b[-1],) if len(b) >= 2 else ())
      inner = int(np.prod(full, dtype=np.int64)) * k
      return full if int(np.prod(full, dtype=np.int64)) <= self.cap and inner <= 4 * self.cap else None
    if len(rx.shape) >= 2 and self.coin(3):
      w, rw = f"{x}.transpose(-1, -2)", rx.view(lambda a: np.swapaxes(a, -1, -2))
      if out_shape(rx.shape, rw.shape) is None: return None
    else:
      name = self.pick(lambda r: r.dt is not B and promote(rx.dt, r.dt) is not None and out_shape(rx.shape, r.shape) is not None)
      if name is None: return None
      w, rw = name, self.ref(name)
    return self.g.add(f"{x} @ {w}", ref_matmul(rx, rw))

  def contiguous(self) -> str | None:
    x = self.pick()
    assert x is not None
    return self.g.add(f"{x}.contiguous()", self.ref(x))

  def step(self) -> None:
    cat = self.choice(CATEGORIES)
    fn = {"unary": self.unary, "binary": self.binary, "where": self.where, "cast": self.cast_op, "reduce": self.reduce,
          "movement": self.movement, "cat": self.cat, "stack": self.stack, "matmul": self.matmul,
          "contiguous": self.contiguous}[cat]
    name = fn()
    if name is None: return
    # sometimes realize an intermediate now and keep building on it
    if self.coin(12):
      self.g.lines.append(f"{name}.realize()")
      self.g.realized.append(name)

@st.composite
def graphs(draw: Callable, device: str, shard_over: tuple[str, ...] | None = None) -> Graph:
  gen = Gen(draw, device, shard_over)
  base = gen.base_shape()
  for i in range(draw(st.integers(1, 4))): gen.add_input(base, i)
  for _ in range(draw(st.integers(1, MAX_OPS))): gen.step()
  g = gen.g
  nodes = [n for n in g.refs if n not in g.inputs]
  if not nodes:   # every step was skipped: one op on the first input
    a0 = g.inputs[0]
    nodes = [g.add(f"{a0}.contiguous()", g.refs[a0])]
  # 1-4 outputs realized together: the newest node, and others (sinks and intermediates, shared or independent)
  outs = [nodes[-1]]
  for _ in range(min(gen.choice([3, 1, 2, 2, 3]), len(nodes) - 1)):
    n = nodes[draw(st.integers(0, len(nodes) - 1))]
    if n not in outs: outs.append(n)
  g.outputs = outs
  return g

# ------------------------------------------------------------------ running and checking
def to_ref_array(t: Tensor) -> np.ndarray:
  a = t.numpy()
  if t.dtype in INTS: return pyints(a)
  if t.dtype is B: return a.astype(bool)
  return a.astype(np.float64)

def check_values(what: str, got: np.ndarray, ref: Ref) -> str | None:
  """None when got matches ref where ref is compared; else a description of the mismatches."""
  cmp = np.isfinite(ref.e)
  if ref.dt in FLOATS:
    with np.errstate(all="ignore"):
      ok = np.abs(got - ref.v) <= 2 * ref.e + TINY[ref.dt]
  else:
    ok = np.array([x == y for x, y in zip(got.flat, ref.v.flat)], dtype=bool).reshape(ref.shape)
  bad = cmp & ~ok
  if not bad.any(): return None
  idx = [tuple(int(i) for i in ix) for ix in np.argwhere(bad)[:8]]
  rows = "\n".join(f"    at {ix}: expected {ref.v[ix]!r} (+-{2 * ref.e[ix]:.3g}), got {got[ix]!r}" for ix in idx)
  np.set_printoptions(threshold=200, linewidth=150)
  shown = np.where(cmp, ref.v.astype(object), "?")
  return (f"{what}: {int(bad.sum())} of {int(cmp.sum())} compared elements differ ({ref.dt}, shape {ref.shape})\n{rows}\n"
          f"  expected ('?': not compared):\n{shown}\n  got:\n{got}")

def run_graph(g: Graph, how_to_rerun: str, jit: bool = False) -> None:
  """Run the program twice (the second run finds every cache warm: schedules, launch plans, compiled kernels) and
  check both runs; with jit, then its ops in a TinyJit (Graph.jit_program) and check the replay."""
  code = g.program()
  RECENT.append(code)
  try:   # the last few graphs: a crash may come from memory an earlier graph's kernel overwrote
    with open(DUMP_PATH, "w") as f: f.write(f"# the last {len(RECENT)} graphs the fuzzer ran, oldest first\n" + "\n".join(RECENT))
  except OSError: pass
  # (what each run is, its program, the smallest intermediate a realize frees early: the TinyJit run frees every one, so
  # that the capture plans the memory of this graph's small ones too)
  runs = [("", code, realize.FREE_MIN_BYTES), (" (second run of the program)", code, realize.FREE_MIN_BYTES)]
  if jit: runs.append((" (its ops in a TinyJit, replayed)", g.jit_program(), 0))
  for run, code, free_min_bytes in runs:
    def fail(msg: str) -> AssertionError:
      return AssertionError(f"{msg}{run}\n\n--- repro ({how_to_rerun}) ---\n{code}")
    env: dict[str, Any] = {}
    free_min, realize.FREE_MIN_BYTES = realize.FREE_MIN_BYTES, free_min_bytes
    try:
      exec(compile(code, "<fuzz graph>", "exec"), env)
    except Exception as ex:
      line = [fr.lineno for fr in traceback.extract_tb(ex.__traceback__) if fr.filename == "<fuzz graph>"]
      where = f" at line {line[-1]}: {code.splitlines()[line[-1] - 1]}" if line else ""
      raise fail(f"petagrad raised {type(ex).__name__}{where}\n  {ex}") from ex
    finally: realize.FREE_MIN_BYTES = free_min
    for name, ref in g.refs.items():
      if name not in env: continue   # (the TinyJit run returns the checked tensors only)
      t = env[name]
      if tuple(t.shape) != ref.shape: raise fail(f"{name}: shape {tuple(t.shape)}, expected {ref.shape}")
      if t.dtype is not ref.dt: raise fail(f"{name}: dtype {t.dtype}, expected {ref.dt}")
    errors = []
    for name in g.outputs + [n for n in g.realized if n not in g.outputs]:
      try: got = to_ref_array(env[name])
      except Exception as ex: raise fail(f"reading {name} raised {type(ex).__name__}: {ex}") from ex
      if (msg := check_values(f"{name} ({'output' if name in g.outputs else 'realized before the outputs'})", got, g.refs[name])): errors.append(msg)
    # an input changed: some kernel wrote into the wrong buffer
    for name in g.inputs:
      if (msg := check_values(f"input {name} changed", to_ref_array(env[name]), g.refs[name])): errors.append(msg)
    if errors: raise fail("\n".join(errors))

def fuzz_settings(device: str) -> settings:
  common: dict[str, Any] = dict(deadline=None, database=None, print_blob=False, suppress_health_check=list(HealthCheck))
  if LONG_EXAMPLES: return settings(max_examples=LONG_EXAMPLES, derandomize=False, **common)
  return settings(max_examples=CI_EXAMPLES.get(device, CI_EXAMPLES["PYTHON"]), derandomize=True, **common)

def test_fuzz_graphs(device): _fuzz(device)

# the same graphs over inputs held on three CPU devices (docs/multi.md), each split along a drawn axis or replicated:
# the per-device rewrite (resharding, ragged and empty pieces, allreduces) against the same reference
SHARD_EXAMPLES = 30 if os.environ.get("SANITIZE", "0") not in ("", "0") else 120  # (the memory-safety pass compiles every kernel anew)

def test_fuzz_graphs_sharded(device):
  if device != "CPU": pytest.skip("the sharded graphs run on CPU devices")
  _fuzz(device, ("CPU:0", "CPU:1", "CPU:2"))

def _fuzz(device: str, shard_over: tuple[str, ...] | None = None) -> None:
  rerun = f"FUZZ_GRAPHS_EXAMPLES={LONG_EXAMPLES} FUZZ_GRAPHS_SEED={LONG_SEED}" if LONG_EXAMPLES else "the CI budget, derandomized"
  failures: list[str] = []
  def check(g: Graph) -> None:
    try: run_graph(g, f"found on {device} with {rerun}", jit=shard_over is None)
    except AssertionError as ex:
      if not REPORT_PATH: raise
      failures.append(str(ex))
      with open(REPORT_PATH, "a") as f: f.write(f"{ex}\n{'=' * 100}\n")
  st_ = fuzz_settings(device)
  if shard_over is not None and not LONG_EXAMPLES: st_ = settings(st_, max_examples=SHARD_EXAMPLES)
  fn = st_(given(graphs(device, shard_over))(check))
  if LONG_EXAMPLES: fn = hypothesis_seed(LONG_SEED)(fn)
  fn()
  assert not failures, f"{len(failures)} failing graphs on {device}, written to {REPORT_PATH}; the first:\n{failures[0]}"
