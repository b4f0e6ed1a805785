"""`python -m petagrad.onnx model.onnx`: run an ONNX model with petagrad, time it, and optionally check it.

    python -m petagrad.onnx model.onnx [--inputs a.npz|x.npy ...] [--dim name=value ...] [--check] [--jit] [--runs N]
                                       [--device DEV] [--seed S] [--rtol R] [--atol A]

Inputs are random (shapes and element types from the model; a symbolic dim needs `--dim name=value`) unless given:
an .npz file gives inputs by name, .npy files give them by position (in the order of the model's inputs that no
initializer defaults). It prints each output's name, shape and dtype, the time per run and the kernels one run
launches (petagrad.helpers.GlobalCounters). `--jit` runs the model inside TinyJit (the first call, outside it,
remembers the static shape values). `--check` runs onnxruntime on the same inputs and prints, per output, the max
absolute and relative error and PASS or FAIL (allclose with --rtol/--atol); the exit code is 1 on any FAIL, 2 on a
usage error.
"""
from __future__ import annotations
import argparse, sys, time
from typing import Any, Sequence
import numpy as np

def parse_dims(items: Sequence[str]) -> dict[str, int]:
  """['batch=2', 'seq=16'] -> {'batch': 2, 'seq': 16}."""
  out: dict[str, int] = {}
  for it in items:
    name, eq, val = it.partition("=")
    if not eq or not name or not val.strip().lstrip("-").isdigit() or int(val) < 0:
      raise ValueError(f"--dim takes name=value with a non-negative integer value, got {it!r}")
    out[name] = int(val)
  return out

def random_input(name: str, elem_type: int | None, shape: tuple | None, dims: dict[str, int], rng: np.random.Generator) -> np.ndarray:
  """A random array for one graph input: floats standard normal, ints in [0, 4), bools uniform."""
  from petagrad.onnx import types
  if elem_type is None or shape is None: raise ValueError(f"input {name!r} declares no element type or shape: give it with --inputs")
  concrete = []
  for i, d in enumerate(shape):
    if isinstance(d, int) and d > 0: concrete.append(d)
    elif isinstance(d, str) and d in dims: concrete.append(dims[d])
    else:
      raise ValueError(f"input {name!r} has a symbolic dim {i} ({d or '?'}): give its size with --dim {d or 'NAME'}=VALUE "
                       f"or the input with --inputs")
  dt = np.dtype(types.np_dtype(elem_type))
  if dt == np.bool_: return rng.random(concrete) < 0.5
  if dt.kind in "iu": return rng.integers(0, 4, concrete).astype(dt)
  if dt.kind == "f": return rng.standard_normal(concrete).astype(dt)
  raise ValueError(f"input {name!r} has element type {types.type_name(elem_type)}, which cannot be made at random: give it with --inputs")

def load_inputs(paths: Sequence[str], names: list[str]) -> dict[str, np.ndarray]:
  """Arrays from .npz files (by name) and .npy files (by position among the model's inputs)."""
  feeds: dict[str, np.ndarray] = {}
  pos = 0
  for p in paths:
    if p.endswith(".npz"):
      with np.load(p) as z: feeds.update({k: z[k] for k in z.files})
    elif p.endswith(".npy"):
      if pos >= len(names): raise ValueError(f"{p}: the model takes only {len(names)} inputs ({names})")
      feeds[names[pos]] = np.load(p)
      pos += 1
    else: raise ValueError(f"--inputs takes .npz or .npy files, got {p!r}")
  return feeds

