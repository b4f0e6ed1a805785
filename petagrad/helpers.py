"""Flags (one registry, env-overridable, Context manager), counters and small utilities.

>>> from petagrad.helpers import DEBUG, Context
>>> with Context(DEBUG=2): int(DEBUG)
2
"""
from __future__ import annotations
import collections, functools, os, sys, operator, time, contextlib, pathlib, hashlib, shutil, subprocess, threading
from typing import Any, Callable, Iterable, Iterator, TypeVar, Sequence

T = TypeVar("T")

# ---------------------------------------------------------------- flags

class Flag:
  """One configuration value: read from the environment variable `name`, overridable with `Context`. Its type is
  its default's: an int flag takes ints (and strings of ints, as the environment gives), a string flag strings (one
  of `choices` when given). A value of the wrong type raises where it is given, naming the flag.

  `convert`: turns a value that is not a string into one this flag takes (raising TypeError/ValueError when it
  cannot). helpers.py is the lowest layer and imports nothing of petagrad, so a higher layer registers it after
  the fact: dtype.py sets DEFAULT_FLOAT.convert and DEFAULT_INT.convert, which turn a DType into its name
  (`Context(DEFAULT_FLOAT=dtypes.half)`)."""
  def __init__(self, name: str, default: Any, doc: str, choices: Sequence[str] | None = None, convert: Callable[[Any], Any] | None = None,
               registry: dict[str, Flag] | None = None):
    self.name, self.default, self.doc, self.choices = name, default, doc, tuple(choices) if choices else None
    self.convert = convert
    raw = os.environ.get(name)
    # an empty variable (DEBUG= python ...) means the default
    self.value = default if raw is None or raw.strip() == "" else self.check(raw, f"environment variable {name}={raw!r}")
    (FLAGS if registry is None else registry)[name] = self
  def check(self, v: Any, where: str) -> Any:
    """v converted to this flag's type; TypeError/ValueError naming the flag and `where` it came from otherwise."""
    if self.convert is not None and not isinstance(v, str):
      try: v = self.convert(v)
      except (TypeError, ValueError) as e: raise type(e)(f"{where}: flag {self.name}: {e}") from None
    if isinstance(self.default, bool):
      if isinstance(v, str): return v.strip().lower() not in ("", "0", "false", "no")
      if isinstance(v, int): return bool(v)
      raise TypeError(f"{where}: flag {self.name} takes a bool, got {type(v).__name__} {v!r}")
    if isinstance(self.default, int):
      if isinstance(v, int): return int(v)   # bools count as 0 and 1
      if isinstance(v, str):
        try: return int(v.strip())
        except ValueError: raise ValueError(f"{where}: flag {self.name} takes an integer, got {v!r}") from None
      raise TypeError(f"{where}: flag {self.name} takes an integer, got {type(v).__name__} {v!r}")
    if not isinstance(v, str): raise TypeError(f"{where}: flag {self.name} takes a string, got {type(v).__name__} {v!r}")
    if self.choices is not None and v not in self.choices:
      raise ValueError(f"{where}: flag {self.name} must be one of {', '.join(self.choices)}, got {v!r}")
    return v
  def __bool__(self) -> bool: return bool(self.value)
  def __int__(self) -> int: return int(self.value)
  def __index__(self) -> int: return int(self.value)
  def __str__(self) -> str: return str(self.value)
  def __eq__(self, other) -> bool: return self.value == (other.value if isinstance(other, Flag) else other)
  def __hash__(self) -> int: return hash(self.name)
  def __ge__(self, other) -> bool: return self.value >= other
  def __gt__(self, other) -> bool: return self.value > other
  def __le__(self, other) -> bool: return self.value <= other
  def __lt__(self, other) -> bool: return self.value < other
  def __repr__(self) -> str: return f"Flag({self.name}={self.value!r})"

FLAGS: dict[str, Flag] = {}

DEBUG = Flag("DEBUG", 0, "Cumulative verbosity: 1 realize summary, 2 one line per kernel, 3 optimizations, 4 source, 5 kernel IR, 6 linear program.")
DEV = Flag("DEV", "", "Default device: CPU, PYTHON, NULL, CL (CL:1 the second OpenCL device), CUDA, NULL:CUDA or NULL:HIP (render and compile "
           "for that GPU, run nothing), DISK:/path. Empty: CPU. `python -m petagrad.device` lists what works here.")
COMPILE_ALSO = Flag("COMPILE_ALSO", "", "Comma-separated compile-only targets (NULL:CUDA, NULL:HIP) every new kernel is also rendered and compiled "
                    "for, next to the device it runs on; a kernel that fails to build for one raises CompileError naming the target (how CI "
                    "checks the GPU dialects on a machine without a GPU).")
