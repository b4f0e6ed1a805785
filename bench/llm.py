#!/usr/bin/env python
"""LLM inference: petagrad's Llama next to transformers' LlamaForCausalLM on PyTorch (eager, and torch.compile with
--compile), in one process, on the same random weights (a ~100M-parameter LLaMA shape), the same threads.

  python bench/llm.py [--threads 2] [--quick] [--compile]     # prints JSON; writes bench/results/llm.json

Measured for each: prefill tokens/s (a --prompt-token prompt at start_pos 0) and decode tokens/s (greedy, --new
tokens, batch 1, through the KV cache), the fastest of 3 runs after a warm-up run: petagrad's `generate` (one TinyJit
capture at a Variable position, kept on the model: the timed runs replay the capture the warm-up made); transformers'
model called with its past_key_values, one token per call. petagrad runs float32, bfloat16 (stored and computed) and
Q8_0 (every linear layer's weight kept as ggml Q8_0 blocks, decoded inside the matrix-vector kernels) and Q8_0 with
int8 activations (q8_0_a8: the decode step's activations quantized to Q8_0 blocks too, as llama.cpp does on CPUs, and
each block's int8 products summed in int32); transformers float32. Bandwidth: the bytes a decode step must read (every
linear weight once, the token's embedding row, and the KV cache) per second, next to the machine's read bandwidth
(bench/machine.py, measured right before and right after that row's runs, the faster kept), for the whole decode and
for the fastest and the median single step of petagrad's timed runs. Ratios (> 1: petagrad faster). The greedy tokens
of float32 petagrad and transformers are compared too.
"""
from __future__ import annotations
import argparse, os, sys, tempfile, time

def _args() -> argparse.Namespace:
  p = argparse.ArgumentParser()
  p.add_argument("--threads", type=int, default=2)
  p.add_argument("--quick", action="store_true", help="a 2-layer model and fewer tokens")
  p.add_argument("--compile", action="store_true", help="also torch.compile (inductor compiles C++: minutes the first time)")
  p.add_argument("--prompt-tokens", type=int, default=64)
  p.add_argument("--new", type=int, default=32)
  return p.parse_args()

ARGS = _args() if __name__ == "__main__" else None
if ARGS is not None: os.environ["THREADS"] = str(ARGS.threads)   # petagrad reads it when its CPU device starts
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

CONFIG = dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=12,
              num_key_value_heads=12, max_position_embeddings=1024, tie_word_embeddings=False)

def hf_model(layers: int, folder: str):
  import torch, transformers
  torch.manual_seed(0)
  cfg = transformers.LlamaConfig(**{**CONFIG, "num_hidden_layers": layers})
  model = transformers.LlamaForCausalLM(cfg).eval()
  model.save_pretrained(folder, safe_serialization=True)
  return model

def torch_run(model, prompt: list[int], new: int) -> tuple[float, float, list[int]]:
  """(prefill seconds, decode seconds for new - 1 steps, greedy tokens), eager through past_key_values."""
  import torch
  with torch.inference_mode():
    ids = torch.tensor([prompt])
    st = time.perf_counter(); out = model(ids, use_cache=True); t_pre = time.perf_counter() - st
    past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
    toks = [int(tok)]
    st = time.perf_counter()
    for _ in range(new - 1):
      out = model(tok, past_key_values=past, use_cache=True)
      past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
      toks.append(int(tok))
    return t_pre, time.perf_counter() - st, toks

STEPS: list[float] = []   # every timed decode step of petagrad's current kind (seconds), for the per-step spread

def petagrad_run(model, prompt: list[int], new: int) -> tuple[float, float, list[int]]:
  """(prefill seconds, decode seconds for new - 1 steps, greedy tokens) through generate (jitted decode). The model keeps
  its KV cache between runs (the prefill overwrites the prompt's positions), so a run after the first replays the
  decode capture generate() keeps on the model, as a user's second call does: no eager or capture step is timed."""
  from petagrad.models.generate import generate
  toks, stamps = [], []
  st = time.perf_counter()
  for t in generate(model, prompt, new):
    toks.append(t); stamps.append(time.perf_counter())
  STEPS.extend(b - a for a, b in zip(stamps, stamps[1:]))
  return stamps[0] - st, stamps[-1] - stamps[0], toks

RUNS = 3

def _best(run) -> tuple[float, float, list[int]]:
  """The fastest prefill and the fastest decode of RUNS runs (a shared machine only ever makes a run slower), and the
  tokens (the same every run)."""
  runs = [run() for _ in range(RUNS)]
  return min(r[0] for r in runs), min(r[1] for r in runs), runs[0][2]

