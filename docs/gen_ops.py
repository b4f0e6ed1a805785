#!/usr/bin/env python3
"""Write docs/ops.md: every public Tensor attribute (including the mixins), whether it is differentiable
and which dtypes it supports, found by running it.

For each public name of `Tensor` (dir(Tensor) without a leading underscore):
  * a sample call is taken from SAMPLES below, or else found by trying a few generic calls
    (`x.op()`, `x.op(y)`, `x.op(1)`, `x.op(0)`; `Tensor.op(x)`, `Tensor.op([x, y])`, `Tensor.op(2, 3)`)
    on a small float32 tensor; the first one that runs is used;
  * differentiable: the call is made on a float32 tensor with requires_grad=True and the sum of its
    first float output is backpropagated. "yes": a gradient reaches the input; "zero": the gradient is
    identically 0 (e.g. floor); "no": backward raised or left no gradient; "-": the output is not a
    float tensor, or the name is not a tensor op (creation, plumbing, properties);
  * dtypes: the same call on tiny inputs of each dtype, on the CPU device, realizing every tensor
    output. "y": works, "-": raises (for some ops by design, e.g. bitwise ops on floats).

Each name runs in its own subprocess (a crash in one op cannot stop the table; it shows as "crash").

    python docs/gen_ops.py            # writes docs/ops.md (a few minutes the first time; the compile cache makes reruns fast)
    python docs/gen_ops.py --one sort # the JSON record of one name
"""
from __future__ import annotations
import argparse, ctypes, json, os, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "docs", "ops.md")
DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32", "float64"]
SHORT = {"bool": "b", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32",
         "uint64": "u64", "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64"}

# names that are not tensor -> tensor ops: run per dtype, never differentiated
PLUMBING = {"backward", "gradient", "realize", "realize_all", "numpy", "tolist", "item", "data", "numel", "size", "element_size",
            "nbytes", "is_floating_point", "requires_grad_", "to", "to_", "from_blob", "replace", "shard_",
            "assign", "manual_seed", "detach", "contiguous", "clone"}
CREATION = {"arange", "empty", "eye", "full", "linspace", "ones", "zeros", "rand", "randn", "randint", "randperm", "uniform", "normal",
            "glorot_normal", "glorot_uniform", "kaiming_normal", "kaiming_uniform", "xavier_normal", "xavier_uniform", "trunc_normal"}

