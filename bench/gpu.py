#!/usr/bin/env python
"""petagrad on a GPU-style device against the device's limits: GEMM TFLOP/s (fp32, fp16, bf16), elementwise GB/s, and
the cost of one kernel launch (eager, replayed by TinyJit, and in a replay of 64 kernels with and without CUDA graphs).

  DEV=CUDA python bench/gpu.py [--peak-tflops 989] [--peak-gbs 4800] [--quick]

Prints JSON: each case's median time, its rate, and the rate as a fraction of the given peak (defaults: an H200's
989 dense bf16/fp16 TFLOP/s and 4.8 TB/s; fp32 runs on CUDA cores, against --peak-fp32-tflops, default 67). The
PyTorch here is a CPU build, so there is no GPU peer in this process: the ratios are to the hardware's limits.
Run by bench/gpu_check.sh on a machine with an NVIDIA GPU; works on DEV=CL too (PoCL: small sizes with --quick).
"""
from __future__ import annotations
import argparse, json, os, statistics, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from petagrad import Tensor, TinyJit, Device, dtypes
from petagrad.helpers import Context
import petagrad.engine.realize as R

def timed(fn, sync, reps: int) -> float:
  """Median seconds of fn() over reps runs (after two warm-up runs: a TinyJit captures on its second call), each waited for."""
  fn(); fn(); sync()
  times = []
  for _ in range(reps):
    st = time.perf_counter(); fn(); sync(); times.append(time.perf_counter() - st)
  return statistics.median(times)

def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--peak-tflops", type=float, default=989.0)
  p.add_argument("--peak-fp32-tflops", type=float, default=67.0)
  p.add_argument("--peak-gbs", type=float, default=4800.0)
  p.add_argument("--quick", action="store_true")
  a = p.parse_args()
  dev = Device.DEFAULT
  sync = Device[dev].synchronize
  reps = 3 if a.quick else 10
  out: dict = {"device": dev, "date": time.strftime("%Y-%m-%d"), "cases": []}
  def case(name: str, fn, flops: float, nbytes: float, peak_tflops: float) -> None:
    before = set(R._kernel_cache)
    t = timed(fn, sync, reps)
    r = {"case": name, "median_s": t, "tflops": flops / t / 1e12 if flops else None, "gbs": nbytes / t / 1e9}
    # how its kernels were optimized (OptOps.TC: tensor cores)
    r["opts"] = [str(ck.opts) for k, ck in R._kernel_cache.items() if k not in before]
    if flops: r["fraction_of_peak_flops"] = r["tflops"] / peak_tflops
    r["fraction_of_peak_bandwidth"] = r["gbs"] / a.peak_gbs
    out["cases"].append(r)
    print(json.dumps(r), file=sys.stderr, flush=True)
  for n in ((512,) if a.quick else (4096, 8192)):
    for dt, peak in ((dtypes.float32, a.peak_fp32_tflops), (dtypes.float16, a.peak_tflops), (dtypes.bfloat16, a.peak_tflops)):
      x, y = Tensor.randn(n, n, dtype=dt).realize(), Tensor.randn(n, n, dtype=dt).realize()
      case(f"gemm_{n}_{dt.name}", lambda: (x @ y).realize(), 2 * n ** 3, 3 * n * n * dt.itemsize, peak)
  n = 1 << (20 if a.quick else 28)
  x, y = Tensor.randn(n).realize(), Tensor.randn(n).realize()
  case(f"add_{n}_float32", lambda: (x + y).realize(), n, 3 * n * 4, a.peak_fp32_tflops)
  case(f"sum_{n}_float32", lambda: x.sum().realize(), n, n * 4, a.peak_fp32_tflops)
  tiny = Tensor.zeros(16).contiguous().realize()
  case("launch_eager", lambda: tiny.assign(tiny + 1).realize(), 0, 0, 1)
  step = TinyJit(lambda t: t.assign(t + 1).realize())
  case("launch_jit", lambda: step(tiny), 0, 0, 1)
  # a replay of 64 dependent tiny kernels, launched one by one (CUDA_GRAPH=0) and as one CUDA graph (CUDA_GRAPH=1):
  # median_s / 64 is the cost of a kernel in a replay (the flag is read at capture; other devices ignore it)
  def chain(t: Tensor) -> Tensor:
    for _ in range(64): t = (t + 1).realize()
    return t
  for graph in (0, 1):
    with Context(CUDA_GRAPH=graph):
      replay = TinyJit(chain)
      case(f"launch_jit_64_kernels_graph{graph}", lambda: replay(tiny), 0, 0, 1)
  print(json.dumps(out, indent=1))

if __name__ == "__main__":
  main()