def make_feeds(model: Any, paths: Sequence[str], dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
  feeds = load_inputs(paths, model.input_names)
  if unknown := [k for k in feeds if k not in model.input_names]: raise ValueError(f"unknown inputs {unknown}; the model takes {model.input_names}")
  rng = np.random.default_rng(seed)
  for vi in model.inputs:
    if vi.name not in feeds: feeds[vi.name] = random_input(vi.name, vi.elem_type, vi.shape, dims, rng)
  return feeds

def run_timed(model: Any, feeds: dict[str, np.ndarray], runs: int, jit: bool) -> tuple[list[np.ndarray], float, int]:
  """Run `runs` times (after one warm-up run that compiles); returns the outputs, seconds per run, kernels per run."""
  from petagrad import Tensor, TinyJit
  from petagrad.helpers import GlobalCounters
  from petagrad.onnx import types
  outs = model.run(feeds)   # warm-up: compiles, and remembers the static shape values TinyJit needs
  if jit:
    names = model.input_names
    def fn(*ts: Tensor) -> list[Tensor]:
      res = model(dict(zip(names, ts)))
      return [res[v.name].realize() for v in model.outputs]
    step = TinyJit(fn)
    def once() -> list:
      res = step(*[types.from_numpy(feeds[n], None, model.device) for n in names])
      return [types.to_numpy(t, vi.elem_type) for t, vi in zip(res, model.outputs)]
    for _ in range(2): once()   # capture, then the first replay
  else:
    def once() -> list: return model.run(feeds)
  GlobalCounters.reset()
  t0 = time.perf_counter()
  for _ in range(runs): outs = once()
  dt = (time.perf_counter() - t0) / runs
  return outs, dt, GlobalCounters.kernel_count // runs

def compare(names: list[str], got: list[np.ndarray], want: list[np.ndarray], rtol: float, atol: float) -> bool:
  """Print one line per output (max abs and rel error, PASS/FAIL); True if all pass."""
  ok = True
  for name, g, w in zip(names, got, want):
    g, w = np.asarray(g), np.asarray(w)
    if g.shape != w.shape:
      print(f"  {name}: FAIL shape {g.shape} != onnxruntime's {w.shape}")
      ok = False
      continue
    gf, wf = g.astype(np.float64), w.astype(np.float64)
    err = np.abs(gf - wf)
    both_nan = np.isnan(gf) & np.isnan(wf)
    err = np.where(both_nan, 0.0, err)
    mabs = float(np.nanmax(err, initial=0.0)) if err.size else 0.0
    mrel = float(np.nanmax(err / np.maximum(np.abs(wf), 1e-30), initial=0.0)) if err.size else 0.0
    good = bool(np.allclose(gf, wf, rtol=rtol, atol=atol, equal_nan=True))
    ok &= good
    print(f"  {name}: max abs err {mabs:.3g}, max rel err {mrel:.3g}  {'PASS' if good else 'FAIL'}")
  return ok

def main(argv: Sequence[str] | None = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m petagrad.onnx", description="Run an ONNX model with petagrad (docs/onnx.md).")
  ap.add_argument("model", help="path of the .onnx file")
  ap.add_argument("--inputs", nargs="+", default=[], metavar="FILE", help=".npz (by name) or .npy (by position) input files")
  ap.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE", help="size of a symbolic dim for random inputs")
  ap.add_argument("--check", action="store_true", help="compare with onnxruntime on the same inputs (exit code 1 on a mismatch)")
  ap.add_argument("--jit", action="store_true", help="run inside TinyJit")
  ap.add_argument("--runs", type=int, default=1, help="timed runs after one warm-up run (default 1)")
  ap.add_argument("--device", default=None, help="petagrad device (default: Device.DEFAULT)")
  ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
  ap.add_argument("--rtol", type=float, default=1e-3)
  ap.add_argument("--atol", type=float, default=1e-4)
  args = ap.parse_args(argv)
  if args.runs < 1: ap.error("--runs must be at least 1")
  import petagrad.onnx
  try:
    t0 = time.perf_counter()
    model = petagrad.onnx.load(args.model, device=args.device)
    load_s = time.perf_counter() - t0
    feeds = make_feeds(model, args.inputs, parse_dims(args.dim), args.seed)
  except (ValueError, TypeError, FileNotFoundError, NotImplementedError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(f"{args.model}: {len(model.graph.nodes)} nodes, opsets {model.opsets}, device {model.device}, loaded in {load_s:.2f} s")
  for name, a in feeds.items(): print(f"  input  {name}: {a.shape} {a.dtype}")
  outs, per_run, kernels = run_timed(model, feeds, args.runs, args.jit)
  for name, o in zip(model.output_names, outs):
    o = np.asarray(o)
    print(f"  output {name}: {o.shape} {o.dtype}")
  print(f"{per_run * 1e3:.2f} ms per run ({args.runs} run{'s' if args.runs > 1 else ''}{', TinyJit' if args.jit else ''}), {kernels} kernels per run")
  if not args.check: return 0
  import onnxruntime as ort
  sess = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
  want = sess.run(model.output_names, feeds)
  print(f"check against onnxruntime {ort.__version__} (rtol {args.rtol}, atol {args.atol}):")
  ok = compare(model.output_names, outs, want, args.rtol, args.atol)
  print("PASS" if ok else "FAIL")
  return 0 if ok else 1

if __name__ == "__main__":
  sys.exit(main())
