"""State: find a model's tensors by reflection, load/save them, and read other frameworks' checkpoints.

* `get_state_dict(obj)` / `get_parameters(obj)` / `load_state_dict(obj, sd, strict=True)`: PyTorch-style
  dotted keys ("layers.0.weight") found by walking attributes, lists, tuples and dicts.
* `safe_save` / `safe_load`: the safetensors format (compatible both ways with the `safetensors` package).
* `flatten_state` / `unflatten_state`: an optimizer's or scheduler's nested state dict as flat tensors plus one
  JSON string, so it fits in a safetensors file next to the model.
* `torch_load`: PyTorch checkpoints (zip and legacy formats) without importing torch, through a restricted
  unpickler that refuses every global it does not know to be safe.
* `gguf_load`: GGUF files (llama.cpp): F32, F16, BF16 and the Q8_0, Q4_0, Q4_1, Q6_K quantizations,
  dequantized with Tensor ops on the raw bytes.

The loaders read nothing but the headers: `safe_load`, `torch_load` and `gguf_load` give (by default) lazy DISK tensors,
byte-range views of the file (runtime/ops_disk.py, docs/disk.md), read when they are used: `load_state_dict` copies each
one onto its parameter's device on its own, so a checkpoint larger than memory loads piece by piece. A tensor that is no
byte range of the file (a gguf quantized tensor, a strided torch view) is its raw bytes copied to the compute device
and decoded there, lazily too.

Every writer goes to a temporary file in the target's folder and renames it over the target at the end
(`os.replace`), so a crash mid-save leaves the previous file intact; the next save to the same path removes the
temporaries of writers that were killed. A corrupt or truncated file raises a ValueError naming the file and what
is wrong (every header field is checked before anything is loaded).

>>> import tempfile, os
>>> from petagrad import Tensor
>>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
>>> safe_save({"w": Tensor([[1.0, 2.0]])}, path)
>>> safe_load(path)["w"].tolist()
[[1.0, 2.0]]
"""
from __future__ import annotations
import io, json, mmap, os, pathlib, pickle, socket, struct, tempfile, types, zipfile, zlib
from collections import OrderedDict
from typing import Any, Callable, Iterator, Mapping, NamedTuple, BinaryIO
from petagrad.tensor import Tensor
from petagrad.device import Device
from petagrad.dtype import DType, dtypes
from petagrad.uop.graph import is_disk, byte_range
from petagrad.uop.ops import Ops
from petagrad.helpers import prod
from petagrad.nn._inplace import write, commit

# ====================================================================== reflection

_SKIP = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type, staticmethod, classmethod,
         str, bytes, int, float, bool, type(None))

def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
  """Every Tensor reachable from obj by attributes, list/tuple indices and dict keys, with dotted names
  like PyTorch's state dicts ("layers.0.weight"). A tensor reachable twice (tied weights) appears under
  each name. Cycles are followed once. An optimizer gives tinygrad's names for its live state: "params.0", ..., "lr",
  then Adam/AdamW/LAMB "b1_t", "b2_t", "m.0", ..., "v.0", ... or SGD/LARS/Muon "b.0", ... (the momentum buffers),
  so `safe_save(get_state_dict(opt), path)` and `load_state_dict(opt, safe_load(path))` checkpoint it as in tinygrad.

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
    elif callable(getattr(type(obj), "_state_dict_items", None)): items = obj._state_dict_items().items()   # optimizers: tinygrad's names
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

class StateDictError(RuntimeError, ValueError):
  """load_state_dict(strict=True) found missing, unexpected or shape-mismatched keys. Both a RuntimeError (what
  torch's Module.load_state_dict raises) and a ValueError (what tinygrad's load_state_dict raises), so code ported
  from either catches it."""

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

def _reads_disk(t: Tensor) -> bool:
  """Does t read a file (a DISK tensor, or a lazy graph over one: a copy, a dequantization)?"""
  return is_disk(t.device) or any(u.op is Ops.BUFFER and is_disk(u.device) for u in t.uop.toposort())

def _shape_of(v: Any) -> tuple[int, ...]:
  return tuple(v.shape) if hasattr(v, "shape") else tuple(Tensor(v).shape)

def load_state_dict(obj: Any, state_dict: Mapping[str, Any], strict: bool = True, verbose: bool = False, consume: bool = False,
                    realize: bool = True) -> LoadResult:
  """Copy state_dict's values into obj's tensors (found by get_state_dict), in place with assign: each value
  is cast to the tensor's dtype and moved to its device. Values may be petagrad Tensors, numpy arrays or
  torch tensors, so `{k: v.numpy() for k, v in torch_model.state_dict().items()}` loads.

  strict=True: any missing key (in obj, not in state_dict), unexpected key (in state_dict, not in obj) or
  shape mismatch raises StateDictError (a RuntimeError like torch's and a ValueError like tinygrad's) naming every
  one of them, and nothing is loaded. strict=False: loads the keys that match and returns them all in a LoadResult.
  BatchNorm's `num_batches_tracked` is never an error: one the model lacks (track_running_stats=False) is ignored, as
  tinygrad does, and one the state dict lacks (checkpoints older than torch 0.4.1) keeps its value, as torch does.
  consume=True (tinygrad's): the loaded keys are removed from state_dict (a mutable mapping). realize is accepted
  for tinygrad's signature: the values are always written when this returns."""
  model = get_state_dict(obj)
  missing = [k for k in model if k not in state_dict and not _is_nbt(k)]
  unexpected = [k for k in state_dict if k not in model and not _is_nbt(k)]
  mismatched = []
  for k, t in model.items():
    if k in state_dict and (s := _shape_of(state_dict[k])) != t.shape and not (s == () and t.shape == (1,) or s == (1,) and t.shape == ()):
      mismatched.append((k, t.shape, s))
  res = LoadResult(missing, unexpected, mismatched)
  if strict and (missing or unexpected or mismatched):
    msg = [f"Error(s) in loading state_dict for {type(obj).__name__}:"]
    if missing: msg.append(f"  missing keys ({len(missing)}): {', '.join(missing)}")
    if unexpected: msg.append(f"  unexpected keys ({len(unexpected)}): {', '.join(unexpected)}")
    for k, ms, gs in mismatched:   # (the bracket is tinygrad's wording, which code ported from it may match)
      msg.append(f"  size mismatch for {k}: the model has shape {ms}, the state dict has shape {gs} "
                 f"[Shape mismatch in layer `{k}`: Expected shape {ms}, but found {gs} in state dict.]")
    raise StateDictError("\n".join(msg))
  bad = {k for k, _, _ in mismatched}
  written: list[Tensor] = []
  derived: list[tuple[Tensor, Tensor]] = []
  for k, t in model.items():
    if k not in state_dict or k in bad: continue
    v = _to_tensor(state_dict[k], t)
    if v.shape != t.shape: v = v.reshape(t.shape)
    if verbose: print(f"load_state_dict: {k} {v.shape} {v.dtype} -> {t.dtype} on {t.device}")
    if getattr(type(t), "_derived", False): derived.append((t, v))   # a view of other state (an optimizer's b1_t): it writes that
    elif _reads_disk(v): commit(write(t, v.to(t.device)))   # read from a file: on its own, so one tensor at a time is in memory
    else:
      write(t, v.to(t.device))
      if not any(w is t for w in written): written.append(t)
  commit(*written)
  for t, v in derived: t.assign(v.to(t.device))
  if consume:
    for k in model:
      if k in state_dict and k not in bad: del state_dict[k]   # type: ignore[attr-defined]
  return res

# ====================================================================== atomic writes

def _is_nbt(key: str) -> bool: return key == "num_batches_tracked" or key.endswith(".num_batches_tracked")

class _Corrupt(ValueError):
  """A file that cannot be read as what it claims to be; the message starts with the file's path."""

def _corrupt(path: Any, what: str) -> ValueError: return _Corrupt(f"{path}: {what}")

def _is_int(x: Any) -> bool: return type(x) is int   # not bool, not float: a header's 2.0 or true is not a size

# A temporary file is named after its target, this marker, the writer's host and pid, so a later save can tell the
# leftovers of a crashed writer (dead pid) from the file of a save still running in another process.
_TMP_MARK = ".petagrad-tmp."

def _host_tag() -> str: return "".join(c if c.isalnum() or c in "-_" else "_" for c in socket.gethostname()) or "host"

def _pid_alive(pid: int) -> bool:
  try: os.kill(pid, 0)   # signal 0: only checks that the process exists
  except ProcessLookupError: return False
  except (PermissionError, OSError, OverflowError): return True   # someone else's process, or unsure: keep its file
  return True

def _remove_stale_temporaries(path: str) -> list[str]:
  """Delete the temporary files that earlier saves to `path` left behind when their process died mid-write (kill -9,
  power loss, OOM killer). Only files of this host whose writer pid no longer exists are removed. Returns their names."""
  if os.name != "posix": return []   # os.kill(pid, 0) is a liveness probe only on POSIX
  folder, prefix = os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}{_TMP_MARK}"
  try: names = os.listdir(folder)
  except OSError: return []
  removed, host = [], _host_tag()
  for name in names:
    if not (name.startswith(prefix) and name.endswith(".tmp")): continue
    parts = name[len(prefix):].split(".")   # host, pid, random, "tmp"
    if len(parts) != 4 or parts[0] != host or not parts[1].isdigit() or int(parts[1]) <= 0: continue
    pid = int(parts[1])
    if pid == os.getpid() or _pid_alive(pid): continue   # this process (another thread may be saving) or a live writer
    try: os.unlink(os.path.join(folder, name)); removed.append(name)
    except OSError: pass   # removed by someone else meanwhile, or not ours to remove
  return removed

