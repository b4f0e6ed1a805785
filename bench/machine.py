"""Measure this machine's limits: peak fp32 FLOP/s (an FMA-bound C kernel) and memory bandwidth (read-only, one and
several streams per thread, and STREAM-style triad), with the same compiler and threads petagrad uses. Nothing here is
typed in: every number is measured on the machine the benchmark runs on (best of a few tries, since the limit is the
best the machine can do, and shared machines only ever make it look slower)."""
from __future__ import annotations
import ctypes, json, os, platform, shutil, statistics, subprocess, sys, tempfile, time

SRC = r"""
#include <stddef.h>
#include <omp.h>
typedef float v16 __attribute__((vector_size(64)));
int nthreads(void) { int n = 1;
  #pragma omp parallel
  {
    #pragma omp single
    n = omp_get_num_threads();
  }
  return n; }
/* 16 independent FMA chains per thread: enough to cover FMA latency x pipes on current x86 and ARM cores.
   Returns a value that depends on every chain so nothing is optimized away. */
float fma_peak(long iters, float bb, float cc, int nt) {
  float total = 0.0f;
  #pragma omp parallel num_threads(nt) reduction(+:total)
  {
    v16 b = {0}, c = {0};
    b += bb; c += cc;
    v16 a0=b, a1=b+1, a2=b+2, a3=b+3, a4=b+4, a5=b+5, a6=b+6, a7=b+7;
    v16 a8=c, a9=c+1, a10=c+2, a11=c+3, a12=c+4, a13=c+5, a14=c+6, a15=c+7;
    for (long i = 0; i < iters; i++) {
      a0=a0*b+c; a1=a1*b+c; a2=a2*b+c; a3=a3*b+c; a4=a4*b+c; a5=a5*b+c; a6=a6*b+c; a7=a7*b+c;
      a8=a8*b+c; a9=a9*b+c; a10=a10*b+c; a11=a11*b+c; a12=a12*b+c; a13=a13*b+c; a14=a14*b+c; a15=a15*b+c;
    }
    v16 s = a0+a1+a2+a3+a4+a5+a6+a7+a8+a9+a10+a11+a12+a13+a14+a15;
    for (int l = 0; l < 16; l++) total += s[l];
  }
  return total;
}
float read_sum(const float *restrict x, long n) {
  float total = 0.0f;
  #pragma omp parallel for reduction(+:total) schedule(static)
  for (long i = 0; i < n; i++) total += x[i];
  return total;
}
/* the same read, each thread's part as `streams` sequential streams read side by side (more cache misses in flight:
   10-15% more than one stream per thread on the 2-core machines here) */
float read_streams(const float *restrict x, long n, int streams) {
  float total = 0.0f;
  #pragma omp parallel reduction(+:total)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    long per = n / nt, len = per / streams / 64 * 64;
    const float *base = x + t * per;
    v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (long i = 0; i < len; i += 64)
      for (int s = 0; s < streams; s++) {
        const float *p = base + s * len + i;
        a0 += *(const v16 *)p; a1 += *(const v16 *)(p + 16); a2 += *(const v16 *)(p + 32); a3 += *(const v16 *)(p + 48);
      }
    v16 v = a0 + a1 + a2 + a3;
    for (int l = 0; l < 16; l++) total += v[l];
  }
  return total;
}
void triad(float *restrict a, const float *restrict b, const float *restrict c, float s, long n) {
  #pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) a[i] = b[i] + s * c[i];
}
void fill(float *restrict a, float v, long n) {
  #pragma omp parallel for schedule(static)
  for (long i = 0; i < n; i++) a[i] = v + (float)(i & 7);
}
"""

