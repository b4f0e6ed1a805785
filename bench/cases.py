"""The benchmark cases. Each case builds its inputs once with numpy (the same values for every framework),
says what one call computes for each framework, how to check the result, and how much work one call is:
`flops` (for compute-bound cases, to print GFLOP/s) and `nbytes` (the least memory traffic one call needs:
every input read once, every output written once, to print GB/s)."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Any, Callable
import numpy as np

class Skip(Exception):
  """This framework cannot run this case (a missing op or feature); the message says why."""

@dataclass
class Case:
  name: str
  desc: str
  make_inputs: Callable[[np.random.Generator], list[np.ndarray]]
  tensor_fn: Callable | None          # one expression for petagrad, torch and tinygrad
  numpy_fn: Callable | None
  ref: Callable                       # float64 reference from the float64 inputs
  flops: int = 0
  nbytes: int = 0
  bound: str = "compute"              # compute | memory | latency
  per: str = "call"                   # the unit of the reported time: "call", or "kernel" (JIT case)
  tol: float = 1e-4                   # max |out - ref| / max |ref|
  fw_fn: dict[str, Callable] = field(default_factory=dict)   # per-framework expression overriding tensor_fn/numpy_fn
  setup: Callable | None = None       # setup(fw, tensors) -> (run, info): for cases that are not one expression
  cold_of: str | None = None          # cold case: the case whose first call, in a fresh process, it times

def randn(*shape):
  return lambda rng: rng.standard_normal(shape, dtype=np.float32)

def inputs(*makers):
  return lambda rng: [m(rng) for m in makers]

CASES: dict[str, Case] = {}
def add(c: Case) -> Case:
  CASES[c.name] = c
  return c

# ---------------------------------------------------------------- matmul
for n in (256, 512, 1024, 2048):
  add(Case(f"matmul_{n}", f"fp32 matmul {n}x{n} @ {n}x{n}", inputs(randn(n, n), randn(n, n)),
           tensor_fn=lambda a, b: a @ b, numpy_fn=lambda a, b: a @ b, ref=lambda a, b: a @ b,
           flops=2 * n ** 3, nbytes=3 * n * n * 4, bound="compute", tol=1e-4))

# ---------------------------------------------------------------- elementwise
EW_N = 16 << 20
def _ew_tensor(a, b, c): return ((a * b + c).relu() * 0.5).exp()
def _ew_numpy(a, b, c): return np.exp(np.maximum(a * b + c, 0) * 0.5)
add(Case("elementwise_16M", "((a*b+c).relu()*0.5).exp() on 16M fp32 (3 inputs, 1 output)",
         inputs(randn(EW_N), randn(EW_N), randn(EW_N)), tensor_fn=_ew_tensor, numpy_fn=_ew_numpy, ref=_ew_numpy,
         nbytes=4 * EW_N * 4, bound="memory", tol=1e-4))

# ---------------------------------------------------------------- reductions
R = 4096
for ax in (0, 1):
  add(Case(f"sum_axis{ax}_4096", f"sum over axis {ax} of a 4096x4096 fp32", inputs(randn(R, R)),
           tensor_fn=lambda x, ax=ax: x.sum(ax), numpy_fn=lambda x, ax=ax: x.sum(ax), ref=lambda x, ax=ax: x.sum(ax),
           nbytes=(R * R + R) * 4, bound="memory", tol=1e-5))

def _softmax_numpy(x):
  e = np.exp(x - x.max(-1, keepdims=True))
  return e / e.sum(-1, keepdims=True)
add(Case("softmax_4096", "softmax over the last axis of a 4096x4096 fp32", inputs(randn(R, R)),
         tensor_fn=lambda x: x.softmax(-1), numpy_fn=_softmax_numpy, ref=_softmax_numpy,
         nbytes=2 * R * R * 4, bound="memory", tol=1e-5))

# ---------------------------------------------------------------- conv2d
CB, CC, CO, CH, CW, CK = 32, 64, 64, 56, 56, 3
def _conv_tensor(x, w):
  if not hasattr(x, "conv2d"): raise Skip(f"{type(x).__module__.split('.')[0]} has no Tensor.conv2d yet")
  return x.conv2d(w, padding=1)
def _conv_torch(x, w):
  import torch.nn.functional as F
  return F.conv2d(x, w, padding=1)
def _conv_numpy(x, w):
  """im2col through a strided window view, then one BLAS matmul (tensordot)."""
  xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
  win = np.lib.stride_tricks.sliding_window_view(xp, (CK, CK), axis=(2, 3))     # N, C, H, W, 3, 3
  out = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3]))                        # N, H, W, O
  return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
add(Case("conv2d_32x64x56", "conv2d forward: batch 32, 64->64 channels, 56x56, 3x3, padding 1 (fp32)",
         inputs(randn(CB, CC, CH, CW), lambda rng: (rng.standard_normal((CO, CC, CK, CK), dtype=np.float32) / 24)),
         tensor_fn=_conv_tensor, numpy_fn=_conv_numpy, ref=_conv_numpy, fw_fn={"torch": _conv_torch},
         flops=2 * CB * CO * CH * CW * CC * CK * CK, nbytes=(CB * CC * CH * CW + CO * CC * CK * CK + CB * CO * CH * CW) * 4,
         bound="compute", tol=1e-4))

# ---------------------------------------------------------------- latency
add(Case("eager_add_16", "one realized 16-element add, inputs already realized (latency: graph + schedule + launch)",
         inputs(randn(16), randn(16)), tensor_fn=lambda a, b: a + b, numpy_fn=lambda a, b: a + b, ref=lambda a, b: a + b,
         nbytes=3 * 16 * 4, bound="latency", tol=1e-6))

JIT_STEPS = 16
def _chain(x):
  for _ in range(JIT_STEPS): x = (x + 1.0).contiguous()   # .contiguous(): a kernel boundary in the lazy frameworks
  return x
def _chain_numpy(x):
  for _ in range(JIT_STEPS): x = x + 1.0
  return x

def _jit_setup(fw, tensors) -> tuple[Callable[[], Any], dict]:
  """Lazy frameworks: a TinyJit'd function of JIT_STEPS small kernels, timed on replay, reported per kernel.
  torch and numpy have no such JIT: they run the same ops eagerly, reported per op."""
  (x,) = tensors
  if fw.name == "numpy": return (lambda: _chain_numpy(x)), {"per": JIT_STEPS, "mode": "eager, per op (no JIT)"}
  if fw.name == "torch": return (lambda: _chain(x)), {"per": JIT_STEPS, "mode": "eager, per op (no JIT)"}
  if fw.name == "petagrad":
    try: from petagrad.engine.jit import TinyJit
    except ImportError as e: raise Skip(f"petagrad has no TinyJit yet ({e})") from None
  else:
    from tinygrad import TinyJit
  k0, _ = fw.counters()
  fw.force(_chain(x))
  kernels = fw.counters()[0] - k0
  if kernels <= 0: raise Skip(f"{fw.name} ran no kernel for the chain: cannot count kernels")
  jf = TinyJit(lambda x: _chain(x).realize())
  for _ in range(3): fw.force(jf(x))   # tinygrad's semantics: call 1 runs, call 2 captures, call 3+ replay
  k0, _ = fw.counters()
  fw.force(jf(x))
  return (lambda: fw.force(jf(x))), {"per": kernels, "mode": "TinyJit replay, per kernel",
                                      "replay_kernels_counted": fw.counters()[0] - k0}

add(Case("jit_replay_16k", f"TinyJit replay of a function of {JIT_STEPS} tiny (16-element) kernels: time per kernel "
                           "(torch, numpy: the same ops eagerly, per op)",
         inputs(randn(16)), tensor_fn=None, numpy_fn=None, ref=lambda x: x + JIT_STEPS, setup=_jit_setup,
         bound="latency", per="kernel", tol=1e-6))

# ---------------------------------------------------------------- cold first calls (each in a fresh process)
add(Case("cold_elementwise_16M", "first call in a fresh process, empty compile cache: elementwise_16M incl. compile",
         make_inputs=CASES["elementwise_16M"].make_inputs, tensor_fn=None, numpy_fn=None, ref=CASES["elementwise_16M"].ref,
         bound="latency", cold_of="elementwise_16M"))
add(Case("cold_matmul_512", "first call in a fresh process, empty compile cache: matmul_512 incl. compile",
         make_inputs=CASES["matmul_512"].make_inputs, tensor_fn=None, numpy_fn=None, ref=CASES["matmul_512"].ref,
         bound="latency", cold_of="matmul_512"))

def runner(case: Case, fw, tensors) -> tuple[Callable[[], Any], dict]:
  """A zero-argument callable that computes one call of `case` on `fw` to completion, and facts about it."""
  if case.setup is not None: return case.setup(fw, tensors)
  fn = case.fw_fn.get(fw.name) or (case.numpy_fn if fw.name == "numpy" else case.tensor_fn)
  if fn is None: raise Skip(f"no {fw.name} expression for {case.name}")
  return (lambda: fw.force(fn(*tensors))), {}

def check(case: Case, out: np.ndarray, ref: np.ndarray) -> tuple[bool, float]:
  out = np.asarray(out, dtype=np.float64)
  if out.shape != ref.shape: return False, float("inf")
  err = float(np.max(np.abs(out - ref)) / max(float(np.max(np.abs(ref))), 1e-30)) if ref.size else 0.0
  return bool(err <= case.tol), err