def decode_bytes(model, kind: str, context: int) -> int:
  """Bytes one decode step reads: each linear weight (at its storage size, the output projection included), the token's
  embedding row, and the KV cache's first `context` positions (attention reads the positions written so far: a symbolic
  size; the caller passes the mean over the decode)."""
  cfg = model.config
  D, F, L, V = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.vocab_size
  hd, kvh = D // cfg.num_attention_heads, cfg.kv_heads
  linear = L * (D * cfg.num_attention_heads * hd + 2 * D * kvh * hd + cfg.num_attention_heads * hd * D + 3 * D * F) + D * V
  per = {"float32": 4.0, "bfloat16": 2.0}.get(kind, 34 / 32)
  emb = D * (2 if kind == "bfloat16" else 4)
  kv = L * 2 * kvh * context * hd * (2 if kind == "bfloat16" else 4)
  return int(linear * per + emb + kv)

def main() -> None:
  import torch
  from petagrad import dtypes
  from petagrad.models.llama import Llama
  from petagrad.models import quant
  import machine
  args = ARGS
  torch.set_num_threads(args.threads)
  layers, new, n_prompt = (2, 8, 16) if args.quick else (CONFIG["num_hidden_layers"], args.new, args.prompt_tokens)
  prompt = np.random.default_rng(0).integers(0, CONFIG["vocab_size"], n_prompt).tolist()
  context = n_prompt + new
  out: dict = {"threads": args.threads, "config": {**CONFIG, "num_hidden_layers": layers}, "prompt_tokens": n_prompt, "new_tokens": new}
  read_bw = machine.ReadBandwidth()   # measured again next to each petagrad row's runs
  with tempfile.TemporaryDirectory() as folder:
    hf = hf_model(layers, folder)
    out["parameters"] = sum(p.numel() for p in hf.parameters())
    torch_run(hf, prompt, 3)   # warm up
    t_pre, t_dec, ref_toks = _best(lambda: torch_run(hf, prompt, new))
    rows = {"torch_eager_float32": {"prefill_tok_s": n_prompt / t_pre, "decode_tok_s": (new - 1) / t_dec}}
    if args.compile:
      try:
        comp = torch.compile(hf)
        torch_run(comp, prompt, 3); torch_run(comp, prompt, new)
        t_pre, t_dec, _ = _best(lambda: torch_run(comp, prompt, new))
        rows["torch_compile_float32"] = {"prefill_tok_s": n_prompt / t_pre, "decode_tok_s": (new - 1) / t_dec}
      except Exception as e: rows["torch_compile_float32"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    for kind in ("float32", "bfloat16", "q8_0", "q8_0_a8"):
      print(f"petagrad {kind}", file=sys.stderr, flush=True)
      model = Llama.from_pretrained(folder, dtype=dtypes.bfloat16 if kind == "bfloat16" else None, max_context=context).realize_weights()
      if kind.startswith("q8_0"): quant.quantize_linears(model, "q8_0", int8_activations=kind == "q8_0_a8")
      petagrad_run(model, prompt, new)   # compiles (cached on disk for later runs) and captures the decode step
      STEPS.clear()
      before = read_bw()
      t_pre, t_dec, toks = _best(lambda m=model: petagrad_run(m, prompt, new))
      near = max(before, read_bw())
      steps = sorted(STEPS)
      row = {"prefill_tok_s": n_prompt / t_pre, "decode_tok_s": (new - 1) / t_dec,
             "decode_bytes_per_token": decode_bytes(model, kind, n_prompt + new // 2)}
      row["decode_gb_s"] = row["decode_bytes_per_token"] * row["decode_tok_s"] / 1e9
      # the same bytes over one step: the fastest step, and the median one (the shared machine's noise is in the spread)
      row["decode_best_step_gb_s"] = row["decode_bytes_per_token"] / steps[0] / 1e9
      row["decode_median_step_gb_s"] = row["decode_bytes_per_token"] / steps[len(steps) // 2] / 1e9
      row["read_gb_s_near"] = near
      if kind == "float32": row["same_greedy_tokens_as_torch"] = toks == ref_toks
      rows[f"petagrad_{kind}"] = row
      del model
  out["machine_read_gb_s"] = read_bw()   # (once more at the end, for the record)
  eager = rows["torch_eager_float32"]
  for name, row in rows.items():
    if name.startswith("petagrad") and "decode_tok_s" in row:
      row["decode_over_torch_eager"] = row["decode_tok_s"] / eager["decode_tok_s"]
      row["prefill_over_torch_eager"] = row["prefill_tok_s"] / eager["prefill_tok_s"]
      # (over the read bandwidth measured right before and after this row's runs: the faster of the two)
      bw = row["read_gb_s_near"]
      row["decode_share_of_read_bandwidth"] = row["decode_gb_s"] / bw
      row["best_step_share_of_read_bandwidth"] = row["decode_best_step_gb_s"] / bw
      row["median_step_share_of_read_bandwidth"] = row["decode_median_step_gb_s"] / bw
  out["results"] = rows
  machine.save_results(out, "llm.json")

if __name__ == "__main__":
  main()