def _compile() -> ctypes.CDLL:
  cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang") or "cc"
  d = tempfile.mkdtemp(prefix="petagrad_bench_machine_")
  so = os.path.join(d, "m.so")
  # -ffast-math lets the compiler split the read reduction into vector partial sums (what a tuned kernel does)
  subprocess.run([cc, "-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC", "-shared", "-x", "c", "-", "-o", so],
                 input=SRC, text=True, check=True, capture_output=True)
  lib = ctypes.CDLL(so)
  lib.fma_peak.restype = ctypes.c_float; lib.fma_peak.argtypes = [ctypes.c_long, ctypes.c_float, ctypes.c_float, ctypes.c_int]
  lib.read_sum.restype = ctypes.c_float; lib.read_sum.argtypes = [ctypes.c_void_p, ctypes.c_long]
  lib.read_streams.restype = ctypes.c_float; lib.read_streams.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_int]
  lib.triad.restype = None; lib.triad.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_float, ctypes.c_long]
  lib.fill.restype = None; lib.fill.argtypes = [ctypes.c_void_p, ctypes.c_float, ctypes.c_long]
  lib.nthreads.restype = ctypes.c_int
  shutil.rmtree(d, ignore_errors=True)   # the library stays mapped
  return lib

def _best(fn, tries: int) -> float:
  best = float("inf")
  for _ in range(tries):
    st = time.perf_counter(); fn(); best = min(best, time.perf_counter() - st)
  return best

def _read_gbs(lib, buf, n: int, tries: int) -> float:
  """GB/s of reading n floats at buf: the faster of one stream per thread and several (the limit is the best the
  machine does)."""
  t = min(_best(lambda: lib.read_sum(buf, n), tries), *(_best(lambda s=s: lib.read_streams(buf, n, s), tries) for s in (4, 8)))
  return n * 4 / t / 1e9

class ReadBandwidth:
  """The read bandwidth measured again whenever it is called (256 MB, best of `tries`): a benchmark measures it next to
  each of its runs, since a shared machine's bandwidth moves by 1.5x within minutes."""
  def __init__(self, tries: int = 3):
    self.lib, self.n, self.tries = _compile(), 64 << 20, tries
    self.buf = ctypes.create_string_buffer(self.n * 4)
    self.lib.fill(self.buf, 1.0, self.n)
  def __call__(self) -> float: return _read_gbs(self.lib, self.buf, self.n, self.tries)

def cpu_model() -> str:
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"): return line.split(":", 1)[1].strip()
  except OSError: pass
  return platform.processor() or platform.machine()

def measure(quick: bool = False) -> dict:
  """{'peak_gflops', 'peak_gbs', 'read_gbs', 'triad_gbs', 'threads', ...}, all measured."""
  lib = _compile()
  tries = 5 if quick else 10
  # FLOP/s: 16 chains x 16 lanes x 2 flops per iteration per thread
  threads = lib.nthreads()
  iters = 2_000_000
  lib.fma_peak(1000, 0.999, 1e-3, threads)   # wake the threads up
  flops_per_thread = 16 * 16 * 2 * iters
  t_all = _best(lambda: lib.fma_peak(iters, 0.999, 1e-3, threads), tries)
  t_one = _best(lambda: lib.fma_peak(iters, 0.999, 1e-3, 1), tries)
  # FMA throughput is per core (no shared resource), so one thread x threads is also a bound the machine reaches
  # when its other cores are free; on a shared machine the all-threads run is often slowed by other processes
  all_gflops, one_gflops = flops_per_thread * threads / t_all / 1e9, flops_per_thread / t_one / 1e9
  gflops = max(all_gflops, one_gflops * threads)
  # bandwidth: 64M floats per array (256 MB each), far beyond any cache
  n = 64 << 20
  bufs = [ctypes.create_string_buffer(n * 4) for _ in range(3)]   # zeroed pages
  for b in bufs: lib.fill(b, 1.0, n)                                 # touch every page first
  read_gbs = _read_gbs(lib, bufs[0], n, tries)
  t_triad = _best(lambda: lib.triad(bufs[0], bufs[1], bufs[2], 3.0, n), tries)
  triad_gbs = 3 * n * 4 / t_triad / 1e9   # triad counted as STREAM does: 2 reads + 1 write
  return {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": threads,
          "peak_gflops": gflops, "all_threads_gflops": all_gflops, "one_thread_gflops": one_gflops, "read_gbs": read_gbs, "triad_gbs": triad_gbs,
          "peak_gbs": max(read_gbs, triad_gbs),
          "how": "measured: FMA-bound C kernel (16 chains of 16-lane fp32 FMAs per thread; peak = max(all threads, one thread x "
                 "threads)) and 256 MB read-sum (one, 4 or 8 streams per thread: the fastest) / STREAM triad (peak = the faster), "
                 "compiled with -O3 -march=native -fopenmp; best of %d" % tries}

