#!/usr/bin/env python
"""Training steps per second: petagrad vs PyTorch (eager and torch.compile) and tinygrad, side by side in one process.

  python bench/train.py [--quick] [--only CASE ...] [--frameworks NAME ...] [--threads N]

Cases (one step = forward, backward and optimizer update of one batch):
  mlp_sgd    MLP 784-512-512-10 (ReLU), batch 128, cross-entropy, SGD (lr 0.01, momentum 0.9)
  mlp_adam   the same MLP with Adam (lr 1e-3)
  gpt_adamw  GPT: 2 pre-LayerNorm blocks, dim 128, 4 heads, context 64, batch 16, vocabulary 256, causal attention,
             GELU (tanh) MLP, AdamW (lr 3e-4, weight decay 0.01) on every parameter

petagrad and tinygrad run the whole step under their TinyJit; torch runs eagerly and, as `torch.compile`, with the
model compiled by torch.compile (the optimizer step stays eager). Every framework gets the same inputs (a few
random batches, cycled) and the same thread count. Each timed sample runs k steps and then waits for the last one
(reading the loss back to Python), so asynchronous queues cannot hide work. Reported: the median steps/s over the
samples, taken in interleaved rounds like bench/run.py, and petagrad's ratio = petagrad steps/s / peer steps/s,
so >1 means petagrad is faster. Writes bench/results/train.json and bench/results/train.md.
"""
from __future__ import annotations
import argparse, os, sys

def _early_args(argv: list[str]) -> tuple[int, str]:
  p = argparse.ArgumentParser(add_help=False)
  p.add_argument("--threads", type=int, default=2)
  p.add_argument("--omp-wait-policy", default="PASSIVE")
  a = p.parse_known_args(argv)[0]
  return a.threads, a.omp_wait_policy

if __name__ == "__main__":
  _threads, _wait = _early_args(sys.argv[1:])
  os.environ["DEV"] = "CPU"
  for var in ("THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUM_CPU_THREADS"): os.environ[var] = str(_threads)
  # OpenMP threads (torch's; petagrad's only with OMP=1, its own pool backs off by itself) that spin while waiting
  # lose badly on a shared machine; the same policy applies to every framework. --omp-wait-policy "" leaves the
  # OpenMP default.
  if _wait: os.environ["OMP_WAIT_POLICY"] = _wait

import json, math, platform, statistics, time, traceback, datetime
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(1, ROOT)
import numpy as np
import frameworks as F
import machine

def log(*a) -> None: print(*a, file=sys.stderr, flush=True)

# ---------------------------------------------------------------- cases
CASES = {
  "mlp_sgd": "MLP 784-512-512-10, batch 128, SGD momentum 0.9",
  "mlp_adam": "MLP 784-512-512-10, batch 128, Adam",
  "gpt_adamw": "GPT 2 layers, dim 128, 4 heads, seq 64, batch 16, vocab 256, AdamW",
}
MLP_BS, GPT = 128, dict(layers=2, dim=128, heads=4, seq=64, batch=16, vocab=256)
N_BATCHES = 4   # distinct input batches, cycled

def make_data(case: str, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
  if case.startswith("mlp"):
    return [(rng.standard_normal((MLP_BS, 784), dtype=np.float32), rng.integers(0, 10, MLP_BS).astype(np.int32)) for _ in range(N_BATCHES)]
  g = GPT
  out = []
  for _ in range(N_BATCHES):
    tok = rng.integers(0, g["vocab"], (g["batch"], g["seq"] + 1)).astype(np.int32)
    out.append((tok[:, :-1].copy(), tok[:, 1:].copy()))
  return out

# ---- petagrad and tinygrad share an API: one model definition for both
def tg_like_models(Tensor, nn, gelu):
  class MLP:
    def __init__(self): self.l1, self.l2, self.l3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)
    def __call__(self, x): return self.l3(self.l2(self.l1(x).relu()).relu())
  class Block:
    def __init__(self, d, h):
      self.h = h
      self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
      self.qkv, self.proj, self.fc, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def __call__(self, x):
      B, T, C = x.shape
      q, k, v = self.qkv(self.ln1(x)).reshape(B, T, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
      x = x + self.proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(B, T, C))
      return x + self.out(gelu(self.fc(self.ln2(x))))
  class GPTModel:
    def __init__(self, layers, dim, heads, seq, vocab, **_):
      self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
      self.blocks = [Block(dim, heads) for _ in range(layers)]
      self.ln_f, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)
    def __call__(self, idx):
      B, T = idx.shape
      x = self.tok(idx) + self.pos(Tensor.arange(T, device=idx.device)).reshape(1, T, -1)
      for b in self.blocks: x = b(x)
      return self.head(self.ln_f(x))
  return MLP, GPTModel

