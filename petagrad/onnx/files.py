"""Tensors read lazily from a model's files: the .onnx file itself and its external data files.

A model loaded from its path keeps its initializers where they are. Each is a slice of its file's DISK tensor
(docs/disk.md), bitcast and copied to the model's device lazily: loading reads none of their bytes, and the first
run reads each tensor's byte range once (OnnxModel realizes them then). Where the bytes are:

* external data (`location`, `offset`, `length` in the TensorProto, the ONNX convention): a file in the model's folder;
* inside the .onnx file (a TensorProto's `raw_data`): found by walking the protobuf wire format down to
  ModelProto.graph (field 7) -> GraphProto.initializer (5) -> TensorProto.name (8) and raw_data (9).
"""
from __future__ import annotations
import mmap, os, pathlib
from dataclasses import dataclass, field
from typing import Any, Iterator
from petagrad.tensor import Tensor
from petagrad.helpers import prod
from petagrad.onnx import types

def _varint(b: Any, i: int) -> tuple[int, int]:
  """The varint at b[i] and the position after it."""
  value = shift = 0
  while True:
    c = b[i]
    i += 1
    value |= (c & 0x7F) << shift
    if c < 0x80: return value, i
    shift += 7
    if shift > 63: raise ValueError("varint longer than 10 bytes")

def _fields(b: Any, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
  """(field number, wire type, start, end of its value) of each field of the message at b[start:end]."""
  i = start
  while i < end:
    key, i = _varint(b, i)
    num, wire = key >> 3, key & 7
    if wire == 0: j = _varint(b, i)[1]
    elif wire == 1: j = i + 8
    elif wire == 2:
      n, i = _varint(b, i)
      j = i + n
    elif wire == 5: j = i + 4
    else: raise ValueError(f"wire type {wire} (groups) in an ONNX file")
    if j > end: raise ValueError("a field runs past its message")
    yield num, wire, i, j
    i = j

def raw_data_offsets(path: str) -> dict[str, tuple[int, int]]:
  """{name: (byte offset, length)} of the raw_data of each initializer of the main graph in the .onnx file at path
  (a name that occurs twice is left out); {} for a file this walk cannot read."""
  out: dict[str, tuple[int, int]] = {}
  twice: set[str] = set()
  try:
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as b:
      for num, wire, s, e in _fields(b, 0, len(b)):
        if (num, wire) != (7, 2): continue
        for gnum, gwire, gs, ge in _fields(b, s, e):
          if (gnum, gwire) != (5, 2): continue
          name, raw = None, None
          for tnum, twire, ts, te in _fields(b, gs, ge):
            if (tnum, twire) == (8, 2): name = bytes(b[ts:te]).decode("utf-8", "replace")
            elif (tnum, twire) == (9, 2): raw = (ts, te - ts)
          if name is None or raw is None: continue
          if name in out or name in twice: twice.add(name)
          else: out[name] = raw
  except (OSError, ValueError, IndexError):   # (an empty or odd file: its tensors are converted at load instead)
    return {}
  return {k: v for k, v in out.items() if k not in twice}

@dataclass
class ModelFiles:
  """A model loaded from `path`: where its tensors' bytes are, the DISK tensors of those files, and the lazy copies
  made from them (OnnxModel realizes `made` at the first call)."""
  path: str
  files: dict[str, Tensor] = field(default_factory=dict)
  made: list[Tensor] = field(default_factory=list)
  _in_file: dict[str, tuple[int, int]] | None = None
  @property
  def folder(self) -> str: return os.path.dirname(self.path)

  def in_file(self, t: Any, device: str) -> Tensor | None:
    """Initializer t of the main graph as a lazy copy of its raw_data in the .onnx file, or None where that is not one
    byte range of a native type (external data, float8, a scalar: converted from the proto instead)."""
    if t.data_type not in types.NATIVE or not t.dims or t.data_location == t.EXTERNAL: return None
    if self._in_file is None: self._in_file = raw_data_offsets(self.path)
    if (where := self._in_file.get(t.name)) is None: return None
    dt, dims = types.NATIVE[t.data_type], tuple(int(d) for d in t.dims)
    if where[1] != prod(dims) * dt.itemsize or where[1] == 0: return None
    return self._view(self.path, where[0], dt, dims, device)

  def external(self, t: Any, device: str) -> Tensor:
    """TensorProto t, whose bytes are in an external data file, as a lazy copy of them (checked: the file is in the
    model's folder and holds the range)."""
    info = {e.key: e.value for e in t.external_data}
    loc = info.get("location", "")
    # (only files inside the model's folder: a model file never makes petagrad read elsewhere)
    if not loc or os.path.isabs(loc) or os.path.normpath(loc).split(os.sep)[0] == os.pardir:
      raise ValueError(f"tensor {t.name!r}: its external data location {loc!r} must be a relative path inside the model's folder")
    path = os.path.join(self.folder, loc)
    if not os.path.isfile(path): raise FileNotFoundError(f"tensor {t.name!r}: its external data file {path!r} does not exist")
    try: offset, length = int(info.get("offset", 0)), (int(info["length"]) if "length" in info else None)
    except ValueError: raise ValueError(f"tensor {t.name!r}: external data offset and length must be integers, got {info}") from None
    dims = tuple(int(d) for d in t.dims)
    if t.data_type not in types.NATIVE:   # an emulated type (float8, int4, ...): its packed bytes through onnx's reader
      from onnx import external_data_helper, numpy_helper
      c = type(t)()
      c.CopyFrom(t)
      external_data_helper.load_external_data_for_tensor(c, self.folder)
      return types.from_numpy(numpy_helper.to_array(c), t.data_type, device)
    dt = types.NATIVE[t.data_type]
    nbytes = prod(dims) * dt.itemsize
    if length is not None and length != nbytes:
      raise ValueError(f"tensor {t.name!r}: its external data is {length} bytes, but {dims} of {dt.name} needs {nbytes}")
    size = os.path.getsize(path)
    if offset < 0 or offset + nbytes > size:
      raise ValueError(f"tensor {t.name!r}: its bytes {offset}..{offset + nbytes} are not inside {path!r} ({size} bytes)")
    if nbytes == 0: return Tensor.empty(*dims, dtype=dt, device=device)
    return self._view(path, offset, dt, dims, device)

  def _view(self, path: str, offset: int, dt: Any, dims: tuple[int, ...], device: str) -> Tensor:
    if path not in self.files: self.files[path] = Tensor(pathlib.Path(path))
    out = self.files[path][offset:offset + prod(dims) * dt.itemsize].bitcast(dt).reshape(dims).to(device)
    self.made.append(out)
    return out
