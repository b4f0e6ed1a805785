"""The CPU device's compile time is bounded: the renderer avoids the loop GCC optimizes for minutes, and any kernel that
still takes longer than COMPILE_TIMEOUT seconds of compiler CPU time is built again with flags that compile fast."""
from __future__ import annotations
import ctypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
import petagrad.device as device_mod
import petagrad.engine.realize as realize_mod
from petagrad import Tensor
from petagrad.helpers import Context
from petagrad.runtime.ops_cpu import ClangCompiler, CompileError

# a masked gather (stride 4096) under a condition that does not change in its `omp simd` loop: GCC 12 takes minutes
SLOW_SRC = """void k(float* data3, float* data4) {
  for (long long gidx0 = 0; gidx0 < 32; gidx0++) {
    for (long long gidx1 = 0; gidx1 < 32; gidx1++) {
      #pragma omp simd
      for (long long gidx2 = 0; gidx2 < 16; gidx2++) {
        long long a = gidx2 * 4096LL + gidx1 * 4LL + gidx0 * 128LL;
        data4[gidx2 + gidx1*16 + gidx0*512] = data3[a] + ((0LL < gidx1) ? data3[a - 3] : 0.0f);
      }
    }
  }
}
"""

def test_slow_kernel_falls_back_to_fast_flags(tmp_path):
  c = ClangCompiler()
  used: list[list[str]] = []
  orig = c._run
  c._run = lambda flags, *a: (used.append(flags), orig(flags, *a))[1]   # type: ignore[method-assign]
  with Context(COMPILE_TIMEOUT=1): lib = c.compile(SLOW_SRC, "k")
  assert used[-1] == c.fast_flags() and "-O3" in used[0], used   # ran out of CPU time, then built with the fast flags
  (tmp_path / "k.so").write_bytes(lib)
  k = ctypes.CDLL(str(tmp_path / "k.so")).k
  src, dst = np.arange(16 * 4096 + 1024, dtype=np.float32), np.zeros(16 * 32 * 32, dtype=np.float32)
  k(src.ctypes.data_as(ctypes.c_void_p), dst.ctypes.data_as(ctypes.c_void_p))
  g0, g1, g2 = np.meshgrid(np.arange(32), np.arange(32), np.arange(16), indexing="ij")
  a = g2 * 4096 + g1 * 4 + g0 * 128
  ref = src[a] + np.where(g1 > 0, src[np.maximum(a - 3, 0)], 0)
  np.testing.assert_array_equal(dst.reshape(32, 32, 16), ref)

def test_compile_errors_are_not_retried():
  with Context(COMPILE_TIMEOUT=5), pytest.raises(CompileError, match="failed"): ClangCompiler().compile("void k(float* a) { a[0] = ; }", "k")

def test_conv_maxpool_weight_grad_compiles_fast(monkeypatch):
  # the report: this weight gradient kept gcc busy past its 300 s timeout (0.4 s without -fopenmp-simd)
  monkeypatch.setattr(device_mod, "_mem_cache", {})
  monkeypatch.setattr(realize_mod, "_kernel_cache", {})
  runs: list[list[str]] = []
  orig = ClangCompiler._run
  def recorded(self, flags, src, name, limit):
    runs.append(flags)
    return orig(self, flags, src, name, limit)
  monkeypatch.setattr(ClangCompiler, "_run", recorded)
  xv, wv = np.random.default_rng(0).random((1, 1, 32, 32), dtype=np.float32), np.random.default_rng(1).random((16, 1, 3, 3), dtype=np.float32)
  with Context(DEV="CPU", DISABLE_DISK_CACHE=1, COMPILE_TIMEOUT=60):
    x, w = Tensor(xv), Tensor(wv, requires_grad=True)
    x.conv2d(w, padding=1).max_pool2d().sum().backward()
    got = w.grad.numpy()
  # every kernel compiled with the full flags inside the 60 s CPU-time limit (none needed the fast-flag rebuild)
  assert runs and all("-O3" in f for f in runs), "a kernel needed the fast flags"
  tw = torch.tensor(wv, requires_grad=True)
  F.max_pool2d(F.conv2d(torch.tensor(xv), tw, padding=1), 2).sum().backward()
  np.testing.assert_allclose(got, tw.grad.numpy(), rtol=1e-5, atol=1e-4)
