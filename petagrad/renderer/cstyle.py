"""The C-style renderer base: prints a linear program as C-like source. Dialects (C here; OpenCL C in
renderer/opencl.py; CUDA C and HIP in renderer/cuda.py) differ by tables: type names, integer literal suffixes,
special float constants, the bitcast form, half conversions, kernel and buffer qualifiers, launch-index intrinsics,
math functions, pragmas, a preamble. A dialect with work-groups (max_local > 0) gets its output ranges from the
launch indices instead of loops (GPU-style kernels, see _launch_indices).

Half types: float16 and bfloat16 are stored as 16 bits and live in float variables (float vectors) inside a kernel:
a load widens, every result that may not be representable is rounded back to the half type (so values are exactly
those of computing in the half type, as PyTorch does: for +, -, *, /, sqrt rounding a float result once more gives
the correctly rounded half result), and a store narrows exactly. C itself computes a _Float16 in float (no half
arithmetic without AVX512-FP16), and one representation for both types means vectors of halves use the native float
vector ops instead of lane-by-lane code (~3x less source for bfloat16, whose bits C has no type for).
A divisor that may be 0 or -1 is guarded (defined as 0 / wrap).
Vectors use GCC/clang vector extensions: +, -, *, / and bit ops are native, every other op is computed
lane by lane (`(vec){f(a[0]), f(a[1]), ...}`), which is always correct.
"""
from __future__ import annotations
import collections, copy, math
from typing import Callable
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.dtype import DType, dtypes
from petagrad.codegen.linearize import LinearProgram
from petagrad.helpers import cpu_threads, OMP, SANITIZE
from petagrad.renderer import Renderer

