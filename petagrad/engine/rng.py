"""The global random stream: the seed, the position in the stream, and the small state buffers random kernels read.

A random kernel (Tensor.rand & co, petagrad/mixin/random.py) hashes (seed, position in the stream, element index). The
position and the keys derived from the seed are not in the kernel's source: they sit in a 3-word buffer the kernel
reads, so a TinyJit replay (jit.py) draws new numbers by refilling these buffers, in stream order, without
recompiling: the same numbers the same calls draw when run eagerly.
"""
from __future__ import annotations
import struct, weakref
from petagrad.dtype import dtypes
from petagrad.uop.uop import UOp
from petagrad.uop.ops import Ops
from petagrad.device.world import is_local
from petagrad.uop.graph import new_buffer

class _Stream:
  seed: int = 0
  counter: int = 0   # how many numbers were drawn since the seed was set

def manual_seed(seed: int = 0) -> None:
  """Restart the stream at `seed`."""
  _Stream.seed, _Stream.counter = int(seed), 0

def _hash32(x: int) -> int:
  x &= 0xffffffff
  x ^= x >> 16; x = (x * 0x7feb352d) & 0xffffffff
  x ^= x >> 15; x = (x * 0x846ca68b) & 0xffffffff
  return x ^ (x >> 16)

# random-state buffers -> (where in the stream they start, how many numbers they count for): a JIT replay refills
# them in stream order, so it draws the same numbers as the same calls run eagerly
rng_state_buffers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

def rng_state_bytes(n: int) -> bytes:
  """Take n numbers from the global stream: the (counter, key0, key1) words a random kernel reads."""
  base = _Stream.counter
  _Stream.counter += max(n, 1)
  k0 = _hash32(_Stream.seed & 0xffffffff ^ 0x9e3779b9)
  k1 = _hash32((_Stream.seed >> 32) ^ _hash32(base >> 32) ^ 0x85ebca6b)
  return struct.pack("<3I", base & 0xffffffff, k0, k1)

def state_buffer(n: int, device) -> UOp:
  """A new state buffer for a kernel that draws n numbers, filled from the stream. On a tuple of devices: one on each,
  holding the same words (a MULTI: every device draws the same numbers, the ones one device would draw)."""
  devices = device if isinstance(device, tuple) else (device,)
  start, raw = _Stream.counter, memoryview(rng_state_bytes(n))
  bufs = [new_buffer(d, 3, dtypes.uint32) for d in devices]
  for b in bufs:
    if not is_local(b.device): continue   # a device of another MPI rank: that rank fills its own
    rng_state_buffers[b.buffer] = (start, n)   # (copies share their start: a JIT replay refills them alike)
    b.buffer.ensure_allocated().copyin(raw)
  return bufs[0] if not isinstance(device, tuple) else UOp(Ops.MULTI, dtypes.uint32, tuple(bufs), None)
