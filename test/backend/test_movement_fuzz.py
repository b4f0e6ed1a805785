"""Seeded random chains of movement ops (reshape, permute, expand, pad, shrink, flip, getitem, ...) vs numpy.

Each case builds one chain on an arange, optionally ends it with a reduce, realizes it once and compares every
element: this exercises the view -> index-arithmetic lowering and the symbolic simplifier on odd combinations.
"""
import random
import numpy as np
import pytest
from petagrad import Tensor

def _shape_with_product(rng: random.Random, n: int, k: int) -> tuple[int, ...]:
  dims = []
  for _ in range(k - 1):
    d = rng.choice([d for d in range(1, n + 1) if n % d == 0])
    dims.append(d); n //= d
  dims.append(n); rng.shuffle(dims)
  return tuple(dims)

def _step(rng: random.Random, t: Tensor, a: np.ndarray, log: list[str]):
  op = rng.choice(["reshape", "permute", "expand", "pad", "shrink", "flip", "getitem", "unsqueeze", "squeeze", "elementwise", "T"])
  if op == "reshape":
    shp = _shape_with_product(rng, a.size, rng.randint(1, 4)) if a.size else (0,)
    log.append(f"reshape{shp}"); return t.reshape(shp), a.reshape(shp)
  if op == "permute" and a.ndim:
    p = list(range(a.ndim)); rng.shuffle(p)
    log.append(f"permute{p}"); return t.permute(p), a.transpose(p)
  if op == "T":
    log.append("T"); return t.T, a.T
  if op == "expand":
    ones = [i for i, s in enumerate(a.shape) if s == 1]
    if ones and a.size * 3 <= 200:
      shp = list(a.shape); shp[rng.choice(ones)] = 3
      log.append(f"expand{shp}"); return t.expand(tuple(shp)), np.broadcast_to(a, shp)
  if op == "pad" and a.ndim and a.size < 80:
    pads = [(rng.randint(0, 2), rng.randint(0, 2)) for _ in a.shape]
    log.append(f"pad{pads}"); return t.pad(pads, value=-1), np.pad(a, pads, constant_values=-1)
  if op == "shrink" and a.ndim:
    arg = []
    for s in a.shape:
      b = rng.randint(0, s); arg.append((b, rng.randint(b, s)))
    log.append(f"shrink{arg}"); return t.shrink(arg), a[tuple(slice(b, e) for b, e in arg)]
  if op == "flip" and a.ndim:
    ax = tuple(i for i in range(a.ndim) if rng.random() < 0.5)
    if ax: log.append(f"flip{ax}"); return t.flip(ax), np.flip(a, ax)
  if op == "getitem" and a.ndim:
    idx: list = []
    for s in a.shape:
      if rng.random() < 0.1: idx.append(None)
      if rng.random() < 0.2 and s: idx.append(rng.randint(-s, s - 1))
      else:
        idx.append(slice(rng.choice([None, rng.randint(-s - 1, s + 1)]), rng.choice([None, rng.randint(-s - 1, s + 1)]),
                         rng.choice([1, 2, 3, -1, -2, -3])))
    log.append(f"getitem{tuple(idx)}"); return t[tuple(idx)], a[tuple(idx)]
  if op == "unsqueeze":
    d = rng.randint(0, a.ndim); log.append(f"unsqueeze({d})"); return t.unsqueeze(d), np.expand_dims(a, d)
  if op == "squeeze":
    log.append("squeeze"); return t.squeeze(), a.squeeze()
  if op == "elementwise":
    log.append("*2+1"); return t * 2 + 1, a * 2 + 1
  return t, a

@pytest.mark.parametrize("seed", range(100))
def test_movement_chain(device, seed):
  rng = random.Random(seed)
  n = rng.choice([1, 2, 6, 12, 24, 30, 36, 60])
  dt = rng.choice([np.int32, np.float32])
  a = np.arange(n, dtype=dt).reshape(_shape_with_product(rng, n, rng.randint(1, 3)))
  t, log = Tensor(a), [f"arange{a.shape} {a.dtype}"]
  for _ in range(rng.randint(1, 6)): t, a = _step(rng, t, a, log)
  end = rng.random()
  if end < 0.3 and a.ndim:
    ax = rng.randrange(a.ndim); log.append(f"sum({ax})")
    t, a = t.sum(ax), a.sum(ax, dtype=np.int64 if a.dtype == np.int32 else np.float32)
  elif end < 0.45 and a.ndim and a.shape[0]:
    log.append("max(0)"); t, a = t.max(axis=0), a.max(0)
  elif end < 0.55:
    log.append("contiguous+1"); t, a = t.contiguous() + 1, a + 1
  got = t.numpy()
  assert got.shape == a.shape, " -> ".join(log)
  np.testing.assert_array_equal(got, a, err_msg=" -> ".join(log))
