"""tinygrad-0.14 runtime names: GlobalCounters.mem_used, Device[dev].synchronize(), Tensor.from_blob over a numpy array's
memory (compared with numpy: the values, and writes either way)."""
from __future__ import annotations
import ctypes, gc, mmap, sys
import numpy as np
import pytest
from petagrad import Tensor, Device, GlobalCounters, dtypes
from petagrad.device import Buffer, DeviceSpec, HostAllocator

# ---------------------------------------------------------------------- GlobalCounters.mem_used

def test_mem_used_moves_with_allocation_and_free(device):
  gc.collect()
  m0, d0 = GlobalCounters.mem_used, GlobalCounters.mem_used_per_device[device]
  t = Tensor.ones(256, 4).contiguous().realize()
  assert GlobalCounters.mem_used - m0 == 256 * 4 * 4 == GlobalCounters.mem_used_per_device[device] - d0
  GlobalCounters.reset()   # not reset, as in tinygrad
  assert GlobalCounters.mem_used - m0 == 4096
  u = Tensor.zeros(10, dtype=dtypes.float64).contiguous().realize()
  assert GlobalCounters.mem_used - m0 == 4096 + 80
  del t
  gc.collect()
  assert GlobalCounters.mem_used - m0 == 80
  del u
  gc.collect()
  assert GlobalCounters.mem_used == m0 and GlobalCounters.mem_used_per_device[device] == d0

def test_mem_used_counts_a_buffer_once_and_not_before_it_has_memory():
  gc.collect()
  m0 = GlobalCounters.mem_used
  b = Buffer("CPU", 100, dtypes.int32)
  assert GlobalCounters.mem_used == m0
  b.ensure_allocated(); b.ensure_allocated()
  assert GlobalCounters.mem_used == m0 + 400
  del b
  assert GlobalCounters.mem_used == m0

# ---------------------------------------------------------------------- Device[dev].synchronize()

@pytest.mark.parametrize("name", ["CPU", "PYTHON", "NULL"])
def test_synchronize_is_there_on_every_device(name):
  dev = Device[name]
  assert isinstance(dev, DeviceSpec) and dev.device == dev.name == name
  assert dev.synchronize() is None   # synchronous devices: nothing to wait for

def test_synchronize_default_device_after_work(device):
  t = (Tensor.rand(64, 64) @ Tensor.rand(64, 64)).realize()
  Device[Device.DEFAULT].synchronize()
  Device.default.synchronize()
  assert Device.default is Device[Device.DEFAULT] and t.shape == (64, 64)

def test_synchronize_waits_where_a_device_queues_work():
  calls = []
  cpu = Device["CPU"]
  spec = DeviceSpec("CPU", cpu.allocator, cpu.compiler, cpu.program, cpu.renderer, sync=lambda: calls.append(1))
  spec.synchronize()
  assert calls == [1]

# ---------------------------------------------------------------------- Tensor.from_blob

@pytest.fixture
def host_device(device):
  """The test device where its buffers are host memory (from_blob's memory); elsewhere from_blob's clear error."""
  if not isinstance(Device[device].allocator, HostAllocator):
    with pytest.raises(ValueError, match="cannot use memory at a host address"): Tensor.from_blob(np.zeros(2).ctypes.data, (2,))
    pytest.skip(f"{device} keeps its buffers in device memory")
  return device

@pytest.mark.parametrize("np_dtype, shape", [(np.float32, (2, 3)), (np.int32, (7,)), (np.float64, (2, 2, 2)), (np.uint8, (5, 1)),
                                             (np.int64, ()), (np.float16, (4,))])
def test_from_blob_values_match_numpy(host_device, np_dtype, shape):
  device = host_device
  a = (np.arange(int(np.prod(shape))) * 3 - 4).astype(np_dtype).reshape(shape)
  t = Tensor.from_blob(a.ctypes.data, shape, dtype=a.dtype.name)
  assert t.shape == a.shape and t.dtype.name == a.dtype.name and t.device == device
  np.testing.assert_array_equal(t.numpy(), a)
  np.testing.assert_array_equal((t * 2 + 1).numpy(), a * 2 + 1)