HALF = (dtypes.float16, dtypes.bfloat16)
# ops whose result is one of their inputs (or exact): a half result needs no rounding
EXACT = frozenset({Ops.MAX, Ops.NEG, Ops.WHERE, Ops.TRUNC, Ops.GEP, Ops.VECTORIZE})
def _is_half(dt: DType) -> bool: return dt.scalar() in HALF
def _fv(dt: DType) -> DType:
  """The dtype a value of dt is computed in: float32 (lanes) for the half types."""
  return dtypes.float32.vec(dt.count) if dt.scalar() in HALF else dt

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
  thread_pool = False  # thread loops outlined into functions the CPU thread pool runs (C only)
  argv_entry = False   # also a <name>_argv(void **) entry point, for the CPU device's launch queues (C only)
  can_sanitize = False # SANITIZE=1 bounds-checks this dialect's kernels, with these arguments and helper (pg_ok)
  sanitize_args: list[str] = []
  sanitize_decl = ""
  # SANITIZE in two passes (index math and checks first, then the unchecked kernel: C's results stay bit-exact); a
  # GPU-style kernel is checked in one pass (a work-group reduction's barriers must be reached by every thread)
  sanitize_two_pass = False
  int_suffix: dict[DType, str] = {dtypes.int64: "LL", dtypes.uint64: "ULL", dtypes.uint32: "U"}
  float_special = ('__builtin_nanf("")', "__builtin_inff()")   # NaN and +inf as float32 expressions
  # a scalar bitcast; C: a union compound literal (not memcpy): compilers vectorize loops around it
  bitcast_fmt = "((union {{{src} i; {dst} o;}}){{.i = {x}}}).o"
  # one float16 scalar: its stored value as float, a float (representable) as stored, a float rounded to float16
  f16_load, f16_store, f16_round = "((float)({x}))", "((_Float16)({x}))", "((float)(_Float16)({x}))"
  f16_round64 = ""   # a double rounded once to float16, as float, where f16_round would round it to float first ("": C's cast does)
  launch_ids = ("", "")   # the work-group's id and the thread's id in it (dialects with max_local > 0)
  local_decl = ""         # an array in a work-group's local (shared) memory: {type} {name}[{size}]
  barrier = ""            # every thread of the work-group waits here, and sees the others' local memory writes
  # signed integer +, -, * and << wrap around (torch's and numpy's results) through the unsigned type where the
  # compiler has no -fwrapv (overflow is undefined in OpenCL C and CUDA C++: a compiler folds x * 2 / 2 to x)
  wrap_signed = False
  masked_loads = False    # vector loads under a lane mask are one instruction (_masked_load): C on AVX-512 machines
  index32 = False         # index math in 32-bit ints where it fits (_render): GPU dialects
  # GPU dialects whose vectors are memory operations only (Renderer.vector_memory; codegen/vector_memory.py): a vector
  # is loaded or stored whole in the dialect's own vector type, holding the stored form (half bits), and its lanes are
  # taken apart and put together one by one. Formats: "type" {t}{n} ({t}: vec_elem's name of the lane type, else
  # `types`'), "load" and "store" of the vector at {ptr} ({vt}: its type, {val}: the value stored), "lane" i of {x}
  # ({i}, or {w}: "xyzw"[i]), "make" a vector of {args}. Empty: C's vector extensions (HIP too).
  vec_fmt: dict[str, str] = {}
  vec_elem: dict[DType, str] = {}
  f16c = True             # float16 vectors converted by the x86 F16C helpers where the compiler targets them (F16_VEC)

  # ------------------------------------------------------------ types and constants
  def tname(self, dt: DType) -> str:
    if dt.count == 1: return self.types[dt]
    # a bool vector is a mask: 32-bit lanes that are all ones (true) or zero, as vector compares give
    return self._vt(self.types[dtypes.int32 if dt.scalar().is_bool else dt.scalar()], dt.count)
  def vtype(self, dt: DType) -> str:
    """The C type of a variable holding a value of dt (halves live in floats)."""
    return self.tname(_fv(dt))
  def _vt(self, celem: str, n: int) -> str:
    name = f"{celem.replace(' ', '_')}_v{n}"
    self._vec_types[name] = (celem, n)
    return name
  def vector_typedefs(self) -> str:
    out = []
    for name, (celem, n) in sorted(self._vec_types.items()):
      size = C_SIZES[celem]
      out.append(f"typedef {celem} {name} __attribute__((vector_size({size * n})));")
      out.append(f"typedef {celem} {name}u __attribute__((vector_size({size * n}), aligned({size})));")
    out += [F16_VEC.format(n=n, c=c, m=f"__m{32 * c}",
                           p="_mm256" if c == 8 else "_mm") for n in sorted(self._f16_vec) for c in [8 if n % 8 == 0 else 4]]
    include = "#include <immintrin.h>\n" if self._intrinsics else "#ifdef __F16C__\n#include <immintrin.h>\n#endif\n" if self._f16_vec else ""
    return include + "\n".join(out) + ("\n" if out else "")

  def const(self, v, dt: DType) -> str:
    if dt.count > 1:
      return self._broadcast(('-1' if v else '0') if dt.scalar().is_bool else self.const(v, dt.scalar()), dt)
    if dt in HALF: return self.const(v, dtypes.float32)   # v is already rounded to dt (UOp.const)
    if dt.is_float:
      if math.isnan(v): s = self.float_special[0]
      elif math.isinf(v): s = ("-" if v < 0 else "") + self.float_special[1]
      else: s = float(v).hex() + ("" if dt == dtypes.float64 else "f")
      return f"(({self.types[dt]}){s})" if dt != dtypes.float32 else s
    if dt.is_bool: return "1" if v else "0"
    suffix = self.int_suffix.get(dt, "")
    if dt == dtypes.int64 and v == dt.min: return f"(-9223372036854775807{suffix}-1)"
    if dt == dtypes.int32 and v == dt.min: return "(-2147483647-1)"
    return f"{v}{suffix}" if dt in (dtypes.int32, dtypes.int64, dtypes.uint64, dtypes.uint32) else f"(({self.types[dt]}){v})"

  # ------------------------------------------------------------ the program
  def render(self, name: str, prog: LinearProgram, params: list[DType]) -> str:
    self.check_dtypes(name, prog, params)
    # one device's renderer is shared by every Python thread that realizes; a render's state (names, counters, the
    # outlined thread functions) lives on a copy of its own, so two renders at once never mix their lines
    return copy.copy(self)._render(name, prog, params)
  def _render(self, name: str, prog: LinearProgram, params: list[DType]) -> str:
    names: dict[UOp, str] = {}
    self._counter = 0
    self._vec_types: dict[str, tuple[str, int]] = {}
    self._f16_vec: set[int] = set()   # lane counts of float16 vectors converted with the F16C helpers (F16_VEC)
    self._intrinsics = False   # a masked load uses the x86 intrinsics (immintrin.h)
    self._outlined: list[str] = []
    self._helpers: list[str] = []   # helper functions the kernel's instructions asked for (a dialect's `wmma`)
    self._locals: list[str] = []   # local memory arrays (work-group reductions), declared at the kernel's top
    # GPU-style (_launch_indices): the step of the thread id from one value of a work-group range to the next, and the
    # number of threads in a group
    self._lstride: dict[UOp, int] = {}
    self._lsize = 1
    self._index_math = prog.index_math   # wraps no index math (wrap_signed): it cannot overflow, and stays fast
    # index32: where every integer of the index math (loop variables, launch ids, addresses) lies within int32, the
    # kernel computes it in 32-bit ints (one instruction each on a GPU, where 64-bit ones take several)
    narrow = [u for u in prog.index_math if u.dtype == dtypes.index]
    self._index32 = frozenset(narrow) if self.index32 and all(-2**31 <= u.vmin and u.vmax < 2**31 for u in narrow) else frozenset()
    self._itype = self.types[dtypes.int32 if self._index32 else dtypes.index]
    self.sanitize = bool(SANITIZE) and self.can_sanitize   # bounds-check every load and store (docs/safety.md); part of the program cache keys
    uops = prog.uops
    if not self.sanitize: lines = self._body(name, uops, names, params, "plain")
    elif not self.sanitize_two_pass: lines = self._body(name, uops, names, params, "checked")
    else:
      # A checked access changes how the compiler treats the code around it (a sum GCC vectorized adds in another order,
      # a multiply and add in other basic blocks are no longer fused), so results would differ in the last bits. Where
      # no index or mask depends on loaded data, a first pass runs only the index math and checks every access (where
      # its mask holds); without a bad one the kernel then runs exactly as built without SANITIZE, else fully checked
      # (every bad access recorded and skipped). A kernel whose indices depend on its data (a gather) runs checked.
      checked = self._body(name, uops, names, params, "checked")
      if (need := _index_math(uops)) is None: lines = checked
      else:
        probe, plain = self._body(name, uops, names, params, "probe", need), self._body(name, uops, names, params, "plain")
        lines = (["  int pg_bad_ = 0;", "  {"] + ["  " + l for l in probe] + ["  }", "  if (!pg_bad_) {"] + ["  " + l for l in plain] +
                 ["  } else {"] + ["  " + l for l in checked] + ["  }"])
    args = ", ".join([f"{self.buffer_prefix}{self.types[d]}* data{i}" for i, d in enumerate(params)] + (self.sanitize_args if self.sanitize else []))
    pool = POOL_DECL if self._outlined else ""
    check = self.sanitize_decl.format(params=" ".join(d.name for d in params)) if self.sanitize else ""
    nargs = len(params) + (len(self.sanitize_args) if self.sanitize else 0)
    # an entry point taking the buffer pointers as one array: a launch queue's thread calls every kernel the same way
    argv = f"void {name}_argv(void **a) {{ {name}({', '.join(f'a[{i}]' for i in range(nargs))}); }}\n" if self.argv_entry else ""
    return (f"{self.preamble}{pool}{check}{self.vector_typedefs()}{''.join(self._helpers)}{''.join(self._outlined)}"
            f"{self.kernel_prefix}void {name}({args}) {{\n" + "\n".join(self._locals + lines) + "\n}\n" + argv)

  def _body(self, name: str, uops: list[UOp], names: dict[UOp, str], params: list[DType], mode: str, need: set[UOp] | None = None) -> list[str]:
    """The kernel's statements. mode: plain; checked (every access bounds-checked); probe (only the loops and the index
    math in `need`, and a check of every access that sets pg_bad_)."""
    self._checks = mode != "plain"
    lines: list[str] = []
    depth = 1
    innermost = _innermost_loops(uops) if mode != "probe" else {}
    # a loop over a `thread` range is outlined into a function the thread pool runs in chunks (thread_pool);
    # its lines go to that function while it is open
    thread_end = _thread_loops(uops) if self.thread_pool and mode != "probe" else {}
    open_thread: tuple[int, list[str], int, list[UOp]] | None = None   # (end index, caller's lines, caller's depth, captured)
    launched = self._launch_indices(uops, names, lines) if self.has_local else set()
    for i, u in enumerate(uops):
      op, dt = u.op, u.dtype
      if op is Ops.CONST: names[u] = self.const(u.arg, _fv(dt)); continue
      if op is Ops.DEFINE_GLOBAL: names[u] = f"data{u.arg}"; continue
      ind = "  " * depth
      if u in launched or (op is Ops.ENDRANGE and u.src[0] in launched): continue   # a launch index, not a loop
      if op is Ops.RANGE:
        v = f"{'r' if u.arg[2] == 'reduce' else 'g'}idx{u.arg[0]}"
        names[u] = v
        simd = i in innermost and innermost[i] is not None and bool(self.simd_pragma)
        red = f" reduction(+:{', '.join(names[a] for a in innermost[i])})" if simd and innermost[i] else ""
        if i in thread_end and open_thread is None:
          captured = _captured(uops, i, thread_end[i], names)
          open_thread = (thread_end[i], lines, depth, captured)
          lines, depth = [], 2
          if simd: lines.append(f"  {self.simd_pragma}{red}")
          lines.append(f"  for (long long {v} = lo_; {v} < hi_; {v}++) {{")
          continue
        if u.arg[2] == "thread" and self.thread_pragma and not self.thread_pool and mode != "probe":
          lines.append(f"{ind}{self.thread_pragma}{' simd' if simd else ''}{red} num_threads({cpu_threads()})")
        elif simd: lines.append(f"{ind}{self.simd_pragma}{red}")
        lines.append(f"{ind}for ({self._itype} {v} = 0; {v} < {names[u.src[0]] if u.src else u.arg[1]}; {v}++) {{")
        depth += 1; continue
      if op is Ops.ENDRANGE:
        depth -= 1; lines.append("  " * depth + "}")
        if open_thread is not None and i == open_thread[0]:
          body, (_, lines, depth, captured) = lines, open_thread
          open_thread = None
          k = len(self._outlined)
          self._outlined.append(self._outline(name, k, body, captured, params, names))
          init = ", ".join([f"data{j}" for j in range(len(params))] + (["pg_n_", "pg_err_"] if self.sanitize else []) + [names[c] for c in captured])
          call = f"pg_parallel_for({name}_t{k}, &a_, {u.src[0].arg[1]}LL, {cpu_threads()})"
          lines.append(f"{'  ' * depth}{{ struct {name}_a{k} a_ = {{{init}}}; if (pg_parallel_for) {call}; else {name}_t{k}(&a_, 0, "
                       f"{u.src[0].arg[1]}LL); }}")
        continue
      if mode != "probe": self._emit(u, names, lines, ind)
      elif u in need: self._emit(u, names, lines, ind)
      elif op in (Ops.LOAD, Ops.STORE): lines += self._probe(u, names, ind)
    assert open_thread is None, "a thread loop was never closed"
    return lines

  def _launch_indices(self, uops: list[UOp], names: dict[UOp, str], lines: list[str]) -> set[UOp]:
    """GPU-style: the output ranges are the work-group's id and the local ranges the thread's id in its group, each id
    split into its ranges (outermost first: the last range varies fastest between neighbouring ids). Returns them."""
    it = self._itype
    out: set[UOp] = set()
    for kinds, ident, var in ((("global",), self.launch_ids[0], "gid_"), (("local", "group"), self.launch_ids[1], "lid_")):
      # (an output range of symbolic length is a loop inside the kernel: the launch's size is fixed when it compiles)
      rs = sorted((u for u in uops if u.op is Ops.RANGE and u.arg[2] in kinds and not u.src), key=lambda r: r.arg[0])
      if not rs: continue
      lines.append(f"  {it} {var} = ({it})({ident});")
      stride = 1
      for r in reversed(rs):
        names[r] = f"{'g' if kinds == ('global',) else 'l'}idx{r.arg[0]}"
        div = f"{var} / {stride}" if stride > 1 else var
        lines.append(f"  {it} {names[r]} = {div if r is rs[0] else f'({div}) % {r.arg[1]}'};")
        if var == "lid_": self._lstride[r] = stride
        stride *= r.arg[1]
      if var == "lid_": self._lsize = stride
      out.update(rs)
    return out

  def _group_reduce(self, u: UOp, names: dict[UOp, str], lines: list[str], ind: str) -> str:
    """A REDUCE over a work-group range g: each thread puts its value in local memory, then log2(|g|) rounds of
    pairwise combines (a tree: the same order on every run) leave the result at g = 0, which every thread reads."""
    (g,), dt = u.src[1:], u.dtype
    tmp = f"pg_local{len(self._locals)}"
    self._locals.append("  " + self.local_decl.format(type=self.vtype(dt), name=tmp, size=self._lsize))
    me, step, n = names[g], self._lstride[g], g.arg[1]
    lines += [f"{ind}{tmp}[lid_] = {names[u.src[0]]};", f"{ind}{self.barrier}"]
    s = 1
    while s < n:
      both = self._scalar_reduce(u.arg, dt, f"{tmp}[lid_]", f"{tmp}[lid_ + {s * step}]", dt)
      lines += [f"{ind}if ({me} % {2 * s} == 0 && {me} + {s} < {n}) {tmp}[lid_] = {both};", f"{ind}{self.barrier}"]
      s *= 2
    self._counter += 1
    lines += [f"{ind}{self.vtype(dt)} red{self._counter} = {tmp}[lid_ - {me} * {step}];", f"{ind}{self.barrier}"]   # read before reuse
    return f"red{self._counter}"

  def _probe(self, x: UOp, names: dict[UOp, str], ind: str) -> list[str]:
    """The checks of one access, where it happens (its mask holds), setting pg_bad_."""
    p, idx = x.src[0].arg, names[x.src[1]]
    if x.op is Ops.STORE: return [f"{ind}if (!{self._check(p, idx, x.src[2].dtype.count, True)}) pg_bad_ = 1;"]
    if len(x.src) == 4:
      return [f"{ind}if (({names[x.src[2]]})[{k}] && !{self._check(p, f'{idx} + {k}', 1, False)}) pg_bad_ = 1;" for k in range(x.dtype.count)]
    gate = f"({names[x.src[2]]}) && " if len(x.src) == 3 else ""
    return [f"{ind}if ({gate}!{self._check(p, idx, x.dtype.count, False)}) pg_bad_ = 1;"]

  def _emit(self, u: UOp, names: dict[UOp, str], lines: list[str], ind: str) -> None:
    """The line(s) of one instruction that is not a loop's start or end."""
    op, dt = u.op, u.dtype
    if op is Ops.CONST: names[u] = self.const(u.arg, _fv(dt)); return
    if op is Ops.DEFINE_GLOBAL: names[u] = f"data{u.arg}"; return
    if op is Ops.REDUCE: names[u] = self._group_reduce(u, names, lines, ind); return
    if op is Ops.STORE:
      buf, idx, val = (names[s] for s in u.src)
      vdt = u.src[2].dtype
      # a work-group that combined a reduction holds the result in every thread: the first one stores it
      if (first := [f"{names[g]} == 0" for g in self._lstride if g.arg[2] == "group"]): ind += f"if ({' && '.join(first)}) "
      ind += self._check(u.src[0].arg, idx, vdt.count, True, "if ({}) ")
      if vdt.count > 1 and vdt.scalar().is_bool:   # masks are stored as bytes 0/1
        lines.append(f"{ind}*(({self._vt('unsigned char', vdt.count)}u*)({buf} + {idx})) = __builtin_convertvector(-{val}, "
                     f"{self._vt('unsigned char', vdt.count)});")
      elif vdt.count > 1 and self.vec_fmt:
        lines.append(ind + self.vec_fmt["store"].format(vt=self._mvt(vdt), ptr=f"{buf} + {idx}", val=val, n=vdt.count))
      else:
        if _is_half(vdt): val = self._to_store(vdt, val)
        if vdt.count > 1: lines.append(f"{ind}*(({self.tname(vdt)}u*)({buf} + {idx})) = {val};")
        else: lines.append(f"{ind}{buf}[{idx}] = {val};")
      return
    if op is Ops.ACC_UPDATE:
      acc, val = u.src
      if u.arg is Ops.ASSIGN: lines.append(f"{ind}{names[acc]} = {names[val]};"); return   # (a value that includes the accumulator)
      if _is_half(acc.dtype):   # computed in float, rounded at every update
        va, vv = acc.replace(dtype=_fv(acc.dtype)), val.replace(dtype=_fv(val.dtype))
        expr = self.reduce_expr(u.arg, va, vv, {va: names[acc], vv: names[val]})
        if u.arg is not Ops.MAX: expr = self._round(acc.dtype, expr)
      else: expr = self.reduce_expr(u.arg, acc, val, names)
      lines.append(f"{ind}{names[acc]} = {expr};"); return
    self._counter += 1
    v = {Ops.LOAD: "val", Ops.DEFINE_ACC: "acc"}.get(op, "alu") + str(self._counter)
    names[u] = v
    if self.vec_fmt and (dt.count > 1 or (op is Ops.GEP and u.src[0].dtype.count > 1)):
      lines.append(f"{ind}{self._mvt(dt) if dt.count > 1 else self.vtype(dt)} {v} = {self._gpu_vector(u, names)};"); return
    if op is Ops.DEFINE_ACC: expr = names[u.src[0]]
    elif op is Ops.LOAD:
      buf, idx, p = names[u.src[0]], names[u.src[1]], u.src[0].arg
      if dt.count > 1 and dt.scalar().is_bool:
        ut = self._vt('unsigned char', dt.count)
        expr = f"(-__builtin_convertvector({self._checked(p, idx, dt.count, f'*(({ut}u*)({buf} + {idx}))', f'({ut}){{}}')}, {self.tname(dt)}))"
      else:
        expr = f"*(({self.tname(dt)}u*)({buf} + {idx}))" if dt.count > 1 else f"{buf}[{idx}]"
        expr = self._checked(p, idx, dt.count, expr, f"({self.tname(dt)}){{}}" if dt.count > 1 else "0")
        if _is_half(dt): expr = self._from_store(dt, expr)
      if len(u.src) == 4 and not self._checks and (masked := self._masked_load(dt, f"{buf} + {idx}", names[u.src[2]])):
        expr = masked   # one instruction: the masked-off lanes read nothing (and are zero)
      elif len(u.src) == 4:   # a vector load under a lane mask, with a scalar "every lane valid" fast path
        m, sdt = names[u.src[2]], dt.scalar()
        def lane(i: int) -> str:
          x = self._checked(p, f"{idx} + {i}", 1, f"{buf}[{idx} + {i}]", "0")   # checked only where the lane is valid
          return self._from_store(sdt, x) if _is_half(sdt) else x
        lanes = ", ".join(f"(({m})[{i}] ? {lane(i)} : {self.const(0, _fv(sdt))})" for i in range(dt.count))
        expr = f"({names[u.src[3]]} ? {expr} : (({self.vtype(dt)}){{{lanes}}}))"
      elif len(u.src) == 3: expr = f"({names[u.src[2]]} ? {expr} : {self.const(0, _fv(dt))})"
    elif any(_is_half(x.dtype) for x in (u, *u.src)): expr = self._half_expr(u, names)
    elif self._index32 and u in self._index_math:   # 32-bit index math: its integer constants without the 64-bit suffix
      expr = self._expr(u, collections.ChainMap({s: str(s.arg) for s in u.src if s.op is Ops.CONST and s.dtype == dtypes.index}, names))
    else: expr = self._expr(u, names)
    lines.append(f"{ind}{self._itype if u in self._index32 else self.vtype(dt)} {v} = {expr};")

  def _mvt(self, dt: DType) -> str:
    """The dialect's vector type holding dt's lanes as stored (vec_fmt)."""
    return self.vec_fmt["type"].format(t=self.vec_elem.get(dt.scalar(), self.types[dt.scalar()]), n=dt.count)
  def _gpu_vector(self, u: UOp, names: dict[UOp, str]) -> str:
    """A value of the dialect's vector types (vec_fmt): a vector load, a lane of a vector (as a float for the half
    types), a vector of values to store, a tensor-core product (wmma)."""
    dt, f = u.dtype, self.vec_fmt
    if u.op is Ops.GEP:
      lane = f["lane"].format(x=names[u.src[0]], i=u.arg, w="xyzw"[u.arg])
      return self._from_store(dt, lane) if _is_half(dt) else lane
    if u.op is Ops.WMMA: return self.wmma(u, names)
    if u.op is Ops.VECTORIZE:
      return f["make"].format(vt=self._mvt(dt), args=", ".join(self._to_store(s.dtype, names[s]) if _is_half(s.dtype) else names[s] for s in u.src))
    assert u.op is Ops.LOAD and len(u.src) <= 3, f"{u.op} of {dt} has no vector form in {self.device}"
    buf, idx, zero = names[u.src[0]], names[u.src[1]], f["make"].format(vt=self._mvt(dt), args=", ".join(["0"] * dt.count))
    expr = self._checked(u.src[0].arg, idx, dt.count, f["load"].format(vt=self._mvt(dt), ptr=f"{buf} + {idx}", n=dt.count), zero)
    return f"({names[u.src[2]]} ? {expr} : {zero})" if len(u.src) == 3 else expr

  def wmma(self, u: UOp, names: dict[UOp, str]) -> str:
    """Ops.WMMA (a warp's tensor-core matmul step), for a dialect with tensor_cores."""
    raise NotImplementedError(f"{self.device} renders no tensor-core instructions")

  def _masked_load(self, dt: DType, ptr: str, mask: str) -> str | None:
    """A vector load of dt's lanes at ptr where mask (one 32-bit lane of all ones or zeros per element) holds, the other
    lanes zero and not read, as one instruction (AVX-512's masked loads: they never touch a masked-off lane's memory,
    even past a buffer's end); None where the dialect has none for dt."""
    suffix, size = MASKED_LOAD.get(dt.scalar()), dt.count * dt.scalar().itemsize
    if not self.masked_loads or suffix is None or size not in SIMD_PREFIX or dt.count * 4 not in SIMD_PREFIX: return None
    self._intrinsics = True
    mp, m = SIMD_PREFIX[dt.count * 4], f"(__m{dt.count * 32}i)({mask})"
    return f"(({self.tname(dt)}){SIMD_PREFIX[size]}_maskz_loadu_{suffix}({mp}_test_epi32_mask({m}, {m}), {ptr}))"

  # ------------------------------------------------------------ SANITIZE: bounds checks (docs/safety.md)
  def _check(self, p: int, idx: str, lanes: int, store: bool, fmt: str = "{}") -> str:
    """The condition that buffer p holds elements idx..idx+lanes-1 (recording the first access that does not), in fmt;
    "" when not sanitizing."""
    return fmt.format(f"pg_ok(pg_n_, pg_err_, {p}, {idx}, {lanes}, {int(store)})") if self._checks else ""
  def _checked(self, p: int, idx: str, lanes: int, read: str, zero: str) -> str:
    """A read of buffer p that happens only if it is in bounds (else zero; a bad access is recorded and skipped)."""
    return f"({self._check(p, idx, lanes, False)} ? {read} : {zero})" if self._checks else read

  def _expr(self, u: UOp, names: dict[UOp, str]) -> str:
    dt = u.dtype
    if u.op is Ops.VECTORIZE:
      return f"(({self.tname(dt)}){{{', '.join((f'-(int)({names[s]})' if dt.scalar().is_bool else names[s]) for s in u.src)}}})"
    if u.op is Ops.GEP and isinstance(u.arg, tuple):   # lanes of one vector, or of a pair (the second's lanes numbered after the first's)
      return self.shuffle.format(a=names[u.src[0]], b=names[u.src[-1]], lanes=", ".join(map(str, u.arg)))
    if u.op is Ops.GEP: return f"(({names[u.src[0]]})[{u.arg}] != 0)" if dt.is_bool else f"({names[u.src[0]]})[{u.arg}]"
    if u.op is Ops.DOT4: return self._dot4(u, names)
    return self.alu_expr(u, names)

  def _dot4(self, u: UOp, names: dict[UOp, str]) -> str:
    """Ops.DOT4 of two int8 vectors of 16, 32 or 64 lanes, with AVX-512 VNNI's vpdpbusd (unsigned x signed bytes): a
    as unsigned a + 128 (its sign bit flipped), then minus 128 * the sum of b's four. Exact for every int8 (the sign
    trick, |a| times b with a's sign, is wrong where b is -128)."""
    nbytes = u.src[0].dtype.count
    p, bits = SIMD_PREFIX[nbytes], nbytes * 8
    self._intrinsics = True
    return DOT4_VNNI.format(t=f"__m{bits}i", p=p, bits=bits, a=names[u.src[0]], b=names[u.src[1]], out=self.tname(u.dtype))

  # ------------------------------------------------------------ half types (see the module doc)
  def _half_expr(self, u: UOp, names: dict[UOp, str]) -> str:
    """u, with a half dtype among its own and its sources', computed on the float values and rounded back."""
    op, dt, src = u.op, u.dtype, u.src
    # (lanes of a half vector are floats: the vector is built as the float vector it lives in)
    if op is Ops.BITCAST: return self._lanewise(_fv(dt), lambda a: self._half_bitcast(src[0].dtype.scalar(), dt.scalar(), a[0]), list(src), names)
    if op is Ops.CAST and src[0].dtype.scalar() == dtypes.float64 and dt.scalar() == dtypes.float16:   # one rounding, not two
      return self._round(dt, names[src[0]], src=dtypes.float64)
    vu = u.replace(dtype=_fv(dt), src=tuple(s.replace(dtype=_fv(s.dtype)) for s in src))
    vnames = {vs: names[s] for s, vs in zip(src, vu.src)}
    if op is Ops.CAST and vu.dtype == vu.src[0].dtype: expr = names[src[0]]   # half <-> float32, or half <-> half
    else: expr = self._expr(vu, vnames)
    # a cast from a type every value of which the half holds (bool, 8-bit ints) is exact too
    exact = op in EXACT or (op is Ops.CAST and (src[0].dtype.scalar() == dt.scalar() or src[0].dtype.itemsize == 1))
    return expr if exact or not _is_half(dt) else self._round(dt, expr)

  def _round(self, dt: DType, x: str, src: DType = dtypes.float32) -> str:
    """The float value(s) x (of src lanes) rounded to the half type dt, as float(s)."""
    n = dt.count
    if dt.scalar() == dtypes.float16:
      if n == 1: return (self.f16_round64 if src == dtypes.float64 and self.f16_round64 else self.f16_round).format(x=x)
      if src == dtypes.float32 and self._f16(n): return f"__hround_v{n}({x})"
      return f"__builtin_convertvector(__builtin_convertvector({x}, {self._vt('_Float16', n)}), {self.tname(dtypes.float32.vec(n))})"
    if n == 1: return f"__bfr({x})"
    # __bfr on every lane with vector integer ops (round to nearest even on the top 16 bits; NaN stays a quiet NaN)
    ut, ft = self._vt('unsigned int', n), self.tname(dtypes.float32.vec(n))
    return (f"({{{ut} u_ = ({ut})({x}), n_ = ({ut})((u_ & 0x7fffffffu) > 0x7f800000u); "
            f"({ft})((((u_ + 0x7fffu + ((u_ >> 16) & 1u)) & 0xffff0000u) & ~n_) | (0x7fc00000u & n_));}})")

  def _from_store(self, dt: DType, x: str) -> str:
    """Stored half bits/values x (scalar or vector) as float(s)."""
    n, ft = dt.count, self.tname(dtypes.float32.vec(dt.count))
    if dt.scalar() == dtypes.float16:
      if n == 1: return self.f16_load.format(x=x)
      return f"__h2f_v{n}({x})" if self._f16(n) else f"__builtin_convertvector({x}, {ft})"
    if n == 1: return f"__bf2f({x})"
    return f"(({ft})(__builtin_convertvector({self._in_reg(x, dtypes.uint16.vec(n))}, {self._vt('unsigned int', n)}) << 16))"

  def _in_reg(self, x: str, dt: DType) -> str:
    """Vector x (narrow lanes about to be widened) held in a register first (REG_HELPER), where the dialect has it and
    the vector fits one register of the machine (at most 16 bytes, or its SIMD width when that is larger)."""
    if "PG_IN_REG" not in self.preamble or dt.itemsize * dt.count > max(16, min(32, getattr(self, "vector_bytes", 16))): return x
    return f"({{{self.tname(dt)} __r = {x}; PG_IN_REG(__r); __r;}})"

  def _to_store(self, dt: DType, x: str) -> str:
    """Float value(s) x, representable in the half type dt, as what is stored (exact: no rounding here)."""
    n = dt.count
    if dt.scalar() == dtypes.float16:
      if n == 1: return self.f16_store.format(x=x)
      return f"__f2h_v{n}({x})" if self._f16(n) else f"__builtin_convertvector({x}, {self._vt('_Float16', n)})"
    # the top 16 bits of the float (a loaded NaN keeps its bits)
    return f"__bfbits({x})" if n == 1 else f"__builtin_convertvector((({self._vt('unsigned int', n)})({x})) >> 16, {self._vt('unsigned short', n)})"

  def _f16(self, n: int) -> bool:
    """Convert n float16 lanes with the F16C helpers (F16_VEC)? Then their types and helpers are emitted."""
    if n % 4 or not self.f16c: return False
    self._f16_vec.add(n); self._vt('_Float16', n); self._vt('float', n)
    return True

  def _half_bitcast(self, sdt: DType, ddt: DType, x: str) -> str:
    """A scalar bitcast with a half type on either side: the half's bits come from / go to its float value."""
    if sdt in HALF: x = self.f16_store.format(x=x) if sdt == dtypes.float16 else f"__bfbits({x})"
    out = self.bitcast_fmt.format(src=self.types[sdt], dst=self.types[ddt], x=x)
    return self._from_store(ddt, out) if ddt in HALF else out

  def _outline(self, name: str, k: int, body: list[str], captured: list[UOp], params: list[DType], names: dict[UOp, str]) -> str:
    """A thread loop as `static void name_tk(args, lo_, hi_)` over [lo_, hi_) of its range, with the kernel's
    buffers and the values it reads from outside the loop (`captured`) passed in a struct."""
    def ctype(c: UOp) -> str: return "long long" if c.op is Ops.RANGE else self.vtype(c.dtype)
    fields = [f"{self.types[d]}* data{j}" for j, d in enumerate(params)] + (SANITIZE_ARGS if self.sanitize else []) + \
      [f"{ctype(c)} {names[c]}" for c in captured]
    unpack = [f"  {f} = a_->{f.split()[-1].lstrip('*')};" for f in fields]
    return (f"struct {name}_a{k} {{ {'; '.join(fields)}; }};\n"
            f"static void {name}_t{k}(void *p_, long long lo_, long long hi_) {{\n"
            f"  const struct {name}_a{k} *a_ = (const struct {name}_a{k} *)p_;\n" + "\n".join(unpack + body) + "\n}\n")

  # ------------------------------------------------------------ expressions
  def reduce_expr(self, op: Ops, acc: UOp, val: UOp, names: dict[UOp, str]) -> str:
    dt = acc.dtype
    if dt.count > 1:
      if dt.scalar().is_bool: return f"({names[acc]} {'&' if op is Ops.MUL else '|'} {names[val]})"
      if (native := self._vec_alu(Ops.MUL if op is Ops.MUL else op, dt, [acc, val], names)) is not None: return native
    return self._lanewise(dt, lambda a: self._scalar_reduce(op, dt.scalar(), a[0], a[1], acc.dtype.scalar()), [acc, val], names)

  def _scalar_reduce(self, op: Ops, dt: DType, a: str, b: str, sdt: DType) -> str:
    if dt.is_bool: return f"({a} | {b})" if op in (Ops.ADD, Ops.MAX) else f"({a} & {b})"
    return self._binary(op, dt, a, b, self.wrap_signed)

  def _binary(self, op: Ops, compute_dt: DType, a: str, b: str, wrap: bool = False) -> str:
    if op is Ops.MAX:
      return f"((({a})!=({a}))||(({a})>({b})) ? ({a}) : ({b}))" if compute_dt.is_float else f"(({a})>({b}) ? ({a}) : ({b}))"
    if wrap and op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.SHL) and compute_dt.is_int and not compute_dt.is_unsigned:
      u = self.types[UNSIGNED[compute_dt.itemsize]]
      return f"(({self.types[compute_dt]})(({u})({a}) {self.infix[op]} " + (f"{b}))" if op is Ops.SHL else f"({u})({b})))")
    return f"({a} {self.infix[op]} {b})"

  def _lanewise(self, dt: DType, fn: Callable[[list[str]], str], src: list[UOp], names: dict[UOp, str]) -> str:
    """A vector computed lane by lane from the scalar expression fn(lane operands)."""
    def operand(s: UOp, i: int) -> str:
      if s.dtype.count == 1: return names[s]
      return f"(({names[s]})[{i}] != 0)" if s.dtype.scalar().is_bool else f"({names[s]})[{i}]"
    if dt.count == 1: return fn([names[s] for s in src])
    neg = "-" if dt.scalar().is_bool else ""   # C bools are 0/1, mask lanes -1/0
    return f"(({self.tname(dt)}){{{', '.join(neg + '(' + fn([operand(s, i) for s in src]) + ')' for i in range(dt.count))}}})"

  def alu_expr(self, u: UOp, names: dict[UOp, str]) -> str:
    op, dt, src = u.op, u.dtype, u.src
    if dt.count > 1 and (native := self._vec_alu(op, dt, list(src), names)) is not None: return native
    scalar_u = u.replace(dtype=dt.scalar(),
                         src=tuple(s.replace(dtype=s.dtype.scalar()) if s.dtype.count > 1 else s for s in src)) if dt.count > 1 else u
    return self._lanewise(dt, lambda a: self._scalar_alu(scalar_u, a), list(src), names)

  def _broadcast(self, x: str, dt: DType) -> str:
    """The scalar expression x in every lane of a dt vector (bools as -1/0 masks). Floats as x - 0: an identity for
    every x (x + 0 is not: it turns -0.0 into +0.0), so the compiler emits a plain broadcast (a load straight into
    all lanes) instead of an add and a shuffle (a matmul's inner loop: ~10% faster).
    Lanes narrower than int (_Float16, bfloat16's 16 bits, short, char) are listed one by one instead: C computes
    such a scalar in float or int (_Float16 in float where the CPU has no half arithmetic), and converting that
    wider scalar into the narrow vector's lanes is an error in GCC ("involves truncation")."""
    vt = self.tname(dt)
    if C_SIZES[self._vec_types[vt][0]] < 4: return f"(({vt}){{{', '.join([x] * dt.count)}}})"
    return f"({x} - ({vt}){{}})" if dt.scalar().is_float else f"(({vt}){{}} + {x})"

  def _vec_alu(self, op: Ops, dt: DType, src: list[UOp], names: dict[UOp, str]) -> str | None:
    """A native vector expression (GCC vector extensions), or None: compute lane by lane."""
    n = dt.count
    def ok(d: DType) -> bool: return d.scalar().is_bool or d.scalar().itemsize in (4, 8)
    el = src[0].dtype.scalar() if src else dt.scalar()
    # narrow integer lanes (a quantized weight's int8) widen exactly, and reinterpret as another integer of their size
    # (uint8 -> int8), as whole vectors: lane by lane, GCC does not vectorize them
    narrow_int = src and el.is_int and not el.is_bool and src[0].dtype.count == n > 1
    widens = dt.scalar() in (dtypes.float32, dtypes.float64) or dt.scalar().is_int and dt.scalar().itemsize >= el.itemsize
    if narrow_int and op is Ops.CAST and widens:
      if dt.scalar().is_float and el.itemsize < 4:   # through int32 lanes: GCC converts chars to floats one lane at a time
        wide = f"__builtin_convertvector({self._in_reg(names[src[0]], src[0].dtype)}, {self._vt('int', n)})"
        return f"__builtin_convertvector({wide}, {self.tname(dt)})"
      return f"__builtin_convertvector({names[src[0]]}, {self.tname(dt)})"
    if narrow_int and op is Ops.BITCAST and dt.scalar().is_int and not dt.scalar().is_bool and dt.scalar().itemsize == el.itemsize:
      return f"(({self.tname(dt)})({names[src[0]]}))"
    if not all(ok(s.dtype) for s in src) or not ok(dt): return None
    def v(s: UOp, like: DType) -> str:   # operand as a vector of like's lanes (scalars are broadcast)
      if s.dtype.count > 1: return names[s]
      if like.scalar().is_bool: return self._broadcast(f"-(int)({names[s]})", dtypes.bool.vec(n))   # true: all bits set
      return self._broadcast(f"({self.types[like.scalar()]})({names[s]})", like.scalar().vec(n))
    def imask(d: DType) -> str: return self._vt(self.types[dtypes.int32 if d.itemsize == 4 else dtypes.int64], n)
    def to_bool(expr: str, d: DType) -> str:   # a compare of d lanes gives d-sized masks; bools are 32-bit
      return expr if d.itemsize == 4 else f"__builtin_convertvector({expr}, {self.tname(dtypes.bool.vec(n))})"
    def blend(m: str, a: str, b: str, d: DType) -> str:
      mi = m if d.scalar().is_bool or d.itemsize == 4 else f"__builtin_convertvector({m}, {imask(d)})"
      if d.scalar().is_bool: return f"(({mi} & {a}) | (~{mi} & {b}))"
      return f"(({self.tname(d.vec(n))})((({imask(d)})({a}) & {mi}) | (({imask(d)})({b}) & ~{mi})))"
    if op in (Ops.AND, Ops.OR, Ops.XOR) and (dt.scalar().is_bool or dt.scalar().is_int):
      return f"({v(src[0], dt)} {NATIVE_VECTOR[op]} {v(src[1], dt)})"
    if dt.scalar().is_bool:
      if op is Ops.CMPNE and el.is_bool: return f"({v(src[0], el)} ^ {v(src[1], el)})"
      if op in (Ops.CMPLT, Ops.CMPNE) and not el.is_bool:
        return to_bool(f"({v(src[0], el)} {self.infix[op]} {v(src[1], el)})", el)
      if op is Ops.WHERE: return blend(v(src[0], dtypes.bool), v(src[1], dt), v(src[2], dt), dt)
      if op is Ops.CAST and not el.is_bool: return to_bool(f"({names[src[0]]} != 0)", el)
      if op in (Ops.ADD, Ops.MAX): return f"({v(src[0], dt)} | {v(src[1], dt)})"
      if op is Ops.MUL: return f"({v(src[0], dt)} & {v(src[1], dt)})"
      return None
    d = dt.scalar()
    if op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV) and all(s.dtype.scalar() == d for s in src):
      return f"({v(src[0], d)} {NATIVE_VECTOR[op]} {v(src[1], d)})"
    if op is Ops.NEG and src[0].dtype.count > 1: return f"(-{names[src[0]]})"
    if op is Ops.MAX and all(s.dtype.scalar() == d for s in src):
      a, b = v(src[0], d), v(src[1], d)
      isnan = " | (__a != __a)" if d.is_float else ""
      return f"({{{self.tname(d.vec(n))} __a = {a}, __b = {b}; {blend(to_bool(f'((__a > __b){isnan})', d), '__a', '__b', d)};}})"
    if op is Ops.WHERE: return blend(v(src[0], dtypes.bool), v(src[1], d), v(src[2], d), d)
    if op is Ops.CAST and src[0].dtype.count > 1:
      if el.is_bool: return f"__builtin_convertvector(-{names[src[0]]}, {self.tname(dt)})"
      return f"__builtin_convertvector({names[src[0]]}, {self.tname(dt)})"
    if op is Ops.BITCAST and src[0].dtype.count > 1 and el.itemsize == d.itemsize and not el.is_bool:
      return f"(({self.tname(dt)})({names[src[0]]}))"
    if op in (Ops.SHL, Ops.SHR) and d.is_int and src[1].op is Ops.CONST and 0 <= src[1].arg < d.bits:
      return f"({v(src[0], d)} {self.infix[op]} {names[src[1]]})"
    return None

  def _scalar_alu(self, u: UOp, a: list[str]) -> str:
    op, dt, src = u.op, u.dtype, u.src
    if op is Ops.CAST:
      if dt.is_bool: return f"({a[0]} != 0)"
      return f"(({self.types[dt]})({a[0]}))"
    if op is Ops.BITCAST: return self.bitcast_fmt.format(src=self.types[src[0].dtype], dst=self.types[dt], x=a[0])
    if op is Ops.WHERE: return f"({a[0]} ? {a[1]} : {a[2]})"
    return self._alu_str(op, a, src, src[0].dtype, self.wrap_signed and u not in self._index_math)

  def _alu_str(self, op: Ops, a: list[str], src: tuple[UOp, ...], sdt: DType, wrap: bool = False) -> str:
    if op in self.math_fns: return f"{self.math_fns[op][1 if sdt == dtypes.float64 else 0]}({a[0]})"
    if op is Ops.NEG:
      if sdt.is_bool: return f"(!{a[0]})"
      return self._binary(Ops.SUB, sdt, "0", a[0], wrap) if wrap and sdt.is_int and not sdt.is_unsigned else f"(-{a[0]})"
    if op is Ops.RECIPROCAL: return f"(1/{a[0]})"
    if op in (Ops.IDIV, Ops.MOD):
      d = src[1]
      plain = f"({a[0]} {'/' if op is Ops.IDIV else '%'} {a[1]})"
      if d.op is Ops.CONST and d.arg not in (0, -1): return plain
      neg1 = "" if sdt.is_unsigned else (f"{a[1]} == -1 ? -({a[0]}) : " if op is Ops.IDIV else f"{a[1]} == -1 ? 0 : ")
      return f"({a[1]} == 0 ? 0 : {neg1}{plain})"
    if op in (Ops.SHL, Ops.SHR) and not (src[1].op is Ops.CONST and 0 <= src[1].arg < sdt.bits):
      fill = f"({a[0]} < 0 ? -1 : 0)" if op is Ops.SHR and not sdt.is_unsigned else "0"
      return f"(({a[1]}) >= 0 && ({a[1]}) < {sdt.bits} ? ({a[0]} {self.infix[op]} {a[1]}) : {fill})"
    if op is Ops.WHERE: return f"({a[0]} ? {a[1]} : {a[2]})"
    return self._binary(op, sdt, a[0], a[1], wrap)