CUDA_ARCH = Flag("CUDA_ARCH", "sm_90", "GPU architecture NULL:CUDA compiles for (the CUDA device uses its GPU's own).")
CUDA_GRAPH = Flag("CUDA_GRAPH", 1, "1: a TinyJit replay on CUDA launches its kernels as one CUDA graph (one driver call); 0: one cuLaunchKernel per kernel from parameter arrays built at capture. Read when the JIT captures.")
HIP_ARCH = Flag("HIP_ARCH", "gfx942", "AMD GPU architecture NULL:HIP compiles for (clang's --offload-arch).")
HIP_CC = Flag("HIP_CC", "", "clang that compiles HIP kernels for NULL:HIP. Empty: the newest clang-NN on the PATH, else clang.")
CC = Flag("CC", "", "C compiler used by the CPU device. Empty: gcc, or clang when gcc is missing.")
CFLAGS = Flag("CFLAGS", "", "Extra flags appended to the CPU compiler command line.")
NOOPT = Flag("NOOPT", 0, "1: turn kernel optimizations off (debugging).")
BEAM = Flag("BEAM", 0, "n >= 1: search kernel optimizations with a beam of width n, timing candidates on the device (results cached on disk).")
CACHEDIR = Flag("CACHEDIR", "", "Folder of the on-disk caches (compiled kernels, generated code, BEAM results). Empty: $XDG_CACHE_HOME/petagrad or ~/.cache/petagrad.")
CACHE_MB = Flag("CACHE_MB", 4096, "Megabytes the on-disk caches may take; beyond it a low-priority process removes the least recently used files (at most hourly). 0: no limit.")
DISABLE_DISK_CACHE = Flag("DISABLE_DISK_CACHE", 0, "1: never read or write the on-disk caches (compiled libraries, generated programs, lowered kernels).")
DEFAULT_FLOAT = Flag("DEFAULT_FLOAT", "float32", "dtype of Python floats and of float-producing creation ops (float16, bfloat16, float32, float64).",
                     choices=("float16", "bfloat16", "float32", "float64", "half", "bf16", "float", "double"))
DEFAULT_INT = Flag("DEFAULT_INT", "int64", "dtype of Python ints (Tensor([1, 2]), int scalars with bool tensors) and of index-producing ops (int32, int64). tinygrad's default is int32.",
                   choices=("int32", "int64", "int", "long"))
TRAINING = Flag("TRAINING", 0, "1: training mode, tinygrad's Context(TRAINING=1) (Dropout drops, BatchNorm uses batch statistics); Tensor.training is to read and write it.")
NO_GRAD = Flag("NO_GRAD", 0, "1: ops record no gradient (their results need no grad), like torch.no_grad(); Tensor.no_grad reads and writes it, `with Tensor.no_grad():` sets it for a block.")
NO_COLOR = Flag("NO_COLOR", 0, "1: helpers.colored returns text without ANSI color codes (https://no-color.org).")
GROUP_MAX = Flag("GROUP_MAX", 64, "Kernels one launch group may hold: small independent kernels that are ready together run as one program (1: every kernel is launched alone, e.g. to time each with DEBUG=2).")
WINO = Flag("WINO", 0, "1: every 3x3 stride-1 conv2d that fits (mixin/conv.py winograd_fits) runs as Winograd F(4x4, 3x3), transforming its "
            "weight each call (tinygrad's WINO; training too). A conv2d given the transformed weight (winograd=) takes that path whatever "
            "this says. Results differ from the direct convolution by rounding (~4e-6 of the output's largest value; docs/optimizations.md).")
ONNX_WINO = Flag("ONNX_WINO", 1, "How the ONNX importer runs each 3x3 Conv with a constant weight that fits (winograd_fits): as Winograd "
                 "F(4x4, 3x3), its weight transformed once (winograd_weight), 1.6-1.8x faster than direct on a ResNet-style CNN, "
                 "but each new convolution shape builds its kernels for 1.0-1.4 s where a direct one takes ~0.3, and an eager call "
                 "builds a bigger graph (docs/onnx.md). 1: inside a TinyJit call only (its replays repay both); 2: eager calls "
                 "too; 0: never (direct convolutions).")
