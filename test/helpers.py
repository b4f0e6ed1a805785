"""The one helper every op test uses: run the same computation in petagrad and in PyTorch and compare.

    helper_test_op([(3, 4), (4,)], lambda x, y: x + y)                       # same lambda for both
    helper_test_op([(3, 4)], lambda x: x.amax(dim=1), lambda x: x.max(axis=1))  # torch fxn, petagrad fxn

It checks, in order: output shape, output dtype (torch dtype name == petagrad dtype name), device,
forward values, then (for float outputs with float inputs, unless forward_only) the gradient of
every float input under a random upstream gradient.
"""
from __future__ import annotations
from typing import Any, Callable, Sequence
import numpy as np
import torch
from petagrad import Tensor
from petagrad.device import Device
from petagrad.dtype import dtypes, to_dtype

# petagrad dtype name -> torch dtype
TORCH_DTYPES: dict[str, torch.dtype] = {
  "bool": torch.bool, "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
  "uint8": torch.uint8, "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64,
  "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64,
}
FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
# default (atol, rtol) per dtype for forward and backward
DEFAULT_TOL = {"float16": (1e-3, 1e-2), "bfloat16": (1e-2, 2e-2), "float32": (1e-6, 1e-3), "float64": (1e-9, 1e-7)}

def torch_dtype_name(d: torch.dtype) -> str: return str(d).replace("torch.", "")

def to_numpy(x: Any) -> np.ndarray:
  """petagrad Tensor or torch tensor -> numpy (bfloat16 as float32)."""
  if isinstance(x, Tensor): return x.numpy()
  if isinstance(x, torch.Tensor):
    x = x.detach()
    if x.dtype == torch.bfloat16: x = x.float()
    if x.dtype in (torch.uint16, torch.uint32, torch.uint64): return x.numpy()
    return x.numpy()
  return np.asarray(x)

def make_pair(arr: np.ndarray, dtype: str, requires_grad: bool) -> tuple[torch.Tensor, Tensor]:
  """A torch tensor and a petagrad Tensor holding exactly the same values of `dtype`.
  bfloat16 goes through torch (numpy has no bfloat16) and crosses over as raw bits."""
  if dtype == "bfloat16":
    tt = torch.tensor(np.asarray(arr, dtype=np.float32)).to(torch.bfloat16)
    raw = tt.view(torch.int16).numpy().tobytes()
    pt = Tensor(raw, dtype=dtypes.bfloat16).reshape(tuple(tt.shape)) if tt.numel() else Tensor.zeros(*tt.shape, dtype=dtypes.bfloat16).contiguous()
  else:
    a = np.ascontiguousarray(np.asarray(arr).astype(dtype)).reshape(np.shape(arr))   # ascontiguousarray makes 0-d arrays 1-d
    tt = torch.from_numpy(a.copy())
    pt = Tensor(a)
  if requires_grad:
    tt.requires_grad_(True)
    pt.requires_grad = True
  return tt, pt

def random_data(shape: tuple[int, ...], dtype: str, rng: np.random.Generator, low: float, high: float) -> np.ndarray:
  if dtype == "bool": return rng.random(shape) < 0.5
  if dtype in FLOAT_NAMES: return rng.uniform(low, high, size=shape).astype(np.float64)
  info = np.iinfo(dtype)
  lo, hi = max(int(low), info.min), min(int(high), info.max)
  if hi <= lo: hi = lo + 1
  return rng.integers(lo, hi, size=shape, endpoint=False).astype(dtype)

def _as_list(x: Any) -> list:
  return list(x) if isinstance(x, (tuple, list)) else [x]

def compare(name: str, pg: Any, tv: Any, atol: float, rtol: float, check_dtype: bool = True) -> None:
  """Assert a petagrad Tensor matches a torch tensor: shape, dtype, device, values."""
  assert isinstance(pg, Tensor), f"{name}: petagrad returned {type(pg).__name__}, not a Tensor"
  # (a symbolic shape, (<n=3>, 5), by its Variables' values)
  assert pg.concrete_shape == tuple(tv.shape), f"{name}: shape {tuple(pg.shape)} != torch {tuple(tv.shape)}"
  if check_dtype:
    assert pg.dtype.name == torch_dtype_name(tv.dtype), f"{name}: dtype {pg.dtype.name} != torch {torch_dtype_name(tv.dtype)}"
  assert pg.device == Device.DEFAULT, f"{name}: device {pg.device} != {Device.DEFAULT}"
  a, b = to_numpy(pg), to_numpy(tv)
  if b.dtype == np.bool_ or np.issubdtype(b.dtype, np.integer) and np.issubdtype(a.dtype, np.integer):
    np.testing.assert_array_equal(a, b, err_msg=f"{name}: values differ")
  else:
    np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True, err_msg=f"{name}: values differ")

