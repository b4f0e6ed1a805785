"""`python -m petagrad.onnx`: the command runs a small model, prints what it ran, and --check compares with onnxruntime."""
from __future__ import annotations
import os, subprocess, sys
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from petagrad.onnx.__main__ import compare, parse_dims  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _save(tmp_path, nodes, inputs, outputs, inits=()) -> str:
  g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
  path = str(tmp_path / "m.onnx")
  onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
  return path

def _cli(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", "petagrad.onnx", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)

@pytest.fixture
def small_model(tmp_path) -> str:
  nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"]), helper.make_node("Shape", ["x"], ["s"])]
  w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3], (np.arange(12) / 6 - 1).tolist())
  return _save(tmp_path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3]), helper.make_tensor_value_info("s", TensorProto.INT64, [2])], [w])

def test_cli_runs_checks_and_jits(small_model, tmp_path):
  r = _cli(small_model, "--dim", "N=5", "--check", "--jit", "--runs", "2")
  assert r.returncode == 0, r.stdout + r.stderr
  for line in ("input  x: (5, 4) float32", "output y: (5, 3) float32", "output s: (2,) int64", "ms per run (2 runs, TinyJit)", "kernels per run"):
    assert line in r.stdout, r.stdout
  assert r.stdout.rstrip().endswith("PASS") and "FAIL" not in r.stdout
  np.savez(tmp_path / "in.npz", x=np.ones((2, 4), np.float32))
  r = _cli(small_model, "--inputs", str(tmp_path / "in.npz"), "--check")
  assert r.returncode == 0 and "input  x: (2, 4) float32" in r.stdout, r.stdout + r.stderr

def test_cli_usage_errors(small_model):
  r = _cli(small_model)   # N is symbolic: the command says how to give it
  assert r.returncode == 2 and "--dim N=VALUE" in r.stderr, r.stderr

def test_cli_check_fails_on_a_mismatch(tmp_path):
  # random numbers: petagrad's generator is not onnxruntime's, so the outputs differ
  path = _save(tmp_path, [helper.make_node("RandomNormal", [], ["y"], shape=[8], seed=1.0)], [],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])])
  r = _cli(path, "--check")
  assert r.returncode == 1 and r.stdout.rstrip().endswith("FAIL"), r.stdout + r.stderr

def test_parse_dims_and_compare(capsys):
  assert parse_dims(["batch=2", "seq=16"]) == {"batch": 2, "seq": 16}
  for bad in ("batch", "batch=x", "=3", "batch=-1"):
    with pytest.raises(ValueError, match="--dim"): parse_dims([bad])
  a = np.array([1.0, 2.0, np.nan], np.float32)
  assert compare(["y"], [a], [a.copy()], 1e-3, 1e-4)
  assert not compare(["y"], [a], [a + 1], 1e-3, 1e-4)
  assert not compare(["y"], [a], [a[:2]], 1e-3, 1e-4)
  out = capsys.readouterr().out
  assert "PASS" in out and "FAIL shape" in out and "max abs err 1" in out
