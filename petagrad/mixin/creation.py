"""Creation: full, zeros, ones, empty, arange, linspace, eye, the *_like and new_* forms, meshgrid.

A constant costs no memory: it is a CONST node broadcast to the shape (a buffer appears only where a kernel writes
one). These are class methods: `Tensor.zeros(2, 3)`; the tensors they make are of the class they are called on.
"""
from __future__ import annotations
import math
from petagrad.device import Device
from petagrad.dtype import DType, dtypes, DTypeOverflowError, fit_error
from petagrad.helpers import prod
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp, canonical, smin, sint_str
from petagrad.uop.graph import new_buffer, new_buffer_for, is_disk
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import Scalar, MAX_NUMEL, _fail, _check_fits, _shape_arg, _int_arg, _scalar_arg, _dtype_arg, _is_tensor, _symbolic_int

def _sizes(op: str, shape: tuple, size, symbolic: bool = False) -> tuple:
  """The shape of zeros/ones/empty/rand & co: positional ints, one sequence, or torch's `size=` keyword (symbolic sizes
  where the op takes them)."""
  if size is not None:
    if shape: raise _fail(TypeError, op, f"got a shape both positionally {shape!r} and as size={size!r}")
    shape = (size,)
  return _shape_arg(op, shape, symbolic=symbolic)

