#!/usr/bin/env python
"""petagrad vs PyTorch, numpy and tinygrad, side by side in one process on one machine.

  python bench/run.py [--quick] [--only CASE_OR_PREFIX ...] [--frameworks NAME ...] [--threads N]

Writes bench/results/latest.json (also printed to stdout) and bench/results/latest.md (a table of median times
and petagrad's speedups: peer time / petagrad time, so >1 means petagrad is faster). Progress goes to stderr.
See bench/README.md for what each case means and how it is timed.
"""
from __future__ import annotations
import argparse, os, sys

# ---------------------------------------------------------------- environment, before any framework is imported
def _early_args(argv: list[str]) -> int:
  p = argparse.ArgumentParser(add_help=False)
  p.add_argument("--threads", type=int, default=2)
  return p.parse_known_args(argv)[0].threads

if __name__ == "__main__":
  _threads = _early_args(sys.argv[1:])
  if os.environ.get("DEV", "CPU") != "CPU": print(f"bench: DEV={os.environ['DEV']} overridden to CPU", file=sys.stderr)
  os.environ["DEV"] = "CPU"                           # petagrad's and tinygrad's default device flag: both CPU
  # petagrad's kernels (THREADS; OMP_NUM_THREADS for its OMP=1 OpenMP path), numpy's BLAS, tinygrad's CPU workers.
  # tinygrad also reads THREADS, as a bool (threads on/off): any N >= 1 keeps them on.
  for var in ("THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUM_CPU_THREADS"):
    os.environ[var] = str(_threads)

import gc, json, math, platform, shutil, statistics, subprocess, tempfile, time, traceback, datetime
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(1, ROOT)
import numpy as np
import cases as C
import frameworks as F
import machine

def log(*a) -> None: print(*a, file=sys.stderr, flush=True)

# ---------------------------------------------------------------- timing one case in-process
def time_case(case: C.Case, fws: dict, o) -> dict:
  arrays = case.make_inputs(np.random.default_rng(0))
  ref = case.ref(*[a.astype(np.float64) for a in arrays])
  res: dict[str, dict] = {}
  live: dict[str, dict] = {}
  for name, fw in fws.items():
    if fw.reason: res[name] = {"skipped": fw.reason}; continue
    r: dict = {}
    try:
      tensors = [fw.from_numpy(a) for a in arrays]
      run, info = C.runner(case, fw, tensors)
      r.update(info)
      c0 = fw.compiles()
      st = time.perf_counter(); out = run(); r["first_call_s"] = time.perf_counter() - st
      r["compiled_first_call"] = fw.compiles() - c0
      r["ok"], r["max_err"] = C.check(case, fw.to_numpy(out), ref)
      del out
      # warm-up: at least o.warmup calls, and for cheap calls until o.warm_s has passed
      wst, n, last = time.perf_counter(), 0, r["first_call_s"]
      while n < o.warmup or (time.perf_counter() - wst < o.warm_s and n < 200):
        st = time.perf_counter(); run(); last = time.perf_counter() - st; n += 1
      inner = max(1, min(100_000, math.ceil(o.sample_s / max(last, 1e-7))))
      want = max(3, min(o.repeats, int(o.budget_s / max(last * inner, 1e-9))))
      live[name] = {"run": run, "inner": inner, "want": want, "last": last, "samples": [], "calls": 0, "k": 0, "kt": 0.0, "wall": 0.0}
      r["inner_calls_per_sample"] = inner
    except C.Skip as e:
      r = {"skipped": str(e)}
    except Exception as e:
      log(f"  {name}: ERROR in setup/first call\n" + traceback.format_exc())
      r = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
    res[name] = r
  # interleaved rounds: load from other processes changes over time, so every framework samples in every round
  rounds = min(3, max((s["want"] for s in live.values()), default=0))
  names = list(live)
  for rnd in range(rounds):
    order = names[rnd % len(names):] + names[:rnd % len(names)] if names else []
    for name in order:
      s, fw = live[name], fws[name]
      if "error" in res[name]: continue
      n_now = math.ceil((s["want"] - len(s["samples"])) / (rounds - rnd))
      if n_now <= 0: continue
      time.sleep(o.pause)                       # let the previous framework's spinning threads go to sleep
      try:
        if s["last"] < 0.05: s["run"]()        # re-warm caches after another framework ran (untimed)
        k0, kt0 = fw.counters()
        for _ in range(n_now):
          st = time.perf_counter()
          for _ in range(s["inner"]): s["run"]()
          dt = time.perf_counter() - st
          s["samples"].append(dt / s["inner"]); s["wall"] += dt
        k1, kt1 = fw.counters()
        s["calls"] += n_now * s["inner"]; s["k"] += k1 - k0; s["kt"] += kt1 - kt0
      except Exception as e:
        log(f"  {name}: ERROR while timing\n" + traceback.format_exc())
        res[name]["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
  for name, s in live.items():
    r = res[name]
    if "error" in r or not s["samples"]: continue
    per = r.get("per", 1)
    xs = [x / per for x in s["samples"]]
    r.update({"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs), "n_samples": len(xs),
              "samples_s": xs, "kernels_per_call": s["k"] / s["calls"] if s["calls"] else None})
    r["mean_s"] = s["wall"] / s["calls"] / per
    if s["kt"] > 0: r["kernel_s"], r["kernel_share"] = s["kt"] / s["calls"] / per, s["kt"] / s["wall"]   # mean kernel time; its share of wall time
    if fws[name].lazy and s["k"] == 0 and name != "tinygrad":
      r["warning"] = "no kernel ran while timing (a result was reused?)"
  live.clear(); gc.collect()
  return res

# ---------------------------------------------------------------- cold first call, each in a fresh process
def time_cold(case: C.Case, fws: dict, o) -> dict:
  res: dict[str, dict] = {n: ({"skipped": fw.reason} if fw.reason else {"runs": []}) for n, fw in fws.items()}
  names = [n for n, fw in fws.items() if not fw.reason]
  for rep in range(o.cold_repeats):
    for name in names[rep % max(len(names), 1):] + names[:rep % max(len(names), 1)]:
      r = res[name]
      if "error" in r or "skipped" in r: continue
      tmp = tempfile.mkdtemp(prefix="petagrad_bench_cold_")
      env = {**os.environ, "CACHEDIR": os.path.join(tmp, "petagrad"), "CACHEDB": os.path.join(tmp, "tinygrad", "cache.db")}
      try:
        p = subprocess.run([sys.executable, os.path.join(HERE, "cold.py"), name, case.cold_of, str(o.threads)], env=env,
                           capture_output=True, text=True, timeout=900)
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode != 0 or not lines:
          log(f"  {name}: cold run failed (exit {p.returncode})\n{p.stderr[-3000:]}")
          r["error"] = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1][:300]; continue
        out = json.loads(lines[-1])
        if "skipped" in out: res[name] = {"skipped": out["skipped"]}; continue
        r["runs"].append(out)
      except subprocess.TimeoutExpired:
        r["error"] = "cold run timed out (900 s)"
      finally:
        shutil.rmtree(tmp, ignore_errors=True)
  for name, r in res.items():
    runs = r.get("runs")
    if not runs: continue
    xs = [x["first_call_s"] for x in runs]
    r.update({"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs), "n_samples": len(xs), "samples_s": xs,
              "import_s": statistics.median(x["import_s"] for x in runs),
              "second_call_s": statistics.median(x["second_call_s"] for x in runs),
              "compiled": runs[-1].get("compiled"), "kernels": runs[-1].get("kernels"),
              "ok": all(x.get("ok", True) for x in runs), "max_err": max(x.get("max_err", 0.0) for x in runs)})
  return res

