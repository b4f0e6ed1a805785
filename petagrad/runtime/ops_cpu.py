"""CPU device: C source compiled by the system compiler into a shared object, called through ctypes."""
from __future__ import annotations
import ctypes, functools, os, shutil, subprocess, tempfile, uuid
from petagrad.device import Compiler, CompileError, DeviceSpec, HostAllocator, Program
from petagrad.helpers import CC, CFLAGS, content_hash, cache_dir
from petagrad.renderer.cstyle import CRenderer

# Idle OpenMP threads spin at every barrier by default, stealing the core the working thread needs when the
# machine is shared or a step runs many small kernels (measured 1.5-2.7x slower). Must be set before the first
# kernel library loads libgomp; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

class ClangCompiler(Compiler):
  """Compiles with `CC` (default gcc, else clang) to a shared object; the bytes of the .so are the artifact."""
  BASE_FLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno", "-fno-trapping-math",
                "-ffp-contract=fast", "-fopenmp", "-lm"]
  def __init__(self):
    self.cc = str(CC) or shutil.which("gcc") or shutil.which("clang") or "cc"
    self.flags = self.BASE_FLAGS + str(CFLAGS).split()
    self.cache_key = content_hash(self.cc, " ".join(self.flags), self._version())
  @functools.cache
  def _version(self) -> str:
    try: return subprocess.run([self.cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError): return "unknown"
  def compile(self, src: str, name: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
      out = os.path.join(d, "k.so")
      try:
        p = subprocess.run([self.cc, *self.flags, "-x", "c", "-", "-o", out], input=src, capture_output=True, text=True, timeout=300)
      except (OSError, subprocess.SubprocessError) as e:
        raise CompileError(f"compiler {self.cc!r} could not run for kernel {name}: {e}\n--- source ---\n{src}") from e
      if p.returncode != 0 or not os.path.exists(out):
        raise CompileError(f"compiling kernel {name} with {self.cc!r} failed (exit {p.returncode}):\n{p.stderr.strip()}\n--- source ---\n{src}")
      with open(out, "rb") as f: return f.read()

class CPUProgram(Program):
  def __init__(self, name: str, lib: bytes, meta=None):
    super().__init__(name, lib, meta)
    # dlopen needs a file: the compile cache keeps one per distinct library
    path = cache_dir() / "so" / f"{content_hash(lib)[:40]}.so"
    if not path.exists():
      path.parent.mkdir(parents=True, exist_ok=True)
      tmp = path.with_suffix(f".tmp{os.getpid()}_{uuid.uuid4().hex[:8]}")   # unique: kernels compile in parallel threads
      tmp.write_bytes(lib); tmp.replace(path)
    self.fxn = getattr(ctypes.CDLL(str(path)), name)
    self.fxn.restype = None
  def __call__(self, *bufs) -> None: self.fxn(*bufs)   # ctypes arrays pass as pointers

def make_device(name: str) -> DeviceSpec: return DeviceSpec(name, HostAllocator(), ClangCompiler(), CPUProgram, CRenderer())
