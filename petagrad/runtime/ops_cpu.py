"""CPU device: C source compiled by the system compiler into a shared object, called through ctypes."""
from __future__ import annotations
import atexit, collections, ctypes, functools, math, os, pathlib, re, shutil, subprocess, tempfile, threading, uuid, warnings
from typing import Any, Callable
from petagrad.device import Allocator, Compiler, CompileError, DeviceSpec, HostAllocator, Program, launch_waits, out_of_bounds
from petagrad.helpers import (CC, CFLAGS, COMPILE_TIMEOUT, CPU_ASYNC, DEBUG, OMP, POOL_PIN, POOL_SPIN_US, atomic_write, content_hash,
                              cache_dir, cpu_threads, mark_used, usable_cores)
from petagrad.renderer.cstyle import CRenderer
from petagrad.dtype import DTYPES_BY_NAME

# Only for OMP=1 (kernels threaded by OpenMP): idle OpenMP threads spin at every barrier by default, stealing the
# core the working thread needs when the machine is shared or a step runs many small kernels (measured 1.5-2.7x
# slower). Must be set before the first kernel library loads libgomp; a user's own setting wins. Without OMP=1
# nothing here uses OpenMP, and other libraries in the process (torch) keep their own default.
if int(OMP): os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

POOL_SRC = pathlib.Path(__file__).with_name("threadpool.c")

