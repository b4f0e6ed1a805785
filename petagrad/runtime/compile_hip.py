"""HIP -> an AMDGPU code object with clang's AMDGPU target, without ROCm: no HIP headers (-nogpuinc), no device
libraries (-nogpulib). The HIP dialect (renderer/cuda.py) spells everything with clang's builtins, so a kernel needs
nothing else. Used by the compile-only target NULL:HIP (`HIP_ARCH`, default gfx942; `HIP_CC` picks the clang).

>>> from petagrad.runtime.compile_hip import HIPCompiler
>>> HIPCompiler.__name__
'HIPCompiler'
"""
from __future__ import annotations
import functools, os, shutil, subprocess, tempfile
from petagrad.device import Compiler, CompileError
from petagrad.helpers import HIP_CC

FIX = "apt-get install clang-19 lld-19 (Debian's newest clang that knows gfx942, and its linker)"

@functools.cache
def hip_clang() -> str:
  """HIP_CC, else the newest clang-NN on the PATH, else clang."""
  if str(HIP_CC): return str(HIP_CC)
  for v in range(25, 13, -1):
    if shutil.which(f"clang-{v}"): return f"clang-{v}"
  if shutil.which("clang"): return "clang"
  raise RuntimeError(f"device HIP: no clang found to compile HIP kernels: {FIX}")

class HIPCompiler(Compiler):
  def __init__(self, arch: str):
    self.arch, self.cc = arch, hip_clang()
    version = subprocess.run([self.cc, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[:1]
    self.cache_key = f"{self.cc} {version} {arch}"
  def compile(self, src: str, name: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
      out = os.path.join(d, "k.co")
      cmd = [self.cc, "-x", "hip", f"--offload-arch={self.arch}", "--cuda-device-only", "-nogpulib", "-nogpuinc", "--no-gpu-bundle-output",
             "-O3", "-fno-math-errno", "-c", "-", "-o", out]
      p = subprocess.run(cmd, input=src, capture_output=True, text=True, timeout=300)
      if p.returncode != 0 or not os.path.exists(out):
        raise CompileError(f"device HIP: compiling kernel {name} for {self.arch} with {self.cc} failed:\n{p.stderr.strip()}\n--- source ---\n{src}")
      with open(out, "rb") as f: lib = f.read()
    if not lib.startswith(b"\x7fELF"): raise CompileError(f"device HIP: {self.cc} made no AMDGPU code object for kernel {name}")
    return lib