SPLIT_REDUCE = Flag("SPLIT_REDUCE", 1024, "A contraction that reads both operands along strided rows (a weight gradient: a sum over batch x tokens) and reduces at least this many elements is computed in chunks of about 256 (partial sums in a buffer, then summed: the K blocking of a BLAS). 0: never split.")
EARLY_FREE = Flag("EARLY_FREE", 1, "1: a realize gives an intermediate buffer's memory back after the last kernel that reads it (a training step holds the activations still needed, not all of them at once; TinyJit replays do the same). 0: every buffer a realize makes lives until the realize ends.")
THREADS = Flag("THREADS", 0, "CPU threads a kernel may use (0: one per core). Set 1 when running several processes at once.")
CPU_ASYNC = Flag("CPU_ASYNC", 1, "1: in a process with several CPU devices (CPU:0, CPU:1, ...) each runs its kernels in order on a thread of its own, side by side with the others, with an equal share of the cores (THREADS or the cores, over the devices running a kernel at that moment: one working alone has them all); every realize and JIT replay waits for them before it returns. 0: every CPU kernel runs on the launching thread with all the cores, one device after the other.")
OMP = Flag("OMP", 0, "1: CPU kernels spread their thread loop with OpenMP (parallel for) instead of petagrad's thread pool. Read when the CPU device is created.")
POOL_SPIN_US = Flag("POOL_SPIN_US", 100, "Microseconds a CPU pool worker (and a caller waiting for it) spins after its last job before it sleeps. Read when the pool is loaded.")
POOL_PIN = Flag("POOL_PIN", 1, "1: a CPU pool worker stays on a core of its own when the pool spans every core the process may use (THREADS unset, or at least the cores). Read when the pool is loaded.")
COMPILE_TIMEOUT = Flag("COMPILE_TIMEOUT", 20, "Seconds of CPU time the CPU device's compiler may spend on a kernel with the full flags; a kernel that takes longer is built again with flags that compile fast (-O1), once (cached). 0: no limit.")
SANITIZE = Flag("SANITIZE", 0, "1: memory-safety checking: CPU kernels bounds-check every load and store (OutOfBoundsError naming the kernel, buffer and index) and host buffers end at a PROT_NONE guard page (docs/safety.md). Slow; for tests.")
PYTHON_CHECK = Flag("PYTHON_CHECK", 1, "1: the PYTHON device checks every load and store index against the buffer bounds.")
MNIST_PATH = Flag("MNIST_PATH", "", "Folder holding the MNIST/Fashion-MNIST IDX files; nn.datasets looks there first. Empty: not set.")
CIFAR_PATH = Flag("CIFAR_PATH", "", "Folder holding CIFAR-10 (either release's batch files or its .tar.gz); nn.datasets.cifar looks there first. Empty: not set.")
ALLREDUCE = Flag("ALLREDUCE", "auto", "How a reduction over the split axis of a multi-device tensor combines the pieces (docs/multi.md): naive (each device copies every piece), ring (reduce-scatter + all-gather), hier (inside each machine, then among one leader per machine), auto (by size and topology).")
RING_MIN_BYTES = Flag("RING_MIN_BYTES", 262144, "ALLREDUCE=auto: tensors smaller than this many bytes (and any over 2 devices) use the naive allreduce, bigger ones the ring.")
MPI_TIMEOUT = Flag("MPI_TIMEOUT", 120, "Seconds a collective between MPI ranks may wait; then it raises, naming the ranks that do not answer (docs/multi.md).")
JIT = Flag("JIT", 1, "0: a TinyJit-decorated function runs eagerly on every call (no capture, no replay), as in tinygrad.")
CAPTURING = Flag("CAPTURING", 1, "0: the launches made while it is 0 inside a TinyJit capture run once, then and there, and are not replayed (tinygrad's).")

# tinygrad flags that tinygrad programs set (`with Context(SPLIT_REDUCEOP=0): ...`, or in the environment) and that
# have no counterpart here: accepted so those programs run, and ignored. Reading one gives the value set (nothing else
# reads it). Each is documented in docs/env_vars.md ("accepted for tinygrad programs, no effect here"), with the reason.
# Any other unknown name still raises KeyError in Context.
TINYGRAD_NOOP_FLAGS: dict[str, Flag] = {}
SPLIT_REDUCEOP = Flag("SPLIT_REDUCEOP", 1, "tinygrad: split a big reduce into two kernels. Ignored: petagrad's kernel optimizer decides how a reduce "
                      "is split (grouped reduce, threads).", registry=TINYGRAD_NOOP_FLAGS)
FUSE_ARANGE = Flag("FUSE_ARANGE", 0, "older tinygrad (gone in 0.14): fuse arange into the kernel indexing with it. Ignored: petagrad always fuses "
                   "it (an arange is index arithmetic).", registry=TINYGRAD_NOOP_FLAGS)
TRANSCENDENTAL = Flag("TRANSCENDENTAL", 1, "tinygrad: when exp2/log2/sin are computed in software. Ignored: petagrad's renderers decompose what "
                      "their target lacks.", registry=TINYGRAD_NOOP_FLAGS)
