"""SANITIZE=1: bounds-checked CPU kernels and guard pages (docs/safety.md). Kernels built by hand read or write outside
their buffers; the error must name the kernel, the buffer and the index, and skip the access. Normal ops give the same
bits with the checks on."""
from __future__ import annotations
import os, subprocess, sys, textwrap
import numpy as np
import pytest
from petagrad import Tensor
from petagrad.device import MARGIN, Buffer, Device, HostAllocator, OutOfBoundsError
from petagrad.dtype import DType, dtypes
from petagrad.helpers import Context
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.codegen.linearize import LinearProgram, concat_programs
from petagrad.engine.realize import ExecItem, capture_hooks
from petagrad.renderer.cstyle import CRenderer
from petagrad.runtime.ops_cpu import ClangCompiler, CPUProgram
from petagrad.runtime.ops_python import PythonProgram, PythonRenderer

F32 = dtypes.float32

# ---------------------------------------------------------------- building kernels by hand

def glob(i: int, dt: DType = F32) -> UOp: return UOp(Ops.DEFINE_GLOBAL, dt, (), i)
def rng(n: int, kind: str = "global", i: int = 0) -> UOp: return UOp(Ops.RANGE, dtypes.index, (), (i, n, kind))
def c(v, dt: DType = dtypes.index) -> UOp: return UOp.const(dt, v)
def load(g: UOp, idx: UOp, *gate: UOp, n: int = 1) -> UOp: return UOp(Ops.LOAD, g.dtype.vec(n), (g, idx, *gate))
def store(g: UOp, idx: UOp, v: UOp) -> UOp: return UOp(Ops.STORE, v.dtype, (g, idx, v))
def end(r: UOp) -> UOp: return UOp(Ops.ENDRANGE, r.dtype, (r,))

def copy_prog(n: int, src_off: int = 0, out: int = 0, inp: int = 1, kind: str = "global") -> list[UOp]:
  """out[i] = in[i + src_off] + 1, i < n."""
  o, x, r = glob(out), glob(inp), rng(n, kind)
  idx = r if src_off == 0 else UOp(Ops.ADD, dtypes.index, (r, c(src_off)))
  v = load(x, idx)
  s = UOp(Ops.ADD, F32, (v, c(1.0, F32)))
  return [o, x, r, idx, v, s, store(o, r, s), end(r)] if src_off else [o, x, r, v, s, store(o, r, s), end(r)]

def linear(uops: list[UOp]) -> LinearProgram:
  """The program in this order, with the constants (and any other source not listed) placed before their first use."""
  out: dict[UOp, None] = {}
  for u in uops:
    for s in u.toposort():
      if s not in out and (s is u or s.op is not Ops.RANGE): out[s] = None
  return LinearProgram(list(out))

def build(name: str, uops: list[UOp], params: list[DType], threads: bool = False) -> CPUProgram:
  with Context(SANITIZE=1):
    r = CRenderer()
    r.thread_pool = threads
    src = r.render(name, linear(uops), params)
  assert "pg_ok(" in src
  return CPUProgram(name, ClangCompiler().compile_cached(src, name))

def buf(n: int, fill=None) -> tuple[object, np.ndarray]:
  """A host buffer of n float32 (guarded: its margin ends at a PROT_NONE page) and a numpy view of it."""
  with Context(SANITIZE=1): raw = HostAllocator().alloc(4 * n)
  a = np.frombuffer(raw, dtype=np.float32, count=n)
  a[:] = np.arange(n, dtype=np.float32) if fill is None else fill
  return raw, a

# ---------------------------------------------------------------- checked accesses

def test_scalar_load_out_of_bounds():
  p = build("k_load", copy_prog(16, src_off=3), [F32, F32])
  (ro, o), (ri, _i) = buf(16, 0), buf(16)
  with pytest.raises(OutOfBoundsError,
                     match=r"kernel k_load: a load from buffer 1 \(parameter 1: float32, 16 elements\) at index 16, out of bounds \[0, 16\)"):
    p(ro, ri, sizes=[16, 16])
  np.testing.assert_array_equal(o[:13], np.arange(3, 16) + 1)   # the good accesses ran
  np.testing.assert_array_equal(o[13:], 1)                       # the bad loads were skipped (read as 0)