def helper_test_op(shapes: Sequence[tuple[int, ...]] | None, torch_fxn: Callable, petagrad_fxn: Callable | None = None,
                   vals: Sequence[Any] | None = None, atol: float | None = None, rtol: float | None = None,
                   grad_atol: float | None = None, grad_rtol: float | None = None, forward_only: bool = False,
                   low: float = -2.0, high: float = 2.0, dtype: str | Sequence[str] = "float32", seed: int = 0,
                   check_dtype: bool = True) -> tuple[Any, Any]:
  """Run torch_fxn on torch tensors and petagrad_fxn (default: torch_fxn) on petagrad Tensors made from the
  same data, and compare shapes, dtypes, values and gradients.

  shapes: one shape per input (random data, uniform in [low, high) for floats, integers in [low, high)
          for ints, coin flips for bool), or None when `vals` gives the data.
  vals:   explicit input data (nested lists / numpy arrays), one per input.
  dtype:  petagrad/torch dtype name for all inputs, or one per input.
  Returns (petagrad outputs, torch outputs).
  """
  petagrad_fxn = petagrad_fxn or torch_fxn
  rng = np.random.default_rng(seed)
  n = len(vals) if vals is not None else len(shapes or ())
  dts = [dtype] * n if isinstance(dtype, str) else list(dtype)
  dts = [to_dtype(d).name for d in dts]
  datas = [np.asarray(v) for v in vals] if vals is not None else [random_data(tuple(s), d, rng, low, high) for s, d in zip(shapes or (), dts)]
  pairs = [make_pair(a, d, requires_grad=(d in FLOAT_NAMES and not forward_only)) for a, d in zip(datas, dts)]
  tins, pins = [p[0] for p in pairs], [p[1] for p in pairs]

  tout = torch_fxn(*tins)
  pout = petagrad_fxn(*pins)
  touts, pouts = _as_list(tout), _as_list(pout)
  assert len(touts) == len(pouts), f"torch gave {len(touts)} outputs, petagrad {len(pouts)}"

  # the loss is built before the forward values are read (realizing an output first is tested on its own,
  # in test_autograd, so that one problem there does not hide every op's gradient)
  grad_inputs = [i for i, d in enumerate(dts) if d in FLOAT_NAMES]
  diff_outs = [i for i, t in enumerate(touts) if t.dtype.is_floating_point and t.requires_grad]
  do_backward = not forward_only and bool(grad_inputs) and bool(diff_outs)
  tl, pl = None, None
  if do_backward:
    # a random upstream gradient on every float output that torch can differentiate
    for i in diff_outs:
      g = rng.uniform(-1, 1, size=tuple(touts[i].shape))
      tg, pg = make_pair(g, torch_dtype_name(touts[i].dtype), requires_grad=False)
      tterm, pterm = (touts[i] * tg).sum(), (pouts[i] * pg).sum()
      tl = tterm if tl is None else tl + tterm
      pl = pterm if pl is None else pl + pterm

  for i, (p, t) in enumerate(zip(pouts, touts)):
    fa, fr = DEFAULT_TOL.get(torch_dtype_name(t.dtype), (0, 0))
    compare(f"forward output {i}", p, t, fa if atol is None else atol, fr if rtol is None else rtol, check_dtype)

  if not do_backward: return pout, tout
  assert tl is not None and pl is not None
  tl.backward()
  pl.backward()
  for i in grad_inputs:
    tgrad = tins[i].grad if tins[i].grad is not None else torch.zeros_like(tins[i])
    pgrad = pins[i].grad
    assert pgrad is not None, f"input {i}: petagrad .grad is None (torch grad {tgrad})"
    fa, fr = DEFAULT_TOL[dts[i]]
    ga = grad_atol if grad_atol is not None else max(fa, 1e-5 if dts[i] == "float32" else fa)
    gr = grad_rtol if grad_rtol is not None else fr
    compare(f"gradient of input {i}", pgrad, tgrad, ga, gr, check_dtype)
  return pout, tout

def stacked(*fns: Callable) -> Callable:
  """One function computing every fn and stacking the results: one kernel (one compile on CPU) checks many
  ops at once in the dtype sweeps. Row i of a mismatch is fns[i]."""
  def f(*xs):
    outs = [fn(*xs) for fn in fns]
    return torch.stack(outs) if isinstance(outs[0], torch.Tensor) else Tensor.stack(outs)
  return f

def run_tinygrad(code: str, **inputs: Any) -> dict:
  """Run `code` with tinygrad 0.14 (DEV=PYTHON) in a subprocess: `inputs` arrive as float32 numpy arrays, `out` (a dict
  of arrays) comes back. Skips the test where tinygrad is not installed (the bench extra). Not imported here: importing
  tinygrad changes the interpreter (it raises the recursion limit)."""
  import importlib.util, json, os, subprocess, sys, textwrap
  import pytest
  if importlib.util.find_spec("tinygrad") is None: pytest.skip("tinygrad is not installed (pip install tinygrad==0.14.0: the bench extra)")
  prog = "import json, sys, numpy as np\nfrom tinygrad import Tensor, nn, Context, dtypes\nfrom tinygrad.nn.state import get_state_dict\n" \
         "inputs = {k: np.array(v, dtype=np.float32) for k, v in json.loads(sys.stdin.read()).items()}\nout = {}\n" + \
         textwrap.dedent(code) + "\nprint(json.dumps({k: np.asarray(v, dtype=np.float64).tolist() for k, v in out.items()}))\n"
  env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "BEAM", "NOOPT")}
  env["DEV"] = "PYTHON"
  r = subprocess.run([sys.executable, "-c", prog], input=json.dumps({k: np.asarray(v).tolist() for k, v in inputs.items()}), capture_output=True,
                     text=True, env=env, cwd="/", timeout=600)
  if r.returncode != 0: pytest.fail(f"tinygrad reference failed:\n{r.stderr[-3000:]}")
  return {k: np.array(v) for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items()}
