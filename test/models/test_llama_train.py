"""Training a LLaMA: nn.checkpoint (activation recompute) gives the same gradients with less memory, EARLY_FREE gives
intermediate memory back, and examples/llama_train.py logs MLPerf lines and resumes after a kill -9 onto the same
loss curve."""
from __future__ import annotations
import json, os, signal, subprocess, sys
import numpy as np
import pytest
import torch
from petagrad import Tensor, nn
from petagrad.helpers import Context, GlobalCounters
from petagrad.engine.jit import TinyJit
from petagrad.models.llama import Llama, LlamaConfig
from helpers import helper_test_op

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "examples", "llama_train.py")

def _llama(layers: int, dim: int = 32) -> Llama:
  Tensor.manual_seed(0)
  cfg = LlamaConfig(vocab_size=64, hidden_size=dim, intermediate_size=2 * dim, num_hidden_layers=layers, num_attention_heads=4,
                    num_key_value_heads=2)
  return Llama(cfg, max_context=64).realize_weights()

def _grads(model: Llama, tokens: Tensor, checkpoint: bool) -> tuple[float, dict[str, np.ndarray]]:
  sd = nn.state.get_state_dict(model)
  for p in sd.values(): p.grad = None
  loss = model.forward(tokens[:, :-1], checkpoint=checkpoint).flatten(0, 1).cross_entropy(tokens[:, 1:].flatten())
  loss.backward()
  return loss.item(), {k: p.grad.numpy() for k, p in sd.items()}

def test_checkpointed_llama_gradients_match():
  model = _llama(3)
  tokens = Tensor.randint(2, 17, high=64).realize()
  (l0, g0), (l1, g1) = _grads(model, tokens, False), _grads(model, tokens, True)
  assert l0 == l1
  assert g0.keys() == g1.keys() and len(g0) == 3 * 9 + 3
  for k in g0: np.testing.assert_allclose(g1[k], g0[k], rtol=1e-5, atol=1e-6, err_msg=k)   # (recomputed in other kernels: rounding)
  assert any(np.abs(g).max() > 0 for g in g1.values())

def test_checkpoint_against_torch():
  """A block under nn.checkpoint (and torch.utils.checkpoint) against plain torch: forward and the input's gradient."""
  w = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32) * 0.3
  tw, pw = torch.tensor(w, requires_grad=True), Tensor(w, requires_grad=True)
  helper_test_op([(4, 8)], lambda x: torch.utils.checkpoint.checkpoint(lambda t: (t @ tw).tanh() @ tw, x, use_reentrant=False),
                 lambda x: nn.checkpoint(lambda t: (t @ pw).tanh() @ pw, x))

def test_checkpoint_errors_and_no_grad():
  with pytest.raises(TypeError, match="fn must be callable"): nn.checkpoint(3, Tensor.ones(2))
  with pytest.raises(TypeError, match="one Tensor"): nn.checkpoint(lambda t: [t], Tensor.ones(2, requires_grad=True))
  lin = nn.Linear(2, 2)
  with Tensor.no_grad():
    out = nn.checkpoint(lin, Tensor.ones(1, 2))
  assert not out.requires_grad and out.shape == (1, 2)

def _peak(layers: int, checkpoint: bool) -> int:
  """Peak bytes during a replayed TinyJit training step (forward, backward, AdamW): the model, its optimizer state and
  what the step allocates (or, with EARLY_FREE=0, keeps allocated from call to call)."""
  base = GlobalCounters.mem_used
  model = _llama(layers, 64)
  opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=1e-3)
  tokens = Tensor.randint(8, 65, high=64).realize()
  @TinyJit
  def step(t: Tensor) -> Tensor:
    opt.zero_grad()
    loss = model.forward(t[:, :-1], checkpoint=checkpoint).flatten(0, 1).cross_entropy(t[:, 1:].flatten())
    loss.backward()
    Tensor.realize_all(loss, *opt.schedule_step())
    return loss
  for _ in range(3): step(tokens).item()
  GlobalCounters.reset()
  step(tokens).item()
  return GlobalCounters.mem_peak - base

