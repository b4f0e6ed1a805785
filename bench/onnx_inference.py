#!/usr/bin/env python
"""ONNX inference: petagrad.onnx next to onnxruntime and PyTorch, in one process, on the same model file and inputs.

  python bench/onnx_inference.py [--threads 2] [--quick]      # prints JSON; writes bench/results/onnx.json

Cases (each a PyTorch module exported with torch.onnx.export(dynamo=False), eval mode, random weights):
  resnet_b1, resnet_b16   a ResNet-style CNN (stem conv 3->32 stride 2 + BatchNorm + ReLU + max pool, 4 residual blocks
                          of two 3x3 convs with BatchNorm at 32 and 64 channels, global average pool, linear 64->10)
                          on 3x64x64 images, batch 1 and 16
  bert_b8                 a BERT-style encoder: 2 nn.TransformerEncoderLayer (dim 128, 4 heads, MLP 512, GELU),
                          batch 8, 64 tokens
petagrad runs the model under TinyJit (after one eager call that remembers the static shape values, docs/onnx.md), where
ONNX_WINO's default runs its 3x3 convolutions as Winograd F(4x4, 3x3) (ONNX_WINO=0 in the environment: the direct ones);
onnxruntime runs an InferenceSession with intra_op_num_threads = --threads (and inter_op 1, sequential), all graph
optimizations on; PyTorch runs the module itself in eval mode under torch.inference_mode() with
torch.set_num_threads(--threads). petagrad's THREADS is set to --threads too. Reported: the median time of one
inference for each (the three take turns, 5 inferences each, the first not timed and 0.1 s after the previous one's
last, so that neither the machine's drift nor the previous framework's spinning threads get into the ratios), and
the ratios peer time / petagrad time (>1: petagrad is faster). Results are checked against
onnxruntime once.
"""
from __future__ import annotations
import argparse, io, os, sys, warnings

def _args() -> argparse.Namespace:
  p = argparse.ArgumentParser()
  p.add_argument("--threads", type=int, default=2)
  p.add_argument("--quick", action="store_true")
  p.add_argument("--only", nargs="+", default=None)
  return p.parse_args()

ARGS = _args() if __name__ == "__main__" else None
if ARGS is not None:
  os.environ["THREADS"] = str(ARGS.threads)   # petagrad reads it when its CPU device starts

import numpy as np  # noqa: E402

def models(torch):
  nn = torch.nn
  class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
      super().__init__()
      self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
      self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
      self.skip = nn.Sequential() if stride == 1 and cin == cout else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
    def forward(self, x): return torch.relu(self.skip(x) + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))
  class ResNet(nn.Module):
    def __init__(self):
      super().__init__()
      self.stem = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2))
      self.blocks = nn.Sequential(Block(32, 32, 1), Block(32, 32, 1), Block(32, 64, 2), Block(64, 64, 1))
      self.fc = nn.Linear(64, 10)
    def forward(self, x): return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))
  class Bert(nn.Module):
    def __init__(self):
      super().__init__()
      self.layers = nn.ModuleList([nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, activation="gelu", batch_first=True) for _ in range(2)])
    def forward(self, x):
      for layer in self.layers: x = layer(x)
      return x
  return {"resnet_b1": (ResNet, (1, 3, 64, 64)), "resnet_b16": (ResNet, (16, 3, 64, 64)), "bert_b8": (Bert, (8, 64, 128))}

def run_case(name: str, make, shape: tuple, threads: int, reps: int) -> dict:
  import torch, onnxruntime as ort
  import petagrad.onnx
  from machine import median_times
  from petagrad import Tensor, TinyJit
  torch.manual_seed(0)
  module = make().eval()
  for m in module.modules():   # BatchNorm with statistics that are not the identity
    if isinstance(m, torch.nn.BatchNorm2d):
      m.running_mean.uniform_(-0.5, 0.5); m.running_var.uniform_(0.5, 1.5)
  x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
  buf = io.BytesIO()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(module, (torch.from_numpy(x),), buf, input_names=["x"], output_names=["y"], dynamo=False)
  data = buf.getvalue()
  # onnxruntime
  so = ort.SessionOptions()
  so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
  sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
  want = sess.run(None, {"x": x})[0]
  xt = torch.from_numpy(x)
  # petagrad: one eager call (remembers static shape values), then TinyJit
  model = petagrad.onnx.load(data)
  model(x=x)["y"].realize()
  step = TinyJit(lambda t: model(x=t)["y"].realize())
  xp = Tensor(x).realize()
  got = step(xp).numpy()
  def run_torch():
    with torch.inference_mode(): module(xt)
  # the three take turns in blocks of 5 calls (the shared machine's speed drifts); petagrad's result is read back: the
  # others return host arrays
  t_ort, t_torch, t_pg = median_times([lambda: sess.run(None, {"x": x}), run_torch, lambda: step(xp).numpy()], reps, warmup=3, block=5, settle=0.1)
  err = float(np.max(np.abs(got - want)) / max(1e-6, float(np.max(np.abs(want)))))
  return {"case": name, "input": list(shape), "petagrad_ms": t_pg * 1e3, "onnxruntime_ms": t_ort * 1e3, "torch_ms": t_torch * 1e3,
          "petagrad_over_onnxruntime": t_ort / t_pg, "petagrad_over_torch": t_torch / t_pg, "max_rel_error_vs_onnxruntime": err}

def main() -> None:
  import torch
  import machine
  args = ARGS
  torch.set_num_threads(args.threads)
  cases = models(torch)
  out = {"threads": args.threads, "results": []}
  for name, (make, shape) in cases.items():
    if args.only and name not in args.only: continue
    print(f"running {name}", file=sys.stderr, flush=True)
    try: out["results"].append(run_case(name, make, shape, args.threads, 5 if args.quick else 20))
    except Exception as e: out["results"].append({"case": name, "error": f"{type(e).__name__}: {e}"})
  machine.save_results(out, "onnx.json")

if __name__ == "__main__":
  main()