def _innermost_loops(uops: list[UOp]) -> dict[int, list[UOp] | None]:
  """For each innermost loop (no loop inside it), the accumulators it updates with + (None: not safe or not useful
  to declare a SIMD loop, e.g. a max/bool/vector accumulator, or a gated or long-strided gather: _gather_step)."""
  out: dict[int, list[UOp] | None] = {}
  open_at: list[int] = []
  has_inner: set[int] = set()
  accs: dict[int, list[UOp] | None] = {}
  long_gathers: set[int] = set()
  for i, u in enumerate(uops):
    if u.op is Ops.RANGE:
      if open_at: has_inner.add(open_at[-1])
      open_at.append(i); accs[i] = []
    elif u.op is Ops.ENDRANGE:
      j = open_at.pop()
      if j not in has_inner: out[j] = None if j in long_gathers and accs[j] == [] else accs[j]
    elif u.op is Ops.LOAD and open_at:
      step = _gather_step(u, uops[open_at[-1]])
      # GCC 12 unswitches an `omp simd` loop on a gated gather and then takes time growing with the gather's stride
      # (a stride of 256 floats: 1 s, 1024: 7 s, 4096: > 300 s, the timeout: a conv's weight gradient after a
      # max_pool2d); without the pragma its own vectorizer decides, and the kernel compiles in 1.5 s
      if len(u.src) > 2 and step not in (0, 1): accs[open_at[-1]] = None
      # an elementwise loop with a long-strided gather and no gate, too (that gradient's loops split where their masks
      # change: > 60 s with the pragma, 0.2 s without)
      elif abs(step or 0) >= LONG_GATHER: long_gathers.add(open_at[-1])
    elif u.op is Ops.ACC_UPDATE and open_at and (acc_list := accs[open_at[-1]]) is not None:
      # (not a half: the reduction clause's final combine would skip the rounding)
      if not (u.arg is Ops.ADD and u.dtype.count == 1 and not u.dtype.is_bool and u.dtype not in HALF): accs[open_at[-1]] = None
      # (an accumulator may take several updates per iteration: an unrolled sum's copies one by one)
      elif u.src[0] not in acc_list: acc_list.append(u.src[0])
  return out