def test_sizes_default_to_the_buffers_bytes():
  p = build("k_load2", copy_prog(16, src_off=1), [F32, F32])
  (ro, _), (ri, _) = buf(16, 0), buf(16)
  with pytest.raises(OutOfBoundsError, match="buffer 1 .* at index 16"): p(ro, ri)

def test_vector_load_checks_every_lane():
  o, x, r = glob(0), glob(1), rng(2)
  idx = UOp(Ops.ADD, dtypes.index, (UOp(Ops.MUL, dtypes.index, (r, c(8))), c(4)))
  v = load(x, idx, n=8)
  oi = UOp(Ops.MUL, dtypes.index, (r, c(8)))
  p = build("k_vload", [o, x, r, idx, v, oi, store(o, oi, v), end(r)], [F32, F32])
  (ro, out), (ri, _) = buf(16, 0), buf(16)
  with pytest.raises(OutOfBoundsError, match=r"kernel k_vload: a load from buffer 1 .*16 elements\) at index 12 \(8 lanes: 12\.\.19\)"):
    p(ro, ri, sizes=[16, 16])
  np.testing.assert_array_equal(out[:8], np.arange(4, 12))

def test_store_out_of_bounds_is_skipped():
  p = build("k_store", copy_prog(16), [F32, F32])
  (ro, out), (ri, _) = buf(8, -1), buf(16)
  with pytest.raises(OutOfBoundsError, match=r"kernel k_store: a store to buffer 0 \(parameter 0: float32, 8 elements\) at index 8"):
    p(ro, ri, sizes=[8, 16])
  np.testing.assert_array_equal(out, np.arange(8) + 1)   # and nothing past it (the guard page would have faulted)

def test_vector_store():
  o, x, r = glob(0), glob(1), rng(3)
  i8 = UOp(Ops.MUL, dtypes.index, (r, c(8)))
  v = load(x, i8, n=8)
  p = build("k_vstore", [o, x, r, i8, v, store(o, i8, v), end(r)], [F32, F32])
  (ro, _), (ri, _) = buf(20, 0), buf(24)
  with pytest.raises(OutOfBoundsError, match=r"a store to buffer 0 .*20 elements\) at index 16 \(8 lanes: 16\.\.23\)"): p(ro, ri, sizes=[20, 24])

def test_masked_loads_are_checked_only_where_the_mask_holds():
  # out[i] = i < 10 ? in[i + 6] : 0 over i < 16 with 16 inputs: the masked-off lanes point past the end
  o, x, r = glob(0), glob(1), rng(16)
  idx = UOp(Ops.ADD, dtypes.index, (r, c(6)))
  ok = UOp(Ops.CMPLT, dtypes.bool, (r, c(10)))
  v = load(x, idx, ok)
  p = build("k_gated", [o, x, r, idx, ok, v, store(o, r, v), end(r)], [F32, F32])
  (ro, out), (ri, _) = buf(16, -1), buf(16)
  p(ro, ri, sizes=[16, 16])
  np.testing.assert_array_equal(out, np.r_[np.arange(6, 16), np.zeros(6)])
  # a vector load under a lane mask: lanes 0..3 valid only; lanes 4..7 would be past the end
  o, x, r = glob(0), glob(1), rng(1)
  lane_ok = UOp(Ops.VECTORIZE, dtypes.bool.vec(8), tuple(c(i < 4, dtypes.bool) for i in range(8)))
  v = load(x, c(8), lane_ok, c(False, dtypes.bool), n=8)
  p = build("k_lanes", [o, x, r, lane_ok, v, store(o, c(0), v), end(r)], [F32, F32])
  (ro, out), (ri, _) = buf(8, -1), buf(12)
  p(ro, ri, sizes=[8, 12])
  np.testing.assert_array_equal(out, [8, 9, 10, 11, 0, 0, 0, 0])
  lane_bad = UOp(Ops.VECTORIZE, dtypes.bool.vec(8), tuple(c(i < 5, dtypes.bool) for i in range(8)))
  v = load(x, c(8), lane_bad, c(False, dtypes.bool), n=8)
  p = build("k_lanes_bad", [o, x, r, lane_bad, v, store(o, c(0), v), end(r)], [F32, F32])
  with pytest.raises(OutOfBoundsError, match=r"kernel k_lanes_bad: a load from buffer 1 .*12 elements\) at index 12,"): p(ro, ri, sizes=[8, 12])