# ---- the same models in PyTorch
def torch_models(torch):
  tnn, Fn = torch.nn, torch.nn.functional
  def MLP(): return tnn.Sequential(tnn.Linear(784, 512), tnn.ReLU(), tnn.Linear(512, 512), tnn.ReLU(), tnn.Linear(512, 10))
  class Block(tnn.Module):
    def __init__(self, d, h):
      super().__init__()
      self.h = h
      self.ln1, self.ln2 = tnn.LayerNorm(d), tnn.LayerNorm(d)
      self.qkv, self.proj, self.fc, self.out = tnn.Linear(d, 3 * d), tnn.Linear(d, d), tnn.Linear(d, 4 * d), tnn.Linear(4 * d, d)
    def forward(self, x):
      B, T, C = x.shape
      q, k, v = self.qkv(self.ln1(x)).reshape(B, T, 3, self.h, C // self.h).permute(2, 0, 3, 1, 4)
      x = x + self.proj(Fn.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C))
      return x + self.out(Fn.gelu(self.fc(self.ln2(x)), approximate="tanh"))
  class GPTModel(tnn.Module):
    def __init__(self, layers, dim, heads, seq, vocab, **_):
      super().__init__()
      self.tok, self.pos = tnn.Embedding(vocab, dim), tnn.Embedding(seq, dim)
      self.blocks = tnn.ModuleList([Block(dim, heads) for _ in range(layers)])
      self.ln_f, self.head = tnn.LayerNorm(dim), tnn.Linear(dim, vocab, bias=False)
    def forward(self, idx):
      B, T = idx.shape
      x = self.tok(idx) + self.pos(torch.arange(T)).reshape(1, T, -1)
      for b in self.blocks: x = b(x)
      return self.head(self.ln_f(x))
  return MLP, GPTModel

def setup_petagrad(case: str, data):
  from petagrad import Tensor, nn
  from petagrad.nn import optim
  from petagrad.nn.state import get_parameters
  MLP, GPTModel = tg_like_models(Tensor, nn, lambda x: x.gelu(approximate="tanh"))
  Tensor.manual_seed(0)
  model = MLP() if case.startswith("mlp") else GPTModel(**GPT)
  params = get_parameters(model)
  opt = {"mlp_sgd": lambda: optim.SGD(params, lr=0.01, momentum=0.9), "mlp_adam": lambda: optim.Adam(params, lr=1e-3),
         "gpt_adamw": lambda: optim.AdamW(params, lr=3e-4, weight_decay=0.01)}[case]()
  step = petagrad_train_step(model, opt, 10 if case.startswith("mlp") else GPT["vocab"])
  batches = [(Tensor(x).realize(), Tensor(y).realize()) for x, y in data]
  return (lambda i: step(*batches[i % len(batches)])), (lambda loss: loss.item())

def petagrad_train_step(model, opt, vocab: int):
  """A petagrad training step under TinyJit: forward, cross-entropy over `vocab` classes, backward and the optimizer's
  update in one schedule; returns the loss."""
  from petagrad import Tensor, TinyJit, nn
  @TinyJit
  def step(x, y):
    with nn.train():
      opt.zero_grad()
      loss = model(x).reshape(-1, vocab).cross_entropy(y.reshape(-1))
      loss.backward()
      Tensor.realize_all(loss, *opt.schedule_step())
    return loss
  return step

