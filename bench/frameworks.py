"""One adapter per framework: load it, move numpy inputs in, force a result to be computed, read it back.

Every adapter's `force` returns only when the result is computed: petagrad and tinygrad are lazy (realize,
and for tinygrad also wait for its CPU worker queue), torch and numpy are eager. A framework that cannot be
loaded is kept with the reason, and the benchmark reports it as skipped.
"""
from __future__ import annotations
import importlib.metadata, time

class Framework:
  name = ""
  lazy = False
  def __init__(self):
    self.reason: str | None = None     # None: usable
    self.version = ""
    try: self.load()
    except Exception as e: self.reason = f"cannot load {self.name}: {type(e).__name__}: {e}".splitlines()[0][:300]
  def load(self) -> None: raise NotImplementedError
  def from_numpy(self, a): raise NotImplementedError
  def force(self, out): return out
  def to_numpy(self, out): raise NotImplementedError
  def counters(self) -> tuple[int, float]:
    """(kernels launched, seconds spent in kernels) so far, where the framework counts them; (0, 0.0) elsewhere."""
    return 0, 0.0
  def compiles(self) -> int: return 0

def _version(dist: str) -> str:
  try: return importlib.metadata.version(dist)
  except importlib.metadata.PackageNotFoundError: return "?"

class Petagrad(Framework):
  name, lazy = "petagrad", True
  def load(self):
    from petagrad import Tensor
    from petagrad.helpers import GlobalCounters
    self.Tensor, self.GC = Tensor, GlobalCounters
    self.version = _version("petagrad")
    # device check: a 1-element kernel compiles and runs (fails early if there is no C compiler)
    assert (Tensor([1.0]) + 1).tolist() == [2.0]
  def from_numpy(self, a): return self.Tensor(a).realize()
  def force(self, out):
    if isinstance(out, (list, tuple)): self.Tensor.realize_all(*out); return out
    return out.realize()
  def to_numpy(self, out): return out.numpy()
  def counters(self): return self.GC.kernel_count, getattr(self.GC, "time_sum_s", 0.0)
  def compiles(self): return getattr(self.GC, "compile_count", 0)

class Tinygrad(Framework):
  name, lazy = "tinygrad", True
  def load(self):
    from tinygrad import Tensor, Device
    from tinygrad.helpers import GlobalCounters
    self.Tensor, self.Device, self.GC = Tensor, Device, GlobalCounters
    self.version = _version("tinygrad")
    if Device.DEFAULT != "CPU": raise RuntimeError(f"tinygrad's default device is {Device.DEFAULT}, not CPU (set DEV=CPU)")
    # its CPU device compiles with clang; this fails early (FileNotFoundError: 'clang') when clang is missing
    assert (Tensor([1.0]) + 1).tolist() == [2.0]
    self.renderer = type(Device["CPU"].renderer).__name__
  def from_numpy(self, a): return self.force(self.Tensor(a.copy()).contiguous())
  def force(self, out):
    outs = out if isinstance(out, (list, tuple)) else [out]
    self.Tensor.realize(*outs)
    self.Device["CPU"].synchronize()   # the CPU device runs kernels on worker threads: wait for them
    return out
  def to_numpy(self, out): return out.numpy()
  def counters(self): return self.GC.kernel_count, 0.0   # tinygrad times kernels only with DEBUG>=2

class Torch(Framework):
  name = "torch"
  def __init__(self, threads: int):
    self.threads = threads
    super().__init__()
  def load(self):
    import torch
    torch.set_num_threads(self.threads)
    self.torch = torch
    self.version = torch.__version__
  def from_numpy(self, a): return self.torch.from_numpy(a.copy())
  def to_numpy(self, out): return out.numpy()

class Numpy(Framework):
  name = "numpy"
  def load(self):
    import numpy
    self.np = numpy
    self.version = numpy.__version__
  def from_numpy(self, a): return a.copy()
  def to_numpy(self, out): return out

FRAMEWORKS = ["petagrad", "torch", "numpy", "tinygrad"]

def load(names: list[str], threads: int) -> dict[str, Framework]:
  out: dict[str, Framework] = {}
  for n in names:
    st = time.perf_counter()
    fw = {"petagrad": Petagrad, "tinygrad": Tinygrad, "numpy": Numpy}[n]() if n != "torch" else Torch(threads)
    fw.load_s = time.perf_counter() - st
    out[n] = fw
  return out