CHECK_OOB = Flag("CHECK_OOB", 0, "tinygrad: prove every load and store in bounds with z3 while checking the kernel spec. Ignored: petagrad's "
                 "bounds checks are SANITIZE=1 (at run time).", registry=TINYGRAD_NOOP_FLAGS)
DEVECTORIZE = Flag("DEVECTORIZE", 1, "older tinygrad (gone in 0.14): 0 keeps vector ops for the LLVM backend. Ignored: petagrad's renderers "
                   "choose the vector width.", registry=TINYGRAD_NOOP_FLAGS)

def _flag(name: str) -> Flag:
  """The flag called name: one of FLAGS or of the tinygrad flags accepted and ignored (TINYGRAD_NOOP_FLAGS); KeyError otherwise."""
  if (f := FLAGS.get(name, TINYGRAD_NOOP_FLAGS.get(name))) is None:
    raise KeyError(f"unknown flag {name}; known flags: {', '.join(sorted(FLAGS))} (and, accepted from tinygrad with no effect: "
                   f"{', '.join(sorted(TINYGRAD_NOOP_FLAGS))})")
  return f

class Context(contextlib.ContextDecorator):
  """Temporarily override flags: `with Context(DEBUG=2, NOOPT=1): ...`. An unknown name raises KeyError; the few tinygrad
  flags petagrad has no use for (TINYGRAD_NOOP_FLAGS, listed in docs/env_vars.md) are accepted and change nothing but
  their own value.

  >>> with Context(SPLIT_REDUCEOP=0, NOOPT=1): int(SPLIT_REDUCEOP), int(NOOPT)
  (0, 1)
  """
  def __init__(self, **kwargs: Any):
    self.flags = {k: _flag(k) for k in kwargs}
    # checked here, at the user's line: a bad value (DEBUG='x') would otherwise fail far away, where the flag is read
    self.kwargs = {k: self.flags[k].check(v, f"Context({k}={v!r}) at {user_frame()}") for k, v in kwargs.items()}
  def __enter__(self):
    self.old = {k: self.flags[k].value for k in self.kwargs}
    for k, v in self.kwargs.items(): self.flags[k].value = v
    return self
  def __exit__(self, *exc):
    for k, v in self.old.items(): self.flags[k].value = v

def cpu_threads() -> int:
  """Threads for a CPU kernel: the THREADS flag, or one per core this process may use (as it was at the first call:
  asked on every realize, and the system call costs as much as a small kernel)."""
  return THREADS.value if THREADS.value > 0 else usable_cores()
@functools.cache
def usable_cores() -> int:
  """The cores this process may use (its affinity mask, at the first call)."""
  try: return max(1, len(os.sched_getaffinity(0)))
  except AttributeError: return max(1, os.cpu_count() or 1)

def cache_dir() -> pathlib.Path:
  base = str(CACHEDIR) or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "petagrad")
  p = pathlib.Path(base); p.mkdir(parents=True, exist_ok=True)
  if base not in _pruned:   # once per folder and process, a few seconds late: a short run and a cold start do not
    _pruned.add(base)        # wait for it
    t = threading.Timer(PRUNE_DELAY_S, start_prune, args=(p,))
    t.daemon = True
    t.start()
  return p
_pruned: set[str] = set()
PRUNE_DELAY_S, PRUNE_EVERY_S = 5.0, 3600.0

