"""PYTHON device: interprets the same linear program the C renderers print, one scalar at a time.

It is the reference (its ALU comes from petagrad.uop.alu, the definition of every op) and a debugging
aid: every load and store is bounds-checked (PYTHON_CHECK=1), so an indexing bug raises OutOfBoundsError (an IndexError)
naming the kernel, the buffer and the index, as the CPU device does with SANITIZE=1.
"""
from __future__ import annotations
import ast, struct
from petagrad.device import Compiler, DeviceSpec, HostAllocator, OutOfBoundsError, Program
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.uop.alu import exec_alu, exec_cast, exec_bitcast
from petagrad.dtype import DTYPES_BY_NAME, dtypes, bf16_bits_to_float, float_to_bf16_bits, truncate
from petagrad.renderer import Renderer
from petagrad.codegen.linearize import LinearProgram
from petagrad.helpers import PYTHON_CHECK

def _enc(x):
  if isinstance(x, float): return ("float", x.hex())
  if isinstance(x, Ops): return ("op", x.name)
  if isinstance(x, tuple): return tuple(_enc(a) for a in x)
  return x

def _dec(x):
  if isinstance(x, tuple) and len(x) == 2 and x[0] == "float": return float.fromhex(x[1])
  if isinstance(x, tuple) and len(x) == 2 and x[0] == "op": return Ops[x[1]]
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
      lines.append(repr((u.op.name, u.dtype.name, tuple(pos[s] for s in u.src), _enc(u.arg))))
      pos[u] = i
    return "\n".join(lines) + "\n"

class PythonProgram(Program):
  sanitized = True   # takes the buffers' element counts (ExecItem.run passes them): the bounds it checks against
  def __init__(self, name: str, lib: bytes, meta=None):
    super().__init__(name, lib, meta)
    self.instrs = [(Ops[o], DTYPES_BY_NAME[d], s, _dec(a)) for o, d, s, a in
                   (ast.literal_eval(line) for line in lib.decode().splitlines() if not line.startswith("#"))]
    # where each loop ends, to skip empty loops
    self.loop_end: dict[int, int] = {}
    for i, (op, _, src, _) in enumerate(self.instrs):
      if op is Ops.ENDRANGE: self.loop_end[src[0]] = i

  def _oob(self, what: str, g: int, idx: int, size: int) -> OutOfBoundsError:
    p, dt = self.instrs[g][3], self.instrs[g][1]
    return OutOfBoundsError(f"kernel {self.name}: {what} buffer {p} (parameter {p}: {dt.name}, {size} elements) at index {idx}, out of bounds [0, "
                            f"{size})")

  def __call__(self, *bufs, sizes: list[int] | None = None) -> None:
    ins, n = self.instrs, len(self.instrs)
    vals: list = [None] * n
    check = bool(PYTHON_CHECK)
    def fmt(dt): return '<' + dt.fmt
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
      elif op is Ops.ACC_UPDATE:
        a = src[0]
        if dt.is_bool:
          vals[a] = (vals[a] or vals[src[1]]) if arg is Ops.ADD else (vals[a] and vals[src[1]]) if arg is Ops.MUL else max(vals[a], vals[src[1]])
        else: vals[a] = exec_alu(arg, dt, (vals[a], vals[src[1]]))
      elif op is Ops.LOAD:
        if len(src) == 3 and not vals[src[2]]: vals[pc] = truncate(0, dt)
        else:
          (buf, size), idx = vals[src[0]], vals[src[1]]
          if check and not 0 <= idx < size: raise self._oob("a load from", src[0], idx, size)
          v = struct.unpack_from(fmt(dt), buf, idx * dt.itemsize)[0]
          vals[pc] = bf16_bits_to_float(v) if dt == dtypes.bfloat16 else v
      elif op is Ops.STORE:
        (buf, size), idx, v = vals[src[0]], vals[src[1]], vals[src[2]]
        if check and not 0 <= idx < size: raise self._oob("a store to", src[0], idx, size)
        dst = ins[src[0]][1]
        struct.pack_into(fmt(dst), buf, idx * dst.itemsize, float_to_bf16_bits(v) if dst == dtypes.bfloat16 else v)
      elif op is Ops.CAST: vals[pc] = exec_cast(vals[src[0]], ins[src[0]][1], dt)
      elif op is Ops.BITCAST: vals[pc] = exec_bitcast(vals[src[0]], ins[src[0]][1], dt)
      else: vals[pc] = exec_alu(op, dt, tuple(vals[s] for s in src))
      pc += 1

def make_device(name: str) -> DeviceSpec: return DeviceSpec(name, HostAllocator(), Compiler(), PythonProgram, PythonRenderer())
