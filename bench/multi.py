#!/usr/bin/env python
"""Several processes under mpirun: petagrad's allreduce and data-parallel training step next to mpi4py's own
MPI_Allreduce and PyTorch's torch.distributed (gloo) and DistributedDataParallel, in the same processes, on the same
machine (docs/multi.md).

  python bench/multi.py [--ranks 2 4] [--quick] [--only allreduce train]   # starts mpirun itself; prints JSON

Cases, for each number of ranks:
  * allreduce of a float32 buffer of 1 MB .. 256 MB per rank (a sum): bus bandwidth = bytes * 2(n-1)/n / time (the
    NCCL-tests convention: what each rank's links carry), for petagrad (a tensor split over every rank's CPU device,
    summed over the split axis, replayed by TinyJit), mpi4py (Allreduce on numpy arrays) and torch.distributed
    (all_reduce, gloo); the ratio petagrad / MPI.
  * a data-parallel training step (bench/train.py's MLP and GPT, AdamW, the global batch split over the ranks; steps
    under TinyJit, DDP eager; the two frameworks' steps timed in turns) on 1 rank and on n ranks: steps/s,
    scaling efficiency (n-rank steps/s per rank over 1-rank steps/s ... for a fixed global batch: time(1) / time(n) / n
    ... reported as the speedup), next to PyTorch DDP (gloo) on the same model, batch and ranks.
Every rank runs with THREADS=1 (and torch.set_num_threads(1)): n ranks use n cores, as DDP does.
"""
from __future__ import annotations
import argparse, json, os, subprocess, sys
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(1, os.path.join(ROOT, "bench"))   # (bench/train.py's models)
from machine import median_times  # noqa: E402
MLP_BATCH = 256

def _median_time(fn, reps: int, barrier) -> float: return median_times([fn], reps, barrier)[0]

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
  sizes = ([1, 4, 16, 64] if args.quick else [1, 4, 16, 64, 256]) if "allreduce" in args.only else []
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
  # data-parallel training steps (bench/train.py's models): the global batch split over the ranks
  from train import GPT, tg_like_models, torch_models
  rng = np.random.default_rng(0)
  tok = rng.integers(0, GPT["vocab"], (GPT["batch"], GPT["seq"] + 1)).astype(np.int32)
  cases = {"mlp": (f"MLP 784-512-512-10, AdamW, global batch {MLP_BATCH}", 10,
                   rng.standard_normal((MLP_BATCH, 784)).astype(np.float32), rng.integers(0, 10, MLP_BATCH).astype(np.int32)),
           "gpt": ("GPT {layers} layers, dim {dim}, {heads} heads, seq {seq}, AdamW, global batch {batch}".format(**GPT), GPT["vocab"],
                   tok[:, :-1].copy(), tok[:, 1:].copy())}
  def pg_step(case, devices):
    Tensor.manual_seed(0)
    MLP, GPTModel = tg_like_models(Tensor, nn, lambda x: x.gelu(approximate="tanh"))
    model = MLP() if case == "mlp" else GPTModel(**GPT)
    params = nn.state.get_parameters(model)
    if devices:
      for p in params: p.to_(devices)
    opt = nn.optim.AdamW(params, lr=1e-3)
    _, vocab, X, Y = cases[case]
    @TinyJit
    def step(x, y):
      with nn.train():
        opt.zero_grad()
        loss = model(x).reshape(-1, vocab).cross_entropy(y.reshape(-1))
        loss.backward()
        opt.step()
      return loss.realize()
    x, y = Tensor(X), Tensor(Y)
    if devices: x, y = x.shard(devices, 0).realize(), y.shard(devices, 0).realize()
    return lambda: step(x, y).item()
  def torch_step(case, ddp: bool):
    torch.manual_seed(0)
    MLP, GPTModel = torch_models(torch)
    model = MLP() if case == "mlp" else GPTModel(**GPT)
    if ddp: model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    _, vocab, X, Y = cases[case]
    lo, hi = (rank * len(X) // n, (rank + 1) * len(X) // n) if ddp else (0, len(X))
    x, y = torch.tensor(X[lo:hi]), torch.tensor(Y[lo:hi]).long()
    def step():
      opt.zero_grad()
      loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
      loss.backward()
      opt.step()
      return loss.item()
    return step
  for case in cases if "train" in args.only else []:
    t1_pg, t1_torch = median_times([pg_step(case, None), torch_step(case, False)], reps)
    tn_pg, tn_ddp = median_times([pg_step(case, devs), torch_step(case, True)], reps, comm.Barrier)
    out["train"][case] = {"model": cases[case][0],
                          "petagrad_1_rank_steps_s": 1 / t1_pg, "petagrad_n_ranks_steps_s": 1 / tn_pg, "petagrad_speedup": t1_pg / tn_pg,
                          "torch_1_rank_steps_s": 1 / t1_torch, "torch_ddp_n_ranks_steps_s": 1 / tn_ddp, "torch_ddp_speedup": t1_torch / tn_ddp,
                          "petagrad_over_ddp": tn_ddp / tn_pg}
  if rank == 0: print("RESULT " + json.dumps(out), flush=True)
  dist.destroy_process_group()

def main() -> None:
  p = argparse.ArgumentParser()
  p.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
  p.add_argument("--quick", action="store_true")
  p.add_argument("--only", nargs="+", choices=["allreduce", "train"], default=["allreduce", "train"])
  p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  p.add_argument("--port", type=int, default=29577, help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.worker: return worker(args)
  results = []
  for n in args.ranks:
    env = {**os.environ, "THREADS": "1", "OMP_NUM_THREADS": "1", "MPI_TIMEOUT": "900", "PYTHONPATH": ROOT}
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "rtc", "^hwloc", "-np", str(n), sys.executable, os.path.abspath(__file__),
           "--worker", "--port", str(args.port + n), "--only", *args.only] + (["--quick"] if args.quick else [])
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