def median_times(fns: list, reps: int, barrier=None, warmup: int = 4, block: int = 1, settle: float = 0.0) -> list[float]:
  """The median time of each fn over reps calls, the fns taking turns in blocks of `block` calls (the machine's speed
  drifts: timing one framework's runs after the other's would put the drift into their ratio). With block > 1 the first
  call of each block is not timed, and `settle` seconds pass before it: the previous framework's threads may still hold
  the cores (onnxruntime's workers spin for more than 5 ms after a run here: a BERT-style encoder's petagrad calls
  right after them took 5.6 ms instead of 2.7-3.1), and a user runs one framework at a time. barrier: called before
  each timed call (MPI ranks start together). BENCH_VERBOSE=1 prints every time."""
  for fn in fns:
    for _ in range(warmup): fn()   # (petagrad: a warm-up call, the capture, then replays until their buffers are recycled)
  times: list[list[float]] = [[] for _ in fns]
  while len(times[0]) < reps:
    for fn, ts in zip(fns, times):
      if block > 1:
        time.sleep(settle)
        fn()
      for _ in range(max(1, block - 1)):
        if barrier is not None: barrier()
        st = time.perf_counter(); fn(); ts.append(time.perf_counter() - st)
  if os.environ.get("BENCH_VERBOSE"): print([[round(t * 1e3, 2) for t in ts] for ts in times], file=sys.stderr)
  return [statistics.median(ts) for ts in times]

def save_results(out: dict, name: str) -> None:
  """Print a benchmark's results as JSON and write them to bench/results/<name>."""
  text = json.dumps(out, indent=1)
  print(text)
  folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, name), "w") as f: f.write(text)

def best(a: dict, b: dict) -> dict:
  """The better of two measurements: the FLOP/s side and the bandwidth side are taken whole, each from the run
  where it was higher (a shared machine only ever makes the limits look lower)."""
  out = dict(a)
  if b["peak_gflops"] > a["peak_gflops"]: out.update({k: b[k] for k in ("peak_gflops", "all_threads_gflops", "one_thread_gflops")})
  if b["peak_gbs"] > a["peak_gbs"]: out.update({k: b[k] for k in ("peak_gbs", "read_gbs", "triad_gbs")})
  out["how"] = a["how"] + "; measured at the start and at the end of the run, the better of the two kept"
  return out

def remember(measured: dict, path: str) -> dict:
  """Keep, in the JSON file `path`, the best limits measured so far on this machine (same host, CPU and core
  count), and return them merged with this run's: on a shared machine one run rarely sees the real limits.
  The result says both: `peak_*` are the best seen (used for fractions), `run_peak_*` this run's."""
  import json
  key = f"{platform.node()}|{measured['cpu']}|{measured['cores']}|{measured['threads']}"
  try:
    with open(path) as f: seen = json.load(f)
  except (OSError, ValueError): seen = {}
  prev = seen.get(key)
  best_ = best(measured, prev) if prev else dict(measured)
  best_["how"] = measured["how"]
  seen[key] = {k: v for k, v in best_.items() if k != "how"}
  try:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f: json.dump(seen, f, indent=1)
  except OSError: pass
  out = dict(best_)
  out.update({"run_peak_gflops": measured["peak_gflops"], "run_peak_gbs": measured["peak_gbs"],
              "how": measured["how"] + (f"; best seen on this machine so far (kept in {os.path.basename(path)})" if prev else "")})
  return out

if __name__ == "__main__":
  import json
  print(json.dumps(measure(), indent=1))

def git_rev() -> str:
  """The petagrad commit being measured, marked when petagrad/ has uncommitted changes."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    rev = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--", "petagrad"], capture_output=True, text=True).stdout.strip()
    return rev + ("+uncommitted changes in petagrad/" if dirty else "")
  except OSError: return "?"

def loadavg() -> str:
  try: return " ".join(f"{x:.2f}" for x in os.getloadavg())
  except OSError: return "?"
