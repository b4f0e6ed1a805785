"""State: find a model's tensors by reflection, load/save them, and read other frameworks' checkpoints.

* `get_state_dict(obj)` / `get_parameters(obj)` / `load_state_dict(obj, sd, strict=True)`: PyTorch-style
  dotted keys ("layers.0.weight") found by walking attributes, lists, tuples and dicts.
* `safe_save` / `safe_load`: the safetensors format (compatible both ways with the `safetensors` package).
  `safe_load` memory-maps the file and makes a tensor only for the names you read.
* `flatten_state` / `unflatten_state`: an optimizer's or scheduler's nested state dict as flat tensors plus one
  JSON string, so it fits in a safetensors file next to the model.
* `torch_load`: PyTorch checkpoints (zip and legacy formats) without importing torch, through a restricted
  unpickler that refuses every global it does not know to be safe.
* `gguf_load`: GGUF files (llama.cpp): F32, F16, BF16 and the Q8_0, Q4_0, Q4_1, Q6_K quantizations,
  dequantized with Tensor ops on the raw bytes.

Every writer goes to a temporary file in the target's folder and renames it over the target at the end
(`os.replace`), so a crash mid-save leaves the previous file intact. A corrupt or truncated file raises a
ValueError naming the file and what is wrong.

>>> import tempfile, os
>>> from petagrad import Tensor
>>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
>>> safe_save({"w": Tensor([[1.0, 2.0]])}, path)
>>> safe_load(path)["w"].tolist()
[[1.0, 2.0]]
"""
from __future__ import annotations
import io, itertools, json, mmap, os, pickle, struct, tempfile, types, zipfile
from collections import OrderedDict
from typing import Any, Callable, Iterator, Mapping, NamedTuple, BinaryIO
from petagrad.tensor import Tensor
from petagrad.dtype import DType, dtypes
from petagrad.helpers import prod
from petagrad.nn._inplace import write, commit

# ====================================================================== reflection

_SKIP = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type, staticmethod, classmethod,
         str, bytes, int, float, bool, type(None))

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """Every Tensor reachable from obj by attributes, list/tuple indices and dict keys, with dotted names
  like PyTorch's state dicts ("layers.0.weight"). A tensor reachable twice (tied weights) appears under
  each name. Cycles are followed once.

  >>> from petagrad import nn
  >>> list(get_state_dict(nn.Sequential(nn.Linear(2, 3), Tensor.relu)))
  ['0.weight', '0.bias']
  """
  out: dict[str, Tensor] = {}
  _walk(obj, prefix, out, set(), tensor_type)
  return out

def _walk(obj: Any, prefix: str, out: dict, on_path: set[int], tensor_type: type) -> None:
  if isinstance(obj, tensor_type):
    out[prefix.rstrip(".")] = obj
    return
  if isinstance(obj, _SKIP) or id(obj) in on_path: return
  on_path.add(id(obj))
  try:
    if hasattr(obj, "_asdict"): items: Any = obj._asdict().items()   # namedtuple
    elif isinstance(obj, Mapping): items = obj.items()
    elif isinstance(obj, (list, tuple)): items = enumerate(obj)
    elif hasattr(obj, "__dict__"): items = vars(obj).items()
    else: return
    for k, v in list(items): _walk(v, f"{prefix}{k}.", out, on_path, tensor_type)
  finally:
    on_path.discard(id(obj))

def get_parameters(obj: Any) -> list[Tensor]:
  """The distinct tensors of get_state_dict(obj), in order (tinygrad semantics: buffers such as BatchNorm's
  running stats are included; optimizers skip tensors with requires_grad=False)."""
  seen: set[int] = set()
  out: list[Tensor] = []
  for t in get_state_dict(obj).values():
    if id(t) not in seen: seen.add(id(t)); out.append(t)
  return out

class LoadResult(NamedTuple):
  """What load_state_dict did not load (like torch's _IncompatibleKeys, plus shape mismatches)."""
  missing_keys: list[str]
  unexpected_keys: list[str]
  mismatched_keys: list[tuple[str, tuple[int, ...], tuple[int, ...]]]   # (key, model shape, given shape)

class StateDictError(RuntimeError):
  """load_state_dict(strict=True) found missing, unexpected or shape-mismatched keys."""

def _to_tensor(v: Any, like: Tensor) -> Tensor:
  """A state-dict value -> Tensor on like's device: petagrad Tensors, numpy arrays, torch tensors (duck-typed)."""
  if isinstance(v, Tensor): return v
  if hasattr(v, "detach") and hasattr(v, "cpu"):   # a torch tensor (torch is never imported here)
    v = v.detach().cpu()
    if str(v.dtype) == "torch.bfloat16": v = v.float()
    v = v.numpy()
  if type(v).__module__ == "numpy" or hasattr(v, "__array__"):
    import numpy as np
    return Tensor(np.asarray(v), device=like.device)
  return Tensor(v, device=like.device)

