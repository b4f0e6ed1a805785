"""Argument checks and the error helper, shared by the Tensor core (petagrad/tensor.py) and the op mixins.

Every check raises at the call, through `_fail`, naming the op, what was wrong, the operands (shape and dtype) and
the user's line. Helpers that need a tensor class take it from an operand (`type(like)`), never from an import.
"""
from __future__ import annotations
import functools, inspect, operator, sys
from typing import Any, Callable, Sequence
from petagrad.dtype import DType, dtypes, to_dtype, truncate, fit_error, DTypeOverflowError
from petagrad.helpers import prod, user_frame
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp, canonical, smin, smax, sint_str
from petagrad.uop.graph import is_disk
from petagrad.mixin import Tensor, TensorMixin

def _is_tensor(x: Any) -> bool: return isinstance(x, TensorMixin)

Scalar = int | float | bool

def _shape_str(t: Any) -> str:
  if not isinstance(t, TensorMixin): return repr(t)
  return f"{tuple(t.shape)} {t.dtype}" + (f" on {t.device}" if is_disk(t.device) else "")   # (a DISK tensor: its file)

# A user error is an instance of the Python type (ValueError, TypeError, IndexError) and also of RuntimeError, which
# PyTorch raises for most of the same mistakes (shape mismatches, bad dims, indices out of range, dtype mismatches):
# code written for either habit catches it
class TensorValueError(ValueError, RuntimeError): """A bad value (shape, size, option) given to a tensor op."""
class TensorTypeError(TypeError, RuntimeError): """An argument of the wrong type (or dtype) given to a tensor op."""
class TensorIndexError(IndexError, RuntimeError): """An index or axis out of range given to a tensor op."""
_USER_ERRORS: dict[type[Exception], type[Exception]] = {ValueError: TensorValueError, TypeError: TensorTypeError, IndexError: TensorIndexError}

def _fail(exc: type[Exception], op: str, msg: str, *operands: Any) -> Exception:
  ops = ", ".join(_shape_str(o) for o in operands)
  return _USER_ERRORS.get(exc, exc)(f"{op}: {msg}" + (f" (operands: {ops})" if operands else "") + f"\n  at {user_frame()}")

def axis_keywords(f: Callable) -> Callable:
  """Let a method that takes `axis` (or `dim`) and `keepdim` be called with the other library's spelling too: dim= for
  axis= (PyTorch) and axis= for dim= (tinygrad), keepdims= for keepdim= (NumPy). Both spellings at once: TypeError.

  >>> from petagrad import Tensor
  >>> Tensor([[1, 2], [3, 4]]).sum(dim=1, keepdims=True).tolist()
  [[3], [7]]
  """
  params = inspect.signature(f).parameters
  own = "axis" if "axis" in params else "dim"
  other = "dim" if own == "axis" else "axis"
  @functools.wraps(f)
  def wrapper(*args: Any, **kwargs: Any) -> Any:
    if kwargs:
      for alias, name in ((other, own), ("keepdims", "keepdim")):
        if alias in kwargs and name in params:
          if name in kwargs: raise _fail(TypeError, f.__name__, f"got both {name}= and {alias}= (they are the same argument)")
          kwargs[name] = kwargs.pop(alias)
    return f(*args, **kwargs)
  return wrapper

def _resolve_axis(op: str, axis: int, ndim: int, t: Any = None) -> int:
  """One dim -> a plain int in [0, ndim): an int, an int subclass or a numpy int (not a bool or a float, like torch)."""
  if type(axis) is not int:
    if not _is_intlike(axis): raise _fail(TypeError, op, f"axis must be an int, got {type(axis).__name__} {axis!r}", *_opt(t))
    axis = operator.index(axis)
  if not -max(ndim, 1) <= axis < max(ndim, 1): raise _fail(IndexError, op, f"axis {axis} is out of range for a {ndim}-d tensor", *_opt(t))
  return axis % max(ndim, 1)