def test_threaded_kernel():
  # the thread loop is outlined into a function the pool runs in chunks: its accesses are checked too
  p = build("k_thread", copy_prog(64, src_off=2, kind="thread"), [F32, F32], threads=True)
  assert p.uses_workers
  (ro, _), (ri, _) = buf(64, 0), buf(64)
  with pytest.raises(OutOfBoundsError, match=r"kernel k_thread: a load from buffer 1 .* at index 6[4-5],"): p(ro, ri, sizes=[64, 64])

def test_launch_group():
  # two kernels in one program, the second reads launch buffer 3 past its end (its own parameter 1)
  a, b = copy_prog(8), copy_prog(8, src_off=1)
  prog = concat_programs([linear(a), linear(b)], [[0, 1], [2, 3]])
  with Context(SANITIZE=1): src = CRenderer().render("G2_k", prog, [F32] * 4)
  p = CPUProgram("G2_k", ClangCompiler().compile_cached(src, "G2_k"))
  (r0, o0), (r1, _), (r2, o2), (r3, _) = buf(8, 0), buf(8), buf(8, 0), buf(8)
  with pytest.raises(OutOfBoundsError, match=r"kernel G2_k: a load from buffer 3 \(parameter 3: float32, 8 elements\) at index 8,"):
    p(r0, r1, r2, r3, sizes=[8, 8, 8, 8])
  np.testing.assert_array_equal(o0, np.arange(8) + 1)
  np.testing.assert_array_equal(o2, np.r_[np.arange(1, 8) + 1, 1])

def test_exec_item_passes_the_buffer_sizes():
  # a real kernel, launched through ExecItem.run with an input buffer smaller than it was compiled for
  ran: list[ExecItem] = []
  with Context(SANITIZE=1, DEV="CPU"):
    x = Tensor(np.arange(64, dtype=np.float32)).realize()
    capture_hooks.append(ran.append)
    try: (x * 3).realize()
    finally: capture_hooks.remove(ran.append)
  ei = next(e for e in ran if e.kernel is not None)
  assert len(ei.bufs) == 2 and ei.bufs[1] is x.uop.base.buffer or True
  small = Buffer("CPU", 40, dtypes.float32)
  with Context(SANITIZE=1), pytest.raises(OutOfBoundsError,
      match=rf"kernel {ei.kernel.name}: a load from buffer 1 \(parameter 1: float32, 40 elements\) at index 4[0-9]"):
    ExecItem(ei.kernel, [ei.bufs[0], small], ei.writes).run()
    Device["CPU"].synchronize()   # (with several CPU devices in the process the launch is queued: its error comes here)

def test_python_device_names_the_buffer():
  _x, _r = glob(1), rng(4)
  uops = copy_prog(4, src_off=1)
  src = PythonRenderer().render("k_py", linear(uops), [F32, F32])
  p = PythonProgram("k_py", src.encode())
  with pytest.raises(OutOfBoundsError, match=r"kernel k_py: a load from buffer 1 \(parameter 1: float32, 4 elements\) at index 4"):
    p(bytearray(16), bytearray(16), sizes=[4, 4])

# ---------------------------------------------------------------- guard pages