# name -> sample call. s is a namespace with: T (Tensor), x (2, 3), y (2, 3) without zeros, v (3,), m (2, 3) bool mask,
# i (2, 3) int64 indices in [0, 2), mk(*shape) a tensor of the sample dtype, dt (the dtype), ib(*shape) int64 in [0, 2)
SAMPLES: dict[str, str] = {
  "add": "s.x.add(s.y)", "sub": "s.x.sub(s.y)", "mul": "s.x.mul(s.y)", "div": "s.x.div(s.y)", "floordiv": "s.x.floordiv(s.y)",
  "mod": "s.x.mod(s.y)", "remainder": "s.x.remainder(s.y)", "pow": "s.y.pow(s.x)", "idiv": "s.x.idiv(s.y)", "fmod": "s.x.fmod(s.y)",
  "maximum": "s.x.maximum(s.y)", "minimum": "s.x.minimum(s.y)", "atan2": "s.x.atan2(s.y)", "arctan2": "s.x.arctan2(s.y)",
  "hypot": "s.x.hypot(s.y)", "copysign": "s.x.copysign(s.y)", "xlogy": "s.x.xlogy(s.y)", "lerp": "s.x.lerp(s.y, 0.25)",
  "where": "s.m.where(s.x, s.y)", "clip": "s.x.clip(0, 1)", "clamp": "s.x.clamp(0, 1)",
  "bitwise_and": "s.x.bitwise_and(s.y)", "bitwise_or": "s.x.bitwise_or(s.y)", "bitwise_xor": "s.x.bitwise_xor(s.y)",
  "lshift": "s.x.lshift(1)", "rshift": "s.x.rshift(1)",
  "logical_and": "s.x.logical_and(s.y)", "logical_or": "s.x.logical_or(s.y)", "logical_xor": "s.x.logical_xor(s.y)",
  "eq": "s.x.eq(s.y)", "ne": "s.x.ne(s.y)", "lt": "s.x.lt(s.y)", "le": "s.x.le(s.y)", "gt": "s.x.gt(s.y)", "ge": "s.x.ge(s.y)",
  "matmul": "s.x.matmul(s.y.T)", "dot": "s.x.dot(s.v)", "linear": "s.x.linear(s.y)", "outer": "s.v.outer(s.v)", "ger": "s.v.ger(s.v)",
  "cat": "s.x.cat(s.y, dim=1)", "stack": "s.T.stack([s.x, s.y])", "einsum": "s.T.einsum('ij,kj->ik', s.x, s.y)",
  "meshgrid": "s.T.meshgrid(s.v, s.v)", "split": "s.x.split(1, 1)", "chunk": "s.x.chunk(2, 1)",
  "reshape": "s.x.reshape(3, 2)", "view": "s.x.view(6)", "permute": "s.x.permute(1, 0)", "transpose": "s.x.transpose(0, 1)",
  "expand": "s.x.reshape(2, 1, 3).expand(2, 2, 3)", "expand_as": "s.v.expand_as(s.x)", "pad": "s.x.pad(((1, 0), (0, 2)))",
  "pad_mode": "s.x.pad_mode(((1, 0), (0, 2)), 'reflect')", "shrink": "s.x.shrink(((0, 1), (1, 3)))", "flip": "s.x.flip(0)",
  "squeeze": "s.x.reshape(2, 1, 3).squeeze(1)", "unsqueeze": "s.x.unsqueeze(0)", "flatten": "s.x.flatten()",
  "unflatten": "s.x.unflatten(1, (3, 1))", "repeat": "s.x.repeat(2, 1)", "tile": "s.x.tile(2)", "repeat_interleave": "s.x.repeat_interleave(2, 1)",
  "roll": "s.x.roll(1, 1)", "tril": "s.x.tril()", "triu": "s.x.triu()", "diag": "s.v.diag()", "diag_embed": "s.x.diag_embed()",
  "diagonal": "s.x.diagonal()", "trace": "s.x.trace()",
  "cumsum": "s.x.cumsum(1)", "cumprod": "s.x.cumprod(1)", "cummax": "s.x.cummax(1)", "cummin": "s.x.cummin(1)",
  "logcumsumexp": "s.x.logcumsumexp(1)", "sort": "s.x.sort()", "argsort": "s.x.argsort()", "msort": "s.x.msort()",
  "topk": "s.x.topk(2)", "unique": "s.x.unique()",
  "median": "s.x.median()", "quantile": "s.x.quantile(0.5, dim=1)", "searchsorted": "s.T.searchsorted(s.v, s.x)",
  "bucketize": "s.x.bucketize(s.v)", "bincount": "s.ib(4).bincount()", "diff": "s.x.diff()", "rot90": "s.x.rot90()",
  "fliplr": "s.x.fliplr()", "flipud": "s.x.flipud()", "unbind": "s.x.unbind(1)",
  "index_add": "s.x.index_add(1, s.ib(2), s.y[:, :2])", "index_copy": "s.x.index_copy(1, s.T([2, 0]), s.y[:, :2])",
  "index_fill": "s.x.index_fill(1, s.ib(2), 1)", "mv": "s.x.mv(s.v)", "bmm": "s.x.unsqueeze(0).bmm(s.y.T.unsqueeze(0))",
  "addmm": "s.x.addmm(s.x, s.y.T @ s.y)", "baddbmm": "s.x.unsqueeze(0).baddbmm(s.x.unsqueeze(0), (s.y.T @ s.y).unsqueeze(0))",
  "inner": "s.x.inner(s.y)", "tensordot": "s.x.tensordot(s.y.T, 1)", "kron": "s.x.kron(s.y)",
  "logaddexp": "s.x.logaddexp(s.y)", "logaddexp2": "s.x.logaddexp2(s.y)", "isclose": "s.x.isclose(s.y)", "allclose": "s.x.allclose(s.y)",
  "clamp_min": "s.x.clamp_min(1)", "clamp_max": "s.x.clamp_max(1)", "count_nonzero": "s.x.count_nonzero()",
  "gather": "s.x.gather(1, s.i)", "take_along_dim": "s.x.take_along_dim(s.i, 1)", "index_select": "s.x.index_select(1, s.ib(2))",
  "scatter": "s.x.scatter(1, s.i, s.y)", "scatter_add": "s.x.scatter_add(1, s.i, s.y)",
  "scatter_reduce": "s.x.scatter_reduce(1, s.i, s.y, 'amax')", "masked_fill": "s.x.masked_fill(s.m, 1)",
  "masked_select": "s.x.masked_select(s.m)", "nonzero": "s.x.nonzero()", "argwhere": "s.x.argwhere()",
  "one_hot": "s.x.one_hot(4)", "norm": "s.x.norm()", "cross": "s.x.cross(s.y)", "cdist": "s.x.cdist(s.y)",
  "sum": "s.x.sum(1)", "prod": "s.x.prod(1)", "max": "s.x.max(1)", "min": "s.x.min(1)", "amax": "s.x.amax(1)", "amin": "s.x.amin(1)",
  "mean": "s.x.mean(1)", "var": "s.x.var(1)", "std": "s.x.std(1)", "var_mean": "s.x.var_mean(1)", "std_mean": "s.x.std_mean(1)",
  "any": "s.x.any(1)", "all": "s.x.all(1)", "argmax": "s.x.argmax(1)", "argmin": "s.x.argmin(1)", "logsumexp": "s.x.logsumexp(1)",
  "softmax": "s.x.softmax(1)", "log_softmax": "s.x.log_softmax(1)", "softmin": "s.x.softmin(1)",
  "isinf": "s.x.isinf()", "nan_to_num": "s.x.nan_to_num()", "cast": "s.x.cast('float32')", "bitcast": "s.x.bitcast(s.x.dtype)",
  "full_like": "s.x.full_like(2)", "threshold": "s.x.threshold(1, 0)", "multinomial": "s.x.multinomial(2, replacement=True)",
  "bernoulli": "s.x.bernoulli(0.5)", "dropout": "s.x.dropout(0.5)", "glu": "s.mk(2, 4).glu()",
  # losses and nn functionals
  "mse_loss": "s.x.mse_loss(s.y)", "l1_loss": "s.x.l1_loss(s.y)", "huber_loss": "s.x.huber_loss(s.y)",
  "smooth_l1_loss": "s.x.smooth_l1_loss(s.y)", "kl_div": "s.x.kl_div(s.y)",
  "binary_cross_entropy": "s.x.sigmoid().binary_cross_entropy(s.y.sigmoid())",
  "binary_cross_entropy_with_logits": "s.x.binary_cross_entropy_with_logits(s.y.sigmoid())",
  "binary_crossentropy": "s.x.sigmoid().binary_crossentropy(s.y.sigmoid())",
  "binary_crossentropy_logits": "s.x.binary_crossentropy_logits(s.y.sigmoid())",
  "cross_entropy": "s.x.cross_entropy(s.ib(2))", "nll_loss": "s.x.log_softmax(1).nll_loss(s.ib(2))",
  "sparse_categorical_crossentropy": "s.x.sparse_categorical_crossentropy(s.ib(2))",
  "hinge_embedding_loss": "s.x.hinge_embedding_loss(s.y)", "margin_ranking_loss": "s.x.margin_ranking_loss(s.y, s.y)",
  "cosine_similarity": "s.x.cosine_similarity(s.y)", "pairwise_distance": "s.x.pairwise_distance(s.y)", "normalize": "s.x.normalize()",
  "layer_norm": "s.x.layer_norm((3,))", "layernorm": "s.x.layernorm()", "rms_norm": "s.x.rms_norm((3,))",
  "group_norm": "s.mk(2, 4, 3).group_norm(2)", "instance_norm": "s.mk(2, 2, 3).instance_norm()",
  "batch_norm": "s.x.batch_norm(None, None, training=True)",
  "batchnorm": "s.x.batchnorm(None, None, s.v[:1].reshape(1) * 0 + s.x.mean(0), s.x.mean(0) * 0 + 1)",
  "conv1d": "s.mk(1, 2, 5).conv1d(s.mk(3, 2, 2))", "conv2d": "s.mk(1, 2, 4, 4).conv2d(s.mk(3, 2, 2, 2))",
  "conv3d": "s.mk(1, 1, 3, 3, 3).conv3d(s.mk(2, 1, 2, 2, 2))",
  "conv_transpose1d": "s.mk(1, 2, 4).conv_transpose1d(s.mk(2, 3, 2))", "conv_transpose2d": "s.mk(1, 2, 3, 3).conv_transpose2d(s.mk(2, 3, 2, 2))",
  "conv_transpose3d": "s.mk(1, 1, 2, 2, 2).conv_transpose3d(s.mk(1, 2, 2, 2, 2))",
  "max_pool1d": "s.mk(1, 2, 4).max_pool1d()", "max_pool2d": "s.mk(1, 2, 4, 4).max_pool2d()", "max_pool3d": "s.mk(1, 1, 2, 2, 2).max_pool3d()",
  "avg_pool1d": "s.mk(1, 2, 4).avg_pool1d()", "avg_pool2d": "s.mk(1, 2, 4, 4).avg_pool2d()", "avg_pool3d": "s.mk(1, 1, 2, 2, 2).avg_pool3d()",
  "adaptive_avg_pool1d": "s.mk(1, 2, 4).adaptive_avg_pool1d(2)", "adaptive_avg_pool2d": "s.mk(1, 2, 4, 4).adaptive_avg_pool2d(2)",
  "adaptive_avg_pool3d": "s.mk(1, 1, 2, 2, 2).adaptive_avg_pool3d(1)", "adaptive_max_pool1d": "s.mk(1, 2, 4).adaptive_max_pool1d(2)",
  "adaptive_max_pool2d": "s.mk(1, 2, 4, 4).adaptive_max_pool2d(2)", "adaptive_max_pool3d": "s.mk(1, 1, 2, 2, 2).adaptive_max_pool3d(1)",
  "max_unpool1d": "s.mk(1, 1, 2).max_unpool1d(s.T([[[1, 2]]]))", "max_unpool2d": "s.mk(1, 1, 1, 2).max_unpool2d(s.T([[[[1, 2]]]]))",
  "max_unpool3d": "s.mk(1, 1, 1, 1, 1).max_unpool3d(s.T([[[[[3]]]]]))",
  "interpolate": "s.mk(1, 1, 3).interpolate(scale_factor=2)", "im2col": "s.mk(1, 1, 3, 3).im2col(2)",
  "unfold": "s.x.unfold(1, 2, 1)", "rearrange": "s.x.rearrange('a b -> b a')", "pad_to": "s.x.pad_to(3, 4)", "shrink_to": "s.x.shrink_to(1, 2)",
  "fold": "s.mk(1, 4, 4).fold((3, 3), 2)", "scaled_dot_product_attention": "s.mk(1, 2, 3).scaled_dot_product_attention(s.mk(1, 2, 3), s.mk(1, 2, 3))",
  # plumbing
  "assign": "s.x.contiguous().realize().assign(s.y)", "to": "s.x.to('CPU')", "to_": "s.x.contiguous().to_('CPU')",
  "shard": "s.x.shard(('CPU:0', 'CPU:1'), 0)", "shard_": "s.x.contiguous().shard_(('CPU:0', 'CPU:1'), 0)",
  "from_blob": "s.T.from_blob(s.blob, (2, 3), dtype=s.dt)", "gradient": "(s.x * s.x).sum().gradient(s.x)",
  "backward": "(s.mk(2, 3).requires_grad_() * 2).sum().backward()", "item": "s.x[0, 0].item()", "size": "s.x.size(1)",
  "realize_all": "s.T.realize_all(s.x, s.y)", "manual_seed": "s.T.manual_seed(1)", "requires_grad_": "s.x.detach().requires_grad_()",
  # creation: the sample dtype is passed as dtype=
  "arange": "s.T.arange(4, dtype=s.dt)", "empty": "s.T.empty(2, 3, dtype=s.dt)", "eye": "s.T.eye(3, dtype=s.dt)",
  "full": "s.T.full((2, 3), 1, dtype=s.dt)", "linspace": "s.T.linspace(0, 4, 5, dtype=s.dt)", "ones": "s.T.ones(2, 3, dtype=s.dt)",
  "zeros": "s.T.zeros(2, 3, dtype=s.dt)", "rand": "s.T.rand(2, 3, dtype=s.dt)", "randn": "s.T.randn(2, 3, dtype=s.dt)",
  "randint": "s.T.randint(2, 3, dtype=s.dt)", "randperm": "s.T.randperm(5, dtype=s.dt)", "uniform": "s.T.uniform(2, 3, dtype=s.dt)",
  "normal": "s.T.normal(2, 3, dtype=s.dt)", "glorot_normal": "s.T.glorot_normal(2, 3, dtype=s.dt)",
  "glorot_uniform": "s.T.glorot_uniform(2, 3, dtype=s.dt)",
  "kaiming_normal": "s.T.kaiming_normal(2, 3, dtype=s.dt)", "kaiming_uniform": "s.T.kaiming_uniform(2, 3, dtype=s.dt)",
  "xavier_normal": "s.T.xavier_normal(2, 3, dtype=s.dt)", "xavier_uniform": "s.T.xavier_uniform(2, 3, dtype=s.dt)",
  "trunc_normal": "s.T.trunc_normal(2, 3, dtype=s.dt)",
}