def _unique_dims(op: str, dims: Sequence, ndim: int, t: Any = None) -> tuple[int, ...]:
  """A list of dims -> plain ints in [0, ndim); a dim named twice (0 and -ndim too) raises, like torch."""
  out = tuple(_resolve_axis(op, d, ndim, t) for d in dims)
  if len(set(out)) != len(out):
    dup = next(d for i, d in enumerate(out) if d in out[:i])
    raise _fail(ValueError, op, f"dim {dup} appears multiple times in the list of dims {tuple(dims)!r}", *_opt(t))
  return out

def _opt(t: Any) -> tuple:
  """The operands to name in an error: t, if there is one."""
  return () if t is None else (t,)

def _check_fits(op: str, x: Any, dtype: DType, fill: bool = True, *operands: Any) -> None:
  """Raise when the Python scalar x does not fit dtype (see dtype.fit_error): no silent wrapping of ints."""
  if (why := fit_error(x, dtype, fill)) is not None: raise _fail(DTypeOverflowError, op, why, *operands)

# index math in kernels is int64: a tensor has fewer elements than that
MAX_NUMEL = (1 << 63) - 1

def _shape_arg(op: str, args: Sequence, t: Any = None, wildcard: bool = False, name: str = "size", symbolic: bool = False) -> tuple:
  """f(2, 3) or f((2, 3)) -> (2, 3): ints (not bools; numpy ints are fine) >= 0 (or -1 with wildcard), with fewer
  than 2**63 elements; with `symbolic`, also sizes that are expressions over bound Variables (canonical). Anything else
  raises TypeError/ValueError naming op, at the call."""
  if len(args) == 1 and isinstance(args[0], (tuple, list)): args = tuple(args[0])
  if all(type(s) is int and s >= 0 for s in args):   # the common case: one pass, no conversions
    if prod(args) > MAX_NUMEL: raise _fail(ValueError, op, f"{name} {tuple(args)} has {prod(args)} elements, more than {MAX_NUMEL}", *_opt(t))
    return tuple(args)
  out = []
  for s in args:
    if isinstance(s, UOp) and _symbolic_int(op, s, t):   # a symbolic size (an expression over bound Variables)
      if not symbolic:
        raise _fail(ValueError, op, f"{name} {sint_str(s)} depends on a Variable, which {op} does not support (docs/variables.md: make the "
                    "largest size and slice it, x[:v])", *_opt(t))
      if smin(s) < 0: raise _fail(ValueError, op, f"{name} {sint_str(s)} may be negative over its Variables' ranges", *_opt(t))
      out.append(canonical(s)); continue
    if isinstance(s, bool) or not hasattr(type(s), "__index__"):
      what = "one sequence of sizes or several ints" if isinstance(s, (tuple, list)) else "ints"
      raise _fail(TypeError, op, f"{name} must be {what}, got {type(s).__name__} {s!r} in {tuple(args)!r}", *_opt(t))
    v = operator.index(s)
    if v < 0 and not (wildcard and v == -1):
      raise _fail(ValueError, op, f"{name} must be non-negative{' (or -1)' if wildcard else ''}, got {v} in {tuple(args)!r}", *_opt(t))
    out.append(v)
  if prod(smax(v) for v in out if smax(v) >= 0) > MAX_NUMEL:
    raise _fail(ValueError, op, f"{name} {tuple(out)} has more than {MAX_NUMEL} elements", *_opt(t))
  return tuple(out)

def _int_arg(op: str, name: str, v: Any, t: Any = None, minimum: int | None = 0) -> int:
  """One int argument (a count, a size): not a bool or a float, and >= minimum."""
  if isinstance(v, bool) or not hasattr(type(v), "__index__"):
    raise _fail(TypeError, op, f"{name} must be an int, got {type(v).__name__} {v!r}", *_opt(t))
  v = operator.index(v)
  if minimum is not None and v < minimum: raise _fail(ValueError, op, f"{name} must be >= {minimum}, got {v}", *_opt(t))
  return v

