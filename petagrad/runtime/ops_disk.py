"""DISK device: tensors whose memory is a file, memory-mapped ("DISK:/path/to/file").

A DISK buffer is the file's first nbytes: allocating one opens the file (created, or grown with zeros when it is
shorter) and maps it; a view of it (Buffer.view) is a byte range of the same mapping. DISK runs no kernels: what a
DISK tensor supports is views that are byte ranges (slices, reshapes, bitcasts) and copies, in and out, of exactly
the bytes a view covers. Every other op raises at the call (petagrad/tensor.py); docs/disk.md is the user's guide.

>>> import os, tempfile
>>> from petagrad import Tensor
>>> path = os.path.join(tempfile.mkdtemp(), "x.bin")
>>> t = Tensor.empty(4, dtype="int32", device=f"DISK:{path}")
>>> _ = t.assign(Tensor([1, 2, 3, 4], dtype="int32")); os.path.getsize(path)
16
>>> t[1:3].to("CPU").tolist()
[2, 3]
"""
from __future__ import annotations
import mmap, os
from typing import Any, BinaryIO
from petagrad.device import Allocator, DeviceSpec, Program

class DiskMapping:
  """nbytes of a mapped file from byte offset: what a DISK buffer's raw is. Views share the file and the mapping."""
  def __init__(self, path: str, f: BinaryIO | None, mm: mmap.mmap | None, offset: int, nbytes: int, writable: bool):
    self.path, self.f, self.mm, self.offset, self.nbytes, self.writable = path, f, mm, offset, nbytes, writable
  def __repr__(self) -> str: return f"<DiskMapping DISK:{self.path} bytes {self.offset}..{self.offset + self.nbytes}>"
  def span(self, nbytes: int) -> memoryview:
    """A memoryview of the first nbytes (the caller releases it). Checks that the file still holds them: reading a
    mapped page past the end of a file that shrank kills the process (SIGBUS) instead of raising."""
    if nbytes == 0 or self.mm is None or self.f is None: return memoryview(b"")
    if (have := os.fstat(self.f.fileno()).st_size) < self.offset + nbytes:
      raise RuntimeError(f"DISK:{self.path}: the file has {have} bytes now, bytes {self.offset}..{self.offset + nbytes} were asked "
                         "(it was truncated after it was opened)")
    return memoryview(self.mm)[self.offset:self.offset + nbytes]

def _open(path: str, nbytes: int) -> tuple[BinaryIO, bool]:
  """The file at path opened for reading and, where allowed, writing (created when missing), at least nbytes long."""
  where = f"DISK:{path}"
  if not path: raise ValueError("DISK needs a file: DISK:/path/to/file")
  if os.path.isdir(path): raise IsADirectoryError(f"{where}: is a directory, not a file")
  if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
    raise FileNotFoundError(f"{where}: the folder {os.path.dirname(os.path.abspath(path))!r} does not exist")
  try: f, writable = open(path, "r+b" if os.path.exists(path) else "w+b"), True
  except OSError as e:
    if not os.path.exists(path): raise OSError(e.errno, f"{where}: cannot create the file ({e.strerror})") from None
    try: f, writable = open(path, "rb"), False   # a read-only file (or file system): reads work, writes raise
    except OSError as e2: raise OSError(e2.errno, f"{where}: cannot open the file ({e2.strerror})") from None
  if (size := os.fstat(f.fileno()).st_size) < nbytes:
    if not writable:
      f.close()
      raise PermissionError(f"{where}: the read-only file has {size} bytes, a tensor of {nbytes} bytes needs it grown")
    f.truncate(nbytes)   # (a sparse file: the new bytes read as zeros and take no space until written)
  return f, writable

class DiskAllocator(Allocator):
  """Buffers of one file: each allocation maps its first nbytes (shared: writes go to the file)."""
  counted = False   # a mapped file is not device memory: GlobalCounters.mem_used leaves it out
  def __init__(self, path: str): self.path = path
  def alloc(self, nbytes: int) -> DiskMapping:
    f, writable = _open(self.path, nbytes)
    if nbytes == 0: return DiskMapping(self.path, f, None, 0, 0, writable)
    mm = mmap.mmap(f.fileno(), nbytes, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
    return DiskMapping(self.path, f, mm, 0, nbytes, writable)
  def offset(self, raw: DiskMapping, offset: int, nbytes: int) -> DiskMapping:
    return DiskMapping(raw.path, raw.f, raw.mm, raw.offset + offset, nbytes, raw.writable)
  def copyin(self, dest: DiskMapping, src: memoryview) -> None:
    if not dest.writable: raise PermissionError(f"DISK:{dest.path}: the file is read-only, it cannot be written")
    with dest.span(src.nbytes) as mv: mv[:] = src
  def copyout(self, dest: memoryview, src: DiskMapping) -> None:
    with src.span(dest.nbytes) as mv: dest[:] = mv

class _NoKernels:
  """DISK's compiler and renderer: there are none, and any use says so (the Tensor layer refuses kernels on DISK at
  the op already; this is the last line)."""
  def __init__(self, device: str): self.device = device
  def __getattr__(self, name: str) -> Any:
    raise RuntimeError(f"{self.device} runs no kernels (a DISK tensor is a file's bytes): copy it to a compute device first, "
                       "e.g. t.to('CPU')")

class DiskProgram(Program):
  def __call__(self, *bufs: Any) -> None: raise RuntimeError("DISK runs no kernels")

def make_device(name: str) -> DeviceSpec:
  path = name.partition(":")[2]
  return DeviceSpec(name, DiskAllocator(path), _NoKernels(name), DiskProgram, _NoKernels(name))   # type: ignore[arg-type]