def test_guard_page_faults(tmp_path):
  # a read one byte past a buffer's margin (no kernel: nothing checks it) kills the process; faulthandler names the line
  code = textwrap.dedent("""
    import ctypes
    from petagrad.device import HostAllocator, MARGIN
    from petagrad.helpers import Context
    with Context(SANITIZE=1): raw = HostAllocator().alloc(100)
    ctypes.memmove(raw, b"x" * 100, 100)   # the whole buffer is usable
    print("inside ok", flush=True)
    ctypes.string_at(ctypes.addressof(raw) + 100 + MARGIN - 1, 1)   # the margin's last byte is readable
    print("margin ok", flush=True)
    ctypes.string_at(ctypes.addressof(raw) + 100 + MARGIN, 1)   # one past the margin
    print("not reached")
  """)
  p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True, timeout=120,
                     cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  assert "inside ok" in p.stdout and "margin ok" in p.stdout and "not reached" not in p.stdout
  assert p.returncode != 0 and "Segmentation fault" in p.stderr, (p.returncode, p.stderr[-2000:])

def test_discarded_vector_lanes_read_inside_the_margin():
  # GCC 12 (AVX-512) loads the gradient of a circular pad as full vectors blended with a mask it knows at compile time:
  # the discarded lanes read past the buffer's data. Run in a subprocess with guard pages: before the margins this
  # faulted (the process died)
  code = textwrap.dedent("""
    import numpy as np
    from petagrad import Tensor
    x = Tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4), requires_grad=True)
    y = x.pad_mode((2, 1), "circular")
    (y * Tensor(np.ones(y.shape, np.float32))).sum().backward()
    print(x.grad.numpy().sum(), flush=True)
  """)
  p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True, timeout=300,
                     env={**os.environ, "SANITIZE": "1"}, cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
  assert p.returncode == 0 and p.stdout.split()[-1] == "42.0", (p.returncode, p.stderr[-2000:])

def test_guarded_buffers_end_at_a_page():
  with Context(SANITIZE=1):
    for n in (1, 7, 4096, 4097, 1 << 20):
      raw = HostAllocator().alloc(n)
      import ctypes, mmap
      assert len(raw) == n and (ctypes.addressof(raw) + n + MARGIN) % mmap.PAGESIZE == 0

# ---------------------------------------------------------------- normal ops are unchanged

def _ops() -> dict[str, np.ndarray]:
  rng_ = np.random.default_rng(0)
  a, b = Tensor(rng_.standard_normal((33, 65), dtype=np.float32)), Tensor(rng_.standard_normal((65, 17), dtype=np.float32))
  x, w = Tensor(rng_.standard_normal((2, 3, 9, 9), dtype=np.float32)), Tensor(rng_.standard_normal((8, 3, 3, 3), dtype=np.float32),
                                                                              requires_grad=True)
  y = x.conv2d(w, padding=1).max_pool2d()
  y.sum().backward()
  h = a.cast(dtypes.float16)
  return {"matmul": (a @ b).numpy(), "softmax": a.softmax(-1).numpy(), "sum0": a.sum(0).numpy(), "max1": a.max(axis=1).numpy(),
          "conv_pool": y.numpy(), "wgrad": w.grad.numpy(), "half_max0": h.max(axis=0).numpy(), "bf16": a.cast(dtypes.bfloat16).exp().numpy(),
          "gather": a[Tensor([3, 1, 30])].numpy(), "pad": a.pad(((1, 2), (3, 0))).numpy(), "cumsum": a.cumsum(1).numpy(),
          "argmax": a.argmax(0).numpy(), "flip": a.flip(1)[::3].numpy()}

@pytest.mark.parametrize("threads", [1, 2])
def test_normal_ops_identical(threads):
  with Context(DEV="CPU", THREADS=threads): plain = _ops()
  with Context(DEV="CPU", THREADS=threads, SANITIZE=1): checked = _ops()
  for k in plain: np.testing.assert_array_equal(checked[k], plain[k], err_msg=k)