def _scalar_arg(op: str, name: str, v: Any, t: Any = None) -> Scalar:
  """A Python number argument (a fill value, a bound): bool, int or float; numpy scalars become Python ones."""
  if type(v).__module__ == "numpy" and hasattr(v, "item") and getattr(v, "ndim", 0) == 0: v = v.item()
  if not isinstance(v, (bool, int, float)):
    raise _fail(TypeError, op, f"{name} must be a number (bool, int or float), got {type(v).__name__} {v!r}", *_opt(t))
  return v

def _dtype_arg(d: Any, op: str | None = None) -> DType:
  """A dtype argument (a DType, its name, a numpy/torch dtype): an unknown one raises TypeError naming the op (the
  calling method's name unless given) and the user's line."""
  try: return to_dtype(d)
  except TypeError as e:
    name = op or sys._getframe(1).f_code.co_name
    raise _fail(TypeError, "Tensor" if name == "__init__" else name, str(e)) from None

def _tensor_arg(op: str, name: str, x: Any, t: Any = None) -> Tensor:
  """An argument that must be a Tensor (not a list of them, a number or a string)."""
  if not isinstance(x, TensorMixin):
    hint = " (a list of Tensors: use Tensor.stack or cat)" if isinstance(x, (list, tuple)) and any(isinstance(e, TensorMixin) for e in x) else ""
    raise _fail(TypeError, op, f"{name} must be a Tensor, got {type(x).__name__}{hint}", *_opt(t))
  return x

def _scalar_operand(op: str, x: int, dt: DType, t: Any) -> None:
  """Raise for an int operand that no 64-bit int (or no float) holds: torch's OverflowError, named as the op."""
  raise _fail(DTypeOverflowError, op, fit_error(x, dt, False) or f"{x} does not fit {dt.name}", t)

class IntegerDivisionByZeroError(RuntimeError, ZeroDivisionError):
  """Integer division or remainder by zero. A RuntimeError like PyTorch's ("RuntimeError: ZeroDivisionError") and a
  ZeroDivisionError, so code ported from PyTorch or plain Python catches it either way."""

def _const_value(u: UOp) -> Any:
  """The value of a node that is one constant everywhere (a CONST seen through views, casts, CONTIGUOUS and
  DETACH: Tensor.zeros(3, dtype=dtypes.int32) before it is realized), else None. Never runs a kernel."""
  casts: list[DType] = []
  while u.op in (Ops.RESHAPE, Ops.EXPAND, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.CAST, Ops.CONTIGUOUS, Ops.DETACH):
    if u.op is Ops.CAST: casts.append(u.dtype)
    u = u.src[0]
  if u.op is not Ops.CONST: return None
  v = u.arg
  for dt in reversed(casts): v = truncate(v, dt)
  return v

def _check_int_divisor(op: str, a: Tensor, b: Tensor) -> Tensor:
  """Integer division and remainder by zero raise, like PyTorch (floats give inf/nan); returns the divisor to divide
  by. A divisor that is a constant (a Python 0, Tensor.zeros(...) not yet realized) raises at the call; any other
  gets a data check (raised when the quotient is computed, naming op and the user's line). An empty result never
  raises."""
  if b.dtype.is_float or not b.numel(): return b
  if (v := _const_value(b.uop)) is not None:
    if v == 0: raise _fail(IntegerDivisionByZeroError, op, f"integer division by zero: the {b.dtype.name} divisor is 0 (ZeroDivisionError)", a, b)
    return b
  if b.uop.op is Ops.CHECK and b.uop.arg[0] is IntegerDivisionByZeroError: return b   # checked already (fmod via div)
  src = b.uop
  while src.op in (Ops.EXPAND, Ops.RESHAPE): src = src.src[0]   # test the divisor's own elements, not their broadcast
  return b._checked(type(b)(src).ne(0), IntegerDivisionByZeroError, op,
                    f"integer division by zero: the {b.dtype.name} divisor holds a 0 (ZeroDivisionError)", a, b)

