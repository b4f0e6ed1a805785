"""PYTHON device: interprets the same linear program the C renderers print, one scalar at a time.

It is the reference (its ALU comes from petagrad.uop.alu, the definition of every op) and a debugging
aid: every load and store is bounds-checked (PYTHON_CHECK=1), so an indexing bug raises OutOfBoundsError (an IndexError)
naming the kernel, the buffer and the index, as the CPU device does with SANITIZE=1.

`PYTHON:GPU` interprets the kernels a GPU gets: the optimizer makes work-groups, grouped reductions and tensor-core
tiles as for CUDA, and the interpreter runs each work-group's threads in lockstep (an instruction for every thread,
then the next), so a grouped reduction combines the threads' values and Ops.WMMA a warp's fragments
(codegen/tensor_core.py's layouts). Its neighbouring accesses are joined into 16-byte vectors as CUDA's are
(codegen/vector_memory.py), and one not aligned to its size raises, where a GPU would fault. It tests the GPU code
generation, tensor cores and vector accesses included, on any machine.
"""
from __future__ import annotations
import ast, struct
from petagrad.device import Compiler, DeviceSpec, HostAllocator, OutOfBoundsError, Program
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.uop.alu import exec_alu, exec_cast, exec_bitcast
from petagrad.dtype import DType, DTYPES_BY_NAME, dtypes, bf16_bits_to_float, float_to_bf16_bits, truncate
from petagrad.renderer import Renderer
from petagrad.codegen.linearize import LinearProgram
from petagrad.helpers import PYTHON_CHECK
from petagrad.codegen.tensor_core import WARP, wmma

def _enc(x):
  if isinstance(x, float): return ("float", x.hex())
  if isinstance(x, Ops): return ("op", x.name)
  if isinstance(x, DType): return ("dtype", x.name)
  if isinstance(x, tuple): return tuple(_enc(a) for a in x)
  return x

def _dec(x):
  if isinstance(x, tuple) and len(x) == 2 and x[0] == "float": return float.fromhex(x[1])
  if isinstance(x, tuple) and len(x) == 2 and x[0] == "op": return Ops[x[1]]
  if isinstance(x, tuple) and len(x) == 2 and x[0] == "dtype": return DTYPES_BY_NAME[x[1]]
  if isinstance(x, tuple): return tuple(_dec(a) for a in x)
  return x

class PythonRenderer(Renderer):
  """One line per instruction: (op, dtype, source positions, arg), readable and parseable."""
  device = "PYTHON"
  def render(self, name: str, prog: LinearProgram, params) -> str:
    # a source is the node's latest emission (a launch group computes the same node again in each of its kernels)
    pos: dict[UOp, int] = {}
    lines = [f"# kernel {name} params {[d.name for d in params]}"]
    for i, u in enumerate(prog.uops):
      dt = u.dtype.name if u.dtype.count == 1 else (u.dtype.name, u.dtype.count)   # (a vector: a tensor core's result, a vector access)
      lines.append(repr((u.op.name, dt, tuple(pos[s] for s in u.src), _enc(u.arg))))
      pos[u] = i
    return "\n".join(lines) + "\n"

def _combine(op: Ops, dt, a, b):
  """An accumulator's update: a <op> b (bools: ADD is or, MUL and); ASSIGN: b."""
  if op is Ops.ASSIGN: return b
  if dt.is_bool: return (a or b) if op is Ops.ADD else (a and b) if op is Ops.MUL else max(a, b)
  return exec_alu(op, dt, (a, b))