def setup_tinygrad(case: str, data):
  from tinygrad import Tensor, nn, TinyJit, Device
  MLP, GPTModel = tg_like_models(Tensor, nn, lambda x: x.gelu())   # tinygrad's gelu is the tanh form
  Tensor.manual_seed(0)
  model = MLP() if case.startswith("mlp") else GPTModel(**GPT)
  params = nn.state.get_parameters(model)
  opt = {"mlp_sgd": lambda: nn.optim.SGD(params, lr=0.01, momentum=0.9), "mlp_adam": lambda: nn.optim.Adam(params, lr=1e-3),
         "gpt_adamw": lambda: nn.optim.AdamW(params, lr=3e-4, weight_decay=0.01)}[case]()
  vocab = 10 if case.startswith("mlp") else GPT["vocab"]
  from tinygrad.helpers import Context
  @TinyJit
  def step(x, y):
    with Context(TRAINING=1):   # tinygrad 0.14: optimizers step only with TRAINING set (older: Tensor.training)
      opt.zero_grad()
      loss = model(x).reshape(-1, vocab).sparse_categorical_crossentropy(y.reshape(-1))
      loss.backward()
      opt.step()
      return loss.realize()
  batches = [(Tensor(x).contiguous().realize(), Tensor(y).contiguous().realize()) for x, y in data]
  def wait(loss):
    v = loss.item()
    Device["CPU"].synchronize()
    return v
  return (lambda i: step(*batches[i % len(batches)])), wait

def setup_torch(case: str, data, compiled: bool):
  import torch
  import torch.nn.functional as Fn
  torch.manual_seed(0)
  MLP, GPTModel = torch_models(torch)
  model = MLP() if case.startswith("mlp") else GPTModel(**GPT)
  params = list(model.parameters())
  opt = {"mlp_sgd": lambda: torch.optim.SGD(params, lr=0.01, momentum=0.9), "mlp_adam": lambda: torch.optim.Adam(params, lr=1e-3),
         "gpt_adamw": lambda: torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01)}[case]()
  fwd = torch.compile(model) if compiled else model
  vocab = 10 if case.startswith("mlp") else GPT["vocab"]
  batches = [(torch.from_numpy(x), torch.from_numpy(y).long()) for x, y in data]
  def step(i):
    x, y = batches[i % len(batches)]
    opt.zero_grad(set_to_none=True)
    loss = Fn.cross_entropy(fwd(x).reshape(-1, vocab), y.reshape(-1))
    loss.backward()
    opt.step()
    return loss.detach()
  return step, (lambda loss: loss.item())

# ---------------------------------------------------------------- timing
def time_case(case: str, fws: dict, o) -> dict:
  data = make_data(case, np.random.default_rng(0))
  res: dict[str, dict] = {}
  live: dict[str, dict] = {}
  for name, fw in fws.items():
    if fw.get("reason"): res[name] = {"skipped": fw["reason"]}; continue
    r: dict = {}
    try:
      st = time.perf_counter()
      step, wait = fw["setup"](case, data)
      r["setup_s"] = time.perf_counter() - st
      st = time.perf_counter(); first = wait(step(0)); r["first_step_s"] = time.perf_counter() - st
      # warm-up: JITs capture on their second or third call; torch.compile compiles on the first
      wst, i = time.perf_counter(), 1
      while i < 1 + o.warmup or time.perf_counter() - wst < o.warm_s:
        st = time.perf_counter(); wait(step(i)); last = time.perf_counter() - st; i += 1
      r["loss_first"] = first
      k = max(1, min(1000, math.ceil(o.sample_s / max(last, 1e-6))))
      live[name] = {"step": step, "wait": wait, "k": k, "i": i, "samples": [], "loss": None}
      r["steps_per_sample"] = k
    except Exception as e:
      log(f"  {name}: ERROR in setup/first steps\n" + traceback.format_exc())
      r = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    res[name] = r
  names = list(live)
  for rnd in range(o.rounds):
    for name in names[rnd % max(len(names), 1):] + names[:rnd % max(len(names), 1)]:
      s = live[name]
      if "error" in res[name]: continue
      try:
        time.sleep(o.pause)
        s["wait"](s["step"](s["i"])); s["i"] += 1   # an untimed step after switching frameworks
        for _ in range(o.samples_per_round):
          st = time.perf_counter()
          for _ in range(s["k"]): loss = s["step"](s["i"]); s["i"] += 1
          s["loss"] = s["wait"](loss)
          s["samples"].append(s["k"] / (time.perf_counter() - st))
      except Exception as e:
        log(f"  {name}: ERROR while timing\n" + traceback.format_exc())
        res[name] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
  for name, s in live.items():
    if "error" in res[name] or not s["samples"]: continue
    res[name].update({"steps_per_s": statistics.median(s["samples"]), "samples": s["samples"], "steps_total": s["i"], "loss_last": s["loss"]})
    if not math.isfinite(s["loss"]): res[name]["warning"] = f"loss is {s['loss']}"
  return res

