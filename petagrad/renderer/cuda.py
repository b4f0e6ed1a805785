"""CUDA C and HIP: the C-style base with the tables of NVIDIA's and AMD's GPU C++ dialects.

Both compile C++ for one GPU thread, launched as a grid of blocks. CUDA (NVRTC) gets no headers: float16 lives as
its 16 bits (`unsigned short`) converted by the PTX cvt instructions, the launch ids are blockIdx/threadIdx, special
floats come from their bits. HIP is compiled by clang's AMDGPU target without the ROCm headers or device libraries,
so it uses clang's own spellings: `__attribute__((global))`, the amdgcn id builtins, `__builtin_*` math (lowered to
the GPU's instructions), and `_Float16` as in C.

>>> from petagrad.renderer.cuda import CUDARenderer, HIPRenderer
>>> CUDARenderer().launch_ids
('blockIdx.x', 'threadIdx.x')
"""
from __future__ import annotations
from petagrad.dtype import dtypes
from petagrad.uop.ops import Ops
from petagrad.renderer.cstyle import CStyleRenderer

# a bitcast between equally sized types (C++ has no union compound literals)
BITCAST = "template <class T, class F> __device__ __forceinline__ T pg_bitcast(F f) { union { F f; T t; } u; u.f = f; return u.t; }\n"
CUDA_HELPERS = BITCAST + """__device__ __forceinline__ float pg_h2f(unsigned short b) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b)); return f; }
__device__ __forceinline__ unsigned short pg_f2h(float x) { unsigned short b; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(b) : "f"(x)); return b; }
__device__ __forceinline__ unsigned short pg_d2h(double x) { unsigned short b; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(b) : "d"(x)); return b; }
__device__ __forceinline__ float __bf2f(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
__device__ __forceinline__ float __bfr(float f) { unsigned int u = __float_as_uint(f);
  return __uint_as_float((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : ((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u)); }
__device__ __forceinline__ unsigned short __bfbits(float f) { return (unsigned short)(__float_as_uint(f) >> 16); }
"""   # noqa: E501 (CUDA source, printed as is)
# a warp's 16 x 8 = 16 x 16 @ 16 x 8 + C on tensor cores (Ops.WMMA): A in 4 and B in 2 registers of two halves each
# (the lower-numbered element in the low 16 bits), C and the float32 result in 4 (codegen/tensor_core.py has the layouts)
MMA = """__device__ __forceinline__ float4 pg_mma_{t}(unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1,
                                                float c0, float c1, float c2, float c3) {{
  float4 d; asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%10,%11,%12,%13}};"
    : "=f"(d.x), "=f"(d.y), "=f"(d.z), "=f"(d.w) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c0), "f"(c1), "f"(c2), "f"(c3));
  return d; }}
"""   # noqa: E501 (CUDA source)

# SANITIZE: as C's (renderer/cstyle.py): the first bad access is recorded in the error record (a 32-bit atomic on its
# first word) and skipped
SANITIZE_ARGS = ["const long long* pg_n_", "long long* pg_err_"]
# (formatted twice: here with the function qualifier and the atomic, then by the renderer)
SANITIZE_DECL = """{q} int pg_ok(const long long *n, long long *e, int p, long long i, long long lanes, int store) {{{{
  if (i >= 0 && i <= n[p] - lanes) return 1;
  if ({xchg} == 0u) {{{{ e[1] = p; e[2] = store; e[3] = i; e[4] = lanes; e[5] = n[p]; }}}}
  return 0;
}}}}
"""