# ---------------------------------------------------------------- derived numbers
def derive(case: C.Case, res: dict, peak: dict) -> dict:
  d: dict = {"speedup": {}}
  pg = res.get("petagrad", {})
  for name, r in res.items():
    if name == "petagrad" or "median_s" not in r or "median_s" not in pg: continue
    d["speedup"][name] = r["median_s"] / pg["median_s"]     # >1: petagrad is faster
  for name, r in res.items():
    if "median_s" not in r or case.cold_of: continue
    if case.flops: r["gflops"] = case.flops / r["median_s"] / 1e9
    if case.nbytes and case.bound == "memory": r["gbs"] = case.nbytes / r["median_s"] / 1e9
  if "median_s" in pg and not case.cold_of:
    if case.bound == "compute" and case.flops:
      d["petagrad_gflops"] = pg["gflops"]; d["petagrad_frac_peak_flops"] = pg["gflops"] / peak["peak_gflops"]
      if pg.get("kernel_s"): d["petagrad_kernel_gflops"] = case.flops / pg["kernel_s"] / 1e9
    if case.bound == "memory" and case.nbytes:
      d["petagrad_gbs"] = pg["gbs"]; d["petagrad_frac_peak_bw"] = pg["gbs"] / peak["peak_gbs"]
      if pg.get("kernel_s"): d["petagrad_kernel_gbs"] = case.nbytes / pg["kernel_s"] / 1e9
  return d

# ---------------------------------------------------------------- report
def fmt_t(s: float | None) -> str:
  if s is None: return "-"
  if s >= 1: return f"{s:.2f} s"
  if s >= 1e-3: return f"{s*1e3:.3g} ms"
  return f"{s*1e6:.3g} µs"