def ratios(res: dict) -> dict[str, float]:
  p = res.get("petagrad", {}).get("steps_per_s")
  if not p: return {}
  return {n: p / r["steps_per_s"] for n, r in res.items() if n != "petagrad" and r.get("steps_per_s")}

# ---------------------------------------------------------------- report
def markdown(report: dict) -> str:
  meta = report["meta"]
  names = meta["frameworks"]
  peers = [n for n in names if n != "petagrad"]
  L = ["# petagrad training benchmarks", "",
       f"{meta['date']}, petagrad {meta['git']}, {meta['threads']} threads for every framework, "
       f"OMP_WAIT_POLICY={meta['omp_wait_policy'] or '(default)'}, "
       f"{meta['rounds']} rounds x {meta['samples_per_round']} samples. Load average {meta['load_start']} at the start, {meta['load_end']} at the "
       f"end "
       "(a shared machine: read the ratios, not the absolute numbers).", "",
       "Versions: " + ", ".join(f"{n} {v}" for n, v in meta["versions"].items()) + ".", "",
       "Median training steps per second (forward + backward + optimizer step). Ratio = petagrad steps/s / peer steps/s: **>1 means petagrad is "
       "faster**.", "",
       "| case | " + " | ".join(names) + " | " + " | ".join(f"petagrad / {p}" for p in peers) + " | notes |",
       "|---|" + "---:|" * (len(names) + len(peers)) + "---|"]
  for c in report["cases"]:
    res, rt = c["results"], c["ratios"]
    def cell(r):
      if "steps_per_s" in r: return f"{r['steps_per_s']:.1f}"
      return "skipped" if "skipped" in r else "error" if "error" in r else "-"
    notes = []
    for n in names:
      r = res.get(n, {})
      if "skipped" in r: notes.append(f"{n} skipped: {r['skipped']}")
      if "error" in r: notes.append(f"{n} error: {r['error']}")
      if r.get("warning"): notes.append(f"{n}: {r['warning']}")
    L.append(f"| {c['name']} | " + " | ".join(cell(res.get(n, {})) for n in names) + " | " +
             " | ".join(f"{rt[p]:.2f}x" if p in rt else "-" for p in peers) + f" | {'; '.join(notes)} |")
  L += ["", "First step (compiles; for the JITs also the first of the calls before capture) and the loss of the first and of the last step (random "
            "data: the MLP memorizes its 4 batches):", "",
        "| case | " + " | ".join(f"{n} first step" for n in names) + " | " + " | ".join(f"{n} loss" for n in names) + " |",
        "|---|" + "---:|" * (2 * len(names))]
  for c in report["cases"]:
    res = c["results"]
    fs = [f"{res[n]['first_step_s']:.1f} s" if "first_step_s" in res.get(n, {}) else "-" for n in names]
    ls = [f"{res[n]['loss_first']:.3f} -> {res[n]['loss_last']:.3f} ({res[n]['steps_total']} steps)"
          if res.get(n, {}).get("loss_last") is not None else "-" for n in names]
    L.append(f"| {c['name']} | " + " | ".join(fs) + " | " + " | ".join(ls) + " |")
  return "\n".join(L) + "\n"

FRAMEWORKS = ["petagrad", "torch", "torch.compile", "tinygrad"]