class CUDARenderer(CStyleRenderer):
  device = "CUDA"
  max_local = 1024         # threads per block
  launch_groups = False    # no grid-wide barrier between kernels inside one launch
  wrap_signed = True
  index32 = True
  kernel_prefix = 'extern "C" __global__ '
  types = {**CStyleRenderer.types, dtypes.bool: "bool", dtypes.float16: "unsigned short"}
  float_special = ("__int_as_float(0x7fc00000)", "__int_as_float(0x7f800000)")
  bitcast_fmt = "pg_bitcast<{dst}>({x})"
  f16_load, f16_store, f16_round = "pg_h2f({x})", "pg_f2h({x})", "pg_h2f(pg_f2h({x}))"
  f16_round64 = "pg_h2f(pg_d2h({x}))"   # one rounding (cvt.rn.f16.f64), as C's, numpy's and CUDA torch's
  launch_ids = ("blockIdx.x", "threadIdx.x")
  # 16-byte loads and stores (ld.global.v4.f32) in CUDA's own vector types, aligned: codegen/vector_memory.py only joins
  # accesses at a multiple of their lanes, and a buffer is a whole cuMemAlloc allocation (256-byte aligned, no views)
  vector_memory = 16
  vec_fmt = {"type": "{t}{n}", "load": "*(({vt}*)({ptr}))", "store": "*(({vt}*)({ptr})) = {val};", "lane": "{x}.{w}", "make": "make_{vt}({args})"}
  vec_elem = {dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort", dtypes.uint32: "uint",
              dtypes.int64: "longlong", dtypes.uint64: "ulonglong", dtypes.float16: "ushort", dtypes.bfloat16: "ushort"}
  can_sanitize, sanitize_args = True, SANITIZE_ARGS
  sanitize_decl = SANITIZE_DECL.format(q="__device__", xchg="atomicExch((unsigned int *)e, 1u)")
  local_decl, barrier = "__shared__ {type} {name}[{size}];", "__syncthreads();"
  preamble = CUDA_HELPERS
  def __init__(self, arch: str = "sm_90"):
    # mma.sync m16n8k16 with float16 or bfloat16 inputs: sm_80 (Ampere) and later
    self.tensor_cores = (dtypes.float16, dtypes.bfloat16) if int("".join(c for c in arch[3:] if c.isdigit()) or 0) >= 80 else ()
  def wmma(self, u, names) -> str:
    t = "f16" if u.arg == dtypes.float16 else "bf16"
    if (helper := MMA.format(t=t)) not in self._helpers: self._helpers.append(helper)
    bits = [self._to_store(u.arg, names[s]) for s in u.src[:12]]   # (the halves live in floats: their bits, exactly)
    regs = [f"((unsigned)({lo}) | ((unsigned)({hi}) << 16))" for lo, hi in zip(bits[0::2], bits[1::2])]
    c = [names[s] for s in u.src[12:]] or ["0.0f"] * 4   # (the accumulators, where linearize gave them)
    return f"pg_mma_{t}({', '.join(regs + c)})"

HIP_HELPERS = BITCAST.replace("__device__ __forceinline__", "static __attribute__((device, always_inline))") + """\
static __attribute__((device)) inline float __bf2f(unsigned short b) { return pg_bitcast<float>(((unsigned int)b) << 16); }
static __attribute__((device)) inline float __bfr(float f) { unsigned int u = pg_bitcast<unsigned int>(f);
  return pg_bitcast<float>((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : ((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u)); }
static __attribute__((device)) inline unsigned short __bfbits(float f) { return (unsigned short)(pg_bitcast<unsigned int>(f) >> 16); }
"""

class HIPRenderer(CStyleRenderer):
  device = "HIP"
  max_local = 256          # a 256-thread block runs on every AMD GPU (1024 is the hardware limit)
  launch_groups = False
  wrap_signed = True
  index32 = True
  kernel_prefix = 'extern "C" __attribute__((global)) '
  types = {**CStyleRenderer.types, dtypes.bool: "bool"}
  bitcast_fmt = "pg_bitcast<{dst}>({x})"
  math_fns = {op: (f"__builtin_{a}", f"__builtin_{b}") for op, (a, b) in CStyleRenderer.math_fns.items()}
  # the GPU has float32 exp2/log2/sin instructions; float64 ones live in ROCm's device library, which is not linked
  decompose_ops = frozenset({(Ops.EXP2, dtypes.float64), (Ops.LOG2, dtypes.float64), (Ops.SIN, dtypes.float64)})
  launch_ids = ("__builtin_amdgcn_workgroup_id_x()", "__builtin_amdgcn_workitem_id_x()")
  vector_memory = 16       # clang's vector extensions, as C's (global_load_dwordx4)
  f16c = False             # (x86 helpers: float16 vectors convert with __builtin_convertvector)
  can_sanitize, sanitize_args = True, SANITIZE_ARGS
  sanitize_decl = SANITIZE_DECL.format(q="static __attribute__((device))", xchg="__atomic_exchange_n((unsigned int *)e, 1u, __ATOMIC_RELAXED)")
  local_decl = "__attribute__((shared)) {type} {name}[{size}];"
  barrier = ('__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); '
             '__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");')
  preamble = HIP_HELPERS