def _generic_calls(name: str, static: bool) -> list[str]:
  if static: return [f"s.T.{name}(s.x)", f"s.T.{name}([s.x, s.y])", f"s.T.{name}(2, 3, dtype=s.dt)", f"s.T.{name}(2, 3)"]
  return [f"s.x.{name}()", f"s.x.{name}(s.y)", f"s.x.{name}(1)", f"s.x.{name}(0)"]

_BLOB = bytearray(64)
_BLOB_ADDR = ctypes.addressof((ctypes.c_char * 64).from_buffer(_BLOB))

class _Sample:
  """The inputs of one sample call, in one dtype."""
  def __init__(self, dt: str, grad: bool = False):
    from petagrad import Tensor, dtypes
    self.T, self.dt, self.grad, self.made = Tensor, getattr(dtypes, dt), grad, []
    self.x = self.mk(2, 3, vals=[1, 2, 0, 3, 1, 2])
    self.y = self.mk(2, 3, vals=[2, 1, 1, 1, 3, 2])
    self.v = self.mk(3, vals=[1, 0, 2])
    self.m = Tensor([[True, False, True], [False, True, True]])
    self.i = Tensor([[0, 1, 1], [1, 0, 0]])
    self.blob = _BLOB_ADDR   # 64 zero bytes this module keeps alive (Tensor.from_blob)
  def mk(self, *shape, vals=None):
    from petagrad import Tensor, dtypes
    from petagrad.helpers import prod
    n = prod(shape)
    vals = vals if vals is not None else [(k * 7 % 5) * 0.5 for k in range(n)]
    if not self.dt.is_float: vals = [int(v) for v in vals]
    if self.dt.is_bool: vals = [bool(v) for v in vals]
    t = Tensor(vals, dtype=self.dt if self.dt != dtypes.bfloat16 else dtypes.float32).reshape(shape).cast(self.dt).contiguous().realize()
    if self.grad and self.dt.is_float: t.requires_grad = True
    self.made.append(t)
    return t
  def ib(self, *shape):
    from petagrad import Tensor
    from petagrad.helpers import prod
    return Tensor([k % 2 for k in range(prod(shape))]).reshape(shape)

