"""Random numbers: manual_seed, rand/randn/randint/uniform/normal (and *_like), randperm, multinomial, bernoulli,
dropout, and the torch.nn.init initializers (kaiming, glorot/xavier, trunc_normal).

Counter-based: every number is a hash of (seed, position in the stream, element index), computed inside the kernel.
The stream state (petagrad/engine/rng.py) sits in a small buffer the kernel reads, not in its source, so a JIT
replay advances it without recompiling.
"""
from __future__ import annotations
import math, operator
from petagrad.dtype import dtypes
from petagrad.helpers import prod, argfix
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.engine import rng
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import _fail, _is_intlike, _shape_arg, _int_arg, _check_fits, _dtype_arg
from petagrad.mixin.creation import _sizes

def _generator(op: str, generator) -> None:
  """torch's generator= argument: None (the global stream, the only one petagrad has) is accepted."""
  if generator is not None:
    raise _fail(TypeError, op, f"generator={type(generator).__name__} is not supported: petagrad has one random stream "
                "(seed it with Tensor.manual_seed); pass generator=None")

def _hash32_t(x: Tensor) -> Tensor:
  # the same mixing function as _hash32, as uint32 tensor ops (runs inside the kernel)
  x = x ^ (x >> 16); x = x * 0x7feb352d
  x = x ^ (x >> 15); x = x * 0x846ca68b
  return x ^ (x >> 16)

def _erfinv(x):
  """Inverse error function (M. Giles' single-precision polynomial approximation), composed from log/sqrt."""
  w = -((1 - x) * (1 + x)).log()
  a = w - 2.5
  p1 = 2.81022636e-08
  for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941):
    p1 = c + p1 * a
  b = w.maximum(5.0).sqrt() - 3
  p2 = -0.000200214257
  for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682):
    p2 = c + p2 * b
  return (w < 5.0).where(p1, p2) * x

def _gain(op: str, nonlinearity: str, a: float) -> float:
  if nonlinearity in ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "sigmoid"): return 1.0
  if nonlinearity == "tanh": return 5.0 / 3
  if nonlinearity == "relu": return math.sqrt(2.0)
  if nonlinearity == "leaky_relu": return math.sqrt(2.0 / (1 + a * a))
  if nonlinearity == "selu": return 3.0 / 4
  raise _fail(ValueError, op, f"unsupported nonlinearity {nonlinearity!r}")

def _fans(op: str, shape: tuple[int, ...]) -> tuple[int, int]:
  if len(shape) < 2: raise _fail(ValueError, op, f"fan in and fan out can not be computed for a shape with fewer than 2 dims: {shape}")
  rf = prod(shape[2:])
  return shape[1] * rf, shape[0] * rf