def _atomic_write(path: str | os.PathLike, fill: Callable[[BinaryIO], None]) -> None:
  """Write a file through fill(f) into a temporary file next to `path`, fsync it, and rename it over path. The
  temporary is removed on any exception; temporaries of earlier writers that were killed are removed first."""
  path = os.fspath(path)
  folder = os.path.dirname(os.path.abspath(path))
  _remove_stale_temporaries(path)
  fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}{_TMP_MARK}{_host_tag()}.{os.getpid()}.", suffix=".tmp", dir=folder)
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

# ====================================================================== safetensors

SAFETENSORS_DTYPES: dict[str, DType] = {
  "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
  "U32": dtypes.uint32, "I32": dtypes.int32, "U64": dtypes.uint64, "I64": dtypes.int64,
  "F16": dtypes.float16, "BF16": dtypes.bfloat16, "F32": dtypes.float32, "F64": dtypes.float64,
}
_SAFETENSORS_NAMES = {v: k for k, v in SAFETENSORS_DTYPES.items()}

def _short(x: Any, n: int = 60) -> str:
  """repr(x) cut to n characters, for error messages about untrusted file contents."""
  try: r = repr(x)
  except RecursionError: r = f"<a deeply nested {type(x).__name__}>"
  return r if len(r) <= n else r[:n - 3] + "..."

def _compute_device(device: str | None) -> str | None:
  """The device a loader puts its tensors on: None (they stay on DISK, views of the file) for None or a DISK device."""
  return None if device is None or is_disk(dev := Device.canonicalize(device)) else dev

def _file_view(file: Tensor, begin: int, end: int, dtype: DType, shape: tuple[int, ...], device: str | None) -> Tensor:
  """Bytes begin..end of a file (a flat uint8 DISK tensor) as a tensor of dtype and shape: a DISK view, copied to
  device (lazily) when one is given."""
  t = file[begin:end].bitcast(dtype).reshape(shape)
  return t if device is None else t.to(device)

class _DuplicateKey(ValueError): pass

def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  """json.loads' object hook: a key given twice is an error (json would keep the last one silently)."""
  out: dict[str, Any] = {}
  for k, v in pairs:
    if k in out: raise _DuplicateKey(f"the key {k!r} appears twice")
    out[k] = v
  return out

def _check_no_overlap(path: str, spans: list[tuple[int, int, str]], kind: str) -> None:
  """spans: (begin, end, name) byte ranges of tensors; two non-empty ones sharing a byte is a corrupt file."""
  prev_end, prev = 0, ""
  for b, e, name in sorted(s for s in spans if s[1] > s[0]):
    if b < prev_end: raise _corrupt(path, f"corrupt {kind} file: the data of tensors {prev!r} and {name!r} overlap (bytes {b}..{min(e, prev_end)})")
    prev_end, prev = e, name

