"""Renderers: a linear program -> source text for one device.

`Renderer` is what every device's renderer offers the optimizer and the engine: which optimizations the target allows
(vectors, CPU threads, work-groups), which ops it needs decomposed, and how a kernel is launched. The C-style renderers
(renderer/cstyle.py: C; renderer/opencl.py: OpenCL C; renderer/cuda.py: CUDA C and HIP) share one base and differ by
tables; the PYTHON device's renderer prints the linear program as data (runtime/ops_python.py).

>>> from petagrad.renderer.cstyle import CRenderer
>>> CRenderer().launch_dims(None)
(1, 1)
"""
from __future__ import annotations
from typing import Any
from petagrad.helpers import prod

class Renderer:
  """Base of all renderers: turns a linear program into source text for one device."""
  device: str = ""
  supports_vector: bool = False     # may the optimizer create vector (SIMD) ranges?
  vector_bytes: int = 64            # ...and how wide one vector register is (the optimizer's lanes per vector)
  supports_threads: bool = False    # may the optimizer spread the outer loop over CPU threads?
  decompose_ops: frozenset = frozenset()   # (op, dtype) pairs to rewrite into primitives (codegen/decompositions.py)
  # GPU-style launches: a kernel runs as a grid of work-groups; its output ("global") ranges come from the group id and
  # its "local" ranges from the thread's id inside the group, instead of being loops. 0: loops (CPU, PYTHON)
  max_local: int = 0
  launch_groups: bool = True        # may several kernels run one after another in one program (a launch group)?
  unsupported: dict = {}            # dtype -> why this device cannot store or compute it (a kernel using one raises)
  shuffle: str = ""                 # a vector of lanes {lanes} (comma-separated) of the vectors {a}, {b} joined; "": lanes are read one by one
  vector_memory: int = 0            # bytes of the widest vector load/store of neighbouring elements a thread's unrolled copies are
                                    # joined into (codegen/vector_memory.py: GPU dialects, whose vectors are memory operations only)
  tensor_cores: tuple = ()          # half dtypes whose matmul tiles it renders Ops.WMMA for (codegen/tensor_core.py: OptOps.TC)
  dot4_lanes: tuple[int, ...] = ()  # int8 vector sizes it renders Ops.DOT4 for (4 int8 products per int32 lane, one instruction)
  def render(self, name: str, prog: Any, params: list) -> str: raise NotImplementedError
  def check_dtypes(self, name: str, prog: Any, params: list) -> None:
    """RuntimeError naming the device when the kernel uses a dtype the device does not have."""
    if not self.unsupported: return
    used = set(params) | {u.dtype.scalar() for u in prog.uops}
    for dt, why in self.unsupported.items():
      if dt in used: raise RuntimeError(f"device {self.device}: kernel {name} uses {dt.name}, which this device does not have ({why})")
  @property
  def has_local(self) -> bool: return self.max_local > 0
  def launch_dims(self, prog: Any) -> tuple[int, int]:
    """(work-groups, threads per work-group) of the program's launch: the sizes of its global ranges and of its local
    ranges multiplied out. (1, 1) for a device without launch geometry (the loops run inside one call)."""
    if not self.has_local or prog is None: return 1, 1
    rs = prog.global_ranges
    return prod(r.arg[1] for r in rs if r.arg[2] == "global" and not r.src), prod(r.arg[1] for r in rs if r.arg[2] in ("local", "group"))