def _index_math(uops: list[UOp]) -> set[UOp] | None:
  """The instructions that compute the kernel's indices and masks (SANITIZE's first pass), or None where one depends on
  loaded data or an accumulator (a gather: it cannot run without the accesses it checks)."""
  need: set[UOp] = set()
  for x in uops:
    if x.op in (Ops.LOAD, Ops.STORE):
      for s in (x.src[1:] if x.op is Ops.LOAD else x.src[1:2]): need.update(s.toposort())
  # a loop of symbolic length: its end (a Variable's value, loaded from element 0 of its one-element buffer) is computed
  ends = {y for r in uops if r.op is Ops.RANGE and r.src for y in r.src[0].toposort()}
  if any(y.op in (Ops.LOAD, Ops.DEFINE_ACC, Ops.ACC_UPDATE, Ops.STORE) and y not in ends for y in need): return None
  return {y for y in need | ends if y.op not in (Ops.RANGE, Ops.CONST, Ops.DEFINE_GLOBAL)}

LONG_GATHER = 64   # elements between a gather's loads from which an elementwise `omp simd` loop takes gcc long to compile

def _gather_step(load: UOp, r: UOp) -> int | None:
  """How far the index of a load in loop r steps with r (None: not by a constant); 0 when its gate depends on r (a
  padding mask of the loop's own axis: not a gather GCC stumbles on)."""
  if any(r in g.toposort() for g in load.src[2:]): return 0
  coef: dict[UOp, int | None] = {}   # the coefficient of r in each node of the index (None: not affine in r)
  for x in load.src[1].toposort():
    c = [coef[s] for s in x.src]
    if x.op is Ops.RANGE: coef[x] = 1 if x is r else 0
    elif x.op in (Ops.ADD, Ops.SUB) and None not in c: coef[x] = c[0] + c[1] if x.op is Ops.ADD else c[0] - c[1]
    elif x.op is Ops.MUL and None not in c and 0 in c:
      k = x.src[1] if c[0] else x.src[0]   # the factor that does not step with r
      coef[x] = 0 if c == [0, 0] else (c[0] or c[1]) * k.arg if k.op is Ops.CONST else None
    elif x.op is Ops.NEG and None not in c: coef[x] = -c[0]
    else: coef[x] = 0 if all(v == 0 for v in c) else None
  return coef[load.src[1]]

