#!/usr/bin/env python
"""Several CPU devices in one process (docs/multi.md, "Several CPU devices in one process"): a data-parallel training
step over CPU:0 and CPU:1 with each device's launches on a thread of its own (CPU_ASYNC=1) against the same step one
launch after the other (CPU_ASYNC=0), against one device, and against PyTorch eager on one process, side by side in
one process on the same machine.

  python bench/cpu_devices.py [--quick] [--threads N] [--only CASE ...]   # prints JSON, writes bench/results/cpu_devices.json

Cases: bench/train.py's models and inputs (MLP 784-512-512-10 with Adam, batch 128; GPT 2 layers, dim 128, AdamW,
batch 16); `mlp_bn`: the MLP with BatchNorm after each hidden layer (its statistics are summed over the devices in the
forward and backward passes: the devices wait for each other in every layer). Every petagrad step runs under TinyJit;
the data-parallel ones hold the weights on both devices (`to_`) and split each batch (`shard`, axis 0). Each timed
call runs one step and reads its loss back. Reported: median seconds per step over interleaved calls (bench/machine.py
median_times) and the ratios async / sync (>1: the devices side by side are faster), 2 devices / 1 device, petagrad
2 devices (async) / torch eager.
"""
from __future__ import annotations
import argparse, os, sys

if __name__ == "__main__":
  _threads = argparse.ArgumentParser(add_help=False)
  _threads.add_argument("--threads", type=int, default=2)
  _n = _threads.parse_known_args(sys.argv[1:])[0].threads
  os.environ["DEV"] = "CPU"
  for var in ("THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"): os.environ[var] = str(_n)

import datetime
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))
import numpy as np
import machine
from train import GPT, make_data, petagrad_train_step, tg_like_models, torch_models

DEVS = ("CPU:0", "CPU:1")
CASES = {"mlp_adam": "MLP 784-512-512-10, batch 128, Adam", "mlp_bn": "the MLP with BatchNorm1d after each hidden layer, Adam",
         "gpt_adamw": "GPT 2 layers, dim 128, 4 heads, seq 64, batch 16, vocab 256, AdamW"}

def petagrad_step(case: str, data, devices: tuple[str, ...] | None):
  from petagrad import Tensor, nn
  from petagrad.nn import optim
  from petagrad.nn.state import get_parameters
  MLP, GPTModel = tg_like_models(Tensor, nn, lambda x: x.gelu(approximate="tanh"))
  Tensor.manual_seed(0)
  if case == "mlp_bn":
    class MLPBN:
      def __init__(self):
        self.l1, self.b1, self.l2 = nn.Linear(784, 512), nn.BatchNorm(512), nn.Linear(512, 512)
        self.b2, self.l3 = nn.BatchNorm(512), nn.Linear(512, 10)
      def __call__(self, x): return self.l3(self.b2(self.l2(self.b1(self.l1(x)).relu())).relu())
    model = MLPBN()
  else: model = MLP() if case.startswith("mlp") else GPTModel(**GPT)
  state = nn.state.get_state_dict(model)
  if devices:
    for t in state.values(): t.to_(devices)
  params = get_parameters(model)
  opt = optim.AdamW(params, lr=3e-4, weight_decay=0.01) if case == "gpt_adamw" else optim.Adam(params, lr=1e-3)
  step = petagrad_train_step(model, opt, GPT["vocab"] if case == "gpt_adamw" else 10)
  batches = [(Tensor(x), Tensor(y)) for x, y in data]
  if devices: batches = [(x.shard(devices, 0), y.shard(devices, 0)) for x, y in batches]
  batches = [(x.realize(), y.realize()) for x, y in batches]
  i = [0]
  def run() -> float:
    i[0] += 1
    return step(*batches[i[0] % len(batches)]).item()
  return run

def torch_step(case: str, data):
  import torch
  import torch.nn.functional as Fn
  torch.manual_seed(0)
  MLP, GPTModel = torch_models(torch)
  tnn = torch.nn
  if case == "mlp_bn": model = tnn.Sequential(tnn.Linear(784, 512), tnn.BatchNorm1d(512), tnn.ReLU(), tnn.Linear(512, 512), tnn.BatchNorm1d(512),
                                              tnn.ReLU(), tnn.Linear(512, 10))
  else: model = MLP() if case.startswith("mlp") else GPTModel(**GPT)
  opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01) if case == "gpt_adamw" else torch.optim.Adam(model.parameters(), lr=1e-3)
  vocab = GPT["vocab"] if case == "gpt_adamw" else 10
  batches = [(torch.from_numpy(x), torch.from_numpy(y).long()) for x, y in data]
  i = [0]
  def run() -> float:
    i[0] += 1
    x, y = batches[i[0] % len(batches)]
    opt.zero_grad(set_to_none=True)
    loss = Fn.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
    loss.backward()
    opt.step()
    return loss.item()
  return run

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", help="fewer timed steps")
  ap.add_argument("--threads", type=int, default=2, help="threads for every configuration (THREADS; torch.set_num_threads)")
  ap.add_argument("--only", nargs="+", choices=list(CASES), default=list(CASES))
  o = ap.parse_args()
  import torch
  from petagrad.helpers import Context
  torch.set_num_threads(o.threads)
  reps = 15 if o.quick else 40
  out: dict = {"meta": {"date": datetime.datetime.now().isoformat(timespec="seconds"), "git": machine.git_rev(), "threads": o.threads,
                        "devices": list(DEVS), "reps": reps}, "cases": []}
  for case in o.only:
    data = make_data("gpt_adamw" if case == "gpt_adamw" else "mlp_adam", np.random.default_rng(0))
    one, two, ref = petagrad_step(case, data, None), petagrad_step(case, data, DEVS), torch_step(case, data)
    def with_async(fn, flag: int):
      def run():
        with Context(CPU_ASYNC=flag): return fn()
      return run
    names = ["petagrad_1_device", "petagrad_2_devices_sync", "petagrad_2_devices_async", "torch_eager"]
    times = machine.median_times([with_async(one, 1), with_async(two, 0), with_async(two, 1), ref], reps)
    t = dict(zip(names, times))
    out["cases"].append({"name": case, "desc": CASES[case], "seconds_per_step": t, "ratios": {
      "async_over_sync": t["petagrad_2_devices_sync"] / t["petagrad_2_devices_async"],
      "2_devices_async_over_1_device": t["petagrad_1_device"] / t["petagrad_2_devices_async"],
      "petagrad_2_devices_async_over_torch": t["torch_eager"] / t["petagrad_2_devices_async"]}})
    print(f"{case}: " + "  ".join(f"{n} {v * 1e3:.2f} ms" for n, v in t.items()), file=sys.stderr, flush=True)
  machine.save_results(out, "cpu_devices.json")

if __name__ == "__main__":
  main()
