"""The op kinds of the one IR, and their groups."""
from __future__ import annotations
from enum import Enum, auto

class Ops(Enum):
  # tensor graph: sources
  BUFFER = auto()       # arg=(device, size, uid): a device buffer; shape (size,)
  DEVICE = auto()       # arg=device name; the device of a CONST/IOTA
  CONST = auto()        # arg=value; tensor graph: src=(DEVICE,), shape (); kernel: no src
  IOTA = auto()         # arg=n: 0..n-1 along one axis (the tensor-level view of a loop index)
  DEFINE_VAR = auto()   # arg=(name, min, max), dtype index: a symbolic integer (petagrad.Variable), no value
  BIND = auto()         # src=(DEFINE_VAR,) or (DEFINE_VAR, DEVICE), arg=value: the variable bound for one call. In movement
                        # args (a shrink's start) and, with a DEVICE, as a 0-d tensor value; a kernel reads the value at run time
  # tensor graph: structure
  CONTIGUOUS = auto()   # realize into a fresh contiguous buffer
  COPY = auto()         # src=(x, DEVICE): move to another device (a DEVICE of a tuple of names: to each of them)
  MULTI = auto()        # src=one per device, arg=axis: one tensor held on several devices (schedule/multi.py): split along axis
                        # (the pieces in device order, the last ones may be shorter), or a copy on each (axis None)
  MSELECT = auto()      # src=(multi,), arg=(i, axis, bounds): the part device i holds when the multi tensor is laid out split
                        # along axis at bounds ((start, end) per device), or all of it (axis None); a tensor on that device
  ALLREDUCE = auto()    # src=(x,), arg=(Ops.ADD|MAX|MUL, ranks): x combined over the MPI ranks (one device of each), on x's device
  ALLGATHER = auto()    # src=(x,), arg=(axis, (size on each rank along axis)): the ranks' x joined along axis, rank by rank
  DETACH = auto()       # stops gradients; identity otherwise
  CONTIGUOUS_BACKWARD = auto()   # identity; its gradient is realized into a contiguous buffer
  CUSTOM_GRAD = auto()  # src=(value, *inputs), arg=(name, *static): computes value; the inputs' gradients come from
                        # the backward registered under name (gradient.custom_backward), not from value's graph
  AFTER = auto()        # src=(value, dep): value, computed only after dep (a realized node): an ordering edge for the
                        # scheduler, no data (nn.checkpoint's recompute waits for the gradient it is needed for)
  ASSIGN = auto()       # src=(target, value): write value into target's buffer
  CHECK = auto()        # src=(value, ok), arg=(exception type, message): value, where ok (a bool scalar computed with
                        # it, e.g. "every index is in range") must be true; the realize raises the exception otherwise
  REDUCE_AXIS = auto()  # arg=(Ops.ADD|MAX|MUL, axes); keeps reduced axes as size 1
  # movement (views: index math, never copies)
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()
  # unary ALU
  NEG = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); SQRT = auto(); RECIPROCAL = auto(); TRUNC = auto()
  CAST = auto(); BITCAST = auto()
  # binary ALU
  ADD = auto(); SUB = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto()
  CMPLT = auto(); CMPNE = auto(); AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()
  # ternary ALU
  WHERE = auto()
  # kernel AST
  SINK = auto()            # src=stores
  DEFINE_GLOBAL = auto()   # arg=param index; dtype=element dtype of the buffer
  RANGE = auto()           # arg=(id, end, kind): a loop variable 0..end-1
  LOAD = auto()            # src=(DEFINE_GLOBAL, index) or (DEFINE_GLOBAL, index, valid): 0 where not valid
  STORE = auto()           # src=(DEFINE_GLOBAL, index, value)
  REDUCE = auto()          # src=(value, *ranges), arg=Ops.ADD|MAX|MUL
  # vectors (SIMD lanes), after the vectorize pass
  VECTORIZE = auto()       # src=scalars: a vector of them
  GEP = auto()             # src=(vector,), arg=lane: one lane of a vector; arg=(lanes...): a vector of lanes of the
                           # vector, or with src=(a, b) of the pair (b's lanes numbered after a's: a shuffle)
  DOT4 = auto()            # src=(a, b): int8 vectors of 4m lanes -> int32 vector of m lanes, lane g = the exact sum over
                           # j < 4 of a[4g+j] * b[4g+j]: an int8 dot product whose lanes a reduce adds up anyway, where the
                           # renderer has one instruction for it (vectorize: x86 VNNI's vpdpbusd)
  WMMA = auto()            # src=(a0..a7, b0..b3[, c0..c3]): half scalars (and float32 accumulators), arg=half dtype ->
                           # float32 vector of 4: a warp's 16 x 16 by 16 x 8 matrix product (+ C) (CUDA's mma.sync m16n8k16,
                           # fp32 accumulation), each of its 32 threads holding a fragment of A, B, C and the result (the
                           # layout: codegen/tensor_core.py; the C sources only in the linear program: linearize.py)
  # linear program only
  ENDRANGE = auto()        # src=(RANGE,)
  DEFINE_ACC = auto()      # src=(init CONST,), arg=id
  ACC_UPDATE = auto()      # src=(DEFINE_ACC, value): acc = acc <op> value, arg=op; arg=Ops.ASSIGN: acc = value

  def __repr__(self) -> str: return f"Ops.{self.name}"
  # members are singletons: identity hashing is exact, and far cheaper than Enum's hash of the name (every
  # UOp is hash-consed on a tuple that holds its op)
  __hash__ = object.__hash__

class GroupOp:
  Unary = frozenset({Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC})
  Binary = frozenset({Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE,
                      Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR})
  Ternary = frozenset({Ops.WHERE})
  ALU = Unary | Binary | Ternary
  Elementwise = ALU | {Ops.CAST, Ops.BITCAST}
  Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
  Comparison = frozenset({Ops.CMPLT, Ops.CMPNE})
  Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR})
  Reduce = frozenset({Ops.ADD, Ops.MAX, Ops.MUL})   # the ops a REDUCE/REDUCE_AXIS may carry
  Memory = frozenset({Ops.BUFFER, Ops.DEFINE_GLOBAL, Ops.LOAD, Ops.STORE})
  Transcendental = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT})
  IntOnly = frozenset({Ops.IDIV, Ops.MOD, Ops.SHL, Ops.SHR})
  FloatOnly = frozenset({Ops.FDIV, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIPROCAL, Ops.TRUNC})
  IntOrBool = frozenset({Ops.AND, Ops.OR, Ops.XOR})
