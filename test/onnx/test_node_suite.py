"""The onnx node test suite (onnx.backend.test, 1,884 tests in onnx 1.23.2) on petagrad's CPU device.

Every test not listed in node_failures.txt must pass; a listed one is an expected failure (unittest's
expectedFailure: if it starts passing, pytest reports an unexpected success, so the list stays honest). Reasons that
start with "skip:" are not run at all (the test cannot finish, or it needs something the machine lacks).
Only the node tests run: the real-model tests download models.
"""
from __future__ import annotations
import os, re, unittest, warnings
import pytest

pytest.importorskip("onnx")
import onnx.backend.test  # noqa: E402
from petagrad.onnx.backend import Backend  # noqa: E402

FAILURES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "node_failures.txt")

def read_failures(path: str = FAILURES_FILE) -> dict[str, str]:
  """test name -> reason, from lines 'test_name  reason' ('#' starts a comment)."""
  out: dict[str, str] = {}
  with open(path) as f:
    for line in f:
      line = line.split("#", 1)[0].strip()
      if not line: continue
      name, _, reason = line.partition(" ")
      if name in out: raise ValueError(f"{path}: {name} is listed twice")
      out[name] = reason.strip() or "no reason given"
  return out

FAILURES = read_failures()

with warnings.catch_warnings():   # building the cases casts NaN/inf into small types on purpose
  warnings.simplefilter("ignore", RuntimeWarning)
  backend_test = onnx.backend.test.BackendTest(Backend, __name__)
for _name, _reason in FAILURES.items():
  if _reason.startswith("skip:"): backend_test.exclude(f"^{re.escape(_name)}$")
  else: backend_test.xfail(f"^{re.escape(_name)}$")

OnnxBackendNodeModelTest: type[unittest.TestCase] = backend_test.test_cases["OnnxBackendNodeModelTest"]

def test_failure_list_names_real_tests():
  """Every name in node_failures.txt is a node test of this onnx version (a typo would hide nothing)."""
  known = {n for n in dir(OnnxBackendNodeModelTest) if n.startswith("test_")}
  unknown = sorted(set(FAILURES) - known)
  assert not unknown, f"node_failures.txt lists tests that do not exist: {unknown[:10]}"