class SafeTensorsFile(Mapping):
  """A safetensors file opened lazily: the header is read at once; `sf[name]` is that entry's bytes of the file as a
  DISK tensor (a view: nothing is read until it is used, then only its bytes), or copied to `device` (lazily) when
  one was given. So a file larger than memory can be loaded tensor by tensor. `metadata` holds the file's
  `__metadata__` strings.

  The whole header is checked when the file is opened: a malformed header, a shape that is not a list of
  non-negative ints, an unknown dtype, offsets that are not two ints, that do not match shape x itemsize, that
  overlap another tensor's or that lie past the end of the file raise ValueError naming the file."""
  def __init__(self, path: str | os.PathLike, device: str | None = None):
    self.path, self.device = os.fspath(path), _compute_device(device)
    with open(self.path, "rb") as f:
      size = os.fstat(f.fileno()).st_size
      if size < 8: raise _corrupt(self.path, f"not a safetensors file: {size} bytes is shorter than the 8-byte header length")
      (n,) = struct.unpack("<Q", f.read(8))
      if n > size - 8: raise _corrupt(self.path, f"truncated or corrupt safetensors file: the header is {n} bytes but only {size - 8} follow")
      raw_header = f.read(n)
      if len(raw_header) != n: raise _corrupt(self.path, "truncated safetensors file: the header is cut short")
    try: header = json.loads(raw_header, object_pairs_hook=_json_object)
    except (UnicodeDecodeError, json.JSONDecodeError, _DuplicateKey) as e: raise _corrupt(self.path, f"corrupt safetensors header (not JSON: {e})") from None
    except RecursionError: raise _corrupt(self.path, "corrupt safetensors header (JSON nested too deeply)") from None
    if not isinstance(header, dict): raise _corrupt(self.path, f"corrupt safetensors header (a JSON {type(header).__name__}, not an object)")
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
      raise _corrupt(self.path, f"corrupt safetensors header: __metadata__ must map strings to strings, got {_short(meta)}")
    self.metadata: dict[str, str] = meta or {}
    self._start, data_len = 8 + n, size - 8 - n
    self._entries: dict[str, tuple[DType, tuple[int, ...], int, int]] = {}
    for name, e in header.items(): self._entries[name] = self._check_entry(name, e, data_len)
    _check_no_overlap(self.path, [(b, en, name) for name, (_, _, b, en) in self._entries.items()], "safetensors")
    self._file = Tensor(pathlib.Path(self.path))   # the whole file on DISK, mapped (its size is fixed now), unread
  def _check_entry(self, name: str, e: Any, data_len: int) -> tuple[DType, tuple[int, ...], int, int]:
    def bad(what: str) -> ValueError: return _corrupt(self.path, f"corrupt safetensors header entry for tensor {name!r}: {what}")
    if not isinstance(e, dict): raise bad(f"a JSON {type(e).__name__} ({_short(e)}), not an object")
    for key in ("dtype", "shape", "data_offsets"):
      if key not in e: raise bad(f"no {key!r} in {_short(e)}")
    dt_name, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
    if not isinstance(dt_name, str): raise bad(f"dtype {_short(dt_name)} is not a string")
    if dt_name not in SAFETENSORS_DTYPES:
      raise _corrupt(self.path, f"tensor {name!r} has dtype {dt_name!r}, which petagrad does not support (supported: {', '.join(SAFETENSORS_DTYPES)})")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape): raise bad(f"shape {_short(shape)} is not a list of non-negative ints")
    if not (isinstance(offs, list) and len(offs) == 2 and all(_is_int(o) for o in offs)): raise bad(f"data_offsets {_short(offs)} is not a list of two ints")
    dt, (b, en), nbytes = SAFETENSORS_DTYPES[dt_name], offs, prod(shape) * SAFETENSORS_DTYPES[dt_name].itemsize
    if not 0 <= b <= en: raise bad(f"data_offsets {offs} do not describe a byte range")
    if en - b != nbytes: raise _corrupt(self.path, f"tensor {name!r}: {prod(shape)} x {dt_name} needs {nbytes} bytes but its offsets {offs} span {en - b}")
    if en > data_len: raise _corrupt(self.path, f"truncated safetensors file: tensor {name!r} ends at byte {en} of the data but the data has only {data_len} bytes")
    return dt, tuple(shape), b, en
  def __getitem__(self, name: str) -> Tensor:
    dt, shape, b, e = self._entries[name]
    return _file_view(self._file, self._start + b, self._start + e, dt, shape, self.device)
  def __iter__(self) -> Iterator[str]: return iter(self._entries)
  def __len__(self) -> int: return len(self._entries)
  def shape(self, name: str) -> tuple[int, ...]: return self._entries[name][1]
  def dtype(self, name: str) -> DType: return self._entries[name][0]
  def __repr__(self) -> str: return f"<SafeTensorsFile {self.path!r}: {len(self)} tensors>"

def safe_load(path: str | os.PathLike, device: str | None = None) -> SafeTensorsFile:
  """Open a .safetensors file lazily (see SafeTensorsFile): its tensors are DISK views of the file (device None or a
  DISK device) or lazy copies onto `device`; `dict(safe_load(p))` makes them all, still reading nothing.

  >>> import tempfile, os
  >>> path = os.path.join(tempfile.mkdtemp(), "w.safetensors")
  >>> safe_save({"w": Tensor([1.0, 2.0])}, path)
  >>> w = safe_load(path)["w"]; w.device.startswith("DISK"), w.to("CPU").tolist()
  (True, [1.0, 2.0])
  """
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

class _BadRecord(Exception):
  """A malformed tensor record met inside the unpickler's callbacks; the unpickler turns it into an error naming the file."""

class _Sealed:
  """The unpickler's own objects: a pickle's BUILD opcode may not overwrite their (already checked) fields."""
  def __setstate__(self, state: Any) -> None: raise _BadRecord(f"the pickle tries to change the fields of a {type(self).__name__.lstrip('_')}")

class _StorageType(_Sealed):
  """Stands for torch.FloatStorage & co inside the unpickler."""
  def __init__(self, name: str, dtype: DType): self.name, self.dtype = name, dtype
  def __repr__(self) -> str: return f"torch.{self.name}"