class CreationMixin(TensorMixin):
  __slots__ = ()

  # ------------------------------------------------------------ filled
  @staticmethod
  def _dev(device) -> str | tuple[str, ...]:
    """The canonical device name (a tuple of them: a tensor held on each of those devices, docs/multi.md)."""
    return Device.canonicalize(device) if device is not None else Device.DEFAULT
  @classmethod
  def full(cls, shape, fill_value: Scalar, dtype: DType | str | None = None, device: str | None = None, requires_grad: bool | None = None) -> Tensor:
    """A tensor filled with one value (no memory until realized). The value must fit the dtype (no wrapping, like
    PyTorch: Tensor.full((2,), 300, dtype=dtypes.uint8) raises).

    >>> Tensor.full((2,), 7).tolist()
    [7, 7]
    """
    shape = _shape_arg("full", shape if isinstance(shape, (tuple, list)) else (shape,), symbolic=True)
    fill_value = _scalar_arg("full", "fill_value", fill_value)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.from_py(fill_value)
    _check_fits("full", fill_value, dt)
    return cls(UOp.const(dt, fill_value, cls._dev(device), tuple(shape)), requires_grad=requires_grad)
  @classmethod
  def zeros(cls, *shape, dtype=None, device=None, requires_grad=None, size=None) -> Tensor:
    """Zeros: `Tensor.zeros(2, 3)`, `Tensor.zeros((2, 3))` or torch's `Tensor.zeros(size=(2, 3))`."""
    return cls.full(_sizes("zeros", shape, size, True), 0.0, _dtype_arg(dtype) if dtype is not None else dtypes.default_float, device, requires_grad)
  @classmethod
  def ones(cls, *shape, dtype=None, device=None, requires_grad=None, size=None) -> Tensor:
    """Ones: `Tensor.ones(2, 3)`, `Tensor.ones((2, 3))` or torch's `Tensor.ones(size=(2, 3))`."""
    return cls.full(_sizes("ones", shape, size, True), 1.0, _dtype_arg(dtype) if dtype is not None else dtypes.default_float, device, requires_grad)
  @classmethod
  def empty(cls, *shape, dtype=None, device=None, requires_grad=None, size=None) -> Tensor:
    """Uninitialized memory (here: a fresh buffer, zero-filled by the allocator). Shapes as for zeros. On a DISK device
    ("DISK:/path") the tensor is the file's first bytes: the file is opened now (created, or grown when shorter).

    >>> Tensor.empty(2, 3).shape
    (2, 3)
    """
    shape = _sizes("empty", shape, size, True)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    dev = cls._dev(device)
    if any(isinstance(s, UOp) for s in shape):   # a symbolic shape: room for the largest value, viewed as the shape
      if isinstance(dev, tuple) or is_disk(dev): raise _fail(ValueError, "empty", f"a symbolic shape {shape} on {dev} is not supported")
      return cls(new_buffer_for(dev, shape, dt), requires_grad=requires_grad)
    if isinstance(dev, tuple):   # a buffer on each device
      return cls(UOp(Ops.MULTI, dt, tuple(new_buffer(d, prod(shape), dt).reshape(shape) for d in dev), None), requires_grad=requires_grad)
    buf = new_buffer(dev, prod(shape), dt)
    if is_disk(buf.device): buf.buffer.ensure_allocated()   # a file: a bad path fails here, not at the first use
    return cls(buf.reshape(shape), requires_grad=requires_grad)
  def full_like(self, fill_value: Scalar, dtype=None, device=None) -> Tensor:
    return type(self).full(self.shape, fill_value, _dtype_arg(dtype) if dtype is not None else self.dtype, device or self.device)
  def zeros_like(self, dtype=None, device=None) -> Tensor: return self.full_like(0, dtype, device)
  def ones_like(self, dtype=None, device=None) -> Tensor: return self.full_like(1, dtype, device)
  def empty_like(self, dtype=None, device=None) -> Tensor:
    return type(self).empty(self.shape, dtype=dtype or self.dtype, device=device or self.device)
  def new_full(self, size, fill_value, dtype=None, device=None) -> Tensor:
    """A tensor of `size` filled with fill_value, with this tensor's dtype and device unless given."""
    size = _shape_arg("new_full", size if isinstance(size, (tuple, list)) else (size,), self, symbolic=True)
    return type(self).full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device)
  def new_zeros(self, *size, dtype=None, device=None) -> Tensor:
    return self.new_full(_shape_arg("new_zeros", size, self, symbolic=True), 0, dtype, device)
  def new_ones(self, *size, dtype=None, device=None) -> Tensor:
    return self.new_full(_shape_arg("new_ones", size, self, symbolic=True), 1, dtype, device)
  def new_empty(self, *size, dtype=None, device=None) -> Tensor:
    return type(self).empty(_shape_arg("new_empty", size, self, symbolic=True), dtype=dtype or self.dtype, device=device or self.device)

  # ------------------------------------------------------------ ranges and grids
  @classmethod
  def arange(cls, start: Scalar | None = None, stop: Scalar | None = None, step: Scalar = 1, dtype=None, device=None, requires_grad=None, *,
             end: Scalar | None = None) -> Tensor:
    """Values from start (inclusive) to stop (exclusive) by step, like torch.arange (torch's `end=` is tinygrad's
    `stop=`); a range that runs against the step is empty (like numpy and tinygrad; torch raises), a value that does
    not fit the dtype raises. Int arguments give dtypes.default_int, or int64 when the range does not fit it (a
    DEFAULT_INT=int32 range past 2**31, as tinygrad); a float argument gives the default float.

    >>> Tensor.arange(1, 7, 2).tolist()
    [1, 3, 5]
    """
    if end is not None:
      if stop is not None: raise _fail(TypeError, "arange", "got both stop= and end= (they are the same argument)")
      stop = end
    if start is None:
      if stop is None: raise _fail(TypeError, "arange", "missing the end of the range")
      start = 0
    if stop is None: start, stop = 0, start
    if any(_symbolic_int("arange", v) for v in (start, stop)): return cls._symbolic_arange(start, stop, step, dtype, device, requires_grad)
    start, stop, step = (_scalar_arg("arange", k, v) for k, v in (("start", start), ("end", stop), ("step", step)))
    if step == 0: raise _fail(ValueError, "arange", "step must be nonzero")
    if not all(math.isfinite(v) for v in (start, stop, step)): raise _fail(RuntimeError, "arange", f"unsupported range: {start} -> {stop} by {step}")
    if all(isinstance(v, int) for v in (start, stop, step)): n = max(0, -((start - stop) // step))   # exact for big ints
    else: n = (stop - start) / step   # a float: ceil'd below once it is known to be a sane count
    if n > MAX_NUMEL: raise _fail(DTypeOverflowError, "arange", f"{n} elements cannot be counted in int64 without overflow (at most {MAX_NUMEL})")
    n = max(0, math.ceil(n))
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.from_py([start, stop, step])
    if dtype is None and dt.is_int and n and any(fit_error(v, dt) for v in (start, start + (n - 1) * step)): dt = dtypes.int64
    for v in ((start, start + (n - 1) * step) if n else ()): _check_fits("arange", v, dt)   # the first and the last value
    dev = cls._dev(device)
    idx = cls(UOp(Ops.IOTA, dtypes.int64, (UOp(Ops.DEVICE, dtypes.bool, (), dev),), n))
    if dt.is_float: return cls((idx.cast(dt) * step + start).uop if step != 1 or start else idx.cast(dt).uop, requires_grad=requires_grad)
    return cls((idx * step + start).cast(dt).uop if step != 1 or start else idx.cast(dt).uop, requires_grad=requires_grad)
  @classmethod
  def _symbolic_arange(cls, start, stop, step, dtype, device, requires_grad) -> Tensor:
    """arange whose start or end is an expression over bound Variables (Tensor.arange(v)): a symbolic size, step +-1."""
    if step not in (1, -1): raise _fail(ValueError, "arange", f"a range whose end is a Variable needs step 1 or -1, got {step!r}")
    for k, v in (("start", start), ("end", stop)):
      if not isinstance(v, UOp): _int_arg("arange", k, v, minimum=None)
    n = canonical(stop - start if step == 1 else start - stop)
    if smin(n) < 0: raise _fail(ValueError, "arange", f"the length {sint_str(n)} may be negative over its Variables' ranges")
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.int64
    idx = cls(UOp(Ops.IOTA, dtypes.int64, (UOp(Ops.DEVICE, dtypes.bool, (), cls._dev(device)),), n))
    out = (idx * step + start) if step != 1 or not (isinstance(start, int) and start == 0) else idx
    return cls(out.cast(dt).uop, requires_grad=requires_grad)
  @classmethod
  def linspace(cls, start: Scalar, stop: Scalar | None = None, steps: int | None = None, dtype=None, device=None, requires_grad=None, *,
               end: Scalar | None = None) -> Tensor:
    """`steps` evenly spaced values from start to stop, both included (torch's `end=` is tinygrad's `stop=`).

    >>> Tensor.linspace(start=0, end=1, steps=5).tolist()
    [0.0, 0.25, 0.5, 0.75, 1.0]
    """
    if end is not None:
      if stop is not None: raise _fail(TypeError, "linspace", "got both stop= and end= (they are the same argument)")
      stop = end
    if stop is None or steps is None: raise _fail(TypeError, "linspace", "needs start, end (stop) and steps")
    if requires_grad is not None: return cls(cls.linspace(start, stop, steps, dtype, device).uop, requires_grad=requires_grad)
    steps = _int_arg("linspace", "steps", steps)
    start, stop = _scalar_arg("linspace", "start", start), _scalar_arg("linspace", "end", stop)
    dt = _dtype_arg(dtype) if dtype is not None else dtypes.default_float
    if dt == dtypes.bool: raise _fail(TypeError, "linspace", "dtype bool is not supported (torch: not implemented for 'Bool')")
    for v in (start, stop): _check_fits("linspace", v, dt)
    if steps == 1: return cls.full((1,), start, dt, device)
    step = (stop - start) / max(steps - 1, 1)
    idx = cls.arange(steps, device=device).cast(dtypes.float64 if dt == dtypes.float64 else dtypes.float32)
    # symmetric from both ends, like torch, so the last value is exactly `stop`
    half = steps // 2
    out = (idx < half).where(idx * step + start, stop - (steps - 1 - idx) * step)
    return out.cast(dt)
  @classmethod
  def eye(cls, n: int, m: int | None = None, dtype=None, device=None, requires_grad=None) -> Tensor:
    """The identity matrix (n x m)."""
    n = _int_arg("eye", "n", n)
    m = n if m is None else _int_arg("eye", "m", m)
    a, b = cls.arange(n, device=device), cls.arange(m, device=device)
    return cls((a.reshape(n, 1) == b.reshape(1, m)).cast(_dtype_arg(dtype) if dtype else dtypes.default_float).uop, requires_grad=requires_grad)
  def meshgrid(self, *args, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D tensors (views: reshape + expand). indexing='xy' swaps the first two dims. Both
    torch's `Tensor.meshgrid(x, y)` (or a list) and tinygrad's `x.meshgrid(y)`.

    >>> [g.tolist() for g in Tensor([1, 2]).meshgrid(Tensor([3, 4, 5]))]
    [[[1, 1, 1], [2, 2, 2]], [[3, 4, 5], [3, 4, 5]]]
    """
    tensors = (self,) + args
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)): tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"): raise _fail(ValueError, "meshgrid", f"indexing must be 'ij' or 'xy', got {indexing!r}")
    if not tensors: raise _fail(ValueError, "meshgrid", "needs at least one tensor")
    for t in tensors:
      if not _is_tensor(t): raise _fail(TypeError, "meshgrid", f"expects Tensors, got {type(t).__name__}")
      if t.ndim > 1: raise _fail(ValueError, "meshgrid", "expects 0-D or 1-D tensors", *tensors)
    ts = [t.reshape(-1) if t.ndim == 0 else t for t in tensors]
    if indexing == "xy" and len(ts) >= 2: ts[0], ts[1] = ts[1], ts[0]
    shape = tuple(t.shape[0] for t in ts)
    out = [t.reshape(tuple(-1 if k == i else 1 for k in range(len(ts))) if t.numel() else tuple(0 if k == i else 1 for k in range(len(ts))))
           .expand(shape) for i, t in enumerate(ts)]
    if indexing == "xy" and len(ts) >= 2: out[0], out[1] = out[1], out[0]
    return tuple(out)
