"""The C-style renderer base: prints a linear program as C-like source. Dialects (C, OpenCL, CUDA, ...)
differ by tables: type names, function qualifiers, math functions, pragmas.

Decompositions done here for C: bfloat16 is stored as 16 bits and computed in float (each result is
rounded back, as PyTorch does); a divisor that may be 0 or -1 is guarded (defined as 0 / wrap).
Vectors use GCC/clang vector extensions: +, -, *, / and bit ops are native, every other op is computed
lane by lane (`(vec){f(a[0]), f(a[1]), ...}`), which is always correct.
"""
from __future__ import annotations
import math
from typing import Callable
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.dtype import DType, dtypes, float_to_bf16_bits
from petagrad.codegen.linearize import LinearProgram
from petagrad.helpers import cpu_threads

class Renderer:
  """Base of all renderers: turns a linear program into source text for one device."""
  device: str = ""
  supports_vector: bool = False     # may the optimizer create vector (SIMD) ranges?
  supports_threads: bool = False    # may the optimizer spread the outer loop over CPU threads?
  decompose_ops: frozenset = frozenset()   # (op, dtype) pairs to rewrite into primitives (codegen/decompositions.py)
  def render(self, name: str, prog: LinearProgram, params: list[DType]) -> str: raise NotImplementedError