def test_activation_memory_grows_less_with_depth():
  """Without checkpointing every layer's activations live from the forward to the backward pass; with it, a layer's
  input only (the recompute of one layer at a time on top)."""
  plain = {n: _peak(n, False) for n in (2, 6)}
  ck = {n: _peak(n, True) for n in (2, 6)}
  per_layer_plain, per_layer_ck = (plain[6] - plain[2]) / 4, (ck[6] - ck[2]) / 4
  assert per_layer_ck < 0.5 * per_layer_plain, (plain, ck)
  assert ck[6] < 0.6 * plain[6], (plain, ck)

def test_early_free_lowers_peak():
  with Context(EARLY_FREE=0): kept = _peak(4, False)
  freed = _peak(4, False)
  assert freed < 0.6 * kept

# ---------------------------------------------------------------------- the example, in processes

TINY = ["--layers", "2", "--dim", "32", "--heads", "4", "--kv-heads", "2", "--ffn", "64", "--seq", "16", "--batch", "4", "--accum", "2",
        "--warmup", "2", "--max-steps", "10", "--eval-every", "5", "--eval-batches", "2", "--ckpt-every", "3", "--log-every", "1",
        "--target-loss", "0.5"]

def _run(tmp, *extra: str) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": REPO}
  return subprocess.run([sys.executable, SCRIPT, *TINY, *extra], cwd=tmp, env=env, capture_output=True, text=True, timeout=600)

def _mllog(text: str) -> list[dict]:
  return [json.loads(line[len(":::MLLOG "):]) for line in text.splitlines() if line.startswith(":::MLLOG ")]

def test_llama_train_kill_and_resume(tmp_path):
  full = _run(tmp_path, "--checkpoint", "full.safetensors", "--losses", "full.json", "--mllog", "full.log")
  assert full.returncode == 0, full.stderr[-3000:]
  want = json.loads((tmp_path / "full.json").read_text())
  assert len(want) == 10 and want[-1] < want[0]
  events = _mllog(full.stdout)
  assert events == [json.loads(line[len(":::MLLOG "):]) for line in (tmp_path / "full.log").read_text().splitlines()]
  keys = [e["key"] for e in events]
  for k in ("submission_benchmark", "init_start", "init_stop", "run_start", "eval_start", "eval_accuracy", "eval_stop", "run_stop",
            "global_batch_size", "opt_base_learning_rate", "gradient_accumulation_steps"):
    assert k in keys, k
  assert keys.index("init_stop") < keys.index("run_start") < keys.index("eval_accuracy") < keys.index("run_stop")
  stop = next(e for e in events if e["key"] == "run_stop")
  assert stop["event_type"] == "INTERVAL_END" and stop["metadata"]["status"] == "aborted"   # the target is out of reach
  assert [e["metadata"]["step"] for e in events if e["key"] == "eval_accuracy"] == [5, 10]

  # the same run killed (SIGKILL) once a checkpoint past step 3 is on disk, then resumed
  env = {**os.environ, "PYTHONPATH": REPO}
  p = subprocess.Popen([sys.executable, SCRIPT, *TINY, "--checkpoint", "run.safetensors"], cwd=tmp_path, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  killed_after = None
  for line in p.stdout:   # type: ignore[union-attr]
    if line.startswith("checkpoint saved at step 6"):
      p.send_signal(signal.SIGKILL)
      killed_after = 6
      break
  p.wait(timeout=60)
  assert killed_after == 6 and p.returncode == -signal.SIGKILL
  resumed = _run(tmp_path, "--checkpoint", "run.safetensors", "--resume", "--losses", "run.json")
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "resumed from run.safetensors at step" in resumed.stdout
  got = json.loads((tmp_path / "run.json").read_text())
  # the same batches and state: the same curve (the resumed process runs its first steps outside the JIT's replay, which
  # may round differently in the last bits)
  np.testing.assert_allclose(got, want, rtol=1e-5)

def test_llama_train_resume_refuses_other_settings(tmp_path):
  first = _run(tmp_path, "--checkpoint", "c.safetensors", "--max-steps", "3")
  assert first.returncode == 0, first.stderr[-3000:]
  other = _run(tmp_path, "--checkpoint", "c.safetensors", "--max-steps", "3", "--resume", "--dim", "64")
  assert other.returncode != 0 and "--dim 32, not 64" in other.stderr
