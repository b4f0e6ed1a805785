"""Devices: the registry, Buffer, and the Allocator / Compiler / Program base classes.

A device is an allocator, a compiler, a program launcher and a renderer (runtime/ops_<name>.py).

>>> from petagrad.device import Device
>>> Device.DEFAULT in ("CPU", "PYTHON", "NULL") or Device.DEFAULT
True
"""
from __future__ import annotations
import importlib, ctypes, functools, mmap, sys
from dataclasses import dataclass
from typing import Any, Callable
from petagrad.dtype import DType
from petagrad.helpers import DEV, SANITIZE, cache_dir, content_hash, read_cached, write_cached, GlobalCounters

class CompileError(RuntimeError):
  """A kernel failed to compile; the message names the kernel and shows its source."""

class OutOfBoundsError(IndexError):
  """A kernel read or wrote outside one of its buffers (found by SANITIZE=1 or the PYTHON device's checks); the message
  names the kernel, the buffer (parameter position, dtype, element count) and the index."""

def out_of_bounds(kernel: str, err: list[int], dtype_names: list[str] | None = None) -> OutOfBoundsError:
  """The error for a bounds-checked kernel's record of its first bad access (SANITIZE=1): [hit, parameter, store?,
  index, lanes, element count]."""
  _, p, store, i, lanes, size = err
  what = f"{'a store to' if store else 'a load from'} buffer {p} (parameter {p}: {f'{dtype_names[p]}, ' if dtype_names else ''}{size} elements)"
  where = f"index {i}" + (f" ({lanes} lanes: {i}..{i + lanes - 1})" if lanes > 1 else "")
  return OutOfBoundsError(f"kernel {kernel}: {what} at {where}, out of bounds [0, {size}); the access was skipped")

def device_index(name: str, count: int, what: str, none: str = "none") -> int:
  """i of the device string "KIND:i" ("KIND" alone is 0) of a kind with `count` devices here; RuntimeError listing
  them (`what`: how they are called) when it names none of them."""
  kind, _, rest = name.partition(":")
  idx = int(rest) if rest.isdigit() else -1 if rest else 0
  if not 0 <= idx < count:
    have = ", ".join([kind] + [f"{kind}:{i}" for i in range(1, count)]) if count else none
    raise RuntimeError(f"device {name} does not exist: {what} here: {have}")
  return idx

def host_memory(mv: memoryview) -> Any:
  """mv's bytes as a ctypes object that a C API takes as a pointer to them (a copy where mv is read-only)."""
  return ctypes.c_char_p(mv.tobytes()) if mv.readonly else (ctypes.c_char * mv.nbytes).from_buffer(mv)

def checked_launch(kernel: str, allocator: Allocator, launch: Callable[[list[Any]], None], bufs: list[Any], sizes: list[int] | None) -> None:
  """A bounds-checked launch (SANITIZE=1) on a device with memory of its own: the buffers' element counts and a zeroed
  error record go in as two more buffers; the record is read back after the kernel (which waits for it) and a bad
  access (which the kernel skipped) raises OutOfBoundsError."""
  if sizes is None or len(sizes) != len(bufs): raise TypeError(f"kernel {kernel} built with SANITIZE=1 needs the buffers' element counts")
  counts = (ctypes.c_int64 * max(len(sizes), 1))(*sizes)
  n = allocator.alloc(ctypes.sizeof(counts))
  try:
    err = allocator.alloc(48)
    try:
      allocator.copyin(n, memoryview(counts).cast("B"))
      allocator.copyin(err, memoryview(bytes(48)))
      launch([*bufs, n, err])
      rec = (ctypes.c_int64 * 6)()
      allocator.copyout(memoryview(rec).cast("B"), err)
    finally: allocator.free(err, 48)
  finally: allocator.free(n, ctypes.sizeof(counts))
  if rec[0]: raise out_of_bounds(kernel, list(rec))