def cell(r: dict) -> str:
  if "median_s" in r: return fmt_t(r["median_s"]) + ("" if r.get("ok", True) else " (WRONG)")
  if "skipped" in r: return "skipped"
  if "error" in r: return "error"
  return "-"

def markdown(report: dict) -> str:
  m, meta = report["machine"], report["meta"]
  fw_names = meta["frameworks"]
  peers = [n for n in fw_names if n != "petagrad"]
  L = ["# petagrad benchmarks", "",
       f"{meta['date']}, petagrad {meta['git']}, {'quick' if meta['quick'] else 'full'} run, "
       f"{meta['threads']} threads for every framework (torch.set_num_threads; THREADS/OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, NUM_CPU_THREADS).", "",
       f"Machine: {m['cpu']}, {m['cores']} cores; measured limits **{m['peak_gflops']:.0f} GFLOP/s** fp32 "
       f"(one thread {m['one_thread_gflops']:.0f}, all threads at once {m['all_threads_gflops']:.0f}) and "
       f"**{m['peak_gbs']:.1f} GB/s** (read {m['read_gbs']:.1f}, triad {m['triad_gbs']:.1f}): the best measured on this "
       f"machine so far; this run measured {m['run_peak_gflops']:.0f} GFLOP/s and {m['run_peak_gbs']:.1f} GB/s. "
       f"Load average {meta['load_start']} at the start, {meta['load_end']} at the end (a shared machine: read ratios, not times).", "",
       "Versions: " + ", ".join(f"{n} {v}" for n, v in meta["versions"].items()) + ".", "",
       "Times are medians (per call; per kernel for jit_replay). Speedup = peer time / petagrad time: **>1 means petagrad is faster**.", "",
       "| case | " + " | ".join(fw_names) + " | " + " | ".join(f"vs {p}" for p in peers) + " | petagrad throughput | notes |",
       "|---|" + "---:|" * (len(fw_names) + len(peers)) + "---|---|"]
  for c in report["cases"]:
    res, d = c["results"], c["derived"]
    sp = [f"{d['speedup'][p]:.2f}x" if p in d["speedup"] else "-" for p in peers]
    if "petagrad_gflops" in d: thr = f"{d['petagrad_gflops']:.1f} GFLOP/s ({100*d['petagrad_frac_peak_flops']:.0f}% of peak)"
    elif "petagrad_gbs" in d: thr = f"{d['petagrad_gbs']:.1f} GB/s ({100*d['petagrad_frac_peak_bw']:.0f}% of peak)"
    else: thr = ""
    notes = []
    for n in fw_names:
      r = res.get(n, {})
      if "skipped" in r and not r["skipped"].startswith("cannot load"): notes.append(f"{n} skipped: {r['skipped']}")
      if "error" in r: notes.append(f"{n} error: {r['error']}")
      if "median_s" in r and not r.get("ok", True): notes.append(f"{n} WRONG result (max rel err {r['max_err']:.2g})")
      if r.get("warning"): notes.append(f"{n}: {r['warning']}")
    if c["name"].startswith("jit_replay"):
      modes = {n: res[n]["mode"] for n in fw_names if "mode" in res.get(n, {})}
      if modes: notes.append("; ".join(f"{n}: {v}" for n, v in modes.items()))
    L.append(f"| {c['name']} | " + " | ".join(cell(res.get(n, {})) for n in fw_names) + " | " + " | ".join(sp) +
             f" | {thr} | {'; '.join(notes)} |")
  unloaded = [f"{n}: {r}" for n, r in meta["unavailable"].items()]
  if unloaded: L += ["", "Not run: " + "; ".join(unloaded)]
  # petagrad's own view: where the time goes
  L += ["", "## petagrad detail", "",
        "| case | kernels/call | kernel time / wall time | kernel-only throughput | first call in this process | kernels compiled by it |",
        "|---|---:|---:|---|---:|---:|"]
  for c in report["cases"]:
    r, d = c["results"].get("petagrad", {}), c["derived"]
    if "median_s" not in r: continue
    if c["name"].startswith("cold_"):
      L.append(f"| {c['name']} | {r.get('kernels', '-')} | - | import {fmt_t(r.get('import_s'))}, second call {fmt_t(r.get('second_call_s'))} "
               f"| {fmt_t(r['median_s'])} | {r.get('compiled', '-')} |"); continue
    kpc = r.get("kernels_per_call")
    share = f"{100 * r['kernel_share']:.0f}%" if r.get("kernel_share") else "-"
    thr = (f"{d['petagrad_kernel_gflops']:.1f} GFLOP/s" if "petagrad_kernel_gflops" in d else
           f"{d['petagrad_kernel_gbs']:.1f} GB/s" if "petagrad_kernel_gbs" in d else "-")
    L.append(f"| {c['name']} | {kpc:.3g} | {share} | {thr} | {fmt_t(r.get('first_call_s'))} | {r.get('compiled_first_call', '-')} |"
             if kpc is not None else f"| {c['name']} | - | {share} | {thr} | {fmt_t(r.get('first_call_s'))} | - |")
  return "\n".join(L) + "\n"