def _broadcast_shape(op: str, *ts: Tensor) -> tuple[int, ...]:
  nd = max(t.ndim for t in ts)
  shapes = [(1,) * (nd - t.ndim) + t.shape for t in ts]
  out = []
  for dims in zip(*shapes):
    big = {d for d in dims if d != 1}
    if len(big) > 1: raise _fail(ValueError, op, f"shapes {' and '.join(str(t.shape) for t in ts)} are not broadcastable", *ts)
    out.append(big.pop() if big else 1)
  return tuple(out)

def _truth(op: str, x: Any, t: Tensor) -> Any:
  return x if isinstance(x, TensorMixin) else bool(_scalar_arg(op, "other", x, t))

def _as_tensor(x: Any, like: Tensor, dtype: DType | None = None) -> Tensor:
  if isinstance(x, TensorMixin): return x
  return type(like)(UOp.const(dtype or dtypes.from_py(x), x, like.device))

# the argument forms of the nn functionals (convolution, pooling, losses, normalization)
def _is_int(x) -> bool:
  """An int or an int subclass, not a bool: usable as is (arithmetic on it gives plain ints)."""
  return isinstance(x, int) and not isinstance(x, bool)

def _is_intlike(x) -> bool:
  """An int argument in every spelling torch takes: an int, an int subclass, a numpy int (anything with __index__), not
  a bool (torch refuses bools as sizes and dims) and not a float. Convert it with operator.index before it reaches a
  shape, a UOp or arithmetic (a numpy int is no Tensor operand)."""
  if type(x) is int: return True
  if isinstance(x, bool) or not hasattr(type(x), "__index__"): return False
  try: operator.index(x)   # a numpy array of several ints has __index__ too, and raises
  except TypeError: return False
  return True

def _tuple(op: str, name: str, x, n: int, t, minimum: int | None = 1) -> tuple[int, ...]:
  """An int or a sequence of n ints -> n plain ints (each >= minimum)."""
  out = (x,) * n if _is_intlike(x) else tuple(x) if isinstance(x, (tuple, list)) else None
  if out is None or len(out) != n or not all(_is_intlike(v) for v in out):
    raise _fail(TypeError if out is None or not all(_is_intlike(v) for v in out) else ValueError, op,
                f"{name} must be an int or a sequence of {n} ints, got {x!r}", t)
  out = tuple(operator.index(v) for v in out)
  if minimum is not None and any(v < minimum for v in out): raise _fail(ValueError, op, f"{name} must be >= {minimum}, got {x!r}", t)
  return out