def _shape_of(v: Any) -> tuple[int, ...]:
  return tuple(v.shape) if hasattr(v, "shape") else tuple(Tensor(v).shape)

def load_state_dict(obj: Any, state_dict: Mapping[str, Any], strict: bool = True, verbose: bool = False) -> LoadResult:
  """Copy state_dict's values into obj's tensors (found by get_state_dict), in place with assign: each value
  is cast to the tensor's dtype and moved to its device. Values may be petagrad Tensors, numpy arrays or
  torch tensors, so `{k: v.numpy() for k, v in torch_model.state_dict().items()}` loads.

  strict=True: any missing key (in obj, not in state_dict), unexpected key (in state_dict, not in obj) or
  shape mismatch raises StateDictError naming every one of them, and nothing is loaded.
  strict=False: loads the keys that match and returns them all in a LoadResult."""
  model = get_state_dict(obj)
  missing = [k for k in model if k not in state_dict]
  unexpected = [k for k in state_dict if k not in model]
  mismatched = []
  for k, t in model.items():
    if k in state_dict and (s := _shape_of(state_dict[k])) != t.shape and not (s == () and t.shape == (1,) or s == (1,) and t.shape == ()):
      mismatched.append((k, t.shape, s))
  res = LoadResult(missing, unexpected, mismatched)
  if strict and (missing or unexpected or mismatched):
    msg = [f"Error(s) in loading state_dict for {type(obj).__name__}:"]
    if missing: msg.append(f"  missing keys ({len(missing)}): {', '.join(missing)}")
    if unexpected: msg.append(f"  unexpected keys ({len(unexpected)}): {', '.join(unexpected)}")
    for k, ms, gs in mismatched: msg.append(f"  size mismatch for {k}: the model has shape {ms}, the state dict has shape {gs}")
    raise StateDictError("\n".join(msg))
  bad = {k for k, _, _ in mismatched}
  written: list[Tensor] = []
  for k, t in model.items():
    if k not in state_dict or k in bad: continue
    v = _to_tensor(state_dict[k], t)
    if v.shape != t.shape: v = v.reshape(t.shape)
    if verbose: print(f"load_state_dict: {k} {v.shape} {v.dtype} -> {t.dtype} on {t.device}")
    write(t, v.to(t.device))
    if not any(w is t for w in written): written.append(t)
  commit(*written)
  return res

# ====================================================================== atomic writes