# ---------------------------------------------------------------- main
def main() -> None:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", help="fewer repeats and shorter samples (a few minutes on 2 cores)")
  ap.add_argument("--only", nargs="+", metavar="CASE", help="cases to run: names or name prefixes (e.g. matmul)")
  ap.add_argument("--frameworks", nargs="+", default=F.FRAMEWORKS, choices=F.FRAMEWORKS)
  ap.add_argument("--threads", type=int, default=2, help="threads for every framework (default 2)")
  ap.add_argument("--repeats", type=int, help="timed samples per case and framework (default 10, quick 3)")
  ap.add_argument("--out", default=os.path.join(HERE, "results"), help="folder for latest.json and latest.md")
  ap.add_argument("--list", action="store_true", help="list the cases and exit")
  o = ap.parse_args()
  if o.list:
    for c in C.CASES.values(): print(f"{c.name:24s} {c.desc}")
    return
  o.repeats = o.repeats or (3 if o.quick else 10)
  o.warmup = 1 if o.quick else 2            # untimed calls after the first one
  o.warm_s = 0.1 if o.quick else 0.3        # cheap calls warm up at least this long
  o.sample_s = 0.05 if o.quick else 0.2     # one sample loops a cheap call until it lasts about this long
  o.budget_s = 6.0 if o.quick else 30.0     # fewer samples (>= 3) for a framework whose call is slow
  o.pause = 0.05 if o.quick else 0.15
  o.cold_repeats = 1 if o.quick else 3
  selected = [c for c in C.CASES.values() if not o.only or any(c.name == s or c.name.startswith(s) for s in o.only)]
  if not selected: ap.error(f"no case matches {o.only}; see --list")

  load_start = machine.loadavg()
  log("bench: measuring the machine's limits ...")
  peak = machine.measure(o.quick)
  log(f"bench: {peak['peak_gflops']:.0f} GFLOP/s, {peak['peak_gbs']:.1f} GB/s; loading {', '.join(o.frameworks)} ...")
  fws = F.load(o.frameworks, o.threads)
  for n, fw in fws.items():
    if fw.reason: log(f"bench: {n} unavailable: {fw.reason}")
  report: dict = {"meta": {}, "machine": peak, "cases": []}
  for case in selected:
    log(f"bench: {case.name}: {case.desc}")
    st, load0 = time.perf_counter(), machine.loadavg()
    res = time_cold(case, fws, o) if case.cold_of else time_case(case, fws, o)
    d = derive(case, res, peak)
    report["cases"].append({"name": case.name, "desc": case.desc, "bound": case.bound, "per": case.per,
                            "flops": case.flops, "bytes": case.nbytes, "results": res, "derived": d,
                            "load_before": load0, "load_after": machine.loadavg(), "wall_s": time.perf_counter() - st})
    log("  " + "  ".join(f"{n}={cell(r)}" for n, r in res.items()) +
        "  | speedup " + " ".join(f"vs {p} {x:.2f}x" for p, x in d["speedup"].items()) + f"  ({time.perf_counter() - st:.1f} s)")
  log("bench: measuring the machine's limits again (the limits are the better of the two measurements) ...")
  peak2 = machine.measure(o.quick)
  peak = machine.remember(machine.best(peak, peak2), os.path.join(o.out, "machine_limits.json"))
  for c in report["cases"]: c["derived"] = derive(C.CASES[c["name"]], c["results"], peak)
  report["machine"] = peak
  versions = {n: fw.version for n, fw in fws.items() if not fw.reason}
  if "tinygrad" in versions: versions["tinygrad"] += f" (CPU, {getattr(fws['tinygrad'], 'renderer', '?')})"
  versions["python"] = platform.python_version()
  report["meta"] = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "git": machine.git_rev(), "quick": o.quick,
                    "threads": o.threads, "repeats": o.repeats, "frameworks": o.frameworks, "versions": versions,
                    "unavailable": {n: fw.reason for n, fw in fws.items() if fw.reason},
                    "load_start": load_start, "load_end": machine.loadavg(), "argv": sys.argv[1:]}
  os.makedirs(o.out, exist_ok=True)
  js = json.dumps(report, indent=1)
  with open(os.path.join(o.out, "latest.json"), "w") as f: f.write(js + "\n")
  md = markdown(report)
  with open(os.path.join(o.out, "latest.md"), "w") as f: f.write(md)
  print(js)
  log("\n" + md)
  log(f"bench: wrote {os.path.join(o.out, 'latest.json')} and latest.md")

if __name__ == "__main__": main()