def _thread_loops(uops: list[UOp]) -> dict[int, int]:
  """Index of each outermost loop over a `thread` range -> index of its ENDRANGE. A program may hold several
  loop nests one after another, each with its own thread loop."""
  out: dict[int, int] = {}
  open_at: list[int] = []
  inside = -1   # the open thread loop's RANGE index (a thread range nested in it runs serially inside the chunk)
  for i, u in enumerate(uops):
    if u.op is Ops.RANGE:
      open_at.append(i)
      if u.arg[2] == "thread" and inside < 0: inside = i
    elif u.op is Ops.ENDRANGE:
      j = open_at.pop()
      if j == inside: out[j] = i; inside = -1
  return out

def _captured(uops: list[UOp], start: int, end: int, names: dict[UOp, str]) -> list[UOp]:
  """Values the loop uops[start..end] reads that are computed outside it (not constants or buffers)."""
  inside = set(uops[start:end + 1])
  out: dict[UOp, None] = {}
  for u in uops[start + 1:end]:
    for s in u.src:
      if s not in inside and s.op not in (Ops.CONST, Ops.DEFINE_GLOBAL) and s in names: out[s] = None
    # an accumulator updated across iterations of a parallel loop would race
    assert not (u.op is Ops.ACC_UPDATE and u.src[0] not in inside), "a thread loop updates an accumulator declared outside it"
  return list(out)

