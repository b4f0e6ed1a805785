#!/usr/bin/env python3
"""Exit non-zero if a flag in petagrad's FLAGS registry is not documented in docs/env_vars.md.

Imports every petagrad module (so flags defined outside helpers.py register too), then looks for each
flag's name as a table row "| `NAME` |" in docs/env_vars.md. The tinygrad flags accepted with no effect
(TINYGRAD_NOOP_FLAGS) need a row too, in that page's table of them.

    python docs/check_env_vars.py
"""
from __future__ import annotations
import importlib, os, pkgutil, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "env_vars.md")

def all_flags() -> dict:
  sys.path.insert(0, ROOT)
  import petagrad
  from petagrad import helpers
  for mod in pkgutil.walk_packages(petagrad.__path__, "petagrad."):
    try: importlib.import_module(mod.name)
    except Exception as e:   # a device whose system library is missing must not hide the others' flags
      print(f"note: could not import {mod.name} ({type(e).__name__}: {e}); its flags are not checked", file=sys.stderr)
  return {**getattr(helpers, "TINYGRAD_NOOP_FLAGS", {}), **helpers.FLAGS}

def documented(text: str) -> set[str]:
  return set(re.findall(r"^\|\s*`([A-Za-z_][A-Za-z0-9_]*)`\s*\|", text, re.MULTILINE))

def main() -> int:
  flags = all_flags()
  try:
    with open(DOC, encoding="utf-8") as f: text = f.read()
  except OSError as e:
    print(f"error: cannot read {DOC}: {e}", file=sys.stderr)
    return 2
  have = documented(text)
  missing = sorted(n for n in flags if n not in have)
  for n in missing:
    print(f"error: flag {n} (default {flags[n].default!r}: {flags[n].doc}) has no row in {os.path.relpath(DOC, ROOT)}", file=sys.stderr)
  stale = sorted(have - set(flags))
  for n in stale: print(f"warning: {os.path.relpath(DOC, ROOT)} documents {n}, which is not a flag", file=sys.stderr)
  if missing: return 1
  print(f"ok: all {len(flags)} flags are documented in {os.path.relpath(DOC, ROOT)}")
  return 0

if __name__ == "__main__":
  sys.exit(main())
