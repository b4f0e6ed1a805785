"""Layers in tinygrad's plain-class style: a layer is an object holding Tensors and is called like a function.
Its parameters are found by reflection (`get_state_dict`, `get_parameters`), with PyTorch's names, so a
PyTorch state dict loads with `load_state_dict(layer, {k: v.numpy() for k, v in torch_sd.items()})`.

Initializations match PyTorch's defaults (Linear/Conv: kaiming_uniform(a=sqrt(5)) weights and
U(-1/sqrt(fan_in), 1/sqrt(fan_in)) biases, Embedding: N(0, 1), norms: ones and zeros, ...).

Train/eval: layers read the global `Tensor.training` (Dropout, BatchNorm, MultiheadAttention's dropout).
`with nn.train(): ...` sets it for a block (also a decorator); `nn.eval()` clears it.

>>> from petagrad import Tensor, nn
>>> net = nn.Sequential(nn.Linear(4, 8), Tensor.relu, nn.Linear(8, 2))
>>> net(Tensor.ones(3, 4)).shape
(3, 2)
>>> sorted(nn.state.get_state_dict(net))
['0.bias', '0.weight', '2.bias', '2.weight']
"""
from __future__ import annotations
import math
from typing import Any, Callable, Sequence
from petagrad.tensor import Tensor, _fail, _int_arg, _shape_arg
from petagrad.dtype import dtypes
from petagrad.helpers import Context, prod
from petagrad.nn import state, optim   # noqa: F401  (nn.state, nn.optim like tinygrad)
from petagrad.nn.state import get_state_dict, get_parameters, load_state_dict   # noqa: F401
from petagrad.nn.recompute import checkpoint   # noqa: F401

def __getattr__(name: str) -> Any:
  """`nn.datasets` (tinygrad's `from tinygrad import nn; nn.datasets.mnist()`), imported on first use: it pulls in
  urllib and tarfile, which nothing else here needs."""
  if name == "datasets":
    import importlib
    return importlib.import_module("petagrad.nn.datasets")
  raise AttributeError(f"module 'petagrad.nn' has no attribute {name!r}")

# ====================================================================== train / eval

def train(mode: bool = True) -> Context:
  """`with nn.train(): ...` (or `@nn.train()`): training mode inside, restored after (Tensor.train, the TRAINING flag)."""
  return Tensor.train(mode)

def eval() -> Context:   # noqa: A001  (torch's name)
  """`with nn.eval(): ...`: Tensor.training = False inside the block."""
  return Tensor.train(False)

# ====================================================================== helpers

def _uniform(shape: Sequence[int], bound: float, dtype=None, device=None) -> Tensor:
  return Tensor.uniform(*shape, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=True)

def _param(t: Tensor) -> Tensor: return t.requires_grad_(True)

def _filled(shape: int | Sequence[int], value: float | int, dtype=None, device=None) -> Tensor:
  """A tensor in a realized buffer of its own, filled with value (state that is written in place from the start)."""
  return Tensor.empty(*_ntuple(shape, 1), dtype=dtype, device=device).assign(value)

def _buffer(t: Tensor) -> Tensor:
  t.requires_grad = False
  return t

def _ntuple(x: int | Sequence[int], n: int) -> tuple[int, ...]: return (x,) * n if isinstance(x, int) else tuple(x)

def _sizes(layer: str, name: str, x: Any, n: int, minimum: int = 0) -> tuple[int, ...]:
  """A layer's size argument: an int or n ints (each >= minimum), checked where the layer is made."""
  v = (x,) * n if not isinstance(x, (tuple, list)) else tuple(x)
  if len(v) != n: raise _fail(ValueError, layer, f"{name} must be an int or {n} ints, got {x!r}")
  return tuple(_int_arg(layer, name, e, minimum=minimum) for e in v)

def _last_dim(layer: str, x: Any, want: int, what: str = "in_features") -> None:
  """A layer's input must be a Tensor whose last dim is `want`."""
  if not isinstance(x, Tensor): raise _fail(TypeError, layer, f"expected a Tensor input, got {type(x).__name__}")
  if x.ndim == 0 or x.shape[-1] != want:
    raise _fail(ValueError, layer, f"expected input (..., {want}) ({what}={want}), got shape {x.shape}", x)

# ====================================================================== Module

