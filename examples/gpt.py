#!/usr/bin/env python3
"""Train a small GPT (decoder-only transformer) on text, byte by byte, then sample from it.

The text defaults to CPython's own documentation topics (`pydoc_data/topics.py`, ~465k characters of English
that every Python install has); `--text FILE` trains on any file. Tokens are bytes (vocabulary 256), so there
is no tokenizer to download.

The model is GPT-2's layout at toy size: token + learned position embeddings, pre-LayerNorm blocks of causal
multi-head self-attention and a GELU MLP, a final LayerNorm, and an output projection tied to the token
embedding. Training uses AdamW (no weight decay on biases, norms and embeddings), linear warmup then cosine
decay of the learning rate, and gradient-norm clipping; the whole step runs under TinyJit. Sampling feeds a
fixed window of the last `--seq` bytes (one shape, so it is jitted too) and draws with temperature.

    python examples/gpt.py                    # defaults: a few minutes on 2 cores
    python examples/gpt.py --steps 20 --sample-bytes 64    # CI smoke run
"""
from __future__ import annotations
import argparse, importlib.util, math, os, random, sys, time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # run from a clone without installing
from petagrad import Tensor, nn, dtypes
from petagrad.nn import optim
from petagrad.nn.state import get_state_dict, safe_save
from petagrad.engine.jit import TinyJit

VOCAB = 256

def default_text() -> str:
  """The help texts of pydoc_data/topics.py (read as a module's data, not executed from an arbitrary path)."""
  spec = importlib.util.find_spec("pydoc_data.topics")
  if spec is None or spec.origin is None: raise SystemExit("error: pydoc_data.topics is missing from this Python; pass --text FILE")
  import pydoc_data.topics
  return "\n\n".join(pydoc_data.topics.topics[k] for k in sorted(pydoc_data.topics.topics))

class Block:
  def __init__(self, dim: int, heads: int):
    self.heads = heads
    self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
    self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
    self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
  def attention(self, x: Tensor) -> Tensor:
    B, T, C = x.shape
    q, k, v = self.qkv(x).reshape(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)   # each (B, H, T, D)
    y = q.scaled_dot_product_attention(k, v, is_causal=True)
    return self.proj(y.transpose(1, 2).reshape(B, T, C))
  def __call__(self, x: Tensor) -> Tensor:
    x = x + self.attention(self.ln1(x))
    return x + self.out(self.fc(self.ln2(x)).gelu(approximate="tanh"))

class GPT:
  def __init__(self, layers: int, dim: int, heads: int, seq: int):
    self.seq = seq
    self.tok = nn.Embedding(VOCAB, dim)
    self.pos = nn.Embedding(seq, dim)
    self.tok.weight.assign(self.tok.weight * 0.02)   # GPT-2's init scale (torch's N(0, 1) is too big for a tied head)
    self.pos.weight.assign(self.pos.weight * 0.02)
    self.blocks = [Block(dim, heads) for _ in range(layers)]
    self.ln_f = nn.LayerNorm(dim)
  def __call__(self, idx: Tensor) -> Tensor:
    B, T = idx.shape
    x = self.tok(idx) + self.pos(Tensor.arange(T, device=idx.device)).reshape(1, T, -1)
    for b in self.blocks: x = b(x)
    return self.ln_f(x) @ self.tok.weight.T   # logits (B, T, VOCAB), head tied to the token embedding

def lr_factor(step: int, warmup: int, total: int, floor: float = 0.1) -> float:
  """Linear warmup to 1 over `warmup` steps, then cosine decay to `floor` at `total`."""
  if step < warmup: return (step + 1) / warmup
  t = min(1.0, (step - warmup) / max(1, total - warmup))
  return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * t))

