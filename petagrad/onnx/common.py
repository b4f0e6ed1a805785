"""What every ONNX op implementation shares: the NodeContext and small argument helpers.

Reading a tensor's values into Python (`ints`, `scalar`) realizes it: ONNX passes shape-deciding values (a Reshape's
shape, Slice's starts, TopK's k) as tensors, and petagrad needs them as Python ints to build the graph. That is a
conversion of a (small) result, not a computation outside the Tensor layer.

Values computed only from initializers, constants and shapes ("static" values) are read once per input-shape
signature and remembered (`StaticValues`): a later call with the same shapes, inside TinyJit too, reuses them
without reading anything. A value computed from input data is read on every call, and inside TinyJit that raises
(TinyJit cannot replay a read). A static tensor an op lays out for its kernel (Conv's weight) is laid out once and
kept (`static_derived`).
"""
from __future__ import annotations
import contextvars
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.dtype import DType

@dataclass(frozen=True)
class NodeContext:
  """What a node knows besides its inputs and attributes."""
  name: str
  op_type: str
  opset: int
  index: int
  n_outputs: int
  device: str
  in_types: tuple[int | None, ...] = ()
  out_types: tuple[int | None, ...] = ()
  def in_type(self, i: int) -> int | None: return self.in_types[i] if i < len(self.in_types) else None
  def out_type(self, i: int) -> int | None: return self.out_types[i] if i < len(self.out_types) else None

@dataclass
class StaticValues:
  """The run's static tensors: id -> (tensor, where its values are remembered: (cache, key)), and the cache itself,
  {(value name, input shapes): flat list of values} (and tensors laid out from them, `static_derived`), which lives as
  long as the model."""
  cache: dict[tuple, Any] = field(default_factory=dict)
  slots: dict[int, tuple[Tensor, tuple]] = field(default_factory=dict)
  def mark(self, t: Tensor, key: tuple) -> None: self.slots[id(t)] = (t, key)

_STATIC: contextvars.ContextVar[StaticValues | None] = contextvars.ContextVar("onnx_static", default=None)

def _static_key(t: Tensor) -> tuple[StaticValues, tuple] | None:
  """(this run's registry, t's key in its cache) when t is a static tensor of the run, else None."""
  reg = _STATIC.get()
  slot = reg.slots.get(id(t)) if reg is not None else None
  return (reg, slot[1]) if slot is not None and slot[0] is t else None

def values(t: Tensor) -> list:
  """The flat values of t as Python numbers: remembered ones for a static tensor, else read (realized) now."""
  static = _static_key(t)
  if static is not None and (v := static[0].cache.get(static[1])) is not None: return v
  from petagrad.engine import jit
  if jit.jit_active:
    why = ("it is computed only from constants and shapes: call the model once outside TinyJit with these input shapes, which "
           "remembers it") if static is not None else "it is computed from input data, which TinyJit cannot replay"
    raise jit.JitError(f"this op needs a tensor's values in Python inside the jitted function {jit.jit_active[-1]!r}; {why}")
  v = t.reshape(-1).tolist()
  if static is not None: static[0].cache[static[1]] = v
  return v

def static_ints(t: Tensor, limit: int) -> list[int] | None:
  """The values of an int tensor of at most `limit` elements that is static (computed only from initializers,
  constants and shapes: read once, remembered), else None without reading anything (it may be data)."""
  if _static_key(t) is None or t.dtype.is_float or t.numel() > limit: return None
  return [int(v) for v in values(t)]

def static_derived(t: Tensor, tag: Any, make: Callable[[Tensor], Tensor]) -> Tensor:
  """make(t), computed once and kept with the model when t is static (computed only from initializers and shapes, so
  the same on every call with these input shapes); else make(t), lazy. A constant's layout for a kernel (Conv's
  weight stored channels-last) is then no kernel of each run, nor of a TinyJit replay. It keeps a second copy of
  what make returns for as long as the model lives."""
  if (static := _static_key(t)) is None: return make(t)
  reg, key = static[0], ("derived", tag, static[1])
  if (v := reg.cache.get(key)) is None: v = reg.cache[key] = make(t).realize()
  return v

def ints(t: Tensor | Sequence[int] | None, what: str = "value") -> list[int] | None:
  """A 0-d/1-d int tensor (or a sequence) -> a list of Python ints (None stays None)."""
  if t is None: return None
  if isinstance(t, Tensor):
    if t.dtype.is_float: raise TypeError(f"{what} must be an integer tensor, got {t.dtype}")
    return [int(v) for v in values(t)]
  return [int(v) for v in t]

def floats(t: Tensor | None) -> list[float] | None:
  if t is None: return None
  return [float(v) for v in values(t)]

def scalar(t: Tensor | Any) -> Any:
  """A one-element tensor -> its Python value."""
  if not isinstance(t, Tensor): return t
  if t.numel() != 1: raise ValueError(f"expected a single value, got a tensor of shape {tuple(t.shape)}")
  return values(t)[0]

def axis_of(axis: int, ndim: int, what: str = "axis") -> int:
  """An ONNX axis (negative counts from the end) -> [0, ndim)."""
  if not -ndim <= axis < max(ndim, 1): raise ValueError(f"{what} {axis} is out of range for a tensor of {ndim} dims")
  return axis % ndim if ndim else 0

def axes_of(axes: Sequence[int], ndim: int) -> list[int]:
  out = [axis_of(a, ndim) for a in axes]
  if len(set(out)) != len(out): raise ValueError(f"axes {list(axes)} repeat a dim")
  return out

def arange(n: int, device: str, dtype: DType = dtypes.int64) -> Tensor: return Tensor.arange(n, dtype=dtype, device=device)

def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
  """numpy's broadcast of shapes (ValueError if they do not broadcast)."""
  n = max((len(s) for s in shapes), default=0)
  out = []
  for dims in zip(*[(1,) * (n - len(s)) + tuple(s) for s in shapes]):
    big = {d for d in dims if d != 1}
    if len(big) > 1: raise ValueError(f"shapes {[tuple(s) for s in shapes]} do not broadcast")
    out.append(big.pop() if big else 1)
  return tuple(out)

def expand_to(x: Tensor, shape: Sequence[int]) -> Tensor:
  shape = tuple(shape)
  if x.shape == shape: return x
  return x.reshape((1,) * (len(shape) - x.ndim) + tuple(x.shape)).expand(shape)
