"""The memory-corruption cases that were reported, each run in a fresh process: a kernel writing into another
buffer could kill the process at once, at exit, or tests later, so any signal exit counts as a failure."""
from __future__ import annotations
import os, subprocess, sys, textwrap
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

CASES = {
  "where_simplified_away_in_group": """
    x = Tensor(np.arange(2048, dtype=np.float32).reshape(64, 32)).realize()
    m = Tensor(np.zeros((1, 32), bool)).realize()
    b, c = -x, m.expand(64, 32).where(x, x)
    Tensor.realize_all(c, b)
    assert (b.numpy() == -np.arange(2048, dtype=np.float32).reshape(64, 32)).all() and not m.numpy().any()
    assert (c.numpy() == np.arange(2048, dtype=np.float32).reshape(64, 32)).all()""",
  "where_simplified_away_3_elements": """
    x = Tensor(np.arange(3, dtype=np.float32)).realize()
    m = Tensor(np.zeros((1,), bool)).realize()
    b, c = -x, m.expand(3).where(x, x)
    Tensor.realize_all(c, b)
    assert b.tolist() == [-0.0, -1.0, -2.0] and m.tolist() == [False]""",
  "int_add_zero_product": """
    xi, y = Tensor(np.arange(6, dtype=np.int32)).realize(), Tensor(np.ones(6, np.int32)).realize()
    a, b = xi + y * 0, xi * 2
    Tensor.realize_all(a, b)
    assert a.tolist() == list(range(6)) and b.tolist() == [2 * i for i in range(6)] and y.tolist() == [1] * 6""",
  "empty_reduction_with_another_output": """
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4)).realize()
    e = Tensor.zeros(3, 0).contiguous().realize()
    a, b = e.sum(1), x * 2
    Tensor.realize_all(a, b)
    assert a.tolist() == [0.0] * 3 and (b.numpy() == np.arange(12).reshape(3, 4) * 2).all()""",
  "var_over_empty_axes": """
    out = Tensor.zeros(1, 0, 3, 0, 5).contiguous().realize().var(axis=(1, 3)).numpy()
    assert out.shape == (1, 3, 5) and np.isnan(out).all()""",
  "var_of_empty_rows": """
    out = Tensor.randn(2, 0).var(1).numpy()
    assert out.shape == (2,) and np.isnan(out).all()""",
}

@pytest.mark.parametrize("name", sorted(CASES))
def test_reported_case_in_own_process(name):
  code = "import numpy as np\nfrom petagrad import Tensor\n" + textwrap.dedent(CASES[name]) + "\nprint('ok')\n"
  env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
  p = subprocess.run([sys.executable, "-X", "faulthandler", "-c", code], capture_output=True, text=True, timeout=300, env=env)
  assert p.returncode == 0 and p.stdout.strip().endswith("ok"), f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