def _tensors(out) -> list:
  from petagrad import Tensor
  if isinstance(out, Tensor): return [out]
  if isinstance(out, (list, tuple)): return [t for o in out for t in _tensors(o)]
  return []

def _run(expr: str, dt: str, grad: bool = False):
  s = _Sample(dt, grad)
  out = eval(expr, {"s": s})
  ts = _tensors(out)
  if ts:
    from petagrad import Tensor
    Tensor.realize_all(*ts)
  return s, out, ts

def record(name: str) -> dict:
  """Run one public name: its kind, the sample call used, differentiability and per-dtype support."""
  import inspect
  from petagrad import Tensor
  from petagrad.helpers import Context
  attr = inspect.getattr_static(Tensor, name)
  doc = (getattr(Tensor, name).__doc__ or "").strip().split("\n")[0] if callable(getattr(Tensor, name, None)) else ""
  if isinstance(attr, property) or not callable(getattr(Tensor, name, None)):
    return {"name": name, "kind": "property" if isinstance(attr, property) else "attribute", "call": "", "grad": "-", "dtypes": {}, "doc": doc}
  static = isinstance(attr, (staticmethod, classmethod))   # class methods (Tensor.zeros, Tensor.stack, ...) are called on the class too
  kind = "creation" if name in CREATION else "plumbing" if name in PLUMBING else "static" if static else "method"
  with Context(DEV="CPU"):
    candidates = [SAMPLES[name]] if name in SAMPLES else _generic_calls(name, static)
    call, err = None, ""
    for probe in ("float32", "int32", "bool"):   # bitwise ops, one_hot, ... only run on ints
      for c in candidates:
        try:
          _run(c, probe); call = c; break
        except Exception as e: err = err or f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
      if call is not None: break
    if call is None: return {"name": name, "kind": kind, "call": "", "grad": "?", "dtypes": {}, "doc": doc, "error": err}
    grad = "-"
    try: _run(call, "float32"); on_float = True
    except Exception: on_float = False
    if kind in ("method", "static") and on_float:
      try:
        s, out, ts = _run(call, "float32", grad=True)
        fl = [t for t in ts if t.dtype.is_float]
        if fl:
          grad = "no"
          o = fl[0].float()
          # a weighted sum (not a plain sum): sum(softmax(x)) is constant, and its tiny rounding gradient flips "zero"/"yes"
          loss = (o * Tensor.arange(1, o.numel() + 1, dtype="float32", device=o.device).reshape(o.shape)).sum() if o.ndim else o
          loss.backward()
          gs = [t.grad for t in s.made if t.grad is not None]
          if gs: grad = "yes" if any(g.abs().sum().item() != 0 for g in gs) else "zero"
      except Exception: grad = "no"
    res = {}
    for dt in DTYPES:
      try: _run(call, dt); res[dt] = "y"
      except Exception: res[dt] = "-"
  return {"name": name, "kind": kind, "call": call.replace("s.", ""), "grad": grad, "dtypes": res, "doc": doc}