UNSIGNED = {1: dtypes.uint8, 2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}
C_SIZES = {"_Bool": 1, "signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2, "int": 4, "unsigned int": 4,
           "long long": 8, "unsigned long long": 8, "_Float16": 2, "float": 4, "double": 8}

# bfloat16 bits -> float, float -> float rounded to bfloat16 (nearest even; NaN -> a quiet NaN of its sign), and the
# bits of a float that is a bfloat16 value. __bfr rounds every value and picks the NaN case with a float compare: GCC
# vectorizes that (with the NaN test on the integer bits first, it left the whole loop scalar: a bfloat16 SwiGLU
# 1.5M elements ~26 ms)
BF16_HELPERS = """static inline float __bf2f(unsigned short b) { unsigned int u = ((unsigned int)b) << 16; float f; memcpy(&f, &u, 4); return f; }
static inline float __bfr(float f) { unsigned int u; memcpy(&u, &f, 4);
  unsigned int r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u, n = (u | 0x00400000u) & 0xffff0000u;
  float g, h; memcpy(&g, &r, 4); memcpy(&h, &n, 4); return f != f ? h : g; }
static inline unsigned short __bfbits(float f) { unsigned int u; memcpy(&u, &f, 4); return (unsigned short)(u >> 16); }
"""