class _TorchDtype(_Sealed):
  """Stands for torch.float32 & co inside the unpickler."""
  def __init__(self, name: str): self.name, self.dtype = name, _TORCH_DTYPES[name]
  def __repr__(self) -> str: return f"torch.{self.name}"

class _Storage(_Sealed):
  """A storage of a checkpoint: its element dtype and count (from the pickle), where its raw bytes are (a uint8 DISK
  view of the file, or, for a compressed zip member, a function reading them), and the file and device (None: DISK)
  its tensors belong to. Its Tensor is made once per dtype, on first use."""
  def __init__(self, source: Callable[[], Tensor | bytes], dtype: DType, numel: int, key: str, path: str, device: str | None):
    self._source, self.dtype, self.numel, self.key, self.path, self.device = source, dtype, numel, key, path, device
    self._ts: dict[DType, Tensor] = {}
  @property
  def nbytes(self) -> int: return self.numel * self.dtype.itemsize
  def tensor(self, dtype: DType) -> Tensor:
    """The storage as a flat tensor of dtype: a DISK view of the file, or its bytes read onto the compute device."""
    if dtype not in self._ts:
      raw = self._source()
      if (n := raw.numel() if isinstance(raw, Tensor) else len(raw)) != self.nbytes:
        raise _corrupt(self.path, f"corrupt torch checkpoint: storage {self.key} has {n} bytes, its record says {self.numel} x {self.dtype.name} ({self.nbytes} bytes)")
      if n % dtype.itemsize: raise _corrupt(self.path, f"corrupt torch checkpoint: storage {self.key} has {n} bytes, not a whole number of {dtype.name}")
      self._ts[dtype] = raw.bitcast(dtype) if isinstance(raw, Tensor) else Tensor(raw, dtype=dtype, device=self.device or Device.DEFAULT)
    return self._ts[dtype]

def _as_strided(flat: Tensor, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> Tensor:
  """The view torch describes by (offset, size, stride) over a flat tensor, with movement ops only (no copy: the view
  is index math, and realizing it is one kernel). Strides are >= 0 and the view lies inside flat.

  Stride-0 dims become an expand, size-1 dims a reshape. The other dims, largest stride first (runs that are
  contiguous with each other merged), are cut out of the flat extent one at a time: the last axis, a window of L
  elements, becomes (s, W) with row i starting at i*a, where a is the dim's stride and W the extent of the dims left.
  Rows that do not overlap (a >= W) are a pad or shrink to s*a and a reshape; overlapping rows (a < W, e.g.
  as_strided windows) come from the window repeated T times, read with a row length of L + a: element i*(L+a) + t of
  the repeats is element i*a + t of the window. Last, the dims are put back in torch's order."""
  groups: list[tuple[int, int, list[int]]] = []   # (size, stride, torch dims) largest stride first
  for i in sorted((i for i in range(len(size)) if size[i] > 1 and stride[i] > 0), key=lambda i: -stride[i]):
    if groups and groups[-1][1] == stride[i] * size[i]: groups[-1] = (groups[-1][0] * size[i], stride[i], groups[-1][2] + [i])
    else: groups.append((size[i], stride[i], [i]))
  extents = [1]   # extents[k]: elements spanned by groups[len(groups)-k:]
  for s, a, _ in reversed(groups): extents.append(extents[-1] + (s - 1) * a)
  x = flat.shrink(((offset, offset + extents[-1]),))
  for k, (s, a, _) in enumerate(groups):
    w, pre, L = extents[len(groups) - k - 1], x.shape[:-1], x.shape[-1]
    keep = (None,) * len(pre)
    if a == 1 and w == 1: x = x.reshape(*pre, s, 1)   # the innermost contiguous run: the window is the elements
    elif a >= w:
      x = (x.pad(((0, 0),) * len(pre) + ((0, s * a - L),)) if s * a > L else x.shrink(keep + ((0, s * a),))).reshape(*pre, s, a)
    else:
      t = -(-s * (L + a) // L)
      x = x.reshape(*pre, 1, L).expand(*pre, t, L).reshape(*pre, t * L).shrink(keep + ((0, s * (L + a)),)).reshape(*pre, s, L + a)
    if x.shape[-1] != w: x = x.shrink(keep + (None, (0, w)))
  order = [i for _, _, dims in groups for i in dims]
  x = x.reshape(tuple(size[i] for i in order))
  x = x.permute(tuple(order.index(i) for i in sorted(order)))
  return x.reshape(tuple(size[i] if i in order else 1 for i in range(len(size)))).expand(size)

class _PendingTensor(_Sealed):
  """A tensor the unpickler met (checked against its storage); made once the storages can be read (the legacy format
  stores them after the pickle)."""
  def __init__(self, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...], dtype: DType):
    self.storage, self.offset, self.size, self.stride, self.dtype = storage, offset, size, stride, dtype
  def make(self) -> Tensor:
    def view(flat: Tensor) -> Tensor:
      return flat[:0].reshape(self.size) if prod(self.size) == 0 else _as_strided(flat, self.offset, self.size, self.stride)
    flat, device = self.storage.tensor(self.dtype), self.storage.device
    if not is_disk(flat.device): return view(flat)
    if byte_range((t := view(flat)).uop) is not None: return t if device is None else t.to(device)   # a byte range: a DISK view
    return view(flat.to(device or Device.DEFAULT))   # strided: the storage's bytes are copied, the strides run there

def _ints(x: Any, what: str) -> tuple[int, ...]:
  if not isinstance(x, (tuple, list)) or not all(_is_int(v) for v in x): raise _BadRecord(f"a tensor's {what} {_short(x)} is not a tuple of ints")
  return tuple(x)

def _pending(storage: Any, offset: Any, size: Any, stride: Any, dtype: DType | None) -> _PendingTensor:
  """Check a tensor record of the pickle against its storage: the view torch would make must lie inside it."""
  if not isinstance(storage, _Storage): raise _BadRecord(f"a tensor's storage is {_short(storage)}, not a storage record")
  size, stride = _ints(size, "size"), _ints(stride, "stride")
  if not _is_int(offset) or offset < 0: raise _BadRecord(f"a tensor's storage offset {_short(offset)} is not a non-negative int")
  if len(size) != len(stride): raise _BadRecord(f"a tensor has size {size} but stride {stride}")
  if any(d < 0 for d in size): raise _BadRecord(f"a tensor has a negative size {size}")
  if any(st < 0 for st in stride): raise _BadRecord(f"a tensor has a negative stride {stride} (torch never writes one)")
  if prod(size) >= 2**63 or max(size + stride + (offset,)) >= 2**63: raise _BadRecord(f"a tensor of size {size}, stride {stride} at offset {offset} exceeds int64")
  dt = dtype or storage.dtype
  if prod(size):
    last = offset + sum((d - 1) * st for d, st in zip(size, stride))
    if (last + 1) * dt.itemsize > storage.nbytes:
      raise _BadRecord(f"a tensor of size {size}, stride {stride} at offset {offset} reads element {last} of storage {storage.key}, "
                       f"which holds {storage.nbytes // dt.itemsize} x {dt.name}")
  return _PendingTensor(storage, offset, size, stride, dt)

def _finish(obj: Any) -> Any:
  """Replace every _PendingTensor inside obj by its Tensor: dicts and lists in place, tuples and sets rebuilt.
  Iterative and memoized by id: a pickle can nest deeply, share objects and hold cycles."""
  done: dict[int, Any] = {}
  alive: list[Any] = []   # everything visited stays referenced, so no id is reused during the walk
  stack: list[tuple[Any, bool]] = [(obj, False)]
  while stack:
    x, children_done = stack.pop()
    if not children_done:
      if id(x) in done: continue
      alive.append(x)
      if isinstance(x, _PendingTensor): done[id(x)] = x.make(); continue
      done[id(x)] = x   # a container stands for itself while its children are walked (a cycle sees it as it is)
      if isinstance(x, (dict, list, tuple, set, frozenset)):
        stack.append((x, True))
        stack.extend((c, False) for c in (x.values() if isinstance(x, dict) else x) if id(c) not in done)
      continue
    if isinstance(x, dict):
      for k, v in x.items(): x[k] = done.get(id(v), v)
    elif isinstance(x, list):
      for i, v in enumerate(x): x[i] = done.get(id(v), v)
    elif any(done.get(id(v), v) is not v for v in x):   # a tuple, set or frozenset holding a tensor: rebuilt
      done[id(x)] = type(x)(done.get(id(v), v) for v in x) if type(x) in (tuple, set, frozenset) else x
  return done[id(obj)]

def _bytes_as(raw: Tensor, dt: DType) -> Tensor:
  """A uint8 tensor of little-endian bytes -> elements of dt, with Tensor ops (runs on the tensor's device)."""
  if dt.itemsize == 1: return raw.bitcast(dt) if dt != dtypes.bool else raw.cast(dtypes.bool)
  b = raw.reshape(-1, dt.itemsize)
  ut = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[dt.itemsize]
  acc = b[:, 0].cast(ut)
  for i in range(1, dt.itemsize): acc = acc | (b[:, i].cast(ut) << (8 * i))
  return acc.bitcast(dt)

def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None):
  return _pending(storage, storage_offset, size, stride, None)