def get_batch(data: bytes, batch: int, seq: int, rng: random.Random) -> Tensor:
  """batch random windows of seq + 1 bytes: (batch, seq + 1) uint8 (inputs are [:, :-1], targets [:, 1:])."""
  starts = [rng.randrange(0, len(data) - seq - 1) for _ in range(batch)]
  return Tensor(b"".join(data[s:s + seq + 1] for s in starts), dtype=dtypes.uint8).reshape(batch, seq + 1)

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  ap.add_argument("--text", default=None, help="a UTF-8 text file to train on (default: Python's pydoc_data/topics.py texts)")
  ap.add_argument("--steps", type=int, default=300, help="training steps")
  ap.add_argument("--batch-size", type=int, default=16)
  ap.add_argument("--seq", type=int, default=64, help="context length in bytes")
  ap.add_argument("--layers", type=int, default=2)
  ap.add_argument("--dim", type=int, default=64, help="model width (bench/train.py times dim 128; petagrad's backward is still slow there)")
  ap.add_argument("--heads", type=int, default=4)
  ap.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
  ap.add_argument("--warmup", type=int, default=None, help="warmup steps (default: 5%% of --steps)")
  ap.add_argument("--weight-decay", type=float, default=0.1)
  ap.add_argument("--clip", type=float, default=1.0, help="clip the gradients' global L2 norm to this")
  ap.add_argument("--eval-every", type=int, default=50, help="print the validation loss every N steps")
  ap.add_argument("--sample-bytes", type=int, default=300, help="bytes to sample after training (0: none)")
  ap.add_argument("--temperature", type=float, default=0.8)
  ap.add_argument("--prompt", default="The ")
  ap.add_argument("--save", default="", help="save the weights to this .safetensors file")
  ap.add_argument("--seed", type=int, default=0)
  args = ap.parse_args()
  if args.dim % args.heads: sys.exit(f"error: --dim {args.dim} is not divisible by --heads {args.heads}")
  warmup = args.warmup if args.warmup is not None else max(1, args.steps // 20)

  t_start = time.perf_counter()
  if args.text:
    with open(args.text, encoding="utf-8", errors="replace") as f: text = f.read()
  else: text = default_text()
  data = text.encode("utf-8")
  n_val = max(len(data) // 10, args.seq + 2)
  train, val = data[:-n_val], data[-n_val:]   # the last 10% is held out
  print(f"text: {len(data):,} bytes ({len(train):,} train, {len(val):,} validation)")

  Tensor.manual_seed(args.seed)
  rng = random.Random(args.seed)
  model = GPT(args.layers, args.dim, args.heads, args.seq)
  sd = get_state_dict(model)
  params = list({id(p): p for p in sd.values() if p.requires_grad}.values())
  decay = [p for p in params if p.ndim >= 2 and p is not model.tok.weight and p is not model.pos.weight]
  no_decay = [p for p in params if all(p is not d for d in decay)]
  print(f"model: {args.layers} layers, dim {args.dim}, {args.heads} heads, context {args.seq}: {sum(p.numel() for p in params):,} parameters")
  opt = optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
  sched = optim.LambdaLR(opt, lambda s: lr_factor(s, warmup, args.steps))

  @TinyJit
  def train_step(xy: Tensor) -> tuple[Tensor, Tensor]:
    with nn.train():
      opt.zero_grad()
      logits = model(xy[:, :-1].int())
      loss = logits.reshape(-1, VOCAB).cross_entropy(xy[:, 1:].reshape(-1).int())
      loss.backward()
      norm = optim.clip_grad_norm_(params, args.clip)
      Tensor.realize_all(loss, norm, *opt.schedule_step())
    return loss, norm

  @TinyJit
  def val_loss(xy: Tensor) -> Tensor:
    return model(xy[:, :-1].int()).reshape(-1, VOCAB).cross_entropy(xy[:, 1:].reshape(-1).int()).realize()

  def evaluate(n_batches: int = 8) -> float:
    vr = random.Random(1234)   # the same validation windows every time
    return sum(val_loss(get_batch(val, args.batch_size, args.seq, vr)).item() for _ in range(n_batches)) / n_batches

  print(f"step 0: validation loss {evaluate():.4f} (uniform over bytes: {math.log(VOCAB):.4f})")
  t_train, recent = time.perf_counter(), []
  for step in range(1, args.steps + 1):
    loss, norm = train_step(get_batch(train, args.batch_size, args.seq, rng))
    recent.append(loss.item())
    sched.step()
    if step % args.eval_every == 0 or step == args.steps or step <= 3:
      dt = time.perf_counter() - t_train
      val_msg = f", validation {evaluate():.4f}" if step % args.eval_every == 0 or step == args.steps else ""
      print(f"step {step}: train loss {sum(recent) / len(recent):.4f}{val_msg}, grad norm {norm.item():.3f}, lr {sched.get_last_lr()[0]:.2e}, "
            f"{step / dt:.2f} steps/s", flush=True)
      recent = []
  print(f"trained {args.steps} steps in {time.perf_counter() - t_train:.1f}s")
  if args.save:
    safe_save(sd, args.save)
    print(f"saved {args.save}")

  if args.sample_bytes > 0:
    @TinyJit
    def next_byte(window: Tensor) -> Tensor:
      logits = model(window.int())[:, -1, :] / args.temperature
      return logits.softmax(-1).multinomial(1).realize()
    ctx = list(args.prompt.encode("utf-8"))
    pad = list(b" " * args.seq)   # a window always holds seq bytes: pad on the left with spaces
    out = bytearray(ctx)
    with nn.eval():
      for _ in range(args.sample_bytes):
        window = (pad + list(out))[-args.seq:]
        out.append(int(next_byte(Tensor(bytes(window), dtype=dtypes.uint8).reshape(1, args.seq)).item()))
    print("--- sample:")
    print(out.decode("utf-8", errors="replace"))
    print("---")
  print(f"total {time.perf_counter() - t_start:.1f}s")

if __name__ == "__main__":
  main()