def _kaiming_fan(op: str, shape: tuple[int, ...], mode: str) -> int:
  if mode not in ("fan_in", "fan_out"): raise _fail(ValueError, op, f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
  return _fans(op, shape)[0 if mode == "fan_in" else 1]

class RandomMixin(TensorMixin):
  __slots__ = ()

  # ------------------------------------------------------------ the stream
  @staticmethod
  def manual_seed(seed: int = 0) -> None:
    """Make Tensor.rand & co reproducible."""
    rng.manual_seed(seed)
  @classmethod
  def _random_bits(cls, shape: tuple[int, ...], device: str) -> Tensor:
    """uint32 random bits: a hash of (seed, call counter, element index), computed in the kernel.
    The counter and keys live in a small buffer (not in the kernel source), so a JIT replay can
    advance them without recompiling."""
    n = prod(shape)
    state = cls(rng.state_buffer(n, device))
    ctr, k0, k1 = (state[i] for i in range(3))
    idx = cls(UOp(Ops.IOTA, dtypes.int64, (UOp(Ops.DEVICE, dtypes.bool, (), device),), n)).cast(dtypes.uint32)
    x = idx + ctr
    x = _hash32_t(x ^ k0) ^ k1
    x = _hash32_t(x)
    return x.reshape(shape)

  # ------------------------------------------------------------ distributions
  @classmethod
  def rand(cls, *shape, dtype=None, device=None, requires_grad=None, size=None, generator=None) -> Tensor:
    """Uniform random numbers in [0, 1). The shape: ints, one sequence, or torch's size=; generator=None is accepted.

    >>> Tensor.manual_seed(0); 0 <= Tensor.rand(3).max().item() < 1
    True
    """
    _generator("rand", generator)
    shape = _sizes("rand", shape, size)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    if not dt.is_float: raise _fail(TypeError, "rand", f"dtype must be a float dtype, got {dt}")
    bits = cls._random_bits(shape, cls._dev(device))
    # 24 random bits -> [0, 1) exactly representable in float32
    u = (bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))
    if dt != dtypes.float32: u = u.cast(dt)
    if dt.itemsize < 4: u = (u < 1.0).where(u, 0.0)   # rounding up to 1.0 in low precision
    return cls(u.uop, requires_grad=requires_grad)
  @classmethod
  def randn(cls, *shape, dtype=None, device=None, requires_grad=None, size=None, generator=None) -> Tensor:
    """Standard normal random numbers (Box-Muller). The shape: ints, one sequence, or torch's size=; generator=None
    is accepted."""
    _generator("randn", generator)
    shape = _sizes("randn", shape, size)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    u = cls.rand(2, *shape, dtype=dtypes.float32, device=device)
    r = ((1 - u[0]).log() * -2).sqrt()
    out = r * (u[1] * (2 * math.pi)).cos()
    return cls(out.cast(dt).uop, requires_grad=requires_grad)
  @classmethod
  def randint(cls, *args, low: int | None = None, high: int | None = None, size=None, dtype=None, device=None, generator=None,
              requires_grad=None) -> Tensor:
    """Random integers in [low, high), in dtypes.default_int unless dtype is given. Both call forms work:
      * torch's: `randint(high, size)`, `randint(low, high, size)` (size a tuple or list after the bounds), or size= /
        low= / high= keywords; a float dtype is allowed there (torch);
      * tinygrad's: `randint(*shape, low=0, high=10)` or `randint(shape)` (positional ints or one sequence are the shape;
        its defaults are [0, 10)); the dtype must be an int one there (tinygrad's TypeError).
    Both bounds must fit the dtype (like torch), high - low <= 2**32.

    >>> Tensor.randint(2, 3, low=5, high=10).shape, Tensor.randint((2, 3)).shape, Tensor.randint(5, 10, (4,)).shape
    ((2, 3), (2, 3), (4,))
    """
    _generator("randint", generator)
    # torch's size is never the first positional: one sequence alone is tinygrad's shape
    torch_form = size is not None or (len(args) >= 2 and isinstance(args[-1], (tuple, list)))
    if torch_form:   # torch: (high, size) or (low, high, size)
      if size is None: args, size = args[:-1], args[-1]
      if len(args) > 2: raise _fail(TypeError, "randint", f"takes (high, size) or (low, high, size), got {len(args)} bounds {args!r}")
      bounds = ([low] if low is not None else []) + list(args) + ([high] if high is not None else [])
      if len(bounds) == 1: bounds = [0] + bounds
      if len(bounds) != 2: raise _fail(TypeError, "randint", f"needs high (and optionally low), got low={low!r}, high={high!r} and {args!r}")
      low, high = bounds
      shape = _shape_arg("randint", (size,) if not isinstance(size, (tuple, list)) else tuple(size))
    else:   # tinygrad: randint(*shape, low=0, high=10)
      shape = _shape_arg("randint", args)
      low, high = (0 if low is None else low), (10 if high is None else high)
    low, high = _int_arg("randint", "low", low, minimum=None), _int_arg("randint", "high", high, minimum=None)
    if high <= low: raise _fail(ValueError, "randint", f"high ({high}) must be > low ({low})")
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_int
    if not torch_form and not dt.is_int:   # tinygrad refuses; torch's form (a size after the bounds) takes any dtype
      raise _fail(TypeError, "randint", f"dtype must be an integer dtype in tinygrad's form randint(*shape, low=, high=), got {dt} "
                  "(torch's randint(low, high, size, dtype=...) allows floats)")
    for v in (low, high - 1): _check_fits("randint", v, dt)
    if high - low > 1 << 32: raise _fail(ValueError, "randint", f"high - low ({high - low}) must be at most 2**32 (32 random bits per value)")
    bits = cls._random_bits(shape, cls._dev(device)).cast(dtypes.uint64)
    out = ((bits * (high - low)) >> 32).cast(dtypes.int64).add(low).cast(dt)
    return out if requires_grad is None else cls(out.uop, requires_grad=requires_grad)
  @classmethod
  def uniform(cls, *shape, low: float = 0.0, high: float = 1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    """tinygrad's uniform random numbers in [low, high). An int dtype gives ints, as tinygrad computes them:
    ((high - low) * rand).cast(dtype) + low (truncated toward zero, then shifted).

    >>> Tensor.uniform(2, 3, low=-1.0, high=1.0).shape, Tensor.uniform(3, low=-100, high=100, dtype="int32").dtype
    ((2, 3), dtypes.int32)
    """
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    if dt.is_bool: raise _fail(TypeError, "uniform", "dtype must be a float or an integer dtype, got dtypes.bool")
    if low > high: raise _fail(ValueError, "uniform", f"low ({low}) must be <= high ({high})")
    if not dt.is_float: return cls((((high - low) * cls.rand(*shape, device=device)).cast(dt) + low).uop, requires_grad=requires_grad)
    return cls((cls.rand(*shape, dtype=dt, device=device) * (high - low) + low).uop, requires_grad=requires_grad)
  @classmethod
  def scaled_uniform(cls, *shape, dtype=None, device=None, requires_grad=None) -> Tensor:
    """tinygrad's initializer: uniform in [-1, 1) scaled by 1/sqrt(prod(shape)). A class method, so tinygrad's
    instance calls (`x.scaled_uniform(8, 8)`) work too; the shape: ints or one sequence.

    >>> (Tensor.scaled_uniform(4, 4).abs().max() <= 0.25).item()
    True
    """
    shape = _shape_arg("scaled_uniform", shape)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    u = cls.uniform(shape, low=-1.0, high=1.0, dtype=dt, device=device) * (prod(shape) ** -0.5 if prod(shape) else 1.0)
    return cls(u.uop, requires_grad=requires_grad)
  @classmethod
  def normal(cls, *shape, mean: float = 0.0, std: float = 1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    return cls((cls.randn(*shape, dtype=dt, device=device) * std + mean).uop, requires_grad=requires_grad)
  def rand_like(self, dtype=None, device=None) -> Tensor:
    return type(self).rand(self.shape, dtype=dtype or (self.dtype if self.dtype.is_float else None), device=device or self.device)
  def randn_like(self, dtype=None, device=None) -> Tensor:
    return type(self).randn(self.shape, dtype=dtype or (self.dtype if self.dtype.is_float else None), device=device or self.device)
  @classmethod
  def randperm(cls, n: int, dtype=None, device=None, requires_grad=None, generator=None) -> Tensor:
    """A random permutation of 0..n-1, in dtypes.default_int unless dtype is given (torch's int64, tinygrad's int32):
    the ranks of n random keys, from O(n^2) pairwise comparisons (ties broken by position; one fused reduce, faster
    than a sort for small n); above 4096 elements an argsort of the keys."""
    _generator("randperm", generator)
    dtype = _dtype_arg(dtype) if dtype is not None else dtypes.default_int
    T = cls
    if not _is_intlike(n) or n < 0: raise _fail(ValueError, "randperm", f"n must be a non-negative int, got {n!r}")
    n = operator.index(n)   # a numpy int -> int
    if n == 0: return T.zeros(0, dtype=dtype, device=device)
    keys = T.rand(n, device=device)
    if n > 4096 and hasattr(T, "argsort"): return T(keys.argsort().cast(dtype).uop, requires_grad=requires_grad)
    ki, kj = keys.reshape(n, 1), keys.reshape(1, n)
    ar = T.arange(n, device=device)
    before = (kj < ki) | ((kj == ki) & (ar.reshape(1, n) < ar.reshape(n, 1)))
    return T(before.sum(1).cast(dtype).uop, requires_grad=requires_grad)
  def multinomial(self, num_samples: int = 1, replacement: bool = False, *, generator=None) -> Tensor:
    """Sample class indices (dtypes.default_int) from unnormalized non-negative weights (C,) or (B, C), like torch.multinomial.
    With replacement: inverse CDF (cumsum, then count the CDF entries below a uniform draw). Without: Gumbel keys and
    num_samples rounds of argmax that mask the chosen class (fine for small num_samples)."""
    op = "multinomial"
    _generator(op, generator)
    if self.ndim not in (1, 2): raise _fail(ValueError, op, f"probabilities must be 1-d or 2-d, got shape {self.shape}", self)
    if not _is_intlike(num_samples) or num_samples < 1: raise _fail(ValueError, op, f"num_samples must be a positive int, got {num_samples!r}", self)
    num_samples = operator.index(num_samples)
    C = self.shape[-1]
    if C == 0: raise _fail(ValueError, op, "cannot sample from an empty distribution", self)
    if not replacement and num_samples > C: raise _fail(ValueError, op, f"cannot sample {num_samples} > {C} classes without replacement", self)
    T = type(self)
    p = (self if self.ndim == 2 else self.unsqueeze(0))._float(op).detach()
    B = p.shape[0]
    ar = T.arange(C, device=self.device)
    if replacement:
      if hasattr(p, "cumsum"): cdf = p.cumsum(-1)   # (B, C)
      else: cdf = p.matmul((ar.reshape(C, 1) <= ar.reshape(1, C)).cast(p.dtype))
      u = T.rand(B, num_samples, 1, device=self.device, dtype=p.dtype) * cdf[:, C - 1:].reshape(B, 1, 1)
      out = (cdf.reshape(B, 1, C) <= u).sum(-1).minimum(C - 1)
    else:
      u = T.rand(B, C, device=self.device, dtype=dtypes.float32)
      keys = p.log().cast(dtypes.float32) - (-(u.maximum(1e-30).log())).log()
      picks = []
      for _ in range(num_samples):
        a = keys.argmax(-1, keepdim=True)
        picks.append(a)
        keys = (ar == a).where(-float("inf"), keys)
      out = picks[0].cat(*picks[1:], dim=-1)
    out = out.cast(dtypes.default_int)
    return out if self.ndim == 2 else out.reshape(num_samples)
  def bernoulli(self, p: float | None = None) -> Tensor:
    """0/1 samples: with probability self (torch.bernoulli(input)), or with probability p for every element
    (like torch.Tensor.bernoulli_(p)). Same dtype as self."""
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float))):
      raise _fail(TypeError, "bernoulli", f"p must be a float, got {type(p).__name__} {p!r}", self)
    if p is not None and not 0.0 <= p <= 1.0: raise _fail(ValueError, "bernoulli", f"p must be in [0, 1], got {p}", self)
    u = type(self).rand(*self.shape, device=self.device)
    hit = u < (p if p is not None else self.detach().cast(dtypes.float32))
    return hit.cast(self.dtype if self.dtype.is_float or self.dtype.is_int else dtypes.default_float)
  def dropout(self, p: float = 0.5) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) -- only when Tensor.training is True
    (an identity otherwise)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)):
      raise _fail(TypeError, "dropout", f"p must be a float, got {type(p).__name__} {p!r}", self)
    if not 0.0 <= p <= 1.0: raise _fail(ValueError, "dropout", f"dropout probability has to be between 0 and 1, but got {p}", self)
    if not type(self).training or p == 0: return self
    if p == 1: return self * 0
    keep = type(self).rand(*self.shape, device=self.device) >= p
    return keep.where(self, 0) * (1.0 / (1.0 - p))

  # ------------------------------------------------------------ initializers (torch.nn.init)
  @classmethod
  def kaiming_uniform(cls, *shape, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", dtype=None, device=None,
                      requires_grad=None) -> Tensor:
    """torch.nn.init.kaiming_uniform_: U(-b, b), b = gain * sqrt(3 / fan); gain sqrt(2 / (1 + a^2)) for leaky_relu."""
    shape = argfix(*shape)
    fan = _kaiming_fan("kaiming_uniform", shape, mode)
    bound = _gain("kaiming_uniform", nonlinearity, a) * math.sqrt(3.0 / fan) if fan else 0.0
    return cls.uniform(shape, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)
  @classmethod
  def kaiming_normal(cls, *shape, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", dtype=None, device=None,
                     requires_grad=None) -> Tensor:
    """torch.nn.init.kaiming_normal_: N(0, std^2), std = gain / sqrt(fan)."""
    shape = argfix(*shape)
    fan = _kaiming_fan("kaiming_normal", shape, mode)
    std = _gain("kaiming_normal", nonlinearity, a) / math.sqrt(fan) if fan else 0.0
    return cls.normal(shape, mean=0.0, std=std, dtype=dtype, device=device, requires_grad=requires_grad)
  @classmethod
  def glorot_uniform(cls, *shape, gain: float = 1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    """torch.nn.init.xavier_uniform_: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)) (torch's fans, receptive
    field included in both)."""
    shape = argfix(*shape)
    fan_in, fan_out = _fans("glorot_uniform", shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
    return cls.uniform(shape, low=-bound, high=bound, dtype=dtype, device=device, requires_grad=requires_grad)
  xavier_uniform = glorot_uniform
  @classmethod
  def glorot_normal(cls, *shape, gain: float = 1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    """torch.nn.init.xavier_normal_: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    shape = argfix(*shape)
    fan_in, fan_out = _fans("glorot_normal", shape)
    std = gain * math.sqrt(2.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
    return cls.normal(shape, mean=0.0, std=std, dtype=dtype, device=device, requires_grad=requires_grad)
  xavier_normal = glorot_normal
  @classmethod
  def trunc_normal(cls, *shape, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0, dtype=None, device=None,
                   requires_grad=None) -> Tensor:
    """torch.nn.init.trunc_normal_: N(mean, std^2) restricted to [a, b] (absolute bounds), by the inverse CDF."""
    shape = argfix(*shape)
    if not a < b: raise _fail(ValueError, "trunc_normal", f"need a < b, got a={a}, b={b}")
    if std <= 0: raise _fail(ValueError, "trunc_normal", f"std must be > 0, got {std}")
    def cdf(v): return (1.0 + math.erf(v / math.sqrt(2.0))) / 2.0
    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    T = cls
    u = T.uniform(shape, low=2 * lo - 1, high=2 * hi - 1, dtype=dtypes.float32, device=device)
    u = u.clip(-1 + 1e-7, 1 - 1e-7)
    x = (_erfinv(u) * (std * math.sqrt(2.0)) + mean).clip(a, b)
    from petagrad.dtype import to_dtype
    return T(x.cast(to_dtype(dtype) if dtype is not None else dtypes.default_float).uop, requires_grad=requires_grad)
