"""Tensor cores: a half-precision matmul's output in 16 x 8 tiles, each computed by one warp with CUDA's
`mma.sync.aligned.m16n8k16` (float16 or bfloat16 inputs, float32 accumulation), 16 steps of the reduction at a time.

The kernel must be a sum over one reduce range k of x * y, x a float32 cast of a half value that depends on an output
range m (and k) but not on n, y one that depends on n (and k) but not on m: `a @ b` for half a and b, batched or
followed by elementwise ops (a bias, an activation, the cast back to half). With m % 16, n % 8 and k % 16 zero, the
rewrite (OptOps.TC) makes m -> (m0, 16), n -> (n0, 8), k -> (k0, 16), a local range `lane` of the warp's 32 threads
(the fastest-varying thread id), and optionally warps side by side in a block (a local split of m0 and n0). Each
thread then holds the fragments PTX's ISA fixes for m16n8k16 (groupID g = lane // 4, t = lane % 4):

  A (16 x 16, row-major) element i of 8:  row g + 8 * ((i >> 1) & 1),  col 2t + (i & 1) + 8 * (i >> 2)
  B (16 x 8, "col")      element i of 4:  row 2t + (i & 1) + 8 * (i >> 1),  col g
  C/D (16 x 8)           element i of 4:  row g + 8 * (i >> 1),  col 2t + (i & 1)

and the kernel becomes four reduces over k0 of the lanes of one Ops.WMMA (the product of this step's tiles), each
stored at its C element's place through the kernel's own epilogue. The linearizer then passes the four accumulators to
the WMMA as its C (D = A @ B + C: the mma instruction does the adds, codegen/linearize.py: _mma_accumulates). The
PYTHON:GPU device runs a warp's 32 threads in lockstep and computes Ops.WMMA from these same layouts
(runtime/ops_python.py), so the rewrite is tested without a GPU; the layouts themselves are PTX's.
"""
from __future__ import annotations
from typing import Any
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.uop.graph import substitute
from petagrad.uop.symbolic import simplify
from petagrad.dtype import DType, dtypes, truncate

M, N, K, WARP = 16, 8, 16, 32
HALVES = (dtypes.float16, dtypes.bfloat16)

def a_place(i: int, g: Any, t: Any) -> tuple[Any, Any]: return g + 8 * ((i >> 1) & 1), 2 * t + (i & 1) + 8 * (i >> 2)
def b_place(i: int, g: Any, t: Any) -> tuple[Any, Any]: return 2 * t + (i & 1) + 8 * (i >> 1), g
def c_place(i: int, g: Any, t: Any) -> tuple[Any, Any]: return g + 8 * (i >> 1), 2 * t + (i & 1)

def _c(v: int) -> UOp: return UOp.const(dtypes.index, v)

def _half_source(x: UOp) -> UOp | None:
  """x = float32(h) for a half h: h."""
  return x.src[0] if x.op is Ops.CAST and x.dtype == dtypes.float32 and x.src[0].dtype in HALVES else None

def match(ast: UOp) -> tuple[UOp, UOp, UOp, UOp, UOp, UOp, DType] | str:
  """(reduce, x's half, y's half, m, n, k, half dtype) of a kernel tensor cores can compute, or why not."""
  if ast.op is not Ops.SINK or len(ast.src) != 1 or ast.src[0].op is not Ops.STORE: return "one store"
  reds = [u for u in ast.toposort() if u.op is Ops.REDUCE]
  if len(reds) != 1 or reds[0].arg is not Ops.ADD or len(reds[0].src) != 2 or reds[0].dtype != dtypes.float32: return "one float32 sum over one range"
  red, k = reds[0], reds[0].src[1]
  if k.src or any(u.op is Ops.RANGE and (u.src or u.arg[2] not in ("global", "reduce")) for u in ast.toposort()):
    return "plain output and reduce loops only (no symbolic lengths, no optimizations before)"
  if red.src[0].op is not Ops.MUL or None in (hs := tuple(map(_half_source, red.src[0].src))) or hs[0].dtype != hs[1].dtype:
    return "a sum of products of two float32 casts of one half type"
  xr, yr = ({u for u in h.toposort() if u.op is Ops.RANGE} for h in hs)
  if any(u.op is Ops.LOAD and len(u.src) > 2 for h in hs for u in h.toposort()): return "unmasked operand loads"
  outs = [r for r in ast.toposort() if r.op is Ops.RANGE and r.arg[2] == "global"]
  ms, ns = [r for r in outs if r in xr and r not in yr], [r for r in outs if r in yr and r not in xr]
  if k not in xr or k not in yr or not ms or not ns: return "operands that share the reduce range and one output range each"
  m, n = ms[-1], ns[-1]
  if m.arg[1] % M or n.arg[1] % N or k.arg[1] % K: return f"sizes that divide by {M}, {N} and {K}"
  return red, hs[0], hs[1], m, n, k, hs[0].dtype