def start_prune(base: pathlib.Path) -> subprocess.Popen | None:
  """Run prune_cache over base in a process of its own at the lowest priority, unless one started less than
  PRUNE_EVERY_S ago (base/.pruned's time). Not a thread: a walk over a big cache (660,000 files here) holds the
  interpreter for seconds in the middle of the user's work (a decode step's kernels waited up to 13 ms for their
  launches), and a process that ends first used to kill the walk before it removed anything, so the caches only
  grew. Returns the process (None when none started)."""
  if int(CACHE_MB) <= 0: return None
  marker = base / ".pruned"
  try:
    if time.time() - marker.stat().st_mtime < PRUNE_EVERY_S: return None
  except OSError: pass
  try: marker.touch()
  except OSError: return None   # a read-only cache folder: nothing to prune
  # (helpers.py imports nothing of petagrad: the child loads this file alone, not the whole package)
  code = ("import importlib.util, os, pathlib, sys; os.nice(19); s = importlib.util.spec_from_file_location('petagrad_prune', sys.argv[1]); "
          "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.prune_cache(pathlib.Path(sys.argv[2]), int(sys.argv[3]))")
  try:
    return subprocess.Popen([sys.executable, "-c", code, __file__, str(base), str(int(CACHE_MB))], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
  except OSError: return None

def prune_cache(base: pathlib.Path, limit_mb: int | None = None) -> int:
  """Keep the disk caches under CACHE_MB: remove the least recently used files (a cache hit refreshes a file's
  time, see read_cached) until they take 3/4 of it. Returns the bytes removed. The thread pool's library and the
  marker of the last prune (start_prune) stay."""
  limit = (int(CACHE_MB) if limit_mb is None else limit_mb) * (1 << 20)
  if limit <= 0: return 0
  files = []
  for root, _, names in os.walk(base):
    for n in names:
      if n.startswith("threadpool_") or n == ".pruned": continue
      try: st = os.stat(fp := os.path.join(root, n))
      except OSError: continue
      files.append((st.st_mtime, st.st_size, fp))
  total = sum(f[1] for f in files)
  if total <= limit: return 0
  freed = 0
  for _, size, fp in sorted(files):
    if total - freed <= limit * 3 // 4: break
    try: os.remove(fp); freed += size
    except OSError: pass
  return freed

def read_cached(path: str | os.PathLike) -> bytes | None:
  """A disk cache entry's bytes, marked used for prune_cache; None when it is not there or DISABLE_DISK_CACHE is set."""
  if DISABLE_DISK_CACHE: return None
  try:
    with open(path, "rb") as f: data = f.read()
  except OSError: return None
  mark_used(path)
  return data

def write_cached(path: str | os.PathLike, data: bytes) -> None:
  """Store a disk cache entry (nothing with DISABLE_DISK_CACHE)."""
  if not DISABLE_DISK_CACHE: atomic_write(path, data)

def mark_used(path: str | os.PathLike) -> None:
  """Refresh a cache file's time: prune_cache removes the least recently used first."""
  try: os.utime(path)
  except OSError: pass

# ---------------------------------------------------------------- counters

class GlobalCounters:
  """Totals since the last `reset()`: kernels run, programs launched, FLOPs and bytes they moved, and their time.
  A kernel is one output computed by one loop nest (what fusion decides); a launch runs one compiled program,
  which holds one kernel or, for a launch group, several.

  `mem_used` (and `mem_used_per_device`, by device name) is different: the bytes of device memory petagrad's buffers
  hold now (Buffer in device.py counts each allocation and free; memory a tensor only views, Tensor.from_blob's, is not
  counted, nor are DISK's memory-mapped files). `reset()` leaves it alone, as tinygrad's does. `mem_peak` is the
  highest mem_used since the last `reset()` (which sets it to mem_used).

  >>> from petagrad import Tensor
  >>> before = GlobalCounters.mem_used
  >>> t = Tensor.ones(1024).contiguous().realize()
  >>> GlobalCounters.mem_used - before
  4096
  >>> del t; GlobalCounters.mem_used - before
  0
  """
  kernel_count: int = 0
  launch_count: int = 0
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0
  compile_count: int = 0     # compile cache misses (memory and disk)
  codegen_count: int = 0     # programs optimized and rendered to source here (a disk-cache hit skips that)
  mem_used: int = 0          # bytes of device memory allocated now (not reset)
  mem_used_per_device: collections.defaultdict[str, int] = collections.defaultdict(int)
  mem_peak: int = 0          # the highest mem_used since reset()
  @staticmethod
  def reset() -> None:
    GlobalCounters.kernel_count = GlobalCounters.launch_count = GlobalCounters.global_ops = GlobalCounters.global_mem = GlobalCounters.compile_count = 0
    GlobalCounters.codegen_count = 0
    GlobalCounters.mem_peak = GlobalCounters.mem_used
    GlobalCounters.time_sum_s = 0.0

# ---------------------------------------------------------------- small utilities

# the names tinygrad's helpers give (petagrad.helpers.getenv, colored, tqdm, Timing, fetch, ...), so code written for
# tinygrad imports them from here

OSX, WIN = sys.platform == "darwin", sys.platform == "win32"
CI = os.environ.get("CI", "") != ""   # running under a CI system (GitHub Actions and most others set CI=true)

def prod(xs: Iterable[int]) -> int:
  """The product of xs (1 when empty).

  >>> prod((2, 3, 4)), prod(())
  (24, 1)
  """
  return functools.reduce(operator.mul, xs, 1)
def dedup(xs: Iterable[T]) -> list[T]:
  """xs without repeats, in first-seen order.

  >>> dedup([3, 1, 3, 2, 1])
  [3, 1, 2]
  """
  return list(dict.fromkeys(xs))
def argfix(*x) -> tuple:
  """Accept both f(1, 2, 3) and f((1, 2, 3)).

  >>> argfix(1, 2, 3), argfix((1, 2, 3)), argfix([4])
  ((1, 2, 3), (1, 2, 3), (4,))
  """
  if x and isinstance(x[0], (tuple, list)):
    if len(x) != 1: raise ValueError(f"bad arguments {x}: pass either one tuple or several ints")
    return tuple(x[0])
  return x
def flatten(xss: Iterable[Iterable[T]]) -> list[T]:
  """One level of nesting removed.

  >>> flatten([[1, 2], (3,), []])
  [1, 2, 3]
  """
  return [x for xs in xss for x in xs]
def all_same(items: Sequence) -> bool:
  """Are all items equal (True for an empty sequence)?

  >>> all_same([2, 2, 2]), all_same([1, 2]), all_same([])
  (True, False, True)
  """
  return all(x == items[0] for x in items)
def partition(itr: Iterable[T], fxn: Callable[[T], bool]) -> tuple[list[T], list[T]]:
  """The items of itr for which fxn is true, and the others, each in order (tinygrad's partition).

  >>> partition(range(6), lambda x: x % 2 == 0)
  ([0, 2, 4], [1, 3, 5])
  """
  ret: tuple[list[T], list[T]] = ([], [])
  for x in itr: (ret[0] if fxn(x) else ret[1]).append(x)
  return ret
def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]:
  """An int repeated cnt times, or a sequence as a tuple (tinygrad's make_tuple).

  >>> make_tuple(3, 2), make_tuple([1, 2], 2)
  ((3, 3), (1, 2))
  """
  return (x,) * cnt if isinstance(x, int) else tuple(x)
