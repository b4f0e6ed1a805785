"""CUDA C -> PTX with NVRTC (through ctypes), checked by assembling it with `ptxas` where that is on the PATH.

NVRTC comes from the pip package `nvidia-cuda-nvrtc` (the `cuda` extra, pinned to the 13.0 series so its PTX matches
the 13.0 `ptxas`), else from a CUDA toolkit (CUDA_PATH, /usr/local/cuda) or the system's library path. Used by the
CUDA device and by the compile-only target NULL:CUDA (`CUDA_ARCH`, default sm_90), which runs nothing.

>>> from petagrad.runtime.compile_cuda import NVRTCCompiler
>>> NVRTCCompiler("sm_90").arch
'sm_90'
"""
from __future__ import annotations
import ctypes, ctypes.util, functools, glob, importlib.util, os, shutil, subprocess, tempfile
from typing import Any
from petagrad.device import Compiler, CompileError

FIX = "pip install nvidia-cuda-nvrtc==13.0.88 (the `cuda` extra), or a CUDA 13 toolkit"

def _candidates() -> list[str]:
  dirs = []
  if (spec := importlib.util.find_spec("nvidia")) is not None:   # the pip package: site-packages/nvidia/cu13/lib
    dirs += [os.path.join(p, sub, "lib") for p in spec.submodule_search_locations or [] for sub in ("cu13", "cuda_nvrtc")]
  dirs += [os.path.join(os.environ[v], "lib64") for v in ("CUDA_PATH", "CUDA_HOME") if v in os.environ] + ["/usr/local/cuda/lib64"]
  found = [f for d in dirs for f in sorted(glob.glob(os.path.join(d, "libnvrtc.so*"))) if "builtins" not in f and "alt" not in f]
  return found + ([lib] if (lib := ctypes.util.find_library("nvrtc")) else [])

@functools.cache
def nvrtc() -> Any:
  """libnvrtc, with its builtins library loaded first (NVRTC opens it by name, which fails outside the library path)."""
  for path in _candidates():
    for builtins in sorted(glob.glob(os.path.join(os.path.dirname(path), "libnvrtc-builtins.so*"))):
      if "alt" not in builtins:
        try: ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
        except OSError: pass
    try: lib = ctypes.CDLL(path)
    except OSError: continue
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    lib.nvrtcCreateProgram.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    return lib
  raise RuntimeError(f"device CUDA: NVRTC (libnvrtc.so) not found: {FIX}")

def nvrtc_version() -> str:
  major, minor = ctypes.c_int(), ctypes.c_int()
  nvrtc().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
  return f"{major.value}.{minor.value}"

class NVRTCCompiler(Compiler):
  """CUDA C -> PTX for `arch` (sm_XY); with `check`, the PTX is also assembled by ptxas for that arch, so a kernel
  the GPU could not load fails here, with ptxas's message."""
  def __init__(self, arch: str, check: bool = False):
    self.arch, self.check = arch, check and shutil.which("ptxas") is not None
    self.cache_key = f"nvrtc {nvrtc_version()} {arch} ptxas={self.check}"
  def compile(self, src: str, name: str) -> bytes:
    lib, prog = nvrtc(), ctypes.c_void_p()
    def ok(status: int, what: str) -> None:
      if status != 0: raise CompileError(f"device CUDA: {what} for kernel {name} failed: {lib.nvrtcGetErrorString(status).decode()}")
    ok(lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), f"{name}.cu".encode(), 0, None, None), "nvrtcCreateProgram")
    try:
      opts = [f"--gpu-architecture=compute_{self.arch[3:]}".encode(), b"-default-device", b"--std=c++17"]
      status = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
      if status != 0:
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value + 1)
        lib.nvrtcGetProgramLog(prog, log)
        raise CompileError(f"device CUDA: compiling kernel {name} with NVRTC failed ({lib.nvrtcGetErrorString(status).decode()}):\n"
                           f"{log.value.decode(errors='replace').strip()}\n--- source ---\n{src}")
      n = ctypes.c_size_t()
      ok(lib.nvrtcGetPTXSize(prog, ctypes.byref(n)), "nvrtcGetPTXSize")
      ptx = ctypes.create_string_buffer(n.value)
      ok(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
    finally: lib.nvrtcDestroyProgram(ctypes.byref(prog))
    if self.check: ptxas(ptx.value, self.arch, name)
    return ptx.value

def ptxas(ptx: bytes, arch: str, name: str) -> bytes:
  """PTX assembled for arch by ptxas: the cubin, or CompileError with ptxas's message."""
  with tempfile.TemporaryDirectory() as d:
    src, out = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
    with open(src, "wb") as f: f.write(ptx)
    p = subprocess.run(["ptxas", f"-arch={arch}", src, "-o", out], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
      raise CompileError(f"device CUDA: ptxas rejected kernel {name} for {arch}:\n{p.stderr.strip()}\n--- PTX ---\n{ptx.decode()}")
    with open(out, "rb") as f: return f.read()