# GCC widens a vector of chars or shorts it loaded from memory one lane at a time; held in a register first (an empty
# asm that "changes" it), two instructions (sign-extend, convert). For vectors of at most 16 bytes (one xmm / q register).
REG_HELPER = """#if defined(__x86_64__)
#define PG_IN_REG(v) __asm__("" : "+x"(v))
#elif defined(__aarch64__)
#define PG_IN_REG(v) __asm__("" : "+w"(v))
#else
#define PG_IN_REG(v)
#endif
"""

# float16 vectors <-> float vectors, c lanes at a time with the F16C instructions where the CPU has them (GCC
# converts a _Float16 vector one lane at a time, and a kernel's worth of those took minutes to compile); the
# portable conversion otherwise. __hround: float lanes rounded to float16 precision (to nearest even).
F16_VEC = """static inline float_v{n} __h2f_v{n}(_Float16_v{n} h) {{
#ifdef __F16C__
  float_v{n} r;
  for (int i = 0; i < {n}; i += {c}) {{ __m128i a; {m} f; memcpy(&a, (char *)&h + 2 * i, 2 * {c}); f = {p}_cvtph_ps(a); memcpy((char *)&r + 4 * i, &f, 4 * {c}); }}
  return r;
#else
  return __builtin_convertvector(h, float_v{n});
#endif
}}
static inline _Float16_v{n} __f2h_v{n}(float_v{n} x) {{
#ifdef __F16C__
  _Float16_v{n} r;
  for (int i = 0; i < {n}; i += {c}) {{ {m} f; __m128i a; memcpy(&f, (char *)&x + 4 * i, 4 * {c}); a = {p}_cvtps_ph(f, 0); memcpy((char *)&r + 2 * i, &a, 2 * {c}); }}
  return r;
#else
  return __builtin_convertvector(x, _Float16_v{n});
#endif
}}
static inline float_v{n} __hround_v{n}(float_v{n} x) {{ return __h2f_v{n}(__f2h_v{n}(x)); }}"""   # noqa: E501 (C source, printed as is)