class Allocator:
  """Device memory. Host devices return objects exposing the buffer protocol."""
  counted = True   # its buffers count in GlobalCounters.mem_used (DISK's, mapped files, do not)
  def alloc(self, nbytes: int) -> Any: raise NotImplementedError
  def offset(self, raw: Any, offset: int, nbytes: int) -> Any:
    """The nbytes of raw from byte offset, as a raw buffer of this device over the same memory (Buffer.view)."""
    raise NotImplementedError(f"{type(self).__name__} cannot view part of a buffer")
  def copyin(self, dest: Any, src: memoryview) -> None: raise NotImplementedError
  def copyout(self, dest: memoryview, src: Any) -> None: raise NotImplementedError
  def free(self, raw: Any, nbytes: int) -> None: """Memory a Buffer no longer uses (default: let it go)."""
  def transfer(self, dest: Any, src: Any, nbytes: int, source: Allocator) -> bool:
    """Copy nbytes from src (memory of `source`) to dest (this allocator's) directly, if this allocator knows how: True
    when it did (default: False, and the copy goes through the host)."""
    return False
  def wrap(self, ptr: int, nbytes: int) -> tuple[Any, Any]:
    """nbytes of memory someone else owns at address ptr, as this allocator's raw buffer, and an object to keep alive
    with it (or None). Only devices whose kernels read host memory can (Tensor.from_blob)."""
    raise NotImplementedError(f"{type(self).__name__} cannot use memory at a host address")

POOL_BYTES = 512 << 20   # freed big host buffers kept for reuse, at most
HUGEPAGE_BYTES = 2 << 20  # buffers at least this big ask for transparent huge pages
# bytes of allocated memory before and after every host buffer's data: vectorized kernel code may read (never write) a
# whole vector of which some lanes fall outside the data, discarding those lanes (GCC 12 for AVX-512 turns a masked load
# whose mask it knows at compile time into a full-width load and a blend); one 512-bit vector on each side keeps such
# reads inside the allocation
MARGIN = 64
PAGE = mmap.PAGESIZE