class PythonProgram(Program):
  sanitized = True   # takes the buffers' element counts (ExecItem.run passes them): the bounds it checks against
  def __init__(self, name: str, lib: bytes, meta=None):
    super().__init__(name, lib, meta)
    self.instrs = [(Ops[o], DTYPES_BY_NAME[d] if isinstance(d, str) else DTYPES_BY_NAME[d[0]].vec(d[1]), s, _dec(a)) for o, d, s, a in
                   (ast.literal_eval(line) for line in lib.decode().splitlines() if not line.startswith("#"))]
    # where each loop ends, to skip empty loops
    self.loop_end: dict[int, int] = {}
    for i, (op, _, src, _) in enumerate(self.instrs):
      if op is Ops.ENDRANGE: self.loop_end[src[0]] = i

  def _oob(self, what: str, g: int, idx: int, size: int) -> OutOfBoundsError:
    p, dt = self.instrs[g][3], self.instrs[g][1]
    return OutOfBoundsError(f"kernel {self.name}: {what} buffer {p} (parameter {p}: {dt.name}, {size} elements) at index {idx}, out of bounds [0, "
                            f"{size})")

  @staticmethod
  def _masked_off(dt) -> float | int | tuple:
    """What a load whose condition is false gives: zero (a vector of zeros)."""
    return truncate(0, dt) if dt.count == 1 else (truncate(0, dt.scalar()),) * dt.count
  def _vector(self, what: str, idx: int, n: int) -> None:
    # a vector access (codegen/vector_memory.py, PYTHON:GPU as CUDA) must be aligned to its size: a GPU faults on one
    # that is not, so it is an error here too
    if idx % n: raise RuntimeError(f"kernel {self.name}: {what} {n} elements at index {idx}, not a multiple of {n} (a misaligned vector access)")
  def _load(self, buf: tuple, idx: int, dt, g: int, check: bool):
    (mem, size) = buf
    if dt.count > 1:
      self._vector("a load of", idx, dt.count)
      return tuple(self._load(buf, idx + i, dt.scalar(), g, check) for i in range(dt.count))
    if check and not 0 <= idx < size: raise self._oob("a load from", g, idx, size)
    v = struct.unpack_from('<' + dt.fmt, mem, idx * dt.itemsize)[0]
    return bf16_bits_to_float(v) if dt == dtypes.bfloat16 else v
  def _store(self, buf: tuple, idx: int, v, dt, g: int, check: bool) -> None:
    (mem, size) = buf
    if isinstance(v, tuple):
      self._vector("a store of", idx, len(v))
      for i, x in enumerate(v): self._store(buf, idx + i, x, dt, g, check)
      return
    if check and not 0 <= idx < size: raise self._oob("a store to", g, idx, size)
    struct.pack_into('<' + dt.fmt, mem, idx * dt.itemsize, float_to_bf16_bits(v) if dt == dtypes.bfloat16 else v)

  def __call__(self, *bufs, sizes: list[int] | None = None) -> None:
    ins, n = self.instrs, len(self.instrs)
    vals: list = [None] * n
    check = bool(PYTHON_CHECK)
    pc = 0
    while pc < n:
      op, dt, src, arg = ins[pc]
      if op is Ops.RANGE:
        vals[pc] = 0
        if (vals[src[0]] if src else arg[1]) <= 0: pc = self.loop_end[pc] + 1; continue   # (a symbolic end: its source)
      elif op is Ops.ENDRANGE:
        r = src[0]
        vals[r] += 1
        if vals[r] < (vals[ins[r][2][0]] if ins[r][2] else ins[r][3][1]): pc = r + 1; continue
      elif op is Ops.CONST: vals[pc] = arg
      elif op is Ops.DEFINE_GLOBAL: vals[pc] = (bufs[arg], sizes[arg] if sizes is not None else len(memoryview(bufs[arg]).cast('B')) // dt.itemsize)
      elif op is Ops.DEFINE_ACC: vals[pc] = vals[src[0]]
      elif op is Ops.ACC_UPDATE: vals[src[0]] = _combine(arg, dt, vals[src[0]], vals[src[1]])
      elif op is Ops.LOAD:
        vals[pc] = self._masked_off(dt) if len(src) == 3 and not vals[src[2]] else self._load(vals[src[0]], vals[src[1]], dt, src[0], check)
      elif op is Ops.STORE: self._store(vals[src[0]], vals[src[1]], vals[src[2]], ins[src[0]][1], src[0], check)
      elif op is Ops.CAST: vals[pc] = exec_cast(vals[src[0]], ins[src[0]][1], dt)
      elif op is Ops.BITCAST: vals[pc] = exec_bitcast(vals[src[0]], ins[src[0]][1], dt)
      else: vals[pc] = exec_alu(op, dt, tuple(vals[s] for s in src))
      pc += 1

class PythonGPURenderer(PythonRenderer):
  """The linear program of a GPU-style kernel (work-groups, grouped reductions, tensor cores and 16-byte vector
  accesses as CUDA's)."""
  max_local = 1024
  launch_groups = False
  tensor_cores = (dtypes.float16, dtypes.bfloat16)
  vector_memory = 16

def _launch_values(ins: list, kinds: tuple[str, ...], ident: int) -> dict[int, int]:
  """The values of the launch ranges of these kinds (by instruction) for one launch id, split as the C-style renderers
  split it (renderer/cstyle.py: _launch_indices): the range with the largest id varies fastest."""
  rs = sorted((arg[0], i, arg[1]) for i, (op, _, src, arg) in enumerate(ins) if op is Ops.RANGE and not src and arg[2] in kinds)
  out, stride = {}, 1
  for k, (_, i, size) in enumerate(reversed(rs)):
    out[i] = ident // stride if k == len(rs) - 1 else (ident // stride) % size
    stride *= size
  return out

class PythonGPUProgram(PythonProgram):
  """A GPU-style kernel: each work-group's `local` threads in lockstep, every value a list with one entry per thread."""
  def __init__(self, name: str, lib: bytes, meta=None):
    super().__init__(name, lib, meta)
    ins = self.instrs
    # the launch ranges (not loops), and each thread's values of the local ones
    self.launched = {i for i, (op, _, src, arg) in enumerate(ins) if op is Ops.RANGE and not src and arg[2] in ("global", "local", "group")}
    self.local_ids = [_launch_values(ins, ("local", "group"), t) for t in range((meta or (1, 1))[1])]
  def __call__(self, *bufs, sizes: list[int] | None = None) -> None:
    ins, n = self.instrs, len(self.instrs)
    groups, nthreads = self.meta or (1, 1)
    check = bool(PYTHON_CHECK)
    launched, local_ids = self.launched, self.local_ids
    T = range(nthreads)
    for gid in range(groups):
      vals: list = [None] * n
      for i, v in _launch_values(ins, ("global",), gid).items(): vals[i] = [v] * nthreads
      for i in local_ids[0]: vals[i] = [ids[i] for ids in local_ids]
      pc = 0
      while pc < n:
        op, dt, src, arg = ins[pc]
        if op is Ops.RANGE and pc in launched: pass
        elif op is Ops.ENDRANGE and src[0] in launched: pass
        elif op is Ops.RANGE:   # a loop: every thread runs it the same number of times
          vals[pc] = [0] * nthreads
          if (vals[src[0]][0] if src else arg[1]) <= 0: pc = self.loop_end[pc] + 1; continue
        elif op is Ops.ENDRANGE:
          r = src[0]
          vals[r] = [v + 1 for v in vals[r]]
          if vals[r][0] < (vals[ins[r][2][0]][0] if ins[r][2] else ins[r][3][1]): pc = r + 1; continue
        elif op is Ops.CONST: vals[pc] = [arg] * nthreads
        elif op is Ops.DEFINE_GLOBAL: vals[pc] = (bufs[arg], sizes[arg] if sizes is not None else len(memoryview(bufs[arg]).cast('B')) // dt.itemsize)
        elif op is Ops.DEFINE_ACC: vals[pc] = list(vals[src[0]])
        elif op is Ops.ACC_UPDATE: vals[src[0]] = [_combine(arg, dt, a, b) for a, b in zip(vals[src[0]], vals[src[1]])]
        elif op is Ops.LOAD:
          buf, off = vals[src[0]], self._masked_off(dt)
          vals[pc] = [off if len(src) == 3 and not vals[src[2]][t] else self._load(buf, vals[src[1]][t], dt, src[0], check) for t in T]
        elif op is Ops.STORE:
          for t in T: self._store(vals[src[0]], vals[src[1]][t], vals[src[2]][t], ins[src[0]][1], src[0], check)
        elif op is Ops.REDUCE:   # a grouped reduction: the threads that differ only in the group range g combine their values
          g, size = src[1], ins[src[1]][3][1]
          others = [i for i in local_ids[0] if i != g]
          keys = [tuple(ids[i] for i in others) for ids in local_ids]
          parts: dict = {}
          for t in T: parts.setdefault(keys[t], [None] * size)[local_ids[t][g]] = vals[src[0]][t]
          for p in parts.values():   # the renderers' tree of pairwise combines (renderer/cstyle.py: _group_reduce), in its order
            s = 1
            while s < size:
              for j in range(0, size - s, 2 * s): p[j] = _combine(arg, dt, p[j], p[j + s])
              s *= 2
          vals[pc] = [parts[keys[t]][0] for t in T]
        elif op is Ops.WMMA:
          if nthreads % WARP: raise RuntimeError(f"kernel {self.name}: tensor-core instructions need whole warps, got {nthreads} threads")
          vals[pc] = []
          for w in range(0, nthreads, WARP):
            lanes = range(w, w + WARP)
            c = [[vals[s][t] for s in src[12:]] for t in lanes] if len(src) > 12 else None
            vals[pc] += [tuple(d) for d in wmma([[vals[s][t] for s in src[:8]] for t in lanes], [[vals[s][t] for s in src[8:12]] for t in lanes], c)]
        elif op is Ops.GEP: vals[pc] = [v[arg] for v in vals[src[0]]]
        elif op is Ops.VECTORIZE: vals[pc] = [tuple(vals[s][t] for s in src) for t in T]
        elif op is Ops.CAST: vals[pc] = [exec_cast(v, ins[src[0]][1], dt) for v in vals[src[0]]]
        elif op is Ops.BITCAST: vals[pc] = [exec_bitcast(v, ins[src[0]][1], dt) for v in vals[src[0]]]
        else: vals[pc] = [exec_alu(op, dt, tuple(vals[s][t] for s in src)) for t in T]
        pc += 1

def make_device(name: str) -> DeviceSpec:
  if name == "PYTHON:GPU": return DeviceSpec(name, HostAllocator(), Compiler(), PythonGPUProgram, PythonGPURenderer())
  return DeviceSpec(name, HostAllocator(), Compiler(), PythonProgram, PythonRenderer())