NATIVE_VECTOR = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.FDIV: "/", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^"}

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
  thread_pragma = ""   # emitted before a loop over a `thread` range
  simd_pragma = ""     # emitted before an innermost loop; {reduction} is filled in

  # ------------------------------------------------------------ types and constants
  def tname(self, dt: DType) -> str:
    if dt.count == 1: return self.types[dt]
    return f"{self.types[dt.scalar()].replace(' ', '_')}_v{dt.count}"
  def vector_typedefs(self, dts: set[DType]) -> str:
    out = []
    for dt in sorted(dts, key=lambda d: (d.name, d.count)):
      el = "unsigned char" if dt.scalar() == dtypes.bool else self.types[dt.scalar()]
      size = dt.count * (1 if dt.scalar() == dtypes.bool else dt.itemsize)
      out.append(f"typedef {el} {self.tname(dt)} __attribute__((vector_size({size})));")
      out.append(f"typedef {el} {self.tname(dt)}u __attribute__((vector_size({size}), aligned({dt.itemsize})));")
    return "\n".join(out) + ("\n" if out else "")

  def const(self, v, dt: DType) -> str:
    if dt.count > 1: return f"(({self.tname(dt)}){{}} + {self.const(v, dt.scalar())})"
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

  # ------------------------------------------------------------ the program
  def render(self, name: str, prog: LinearProgram, params: list[DType]) -> str:
    names: dict[UOp, str] = {}
    lines: list[str] = []
    depth, counter = 1, 0
    vec_types: set[DType] = set()
    uops = prog.uops
    innermost = _innermost_loops(uops)
    for i, u in enumerate(uops):
      op, dt = u.op, u.dtype
      if dt.count > 1: vec_types.add(dt)
      if op is Ops.CONST: names[u] = self.const(u.arg, dt); continue
      if op is Ops.DEFINE_GLOBAL: names[u] = f"data{u.arg}"; continue
      ind = "  " * depth
      if op is Ops.RANGE:
        v = f"{'r' if u.arg[2] == 'reduce' else 'g'}idx{u.arg[0]}"
        names[u] = v
        simd = i in innermost and innermost[i] is not None and bool(self.simd_pragma)
        red = f" reduction(+:{', '.join(names[a] for a in innermost[i])})" if simd and innermost[i] else ""
        if u.arg[2] == "thread" and self.thread_pragma:
          lines.append(f"{ind}{self.thread_pragma}{' simd' if simd else ''}{red} num_threads({cpu_threads()})")
        elif simd: lines.append(f"{ind}{self.simd_pragma}{red}")
        lines.append(f"{ind}for (long long {v} = 0; {v} < {u.arg[1]}; {v}++) {{")
        depth += 1; continue
      if op is Ops.ENDRANGE:
        depth -= 1; lines.append("  " * depth + "}"); continue
      if op is Ops.STORE:
        buf, idx, val = (names[s] for s in u.src)
        if u.src[2].dtype.count > 1: lines.append(f"{ind}*(({self.tname(u.src[2].dtype)}u*)({buf} + {idx})) = {val};")
        else: lines.append(f"{ind}{buf}[{idx}] = {val};")
        continue
      if op is Ops.ACC_UPDATE:
        acc, val = u.src
        lines.append(f"{ind}{names[acc]} = {self.reduce_expr(u.arg, acc, val, names)};"); continue
      counter += 1
      v = {Ops.LOAD: "val", Ops.DEFINE_ACC: "acc"}.get(op, "alu") + str(counter)
      names[u] = v
      if op is Ops.DEFINE_ACC: expr = names[u.src[0]]
      elif op is Ops.LOAD:
        buf, idx = names[u.src[0]], names[u.src[1]]
        expr = f"*(({self.tname(dt)}u*)({buf} + {idx}))" if dt.count > 1 else f"{buf}[{idx}]"
        if len(u.src) == 3: expr = f"({names[u.src[2]]} ? {expr} : {self.const(0, dt)})"
      elif op is Ops.VECTORIZE: expr = f"(({self.tname(dt)}){{{', '.join(names[s] for s in u.src)}}})"
      elif op is Ops.GEP: expr = f"({names[u.src[0]]})[{u.arg}]"
      else: expr = self.alu_expr(u, names)
      lines.append(f"{ind}{self.tname(dt)} {v} = {expr};")
    args = ", ".join(f"{self.buffer_prefix}{self.types[d]}* data{i}" for i, d in enumerate(params))
    return f"{self.preamble}{self.vector_typedefs(vec_types)}{self.kernel_prefix}void {name}({args}) {{\n" + "\n".join(lines) + "\n}\n"

  # ------------------------------------------------------------ expressions
  def reduce_expr(self, op: Ops, acc: UOp, val: UOp, names: dict[UOp, str]) -> str:
    dt = acc.dtype
    if dt.count > 1 and op in (Ops.ADD, Ops.MUL) and not dt.is_bool and dt.scalar() not in (dtypes.bfloat16,):
      return f"{names[acc]} {self.infix[op]} {names[val]}"
    return self._lanewise(dt, lambda a: self._scalar_reduce(op, dt.scalar(), a[0], a[1], acc.dtype.scalar()), [acc, val], names)

  def _scalar_reduce(self, op: Ops, dt: DType, a: str, b: str, sdt: DType) -> str:
    if dt == dtypes.bfloat16: return f"__f2bf({self._binary(op, dtypes.float32, f'__bf2f({a})', f'__bf2f({b})')})"
    if dt.is_bool: return f"({a} | {b})" if op in (Ops.ADD, Ops.MAX) else f"({a} & {b})"
    return self._binary(op, dt, a, b)

  def _binary(self, op: Ops, compute_dt: DType, a: str, b: str) -> str:
    if op is Ops.MAX:
      return f"((({a})!=({a}))||(({a})>({b})) ? ({a}) : ({b}))" if compute_dt.is_float else f"(({a})>({b}) ? ({a}) : ({b}))"
    return f"({a} {self.infix[op]} {b})"

  def _lanewise(self, dt: DType, fn: Callable[[list[str]], str], src: list[UOp], names: dict[UOp, str]) -> str:
    """A vector computed lane by lane from the scalar expression fn(lane operands)."""
    def operand(s: UOp, i: int) -> str: return f"({names[s]})[{i}]" if s.dtype.count > 1 else names[s]
    if dt.count == 1: return fn([names[s] for s in src])
    return f"(({self.tname(dt)}){{{', '.join(fn([operand(s, i) for s in src]) for i in range(dt.count))}}})"

  def alu_expr(self, u: UOp, names: dict[UOp, str]) -> str:
    op, dt, src = u.op, u.dtype, u.src
    if dt.count > 1:
      vsrc = [s for s in src if s.dtype.count > 1]
      el = dt.scalar()
      if op in NATIVE_VECTOR and not el.is_bool and el not in (dtypes.bfloat16,) and (op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV) or el.is_int) \
         and all(s.dtype.scalar() == el for s in src):
        a, b = (names[s] if s.dtype.count > 1 else f"(({self.tname(dt)}){{}} + {names[s]})" for s in src)
        return f"({a} {NATIVE_VECTOR[op]} {b})"
      if op is Ops.NEG and not el.is_bool and el not in (dtypes.bfloat16,) and vsrc: return f"(-{names[src[0]]})"
      if op is Ops.CAST and len(vsrc) == 1 and not el.is_bool and not src[0].dtype.scalar().is_bool and \
         dtypes.bfloat16 not in (el, src[0].dtype.scalar()) and dtypes.float16 not in (el, src[0].dtype.scalar()):
        return f"__builtin_convertvector({names[src[0]]}, {self.tname(dt)})"
    scalar_u = u.replace(dtype=dt.scalar(), src=tuple(s.replace(dtype=s.dtype.scalar()) if s.dtype.count > 1 else s for s in src)) if dt.count > 1 else u
    return self._lanewise(dt, lambda a: self._scalar_alu(scalar_u, a), list(src), names)

  def _scalar_alu(self, u: UOp, a: list[str]) -> str:
    op, dt, src = u.op, u.dtype, u.src
    def fr(i: int) -> str: return f"__bf2f({a[i]})" if src[i].dtype == dtypes.bfloat16 else a[i]
    if op is Ops.CAST:
      if dt == dtypes.bfloat16: return f"__f2bf((float)({fr(0)}))"
      if dt.is_bool: return f"({fr(0)} != 0)"
      return f"(({self.types[dt]})({fr(0)}))"
    if op is Ops.BITCAST:
      return f"({{{self.types[dt]} __o; {self.types[src[0].dtype]} __i = {a[0]}; memcpy(&__o, &__i, sizeof(__o)); __o;}})"
    if op is Ops.WHERE: return f"({a[0]} ? {a[1]} : {a[2]})"
    if any(s.dtype == dtypes.bfloat16 for s in src):   # compute in float, round the result back to bfloat16
      inner = self._alu_str(op, [fr(i) for i in range(len(src))], src, dtypes.float32)
      return f"__f2bf({inner})" if dt == dtypes.bfloat16 else inner
    return self._alu_str(op, a, src, src[0].dtype)

  def _alu_str(self, op: Ops, a: list[str], src: tuple[UOp, ...], sdt: DType) -> str:
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
    return self._binary(op, sdt, a[0], a[1])