# AVX-512 masked loads (with AVX512VL for 128- and 256-bit vectors): the element type's suffix, a vector's bytes' prefix
MASKED_LOAD = {dtypes.float32: "ps", dtypes.float64: "pd", dtypes.int32: "epi32", dtypes.uint32: "epi32", dtypes.int64: "epi64",
               dtypes.uint64: "epi64"}
SIMD_PREFIX = {16: "_mm", 32: "_mm256", 64: "_mm512"}
DOT4_VNNI = ("({{{t} a_ = ({t})({a}), b_ = ({t})({b}), k_ = {p}_set1_epi8((char)0x80); ({out}){p}_sub_epi32("
             "{p}_dpbusd_epi32({p}_setzero_si{bits}(), {p}_xor_si{bits}(a_, k_), b_), {p}_dpbusd_epi32({p}_setzero_si{bits}(), k_, b_));}})")

# SANITIZE: a kernel gets each buffer's element count and an error record (the runtime reads it after the launch:
# hit, parameter, store?, index, lanes, element count). pg_ok checks one access of `lanes` elements; the first bad one
# (across threads) is recorded, and the caller skips it. pg_params_ names the parameters' dtypes for the error message.
SANITIZE_ARGS = ["const long long* pg_n_", "long long* pg_err_"]
SANITIZE_DECL = """const char pg_params_[] = "{params}";
static inline int pg_ok(const long long *n, long long *e, int p, long long i, long long lanes, int store) {{
  if (__builtin_expect(i >= 0 && i <= n[p] - lanes, 1)) return 1;
  if (__atomic_exchange_n(&e[0], 1LL, __ATOMIC_RELAXED) == 0) {{ e[1] = p; e[2] = store; e[3] = i; e[4] = lanes; e[5] = n[p]; }}
  return 0;
}}
"""

# what a kernel that uses the pool needs: a pointer to the pool's entry point (runtime/threadpool.c), which the runtime
# sets after loading the kernel; null (the pool is not loaded yet, or could not be built): loops run on this thread
POOL_DECL = "void (*pg_parallel_for)(void (*fn)(void *, long long, long long), void *args, long long n, int nthreads) = 0;\n"

class CRenderer(CStyleRenderer):
  device = "CPU"
  supports_vector = True
  # libm calls stop loops from vectorizing; these become polynomials (float16 and bfloat16: float32's, rounded back)
  decompose_ops = frozenset((op, dt) for op in (Ops.EXP2, Ops.LOG2) for dt in (dtypes.float32, dtypes.float16, dtypes.bfloat16))
  supports_threads = True
  argv_entry = True
  can_sanitize, sanitize_args, sanitize_decl, sanitize_two_pass = True, SANITIZE_ARGS, SANITIZE_DECL, True
  preamble = "#include <math.h>\n#include <string.h>\n" + BF16_HELPERS + REG_HELPER
  thread_pragma = "#pragma omp parallel for"
  simd_pragma = "#pragma omp simd"
  shuffle = "__builtin_shufflevector({a}, {b}, {lanes})"   # (GCC 12+, clang)
  def __init__(self, vector_bytes: int = 64, masked_loads: bool = False, dot4: bool = False):
    self.vector_bytes = vector_bytes   # the machine's SIMD register (the CPU device asks its compiler)
    self.masked_loads = masked_loads   # AVX-512 with VL: masked vector loads
    # AVX-512 VNNI (with VL): int8 dot products in 128-, 256- and 512-bit vectors (within the machine's width)
    self.dot4_lanes = tuple(b for b in (16, 32, 64) if b <= vector_bytes) if dot4 else ()
    # read once, when the CPU device is created: the in-memory kernel cache is not keyed by it
    self.thread_pool = not int(OMP)