def _atomic_write(path: str | os.PathLike, fill: Callable[[BinaryIO], None]) -> None:
  """Write a file through fill(f) into a temporary file next to `path`, fsync it, and rename it over path."""
  path = os.fspath(path)
  folder = os.path.dirname(os.path.abspath(path))
  fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
  try:
    with os.fdopen(fd, "wb") as f:
      fill(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    try: os.unlink(tmp)
    except OSError: pass
    raise

def _write_bytes(f: BinaryIO, data: bytes | memoryview) -> None:
  """One chunk of a file being saved (a separate function so tests can simulate a crash mid-write)."""
  f.write(data)

def _corrupt(path: Any, what: str) -> ValueError: return ValueError(f"{path}: {what}")

# ====================================================================== safetensors

SAFETENSORS_DTYPES: dict[str, DType] = {
  "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
  "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64,
  "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
}
_SAFETENSORS_NAMES = {v: k for k, v in SAFETENSORS_DTYPES.items()}

def _tensor_from_bytes(raw: bytes | memoryview, dtype: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
  if prod(shape) == 0: return Tensor.zeros(*shape, dtype=dtype, device=device).contiguous()
  return Tensor(bytes(raw), dtype=dtype, device=device).reshape(shape)

class SafeTensorsFile(Mapping):
  """A safetensors file opened lazily: the header is read at once; `sf[name]` makes a Tensor from the
  memory-mapped bytes of that one entry (a copy each time it is read), so a file larger than memory can
  be loaded tensor by tensor. `metadata` holds the file's `__metadata__` strings."""
  def __init__(self, path: str | os.PathLike, device: str | None = None):
    self.path, self.device = os.fspath(path), device
    with open(self.path, "rb") as f:
      size = os.fstat(f.fileno()).st_size
      if size < 8: raise _corrupt(self.path, f"not a safetensors file: {size} bytes is shorter than the 8-byte header length")
      (n,) = struct.unpack("<Q", f.read(8))
      if n > size - 8: raise _corrupt(self.path, f"truncated or corrupt safetensors file: the header is {n} bytes but only {size - 8} follow")
      raw_header = f.read(n)
      self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try: header = json.loads(raw_header)
    except (UnicodeDecodeError, json.JSONDecodeError) as e: raise _corrupt(self.path, f"corrupt safetensors header (not JSON: {e})") from None
    if not isinstance(header, dict): raise _corrupt(self.path, "corrupt safetensors header (not a JSON object)")
    self.metadata: dict[str, str] = header.pop("__metadata__", None) or {}
    self._start, data_len = 8 + n, size - 8 - n
    self._entries: dict[str, tuple[DType, tuple[int, ...], int, int]] = {}
    for name, e in header.items():
      try: dt_name, shape, (b, en) = e["dtype"], tuple(int(s) for s in e["shape"]), e["data_offsets"]
      except (KeyError, TypeError, ValueError): raise _corrupt(self.path, f"corrupt safetensors header entry for {name!r}: {e!r}") from None
      if dt_name not in SAFETENSORS_DTYPES: raise _corrupt(self.path, f"tensor {name!r} has dtype {dt_name!r}, which petagrad does not support")
      dt = SAFETENSORS_DTYPES[dt_name]
      if any(s < 0 for s in shape) or not 0 <= b <= en: raise _corrupt(self.path, f"tensor {name!r} has a bad shape {shape} or offsets {[b, en]}")
      if en - b != prod(shape) * dt.itemsize:
        raise _corrupt(self.path, f"tensor {name!r}: {prod(shape)} x {dt_name} needs {prod(shape) * dt.itemsize} bytes but its offsets {[b, en]} span {en - b}")
      if en > data_len: raise _corrupt(self.path, f"truncated safetensors file: tensor {name!r} ends at byte {en} of the data but the data has only {data_len} bytes")
      self._entries[name] = (dt, shape, b, en)
  def __getitem__(self, name: str) -> Tensor:
    dt, shape, b, e = self._entries[name]
    return _tensor_from_bytes(memoryview(self._mm)[self._start + b:self._start + e], dt, shape, self.device)
  def __iter__(self) -> Iterator[str]: return iter(self._entries)
  def __len__(self) -> int: return len(self._entries)
  def shape(self, name: str) -> tuple[int, ...]: return self._entries[name][1]
  def dtype(self, name: str) -> DType: return self._entries[name][0]
  def __repr__(self) -> str: return f"<SafeTensorsFile {self.path!r}: {len(self)} tensors>"

def safe_load(path: str | os.PathLike, device: str | None = None) -> SafeTensorsFile:
  """Open a .safetensors file lazily (see SafeTensorsFile); `dict(safe_load(p))` loads everything."""
  return SafeTensorsFile(path, device)

def safe_load_metadata(path: str | os.PathLike) -> dict[str, str]: return SafeTensorsFile(path).metadata

def safe_save(tensors: Mapping[str, Tensor], path: str | os.PathLike, metadata: Mapping[str, str] | None = None) -> None:
  """Write tensors to a .safetensors file (atomically). All tensors are realized in one schedule first;
  entries are laid out largest dtype first so every tensor is aligned for memory-mapping."""
  for k, t in tensors.items():
    if not isinstance(k, str): raise TypeError(f"safe_save: keys must be strings, got {k!r}")
    if not isinstance(t, Tensor): raise TypeError(f"safe_save: {k!r} is a {type(t).__name__}, not a Tensor")
    if t.dtype not in _SAFETENSORS_NAMES: raise TypeError(f"safe_save: {k!r} has dtype {t.dtype}, which safetensors cannot store")
  Tensor.realize_all(*[t.contiguous() for t in tensors.values()])
  order = sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k))
  header: dict[str, Any] = {}
  if metadata: header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
  off = 0
  for k in order:
    t = tensors[k]
    header[k] = {"dtype": _SAFETENSORS_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + t.nbytes()]}
    off += t.nbytes()
  hb = json.dumps(header, separators=(",", ":")).encode()
  hb += b" " * (-len(hb) % 8)
  def fill(f: BinaryIO) -> None:
    _write_bytes(f, struct.pack("<Q", len(hb)) + hb)
    for k in order:
      if tensors[k].numel(): _write_bytes(f, tensors[k].data())
  _atomic_write(path, fill)

# ====================================================================== nested state (optimizers, schedulers) in safetensors

