#!/usr/bin/env python
"""Several processes under mpirun: petagrad's allreduce and data-parallel training step next to mpi4py's own
MPI_Allreduce and PyTorch's torch.distributed (gloo) and DistributedDataParallel, in the same processes, on the same
machine (docs/multi.md).

  python bench/multi.py [--ranks 2 4] [--quick]      # starts mpirun itself; prints JSON

Cases, for each number of ranks:
  * allreduce of a float32 buffer of 1 MB .. 256 MB per rank (a sum): bus bandwidth = bytes * 2(n-1)/n / time (the
    NCCL-tests convention: what each rank's links carry), for petagrad (a tensor split over every rank's CPU device,
    summed over the split axis, replayed by TinyJit), mpi4py (Allreduce on numpy arrays) and torch.distributed
    (all_reduce, gloo); the ratio petagrad / MPI.
  * a data-parallel training step (an MLP, AdamW, batch split over the ranks) on 1 rank and on n ranks: steps/s,
    scaling efficiency (n-rank steps/s per rank over 1-rank steps/s ... for a fixed global batch: time(1) / time(n) / n
    ... reported as the speedup), next to PyTorch DDP (gloo) on the same model, batch and ranks.
Every rank runs with THREADS=1 (and torch.set_num_threads(1)): n ranks use n cores, as DDP does.
"""
from __future__ import annotations
import argparse, json, os, statistics, subprocess, sys, time
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

def _median_time(fn, reps: int, barrier) -> float:
  for _ in range(4): fn()   # (petagrad: a warm-up call, the capture, then replays until their buffers are recycled)
  times = []
  for _ in range(reps):
    barrier()
    st = time.perf_counter(); fn(); times.append(time.perf_counter() - st)
  if os.environ.get("BENCH_VERBOSE"): print([round(t * 1e3, 1) for t in times], file=sys.stderr)
  return statistics.median(times)

def worker(args) -> None:
  import numpy as np
  import torch, torch.distributed as dist
  from mpi4py import MPI
  from petagrad import Tensor, TinyJit, nn
  from petagrad.device import world
  comm, rank, n = MPI.COMM_WORLD, MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
  torch.set_num_threads(1)
  dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=n)
  out: dict = {"ranks": n, "allreduce": [], "train": {}}
  devs = world.devices()
  reps = 3 if args.quick else 7
  sizes = [1, 4, 16, 64] if args.quick else [1, 4, 16, 64, 256]
  for mb in sizes:
    elems = mb * (1 << 20) // 4
    host = np.ones(elems, np.float32)
    res = np.empty_like(host)
    t_mpi = _median_time(lambda: comm.Allreduce(host, res), reps, comm.Barrier)
    th = torch.ones(elems)
    t_torch = _median_time(lambda: dist.all_reduce(th), reps, comm.Barrier)
    x = Tensor.ones(n, elems, device=devs).shard(devs, 0).contiguous().realize()   # each rank: one row of elems
    step = TinyJit(lambda x: x.sum(0).realize())
    t_pg = _median_time(lambda: step(x), reps, comm.Barrier)
    check = step(x).numpy()[:4].tolist()
    busbw = lambda t: mb * (1 << 20) * 2 * (n - 1) / n / t / 1e9
    out["allreduce"].append({"MB": mb, "petagrad_GBs": busbw(t_pg), "mpi4py_GBs": busbw(t_mpi), "torch_gloo_GBs": busbw(t_torch),
                             "petagrad_over_mpi": t_mpi / t_pg, "petagrad_over_gloo": t_torch / t_pg, "result_ok": check == [float(n)] * 4})
  # data-parallel MLP step: global batch B split over the ranks
  B, D, H, C = 256, 512, 1024, 10
  rng = np.random.default_rng(0)
  X, Y = rng.standard_normal((B, D)).astype(np.float32), rng.integers(0, C, B)
  def pg_step(devices):
    Tensor.manual_seed(0)
    layers = [nn.Linear(D, H), nn.Linear(H, C)]
    params = nn.state.get_parameters(layers)
    if devices:
      for p in params: p.to_(devices)
    opt = nn.optim.AdamW(params, lr=1e-3)
    @TinyJit
    def step(x, y):
      opt.zero_grad()
      loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      return loss.realize()
    x, y = Tensor(X), Tensor(Y)
    if devices: x, y = x.shard(devices, 0).realize(), y.shard(devices, 0).realize()
    return lambda: step(x, y)
  def torch_step(ddp: bool):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.ReLU(), torch.nn.Linear(H, C))
    if ddp: model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    lo, hi = (rank * B // n, (rank + 1) * B // n) if ddp else (0, B)
    x, y = torch.tensor(X[lo:hi]), torch.tensor(Y[lo:hi])
    def step():
      opt.zero_grad()
      loss = torch.nn.functional.cross_entropy(model(x), y)
      loss.backward()
      opt.step()
    return step
  nothing = lambda: None
  t1_pg = _median_time(pg_step(None), reps, nothing)
  t1_torch = _median_time(torch_step(False), reps, nothing)
  tn_pg = _median_time(pg_step(devs), reps, comm.Barrier)
  tn_ddp = _median_time(torch_step(True), reps, comm.Barrier)
  out["train"] = {"model": f"MLP {D}-{H}-{C}, AdamW, global batch {B}",
                  "petagrad_1_rank_steps_s": 1 / t1_pg, "petagrad_n_ranks_steps_s": 1 / tn_pg, "petagrad_speedup": t1_pg / tn_pg,
                  "torch_1_rank_steps_s": 1 / t1_torch, "torch_ddp_n_ranks_steps_s": 1 / tn_ddp, "torch_ddp_speedup": t1_torch / tn_ddp,
                  "petagrad_over_ddp": tn_ddp / tn_pg}
  if rank == 0: print("RESULT " + json.dumps(out), flush=True)
  dist.destroy_process_group()

def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
  p.add_argument("--quick", action="store_true")
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--port", type=int, default=29577, help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.worker: return worker(args)
  results = []
  for n in args.ranks:
    env = {**os.environ, "THREADS": "1", "OMP_NUM_THREADS": "1", "MPI_TIMEOUT": "900", "PYTHONPATH": ROOT}
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "rtc", "^hwloc", "-np", str(n), sys.executable, os.path.abspath(__file__),
           "--worker", "--port", str(args.port + n)] + (["--quick"] if args.quick else [])
    print(f"running {n} ranks: {' '.join(cmd)}", file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
      results.append({"ranks": n, "error": (r.stderr or r.stdout)[-2000:]})
      continue
    results.append(json.loads(line[len("RESULT "):]))
  print(json.dumps({"machine_cores": os.cpu_count(), "results": results}, indent=1))

if __name__ == "__main__":
  main()
