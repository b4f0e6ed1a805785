"""OpenCL C: the C-style base with OpenCL's tables.

What differs from C: one-word type names (`long` is 64-bit, `bool` buffers are `uchar`: a kernel cannot take `bool*`),
buffers in `__global` memory, `__kernel` functions, the work-group and work-item ids, `as_<type>` bitcasts, overloaded
math functions, and float16 as storage only: a device without cl_khr_fp16 (PoCL) may not compute in `half` at all, so
float16 buffers are `ushort` bits converted with vload_half/vstore_half_rte, as every OpenCL 1.2 device offers.

>>> from petagrad.renderer.opencl import OpenCLRenderer
>>> from petagrad.dtype import dtypes
>>> OpenCLRenderer().types[dtypes.int64]
'long'
"""
from __future__ import annotations
from petagrad.dtype import dtypes
from petagrad.uop.ops import Ops
from petagrad.renderer.cstyle import CStyleRenderer

OPENCL_HELPERS = """inline float pg_h2f(ushort b) { return vload_half(0, (const __private half *)&b); }
inline ushort pg_f2h(float x) { ushort b; vstore_half_rte(x, 0, (__private half *)&b); return b; }
inline float __bf2f(ushort b) { return as_float(((uint)b) << 16); }
inline float __bfr(float f) { uint u = as_uint(f);
  return as_float((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : ((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u)); }
inline ushort __bfbits(float f) { return (ushort)(as_uint(f) >> 16); }
"""

D2H = "inline ushort pg_d2h(double x) { ushort b; vstore_half_rte(x, 0, (__private half *)&b); return b; }\n"

# SANITIZE: as C's (renderer/cstyle.py), with a 32-bit atomic on the error record's first word (64-bit ones are an
# extension); the runtime knows the parameters' dtypes
SANITIZE_DECL = """int pg_ok(__global const long *n, __global long *e, int p, long i, long lanes, int store) {{
  if (i >= 0 && i <= n[p] - lanes) return 1;
  if (atomic_xchg((volatile __global int *)e, 1) == 0) {{ e[1] = p; e[2] = store; e[3] = i; e[4] = lanes; e[5] = n[p]; }}
  return 0;
}}
"""

class OpenCLRenderer(CStyleRenderer):
  device = "CL"
  max_local = 256          # work-group size the optimizer may use (every OpenCL GPU allows 256; PoCL up to 4096)
  launch_groups = False    # no barrier between kernels inside one launch
  wrap_signed = True
  index32 = True
  kernel_prefix = "__kernel "
  buffer_prefix = "__global "
  types = {**CStyleRenderer.types, dtypes.bool: "uchar", dtypes.int8: "char", dtypes.int16: "short", dtypes.int32: "int",
           dtypes.int64: "long", dtypes.uint8: "uchar", dtypes.uint16: "ushort", dtypes.uint32: "uint", dtypes.uint64: "ulong",
           dtypes.float16: "ushort", dtypes.bfloat16: "ushort", dtypes.float32: "float", dtypes.float64: "double"}
  int_suffix = {dtypes.int64: "L", dtypes.uint64: "UL", dtypes.uint32: "U"}
  float_special = ("NAN", "INFINITY")
  bitcast_fmt = "as_{dst}({x})"
  f16_load, f16_store, f16_round = "pg_h2f({x})", "pg_f2h({x})", "pg_h2f(pg_f2h({x}))"
  f16_round64 = "pg_h2f(pg_d2h({x}))"   # one rounding (vstore_half_rte of the double), as C's and numpy's
  math_fns = {Ops.EXP2: ("exp2", "exp2"), Ops.LOG2: ("log2", "log2"), Ops.SIN: ("sin", "sin"), Ops.SQRT: ("sqrt", "sqrt"),
              Ops.TRUNC: ("trunc", "trunc")}
  launch_ids = ("get_group_id(0)", "get_local_id(0)")
  vector_memory = 16       # vload4/vstore4 of neighbouring elements (float4, long2, ...)
  vec_fmt = {"type": "{t}{n}", "load": "vload{n}(0, {ptr})", "store": "vstore{n}({val}, 0, {ptr});", "lane": "{x}.s{i}", "make": "(({vt})({args}))"}
  local_decl, barrier = "__local {type} {name}[{size}];", "barrier(CLK_LOCAL_MEM_FENCE);"
  preamble = OPENCL_HELPERS
  can_sanitize, sanitize_args, sanitize_decl = True, ["__global const long* pg_n_", "__global long* pg_err_"], SANITIZE_DECL
  def render(self, name, prog, params) -> str:
    src = super().render(name, prog, params)
    # doubles need the extension switched on (OpenCL 1.2); a kernel without them builds on devices lacking it
    if "double" not in src: return src
    return "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + (D2H if "pg_d2h(" in src else "") + src