def flatten_state(obj: Any, prefix: str) -> tuple[dict[str, Tensor], str]:
  """Split a nested state (dicts with str or int keys, lists, tuples, Tensors, None/bool/int/float/str: what
  `Optimizer.state_dict()` or a scheduler's `state_dict()` returns) into flat tensors named "prefix.key.key..."
  and one JSON string describing everything else, for `safe_save(tensors, path, metadata={prefix: spec})`.
  A tensor met twice is stored once. `unflatten_state(tensors, spec)` rebuilds the object.

  >>> from petagrad import Tensor
  >>> tensors, spec = flatten_state({"state": {0: {"m": Tensor([1.0])}}, "param_groups": [{"lr": 0.1, "params": [0]}]}, "optim")
  >>> list(tensors)
  ['optim.state.0.m']
  >>> back = unflatten_state(tensors, spec)
  >>> back["state"][0]["m"].tolist(), back["param_groups"]
  ([1.0], [{'lr': 0.1, 'params': [0]}])
  """
  tensors: dict[str, Tensor] = {}
  names: dict[int, str] = {}
  def enc(x: Any, path: str) -> Any:
    if isinstance(x, Tensor):
      if id(x) not in names: names[id(x)] = path; tensors[path] = x
      return {"T": names[id(x)]}
    if isinstance(x, dict):
      for k in x:
        if not isinstance(k, (str, int)) or isinstance(k, bool): raise TypeError(f"flatten_state: key {k!r} at {path!r} is not a str or int")
      return {"d": [[k, enc(v, f"{path}.{k}")] for k, v in x.items()]}
    if isinstance(x, (list, tuple)): return {"l" if isinstance(x, list) else "t": [enc(v, f"{path}.{i}") for i, v in enumerate(x)]}
    if x is None or isinstance(x, (bool, int, float, str)): return x
    raise TypeError(f"flatten_state: {path!r} is a {type(x).__name__}; only tensors, dicts, lists, tuples and Python scalars are stored")
  spec = json.dumps(enc(obj, prefix))
  return tensors, spec

def unflatten_state(tensors: Mapping[str, Tensor], spec: str) -> Any:
  """Rebuild what flatten_state split: spec is its JSON string, tensors any mapping that holds its tensors by
  name (a dict, or safe_load's file). Raises ValueError naming a missing tensor or a malformed spec."""
  try: tree = json.loads(spec)
  except (TypeError, ValueError) as e: raise ValueError(f"unflatten_state: the spec is not valid JSON ({e})") from None
  def dec(x: Any) -> Any:
    if isinstance(x, dict):
      if len(x) != 1: raise ValueError(f"unflatten_state: malformed spec node {x!r:.80}")
      (kind, v), = x.items()
      if kind == "T":
        if v not in tensors: raise ValueError(f"unflatten_state: tensor {v!r} is missing (the file holds {len(tensors)} tensors)")
        return tensors[v]
      if kind == "d": return {k: dec(val) for k, val in v}
      if kind == "l": return [dec(val) for val in v]
      if kind == "t": return tuple(dec(val) for val in v)
      raise ValueError(f"unflatten_state: unknown spec node kind {kind!r}")
    return x
  return dec(tree)

# ====================================================================== torch checkpoints

_TORCH_STORAGES: dict[str, DType] = {
  "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16,
  "LongStorage": dtypes.int64, "IntStorage": dtypes.int32, "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8,
  "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool,
}
_TORCH_DTYPES: dict[str, DType] = {
  "float32": dtypes.float32, "float": dtypes.float32, "float64": dtypes.float64, "double": dtypes.float64, "float16": dtypes.float16,
  "half": dtypes.float16, "bfloat16": dtypes.bfloat16, "int64": dtypes.int64, "long": dtypes.int64, "int32": dtypes.int32,
  "int": dtypes.int32, "int16": dtypes.int16, "short": dtypes.int16, "int8": dtypes.int8, "uint8": dtypes.uint8, "bool": dtypes.bool,
  "uint16": dtypes.uint16, "uint32": dtypes.uint32, "uint64": dtypes.uint64,
}

class _StorageType:
  """Stands for torch.FloatStorage & co inside the unpickler."""
  def __init__(self, name: str, dtype: DType): self.name, self.dtype = name, dtype
  def __repr__(self) -> str: return f"torch.{self.name}"

class _TorchDtype:
  def __init__(self, name: str): self.name, self.dtype = name, _TORCH_DTYPES[name]

