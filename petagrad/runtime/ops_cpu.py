"""CPU device: C source compiled by the system compiler into a shared object, called through ctypes."""
from __future__ import annotations
import atexit, ctypes, functools, os, pathlib, shutil, subprocess, tempfile, threading, uuid
from petagrad.device import Compiler, CompileError, DeviceSpec, HostAllocator, Program
from petagrad.helpers import CC, CFLAGS, POOL_SPIN_US, content_hash, cache_dir
from petagrad.renderer.cstyle import CRenderer

# Only for OMP=1 (kernels threaded by OpenMP): idle OpenMP threads spin at every barrier by default, stealing the
# core the working thread needs when the machine is shared or a step runs many small kernels (measured 1.5-2.7x
# slower). Must be set before the first kernel library loads libgomp; a user's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

POOL_SRC = pathlib.Path(__file__).with_name("threadpool.c")

class ThreadPool:
  """petagrad's CPU thread pool (runtime/threadpool.c), compiled once per machine and compiler and loaded with its
  symbols global, so that kernel libraries loaded after it resolve `pg_parallel_for`. Compiling starts in the
  background when the device is created (it overlaps the first kernels' compiles) and is waited for before the
  first kernel library loads."""
  def __init__(self):
    self._lib: ctypes.CDLL | None = None
    self._err: BaseException | None = None
    self._thread = threading.Thread(target=self._build, name="petagrad-pool-build", daemon=True)
    self._thread.start()
  def _build(self) -> None:
    try:
      cc = ClangCompiler()
      src = POOL_SRC.read_text()
      flags = ["-O2", "-fPIC", "-shared", "-pthread"]
      path = cache_dir() / "so" / f"threadpool_{content_hash(src, cc.cc, ' '.join(flags), cc._version())[:40]}.so"
      if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}_{uuid.uuid4().hex[:8]}")
        p = subprocess.run([cc.cc, *flags, "-x", "c", "-", "-o", str(tmp)], input=src, capture_output=True, text=True, timeout=300)
        if p.returncode != 0: raise CompileError(f"compiling the CPU thread pool with {cc.cc!r} failed:\n{p.stderr.strip()}")
        tmp.replace(path)
      lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
      lib.pg_pool_set_spin_ns(ctypes.c_long(int(POOL_SPIN_US) * 1000))
      lib.pg_pool_workers.restype = ctypes.c_int
      atexit.register(lib.pg_pool_shutdown)   # join the workers before the interpreter goes away
      self._lib = lib
    except BaseException as e: self._err = e
  def lib(self) -> ctypes.CDLL:
    if self._lib is None:
      self._thread.join()
      if self._err is not None: raise self._err
      if self._lib is None: self._build()   # a child forked while the build thread ran (it has no such thread)
      if self._err is not None: raise self._err
    assert self._lib is not None
    return self._lib

@functools.cache
def thread_pool() -> ThreadPool: return ThreadPool()

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
    if b"pg_parallel_for" in lib: thread_pool().lib()   # the pool's symbols must be there before the kernel loads
    self.fxn = getattr(ctypes.CDLL(str(path)), name)
    self.fxn.restype = None
  def __call__(self, *bufs) -> None: self.fxn(*bufs)   # ctypes arrays pass as pointers

def make_device(name: str) -> DeviceSpec:
  renderer = CRenderer()
  if renderer.thread_pool: thread_pool()   # start building the pool now, next to the first kernels' compiles
  return DeviceSpec(name, HostAllocator(), ClangCompiler(), CPUProgram, renderer)