def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
  if not isinstance(dtype, _TorchDtype): raise _BadRecord(f"a tensor's dtype is {_short(dtype)}, not a torch dtype")
  return _pending(storage, storage_offset, size, stride, dtype.dtype)
def _rebuild_parameter(data, requires_grad=False, backward_hooks=None, state=None): return data
def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state): return data
def _bytearray(*args):
  """builtins.bytearray as pickle uses it (from bytes, or a str and its encoding), never from an int: a count of bytes to allocate."""
  if len(args) > 2 or args and not isinstance(args[0], (bytes, str)): raise _BadRecord(f"bytearray{_short(args)} is not how pickle stores a bytearray")
  return bytearray(*args)

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
    ("builtins", "slice"): slice, ("builtins", "bytearray"): _bytearray,
  }
  for name, dt in _TORCH_STORAGES.items(): g[("torch", name)] = _StorageType(name, dt)
  for name in _TORCH_DTYPES: g[("torch", name)] = _TorchDtype(name)
  return g

class TorchUnpicklingError(pickle.UnpicklingError):
  """torch_load met a pickle global it does not allow (possibly malicious code)."""

class _CappedReader:
  """The file an unpickler reads: no read asks for more than the file still holds (pickle reads the length a corrupt
  opcode claims, 2**40, in one call, and a buffered file allocates that up front)."""
  def __init__(self, f: BinaryIO):
    self.f, self.pos = f, f.tell()
    self.size = f.getbuffer().nbytes if isinstance(f, io.BytesIO) else os.fstat(f.fileno()).st_size
  def left(self) -> int: return max(0, self.size - self.pos)
  def read(self, n: int = -1) -> bytes:
    b = self.f.read(self.left() if n is None or n < 0 else min(n, self.left()))
    self.pos += len(b)
    return b
  def readline(self) -> bytes:
    b = self.f.readline()
    self.pos += len(b)
    return b