def load_frameworks(names: list[str], threads: int) -> tuple[dict, dict]:
  base = F.load(sorted({"torch" if n.startswith("torch") else n for n in names}), threads)
  fws, versions = {}, {}
  for n in names:
    b = base["torch" if n.startswith("torch") else n]
    fw = {"reason": b.reason}
    if not b.reason: versions[n] = b.version
    if n == "petagrad": fw["setup"] = setup_petagrad
    elif n == "tinygrad": fw["setup"] = setup_tinygrad
    elif n == "torch": fw["setup"] = lambda c, d: setup_torch(c, d, False)
    elif n == "torch.compile":
      fw["setup"] = lambda c, d: setup_torch(c, d, True)
      if not b.reason:
        try:   # fail early and say why when inductor cannot compile here (no C++ compiler, offline, ...)
          import torch
          f = torch.compile(lambda x: (x * 2).sum())
          f(torch.ones(4))
          versions[n] = f"{b.version} (inductor)"
        except Exception as e:
          fw["reason"] = f"torch.compile failed: {type(e).__name__}: {e}".splitlines()[0][:300]
          versions.pop(n, None)
    fws[n] = fw
  return fws, versions

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", help="shorter samples (about 5 minutes on 2 cores with every framework)")
  ap.add_argument("--only", nargs="+", metavar="CASE", choices=list(CASES), help="cases to run")
  ap.add_argument("--frameworks", nargs="+", default=FRAMEWORKS, choices=FRAMEWORKS)
  ap.add_argument("--threads", type=int, default=2, help="threads for every framework (default 2)")
  ap.add_argument("--omp-wait-policy", default="PASSIVE", help="OMP_WAIT_POLICY for every framework ('' = the OpenMP default)")
  ap.add_argument("--out", default=os.path.join(HERE, "results"), help="folder for train.json and train.md")
  o = ap.parse_args()
  o.rounds, o.samples_per_round = 3, (1 if o.quick else 3)
  o.warmup, o.warm_s = 3, (0.5 if o.quick else 2.0)
  o.sample_s = 1.0 if o.quick else 2.0
  o.pause = 0.2
  load_start = machine.loadavg()
  fws, versions = load_frameworks(o.frameworks, o.threads)
  for n, fw in fws.items():
    if fw.get("reason"): log(f"bench: {n} unavailable: {fw['reason']}")
  report: dict = {"meta": {}, "cases": []}
  for case in (o.only or list(CASES)):
    log(f"bench: {case}: {CASES[case]}")
    st, l0 = time.perf_counter(), machine.loadavg()
    res = time_case(case, fws, o)
    rt = ratios(res)
    report["cases"].append({"name": case, "desc": CASES[case], "results": res, "ratios": rt, "load_before": l0, "load_after": machine.loadavg(),
                            "wall_s": time.perf_counter() - st})
    log("  " + "  ".join(f"{n}={r['steps_per_s']:.1f} steps/s" if "steps_per_s" in r else f"{n}={'skipped' if 'skipped' in r else 'error'}"
                         for n, r in res.items()) +
        "  | petagrad/" + " ".join(f"{p} {x:.2f}x" for p, x in rt.items()) + f"  ({time.perf_counter() - st:.0f} s)")
  versions["python"] = platform.python_version()
  report["meta"] = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "git": machine.git_rev(), "quick": o.quick, "threads": o.threads,
                    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "rounds": o.rounds, "samples_per_round": o.samples_per_round,
                    "frameworks": o.frameworks, "versions": versions, "unavailable": {n: fw["reason"] for n, fw in fws.items() if fw.get("reason")},
                    "load_start": load_start, "load_end": machine.loadavg(), "argv": sys.argv[1:]}
  os.makedirs(o.out, exist_ok=True)
  with open(os.path.join(o.out, "train.json"), "w") as f: f.write(json.dumps(report, indent=1) + "\n")
  md = markdown(report)
  with open(os.path.join(o.out, "train.md"), "w") as f: f.write(md)
  print(json.dumps(report, indent=1))
  log("\n" + md)

if __name__ == "__main__":
  main()
