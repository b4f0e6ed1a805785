#!/usr/bin/env python
"""The first minute on a real GPU: a few kernels checked exactly, printing what went wrong where, so one scarce GPU
run tells how to fix a failure (bench/gpu_check.sh runs this before the test suites).

  DEV=CUDA python bench/gpu_smoke.py      (also runs on PYTHON:GPU or CL, where it should print only "ok" lines)

1. an elementwise add and a sum (launch geometry, 16-byte vector loads, grouped reductions);
2. a float32 matmul (the register-tiled GPU kernel);
3. tensor cores, one 16 x 8 tile of float16 and bfloat16: I @ B must give B exactly (small integers). Each of the
   tile's 128 outputs holds its own number, so a wrong fragment layout prints as a permutation: the tile as computed,
   next to the one expected (codegen/tensor_core.py has the layouts, from PTX's ISA);
4. the tile times a matrix of 16 distinct rows, which shows a wrong A layout the identity cannot.
Exits 1 if anything is off.
"""
from __future__ import annotations
import os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from petagrad import Tensor, Device, dtypes
import petagrad.engine.realize as R

def check(name: str, fn, expected: np.ndarray) -> bool:
  """Run fn(), compare with expected exactly; print "ok" or where it differs (a small result as a whole)."""
  before = set(R._kernel_cache)
  try: got = fn().float().numpy()
  except Exception as e:
    print(f"FAIL {name}: {type(e).__name__}: {e}")
    return False
  opts = [str(ck.opts) for k, ck in R._kernel_cache.items() if k not in before]
  bad = np.argwhere(got != expected)
  if not len(bad):
    print(f"ok   {name}  {opts}")
    return True
  print(f"FAIL {name}: {len(bad)} of {got.size} values differ, first at {bad[:8].tolist()}  {opts}")
  if got.size <= 256:
    np.set_printoptions(linewidth=200)
    print("  got:\n", got.astype(np.int64) if np.all(np.isfinite(got)) else got, "\n  expected:\n", expected.astype(np.int64))
  return False

def main() -> int:
  dev = Device.DEFAULT
  print(f"device {dev}: {getattr(Device[dev].allocator, 'ctx', None) and Device[dev].allocator.ctx.label}")
  ok = True
  n = 1 << 20
  a = np.arange(n, dtype=np.float32) % 1000
  ok &= check("add 2**20 floats", lambda: Tensor(a) + Tensor(a[::-1].copy()), a + a[::-1])
  s = a % 16   # (every partial sum an integer below 2**24: exact in any order of the additions)
  ok &= check("sum 2**20 small ints", lambda: Tensor(s).sum(), np.array(s.sum(), np.float32))
  x, y = (np.arange(64 * 64, dtype=np.float32).reshape(64, 64) % 7), (np.arange(64 * 32, dtype=np.float32).reshape(64, 32) % 5)
  ok &= check("float32 matmul 64 x 64 @ 64 x 32", lambda: Tensor(x) @ Tensor(y), x @ y)
  b = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)           # 0..127: exact in float16 and bfloat16
  rows = np.zeros((16, 16), np.float32)
  rows[np.arange(16), (np.arange(16) * 5) % 16] = 1                  # a permutation: row r of the result is row 5r % 16 of B
  rows[:, 0] += 1                                                    # ... plus B's row 0 (distinguishes A's halves)
  for half in (dtypes.float16, dtypes.bfloat16):
    for name, left in (("identity", np.eye(16, dtype=np.float32)), ("permutation + row 0", rows)):
      ok &= check(f"tensor cores {half.name}: {name} @ B (16 x 16 @ 16 x 8)",
                  lambda: (Tensor(left).cast(half) @ Tensor(b).cast(half)).float(), left @ b)
  print("smoke: all ok" if ok else "smoke: FAILURES above")
  return 0 if ok else 1

if __name__ == "__main__":
  sys.exit(main())