class _RestrictedUnpickler(pickle._Unpickler):   # type: ignore[name-defined]
  """Unpickles only what a state dict needs; any failure inside (a malformed pickle, a bad tensor record) becomes a
  ValueError naming the file that starts with `what`, except a refused global, which stays a TorchUnpicklingError.

  It is pickle's pure-Python unpickler (as torch's weights_only loader is): its memo is a dict, where the C
  unpickler's is an array that a corrupt memo index of 10**9 grows to gigabytes of zeros."""
  def __init__(self, f, path: str, load_storage: Callable[[tuple], _Storage], what: str = "corrupt torch checkpoint"):
    self.source = _CappedReader(f)
    super().__init__(self.source)
    self.path, self.load_storage, self.what, self.allowed = path, load_storage, what, _allowed_globals()
  def _load_bytearray8(self) -> None:
    # pickle's own handler allocates (and zeroes) the length the pickle claims before reading: check it first
    (n,) = struct.unpack("<Q", self.read(8))
    if n > self.source.left(): raise _BadRecord(f"a bytearray of {n} bytes runs past the end of the pickle")
    self.append(bytearray(self.read(n)))
  dispatch = {**pickle._Unpickler.dispatch, pickle.BYTEARRAY8[0]: _load_bytearray8}   # type: ignore[attr-defined]
  def find_class(self, module: str, name: str) -> Any:
    if module == "__builtin__": module = "builtins"   # protocol 2 (torch.save's) names builtins as Python 2 did
    if (module, name) in self.allowed: return self.allowed[(module, name)]
    raise TorchUnpicklingError(f"{self.path}: torch_load refuses to load the global {module}.{name}: only tensors, storages, "
                               f"OrderedDict and plain containers are allowed (a checkpoint that names other globals may run arbitrary code)")
  def persistent_load(self, pid: Any) -> Any:
    if not isinstance(pid, tuple) or not pid or pid[0] != "storage":
      raise _corrupt(self.path, f"not a torch checkpoint (unsupported persistent id {_short(pid, 40)})")
    return self.load_storage(pid)
  def load(self) -> Any:
    try: return super().load()
    except (TorchUnpicklingError, _Corrupt): raise
    except _BadRecord as e: raise _corrupt(self.path, f"{self.what}: {e}") from None
    except RecursionError: raise _corrupt(self.path, f"{self.what} (the pickle nests too deeply)") from None
    except Exception as e: raise _corrupt(self.path, f"{self.what} (malformed pickle: {type(e).__name__}: {_short(str(e), 120)})") from None

def _storage_record(pid: tuple, path: str, n: int) -> tuple[DType, str, int]:
  """(dtype, key, element count) of a storage's persistent id ('storage', type, key, location, numel[, view])."""
  if len(pid) != n: raise _corrupt(path, f"corrupt torch checkpoint: a storage record has {len(pid)} fields, not {n}")
  st, key, numel = pid[1], pid[2], pid[4]
  if not isinstance(st, (_StorageType, _TorchDtype)): raise _corrupt(path, f"unsupported storage type {_short(st)} in a torch checkpoint")
  if not isinstance(key, str) or not _is_int(numel) or numel < 0:
    raise _corrupt(path, f"corrupt torch checkpoint: storage record {_short(pid)} needs a string key and an element count")
  return st.dtype, key, numel

def torch_load(path: str | os.PathLike, device: str | None = None) -> Any:
  """Load a PyTorch checkpoint (torch.save's zip format or the legacy format of
  `_use_new_zipfile_serialization=False`) without torch: tensors become petagrad Tensors, nn.Parameters become
  Tensors, OrderedDicts stay OrderedDicts. With device None (or a DISK device) a tensor whose elements are one byte
  range of the file is a DISK view of it (read when used); a strided one (transposed, stepped, expanded) is its
  storage copied to Device.DEFAULT, viewed there. With a device, every tensor is a lazy copy onto it. Only the globals a state dict needs are
  allowed; anything else (e.g. os.system) raises TorchUnpicklingError before it can run.

  Views (transposed, sliced with steps, expanded, at an offset) become movement ops on their storage, so a
  checkpoint of a tensor expanded to 10**8 elements loads at once, and nothing is copied until it is used.
  A malformed pickle, a missing or short storage, or a view that reads outside its storage raises ValueError
  naming the file."""
  path, device = os.fspath(path), _compute_device(device)
  try:
    if zipfile.is_zipfile(path): return _torch_load_zip(path, device)
    with open(path, "rb") as f:
      if f.read(4) == b"PK\x03\x04": raise _corrupt(path, "truncated or corrupt torch checkpoint (a zip file without its central directory)")
    return _torch_load_legacy(path, device)
  except (zipfile.BadZipFile, zlib.error, EOFError, struct.error) as e:
    raise _corrupt(path, f"truncated or corrupt torch checkpoint ({type(e).__name__}: {e})") from None

def _zip_read(zf: zipfile.ZipFile, member: str, path: str) -> bytes:
  try: return zf.read(member)
  except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError, RuntimeError) as e:   # CRC, compression, encryption
    raise _corrupt(path, f"corrupt torch checkpoint: cannot read {member} ({type(e).__name__}: {e})") from None

def _zip_data_offset(zf: zipfile.ZipFile, info: zipfile.ZipInfo, size: int) -> int | None:
  """Where a member's bytes lie in the zip file as they are (stored, not compressed or encrypted: what torch.save
  writes), from its local header; None when they do not."""
  if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 1 or zf.fp is None: return None
  zf.fp.seek(info.header_offset)
  head = zf.fp.read(30)
  if len(head) != 30 or head[:4] != b"PK\x03\x04": return None
  begin = info.header_offset + 30 + int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little")
  return begin if begin + info.file_size <= size else None

def _torch_load_zip(path: str, device: str | None) -> Any:
  file = Tensor(pathlib.Path(path))   # the checkpoint on DISK: stored storages are views of it
  with zipfile.ZipFile(path) as zf:
    names = zf.namelist()
    pkls = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
    if not pkls: raise _corrupt(path, "a zip file without data.pkl is not a torch checkpoint")
    root = pkls[0][:-len("data.pkl")]
    if (bo := root + "byteorder") in names and _zip_read(zf, bo, path).strip() != b"little":
      raise _corrupt(path, "big-endian torch checkpoints are not supported")
    storages: dict[str, _Storage] = {}
    def load_storage(pid: tuple) -> _Storage:
      dt, key, numel = _storage_record(pid, path, 5)
      if key not in storages:
        member = f"{root}data/{key}"
        if member not in names: raise _corrupt(path, f"storage {key} is referenced but {member} is missing")
        if (have := zf.getinfo(member).file_size) != numel * dt.itemsize:
          raise _corrupt(path, f"corrupt torch checkpoint: storage {key} should hold {numel} x {dt.name} ({numel * dt.itemsize} bytes) but {member} has {have}")
        info = zf.getinfo(member)
        at = _zip_data_offset(zf, info, file.numel())
        read: Callable[[], Tensor | bytes] = (lambda m=member: _zip_read(zf, m, path)) if at is None else (lambda a=at, n=info.file_size: file[a:a + n])
        storages[key] = _Storage(read, dt, numel, key, path, device)
      return storages[key]
    obj = _RestrictedUnpickler(io.BytesIO(_zip_read(zf, pkls[0], path)), path, load_storage).load()
    return _finish(obj)   # while the zip is open: each storage is read once