def test_from_blob_sees_writes_through_numpy_and_writes_back(host_device):
  a = np.arange(6, dtype=np.float32)
  t = Tensor.from_blob(a.ctypes.data, (2, 3), dtype=dtypes.float32)
  assert t.tolist() == [[0, 1, 2], [3, 4, 5]]
  a[1] = 10.0                        # as in tinygrad: the tensor is the memory, read when a kernel or a read runs
  assert t.tolist() == [[0, 10, 2], [3, 4, 5]] and (t.sum() + 0).item() == 24.0
  t.assign(t * 2).realize()          # and an in-place write goes to that memory
  np.testing.assert_array_equal(a, [0, 20, 4, 6, 8, 10])
  t[0, 0] = 7.0
  assert a[0] == 7.0

def test_from_blob_memory_is_not_owned():
  gc.collect()
  m0 = GlobalCounters.mem_used
  a = np.ones(1 << 16, dtype=np.float32)   # big enough for the allocator's pool
  t = Tensor.from_blob(a.ctypes.data, a.shape, dtype="float32")
  buf = t.uop.base.buffer
  assert buf.external is not None and buf.is_allocated and GlobalCounters.mem_used == m0   # not counted
  assert t.sum().item() == float(1 << 16)
  m1 = GlobalCounters.mem_used
  del t, buf
  gc.collect()
  assert GlobalCounters.mem_used == m1 and a.sum() == float(1 << 16)   # not freed, not pooled, not counted
  b = Tensor.empty(1 << 16).contiguous().realize()   # a new buffer of that size does not get the array's memory
  assert b.uop.base.buffer.raw is not None and ctypes.addressof(b.uop.base.buffer.raw) != a.ctypes.data

def test_from_blob_default_dtype_and_jit_input():
  from petagrad import TinyJit
  a = np.array([1.0, 2.0, 3.0], dtype=np.float32)
  t = Tensor.from_blob(a.ctypes.data, (3,))
  assert t.dtype == dtypes.default_float
  f = TinyJit(lambda x: (x * 2).realize())
  for i in range(4):
    a[:] = i
    assert f(t).tolist() == [2.0 * i] * 3

def test_from_blob_errors():
  a = np.zeros(4, dtype=np.float32)
  with pytest.raises(ValueError, match="NULL"): Tensor.from_blob(a.ctypes.data, (4,), device="NULL")
  with pytest.raises(TypeError, match="from_blob"): Tensor.from_blob(float(a.ctypes.data), (4,))
  with pytest.raises(TypeError, match="from_blob"): Tensor.from_blob(a, (4,))
  with pytest.raises(ValueError, match="from_blob"): Tensor.from_blob(a.ctypes.data, (-1, 4))
  with pytest.raises(ValueError, match="from_blob"): Tensor.from_blob(0, (4,))
  with pytest.raises(ValueError, match="no memory is mapped"): Tensor.from_blob(8, (4,))   # not a segfault
  b = Buffer("CPU", 4, dtypes.float32).ensure_allocated()
  with pytest.raises(ValueError, match="already"): b.use_external(a.ctypes.data)

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore / MAP_FIXED_NOREPLACE are Linux's")
def test_from_blob_memory_between_unmapped_pages(host_device):
  # kernels may read (never write) a vector's width either side of a buffer: over memory whose neighbour pages are
  # not mapped, those reads must not fault
  from petagrad.device import PAGE, _libc, _mapped
  libc = _libc()
  libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
  libc.mmap.restype = ctypes.c_void_p
  libc.munmap.argtypes, libc.munmap.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_int
  base = libc.mmap(None, 3 * PAGE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
  assert base not in (None, ctypes.c_void_p(-1).value)
  mid = base + PAGE
  libc.munmap(base, PAGE); libc.munmap(base + 2 * PAGE, PAGE)
  try:
    n = PAGE // 4
    a = np.frombuffer((ctypes.c_float * n).from_address(mid), dtype=np.float32)
    a[:] = np.arange(n, dtype=np.float32)
    t = Tensor.from_blob(mid, (n,), dtype="float32")
    assert _mapped(base) and _mapped(base + 2 * PAGE)
    np.testing.assert_array_equal((t[1:] - t[:-1]).numpy(), np.ones(n - 1, dtype=np.float32))
    assert t.sum().item() == float(n * (n - 1) // 2)
    del t
    gc.collect()
  finally: libc.munmap(mid, PAGE)