def make_pair(x: int | Sequence[int], cnt: int = 2) -> tuple[int, ...]:
  """make_tuple with cnt=2 by default (the older tinygrad name).

  >>> make_pair(3), make_pair((1, 2))
  ((3, 3), (1, 2))
  """
  return make_tuple(x, cnt)

def getenv(key: str, default: Any = 0) -> Any:
  """The environment variable key converted to the type of default (tinygrad's getenv): getenv("BS", 64) is an
  int, getenv("NAME", "") a string; a missing or empty variable gives default. A bool default takes 0/1, true/false,
  yes/no. Read on every call (tinygrad caches the first value).

  >>> import os
  >>> os.environ["PETAGRAD_DOC_BS"] = "32"
  >>> getenv("PETAGRAD_DOC_BS", 64), getenv("PETAGRAD_DOC_MISSING", 64), getenv("PETAGRAD_DOC_MISSING")
  (32, 64, 0)
  """
  raw = os.environ.get(key)
  if raw is None or raw == "": return default
  if isinstance(default, bool): return raw.strip().lower() not in ("0", "false", "no", "off")
  try: return type(default)(raw)
  except (TypeError, ValueError): raise ValueError(f"environment variable {key}={raw!r}: expected a {type(default).__name__} like its default {default!r}") from None

_COLORS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")
def colored(st: Any, color: str | None, background: bool = False) -> str:
  """st wrapped in the ANSI codes of color (black, red, green, yellow, blue, magenta, cyan, white; an upper-case
  name is the bright variant), as the background with background=True. color None or NO_COLOR=1: st unchanged.

  >>> colored("ok", "green")
  '\\x1b[32mok\\x1b[0m'
  >>> colored("BIG", "RED", background=True), colored("plain", None)
  ('\\x1b[101mBIG\\x1b[0m', 'plain')
  """
  if color is None or NO_COLOR: return st
  if color.lower() not in _COLORS: raise ValueError(f"colored: unknown color {color!r}; known: {', '.join(_COLORS)} (upper case: bright)")
  return f"\x1b[{10 * background + 60 * (color.upper() == color) + 30 + _COLORS.index(color.lower())}m{st}\x1b[0m"

def get_child(obj: Any, key: str) -> Any:
  """Follow a dotted path from obj: numeric parts index (lists, Sequential), others are dict keys or attributes
  (tinygrad's get_child; the inverse of a state-dict key).

  >>> class Block: pass
  >>> b = Block(); b.layers = [{"w": 1}, {"w": 2}]
  >>> get_child(b, "layers.1.w")
  2
  """
  for k in key.split("."):
    if k.isnumeric(): obj = obj[int(k)]
    elif isinstance(obj, dict): obj = obj[k]
    else: obj = getattr(obj, k)
  return obj