_LEGACY_MAGIC = 0x1950a86a20f9469cfc6c

def _torch_load_legacy(path: str, device: str | None) -> Any:
  file = Tensor(pathlib.Path(path))   # the checkpoint on DISK: the storages are views of it
  with open(path, "rb") as f:
    def no_storage(pid): raise _corrupt(path, "not a torch checkpoint (a storage in the legacy header)")
    def small(what: str) -> Any: return _RestrictedUnpickler(f, path, no_storage, what).load()
    magic = small("not a torch checkpoint (neither a zip file nor a legacy pickle)")
    if magic != _LEGACY_MAGIC: raise _corrupt(path, "not a torch checkpoint (wrong magic number)")
    version = small("corrupt legacy torch checkpoint (its version)")
    if version != 1001: raise _corrupt(path, f"unsupported legacy torch checkpoint protocol version {_short(version)}")
    sys_info = small("corrupt legacy torch checkpoint (its system info)")
    if isinstance(sys_info, dict) and not sys_info.get("little_endian", True): raise _corrupt(path, "big-endian torch checkpoints are not supported")
    storages: dict[str, _Storage] = {}
    offsets: dict[str, int] = {}
    def load_storage(pid: tuple) -> _Storage:
      dt, key, numel = _storage_record(pid, path, 6)
      if pid[5] is not None: raise _corrupt(path, "legacy storage views are not supported")
      if key not in storages: storages[key] = _Storage(lambda k=key: file[offsets[k]:offsets[k] + storages[k].nbytes], dt, numel, key, path, device)
      return storages[key]
    obj = _RestrictedUnpickler(f, path, load_storage).load()
    keys = small("corrupt legacy torch checkpoint (its storage key list)")
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
      raise _corrupt(path, f"corrupt legacy torch checkpoint: the storage key list is {_short(keys)}")
    # the storages follow, in key order: an int64 element count, then the raw bytes. Each one's size comes from its
    # dtype, known only for storages a tensor refers to: any other would leave the ones after it unfindable.
    pos = f.tell()
    size = os.fstat(f.fileno()).st_size
    for k in keys:
      if k in offsets: raise _corrupt(path, f"corrupt legacy torch checkpoint: storage {k} is listed twice")
      if k not in storages: raise _corrupt(path, f"corrupt legacy torch checkpoint: storage {k} is listed but no tensor refers to it")
      if pos + 8 > size: raise _corrupt(path, f"truncated torch checkpoint: storage {k} is missing")
      f.seek(pos)
      (numel,) = struct.unpack("<q", f.read(8))
      st = storages[k]
      if numel != st.numel: raise _corrupt(path, f"corrupt legacy torch checkpoint: storage {k} holds {numel} elements, its record says {st.numel}")
      offsets[k] = pos + 8
      pos += 8 + st.nbytes
      if pos > size: raise _corrupt(path, f"truncated torch checkpoint: storage {k} needs {st.nbytes} bytes, the file ends first")
    missing = [k for k in storages if k not in offsets]
    if missing: raise _corrupt(path, f"corrupt torch checkpoint: storages {missing} are referenced but not stored")
  return _finish(obj)

# ====================================================================== GGUF

GGML_TYPES: dict[int, tuple[str, int, int]] = {   # type id -> (name, elements per block, bytes per block)
  0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 8: ("Q8_0", 32, 34), 14: ("Q6_K", 256, 210), 30: ("BF16", 1, 2),
}
_GGML_FLOATS = {"F32": dtypes.float32, "F16": dtypes.float16, "BF16": dtypes.bfloat16}
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

_GGUF_MAX_DEPTH = 16   # arrays of arrays: the spec allows nesting, real files nest once at most

class _Reader:
  """Reads GGUF's little-endian fields from a memory map; every read past the end raises a ValueError naming the file."""
  def __init__(self, mm: Any, path: str): self.mm, self.pos, self.path = mm, 0, path
  def take(self, n: int) -> bytes:
    if self.pos + n > len(self.mm): raise _corrupt(self.path, f"truncated GGUF file: needs {self.pos + n} bytes, has {len(self.mm)}")
    b = self.mm[self.pos:self.pos + n]
    self.pos += n
    return b
  def unpack(self, fmt: str) -> Any: return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
  def string(self, what: str = "a string", strict: bool = False) -> str:
    at, n = self.pos, self.unpack("<Q")
    if n > len(self.mm) - self.pos: raise _corrupt(self.path, f"truncated or corrupt GGUF file: {what} of {n} bytes at offset {at} runs past the end of the file")
    raw = self.take(n)
    try: return raw.decode("utf-8", errors="strict" if strict else "replace")   # names must be exact; values may hold stray bytes
    except UnicodeDecodeError: raise _corrupt(self.path, f"corrupt GGUF file: {what} at offset {at} is not UTF-8: {_short(raw)}") from None
  def value(self, vtype: int, key: str, depth: int = 0) -> Any:
    if vtype in _GGUF_SCALARS: return self.unpack(_GGUF_SCALARS[vtype])
    if vtype == 8: return self.string(f"the string value of {key!r}")
    if vtype == 9:
      if depth >= _GGUF_MAX_DEPTH: raise _corrupt(self.path, f"corrupt GGUF file: the value of {key!r} nests arrays more than {_GGUF_MAX_DEPTH} deep")
      at, et, n = self.pos, self.unpack("<I"), self.unpack("<Q")
      if et not in _GGUF_SCALARS and et not in (8, 9): raise _corrupt(self.path, f"corrupt GGUF file: the array {key!r} at offset {at} has unknown element type {et}")
      if et in _GGUF_SCALARS:   # numbers in one read (vocabulary scores, token types: 100k+ elements)
        fmt = _GGUF_SCALARS[et]
        if n * struct.calcsize(fmt) > len(self.mm) - self.pos:
          raise _corrupt(self.path, f"truncated or corrupt GGUF file: the array {key!r} of {n} elements at offset {at} runs past the end of the file")
        return list(struct.unpack(f"<{n}{fmt[1]}", self.take(n * struct.calcsize(fmt))))
      if n > len(self.mm) - self.pos: raise _corrupt(self.path, f"corrupt GGUF file: the array {key!r} at offset {at} claims {n} elements")
      return [self.value(et, key, depth + 1) for _ in range(n)]
    raise _corrupt(self.path, f"corrupt GGUF file: {key!r} has unknown metadata value type {vtype}")