def public_names() -> list[str]:
  sys.path.insert(0, ROOT)
  from petagrad import Tensor
  return sorted(n for n in dir(Tensor) if not n.startswith("_"))

def _one_in_subprocess(name: str) -> dict:
  try:
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", name], capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env={**os.environ, "THREADS": "1"})
    if p.returncode == 0: return json.loads(p.stdout.strip().splitlines()[-1])
    return {"name": name, "kind": "?", "call": "", "grad": "crash", "dtypes": {}, "doc": "",
            "error": (p.stderr.strip().splitlines() or ["crash"])[-1][:160]}
  except subprocess.TimeoutExpired:
    return {"name": name, "kind": "?", "call": "", "grad": "timeout", "dtypes": {}, "doc": "", "error": "timeout"}

def render(records: list[dict]) -> str:
  head = "| op | kind | grad | " + " | ".join(SHORT[d] for d in DTYPES) + " | sample call / note |"
  sep = "|" + "---|" * (4 + len(DTYPES))
  lines = [
    "# Tensor ops: differentiability and dtype support",
    "",
    "Generated by `python docs/gen_ops.py` (do not edit by hand); `test_math.py::test_ops_md_lists_every_public_name`",
    "fails when a public `Tensor` name is missing here. Every public name of `Tensor` (its mixins included) has a row.",
    "",
    "* **grad**: `yes` a weighted sum of the sample call's first float output backpropagates a gradient to its float32 input; `zero` the",
    "  gradient exists but is identically 0 (piecewise-constant ops); `no` backward fails or gives nothing; `-` not a float",
    "  tensor output, or not a tensor op (creation, plumbing, properties); `?` no sample call ran (see the note).",
    "* **dtype columns**: `y` the sample call runs on tiny inputs of that dtype on the CPU device (outputs realized);",
    "  `-` it raises (often by design: e.g. bitwise ops on floats, `rand` with an integer dtype).",
    "  Nothing here says the results are right: the tests against PyTorch do that.",
    "* **kind**: `method`, `static` (called on the class), `creation` (takes `dtype=`), `plumbing` (realize, export, autograd",
    "  entry points), `property`/`attribute`.",
    "",
    "## Tensor indices out of range",
    "",
    "The same rule on every device; no op ever reads or writes memory out of bounds (an index tensor becomes a one-hot",
    "comparison with `arange(n)`, so an invalid index simply matches nothing).",
    "",
    "* **valid indices** into a dim of size `n`: `-n <= i < n` for `x[i]`, `x[i] = v` and `take_along_dim` (negative",
    "  indices count from the end, like PyTorch); `0 <= i < n` for `gather`, `scatter`, `scatter_add`, `scatter_reduce`",
    "  and `index_select` (PyTorch rejects negative indices there, and so does petagrad).",
    "* **known indices raise** `IndexError` at the call, naming the op, the bad index, the dim and its size, the operands",
    "  and your line: Python ints, lists, tuples and numpy arrays, and index tensors whose values are already in memory",
    "  (made from Python data or realized, at most `KNOWN_INDEX_LIMIT` = 4096 elements, seen through",
    "  reshape/expand/permute/flip only). Reading them back is a copy, not a kernel.",
    "* **lazy indices** (computed by a kernel that has not run yet, or inside a `TinyJit` function) cannot be checked",
    "  without running it. An invalid one selects nothing: a read gives 0 (`False` for bool) and passes no gradient; a",
    "  write (`x[i] = v`, `scatter*`) leaves that element unchanged. `one_hot` gives an all-zero row.",
    "",
    "## Bad arguments and empty inputs",
    "",
    "Every check below happens at the call, without running a kernel; the exception names the op, the operands' shapes",
    "and dtypes, and your line.",
    "",
    "* **Python numbers never wrap into a dtype.** Data (`Tensor([2**70])`, `Tensor([300], dtype=dtypes.uint8)`,",
    "  `Tensor([-1], dtype=dtypes.uint32)`, a float that is NaN/inf or out of range going into an int dtype) and fill",
    "  values (`full`, `*_like`, `arange`, `linspace`, `randint` bounds, `masked_fill`, `clip` bounds, `pad(value=)`,",
    "  `where` scalars, `x[i] = v`, `scatter`/`index_fill` scalars, `assign`) raise `DTypeOverflowError`, which is both a",
    "  `RuntimeError` and an `OverflowError` (torch raises one or the other). Torch wraps `Tensor([-1], dtype=uint32)`;",
    "  petagrad raises. A float that overflows float16/bfloat16 becomes inf in data and arithmetic (as in torch); as a",
    "  fill value it raises (as `torch.full` does).",
    "* **Scalar operands** (`x + 2**70`, `x * 2**64`, a float tensor and an int beyond any float) raise the same error when",
    "  the int does not fit 64 bits; an int in the 64-bit range wraps into an integer tensor's dtype exactly as in torch",
    "  (`int8 + 1000`, `int8 == 300`, `int32 & 0xFFFFFFFF`).",
    "* **Integer division and remainder by zero** (`//`, `%`, `div(rounding_mode=...)`, `floordiv`, `remainder`, `fmod`,",
    "  `idiv`, also `5 // t`) raise `IntegerDivisionByZeroError` (a `RuntimeError` and a `ZeroDivisionError`, like",
    "  torch's `RuntimeError: ZeroDivisionError`) when the divisor is known to be 0 at the call: a Python 0 (or `False`),",
    "  or a constant tensor not yet realized (`Tensor.zeros(3, dtype=dtypes.int32)`). An empty result never raises;",
    "  float division gives inf/nan. Any other integer divisor gets a data check: the realize that computes the",
    "  quotient also computes \"no divisor element is 0\" and raises the same error (naming the op and your line) when",
    "  one is, after each TinyJit replay too.",
    "* **Indices known only when computed** (an index tensor made by a kernel, a big one, or any inside TinyJit) get",
    "  the same kind of data check in `x[i]`, `gather`, `scatter*`, `index_*`, `take_along_dim`, `nn.Embedding`,",
    "  `one_hot` and the cross-entropy targets: an invalid one raises `IndexError` when the result is computed (known",
    "  ones raise at the call). The kernels never read out of bounds either way.",
    "* **Sizes** of creation ops (`empty`, `zeros`, `ones`, `full`, `rand`, `randn`, `randint`, `eye`, `linspace`, `new_*`)",
    "  and shape arguments (`reshape`/`view`, `expand`, `pad`, `shrink`, `repeat`, `tile`, `unflatten`, `split`, `chunk`)",
    "  must be ints (not bools, floats, strings or None; numpy ints are fine): `TypeError`; negative (other than the `-1`",
    "  that `reshape`/`expand`/`unflatten` allow) or more than 2**63 - 1 elements: `ValueError` (torch: `RuntimeError`).",
    "  `arange` with an inf/NaN bound raises `RuntimeError`; a range that runs against its step is empty (like numpy).",
    "* **Axis arguments** of reductions and of every op taking a dim: a non-int (float, str, bool, None in a tuple)",
    "  raises `TypeError`, an out-of-range one `IndexError`, a repeated one `ValueError`.",
    "* **Empty inputs** give what torch gives: `softmax`/`log_softmax` over an empty dim an empty tensor, `logsumexp` over",
    "  an empty dim `-inf`, `scaled_dot_product_attention` with no keys zeros, `sum`/`prod` 0/1, `mean`/`var`/`std` NaN,",
    "  a matmul with an empty inner dim zeros, convolutions, pooling and norms of an empty batch an empty result (a",
    "  training `batch_norm` leaves the running statistics alone). `max`/`min`/`argmax`/`argmin` have no identity: over",
    "  an empty dim they raise `IndexError`, a full reduction of an empty tensor raises `RuntimeError` (`argmax`:",
    "  `IndexError`), as in torch; so do `inf`/negative-order `norm`s over an empty dim (`RuntimeError`).",
    "* **Flags**: `Context(DEBUG='x')` and `DEBUG=x` in the environment raise naming the flag (docs/env_vars.md).",
    "",
    "## Data-dependent shapes and what is not implemented",
    "",
    "* `x[mask]`, `masked_select`, `nonzero`, `unique` (flat and `dim=`), `one_hot()` without `num_classes` and",
    "  `repeat_interleave` with per-element repeats realize their input at the call to learn the output shape.",
    "* `unique(dim=)` compares every pair of slices (O(n^2 * slice size)); slices holding NaN are all distinct and may be",
    "  ordered differently from torch. `sort`/`argsort`/`topk` are stable (torch's `stable=True` order). Rows up to",
    "  16,384 elements sort by comparing every pair (O(n^2), two kernels); longer rows sort blocks of 2,048 that way and",
    "  merge them with a bitonic network in Stone's perfect-shuffle form (O(n log^2 n)): every merge step is the same",
    "  compiled kernel reading its stage from a small buffer, so a sort of 2^17 floats compiles 7 kernels with its",
    "  backward (2.7 s cold, measured here) and runs each step as one launch.",
    "* Matrix norms that need singular values (`norm('nuc')`, `norm(2 or -2, dim=(a, b))`) raise `NotImplementedError`",
    "  naming `norm`; there is no SVD.",
    "",
    "## Every public name",
    "",
    head, sep,
  ]
  for r in records:
    cells = [r["dtypes"].get(d, "") for d in DTYPES] if r["dtypes"] else [""] * len(DTYPES)
    note = f"`{r['call']}`" if r["call"] else (r.get("error", "") or r.get("doc", ""))
    note = note.replace("|", "\\|")
    lines.append(f"| `{r['name']}` | {r['kind']} | {r['grad']} | " + " | ".join(cells) + f" | {note} |")
  n_ops = sum(1 for r in records if r["kind"] in ("method", "static"))
  n_grad = sum(1 for r in records if r["grad"] == "yes")
  lines += ["", f"{len(records)} public names; {n_ops} tensor ops, {n_grad} of them with a nonzero gradient on the sample call.", ""]
  return "\n".join(lines)

def main() -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("--one", help="print the JSON record of one public name and exit")
  ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
  ap.add_argument("--out", default=OUT)
  args = ap.parse_args()
  if args.one:
    sys.path.insert(0, ROOT)
    print(json.dumps(record(args.one)))
    return 0
  names = public_names()
  with ThreadPoolExecutor(max(1, args.jobs)) as ex: records = list(ex.map(_one_in_subprocess, names))
  with open(args.out, "w", encoding="utf-8") as f: f.write(render(records))
  bad = [r["name"] for r in records if r["grad"] in ("crash", "timeout", "?")]
  print(f"wrote {os.path.relpath(args.out, ROOT)}: {len(records)} names" + (f"; no working sample for: {', '.join(bad)}" if bad else ""))
  return 0

if __name__ == "__main__":
  sys.exit(main())