def _resolve_pads(op: str, padding, n: int, t, k: Sequence[int] | None = None, d: Sequence[int] | None = None,
                  s: Sequence[int] | None = None, allow_str: bool = False) -> list[tuple[int, int]]:
  """padding -> one (before, after) pair per spatial dim, in dim order. Accepts an int, n ints (symmetric per dim),
  n (before, after) pairs, 2n ints in torch's F.pad order (last dim first: left, right, top, bottom, ...), or
  (convolutions) 'valid' / 'same'."""
  if isinstance(padding, str):
    if not allow_str: raise _fail(ValueError, op, f"padding must be ints here, got {padding!r}", t)
    if padding == "valid": return [(0, 0)] * n
    if padding == "same":
      assert k is not None and d is not None and s is not None
      if any(v != 1 for v in s): raise _fail(ValueError, op, f"padding='same' is not supported for strided convolutions (stride {tuple(s)})", t)
      return [((dd * (kk - 1)) // 2, dd * (kk - 1) - (dd * (kk - 1)) // 2) for kk, dd in zip(k, d)]
    raise _fail(ValueError, op, f"padding string must be 'same' or 'valid', got {padding!r}", t)
  if _is_intlike(padding): return [(operator.index(padding), operator.index(padding))] * n
  if isinstance(padding, (tuple, list)):
    p = tuple(tuple(operator.index(u) for u in v) if isinstance(v, (tuple, list)) and all(_is_intlike(u) for u in v) else
              operator.index(v) if _is_intlike(v) else v for v in padding)   # numpy ints -> ints
    if len(p) == n and all(_is_intlike(v) for v in p): return [(v, v) for v in p]
    if len(p) == n and all(isinstance(v, (tuple, list)) and len(v) == 2 and all(_is_intlike(u) for u in v) for v in p):
      return [tuple(v) for v in p]  # type: ignore
    if len(p) == 2 * n and all(_is_intlike(v) for v in p): return [(p[2 * (n - 1 - i)], p[2 * (n - 1 - i) + 1]) for i in range(n)]
  raise _fail(ValueError, op, f"padding must be an int, {n} ints, {n} (before, after) pairs or {2 * n} ints (torch F.pad order), got {padding!r}", t)

def _shapes(op: str, x: Any, t: Any) -> tuple[int, ...]:
  """An int or a sequence of ints (a normalized_shape)."""
  return _shape_arg(op, (x,), t, name="normalized_shape")

def _check_tensor(op: str, name: str, x, self) -> None:
  if not isinstance(x, TensorMixin): raise _fail(TypeError, op, f"{name} must be a Tensor, got {type(x).__name__}", self)
  if x.device != self.device: raise _fail(RuntimeError, op, f"{name} is on {x.device}, input on {self.device}", self, x)

def _check_axes(op: str, axis: Any, x: Any) -> Any:
  """Resolve an int or a tuple of axes with `op` named in the error; returns axis unchanged."""
  for a in (tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)): _resolve_axis(op, a, x.ndim, x)   # a non-int raises TypeError
  return axis

def _symbolic_int(op: str, x: Any, self: Any = None) -> bool:
  """Is x a symbolic integer (an expression over bound Variables: `Variable("p", 0, 9).bind(3) + 1`)? Raises for an
  expression over a Variable that is not bound, and on a tensor on several devices (not supported yet)."""
  if not isinstance(x, UOp): return False
  nodes = x.toposort()
  if x.dtype != dtypes.index or not any(u.op is Ops.BIND for u in nodes):
    if any(u.op is Ops.DEFINE_VAR for u in nodes):
      raise _fail(ValueError, op, f"Variable {next(u.arg[0] for u in nodes if u.op is Ops.DEFINE_VAR)!r} must be bound to a value "
                  "(.bind(n)) before it is used", self)
    return False
  unbound = {u for u in nodes if u.op is Ops.DEFINE_VAR} - {u.src[0] for u in nodes if u.op is Ops.BIND}
  if unbound: raise _fail(ValueError, op, f"Variable {next(iter(unbound)).arg[0]!r} must be bound to a value (.bind(n)) before it is used", self)
  if self is not None and isinstance(self.device, tuple):
    raise _fail(ValueError, op, "a Variable in a view of a tensor on several devices is not supported yet", self)
  return True

def _symbolic_value(x: UOp, device: str) -> UOp:
  """A symbolic integer as a 0-d int32 value on device (its BINDs and constants placed there)."""
  dev = UOp(Ops.DEVICE, dtypes.bool, (), device)
  leaves = {u: UOp(Ops.BIND, u.dtype, (u.src[0], dev), u.arg) if u.op is Ops.BIND else UOp.const(u.dtype, u.arg, device)
            for u in x.toposort() if u.op is Ops.BIND or (u.op is Ops.CONST and not u.src)}
  from petagrad.uop.graph import substitute
  return substitute(x, leaves).cast(dtypes.int32)
