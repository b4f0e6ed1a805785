"""The C-style renderer base: prints a linear program as C-like source. Dialects (C, OpenCL, CUDA, ...)
differ by tables: type names, function qualifiers, math functions.

Decompositions done here for C: bfloat16 is stored as 16 bits and computed in float (each result is
rounded back, as PyTorch does); a divisor that may be 0 or -1 is guarded (defined as 0 / wrap).
"""
from __future__ import annotations
import math
from typing import Callable
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.uop import UOp
from petagrad.dtype import DType, dtypes, float_to_bf16_bits
from petagrad.codegen.linearize import LinearProgram

class Renderer:
  """Base of all renderers: turns a linear program into source text for one device."""
  device: str = ""
  def render(self, name: str, prog: LinearProgram, params: list[DType]) -> str: raise NotImplementedError

class CStyleRenderer(Renderer):
  kernel_prefix = ""
  buffer_prefix = ""
  types: dict[DType, str] = {
    dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.int16: "short", dtypes.int32: "int", dtypes.int64: "long long",
    dtypes.uint8: "unsigned char", dtypes.uint16: "unsigned short", dtypes.uint32: "unsigned int", dtypes.uint64: "unsigned long long",
    dtypes.float16: "_Float16", dtypes.bfloat16: "unsigned short", dtypes.float32: "float", dtypes.float64: "double"}
  # float math: (float32 name, float64 name)
  math_fns: dict[Ops, tuple[str, str]] = {Ops.EXP2: ("exp2f", "exp2"), Ops.LOG2: ("log2f", "log2"), Ops.SIN: ("sinf", "sin"),
                                         Ops.SQRT: ("sqrtf", "sqrt"), Ops.TRUNC: ("truncf", "trunc")}
  preamble = ""

  infix: dict[Ops, str] = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.CMPLT: "<", Ops.CMPNE: "!=",
                           Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>"}

  def const(self, v, dt: DType) -> str:
    if dt == dtypes.bfloat16: return f"((unsigned short){float_to_bf16_bits(v)})"
    if dt.is_float:
      if math.isnan(v): s = "__builtin_nanf(\"\")"
      elif math.isinf(v): s = ("-" if v < 0 else "") + "__builtin_inff()"
      else: s = float(v).hex() + ("" if dt == dtypes.float64 else "f")
      return f"(({self.types[dt]}){s})" if dt != dtypes.float32 else s
    if dt.is_bool: return "1" if v else "0"
    if dt == dtypes.int64 and v == dt.min: return "(-9223372036854775807LL-1)"
    if dt == dtypes.int32 and v == dt.min: return "(-2147483647-1)"
    suffix = {dtypes.int64: "LL", dtypes.uint64: "ULL", dtypes.uint32: "U"}.get(dt, "")
    return f"{v}{suffix}" if dt in (dtypes.int32, dtypes.int64, dtypes.uint64, dtypes.uint32) else f"(({self.types[dt]}){v})"

  def render(self, name: str, prog: LinearProgram, params: list[DType]) -> str:
    names: dict[UOp, str] = {}
    lines: list[str] = []
    depth = 1
    counter = 0
    def r(u: UOp) -> str: return names[u]
    def fr(u: UOp) -> str:   # the value of u as a computable float expression (bfloat16 -> float)
      return f"__bf2f({names[u]})" if u.dtype == dtypes.bfloat16 else names[u]
    for u in prog.uops:
      op, dt = u.op, u.dtype
      if op is Ops.CONST: names[u] = self.const(u.arg, dt); continue
      if op is Ops.DEFINE_GLOBAL: names[u] = f"data{u.arg}"; continue
      ind = "  " * depth
      if op is Ops.RANGE:
        v = f"{'g' if u.arg[2] == 'global' else 'r'}idx{u.arg[0]}"
        names[u] = v
        lines.append(f"{ind}for (long long {v} = 0; {v} < {u.arg[1]}; {v}++) {{")
        depth += 1; continue
      if op is Ops.ENDRANGE:
        depth -= 1; lines.append("  " * depth + "}"); continue
      if op is Ops.STORE:
        lines.append(f"{ind}{r(u.src[0])}[{r(u.src[1])}] = {r(u.src[2])};"); continue
      if op is Ops.ACC_UPDATE:
        acc, val = u.src
        lines.append(f"{ind}{r(acc)} = {self.reduce_expr(u.arg, acc, val, r, fr)};"); continue
      counter += 1
      v = {Ops.LOAD: "val", Ops.DEFINE_ACC: "acc"}.get(op, "alu") + str(counter)
      names[u] = v
      if op is Ops.DEFINE_ACC: expr = r(u.src[0])
      elif op is Ops.LOAD:
        expr = f"{r(u.src[0])}[{r(u.src[1])}]"
        if len(u.src) == 3: expr = f"({r(u.src[2])} ? {expr} : {self.const(0, dt)})"
      else: expr = self.alu_expr(u, r, fr)
      lines.append(f"{ind}{self.types[dt]} {v} = {expr};")
    args = ", ".join(f"{self.buffer_prefix}{self.types[d]}* data{i}" for i, d in enumerate(params))
    return f"{self.preamble}{self.kernel_prefix}void {name}({args}) {{\n" + "\n".join(lines) + "\n}\n"

  def reduce_expr(self, op: Ops, acc: UOp, val: UOp, r: Callable, fr: Callable) -> str:
    dt = acc.dtype
    if dt == dtypes.bfloat16: return f"__f2bf({self._binary(op, dt, fr(acc), fr(val), dtypes.float32)})"
    if dt.is_bool and op is Ops.ADD: return f"{r(acc)} | {r(val)}"
    if dt.is_bool and op is Ops.MUL: return f"{r(acc)} & {r(val)}"
    return self._binary(op, dt, r(acc), r(val), dt)

  def _binary(self, op: Ops, dt: DType, a: str, b: str, compute_dt: DType) -> str:
    if op is Ops.MAX:
      return f"((({a})!=({a}))||(({a})>({b})) ? ({a}) : ({b}))" if compute_dt.is_float else f"(({a})>({b}) ? ({a}) : ({b}))"
    return f"({a} {self.infix[op]} {b})"

  def alu_expr(self, u: UOp, r: Callable, fr: Callable) -> str:
    op, dt, src = u.op, u.dtype, u.src
    if op is Ops.CAST:
      s = src[0]
      if dt == dtypes.bfloat16: return f"__f2bf((float)({fr(s)}))"
      if dt.is_bool: return f"({fr(s)} != 0)"
      return f"(({self.types[dt]})({fr(s)}))"
    if op is Ops.BITCAST:
      return f"({{{self.types[dt]} __o; {self.types[src[0].dtype]} __i = {r(src[0])}; memcpy(&__o, &__i, sizeof(__o)); __o;}})"
    if op is Ops.WHERE: return f"({r(src[0])} ? {r(src[1])} : {r(src[2])})"
    bf = any(s.dtype == dtypes.bfloat16 for s in src)
    if bf:   # compute in float, round the result back to bfloat16
      fdt = dtypes.float32
      inner = self._alu_str(op, fdt, [fr(s) for s in src], src)
      return f"__f2bf({inner})" if dt == dtypes.bfloat16 else inner
    return self._alu_str(op, dt, [r(s) for s in src], src)

  def _alu_str(self, op: Ops, dt: DType, a: list[str], src: tuple[UOp, ...]) -> str:
    sdt = src[0].dtype if src[0].dtype != dtypes.bfloat16 else dtypes.float32
    if op in self.math_fns: return f"{self.math_fns[op][1 if sdt == dtypes.float64 else 0]}({a[0]})"
    if op is Ops.NEG: return f"(!{a[0]})" if sdt.is_bool else f"(-{a[0]})"
    if op is Ops.RECIPROCAL: return f"(1/{a[0]})"
    if op in (Ops.IDIV, Ops.MOD):
      d = src[1]
      plain = f"({a[0]} {'/' if op is Ops.IDIV else '%'} {a[1]})"
      if d.op is Ops.CONST and d.arg not in (0, -1): return plain
      neg1 = "" if sdt.is_unsigned else (f"{a[1]} == -1 ? -{a[0]} : " if op is Ops.IDIV else f"{a[1]} == -1 ? 0 : ")
      return f"({a[1]} == 0 ? 0 : {neg1}{plain})"
    if op in (Ops.SHL, Ops.SHR) and not (src[1].op is Ops.CONST and 0 <= src[1].arg < sdt.bits):
      fill = f"({a[0]} < 0 ? -1 : 0)" if op is Ops.SHR and not sdt.is_unsigned else "0"
      return f"(({a[1]}) >= 0 && ({a[1]}) < {sdt.bits} ? ({a[0]} {self.infix[op]} {a[1]}) : {fill})"
    if op is Ops.WHERE: return f"({a[0]} ? {a[1]} : {a[2]})"
    return self._binary(op, dt, a[0], a[1], sdt)

BF16_HELPERS = """static inline float __bf2f(unsigned short b) { unsigned int u = ((unsigned int)b) << 16; float f; memcpy(&f, &u, 4); return f; }
static inline unsigned short __f2bf(float f) { unsigned int u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
"""

class CRenderer(CStyleRenderer):
  device = "CPU"
  preamble = "#include <math.h>\n#include <string.h>\n" + BF16_HELPERS