class ThreadPool:
  """petagrad's CPU thread pool (runtime/threadpool.c), compiled once per machine and compiler (cached next to the
  kernels) and built in the background when the device is created, so a cold start never waits for it: a kernel
  that runs before it is ready runs its thread loops on the calling thread (see CPUProgram)."""
  def __init__(self, compiler: ClangCompiler):
    self.compiler = compiler
    self.lib: ctypes.CDLL | None = None
    self.entry = 0   # address of pg_parallel_for once loaded
    self.prewake: Callable[[], None] | None = None
    self.error: BaseException | None = None
    self._thread = threading.Thread(target=self._build, name="petagrad-pool-build", daemon=True)
    self._thread.start()
  def _build(self) -> None:
    try:
      cc, src, flags = self.compiler.cc, POOL_SRC.read_text(), ["-O2", "-fPIC", "-shared", "-pthread"]
      path = cache_dir() / "so" / f"threadpool_{content_hash(src, ' '.join(flags), self.compiler.cache_key)[:40]}.so"
      if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}_{uuid.uuid4().hex[:8]}")
        p = subprocess.run([cc, *flags, "-x", "c", "-", "-o", str(tmp)], input=src, capture_output=True, text=True, timeout=300)
        if p.returncode != 0: raise CompileError(f"compiling the CPU thread pool with {cc!r} failed:\n{p.stderr.strip()}")
        tmp.replace(path)
      lib = ctypes.CDLL(str(path))
      lib.pg_pool_set_spin_ns(ctypes.c_long(int(POOL_SPIN_US) * 1000))
      # a pool over every core the process may use (THREADS unset, or as many: a benchmark that names its peers' thread
      # count), not a share of them (several processes side by side; threadpool.c: pin_worker)
      lib.pg_pool_set_pin(ctypes.c_int(int(POOL_PIN) and cpu_threads() >= usable_cores()))
      lib.pg_pool_workers.restype = ctypes.c_int
      atexit.register(lib.pg_pool_shutdown)   # join the workers before the interpreter goes away
      self.entry = ctypes.cast(lib.pg_parallel_for, ctypes.c_void_p).value or 0
      lib.pg_pool_prewake.restype = None
      lib.pg_run_list.restype, lib.pg_run_list.argtypes = None, [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
      self.prewake = lib.pg_pool_prewake
      self.lib = lib
    except BaseException as e:
      self.error = e
      warnings.warn(f"petagrad: no CPU thread pool, kernels run on one thread: {e}", RuntimeWarning)
  def wait(self) -> ctypes.CDLL:
    """The loaded pool (blocks until it is built)."""
    if self.lib is None and self.error is None:
      self._thread.join()
      if self.lib is None and self.error is None: self._build()   # a child forked while the build thread ran
    if self.error is not None: raise self.error
    assert self.lib is not None
    return self.lib

_POOL: ThreadPool | None = None
def thread_pool(compiler: ClangCompiler | None = None) -> ThreadPool:
  global _POOL
  if _POOL is None: _POOL = ThreadPool(compiler or ClangCompiler())
  return _POOL

@functools.cache
def _ask_compiler(cc: str, *args: str) -> str:
  """What the compiler prints for args ("" when it does not run); asked once per process (every CPU:n device's
  compiler asks the same)."""
  try: return subprocess.run([cc, *args], capture_output=True, text=True, timeout=30).stdout
  except (OSError, subprocess.SubprocessError): return ""

class ClangCompiler(Compiler):
  """Compiles with `CC` (default gcc, else clang) to a shared object; the bytes of the .so are the artifact."""
  BASE_FLAGS = ["-O3", "-march=native", "-mprefer-vector-width=512", "-fPIC", "-shared", "-fwrapv", "-fno-math-errno", "-fno-trapping-math",
                "-ffp-contract=fast", "-lm"]
  def __init__(self):
    self.cc = str(CC) or shutil.which("gcc") or shutil.which("clang") or "cc"
    # OpenMP only for OMP=1's parallel loops; otherwise just its simd pragmas (no libgomp; ~15% faster compiles)
    self.flags = self.BASE_FLAGS + ["-fopenmp" if int(OMP) else "-fopenmp-simd"] + str(CFLAGS).split()
    # the macros -march=native defines name this machine's instruction set: a library built for another CPU (a cache
    # folder shared between machines) may not run here, so they key the caches too (asked with the flags that pick the
    # target: CFLAGS may name another -march)
    self.target = _ask_compiler(self.cc, *[f for f in self.flags if f.startswith("-m")], "-dM", "-E", "-x", "c", os.devnull)
    self.cache_key = content_hash(self.cc, " ".join(self.flags), _ask_compiler(self.cc, "--version") or "unknown", self.target)
    self.macros = frozenset(re.findall(r"#define (\w+)", self.target))
  @property
  def vector_bytes(self) -> int:
    """Bytes of one SIMD register of this machine: 64 with AVX-512, 32 with AVX/AVX2, else 16 (SSE2, NEON).
    >>> ClangCompiler().vector_bytes in (16, 32, 64)
    True
    """
    return 64 if self.has("__AVX512F__") else 32 if self.has("__AVX__") else 16
  def has(self, macro: str) -> bool:
    """Does the compiler target define macro (an instruction set: `__AVX512VL__`)?"""
    return macro in self.macros
  # Bounded compile time. GCC has loop nests it optimizes for minutes (the one known is avoided by the renderer: see
  # _gather_step in renderer/cstyle.py). So a kernel first compiles with the full flags under a limit of
  # COMPILE_TIMEOUT seconds of the compiler's CPU time (CPU time, not wall time: compiles side by side on a loaded
  # machine do not trip it; a wall-clock limit a few times longer backs it up), and one that runs out is compiled
  # again with FAST_FLAGS: -O1 without the simd pragmas runs none of the passes that blew up (vectorizer, loop
  # unswitching, PRE), so it compiles in about the time of parsing, while keeping every flag that changes results
  # (-fwrapv, -ffp-contract=fast, ...); such a kernel runs slower, which is the price of a bounded compile. The
  # library is cached under the kernel's source like any other (memory and disk compile cache), so the slow attempt
  # is paid once per kernel and machine, not on every run.
  FAST_FLAGS = {"-O3": "-O1", "-fopenmp-simd": None, "-fopenmp": None}
  def fast_flags(self) -> list[str]:
    return [f for f in (self.FAST_FLAGS.get(f, f) for f in self.flags) if f is not None]
  def compile(self, src: str, name: str) -> bytes:
    limit = float(COMPILE_TIMEOUT)
    try: return self._run(self.flags, src, name, limit if limit > 0 else None)
    except _CompileTooSlow as e:
      if DEBUG >= 1: print(f"*** compiling {name} took over {limit:g} s of CPU time ({e}): built again with {' '.join(self.fast_flags())}")
      return self._run(self.fast_flags(), src, name, None)
  def _run(self, flags: list[str], src: str, name: str, cpu_limit: float | None) -> bytes:
    # (run through the shell below, a missing compiler would look like a failed compile)
    if shutil.which(self.cc) is None: raise CompileError(f"compiler {self.cc!r} could not run for kernel {name}: not found")
    with tempfile.TemporaryDirectory() as d:
      out = os.path.join(d, "k.so")
      cmd = [self.cc, *flags, "-x", "c", "-", "-o", out]
      # the CPU-time limit applies to the compiler and each program it runs (cc1, as, ld); set by the shell, as
      # preexec_fn is not safe with the compile threads of realize.compile_kernels
      if cpu_limit is not None: cmd = ["/bin/sh", "-c", 'ulimit -t "$0" && exec "$@"', str(max(1, math.ceil(cpu_limit))), *cmd]
      try:
        p = subprocess.run(cmd, input=src, capture_output=True, text=True, timeout=300 if cpu_limit is None else max(60.0, 4 * cpu_limit))
      except subprocess.TimeoutExpired as e:
        if cpu_limit is not None: raise _CompileTooSlow("wall-clock limit") from e
        raise CompileError(f"compiler {self.cc!r} ran over 300 s for kernel {name}\n--- source ---\n{src}") from e
      except (OSError, subprocess.SubprocessError) as e:
        raise CompileError(f"compiler {self.cc!r} could not run for kernel {name}: {e}\n--- source ---\n{src}") from e
      if p.returncode != 0 and cpu_limit is not None and any(m in p.stderr for m in _KILLED): raise _CompileTooSlow("CPU-time limit")
      if p.returncode != 0 or not os.path.exists(out):
        raise CompileError(f"compiling kernel {name} with {self.cc!r} failed (exit {p.returncode}):\n{p.stderr.strip()}\n--- source ---\n{src}")
      with open(out, "rb") as f: return f.read()

class _CompileTooSlow(Exception): pass
# how gcc and clang report a compiler process killed by the CPU-time limit (SIGXCPU, then SIGKILL)
_KILLED = ("signal terminated program", "unable to execute command", "CPU time limit", "Killed")

class LaunchQueue:
  """The launches of one CPU device, run in order on a thread of its own while the process has several CPU devices
  (CPU_ASYNC=1): the devices' kernels run side by side, each on its own pool of worker threads, with an equal share of
  the cores among the devices running a kernel at that moment (one working alone has them all). The queue is C
  (runtime/threadpool.c: pg_queue_*), so its thread never waits for Python's lock. A launch returns once queued, like
  a GPU's; the host waits for the queue before it reads or writes the device's memory
  (QueuedHostAllocator) and at the end of every realize and JIT replay (launch_waits).

  A copy to another CPU device runs on the source's queue (after the launches that wrote its source, before those
  that write it again), and of the destination's launches only those that use the copied memory wait for it: two
  devices wait for each other where one needs what the other made, not at every copy. Memory is tracked by address:
  per queue, the last launch that used each buffer, and the buffers a copy from another queue is writing.

  Memory is reused safely: the engine allocates and frees on the launching thread, a freed buffer's memory goes back
  to its own device's pool, and only that device's queue (in order), a copy that first waits for the launches here
  that used the memory last, or a host copy (which waits) writes it again; the queue holds the buffers of each launch
  until it ran."""
  def __init__(self, device: str, index: int):
    self.device, self.index, self.pid = device, index, -1   # index: of its queue and (plus one) its pool in threadpool.c
    self.held: collections.deque = collections.deque()   # (job number, what to keep alive until the queue ran it)
    self.checks: list[tuple[int, Any, str, list[str]]] = []   # (job, error record, kernel, dtypes): read at the next wait
    self.last_use: dict[int, int] = {}                   # address -> the last job here that used the memory there
    self.incoming: dict[int, tuple[LaunchQueue, int]] = {}   # address -> (queue, job): a copy from there writes it
  def _lib(self) -> ctypes.CDLL:
    if self.pid != os.getpid():   # first use, or a forked child (the parent's queue thread is not there)
      self.lib = _queue_api(thread_pool().wait())
      self.pid = os.getpid()
      self.held.clear(); self.checks.clear(); self.last_use.clear(); self.incoming.clear()
    return self.lib
  def _hold(self, n: int, keep: Any) -> None:
    if n < 0: raise RuntimeError(f"device {self.device}: could not queue a launch (its thread did not start, or no memory)")
    self.held.append((n, keep))
    done = self.lib.pg_queue_done(self.index)
    while self.held and self.held[0][0] <= done: self.held.popleft()
  def _after(self, other: LaunchQueue, job: int) -> None:
    """Later jobs here wait until `other` has run its job number `job`."""
    if other is not self and other.lib.pg_queue_done(other.index) < job: self._hold(self.lib.pg_queue_after(self.index, other.index, job), None)
  def _ready(self, addrs: list[int]) -> None:
    """Before a job here that uses the memory at addrs: wait for the copies from other queues that write it."""
    for a in addrs:
      if (w := self.incoming.pop(a, None)) is not None: self._after(*w)
  def kernel(self, entry: int, args: tuple, err: tuple[Any, str, list[str]] | None = None) -> None:
    """Queue a kernel: entry, the address of its argv entry point; args, its buffers (ctypes objects); err, a
    bounds-checked kernel's error record (with its name and parameter dtypes), read at the next wait."""
    addrs = list(map(ctypes.addressof, args))
    with _LOCK:
      lib = self._lib()
      _share_cores()
      if self.incoming: self._ready(addrs)
      n = lib.pg_queue_kernel(self.index, entry, (ctypes.c_void_p * len(addrs))(*addrs), len(addrs))
      self._hold(n, args)
      for a in addrs: self.last_use[a] = n
      if err is not None: self.checks.append((n, *err))
  def copy(self, dst: Any, src: Any, nbytes: int, target: LaunchQueue) -> None:
    """Queue a copy of nbytes from src (this device's memory) to dst (memory of the device with queue `target`)."""
    d, s = ctypes.addressof(dst), ctypes.addressof(src)
    with _LOCK:
      lib = self._lib()
      target._lib()
      self._ready([s] if target is self else [s, d])
      if target is not self:
        # the destination's launches that used its memory last, and a copy still writing it, come first
        if (t := target.last_use.get(d)) is not None: self._after(target, t)
        if (w := target.incoming.get(d)) is not None: self._after(*w)
      n = lib.pg_queue_copy(self.index, d, s, nbytes)
      self._hold(n, (dst, src))
      self.last_use[s] = n
      if target is self: self.last_use[d] = n
      else: target.incoming[d] = (self, n)
  @property
  def busy(self) -> bool:
    # (pid -1: never used, the common case of a launch on the only CPU device: no system call)
    return self.pid != -1 and self.pid == os.getpid() and \
      (self.lib.pg_queue_done(self.index) != self.lib.pg_queue_queued(self.index) or bool(self.incoming))
  def wait(self) -> None:
    """Return when every launch queued so far has run, and every copy into this device's memory; raise
    OutOfBoundsError for the first bounds-checked kernel among them that made a bad access."""
    if self.pid == -1 or self.pid != os.getpid(): return
    with _LOCK:
      incoming, self.incoming = list(self.incoming.values()), {}
      upto = self.lib.pg_queue_queued(self.index)
    for q, job in incoming: q.lib.pg_queue_wait(q.index, job)
    self.lib.pg_queue_wait(self.index, upto)   # (ctypes lets Python's lock go meanwhile)
    with _LOCK:
      done = self.lib.pg_queue_done(self.index)
      while self.held and self.held[0][0] <= done: self.held.popleft()
      self.last_use = {a: n for a, n in self.last_use.items() if n > done}
      bad = [c for c in self.checks if c[0] <= done and c[1][0]]
      self.checks = [c for c in self.checks if c[0] > done]
    if bad: raise out_of_bounds(bad[0][2], list(bad[0][1]), bad[0][3])

# held while a queue's bookkeeping changes (several Python threads may launch at once)
_LOCK = threading.Lock()

def _queue_api(lib: ctypes.CDLL) -> ctypes.CDLL:
  """lib with the argument and result types of the launch-queue functions set."""
  ll, i, p = ctypes.c_longlong, ctypes.c_int, ctypes.c_void_p
  for name, args in (("pg_queue_kernel", [i, p, p, i]), ("pg_queue_copy", [i, p, p, ctypes.c_size_t]), ("pg_queue_after", [i, i, ll]),
                     ("pg_queue_queued", [i]), ("pg_queue_done", [i])):
    f = getattr(lib, name)
    f.argtypes, f.restype = args, ll
  lib.pg_queue_wait.argtypes, lib.pg_queue_wait.restype = [i, ll], None
  return lib

# the CPU devices opened in this process, in order: their launch queues (used while there are several)
_QUEUES: dict[str, LaunchQueue] = {}
MAX_DEVICES = 63   # (queues and pools of runtime/threadpool.c; pool 0 is the launching threads')

def _queued() -> bool: return bool(CPU_ASYNC.value) and len(_QUEUES) > 1

_shared = [0]   # the threads the queues were last told they share

def _share_cores() -> None:
  """Tell the queues the threads they share (THREADS or the cores; each running queue gets an equal part: a device
  working alone gets them all), once the pool library is loaded; again when THREADS changes."""
  if (n := cpu_threads()) == _shared[0] or (lib := thread_pool().lib) is None: return
  lib.pg_queue_threads(n)
  _shared[0] = n

class QueuedHostAllocator(HostAllocator):
  """A CPU device's memory: the host waits for the device's queued launches before it touches it; a copy from another
  CPU device is queued (LaunchQueue.copy)."""
  def __init__(self, launches: LaunchQueue):
    super().__init__()
    self.launches = launches
  def sync(self) -> None: self.launches.wait()
  def transfer(self, dest: Any, src: Any, nbytes: int, source: Allocator) -> bool:
    if isinstance(source, QueuedHostAllocator) and _queued():   # between two CPU devices: queued on the source's
      source.launches.copy(dest, src, nbytes, self.launches)
      return True
    return super().transfer(dest, src, nbytes, source)

class CPUProgram(Program):
  def __init__(self, name: str, lib: bytes, meta=None, launches: LaunchQueue | None = None):
    super().__init__(name, lib, meta)
    self.launches = launches   # its device's queue (None: always run on the calling thread)
    # dlopen needs a file: the compile cache keeps one per distinct library
    path = cache_dir() / "so" / f"{content_hash(lib)[:40]}.so"
    if not path.exists(): atomic_write(path, lib)   # written whether or not the disk caches are on: dlopen needs a file
    else: mark_used(path)
    dll = ctypes.CDLL(str(path))
    self.fxn = getattr(dll, name)
    self.fxn.restype = None
    # the entry point a launch queue calls (C renderer's argv_entry; 0 for a library without one: runs unqueued)
    self.argv = ctypes.cast(getattr(dll, f"{name}_argv"), ctypes.c_void_p).value if hasattr(dll, f"{name}_argv") else 0
    # a kernel with thread loops calls the pool through its own pointer, null (loops run on the calling thread)
    # until the pool is loaded
    self.uses_workers = b"pg_parallel_for" in lib
    self._pool_ptr = ctypes.c_void_p.in_dll(dll, "pg_parallel_for") if self.uses_workers else None
    if self._pool_ptr is not None: self._link_pool()
    # a bounds-checked kernel (SANITIZE=1) takes the buffers' element counts and an error record after the buffers
    self.sanitized = b"pg_params_" in lib
    if self.sanitized:
      self.param_dtypes = ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(dll, "pg_params_"))).decode().split()
  def _link_pool(self) -> None:
    if (entry := thread_pool().entry): self._pool_ptr.value, self._pool_ptr = entry, None   # type: ignore[union-attr]
  def __call__(self, *bufs, sizes: list[int] | None = None) -> None:
    """Run on the buffers (ctypes arrays pass as pointers). A bounds-checked kernel takes `sizes`, the buffers' element
    counts (default: their byte sizes over the dtypes), and raises OutOfBoundsError after a launch with a bad access
    (a queued launch: at the device's next wait)."""
    if self._pool_ptr is not None: self._link_pool()
    args, err = (bufs, None) if not self.sanitized else self._checked_args(bufs, sizes)
    if self.launches is not None:
      if _queued() and self.argv: return self.launches.kernel(self.argv, args, None if err is None else (err, self.name, self.param_dtypes))
      if self.launches.busy: self.launches.wait()   # (CPU_ASYNC turned off with launches still queued)
    self.fxn(*args)
    if err is not None and err[0]: raise out_of_bounds(self.name, list(err), self.param_dtypes)
  def _checked_args(self, bufs: tuple, sizes: list[int] | None) -> tuple[tuple, Any]:
    """A bounds-checked kernel's arguments: the buffers, their element counts, a zeroed error record (also returned)."""
    dts = [DTYPES_BY_NAME[d] for d in self.param_dtypes]
    if len(bufs) != len(dts): raise TypeError(f"kernel {self.name} takes {len(dts)} buffers, got {len(bufs)}")
    n = list(sizes) if sizes is not None else [ctypes.sizeof(b) // d.itemsize for b, d in zip(bufs, dts)]
    err = (ctypes.c_longlong * 6)()
    return (*bufs, (ctypes.c_longlong * max(len(n), 1))(*n), err), err
  def wake(self) -> None:
    if self.uses_workers and not (self.launches is not None and _queued()) and (prewake := thread_pool().prewake) is not None: prewake()

class LaunchList:
  """CPU kernels launched back to back by one C call (runtime/threadpool.c: pg_run_list): a JIT replay's launches
  with no Python between them (~1.6 us saved per launch: ~0.2 ms of a Q8_0 decode step's 124). `set(i, j, buf)` points
  kernel i's parameter j at buf; calling runs them all and returns True, or returns False without running any when the
  kernels must go through the device's launch queue now (several CPU devices opened since): the caller launches them
  one by one then."""
  def __init__(self, lib: ctypes.CDLL, progs: list[CPUProgram], bufs: list[list[Any]]):
    self.n, self._run = len(progs), lib.pg_run_list
    self.args = [(ctypes.c_void_p * max(len(b), 1))(*[ctypes.addressof(x.raw) for x in b]) for b in bufs]
    self.fns = (ctypes.c_void_p * self.n)(*[p.argv for p in progs])
    self.argv = (ctypes.c_void_p * self.n)(*[ctypes.addressof(a) for a in self.args])
  def set(self, i: int, j: int, buf: Any) -> None: self.args[i][j] = ctypes.addressof(buf.raw)
  def __call__(self) -> bool:
    if _queued(): return False
    self._run(self.n, self.fns, self.argv)   # (a sleeping worker is woken by the first threaded kernel's job itself)
    return True

def launch_list(progs: list[Program], bufs: list[list[Any]]) -> LaunchList | None:
  """A LaunchList of these kernels, or None when one cannot be in one: a bounds-checked kernel (SANITIZE=1: its
  errors are read after each launch), a library without the argv entry point, or no thread pool library."""
  if not progs or not all(isinstance(p, CPUProgram) and p.argv and not p.sanitized for p in progs): return None
  try: lib = thread_pool().wait()
  except BaseException: return None   # (the pool failed to build: warned once already)
  for p in progs:
    if p._pool_ptr is not None: p._link_pool()
  return LaunchList(lib, progs, bufs)   # type: ignore[arg-type]

def make_device(name: str) -> DeviceSpec:
  compiler = ClangCompiler()
  renderer = CRenderer(vector_bytes=compiler.vector_bytes, masked_loads=compiler.has("__AVX512VL__"),
                       dot4=compiler.has("__AVX512VL__") and compiler.has("__AVX512VNNI__"))
  if renderer.thread_pool: thread_pool(compiler)   # start building the pool now, next to the first kernels' compiles
  _, _, rest = name.partition(":")
  if rest and not rest.isdigit(): raise RuntimeError(f"device {name} does not exist: CPU devices are CPU, CPU:1, CPU:2, ...")
  if len(_QUEUES) >= MAX_DEVICES: raise RuntimeError(f"device {name}: at most {MAX_DEVICES} CPU devices in one process")
  launches = _QUEUES[name] = LaunchQueue(name, len(_QUEUES))
  launch_waits.append(launches.wait)
  return DeviceSpec(name, QueuedHostAllocator(launches), compiler, functools.partial(CPUProgram, launches=launches), renderer, launches.wait,
                    launch_list)