class _Storage:
  """A storage of a checkpoint: how to read its raw bytes, and its element dtype. Its Tensor is made once
  per dtype, on first use."""
  def __init__(self, read: Callable[[], bytes], dtype: DType, key: str):
    self._read, self.dtype, self.key, self._ts = read, dtype, key, {}
  def raw(self) -> bytes: return self._read()
  def tensor(self, dtype: DType) -> Tensor:
    if dtype not in self._ts:
      raw = self._read()
      if len(raw) % dtype.itemsize: raise ValueError(f"torch_load: storage {self.key} has {len(raw)} bytes, not a whole number of {dtype}")
      self._ts[dtype] = Tensor(raw, dtype=dtype, device=_load_device) if raw else Tensor.zeros(0, dtype=dtype, device=_load_device).contiguous()
    return self._ts[dtype]

class _PendingTensor:
  """A tensor the unpickler met; made once the storages can be read (the legacy format stores them after the pickle)."""
  def __init__(self, storage: _Storage, offset: int, size: tuple, stride: tuple, dtype: DType | None):
    self.storage, self.offset, self.size, self.stride, self.dtype = storage, int(offset), tuple(int(s) for s in size), tuple(int(s) for s in stride), dtype
  def make(self) -> Tensor:
    dt, size, stride, offset = self.dtype or self.storage.dtype, self.size, self.stride, self.offset
    flat = self.storage.tensor(dt)
    n = prod(size)
    if n == 0: return Tensor.zeros(*size, dtype=dt, device=_load_device).contiguous()
    last = offset + sum((s - 1) * st for s, st in zip(size, stride))
    if offset < 0 or last >= flat.numel() or any(st < 0 for st in stride):
      raise ValueError(f"torch_load: a tensor of size {size} stride {stride} at offset {offset} reads past its storage of {flat.numel()} elements")
    # the common layouts are a permutation of a contiguous block (e.g. channels-last weights): movement ops only
    dims = [i for i in range(len(size)) if size[i] != 1]
    order = sorted(dims, key=lambda i: -stride[i])
    expect = 1
    for i in reversed(order):
      if stride[i] != expect: break
      expect *= size[i]
    else:
      t = flat[offset:offset + n].reshape(tuple(size[i] for i in order))
      return t.permute(tuple(order.index(i) for i in dims)).reshape(size)
    # any other strided view (overlapping or with gaps; rare in checkpoints): gather the bytes on the host
    raw, isz = self.storage.raw(), dt.itemsize
    out = bytearray()
    for idx in itertools.product(*(range(s) for s in size)):
      e = offset + sum(i * st for i, st in zip(idx, stride))
      out += raw[e * isz:(e + 1) * isz]
    return Tensor(bytes(out), dtype=dt, device=_load_device).reshape(size)

def _finish(obj: Any) -> Any:
  """Replace every _PendingTensor inside obj (dicts and lists in place, tuples rebuilt) by its Tensor."""
  if isinstance(obj, _PendingTensor): return obj.make()
  if isinstance(obj, dict):
    for k, v in obj.items(): obj[k] = _finish(v)
  elif isinstance(obj, list):
    for i, v in enumerate(obj): obj[i] = _finish(v)
  elif isinstance(obj, tuple): return type(obj)(*(_finish(v) for v in obj)) if hasattr(obj, "_fields") else tuple(_finish(v) for v in obj)
  return obj

def _bytes_as(raw: Tensor, dt: DType) -> Tensor:
  """A uint8 tensor of little-endian bytes -> elements of dt, with Tensor ops (runs on the tensor's device)."""
  if dt.itemsize == 1: return raw.bitcast(dt) if dt != dtypes.bool else raw.cast(dtypes.bool)
  b = raw.reshape(-1, dt.itemsize)
  ut = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dt.itemsize]
  acc = b[:, 0].cast(ut)
  for i in range(1, dt.itemsize): acc = acc | (b[:, i].cast(ut) << (8 * i))
  return acc.bitcast(dt)

def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
  return _PendingTensor(storage, storage_offset, size, stride, None)
def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
  return _PendingTensor(storage, storage_offset, size, stride, dtype.dtype if isinstance(dtype, _TorchDtype) else None)
def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None): return data
def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state): return data

_load_device: str | None = None   # the device torch_load puts tensors on (set for the duration of a load)

def _allowed_globals() -> dict[tuple[str, str], Any]:
  g: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
    ("torch.nn.parameter", "Parameter"): _rebuild_parameter,
    ("torch", "Size"): tuple,
    ("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "complex"): complex,
    ("builtins", "slice"): slice, ("builtins", "bytearray"): bytearray,
  }
  for name, dt in _TORCH_STORAGES.items(): g[("torch", name)] = _StorageType(name, dt)
  for name in _TORCH_DTYPES: g[("torch", name)] = _TorchDtype(name)
  return g

class TorchUnpicklingError(pickle.UnpicklingError):
  """torch_load met a pickle global it does not allow (possibly malicious code)."""