class Module:
  """A PyTorch-style base class for your own models (and the base of every layer here): subclass it, set layers and
  Tensors as attributes, define `forward`; calling the model calls forward. Nothing needs registering (no
  `super().__init__()` needed, though it is fine): parameters are found by reflection, like `get_state_dict`.

  parameters() / named_parameters(): the distinct tensors that are not buffers (requires_grad True, or None: tinygrad's
  "not decided", which optimizers make True); buffers() / named_buffers(): requires_grad=False tensors (BatchNorm's
  running statistics). state_dict() has both, under PyTorch's names. train() / eval() set the global training mode
  that petagrad's layers read (Tensor.training): unlike torch it is not per module.

  >>> from petagrad import Tensor, nn
  >>> class Net(nn.Module):
  ...   def __init__(self):
  ...     super().__init__()
  ...     self.fc1, self.bn, self.fc2 = nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2)
  ...   def forward(self, x): return self.fc2(self.bn(self.fc1(x)).relu())
  >>> net = Net()
  >>> [n for n, _ in net.named_parameters()]
  ['fc1.weight', 'fc1.bias', 'bn.weight', 'bn.bias', 'fc2.weight', 'fc2.bias']
  >>> [n for n, _ in net.named_buffers()]
  ['bn.running_mean', 'bn.running_var', 'bn.num_batches_tracked']
  >>> net.eval().training, net(Tensor.ones(3, 4)).shape
  (False, (3, 2))
  """
  def __call__(self, *args: Any, **kwargs: Any) -> Any: return self.forward(*args, **kwargs)
  def forward(self, *args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError(f"{type(self).__name__} is an nn.Module without a forward(...) method: define one")

  # ---------------------------------------------------------------- tensors
  def state_dict(self, prefix: str = "") -> dict[str, Tensor]:
    """Every tensor reachable from the module, by PyTorch-style dotted name (get_state_dict): parameters and buffers."""
    return get_state_dict(self, prefix)
  def load_state_dict(self, state_dict: Any, strict: bool = True) -> state.LoadResult:
    """Copy state_dict's values (petagrad Tensors, numpy arrays, torch tensors) into the module's tensors, in place
    (nn.state.load_state_dict). strict=True: missing, unexpected or mis-shaped keys raise StateDictError (a
    RuntimeError and a ValueError), and nothing is loaded."""
    return load_state_dict(self, state_dict, strict=strict)
  def _named(self, prefix: str, buffers: bool) -> list[tuple[str, Tensor]]:
    seen: set[int] = set()
    out: list[tuple[str, Tensor]] = []
    for k, t in get_state_dict(self, prefix + "." if prefix else "").items():
      if id(t) in seen or (t.requires_grad is False) != buffers: continue
      seen.add(id(t)); out.append((k, t))
    return out
  def named_parameters(self, prefix: str = "") -> list[tuple[str, Tensor]]:
    """(name, tensor) of each distinct parameter (a tied weight once, under its first name)."""
    return self._named(prefix, False)
  def parameters(self) -> list[Tensor]:
    """The distinct parameters (what an optimizer takes): `nn.optim.AdamW(model.parameters())`."""
    return [t for _, t in self._named("", False)]
  def named_buffers(self, prefix: str = "") -> list[tuple[str, Tensor]]:
    """(name, tensor) of each distinct requires_grad=False tensor."""
    return self._named(prefix, True)
  def buffers(self) -> list[Tensor]: return [t for _, t in self._named("", True)]
  def zero_grad(self, set_to_none: bool = True) -> None:
    """Forget the parameters' gradients (None, or zeros with set_to_none=False)."""
    for p in self.parameters(): p.grad = None if set_to_none or p.grad is None else p.grad.zeros_like()
  def requires_grad_(self, requires_grad: bool = True) -> Module:
    for p in self.parameters(): p.requires_grad = requires_grad
    return self

  # ---------------------------------------------------------------- submodules
  def named_modules(self, prefix: str = "") -> list[tuple[str, Module]]:
    """(name, module) of this module (name prefix) and every Module reachable from it, each once."""
    out: list[tuple[str, Module]] = []
    _walk_modules(self, prefix, out, set())
    return out
  def modules(self) -> list[Module]: return [m for _, m in self.named_modules()]
  def named_children(self) -> list[tuple[str, Module]]:
    """The Modules directly held by this one (attributes, list entries, dict values)."""
    return [(k, m) for k, m in self.named_modules() if k and "." not in k]
  def children(self) -> list[Module]: return [m for _, m in self.named_children()]
  def apply(self, fn: Callable[[Module], Any]) -> Module:
    """fn(m) for every submodule m, then for this one (torch's order); returns self."""
    for m in reversed(self.modules()): fn(m)
    return self

  # ---------------------------------------------------------------- train / eval
  @property
  def training(self) -> bool:
    """The global training mode (Tensor.training): petagrad's layers read it, so it is the same for every module."""
    return bool(Tensor.training)
  @training.setter
  def training(self, mode: bool) -> None: Tensor.training = bool(mode)
  def train(self, mode: bool = True) -> Module:
    """Set the global training mode (Dropout drops, BatchNorm uses and updates batch statistics) and return self."""
    Tensor.training = bool(mode)
    return self
  def eval(self) -> Module:   # noqa: A003
    """train(False)."""
    return self.train(False)

def _walk_modules(obj: Any, prefix: str, out: list, seen: set[int]) -> None:
  if isinstance(obj, state._SKIP) or isinstance(obj, Tensor) or id(obj) in seen: return
  seen.add(id(obj))
  if isinstance(obj, Module): out.append((prefix, obj))
  if isinstance(obj, dict): items: Any = obj.items()
  elif isinstance(obj, (list, tuple)): items = enumerate(obj)
  elif hasattr(obj, "__dict__"): items = vars(obj).items()   # a Module, or a plain (tinygrad-style) class holding layers
  else: return
  for k, v in list(items): _walk_modules(v, f"{prefix}.{k}" if prefix else str(k), out, seen)

# ====================================================================== containers

class Sequential(Module, list):
  """A list of callables applied in order (layers, `Tensor.relu`, lambdas). Being a list, its state-dict keys
  are "0.weight", "1.bias", ... like torch.nn.Sequential."""
  def __init__(self, *layers: Callable):
    super().__init__(layers[0] if len(layers) == 1 and isinstance(layers[0], (list, tuple)) else layers)
  def forward(self, x: Tensor) -> Tensor:
    for f in self: x = f(x)
    return x

# ====================================================================== linear and embedding

class Linear(Module):
  """y = x @ weight.T + bias; weight (out_features, in_features) like torch.nn.Linear."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True, dtype=None, device=None):
    in_features, out_features = _int_arg("Linear", "in_features", in_features), _int_arg("Linear", "out_features", out_features)
    bound = 1 / math.sqrt(in_features) if in_features else 0.0
    self.weight = Tensor.kaiming_uniform(out_features, in_features, a=math.sqrt(5), dtype=dtype, device=device, requires_grad=True)
    self.bias = _uniform((out_features,), bound, dtype, device) if bias else None
  def forward(self, x: Tensor) -> Tensor:
    _last_dim("Linear", x, self.weight.shape[1])
    return x.linear(self.weight, self.bias)

class Embedding(Module):
  """Rows of weight (num_embeddings, embedding_dim) picked by integer indices; init N(0, 1) like torch.
  padding_idx: that row starts at zero and gets no gradient."""
  def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, dtype=None, device=None):
    num_embeddings, embedding_dim = _int_arg("Embedding", "num_embeddings", num_embeddings), _int_arg("Embedding", "embedding_dim", embedding_dim)
    self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
    if padding_idx is not None and not -num_embeddings <= _int_arg("Embedding", "padding_idx", padding_idx, minimum=None) < num_embeddings:
      raise _fail(ValueError, "Embedding", f"padding_idx ({padding_idx}) must be within num_embeddings ({num_embeddings})")
    if padding_idx is not None and padding_idx < 0: padding_idx += num_embeddings
    self.padding_idx = padding_idx
    w = Tensor.randn(num_embeddings, embedding_dim, dtype=dtype, device=device)
    if padding_idx is not None: w = (Tensor.arange(num_embeddings, device=device) == padding_idx).reshape(-1, 1).where(0, w)
    self.weight = _param(w)
  def forward(self, idx: Tensor) -> Tensor:
    if not isinstance(idx, Tensor) or not idx.dtype.is_int:
      raise _fail(TypeError, "Embedding", f"indices must be an integer Tensor, got {idx.dtype if isinstance(idx, Tensor) else type(idx).__name__}", *([idx] if isinstance(idx, Tensor) else []))
    from petagrad.mixin.indexing import _checked_index
    idx = _checked_index("Embedding", idx, self.num_embeddings, 0, False, idx)   # like torch: 0 <= index < num_embeddings
    w = self.weight
    if self.padding_idx is not None:
      w = (Tensor.arange(self.num_embeddings, device=w.device) == self.padding_idx).reshape(-1, 1).where(w.detach(), w)
    # a one-hot product: a gather (lowering turns the sum into one load per element: docs/fusion.md) whose gradient is
    # a product too (no scatter needed). Written out, not as a matmul: matmul may copy its right operand into another
    # layout first, a copy of the whole table for what reads one row of it
    onehot = idx.unsqueeze(-1) == Tensor.arange(self.num_embeddings, device=idx.device)
    return (onehot.cast(w.dtype).unsqueeze(-1) * w).sum(-2)

# ====================================================================== convolutions

class _ConvBase(Module):
  """What convolutions and transposed convolutions share: argument checks and torch's default init
  (kaiming_uniform(a=sqrt(5)) weight, bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = prod(weight.shape[1:]))."""
  n: int = 2
  def _init(self, in_channels: int, out_channels: int, kernel_size, groups: int, transposed: bool, bias: bool, dtype, device) -> None:
    layer = type(self).__name__
    in_channels, out_channels = _int_arg(layer, "in_channels", in_channels), _int_arg(layer, "out_channels", out_channels)
    groups = _int_arg(layer, "groups", groups, minimum=1)
    if in_channels % groups or out_channels % groups:
      raise _fail(ValueError, layer, f"in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups ({groups})")
    self.kernel_size = _sizes(layer, "kernel_size", kernel_size, self.n, minimum=1)
    self.groups = groups
    # conv: (out, in // groups, *k); transposed: (in, out // groups, *k)
    shape = (in_channels, out_channels // groups, *self.kernel_size) if transposed else (out_channels, in_channels // groups, *self.kernel_size)
    self.weight = Tensor.kaiming_uniform(*shape, a=math.sqrt(5), dtype=dtype, device=device, requires_grad=True)
    fan_in = prod(shape[1:])
    self.bias = _uniform((out_channels,), 1 / math.sqrt(fan_in) if fan_in else 0.0, dtype, device) if bias else None

class _ConvNd(_ConvBase):
  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1, groups: int = 1,
               bias: bool = True, padding_mode: str = "zeros", dtype=None, device=None):
    layer = type(self).__name__
    if padding_mode not in ("zeros", "reflect", "replicate", "circular"): raise _fail(ValueError, layer, f"padding_mode must be zeros, reflect, replicate or circular, got {padding_mode!r}")
    strides = _sizes(layer, "stride", stride, self.n, minimum=1)
    dilations = _sizes(layer, "dilation", dilation, self.n, minimum=1)
    self._init(in_channels, out_channels, kernel_size, groups, False, bias, dtype, device)
    self._pads = _conv_pads(layer, padding, self.n, self.kernel_size, dilations, strides)   # checked here, where the layer is made
    self.stride, self.padding, self.dilation, self.padding_mode = stride, padding, dilation, padding_mode
  def forward(self, x: Tensor) -> Tensor:
    padding = self.padding
    if self.padding_mode != "zeros":
      x = x.pad_mode([p for pr in reversed(self._pads) for p in pr], mode=self.padding_mode)
      padding = 0
    return x.conv2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation, padding=padding)

def _conv_pads(layer: str, padding: Any, n: int, k: Sequence[int], d: Sequence[int], s: Sequence[int] | None) -> list[tuple[int, int]]:
  """A convolution layer's padding argument as one (before, after) pair per spatial dim, checked where the layer is
  made (ValueError/TypeError naming the layer and `padding`): an int, n ints, n (before, after) pairs or 2n ints in
  F.pad order (last dim first, tinygrad's form), all >= 0; 'valid'; 'same' (stride 1 only, like torch). s None: a
  transposed convolution, which takes no strings."""
  if isinstance(padding, str):
    if s is None: raise _fail(ValueError, layer, f"padding must be ints (a transposed convolution has no 'same' or 'valid'), got {padding!r}")
    if padding == "valid": return [(0, 0)] * n
    if padding != "same": raise _fail(ValueError, layer, f"padding string must be 'same' or 'valid', got {padding!r}")
    if any(v != 1 for v in s): raise _fail(ValueError, layer, f"padding='same' is not supported for strided convolutions (stride {tuple(s)}); give the padding as ints")
    return [((dd * (kk - 1)) // 2, dd * (kk - 1) - (dd * (kk - 1)) // 2) for kk, dd in zip(k, d)]
  p = tuple(padding) if isinstance(padding, (tuple, list)) else None
  if p is not None and len(p) == n and all(isinstance(v, (tuple, list)) for v in p):
    if not all(len(v) == 2 for v in p): raise _fail(ValueError, layer, f"padding must hold {n} (before, after) pairs, got {padding!r}")
    pairs = [tuple(_int_arg(layer, "padding", u) for u in v) for v in p]
  elif p is not None and len(p) == 2 * n and n > 1 or n == 1 and p is not None and len(p) == 2:
    q = [_int_arg(layer, "padding", v) for v in p]
    pairs = [(q[2 * (n - 1 - i)], q[2 * (n - 1 - i) + 1]) for i in range(n)]
  elif p is not None and len(p) != n:
    raise _fail(ValueError, layer, f"padding must be an int, {n} ints, {n} (before, after) pairs or {2 * n} ints (F.pad order), or 'same' / 'valid', got {padding!r}")
  else: pairs = [(v, v) for v in _sizes(layer, "padding", padding, n)]
  return pairs  # type: ignore[return-value]

class Conv1d(_ConvNd):
  """torch.nn.Conv1d: input (N, C, L) -> (N, out_channels, L')."""
  n = 1
class Conv2d(_ConvNd):
  """torch.nn.Conv2d: input (N, C, H, W) -> (N, out_channels, H', W').

  >>> from petagrad import Tensor
  >>> Conv2d(3, 8, 3, stride=2, padding=1)(Tensor.ones(1, 3, 16, 16)).shape
  (1, 8, 8, 8)
  """
  n = 2
class Conv3d(_ConvNd):
  """torch.nn.Conv3d: input (N, C, D, H, W)."""
  n = 3

class _ConvTransposeNd(_ConvBase):
  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0, groups: int = 1,
               bias: bool = True, dilation=1, dtype=None, device=None):
    layer = type(self).__name__
    strides = _sizes(layer, "stride", stride, self.n, minimum=1)
    dilations = _sizes(layer, "dilation", dilation, self.n, minimum=1)
    outs = _sizes(layer, "output_padding", output_padding, self.n)
    if any(o >= max(st, dl) for o, st, dl in zip(outs, strides, dilations)):
      raise _fail(ValueError, layer, f"output_padding {outs} must be smaller than either stride {strides} or dilation {dilations}")
    self._init(in_channels, out_channels, kernel_size, groups, True, bias, dtype, device)
    _conv_pads(layer, padding, self.n, self.kernel_size, dilations, None)
    self.stride, self.padding, self.output_padding, self.dilation = stride, padding, output_padding, dilation
  def forward(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, groups=self.groups, stride=self.stride, dilation=self.dilation,
                              padding=self.padding, output_padding=self.output_padding)

class ConvTranspose1d(_ConvTransposeNd):
  """torch.nn.ConvTranspose1d; weight (in_channels, out_channels // groups, k)."""
  n = 1
class ConvTranspose2d(_ConvTransposeNd):
  """torch.nn.ConvTranspose2d; weight (in_channels, out_channels // groups, kh, kw).

  >>> from petagrad import Tensor
  >>> ConvTranspose2d(8, 3, 4, stride=2, padding=1)(Tensor.ones(1, 8, 8, 8)).shape
  (1, 3, 16, 16)
  """
  n = 2
class ConvTranspose3d(_ConvTransposeNd):
  """torch.nn.ConvTranspose3d; weight (in_channels, out_channels // groups, kd, kh, kw)."""
  n = 3

# ====================================================================== normalization

def _norm_state(layer: Any, num_features: int, affine: bool, track_running_stats: bool, dtype, device) -> None:
  """BatchNorm's and InstanceNorm's tensors: weight (ones) and bias (zeros) when affine; running_mean (zeros),
  running_var (ones) and num_batches_tracked (0, int64) when tracking running statistics, else None."""
  layer.weight = _param(_filled(num_features, 1.0, dtype, device)) if affine else None
  layer.bias = _param(_filled(num_features, 0.0, dtype, device)) if affine else None
  if track_running_stats:   # buffers from the start: the training forward writes them in place
    layer.running_mean = _buffer(_filled(num_features, 0.0, dtype, device))
    layer.running_var = _buffer(_filled(num_features, 1.0, dtype, device))
    layer.num_batches_tracked = _buffer(_filled((), 0, dtypes.int64, device))
  else: layer.running_mean, layer.running_var, layer.num_batches_tracked = None, None, None

class BatchNorm(Module):
  """torch.nn.BatchNorm{1,2,3}d over (N, C, *). In training (Tensor.training) it normalizes with the batch
  statistics and updates running_mean / running_var (unbiased) in place; in eval it uses the running stats.
  momentum=None: a cumulative average (factor 1 / num_batches_tracked), like torch.
  track_running_stats=False: batch statistics always, no running stats. affine=False: no weight and bias.

  >>> from petagrad import Tensor
  >>> bn = BatchNorm2d(2)
  >>> with train(): _ = bn(Tensor([[[[1.0]], [[2.0]]], [[[3.0]], [[6.0]]]]))   # (N=2, C=2, 1, 1)
  >>> [round(v, 4) for v in bn.running_mean.tolist()], bn.num_batches_tracked.item()
  ([0.2, 0.4], 1)
  """
  def __init__(self, num_features: int | None = None, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
               track_running_stats: bool = True, dtype=None, device=None, *, sz: int | None = None):
    layer = type(self).__name__
    # tinygrad's keyword for num_features: BatchNorm(sz=64)
    if (num_features is None) == (sz is None): raise _fail(TypeError, layer, "give num_features (or tinygrad's sz=), once")
    num_features = _int_arg(layer, "num_features", num_features if sz is None else sz)
    if isinstance(momentum, bool) or not (momentum is None or isinstance(momentum, (int, float))):
      raise _fail(TypeError, layer, f"momentum must be a float or None, got {momentum!r}. The arguments follow torch: (num_features, eps, momentum, "
                  "affine, track_running_stats); tinygrad's order is (sz, eps, affine, track_running_stats, momentum): pass them by keyword")
    self.num_features, self.eps, self.momentum, self.affine, self.track_running_stats = num_features, eps, momentum, affine, track_running_stats
    _norm_state(self, num_features, affine, track_running_stats, dtype, device)
  ndims: tuple[int, ...] = ()   # the input ranks BatchNorm1d/2d/3d take, like torch (BatchNorm: any rank >= 2)
  def _check(self, x: Tensor) -> None:
    layer = type(self).__name__
    if not isinstance(x, Tensor): raise _fail(TypeError, layer, f"expected a Tensor input, got {type(x).__name__}")
    if self.ndims and x.ndim not in self.ndims:
      raise _fail(ValueError, layer, f"expected a {' or '.join(f'{d}-d' for d in self.ndims)} input (N, {self.num_features}, *), got shape {x.shape}", x)
    if x.ndim < 2 or x.shape[1] != self.num_features:
      raise _fail(ValueError, layer, f"expected input (N, {self.num_features}, *) for num_features={self.num_features}, got shape {x.shape}", x)
  def forward(self, x: Tensor) -> Tensor:
    self._check(x)
    if not Tensor.training and self.track_running_stats:
      assert self.running_mean is not None and self.running_var is not None
      return x.batch_norm(self.running_mean, self.running_var, self.weight, self.bias, training=False, eps=self.eps)
    if not self.track_running_stats: return x.batch_norm(None, None, self.weight, self.bias, training=True, eps=self.eps)
    assert self.running_mean is not None and self.running_var is not None and self.num_batches_tracked is not None
    # the running statistics are written now, in place (Tensor.assign realizes); x is realized first, or the kernel
    # computing the batch mean for them would recompute x's graph (a convolution) fused into its reduce
    x = x.realize()
    self.num_batches_tracked.assign(self.num_batches_tracked + 1)
    if self.momentum is not None:
      out = x.batch_norm(self.running_mean, self.running_var, self.weight, self.bias, training=True, momentum=self.momentum, eps=self.eps)
    else:
      # cumulative moving average: factor 1 / num_batches_tracked (a tensor, so no Python sync)
      axes = (0,) + tuple(range(2, x.ndim))
      n = prod(x.shape[a] for a in axes)
      out = x.batch_norm(None, None, self.weight, self.bias, training=True, eps=self.eps)   # raises first for 1 value per channel
      if n:   # an empty batch leaves the statistics alone (torch)
        xf = x.float()
        mean, var = xf.mean(axes), xf.var(axes, correction=0)
        f = 1 / self.num_batches_tracked.float()
        self.running_mean.assign(self.running_mean + (mean.detach() - self.running_mean) * f)
        self.running_var.assign(self.running_var + (var.detach() * (n / max(n - 1, 1)) - self.running_var) * f)
    return out

class BatchNorm1d(BatchNorm):
  """torch.nn.BatchNorm1d: input (N, C) or (N, C, L)."""
  ndims = (2, 3)
class BatchNorm2d(BatchNorm):
  """torch.nn.BatchNorm2d: input (N, C, H, W)."""
  ndims = (4,)
class BatchNorm3d(BatchNorm):
  """torch.nn.BatchNorm3d: input (N, C, D, H, W)."""
  ndims = (5,)

class InstanceNorm(Module):
  """torch.nn.InstanceNorm{1,2,3}d: normalize each (sample, channel) over its spatial dims. Defaults like torch:
  affine=False, track_running_stats=False."""
  def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1, affine: bool = False,
               track_running_stats: bool = False, dtype=None, device=None):
    self.num_features, self.eps, self.momentum, self.affine, self.track_running_stats = num_features, eps, momentum, affine, track_running_stats
    _norm_state(self, num_features, affine, track_running_stats, dtype, device)
  def forward(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_features:
      raise _fail(ValueError, type(self).__name__, f"expected input (N, {self.num_features}, *spatial) for num_features={self.num_features}, got shape {x.shape}", x)
    use_input_stats = Tensor.training or not self.track_running_stats
    if self.track_running_stats and Tensor.training:   # (like torch, num_batches_tracked is not counted)
      return x.instance_norm(self.running_mean, self.running_var, self.weight, self.bias, True, self.momentum, self.eps)
    return x.instance_norm(self.running_mean, self.running_var, self.weight, self.bias, use_input_stats, self.momentum, self.eps)

InstanceNorm1d = InstanceNorm2d = InstanceNorm3d = InstanceNorm

class LayerNorm(Module):
  """torch.nn.LayerNorm: normalize over the trailing dims normalized_shape, then weight and bias."""
  def __init__(self, normalized_shape: int | Sequence[int], eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True, dtype=None, device=None):
    self.normalized_shape = _shape_arg("LayerNorm", (normalized_shape,), name="normalized_shape")
    self.eps = eps
    self.weight = _param(_filled(self.normalized_shape, 1.0, dtype, device)) if elementwise_affine else None
    self.bias = _param(_filled(self.normalized_shape, 0.0, dtype, device)) if elementwise_affine and bias else None
  def forward(self, x: Tensor) -> Tensor: return x.layer_norm(self.normalized_shape, self.weight, self.bias, self.eps)

class LayerNorm2d(LayerNorm):
  """tinygrad's LayerNorm2d: LayerNorm over the channel dim of an (N, C, H, W) input (each pixel normalized across
  its C channels), weight and bias of shape (C,). LayerNorm2d(C) is LayerNorm(C) applied to x.permute(0, 2, 3, 1).

  >>> from petagrad import Tensor
  >>> LayerNorm2d(3)(Tensor.ones(2, 3, 4, 5)).shape
  (2, 3, 4, 5)
  """
  def forward(self, x: Tensor) -> Tensor:
    if not isinstance(x, Tensor): raise _fail(TypeError, "LayerNorm2d", f"expected a Tensor input, got {type(x).__name__}")
    if x.ndim != 4 or x.shape[1:2] != self.normalized_shape:
      raise _fail(ValueError, "LayerNorm2d", f"expected input (N, {', '.join(map(str, self.normalized_shape))}, H, W), got shape {x.shape}", x)
    return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class RMSNorm(Module):
  """torch.nn.RMSNorm: x / sqrt(mean(x^2) + eps) over normalized_shape, times weight (ones). eps None: the
  dtype's machine epsilon, like torch."""
  def __init__(self, normalized_shape: int | Sequence[int], eps: float | None = None, elementwise_affine: bool = True, dtype=None, device=None):
    self.normalized_shape, self.eps = _shape_arg("RMSNorm", (normalized_shape,), name="normalized_shape"), eps
    self.weight = _param(_filled(self.normalized_shape, 1.0, dtype, device)) if elementwise_affine else None
  def forward(self, x: Tensor) -> Tensor: return x.rms_norm(self.normalized_shape, self.weight, self.eps)

class GroupNorm(Module):
  """torch.nn.GroupNorm: normalize over (channels of a group, *spatial) per sample, per-channel affine."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, dtype=None, device=None):
    num_groups, num_channels = _int_arg("GroupNorm", "num_groups", num_groups, minimum=1), _int_arg("GroupNorm", "num_channels", num_channels)
    if num_channels % num_groups: raise _fail(ValueError, "GroupNorm", f"num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight = _param(_filled(num_channels, 1.0, dtype, device)) if affine else None
    self.bias = _param(_filled(num_channels, 0.0, dtype, device)) if affine else None
  def forward(self, x: Tensor) -> Tensor: return x.group_norm(self.num_groups, self.weight, self.bias, self.eps)

# ====================================================================== dropout

class Dropout(Module):
  """Zero elements with probability p and scale the rest by 1/(1-p), only while Tensor.training."""
  def __init__(self, p: float = 0.5):
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
      raise _fail(ValueError, "Dropout", f"dropout probability has to be between 0 and 1, but got {p!r}")
    self.p = p
  def forward(self, x: Tensor) -> Tensor: return x.dropout(self.p)

# ====================================================================== recurrent

class LSTMCell(Module):
  """torch.nn.LSTMCell: (x, (h, c)) -> (h', c'); gates i, f, g, o stacked in weight_ih (4H, I) and weight_hh
  (4H, H); all parameters U(-1/sqrt(H), 1/sqrt(H)) like torch. hc=None starts from zeros."""
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True, dtype=None, device=None):
    self.input_size, self.hidden_size = _int_arg("LSTMCell", "input_size", input_size), _int_arg("LSTMCell", "hidden_size", hidden_size)
    k = 1 / math.sqrt(hidden_size) if hidden_size else 0.0
    self.weight_ih = _uniform((4 * hidden_size, input_size), k, dtype, device)
    self.weight_hh = _uniform((4 * hidden_size, hidden_size), k, dtype, device)
    self.bias_ih = _uniform((4 * hidden_size,), k, dtype, device) if bias else None
    self.bias_hh = _uniform((4 * hidden_size,), k, dtype, device) if bias else None
  def forward(self, x: Tensor, hc: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    _last_dim("LSTMCell", x, self.input_size, "input_size")
    if hc is None:
      z = Tensor.zeros(*x.shape[:-1], self.hidden_size, dtype=x.dtype, device=x.device)
      hc = (z, z)
    if not isinstance(hc, (tuple, list)) or len(hc) != 2: raise _fail(TypeError, "LSTMCell", f"hc must be a pair (h, c) of Tensors, got {type(hc).__name__}", x)
    h, c = hc
    for name, t in (("h", h), ("c", c)):
      if not isinstance(t, Tensor) or t.shape != x.shape[:-1] + (self.hidden_size,):
        raise _fail(ValueError, "LSTMCell", f"{name} must have shape {x.shape[:-1] + (self.hidden_size,)}, got {getattr(t, 'shape', type(t).__name__)}", x)
    H = self.hidden_size
    def gate(k: int) -> Tensor:
      sl = slice(k * H, (k + 1) * H)
      return x.linear(self.weight_ih[sl], self.bias_ih[sl] if self.bias_ih is not None else None) + \
             h.linear(self.weight_hh[sl], self.bias_hh[sl] if self.bias_hh is not None else None)
    i, f, g, o = (gate(k) for k in range(4))
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c

# ====================================================================== attention

class MultiheadAttention(Module):
  """torch.nn.MultiheadAttention. Inputs (L, N, E) or, with batch_first=True, (N, L, E); unbatched (L, E) too.
  Returns (attn_output, attn_weights): the weights averaged over heads (average_attn_weights=True) or per head,
  or None when need_weights=False. key_padding_mask (N, S) and attn_mask (L, S) or (N*heads, L, S): bool True
  means "do not attend" (torch's convention), float masks are added. Dropout on the attention weights only
  while Tensor.training. Parameter names follow torch (in_proj_weight, in_proj_bias, out_proj.weight, ...)."""
  def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True, add_bias_kv: bool = False,
               add_zero_attn: bool = False, kdim: int | None = None, vdim: int | None = None, batch_first: bool = False, dtype=None, device=None):
    embed_dim, num_heads = _int_arg("MultiheadAttention", "embed_dim", embed_dim, minimum=1), _int_arg("MultiheadAttention", "num_heads", num_heads, minimum=1)
    if embed_dim % num_heads: raise _fail(ValueError, "MultiheadAttention", f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
    if add_bias_kv or add_zero_attn: raise _fail(NotImplementedError, "MultiheadAttention", "add_bias_kv and add_zero_attn are not supported")
    self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
    self.kdim, self.vdim = kdim or embed_dim, vdim or embed_dim
    self.head_dim = embed_dim // num_heads
    if self.kdim == embed_dim and self.vdim == embed_dim:
      self.in_proj_weight = Tensor.glorot_uniform(3 * embed_dim, embed_dim, dtype=dtype, device=device, requires_grad=True)
      self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
    else:
      self.in_proj_weight = None
      self.q_proj_weight = Tensor.glorot_uniform(embed_dim, embed_dim, dtype=dtype, device=device, requires_grad=True)
      self.k_proj_weight = Tensor.glorot_uniform(embed_dim, self.kdim, dtype=dtype, device=device, requires_grad=True)
      self.v_proj_weight = Tensor.glorot_uniform(embed_dim, self.vdim, dtype=dtype, device=device, requires_grad=True)
    self.in_proj_bias = _param(_filled(3 * embed_dim, 0.0, dtype, device)) if bias else None
    self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype, device=device)
    if bias: self.out_proj.bias = _param(_filled(embed_dim, 0.0, dtype, device))

  def _proj(self, x: Tensor, i: int) -> Tensor:
    E = self.embed_dim
    if self.in_proj_weight is not None: w = self.in_proj_weight[i * E:(i + 1) * E]
    else: w = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[i]
    b = self.in_proj_bias[i * E:(i + 1) * E] if self.in_proj_bias is not None else None
    return x.linear(w, b)

  def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None, need_weights: bool = True,
               attn_mask: Tensor | None = None, average_attn_weights: bool = True, is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
    for name, t, want in (("query", query, self.embed_dim), ("key", key, self.kdim), ("value", value, self.vdim)):
      if not isinstance(t, Tensor): raise _fail(TypeError, "MultiheadAttention", f"{name} must be a Tensor, got {type(t).__name__}")
      if t.ndim not in (2, 3) or t.shape[-1] != want:
        raise _fail(ValueError, "MultiheadAttention", f"{name} must be (L, N, {want}), (N, L, {want}) or (L, {want}), got shape {t.shape}", t)
    if not query.ndim == key.ndim == value.ndim: raise _fail(ValueError, "MultiheadAttention", "query, key and value must all be batched or all unbatched", query, key, value)
    unbatched = query.ndim == 2
    if unbatched: query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    elif self.batch_first: query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
    if unbatched and key_padding_mask is not None: key_padding_mask = key_padding_mask.unsqueeze(0)
    L, N, _ = query.shape
    S = key.shape[0]
    H, D = self.num_heads, self.head_dim
    # (L, N, E) -> (N, H, L, D)
    q = self._proj(query, 0).reshape(L, N, H, D).permute(1, 2, 0, 3)
    k = self._proj(key, 1).reshape(S, N, H, D).permute(1, 2, 0, 3)
    v = self._proj(value, 2).reshape(S, N, H, D).permute(1, 2, 0, 3)
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(D))                      # (N, H, L, S)
    if is_causal and attn_mask is None: attn_mask = Tensor.ones(L, S, dtype=dtypes.bool, device=query.device).triu(1)
    if attn_mask is not None:
      m = attn_mask.reshape(N, H, L, S) if attn_mask.ndim == 3 else attn_mask
      scores = m.where(-math.inf, scores) if m.dtype == dtypes.bool else scores + m
    if key_padding_mask is not None:
      kp = key_padding_mask.reshape(N, 1, 1, S)
      scores = kp.where(-math.inf, scores) if kp.dtype == dtypes.bool else scores + kp
    w = scores.softmax(-1)
    wd = w.dropout(self.dropout) if self.dropout > 0 else w
    out = (wd @ v).permute(2, 0, 1, 3).reshape(L, N, self.embed_dim)            # (L, N, E)
    out = self.out_proj(out)
    if unbatched: out = out.squeeze(1)
    elif self.batch_first: out = out.transpose(0, 1)
    if not need_weights: return out, None
    weights = w.mean(1) if average_attn_weights else w
    return out, (weights.squeeze(0) if unbatched else weights)
