#!/usr/bin/env python
"""petagrad on a GPU-style device against the device's limits: GEMM TFLOP/s (fp32, fp16, bf16), elementwise GB/s, and
the cost of one kernel launch (eager, replayed by TinyJit, and in a replay of 64 kernels with and without CUDA graphs).

  DEV=CUDA python bench/gpu.py [--peak-tflops 989] [--peak-gbs 4800] [--quick]

Prints JSON: each case's median time, its rate, and the rate as a fraction of the given peak (defaults: an H200's
989 dense bf16/fp16 TFLOP/s and 4.8 TB/s; fp32 runs on CUDA cores, against --peak-fp32-tflops, default 67). Where
PyTorch can use the GPU (a CUDA build, as on the GPU machines), each case also runs in PyTorch on the same inputs in
this process (`torch_median_s`, `time_vs_torch`: petagrad's time over PyTorch's); CI's PyTorch is a CPU build.
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

def torch_cuda():
  """PyTorch when it can run on the GPU here (the GPU machines' image has a CUDA build), else None."""
  try: import torch
  except ImportError: return None
  return torch if torch.cuda.is_available() else None

def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--peak-tflops", type=float, default=989.0)
  p.add_argument("--peak-fp32-tflops", type=float, default=67.0)
  p.add_argument("--peak-gbs", type=float, default=4800.0)
  p.add_argument("--quick", action="store_true")
  a = p.parse_args()
  dev = Device.DEFAULT
  sync = Device[dev].synchronize
  torch = torch_cuda() if dev.startswith("CUDA") else None
  reps = 3 if a.quick else 10
  out: dict = {"device": dev, "date": time.strftime("%Y-%m-%d"), "torch": torch.__version__ if torch else None, "cases": []}
  def case(name: str, fn, flops: float, nbytes: float, peak_tflops: float, peer=None) -> None:
    """Time fn (petagrad) and, with a CUDA PyTorch here, peer (the same work in PyTorch on the same inputs)."""
    before = set(R._kernel_cache)
    t = timed(fn, sync, reps)
    r = {"case": name, "median_s": t, "tflops": flops / t / 1e12 if flops else None, "gbs": nbytes / t / 1e9}
    # how its kernels were optimized (OptOps.TC: tensor cores)
    r["opts"] = [str(ck.opts) for k, ck in R._kernel_cache.items() if k not in before]
    if flops: r["fraction_of_peak_flops"] = r["tflops"] / peak_tflops
    r["fraction_of_peak_bandwidth"] = r["gbs"] / a.peak_gbs
    if torch is not None and peer is not None:
      try:
        r["torch_median_s"] = timed(peer, torch.cuda.synchronize, reps)
        r["time_vs_torch"] = t / r["torch_median_s"]   # < 1: petagrad is faster
      except Exception as e: r["torch_error"] = repr(e)   # (the GPU run is scarce: keep petagrad's numbers whatever happens)
    out["cases"].append(r)
    print(json.dumps(r), file=sys.stderr, flush=True)
  def same(*ts: Tensor, dtype=None) -> list:   # PyTorch copies of petagrad tensors on the GPU
    return [torch.from_numpy(t.float().numpy()).to("cuda", getattr(torch, (dtype or t.dtype).name)) for t in ts] if torch else [None] * len(ts)
  for n in ((512,) if a.quick else (4096, 8192)):
    for dt, peak in ((dtypes.float32, a.peak_fp32_tflops), (dtypes.float16, a.peak_tflops), (dtypes.bfloat16, a.peak_tflops)):
      x, y = Tensor.randn(n, n, dtype=dt).realize(), Tensor.randn(n, n, dtype=dt).realize()
      tx, ty = same(x, y)
      case(f"gemm_{n}_{dt.name}", lambda: (x @ y).realize(), 2 * n ** 3, 3 * n * n * dt.itemsize, peak, lambda: tx @ ty)
  n = 1 << (20 if a.quick else 28)
  x, y = Tensor.randn(n).realize(), Tensor.randn(n).realize()
  tx, ty = same(x, y)
  case(f"add_{n}_float32", lambda: (x + y).realize(), n, 3 * n * 4, a.peak_fp32_tflops, lambda: tx + ty)
  case(f"sum_{n}_float32", lambda: x.sum().realize(), n, n * 4, a.peak_fp32_tflops, lambda: tx.sum())
  tiny = Tensor.zeros(16).contiguous().realize()
  (ttiny,) = same(tiny)
  case("launch_eager", lambda: tiny.assign(tiny + 1).realize(), 0, 0, 1, lambda: ttiny.add_(1))
  step = TinyJit(lambda t: t.assign(t + 1).realize())
  case("launch_jit", lambda: step(tiny), 0, 0, 1)
  # a replay of 64 dependent tiny kernels, launched one by one (CUDA_GRAPH=0) and as one CUDA graph (CUDA_GRAPH=1):
  # median_s / 64 is the cost of a kernel in a replay (the flag is read at capture; other devices ignore it). PyTorch's
  # peer: the 64 adds eagerly, and replayed from a torch.cuda.CUDAGraph
  def chain(t: Tensor) -> Tensor:
    for _ in range(64): t = (t + 1).realize()
    return t
  def torch_chain():
    t = ttiny
    for _ in range(64): t = t + 1
    return t
  torch_replay = None
  if torch is not None:
    try:
      torch_chain()
      torch.cuda.synchronize()
      graph = torch.cuda.CUDAGraph()
      with torch.cuda.graph(graph): torch_chain()
      torch_replay = graph.replay
    except Exception as e: out["torch_graph_error"] = repr(e)
  for use_graph in (0, 1):
    with Context(CUDA_GRAPH=use_graph):
      replay = TinyJit(chain)
      case(f"launch_jit_64_kernels_graph{use_graph}", lambda: replay(tiny), 0, 0, 1, torch_replay if use_graph else torch_chain)
  print(json.dumps(out, indent=1))

if __name__ == "__main__":
  main()