def _innermost_loops(uops: list[UOp]) -> dict[int, list[UOp] | None]:
  """For each innermost loop (no loop inside it), the accumulators it updates with + (None: not safe
  to declare a SIMD loop, e.g. a max/bool/vector accumulator)."""
  out: dict[int, list[UOp] | None] = {}
  open_at: list[int] = []
  has_inner: set[int] = set()
  accs: dict[int, list[UOp] | None] = {}
  for i, u in enumerate(uops):
    if u.op is Ops.RANGE:
      if open_at: has_inner.add(open_at[-1])
      open_at.append(i); accs[i] = []
    elif u.op is Ops.ENDRANGE:
      j = open_at.pop()
      if j not in has_inner: out[j] = accs[j]
    elif u.op is Ops.ACC_UPDATE and open_at:
      j = open_at[-1]
      ok = u.arg is Ops.ADD and u.dtype.count == 1 and not u.dtype.is_bool and u.dtype != dtypes.bfloat16
      if accs[j] is not None: accs[j] = accs[j] + [u.src[0]] if ok else None
  return out

BF16_HELPERS = """static inline float __bf2f(unsigned short b) { unsigned int u = ((unsigned int)b) << 16; float f; memcpy(&f, &u, 4); return f; }
static inline unsigned short __f2bf(float f) { unsigned int u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
"""

class CRenderer(CStyleRenderer):
  device = "CPU"
  supports_vector = True
  # libm calls stop loops from vectorizing; these become polynomials
  decompose_ops = frozenset({(Ops.EXP2, dtypes.float32), (Ops.LOG2, dtypes.float32)})
  supports_threads = True
  preamble = "#include <math.h>\n#include <string.h>\n" + BF16_HELPERS
  thread_pragma = "#pragma omp parallel for"
  simd_pragma = "#pragma omp simd"