def match_for(ast: UOp, tensor_cores: tuple) -> tuple | None:
  """match(ast) where it is a matmul of a half type in tensor_cores (a target's Renderer.tensor_cores), else None."""
  return found if tensor_cores and not isinstance(found := match(ast), str) and found[-1] in tensor_cores else None

def apply_tensor_core(kernel: Any, warps: int) -> str | None:
  """OptOps.TC on kernel (a codegen.opt.Kernel): the rewrite above, with `warps` (1, 2 or 4) warps side by side in a
  block (2 x 2 over m0 and n0 for 4). Returns why it does not apply, or None once applied."""
  if not kernel.max_local or kernel.max_local < WARP * max(warps, 1): return "tensor cores need work-groups of whole warps"
  if isinstance(found := match(kernel.ast), str): return f"TC needs {found}"
  red, xh, yh, m, n, k, half = found
  wm, wn = {0: (1, 1), 1: (1, 1), 2: (1, 2), 4: (2, 2)}.get(warps, (0, 0))
  if not wm or (m.arg[1] // M) % wm or (n.arg[1] // N) % wn: return f"{warps} warps do not split the tiles"
  # tiles (their ranges keep the places of m, n, k), the warps of a block, then the lane: the newest local range,
  # so it is the thread id's fastest-varying part (a warp is 32 consecutive threads)
  def tiles(r: UOp, size: int, kind: str) -> UOp: return UOp(Ops.RANGE, dtypes.index, (), (r.arg[0], size, kind)) if size > 1 else _c(0)
  m0, n0, k0 = tiles(m, m.arg[1] // M // wm, "global"), tiles(n, n.arg[1] // N // wn, "global"), tiles(k, k.arg[1] // K, "reduce")
  mw = kernel.new_range(wm, "local") if wm > 1 else _c(0)
  nw = kernel.new_range(wn, "local") if wn > 1 else _c(0)
  lane = kernel.new_range(WARP, "local")
  g, t = lane // _c(4), lane % _c(4)
  mt, nt = (m0 * _c(wm) + mw) * _c(M), (n0 * _c(wn) + nw) * _c(N)
  def a(i: int) -> UOp:
    r, c = a_place(i, g, t)
    return substitute(xh, {m: mt + r, k: k0 * _c(K) + c})
  def b(i: int) -> UOp:
    r, c = b_place(i, g, t)
    return substitute(yh, {k: k0 * _c(K) + r, n: nt + c})
  mma = UOp(Ops.WMMA, dtypes.float32.vec(4), tuple(simplify(a(i)) for i in range(8)) + tuple(simplify(b(i)) for i in range(4)), half)
  store = kernel.ast.src[0]
  stores = []
  for i in range(4):
    acc = UOp(Ops.GEP, dtypes.float32, (mma,), i)
    if k0.op is Ops.RANGE: acc = UOp(Ops.REDUCE, dtypes.float32, (acc, k0), Ops.ADD)
    r, c = c_place(i, g, t)
    stores.append(substitute(store, {red: acc, m: mt + r, n: nt + c}))
  kernel.ast = simplify(UOp(Ops.SINK, kernel.ast.dtype, tuple(stores)))
  return None

def wmma(a: list[list[float]], b: list[list[float]], acc: list[list[float]] | None = None) -> list[list[float]]:
  """What Ops.WMMA computes for a warp, given each lane's 8 A and 4 B values (and 4 C values): each lane's 4 D values
  (the sums of the float32 products and C in float64, rounded once: the GPU's order and rounding of the partial sums
  may differ slightly)."""
  A = [[0.0] * K for _ in range(M)]
  B = [[0.0] * N for _ in range(K)]
  for lane in range(WARP):
    g, t = lane // 4, lane % 4
    for i in range(8):
      r, c = a_place(i, g, t)
      A[r][c] = a[lane][i]
    for i in range(4):
      r, c = b_place(i, g, t)
      B[r][c] = b[lane][i]
  C = [[0.0] * N for _ in range(M)]
  for lane, vals in enumerate(acc or []):
    for i, v in enumerate(vals):
      r, col = c_place(i, lane // 4, lane % 4)
      C[r][col] = v
  D = [[truncate(C[r][col] + sum(A[r][j] * B[j][col] for j in range(K)), dtypes.float32) for col in range(N)] for r in range(M)]
  return [[D[r][col] for r, col in (c_place(i, lane // 4, lane % 4) for i in range(4))] for lane in range(WARP)]
