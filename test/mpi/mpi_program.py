"""Run under mpirun by test/mpi/test_mpi.py (docs/multi.md): one tensor over the CPU devices of every rank, checked
against the same computation on one device, which every rank also does on its own."""
from __future__ import annotations
import os, signal, sys, threading, time
import numpy as np
from petagrad import Tensor, nn, TinyJit
from petagrad.device import world
from petagrad.engine import jit as jit_engine, realize
from petagrad.helpers import Context
from petagrad.uop.graph import view_buffers

def check(name: str, got, want, tol: float = 1e-5) -> None:
  np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"rank {world.rank()}: {name}")

def ops() -> None:
  if (machines := os.environ.get("PETAGRAD_EXPECT_MACHINES")): assert len(set(world.hosts())) == int(machines), world.hosts()
  per_rank = int(os.environ.get("DEVICES_PER_RANK", "1"))
  devs = world.devices([f"CPU:{i}" for i in range(per_rank)])
  rng = np.random.default_rng(0)   # the same data on every rank
  a = rng.standard_normal((len(devs) * 3 + 1, 5)).astype(np.float32)   # ragged: the last piece is shorter
  t = Tensor(a).shard(devs, 0)
  check("gather", t.numpy(), a)
  for algo in ("naive", "ring", "hier"):
    with Context(ALLREDUCE=algo):
      check(f"sum over the split axis ({algo})", t.sum(0).numpy(), a.sum(0))
      check(f"max ({algo})", t.max().numpy(), a.max())
  check("mean of squares", (t * t).mean().numpy(), (a * a).mean())
  check("sum over the other axis", t.sum(1).numpy(), a.sum(1))
  check("reshard to axis 1", t.shard(devs, 1).numpy(), a)
  check("matmul, contracted axis split", (Tensor(a.T.copy()).shard(devs, 1) @ t).numpy(), a.T @ a, 1e-4)
  check("softmax over the split axis", t.softmax(0).numpy(), np.exp(a) / np.exp(a).sum(0), 1e-5)
  h = Tensor(a.astype(np.float16)).shard(devs, 0).sum(0)
  check("float16 sum", h.numpy().astype(np.float32), a.astype(np.float16).astype(np.float32).sum(0), 1e-2)
  check("bool any", Tensor(a > 2).shard(devs, 0).any().numpy(), (a > 2).any())

def _launch_kind(ei, params: set[int]) -> str:
  """C: a collective, U: a kernel that writes a parameter (an optimizer update), .: any other launch."""
  return "C" if ei.collective is not None else "U" if any(id(ei.bufs[w.out].base) in params for w in ei.writes) else "."

def _updates_after_allreduces(seq: str) -> None:
  # the optimizer's updates read gradients' allreduces, so they run when nothing else is left to do (schedule.py:
  # DDP's order), after the last collective has started
  assert "U" not in seq or seq.rfind("C") < seq.find("U"), f"a parameter was updated before the last collective started: {seq}"

def train(jit: bool) -> None:
  def run(devs):
    Tensor.manual_seed(1)
    layers = [nn.Linear(6, 16), nn.LayerNorm(16), nn.Linear(16, 16), nn.LayerNorm(16), nn.Linear(16, 3)]
    params = nn.state.get_parameters(layers)
    if devs:
      for p in params: p.to_(devs)
    opt = nn.optim.Adam(params, lr=0.01)
    def step(x, y):
      opt.zero_grad()
      h = x
      for layer in layers[:-1]: h = layer(h).gelu() if isinstance(layer, nn.Linear) else layer(h)
      loss = layers[-1](h).sparse_categorical_crossentropy(y)
      loss.backward()
      opt.step()
      return loss.realize()
    if jit: step = TinyJit(step)
    rng, losses, bufs = np.random.default_rng(2), [], [view_buffers(p.uop) for p in params]
    # (this run's parameters only: the ids of the single-device run's buffers, gone with it, may name new buffers now)
    param_memory.clear()
    param_memory.update(id(b.base) for bs in bufs for b in bs)
    with Tensor.train():
      for i in range(4):
        x, y = Tensor(rng.standard_normal((16, 6)).astype(np.float32)), Tensor(rng.integers(0, 3, 16))
        if devs: x, y = x.shard(devs, 0), y.shard(devs, 0)
        if i % 2: x, y = x.realize(), y.realize()   # (realized inputs: the ranks then hold different views, same program)
        losses.append(step(x, y).item())
    # the steps wrote every parameter in place, on each rank (no new memory, nothing copied back after a replay)
    assert all(all(a is b for a, b in zip(view_buffers(p.uop), was)) for p, was in zip(params, bufs)), "a parameter moved"
    return losses, [p.numpy() for p in params]
  param_memory: set[int] = set()
  l1, p1 = run(None)
  # how many launches ran while a collective was under way (the allreduces overlap the backward pass)
  overlapped, orig, order = [0], realize.ExecItem.run, []
  def spy(ei):
    overlapped[0] += bool(realize._in_flight) and ei.kernel is not None
    order.append(_launch_kind(ei, param_memory))
    return orig(ei)
  def finish(finish_launches):
    def check_order():   # (at the end of each realize and replay)
      _updates_after_allreduces("".join(order))
      order.clear()
      finish_launches()
    return check_order
  saved = realize.finish_launches, jit_engine.finish_launches
  realize.ExecItem.run, realize.finish_launches, jit_engine.finish_launches = spy, finish(saved[0]), finish(saved[1])
  try: ln, pn = run(world.devices())
  finally: realize.ExecItem.run, (realize.finish_launches, jit_engine.finish_launches) = orig, saved
  assert overlapped[0] > 0, "no kernel ran while a gradient's allreduce was under way"
  check(f"losses (jit={jit})", ln, l1)
  for a, b in zip(pn, p1): check(f"weights after 4 Adam steps (jit={jit})", a, b)