class _RestrictedUnpickler(pickle.Unpickler):
  def __init__(self, f, path: str, load_storage: Callable[[tuple], _Storage]):
    super().__init__(f)
    self.path, self.load_storage, self.allowed = path, load_storage, _allowed_globals()
  def find_class(self, module: str, name: str) -> Any:
    if (module, name) in self.allowed: return self.allowed[(module, name)]
    raise TorchUnpicklingError(f"{self.path}: torch_load refuses to load the global {module}.{name}: only tensors, storages, "
                               f"OrderedDict and plain containers are allowed (a checkpoint that names other globals may run arbitrary code)")
  def persistent_load(self, pid: Any) -> Any:
    if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
      raise _corrupt(self.path, f"not a torch checkpoint (unsupported persistent id {str(pid)[:40]!r})")
    return self.load_storage(pid)

def _storage_dtype(pid: tuple, path: str) -> DType:
  st = pid[1] if len(pid) > 1 else None
  if isinstance(st, (_StorageType, _TorchDtype)): return st.dtype
  raise _corrupt(path, f"unsupported storage type {st!r} in a torch checkpoint")

def torch_load(path: str | os.PathLike, device: str | None = None) -> Any:
  """Load a PyTorch checkpoint (torch.save's zip format or the legacy format of
  `_use_new_zipfile_serialization=False`) without torch: tensors become petagrad Tensors (on `device`),
  nn.Parameters become Tensors, OrderedDicts stay OrderedDicts. Only the globals a state dict needs are
  allowed; anything else (e.g. os.system) raises TorchUnpicklingError before it can run."""
  global _load_device
  path = os.fspath(path)
  prev, _load_device = _load_device, device
  try:
    if zipfile.is_zipfile(path): return _torch_load_zip(path)
    with open(path, "rb") as f:
      if f.read(4) == b"PK\x03\x04": raise _corrupt(path, "truncated or corrupt torch checkpoint (a zip file without its central directory)")
    return _torch_load_legacy(path)
  except (zipfile.BadZipFile, EOFError, struct.error) as e:
    raise _corrupt(path, f"truncated or corrupt torch checkpoint ({type(e).__name__}: {e})") from None
  finally:
    _load_device = prev

def _torch_load_zip(path: str) -> Any:
  with zipfile.ZipFile(path) as zf:
    names = zf.namelist()
    pkls = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
    if not pkls: raise _corrupt(path, "a zip file without data.pkl is not a torch checkpoint")
    root = pkls[0][:-len("data.pkl")]
    if (bo := root + "byteorder") in names and zf.read(bo).strip() != b"little":
      raise _corrupt(path, "big-endian torch checkpoints are not supported")
    storages: dict[str, _Storage] = {}
    def load_storage(pid: tuple) -> _Storage:
      key = str(pid[2])
      if key not in storages:
        member = f"{root}data/{key}"
        if member not in names: raise _corrupt(path, f"storage {key} is referenced but {member} is missing")
        storages[key] = _Storage(lambda m=member: zf.read(m), _storage_dtype(pid, path), key)
      return storages[key]
    obj = _RestrictedUnpickler(io.BytesIO(zf.read(pkls[0])), path, load_storage).load()
    return _finish(obj)   # while the zip is open: each storage is read once

_LEGACY_MAGIC = 0x1950a86a20f9469cfc6c

def _torch_load_legacy(path: str) -> Any:
  with open(path, "rb") as f:
    def no_storage(pid): raise _corrupt(path, "not a torch checkpoint (a storage in the legacy header)")
    def safe_small(): return _RestrictedUnpickler(f, path, no_storage).load()
    try: magic = safe_small()
    except TorchUnpicklingError: raise   # a refused global: say so, it may be an attack
    except Exception as e:
      raise _corrupt(path, f"not a torch checkpoint (neither a zip file nor a legacy pickle: {type(e).__name__}: {e})") from None
    if magic != _LEGACY_MAGIC: raise _corrupt(path, "not a torch checkpoint (wrong magic number)")
    version = safe_small()
    if version != 1001: raise _corrupt(path, f"unsupported legacy torch checkpoint protocol version {version}")
    sys_info = safe_small()
    if isinstance(sys_info, dict) and not sys_info.get("little_endian", True): raise _corrupt(path, "big-endian torch checkpoints are not supported")
    found: dict[str, tuple[DType, int]] = {}
    storages: dict[str, _Storage] = {}
    offsets: dict[str, int] = {}
    def load_storage(pid: tuple) -> _Storage:
      key = str(pid[2])
      if len(pid) > 5 and pid[5] is not None: raise TorchUnpicklingError(f"{path}: legacy storage views are not supported")
      if key not in storages:
        dt = _storage_dtype(pid, path)
        storages[key] = _Storage(lambda k=key: _legacy_read(path, offsets, found, k), dt, key)
        found[key] = (dt, int(pid[4]))
      return storages[key]
    obj = _RestrictedUnpickler(f, path, load_storage).load()
    keys = safe_small()
    if not isinstance(keys, list): raise _corrupt(path, "corrupt legacy torch checkpoint (no storage key list)")
    # the storages follow, in key order: an int64 element count, then the raw bytes
    pos = f.tell()
    size = os.fstat(f.fileno()).st_size
    for k in keys:
      k = str(k)
      if pos + 8 > size: raise _corrupt(path, f"truncated torch checkpoint: storage {k} is missing")
      f.seek(pos)
      (numel,) = struct.unpack("<q", f.read(8))
      itemsize = found[k][0].itemsize if k in found else 1
      offsets[k] = pos + 8
      pos += 8 + numel * itemsize
      if pos > size: raise _corrupt(path, f"truncated torch checkpoint: storage {k} needs {numel * itemsize} bytes, the file ends first")
      if k in found: found[k] = (found[k][0], numel)
    missing = [k for k in found if k not in offsets]
    if missing: raise _corrupt(path, f"corrupt torch checkpoint: storages {missing} are referenced but not stored")
  return _finish(obj)