class Timing(contextlib.ContextDecorator):
  """Print the time a block (or a decorated function) took: prefix, then milliseconds, then on_exit(nanoseconds)
  when given (tinygrad's Timing). enabled=False prints nothing. The last time is kept in .et (ns).

  >>> with Timing("sum: ", enabled=False) as t: _ = sum(range(1000))
  >>> t.et > 0
  True
  """
  def __init__(self, prefix: str = "", on_exit: Callable[[int], str] | None = None, enabled: bool = True):
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
  def __enter__(self):
    self.st = time.perf_counter_ns()
    return self
  def __exit__(self, *exc) -> None:
    self.et = time.perf_counter_ns() - self.st
    if self.enabled: print(f"{self.prefix}{self.et * 1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))

class _PlainProgress:
  """What tqdm() gives when the tqdm package is not installed: iterates (or counts update()s) and prints a plain
  line to stderr at most every 5 seconds and at the end; nothing when disabled (disable=None: when stderr is not a
  terminal). Takes tqdm's arguments and ignores the ones it has no use for."""
  def __init__(self, iterable: Iterable | None = None, desc: str = "", total: int | None = None, disable: bool | None = False,
               unit: str = "it", unit_scale: bool = False, initial: int = 0, **_: Any):
    self.iterable, self.unit, self.n = iterable, unit, initial
    self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)   # type: ignore[arg-type]
    self.disable = (not sys.stderr.isatty()) if disable is None else bool(disable)
    self.desc, self.t0, self.last, self.closed = desc, time.perf_counter(), time.perf_counter(), False
  def __iter__(self) -> Iterator:
    if self.iterable is None: raise TypeError("tqdm: give an iterable to iterate over")
    try:
      for x in self.iterable:
        yield x
        self.update(1)
    finally: self.close()
  def __len__(self) -> int: return self.total or 0
  def __enter__(self): return self
  def __exit__(self, *exc) -> None: self.close()
  def set_description(self, desc: str = "", refresh: bool = True) -> None: self.desc = desc
  def set_postfix(self, *args: Any, **kwargs: Any) -> None: self.postfix = kwargs
  def update(self, n: int = 1) -> None:
    self.n += n
    if not self.disable and time.perf_counter() - self.last > 5: self._print()
  def _print(self) -> None:
    self.last = time.perf_counter()
    rate = self.n / max(self.last - self.t0, 1e-9)
    print(f"{self.desc + ': ' if self.desc else ''}{self.n}{f'/{self.total}' if self.total else ''} {self.unit} [{self.last - self.t0:.1f} s, {rate:.2f} {self.unit}/s]",
          file=sys.stderr, flush=True)
  def close(self) -> None:
    if not self.closed and not self.disable: self._print()
    self.closed = True
  @staticmethod
  def write(s: str) -> None: print(s, file=sys.stderr, flush=True)

def tqdm(iterable: Iterable[T] | None = None, desc: str = "", disable: bool | None = False, unit: str = "it", unit_scale: bool = False,
         total: int | None = None, **kwargs: Any) -> Any:
  """A progress bar over iterable (tinygrad's signature; extra keywords go to tqdm): the real `tqdm.tqdm` when the
  tqdm package is installed (the `examples` extra), else a plain iterator that prints a line now and then.

  >>> [x * 2 for x in tqdm(range(3), disable=True)]
  [0, 2, 4]
  """
  try: from tqdm import tqdm as real
  except ImportError: real = _PlainProgress
  return real(iterable, desc=desc, disable=disable, unit=unit, unit_scale=unit_scale, total=total, **kwargs)

def trange(n: int, **kwargs: Any) -> Any:
  """tqdm(range(n), total=n, **kwargs).

  >>> sum(trange(4, disable=True))
  6
  """
  return tqdm(range(n), total=n, **kwargs)

def fetch(url: str, name: str | os.PathLike | None = None, subdir: str | None = None, gunzip: bool = False, allow_caching: bool = True,
          headers: dict[str, str] | None = None, sha256: str | None = None, timeout: float = 30.0) -> pathlib.Path:
  """Download url (with urllib: http(s), ftp or file:// URLs) into CACHEDIR/downloads and return the file's path
  (tinygrad's fetch). A file already there is not downloaded again (allow_caching=False: always download). name:
  the file name in that folder (default: a hash of the url), or a path of its own when it holds a '/'. gunzip:
  store the data decompressed. sha256: the expected hash of what is stored; a mismatch raises ValueError (and the
  file is not kept). A local path ('/...' or './...') is returned as it is. The file appears whole or not at all.

  >>> import tempfile, pathlib
  >>> src = pathlib.Path(tempfile.mkdtemp()) / "data.txt"; _ = src.write_text("hello")
  >>> fetch(src.as_uri(), allow_caching=False).read_text()
  'hello'
  """
  import urllib.request, gzip
  if url.startswith(("/", ".")): return pathlib.Path(url)
  if name is not None and (isinstance(name, pathlib.Path) or "/" in str(name)): fp = pathlib.Path(name)
  else:
    tag = hashlib.md5("\n".join(f"{k}:{v}" for k, v in sorted((headers or {}).items())).encode()).hexdigest()[:8] if headers else ""
    fp = cache_dir() / "downloads" / (subdir or "") / ((str(name) if name else hashlib.md5(url.encode()).hexdigest()) + (f"_{tag}" if tag else "") + (".gunzip" if gunzip else ""))
  if fp.is_file() and allow_caching and (sha256 is None or hashlib.sha256(fp.read_bytes()).hexdigest() == sha256): return fp
  fp.parent.mkdir(parents=True, exist_ok=True)
  req = urllib.request.Request(url, headers={"User-Agent": "petagrad", **(headers or {})})
  tmp = fp.with_name(f"{fp.name}.tmp{os.getpid()}_{threading.get_ident()}")
  try:
    with urllib.request.urlopen(req, timeout=timeout) as r:
      length = int(r.headers.get("content-length") or 0) if not gunzip else 0
      src = gzip.GzipFile(fileobj=r) if gunzip else r
      h = hashlib.sha256()
      with open(tmp, "wb") as f, tqdm(total=length or None, unit="B", unit_scale=True, desc=url, disable=None) as bar:
        while chunk := src.read(1 << 16):
          h.update(chunk); f.write(chunk); bar.update(len(chunk))
    if length and (got := os.path.getsize(tmp)) < length: raise OSError(f"fetch {url}: got {got} of {length} bytes")
    if sha256 is not None and h.hexdigest() != sha256: raise ValueError(f"fetch {url}: sha256 is {h.hexdigest()}, expected {sha256}")
    os.replace(tmp, fp)
  finally:
    if tmp.exists(): tmp.unlink()
  return fp