class HostAllocator(Allocator):
  """Memory in this process, as ctypes byte arrays (so C kernels get plain pointers).

  Big buffers are anonymous mmaps; freed ones are kept (up to POOL_BYTES) and handed out again for the same
  size: a fresh mapping costs a page fault per 4 KiB page on first touch (a 4 MiB output: ~1-3 ms in a VM).
  Memory from the pool is not zeroed, like any allocator's; every kernel writes all of its output.

  Every buffer's data has MARGIN allocated bytes before and after it (reads of discarded vector lanes stay inside).
  With SANITIZE=1 every buffer is placed so that its margin ends exactly where a PROT_NONE page begins (guarded), so an
  access further past its end from any code faults at once (the process dies; faulthandler prints the Python stack:
  docs/safety.md)."""
  def __init__(self):
    self._pool: dict[int, list[Any]] = {}
    self._pooled = 0
  def alloc(self, nbytes: int) -> Any:
    if SANITIZE: return guarded(nbytes)
    if nbytes < (1 << 16): return _inner((ctypes.c_uint8 * (max(nbytes, 1) + 2 * MARGIN))(), nbytes)
    if (free := self._pool.get(nbytes)):
      self._pooled -= nbytes
      return free.pop()
    # anonymous memory, zeroed lazily by the OS as the kernel's threads first touch it
    m = mmap.mmap(-1, nbytes + 2 * MARGIN, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)   # private: no huge pages when shared
    # 2 MiB pages where the kernel offers them on request (transparent hugepages in "madvise" mode): streaming a
    # big buffer through 4 KiB pages is limited by TLB misses (a 64 MiB row sum: 29 -> 59 GB/s measured here)
    if nbytes >= HUGEPAGE_BYTES and hasattr(mmap, "MADV_HUGEPAGE"):
      try: m.madvise(mmap.MADV_HUGEPAGE)
      except OSError: pass
    return _inner(m, nbytes)
  def free(self, raw: Any, nbytes: int) -> None:
    if nbytes < (1 << 16) or self._pooled + nbytes > POOL_BYTES or SANITIZE: return
    self._pool.setdefault(nbytes, []).append(raw)
    self._pooled += nbytes
  def sync(self) -> None:
    """Wait until the host may read and write this memory (a device that runs its launches on a thread of its own:
    until they ran)."""
  def copyin(self, dest: Any, src: memoryview) -> None:
    self.sync()
    memoryview(dest).cast('B')[:src.nbytes] = src
  def copyout(self, dest: memoryview, src: Any) -> None:
    self.sync()
    dest[:] = memoryview(src).cast('B')[:dest.nbytes]
  def transfer(self, dest: Any, src: Any, nbytes: int, source: Allocator) -> bool:
    if not isinstance(source, HostAllocator): return False
    source.sync(); self.sync()
    ctypes.memmove(dest, src, nbytes)   # (host to host: one copy, not two through a bytes object)
    return True
  def wrap(self, ptr: int, nbytes: int) -> tuple[Any, Any]:
    """A ctypes byte array over ptr's nbytes (kernels get ptr itself). Memory that is not mapped at all raises
    ValueError (Linux: mincore tells). Kernels may read MARGIN bytes either side (see MARGIN): where such a byte lies in
    a page nothing maps, a read-only zero page is mapped there, kept as long as the array (the object to keep alive)."""
    if not isinstance(ptr, int) or ptr <= 0: raise ValueError(f"expected a host address (a positive int), got {ptr!r}")
    first = ptr // PAGE * PAGE
    if not _mapped(first, ptr + max(nbytes, 1) - first):
      raise ValueError(f"no memory is mapped at {ptr:#x}..{ptr + max(nbytes, 1):#x} ({nbytes} bytes)")
    keep = [p for p in dict.fromkeys(((ptr - MARGIN) // PAGE * PAGE, (ptr + nbytes + MARGIN - 1) // PAGE * PAGE)) if p > 0 and not _mapped(p)]
    return (ctypes.c_uint8 * max(nbytes, 1)).from_address(ptr), [_ReadablePage(p) for p in keep] or None

@functools.cache
def _libc() -> Any:
  return ctypes.CDLL(None, use_errno=True)

def _mapped(page: int, nbytes: int = PAGE) -> bool:
  """Is every page of the nbytes from this page-aligned address mapped? Assumed so where mincore cannot tell (not
  Linux); the page at address 0 never is."""
  if page <= 0: return False
  if not sys.platform.startswith("linux"): return True
  f = _libc().mincore
  f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p], ctypes.c_int
  return f(page, nbytes, (ctypes.c_ubyte * (-(-nbytes // PAGE)))()) == 0 or ctypes.get_errno() != 12   # ENOMEM: not mapped

class _ReadablePage:
  """A read-only anonymous page mapped at a free page-aligned address (MAP_FIXED_NOREPLACE, never over a mapping);
  unmapped with this object."""
  MAP_FIXED_NOREPLACE = 0x100000
  def __init__(self, addr: int):
    libc = _libc()
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mmap.restype = ctypes.c_void_p
    libc.munmap.argtypes, libc.munmap.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | self.MAP_FIXED_NOREPLACE
    got = libc.mmap(addr, PAGE, mmap.PROT_READ, flags, -1, 0)
    self.addr = got if got not in (None, ctypes.c_void_p(-1).value) else None
    if self.addr is not None and self.addr != addr:   # an old kernel took the address as a hint: not where it is needed
      libc.munmap(self.addr, PAGE); self.addr = None
    if self.addr is None and not _mapped(addr):
      raise OSError(ctypes.get_errno(), f"cannot map a readable page at {addr:#x}, next to the memory given")
  def __del__(self):
    if self.addr is not None: _libc().munmap(self.addr, PAGE)

def _inner(mem: Any, nbytes: int, offset: int = MARGIN) -> Any:
  """nbytes (at least 1) of mem from offset, as a ctypes byte array that keeps mem alive."""
  return (ctypes.c_uint8 * max(nbytes, 1)).from_buffer(mem, offset)

@functools.cache
def _mprotect():
  f = ctypes.CDLL(None, use_errno=True).mprotect
  f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
  return f

def guarded(nbytes: int) -> Any:
  """nbytes (at least 1) in an anonymous mapping, with MARGIN bytes before and after, the second ending exactly at a
  PROT_NONE page."""
  n = max(nbytes, 1)
  data = -(-(n + 2 * MARGIN) // PAGE) * PAGE
  m = mmap.mmap(-1, data + PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
  base = ctypes.addressof(ctypes.c_char.from_buffer(m))
  if _mprotect()(base + data, PAGE, 0) != 0: raise OSError(ctypes.get_errno(), "mprotect of a guard page failed")
  return _inner(m, n, data - MARGIN - n)   # keeps the mapping alive; unmapped with the array

class Compiler:
  """Turns rendered source into a loadable artifact, cached in memory and on disk."""
  cache_key: str = "none"       # changes when the compiler or its flags change
  def compile(self, src: str, name: str) -> bytes: return src.encode()
  def compile_cached(self, src: str, name: str) -> bytes:
    key = content_hash(type(self).__name__, self.cache_key, src)
    if (lib := _mem_cache.get(key)) is not None: return lib
    path = cache_dir() / "compile" / f"{key}.bin"
    if (lib := read_cached(path)) is None:
      GlobalCounters.compile_count += 1
      lib = self.compile(src, name)
      write_cached(path, lib)
    _mem_cache[key] = lib
    return lib

_mem_cache: dict[str, bytes] = {}

class Program:
  """A compiled kernel, called with raw buffers (output first)."""
  uses_workers = False   # runs on worker threads that sleep when idle (see wake)
  def __init__(self, name: str, lib: bytes, meta: Any = None): self.name, self.lib, self.meta = name, lib, meta
  def __call__(self, *bufs: Any) -> None: raise NotImplementedError
  def wake(self) -> None:
    """This program is launched soon: wake the workers it runs on now, so the launch does not wait for them."""

@dataclass
class DeviceSpec:
  """What a device is made of: one of each part."""
  name: str
  allocator: Allocator
  compiler: Compiler
  program: Callable[..., Program]   # (name, lib, meta) -> a Program
  renderer: Any   # petagrad.renderer.Renderer
  sync: Callable[[], None] | None = None   # waits for the device's queued work (None: a launch returns when its kernel is done)
  # (programs, each one's buffers) -> a runner that launches them back to back in one call (a JIT replay), or None
  # where it cannot; None: the device has none (each launch is a call of its own)
  launch_list: Callable[[list[Program], list[list[Any]]], Any] | None = None
  @property
  def device(self) -> str: return self.name   # tinygrad's Compiled.device
  def synchronize(self) -> None:
    """Wait until everything launched on this device has finished (tinygrad's `Device[dev].synchronize()`, for timing).
    CPU, PYTHON and NULL return from a launch when its kernel is done; CL and CUDA queue launches (a copy back to the
    host waits for them on its own).

    >>> Device[Device.DEFAULT].synchronize()
    """
    if self.sync is not None: self.sync()

# waits for the devices whose launches run on threads of their own (the CPU devices of a process with several:
# runtime/ops_cpu.py); the engine calls each at the end of every realize and JIT replay, so that a realize returns with
# its results written, as on one device
launch_waits: list[Callable[[], None]] = []

class _Device:
  """`Device["CPU"]` gives the device's parts, importing runtime/ops_cpu.py on first use.

  A device string is a kind, optionally with a colon and what follows it: "CPU", "CL:1" (the second OpenCL device),
  "NULL:CUDA" (render and compile for CUDA, run nothing), "DISK:/path/file". The kind is case-insensitive; what
  follows the colon keeps its case (a path)."""
  KNOWN = ("CPU", "PYTHON", "NULL", "CL", "CUDA", "HIP", "DISK", "RANK")
  @functools.cache
  def __getitem__(self, name: str) -> DeviceSpec:
    name = self.canonicalize(name)
    kind = name.split(":")[0]
    try: mod = importlib.import_module(f"petagrad.runtime.ops_{kind.lower()}")
    except ModuleNotFoundError as e:
      if e.name != f"petagrad.runtime.ops_{kind.lower()}": raise
      raise RuntimeError(f"device {name}: petagrad has no runtime for {kind} yet (NULL:{kind} renders and compiles for it without running)") from e
    return mod.make_device(name)
  def canonicalize(self, name):
    """The device's canonical name ("cpu:0" -> "CPU"); a tuple or list of names (a multi-device tensor's) -> a tuple of
    canonical names."""
    if isinstance(name, (tuple, list)):
      names = tuple(self.canonicalize(n) for n in name)
      if not names: raise RuntimeError("a tuple of devices needs at least one device")
      if len(set(names)) != len(names): raise RuntimeError(f"devices {names} name one device twice")
      return names
    if not isinstance(name, str): raise TypeError(f"device must be a string like 'CPU', got {name!r}")
    kind, sep, rest = name.partition(":")
    kind = kind.upper()
    if kind not in self.KNOWN: raise RuntimeError(f"unknown device {name!r}; known devices: {', '.join(self.KNOWN)}")
    if kind == "RANK":   # "RANK:1/cpu:0" -> "RANK:1/CPU": a device of MPI rank 1 (device/world.py)
      r, slash, inner = rest.partition("/")
      if not r.isdigit() or not slash: raise RuntimeError(f"device {name!r}: expected RANK:<rank>/<device>, e.g. RANK:1/CPU")
      return f"RANK:{int(r)}/{self.canonicalize(inner)}"
    if kind != "DISK": rest = rest.upper()
    return kind if not sep or (rest == "0" and kind != "DISK") else f"{kind}:{rest}"
  @property
  def DEFAULT(self) -> str: return self.canonicalize(str(DEV) or "CPU")
  @property
  def default(self) -> DeviceSpec:
    """The default device's parts: Device[Device.DEFAULT] (tinygrad's Device.default)."""
    return self[self.DEFAULT]
  @DEFAULT.setter
  def DEFAULT(self, name: str) -> None: DEV.value = self.canonicalize(name)

Device = _Device()

class Buffer:
  """`size` elements of `dtype` on `device`; memory is allocated on first use and freed with the object (or, after
  `use_external`, memory someone else owns, never freed here). Allocated memory counts in GlobalCounters.mem_used."""
  made = 0   # buffers created so far
  def __init__(self, device: str, size: int, dtype: DType, base: Buffer | None = None, offset: int = 0):
    self.device, self.size, self.dtype = device, size, dtype
    self._base, self.offset = base, offset   # a view (Buffer.view): the bytes from offset of base's memory
    # creation order: the JIT tells the buffers made during a call from older ones
    self.serial, Buffer.made = Buffer.made, Buffer.made + 1
    self.nbytes = size * dtype.itemsize
    self._raw: Any = None
    self.external: Any = None   # use_external: not None (True, or what keeps the memory around it readable)
    # side data of the tensor layer: in-place writes so far, and weak references to the tensors viewing it
    self.writes = 0
    self.views: dict[int, Any] = {}
    self.node: tuple[int, Any] | None = None   # (writes, weakly the BUFFER node of the contents after them: Tensor._renew)
    self.released = False   # release() gave its memory back and no kernel has written it since (checked with SANITIZE=1)
  def __del__(self):
    if self._raw is not None and self.external is None and self._base is None:
      try:
        if (allocator := Device[self.device].allocator).counted:
          GlobalCounters.mem_used -= self.nbytes
          GlobalCounters.mem_used_per_device[self.device] -= self.nbytes
        allocator.free(self._raw, self.nbytes)
      except Exception: pass   # interpreter shutdown: modules may already be gone
  @property
  def is_allocated(self) -> bool: return self._raw is not None
  @property
  def base(self) -> Buffer: return self._base if self._base is not None else self
  def view(self, offset: int, size: int, dtype: DType) -> Buffer:
    """size elements of dtype from byte offset of this buffer's memory, as a Buffer sharing it (no copy; the memory
    stays the base buffer's). The device's allocator must support it (Allocator.offset: DISK does)."""
    if offset < 0 or size < 0 or offset + size * dtype.itemsize > self.nbytes:
      raise ValueError(f"a view of {size} x {dtype.name} at byte {offset} does not fit in {self!r} ({self.nbytes} bytes)")
    return Buffer(self.device, size, dtype, self.base, self.offset + offset)
  def ensure_allocated(self) -> Buffer:
    if self._raw is None:
      allocator = Device[self.device].allocator
      if self._base is not None: self._raw = allocator.offset(self._base.raw, self.offset, self.nbytes); return self
      self._raw, self.released = allocator.alloc(self.nbytes), False
      if allocator.counted:
        GlobalCounters.mem_used += self.nbytes
        GlobalCounters.mem_used_per_device[self.device] += self.nbytes
        if GlobalCounters.mem_used > GlobalCounters.mem_peak: GlobalCounters.mem_peak = GlobalCounters.mem_used
    return self
  def release(self) -> None:
    """Give the memory back now, keeping the object: the next use allocates again (from the allocator's pool). The
    engine releases an intermediate buffer after the last kernel that reads it (engine/realize.py: `frees`)."""
    if self._raw is None or self.external is not None or self._base is not None: return
    allocator = Device[self.device].allocator
    if not allocator.counted: return   # (DISK: a mapped file, no memory to give back)
    self.released = True
    GlobalCounters.mem_used -= self.nbytes
    GlobalCounters.mem_used_per_device[self.device] -= self.nbytes
    allocator.free(self._raw, self.nbytes)
    self._raw = None
  def use_external(self, ptr: int) -> Buffer:
    """Make this (not yet allocated) buffer the nbytes at host address ptr, which someone else owns and keeps valid
    while the buffer lives (tinygrad's allocate(external_ptr=...)): kernels read and write that memory; it is never
    freed here, nor counted in GlobalCounters.mem_used. ValueError when the buffer already has memory or its device
    cannot use host memory."""
    if self._raw is not None or self._base is not None: raise ValueError(f"{self!r} already has memory")
    try: self._raw, keep = Device[self.device].allocator.wrap(ptr, self.nbytes)
    except NotImplementedError: raise ValueError(f"device {self.device} cannot use memory at a host address") from None
    self.external = keep if keep is not None else True
    return self
  @property
  def raw(self) -> Any: return self._raw if self._raw is not None else self.ensure_allocated()._raw
  def copyin(self, data: memoryview) -> Buffer:
    data = memoryview(data).cast('B') if memoryview(data).format != 'B' or memoryview(data).ndim != 1 else memoryview(data)
    if data.nbytes != self.nbytes: raise ValueError(f"copyin of {data.nbytes} bytes into a buffer of {self.nbytes} bytes")
    Device[self.device].allocator.copyin(self.raw, data)
    return self
  def copy_from(self, src: Buffer) -> Buffer:
    """Copy src's contents (same byte size, any device) into this buffer: directly where the devices allow it, else
    through the host."""
    if src.nbytes != self.nbytes: raise ValueError(f"copy of {src!r} into {self!r}: {src.nbytes} bytes into {self.nbytes}")
    if self.nbytes and not Device[self.device].allocator.transfer(self.raw, src.raw, self.nbytes, Device[src.device].allocator):
      self.copyin(memoryview(src.as_bytes()))
    return self
  def as_bytes(self) -> bytes:
    if SANITIZE and self.released: raise RuntimeError(f"reading {self!r}, whose memory was given back after its last reader (an early-free bug)")
    out = bytearray(self.nbytes)
    if self.nbytes: Device[self.device].allocator.copyout(memoryview(out), self.raw)
    return bytes(out)
  def __repr__(self) -> str: return f"<Buffer {self.device} {self.size} {self.dtype}>"