def _f16(b: Tensor) -> Tensor:
  """Two little-endian bytes (last dim of size 2, uint8) -> float32, through a float16 bitcast."""
  return (b[..., 0].cast(dtypes.uint16) | (b[..., 1].cast(dtypes.uint16) << 8)).bitcast(dtypes.float16).cast(dtypes.float32)

def _nibbles(q: Tensor) -> Tensor:
  """(n, 16) packed bytes -> (n, 32): the low nibbles, then the high nibbles (ggml's Q4 order)."""
  return (q & 0xF).cat(q >> 4, dim=1)

def ggml_dequantize(raw: Tensor, ggml_type: int, n: int) -> Tensor:
  """n elements of ggml type `ggml_type` from a uint8 Tensor of its bytes -> a flat Tensor (float32 for
  quantized types; F16/BF16/F32 keep their dtype). Pure Tensor ops: runs on any device."""
  if ggml_type not in GGML_TYPES: raise ValueError(f"ggml type {ggml_type} is not supported (supported: {', '.join(f'{k} ({v[0]})' for k, v in GGML_TYPES.items())})")
  name, bs, nbytes = GGML_TYPES[ggml_type]
  if raw.dtype != dtypes.uint8 or n < 0 or n % bs or raw.numel() != n // bs * nbytes:
    raise ValueError(f"ggml_dequantize: {n} elements of {name} (blocks of {bs} in {nbytes} bytes) need {n // bs * nbytes} uint8 bytes, got {raw.numel()} x {raw.dtype.name}")
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
  Tensor ops on the raw bytes; F32/F16/BF16 keep their dtype. With device None (or a DISK device) the F32/F16/BF16
  tensors are DISK views of the file and a quantized tensor is its bytes copied to Device.DEFAULT and dequantized
  there; with a device, all run there. Nothing is read before a tensor is used. A malformed file (bad magic or version, absurd
  counts, unknown type ids, truncated strings, a bad alignment, misaligned, overlapping or out-of-file tensor
  data) raises ValueError naming the file."""
  path = os.fspath(path)
  with open(path, "rb") as f:
    size = os.fstat(f.fileno()).st_size
    if size < 24: raise _corrupt(path, f"not a GGUF file: {size} bytes is shorter than the GGUF header")
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
  r = _Reader(mm, path)
  if r.take(4) != b"GGUF": raise _corrupt(path, "not a GGUF file (bad magic)")
  version = r.unpack("<I")
  if version not in (2, 3):
    hint = " (a big-endian GGUF file? only little-endian ones are supported)" if struct.unpack(">I", struct.pack("<I", version))[0] in (2, 3) else ""
    raise _corrupt(path, f"unsupported GGUF version {version}{hint}")
  n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
  # a tensor info takes at least 24 bytes (name length, dim count, type, offset), a metadata entry at least 13
  if n_tensors * 24 + n_kv * 13 > size - r.pos: raise _corrupt(path, f"truncated GGUF file or corrupt header: {n_tensors} tensors and {n_kv} metadata entries cannot fit in {size} bytes")
  kv: dict[str, Any] = {}
  for _ in range(n_kv):
    key = r.string("a metadata key", strict=True)
    if key in kv: raise _corrupt(path, f"corrupt GGUF file: the metadata key {key!r} appears twice")
    kv[key] = r.value(r.unpack("<I"), key)
  infos = []
  for _ in range(n_tensors):
    name = r.string("a tensor name", strict=True)
    nd = r.unpack("<I")
    if nd > 8: raise _corrupt(path, f"corrupt GGUF tensor info for {name!r}: {nd} dims")
    dims = [r.unpack("<Q") for _ in range(nd)]
    infos.append((name, tuple(reversed(dims)), r.unpack("<I"), r.unpack("<Q")))
  align = kv.get("general.alignment", 32)
  if not _is_int(align) or align <= 0 or align & (align - 1):
    raise _corrupt(path, f"corrupt GGUF file: general.alignment is {_short(align)}, not a power of two")
  start = r.pos + (-r.pos % align)
  names = [i[0] for i in infos]
  if len(set(names)) != len(names): raise _corrupt(path, f"corrupt GGUF file: the tensor name {next(n for n in names if names.count(n) > 1)!r} appears twice")
  spans = []
  for name, shape, gt, off in infos:
    if gt not in GGML_TYPES: raise _corrupt(path, f"tensor {name!r} has ggml type {gt}, which gguf_load does not support (supported: {', '.join(v[0] for v in GGML_TYPES.values())})")
    tname, bs, nbytes = GGML_TYPES[gt]
    if shape and shape[-1] % bs: raise _corrupt(path, f"tensor {name!r}: rows of {shape[-1]} elements are not a whole number of {tname} blocks of {bs}")
    if prod(shape) % bs: raise _corrupt(path, f"tensor {name!r}: {prod(shape)} elements is not a whole number of {tname} blocks of {bs}")
    if off % align: raise _corrupt(path, f"corrupt GGUF file: tensor {name!r} starts at data offset {off}, not a multiple of the alignment {align}")
    b, e = start + off, start + off + prod(shape) // bs * nbytes
    if e > size: raise _corrupt(path, f"truncated GGUF file: tensor {name!r} ends at byte {e}, the file has {size}")
    spans.append((b, e, name))
  _check_no_overlap(path, spans, "GGUF")
  tensors: dict[str, Tensor] = {}
  file, device = Tensor(pathlib.Path(path)), _compute_device(device)   # the file on DISK: the tensors are views of it
  for (name, shape, gt, off), (b, e, _) in zip(infos, spans):
    tname, n = GGML_TYPES[gt][0], prod(shape)
    if n == 0 or GGML_TYPES[gt][1] == 1: tensors[name] = _file_view(file, b, e, _GGML_FLOATS.get(tname, dtypes.float32), shape, device)
    else: tensors[name] = ggml_dequantize(file[b:e].to(device or Device.DEFAULT), gt, n).reshape(shape)   # decoded on a compute device
  return kv, tensors
