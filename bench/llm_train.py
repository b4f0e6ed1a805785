#!/usr/bin/env python
"""LLaMA training throughput: petagrad next to transformers' LlamaForCausalLM on PyTorch (eager, and torch.compile), in
one process, the same model shape (examples/llama_train.py's default: bytes vocabulary, 4 layers, hidden 256, 8 heads,
4 KV heads, SwiGLU 768), the same batches (16 x 128 tokens), the same threads.

  python bench/llm_train.py [--threads 2] [--steps 10] [--no-compile] [--quick]    # JSON; writes bench/results/llm_train.json

One training step: forward, cross-entropy over every position, backward, gradient clipping (norm 1.0) and AdamW, as
each framework's users write it: petagrad's whole step under TinyJit (float32; bfloat16 weights and activations with
float32 master weights; float32 with activation checkpointing), torch's with optimizer.step() (float32; bfloat16
under torch.autocast, float32 weights). Reported: training tokens/s (best of two timed stretches of --steps steps after
warm-up) and each row over torch eager float32 (> 1: faster).
"""
from __future__ import annotations
import argparse, os, sys, time

def _args() -> argparse.Namespace:
  p = argparse.ArgumentParser()
  p.add_argument("--threads", type=int, default=2)
  p.add_argument("--steps", type=int, default=10, help="timed steps per stretch")
  p.add_argument("--no-compile", action="store_true", help="skip torch.compile (inductor builds C++: a few minutes the first time)")
  p.add_argument("--quick", action="store_true", help="a 2-layer model, 3 timed steps")
  return p.parse_args()

ARGS = _args() if __name__ == "__main__" else None
if ARGS is not None: os.environ["THREADS"] = str(ARGS.threads)   # petagrad reads it when its CPU device starts
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

CONFIG = dict(vocab_size=256, hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4,
              max_position_embeddings=128)
BATCH, SEQ = 16, 128

def _timed(step, batches: list, steps: int) -> float:
  """Tokens/s: the best of two stretches of `steps` steps (a shared machine only ever makes a stretch slower)."""
  best = 0.0
  for _ in range(2):
    st = time.perf_counter()
    for i in range(steps): step(batches[i % len(batches)])
    best = max(best, steps * BATCH * SEQ / (time.perf_counter() - st))
  return best

def torch_rows(batches: list[np.ndarray], steps: int, compile_too: bool) -> dict:
  import torch, transformers
  out = {}
  def make(bf16: bool, compiled: bool):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG)).train()
    fwd = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    def step(b: np.ndarray) -> float:
      x = torch.from_numpy(b)
      opt.zero_grad(set_to_none=True)
      with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = fwd(x[:, :-1]).logits
      loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), x[:, 1:].flatten())
      loss.backward()
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      opt.step()
      return loss.item()
    return step
  for name, bf16, compiled in (("torch_eager_float32", False, False), ("torch_eager_bfloat16_autocast", True, False),
                               ("torch_compile_float32", False, True)):
    if compiled and not compile_too: continue
    print(name, file=sys.stderr, flush=True)
    try:
      step = make(bf16, compiled)
      for b in batches[:2]: step(b)   # warm up (torch.compile compiles here)
      out[name] = {"tokens_s": _timed(step, batches, steps)}
    except Exception as e: out[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
  return out

def petagrad_rows(batches: list[np.ndarray], steps: int) -> dict:
  from petagrad import Tensor, nn
  from petagrad.engine.jit import TinyJit
  from petagrad.helpers import GlobalCounters
  from petagrad.models.llama import Llama, LlamaConfig
  out = {}
  for name, dtype, ck in (("petagrad_float32", "float32", False), ("petagrad_bfloat16", "bfloat16", False),
                          ("petagrad_float32_checkpointed", "float32", True)):
    print(name, file=sys.stderr, flush=True)
    Tensor.manual_seed(0)
    model = Llama(LlamaConfig(**CONFIG), dtype=dtype, max_context=SEQ).realize_weights()
    opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    @TinyJit
    def jstep(x: Tensor) -> Tensor:
      with nn.train():
        opt.zero_grad()
        loss = model.forward(x[:, :-1], checkpoint=ck).float().flatten(0, 1).cross_entropy(x[:, 1:].flatten())
        loss.backward()
        nn.optim.clip_grad_norm_(opt.params, 1.0)
        Tensor.realize_all(loss, *opt.schedule_step())
      return loss
    def step(b: np.ndarray) -> float: return jstep(Tensor(b)).item()
    for b in batches[:3]: step(b)   # warm up: compile, capture
    base = GlobalCounters.mem_used
    GlobalCounters.reset()
    out[name] = {"tokens_s": _timed(step, batches, steps), "peak_step_memory_mb": round((GlobalCounters.mem_peak - base) / 1e6, 1)}
  return out

def main() -> None:
  import torch
  import machine
  args = ARGS
  torch.set_num_threads(args.threads)
  steps = 3 if args.quick else args.steps
  if args.quick: CONFIG["num_hidden_layers"] = 2
  rng = np.random.default_rng(0)
  batches = [rng.integers(0, CONFIG["vocab_size"], (BATCH, SEQ + 1)).astype(np.int64) for _ in range(4)]
  rows = torch_rows(batches, steps, not args.no_compile)
  rows.update(petagrad_rows(batches, steps))
  eager = rows["torch_eager_float32"]["tokens_s"]
  for row in rows.values():
    if "tokens_s" in row: row["over_torch_eager_float32"] = round(row["tokens_s"] / eager, 3)
  machine.save_results({"threads": args.threads, "config": CONFIG, "batch": BATCH, "seq": SEQ, "steps": steps, "load": machine.loadavg(),
                        "results": rows}, "llm_train.json")

if __name__ == "__main__":
  main()
