"""The device probe: `python -m petagrad.device` tries every device kind on this machine and prints, for each,
PASS (what it is) or FAIL (why, and the fix), then the default device. A program (an entry point), so it may use
every stage of petagrad, the Tensor included.

Each check runs a small computation (3 * [1, 2, 3] summed) on the device and compares the result; compile-only
targets (NULL:CUDA, NULL:HIP) build it and run nothing.

>>> from petagrad.device.__main__ import probe
>>> probe("CPU")[0]
True
"""
from __future__ import annotations
import os, tempfile
from petagrad.device import Device

def _candidates() -> list[str]:
  """The device strings worth trying: every kind, and each further OpenCL device / GPU that is there."""
  out = ["CPU", "PYTHON", "PYTHON:GPU", "NULL", "CL", "CUDA", "NULL:CUDA", "NULL:HIP",
         f"DISK:{os.path.join(tempfile.gettempdir(), 'petagrad_probe.bin')}"]
  try:
    from petagrad.runtime.ops_cl import all_devices
    out[5:5] = [f"CL:{i}" for i in range(1, len(all_devices()))]
  except Exception: pass   # no OpenCL: CL itself reports why
  return out

def probe(name: str) -> tuple[bool, str]:
  """(works?, what it is or why not) for one device string."""
  from petagrad.tensor import Tensor
  from petagrad.helpers import Context
  try:
    spec = Device[name]
    if name.startswith("DISK"):
      t = Tensor.empty(3, dtype="int32", device=name)
      t.assign(Tensor([1, 2, 3], dtype="int32", device="CPU"))   # written to the file at once
      got = int(t.to("CPU").mul(3).sum().item())
    else:
      with Context(DEV=name):
        x = (Tensor([1.0, 2.0, 3.0]) * 3).sum()
        if name.startswith("NULL"): x.realize(); got = 18
        else: got = int(x.item())
    if got != 18: return False, f"3 * [1, 2, 3] summed gave {got}, not 18: the device computes wrong numbers"
    return True, describe(name, spec)
  except Exception as e:
    return False, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

def describe(name: str, spec) -> str:
  """What a working device is, in a few words."""
  c = spec.compiler
  if name.startswith("DISK"): return "memory-mapped files: views and copies, no kernels"
  if hasattr(c, "ctx"): return c.ctx.label   # a real OpenCL device or GPU
  if name == "NULL:CUDA": return f"CUDA C -> PTX for {c.arch} with NVRTC" + (", checked by ptxas" if c.check else " (no ptxas on the PATH)")
  if name == "NULL:HIP": return f"HIP -> AMDGPU code objects for {c.arch} with {c.cc}"
  known = {"CPU": f"C compiled by {getattr(c, 'cc', '?')}", "PYTHON": "the linear program, interpreted", "NULL": "C rendered, nothing run",
           "PYTHON:GPU": "GPU kernels (work-groups, tensor cores) interpreted, threads in lockstep"}
  return known.get(name, name)

def main() -> None:
  width = 16
  print(f"{'device':{width}s} result")
  for name in _candidates():
    ok, what = probe(name)
    print(f"{name if not name.startswith('DISK') else 'DISK:<file>':{width}s} {'PASS' if ok else 'FAIL'}  {what}")
  print(f"default: {Device.DEFAULT} (set DEV=... or Device.DEFAULT to choose)")

if __name__ == "__main__":
  main()
