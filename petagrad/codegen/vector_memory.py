"""Vector loads and stores for targets whose vectors are memory operations only (the GPU dialects: CUDA's `float4`,
OpenCL's `vload4`, HIP's vector types).

After expansion a thread's unrolled copies (an UPCAST of a contiguous range) read and write neighbouring elements one
by one. Here n scalar loads of one buffer at base, base + 1, ..., base + n - 1 under the same condition become one
n-lane load whose lanes are taken apart (GEP), and n scalar stores of neighbouring elements one n-lane store of their
values (VECTORIZE): a 16-byte access is one instruction (`ld.global.v4.f32`) instead of four, and a warp's memory
requests are fewer and wider.

Only where base is a multiple of n for every value of the ranges (each term's coefficient and the constant divisible
by n): every device allocation starts aligned (CUDA's at 256 bytes), so the access is aligned to its own size, as
CUDA's vector loads require (a misaligned one faults). The lanes are the most that fit `max_bytes`, at most 4 (the
widest of CUDA's vector types), 2 for 8-byte elements at 16 bytes. Bools stay scalar (no vector type holds them).

>>> from petagrad.uop.uop import UOp
>>> from petagrad.uop.ops import Ops
>>> from petagrad.dtype import dtypes
>>> buf, r = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 1), UOp(Ops.RANGE, dtypes.index, (), (0, 8, "global"))
>>> loads = [UOp(Ops.LOAD, dtypes.float32, (buf, r * 4 + i)) for i in range(4)]
>>> out = UOp(Ops.DEFINE_GLOBAL, dtypes.float32, (), 0)
>>> sink = UOp(Ops.SINK, dtypes.bool, tuple(UOp(Ops.STORE, dtypes.float32, (out, r * 4 + i, x)) for i, x in enumerate(loads)))
>>> [(u.op, u.dtype.count) for u in combine_memory(sink, 16).toposort() if u.op in (Ops.LOAD, Ops.VECTORIZE, Ops.STORE)]
[(Ops.LOAD, 4), (Ops.VECTORIZE, 4), (Ops.STORE, 1)]
"""
from __future__ import annotations
import math
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp, decompose
from petagrad.uop.symbolic import rebuild, simplify
from petagrad.uop.graph import substitute

MAX_LANES = 4

def _split(idx: UOp) -> tuple[UOp, int, int]:
  """idx as (rest, c, g): idx == rest + c, with every value of rest a multiple of g (0: rest is 0)."""
  terms, const = decompose(idx)
  g = math.gcd(*terms.values()) if terms else 0
  return rebuild(terms, 0, idx), const, g

def _runs(by_const: dict[int, UOp], g: int, lanes: int) -> list[tuple[int, int]]:
  """(start, n) of the vectors to build from the accesses at rest + c (c the keys): n in lanes, lanes // 2, ... >= 2
  neighbours all present, start a multiple of n, and n dividing g (every rest a multiple of n)."""
  out, used = [], set()
  for c in sorted(by_const):
    if c in used: continue
    n = next((n for n in (lanes, lanes // 2) if n >= 2 and (g % n == 0) and c % n == 0 and all(c + i in by_const for i in range(n))), 0)
    if n:
      out.append((c, n))
      used.update(range(c, c + n))
  return out

def combine_memory(ast: UOp, max_bytes: int) -> UOp:
  """The kernel AST (expanded, scalar) with neighbouring loads and stores joined into vectors of up to max_bytes."""
  if max_bytes <= 0: return ast
  def lanes_of(dt) -> int: return min(MAX_LANES, max_bytes // dt.itemsize) if not dt.is_bool else 0
  loads: dict[tuple, dict[int, UOp]] = {}
  for u in ast.toposort():
    if u.op is Ops.LOAD and u.dtype.count == 1 and len(u.src) <= 3 and lanes_of(u.dtype) >= 2:
      rest, c, g = _split(u.src[1])
      loads.setdefault((u.src[0], rest, g, u.src[2] if len(u.src) == 3 else None), {})[c] = u
  mapping: dict[UOp, UOp] = {}
  for (buf, rest, g, valid), by_const in loads.items():
    dt = next(iter(by_const.values())).dtype
    for start, n in _runs(by_const, g, lanes_of(dt)):
      vec = UOp(Ops.LOAD, dt.vec(n), (buf, simplify(rest + start)) + ((valid,) if valid is not None else ()))
      mapping.update({by_const[start + i]: UOp(Ops.GEP, dt, (vec,), i) for i in range(n)})
  if mapping: ast = substitute(ast, mapping)
  if ast.op is not Ops.SINK: return ast
  stores: dict[tuple, dict[int, UOp]] = {}
  for s in ast.src:
    if s.op is Ops.STORE and s.src[2].dtype.count == 1 and lanes_of(s.src[2].dtype) >= 2:
      rest, c, g = _split(s.src[1])
      stores.setdefault((s.src[0], rest, g), {})[c] = s
  joined: dict[UOp, UOp | None] = {}   # a store -> the vector store that replaces it (the first of its run), or None
  for (buf, rest, g), by_const in stores.items():
    for start, n in _runs(by_const, g, lanes_of(next(iter(by_const.values())).src[2].dtype)):
      run = [by_const[start + i] for i in range(n)]
      val = UOp(Ops.VECTORIZE, run[0].src[2].dtype.vec(n), tuple(s.src[2] for s in run))
      joined.update({s: None for s in run[1:]})
      joined[run[0]] = UOp(Ops.STORE, run[0].dtype, (buf, simplify(rest + start), val))
  if not joined: return ast
  return ast.replace(src=tuple(x for s in ast.src if (x := joined.get(s, s)) is not None))