def update_order() -> None:
  """A data-parallel step of a small transformer under TinyJit: the optimizer's updates read the gradients'
  allreduces, so they run when nothing else is left (schedule.py: DDP's order), after the last collective started;
  the gradients' allreduces start during the backward pass."""
  devs = world.devices()
  Tensor.manual_seed(3)
  class Block:
    def __init__(self, d: int):
      self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
      self.qkv, self.proj, self.fc, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
    def __call__(self, x):
      B, T, C = x.shape
      q, k, v = self.qkv(self.ln1(x)).reshape(B, T, 3, 2, C // 2).permute(2, 0, 3, 1, 4)
      x = x + self.proj(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(B, T, C))
      return x + self.out(self.fc(self.ln2(x)).gelu())
  emb, blocks, head = nn.Embedding(16, 32), [Block(32), Block(32)], nn.Linear(32, 16)
  params = nn.state.get_parameters([emb, blocks, head])
  for p in params: p.to_(devs)
  params[0].realize(*params[1:])
  memory = {id(b.base) for p in params for b in view_buffers(p.uop)}
  opt = nn.optim.AdamW(params, lr=1e-3)
  @TinyJit
  def step(x, y):
    opt.zero_grad()
    h = emb(x)
    for b in blocks: h = b(h)
    loss = head(h).reshape(-1, 16).sparse_categorical_crossentropy(y.reshape(-1))
    loss.backward()
    opt.step()
    return loss.realize()
  order, orig = [], realize.ExecItem.run
  def spy(ei):
    order.append(_launch_kind(ei, memory))
    return orig(ei)
  rng = np.random.default_rng(4)
  realize.ExecItem.run = spy
  try:
    with Tensor.train():
      for _ in range(3):
        tok = rng.integers(0, 16, (4, 9)).astype(np.int32)
        order.clear()
        step(Tensor(tok[:, :-1]).shard(devs, 0), Tensor(tok[:, 1:]).shard(devs, 0)).item()
        seq = "".join(order)
        assert "U" in seq, f"no launch updated a parameter: {seq}"
        _updates_after_allreduces(seq)
        assert "C." in seq.split("U")[0], f"no kernel ran after a gradient's allreduce started: {seq}"
  finally: realize.ExecItem.run = orig

def mismatch() -> None:
  devs = world.devices()
  n = 4 if world.rank() == 0 else 6   # the ranks disagree on the shape: must raise, not hang
  try: Tensor.ones(n * len(devs)).shard(devs, 0).sum().numpy()
  except RuntimeError as e:
    assert "other collectives" in str(e), e
    print(f"rank {world.rank()}: mismatch raised")
    return
  raise AssertionError("no error for ranks running different programs")

def _expect_named(run, what: str) -> None:
  """run must raise on the other ranks, naming the last rank as the one that does not answer."""
  try: run()
  except RuntimeError as e:
    assert f"rank(s) {world.size() - 1} did not answer" in str(e), e
    print(f"rank {world.rank()}: raised: {e}", flush=True)
    os._exit(0)   # (the launcher then ends the job, the stalled rank too)
  raise AssertionError(f"no error when {what}")

def stalls() -> None:
  devs = world.devices()
  t = Tensor.ones(8 * len(devs)).shard(devs, 0)
  t.sum().numpy()
  if world.rank() == world.size() - 1: time.sleep(600)   # this rank stops answering
  _expect_named(lambda: t.sum().numpy(), "a rank stops answering")

def dies() -> None:
  """The last rank is killed (SIGKILL, no chance to clean up) in the middle of a data-parallel training loop."""
  devs = world.devices()
  w = Tensor.ones(4, 256, requires_grad=True)
  w.to_(devs)
  opt = nn.optim.SGD([w], lr=1e-3)
  x = Tensor.ones(len(devs) * 8, 4).shard(devs, 0)
  if world.rank() == world.size() - 1: threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGKILL)).start()
  def train() -> None:
    with Tensor.train():
      for _ in range(1_000_000):
        opt.zero_grad()
        (x @ w).relu().mean().backward()   # the gradient of the replicated weight is an allreduce across the ranks
        opt.step()
  _expect_named(train, "a rank dies")

if __name__ == "__main__":
  what = sys.argv[1]
  {"ops": ops, "train": lambda: train(False), "train_jit": lambda: train(True),
   "update_order": update_order, "mismatch": mismatch, "stalls": stalls, "dies": dies}[what]()
  print(f"rank {world.rank()} of {world.size()}: {what} ok")
