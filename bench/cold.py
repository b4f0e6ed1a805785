"""One cold first call, run by bench/run.py in a fresh process: `python bench/cold.py FRAMEWORK CASE`.

The parent gives this process an empty compile cache (petagrad: CACHEDIR=<new folder>; tinygrad:
CACHEDB=<new file>), so the first call pays for everything: graph, schedule, kernel search, C compile, load,
run. The inputs are made and realized first (that warms the device itself: tinygrad compiles its CPU worker
programs then), and only the first call of the case's op is timed. Prints one JSON object.
"""
from __future__ import annotations
import json, os, sys, time

def main() -> None:
  fw_name, case_name, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 2
  t0 = time.perf_counter()
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  import numpy as np
  import frameworks, cases
  fw = frameworks.load([fw_name], threads)[fw_name]
  out: dict = {"framework": fw_name, "case": case_name, "import_s": time.perf_counter() - t0}
  if fw.reason: print(json.dumps({**out, "skipped": fw.reason})); return
  case = cases.CASES[case_name]
  arrays = case.make_inputs(np.random.default_rng(0))
  tensors = [fw.from_numpy(a) for a in arrays]
  try: run, _ = cases.runner(case, fw, tensors)
  except cases.Skip as e: print(json.dumps({**out, "skipped": str(e)})); return
  c0, (k0, _) = fw.compiles(), fw.counters()
  st = time.perf_counter(); res = run(); out["first_call_s"] = time.perf_counter() - st
  out["compiled"], out["kernels"] = fw.compiles() - c0, fw.counters()[0] - k0
  st = time.perf_counter(); run(); out["second_call_s"] = time.perf_counter() - st
  ok, err = cases.check(case, fw.to_numpy(res), case.ref(*[a.astype(np.float64) for a in arrays]))
  out["ok"], out["max_err"] = ok, err
  print(json.dumps(out))

if __name__ == "__main__": main()