def _legacy_read(path: str, offsets: dict[str, int], found: dict[str, tuple[DType, int]], key: str) -> bytes:
  dt, numel = found[key]
  with open(path, "rb") as f:
    f.seek(offsets[key])
    raw = f.read(numel * dt.itemsize)
  if len(raw) != numel * dt.itemsize: raise _corrupt(path, f"truncated torch checkpoint: storage {key} is cut short")
  return raw

# ====================================================================== GGUF

GGML_TYPES: dict[int, tuple[str, int, int]] = {   # type id -> (name, elements per block, bytes per block)
  0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 8: ("Q8_0", 32, 34), 14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2),
}
_GGML_FLOATS = {"F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16}
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

class _Reader:
  def __init__(self, mm: Any, path: str): self.mm, self.pos, self.path = mm, 0, path
  def take(self, n: int) -> bytes:
    if self.pos + n > len(self.mm): raise _corrupt(self.path, f"truncated GGUF file: needs {self.pos + n} bytes, has {len(self.mm)}")
    b = self.mm[self.pos:self.pos + n]
    self.pos += n
    return b
  def unpack(self, fmt: str) -> Any: return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
  def string(self) -> str:
    n = self.unpack("<Q")
    if n > len(self.mm): raise _corrupt(self.path, f"corrupt GGUF file: a string of {n} bytes at offset {self.pos}")
    return self.take(n).decode("utf-8", errors="replace")
  def value(self, vtype: int) -> Any:
    if vtype in _GGUF_SCALARS: return self.unpack(_GGUF_SCALARS[vtype])
    if vtype == 8: return self.string()
    if vtype == 9:
      et, n = self.unpack("<I"), self.unpack("<Q")
      if n > len(self.mm): raise _corrupt(self.path, f"corrupt GGUF file: an array of {n} elements")
      return [self.value(et) for _ in range(n)]
    raise _corrupt(self.path, f"corrupt GGUF file: unknown metadata value type {vtype}")

def _f16(b: Tensor) -> Tensor:
  """Two little-endian bytes (last dim of size 2, uint8) -> float32, through a float16 bitcast."""
  return (b[..., 0].cast(dtypes.uint16) | (b[..., 1].cast(dtypes.uint16) << 8)).bitcast(dtypes.float16).cast(dtypes.float32)

def _nibbles(q: Tensor) -> Tensor:
  """(n, 16) packed bytes -> (n, 32): the low nibbles, then the high nibbles (ggml's Q4 order)."""
  return (q & 0xF).cat(q >> 4, dim=1)

def ggml_dequantize(raw: Tensor, ggml_type: int, n: int) -> Tensor:
  """n elements of ggml type `ggml_type` from a uint8 Tensor of its bytes -> a flat Tensor (float32 for
  quantized types; F16/BF16/F32 keep their dtype). Pure Tensor ops: runs on any device."""
  name, bs, nbytes = GGML_TYPES[ggml_type]
  if name in _GGML_FLOATS: return _bytes_as(raw, _GGML_FLOATS[name])
  blocks = raw.reshape(n // bs, nbytes)
  if name == "Q8_0":
    return (blocks[:, 2:].bitcast(dtypes.int8).cast(dtypes.float32) * _f16(blocks[:, :2]).unsqueeze(1)).flatten()
  if name == "Q4_0":
    return ((_nibbles(blocks[:, 2:]).cast(dtypes.float32) - 8) * _f16(blocks[:, :2]).unsqueeze(1)).flatten()
  if name == "Q4_1":
    d, m = _f16(blocks[:, 0:2]).unsqueeze(1), _f16(blocks[:, 2:4]).unsqueeze(1)
    return (_nibbles(blocks[:, 4:]).cast(dtypes.float32) * d + m).flatten()
  if name == "Q6_K":
    nb = blocks.shape[0]
    ql, qh = blocks[:, :128].reshape(nb, 2, 2, 32), blocks[:, 128:192].reshape(nb, 2, 1, 32)
    sc, d = blocks[:, 192:208].bitcast(dtypes.int8).cast(dtypes.float32), _f16(blocks[:, 208:210])
    # each half of 128: quarter j of 32 takes the low (j=0,1) or high (j=2,3) nibbles of ql[0:32] / ql[32:64]
    # as its low 4 bits and bits 2j, 2j+1 of qh as its top 2 bits
    low = (ql & 0xF).cat(ql >> 4, dim=2)                                            # (nb, 2 halves, 4 quarters, 32)
    high = qh.expand(nb, 2, 4, 32) >> Tensor([0, 2, 4, 6], dtype=dtypes.uint8, device=raw.device).reshape(1, 1, 4, 1)
    q = (low | ((high & 3) << 4)).cast(dtypes.float32) - 32
    # 16 scales per block: scale index 8*half + 2*quarter + l//16
    s = sc.reshape(nb, 2, 4, 2, 1)
    return (q.reshape(nb, 2, 4, 2, 16) * s * d.reshape(nb, 1, 1, 1, 1)).flatten()
  raise ValueError(f"ggml type {name} is not supported")

def gguf_load(path: str | os.PathLike, device: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
  """Read a GGUF file: returns (metadata, tensors). Tensor shapes follow numpy/torch order (GGUF stores
  dims innermost first). Quantized tensors (Q8_0, Q4_0, Q4_1, Q6_K) are dequantized to float32 with
  Tensor ops on the raw bytes; F32/F16/BF16 keep their dtype."""
  path = os.fspath(path)
  with open(path, "rb") as f:
    size = os.fstat(f.fileno()).st_size
    if size < 24: raise _corrupt(path, f"not a GGUF file: {size} bytes is shorter than the GGUF header")
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
  r = _Reader(mm, path)
  if r.take(4) != b"GGUF": raise _corrupt(path, "not a GGUF file (bad magic)")
  version = r.unpack("<I")
  if version not in (2, 3): raise _corrupt(path, f"unsupported GGUF version {version}")
  n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
  if n_tensors > size or n_kv > size: raise _corrupt(path, f"corrupt GGUF header ({n_tensors} tensors, {n_kv} metadata entries)")
  kv: dict[str, Any] = {}
  for _ in range(n_kv):
    key = r.string()
    kv[key] = r.value(r.unpack("<I"))
  infos = []
  for _ in range(n_tensors):
    name = r.string()
    nd = r.unpack("<I")
    if nd > 8: raise _corrupt(path, f"corrupt GGUF tensor info for {name!r}: {nd} dims")
    dims = [r.unpack("<Q") for _ in range(nd)]
    infos.append((name, tuple(reversed(dims)), r.unpack("<I"), r.unpack("<Q")))
  align = int(kv.get("general.alignment", 32))
  start = r.pos + (-r.pos % align)
  tensors: dict[str, Tensor] = {}
  for name, shape, gt, off in infos:
    if gt not in GGML_TYPES: raise ValueError(f"{path}: tensor {name!r} has ggml type {gt}, which gguf_load does not support (supported: {', '.join(v[0] for v in GGML_TYPES.values())})")
    tname, bs, nbytes = GGML_TYPES[gt]
    n = prod(shape)
    if n % bs: raise _corrupt(path, f"tensor {name!r}: {n} elements is not a whole number of {tname} blocks of {bs}")
    b, e = start + off, start + off + n // bs * nbytes
    if e > size: raise _corrupt(path, f"truncated GGUF file: tensor {name!r} ends at byte {e}, the file has {size}")
    if n == 0: tensors[name] = Tensor.zeros(*shape, device=device).contiguous()
    elif bs == 1: tensors[name] = Tensor(bytes(mm[b:e]), dtype=_GGML_FLOATS[tname], device=device).reshape(shape)   # plain floats: the bytes as they are
    else: tensors[name] = ggml_dequantize(Tensor(bytes(mm[b:e]), dtype=dtypes.uint8, device=device), gt, n).reshape(shape)
  return kv, tensors