def strides_for_shape(shape: Sequence[int]) -> tuple[int, ...]:
  out, acc = [], 1
  for s in reversed(shape): out.append(acc); acc *= s
  return tuple(reversed(out))
CODE_CACHE_DAYS = 7
def code_cache_dir(kind: str) -> pathlib.Path:
  """CACHEDIR/kind/<code_version>: for what petagrad's code generates (it is stale once the code changes). Folders
  of other code versions that nothing wrote to for CODE_CACHE_DAYS are removed (editing petagrad leaves one
  behind per version)."""
  return _code_cache_dir(cache_dir() / kind)
@functools.cache
def _code_cache_dir(base: pathlib.Path) -> pathlib.Path:
  here = base / code_version()[:24]
  try:
    here.mkdir(parents=True, exist_ok=True)
    old = time.time() - CODE_CACHE_DAYS * 86400
    for d in base.iterdir():
      if d != here and d.is_dir() and d.stat().st_mtime < old: shutil.rmtree(d, ignore_errors=True)
  except OSError: pass   # a read-only or shared cache folder: keep what is there
  return here

def atomic_write(path: str | os.PathLike, data: bytes) -> None:
  """Write a cache file so that no reader (another process, a parallel compile) ever sees half of it."""
  os.makedirs(os.path.dirname(os.fspath(path)), exist_ok=True)
  tmp = f"{os.fspath(path)}.tmp{os.getpid()}_{threading.get_ident()}"
  with open(tmp, "wb") as f: f.write(data)
  os.replace(tmp, path)

def content_hash(*parts: str | bytes) -> str:
  h = hashlib.sha256()
  for p in parts: h.update(p.encode() if isinstance(p, str) else p); h.update(b"\0")
  return h.hexdigest()

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))

@functools.cache
def code_version() -> str:
  """A hash of petagrad's own source files: caches of generated code key on it, so an edit to any layer (a
  rewrite rule, the renderer) invalidates what older code generated."""
  h = hashlib.sha256()
  for root, _, files in sorted(os.walk(_PKG_DIR)):
    for f in sorted(files):
      if f.endswith((".py", ".c")):
        with open(os.path.join(root, f), "rb") as fh: h.update(f.encode() + b"\0" + fh.read())
  return h.hexdigest()
def user_frame() -> str:
  """'file:line' of the innermost stack frame outside the petagrad package: the user's line."""
  f = sys._getframe(1)
  while f is not None:
    fn = f.f_code.co_filename
    if not os.path.abspath(fn).startswith(_PKG_DIR) and "<frozen" not in fn: return f"{fn}:{f.f_lineno}"
    f = f.f_back
  return "<unknown>"

def user_op() -> tuple[str, str]:
  """(the petagrad function the user's line called, 'file:line' of that line): what an error deep inside an op names."""
  f, op = sys._getframe(1), "<op>"
  while f is not None:
    fn = f.f_code.co_filename
    if not os.path.abspath(fn).startswith(_PKG_DIR) and "<frozen" not in fn: return op, f"{fn}:{f.f_lineno}"
    if not (name := f.f_code.co_name).startswith("<") and name != "wrapper": op = name.strip("_")   # (not a decorator's frame)
    f = f.f_back
  return op, "<unknown>"

class Timer:
  def __init__(self): self.st = time.perf_counter()
  def elapsed(self) -> float: return time.perf_counter() - self.st
