"""MULTI: tensors held on several devices (docs/multi.md), against PyTorch on one device.

Every op is run on sharded inputs through the one comparison helper (forward values and gradients); the device
groups are two and three devices of each available kind (CPU:0, CPU:1, ...), and a mix of kinds."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from helpers import helper_test_op as _helper_test_op
from petagrad import Tensor, nn, TinyJit, Device
from petagrad.dtype import dtypes
from petagrad.helpers import Context, GlobalCounters, SANITIZE
from petagrad.uop.ops import Ops
from petagrad.schedule import multi
from petagrad.uop.graph import view_buffers
from conftest import DEVICES

GROUPS = [tuple(f"{d}:{i}" for i in range(n)) for d in DEVICES if d in ("CPU", "PYTHON") for n in (2, 3)]
if {"CPU", "PYTHON"} <= set(DEVICES): GROUPS.append(("CPU", "PYTHON"))
# the memory-safety pass (SANITIZE=1, CI) checks the kernels of two and three CPU devices: the other groups make the same
# kernels, and every bounds-checked kernel is compiled anew
if SANITIZE: GROUPS = [g for g in GROUPS if g[0].startswith("CPU") and "PYTHON" not in g]

def _one_device(out):
  """The helper compares (and differentiates through) tensors on the default device: outputs are gathered there."""
  if isinstance(out, (tuple, list)): return type(out)(_one_device(o) for o in out)
  return out.to(Device.DEFAULT) if isinstance(out, Tensor) and isinstance(out.device, tuple) else out

def helper_test_op(shapes, torch_fxn, petagrad_fxn=None, **kw):
  return _helper_test_op(shapes, torch_fxn, lambda *a: _one_device((petagrad_fxn or torch_fxn)(*a)), **kw)

@pytest.fixture(params=GROUPS, ids=lambda g: "+".join(g))
def devs(request): return request.param

def test_shard_layout(devs):
  t = Tensor(np.arange(20, dtype=np.float32).reshape(10, 2)).shard(devs, axis=0)
  assert t.device == tuple(Tensor(0, device=d).device for d in devs) and t.shape == (10, 2)
  assert multi.layout(t.uop) == (0, multi.split_bounds(10, len(devs)))
  np.testing.assert_equal(t.numpy(), np.arange(20).reshape(10, 2))
  r = Tensor([1.0, 2.0]).shard(devs)
  assert multi.layout(r.uop) == (None, None) and r.tolist() == [1.0, 2.0]

def test_split_bounds():
  assert multi.split_bounds(10, 4) == ((0, 3), (3, 6), (6, 8), (8, 10))
  assert multi.split_bounds(2, 3) == ((0, 1), (1, 2), (2, 2))   # more devices than rows: the last piece is empty

@pytest.mark.parametrize("axis", [0, 1, None])
def test_elementwise(devs, axis):
  helper_test_op([(5, 4), (5, 4)], lambda a, b: (a * b + a.exp()).relu(),
                 lambda a, b: (a.shard(devs, axis) * b.shard(devs, 0) + a.shard(devs, axis).exp()).relu())

def test_mixed_with_replicated_and_scalar(devs):
  helper_test_op([(6, 3), (3,)], lambda a, b: a / (b.abs() + 1) - 2, lambda a, b: a.shard(devs, 0) / (b.shard(devs).abs() + 1) - 2)

@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("red", ["sum", "max", "mean", "prod", "min"])
def test_reduce(devs, axis, red):
  helper_test_op([(7, 5)], lambda a: getattr(a, red)(), lambda a: getattr(a.shard(devs, axis), red)(), low=0.5, high=1.5)
  values = lambda r: r[0] if isinstance(r, tuple) else r   # max(dim) and min(dim): (values, indices)
  helper_test_op([(7, 5)], lambda a: values(getattr(a, red)(1)), lambda a: values(getattr(a.shard(devs, axis), red)(1)), low=0.5, high=1.5)

def test_softmax_and_logsumexp(devs):
  helper_test_op([(9, 6)], lambda a: a.softmax(0) * 3 + a.logsumexp(1, keepdim=True), lambda a: a.shard(devs, 0).softmax(0) * 3 +
                 a.shard(devs, 0).logsumexp(1, keepdim=True))

@pytest.mark.parametrize("fn", [
  lambda a: a.reshape(30), lambda a: a.reshape(2, 3, 5), lambda a: a.reshape(3, 10), lambda a: a.reshape(5, 6).T,
  lambda a: a.permute(1, 0), lambda a: a[1:5], lambda a: a[:, 2:4], lambda a: a.flip(0), lambda a: a.flip(1),
  lambda a: torch.nn.functional.pad(a, (1, 2, 3, 0)) if isinstance(a, torch.Tensor) else a.pad((1, 2, 3, 0)),
  lambda a: a[None].expand(2, 6, 5), lambda a: a[:, None].expand(6, 3, 5),
  lambda a: a[::2], lambda a: a[4:], lambda a: a.flatten()[7:19]], ids=lambda f: "")
@pytest.mark.parametrize("axis", [0, 1])
def test_movement(devs, axis, fn):
  helper_test_op([(6, 5)], lambda a: fn(a) * 2, lambda a: fn(a.shard(devs, axis)) * 2)

def test_ragged_and_empty_pieces(devs):
  helper_test_op([(2, 3)], lambda a: (a * 2).sum(0), lambda a: (a.shard(devs, 0) * 2).sum(0))   # 2 rows on 3 devices: one empty
  helper_test_op([(5, 3)], lambda a: a.cumsum(0), lambda a: a.shard(devs, 0).cumsum(0))
  helper_test_op([(0, 3)], lambda a: a + 1, lambda a: a.shard(devs, 0) + 1)

def test_matmul_layouts(devs):
  # data parallel (batch split, weight on each device), column and row split (tensor parallel), contracted axis split
  helper_test_op([(6, 4), (4, 5)], lambda x, w: x @ w, lambda x, w: x.shard(devs, 0) @ w.shard(devs))
  helper_test_op([(6, 4), (4, 5)], lambda x, w: x @ w, lambda x, w: x.shard(devs) @ w.shard(devs, 1))
  helper_test_op([(6, 4), (4, 5)], lambda x, w: x @ w, lambda x, w: x.shard(devs, 1) @ w.shard(devs, 0))

def test_cat_stack_index(devs):
  helper_test_op([(4, 3), (2, 3)], lambda a, b: torch.cat([a, b]) * 2, lambda a, b: a.shard(devs, 0).cat(b.shard(devs, 0)) * 2)
  helper_test_op([(4, 3), (4, 3)], lambda a, b: torch.stack([a, b], 1), lambda a, b: Tensor.stack([a.shard(devs, 0), b.shard(devs, 0)], 1))
  idx = [3, 0, 2, 2]
  helper_test_op([(5, 3)], lambda a: a[torch.tensor(idx)], lambda a: a.shard(devs, 0)[Tensor(idx).shard(devs)])
  helper_test_op([(5, 3)], lambda a: a[:, torch.tensor([2, 0])], lambda a: a.shard(devs, 0)[:, Tensor([2, 0]).shard(devs)])

def test_conv_and_norm(devs):
  helper_test_op([(4, 2, 5, 5), (3, 2, 3, 3)], lambda x, w: torch.nn.functional.conv2d(x, w, padding=1).relu(),
                 lambda x, w: x.shard(devs, 0).conv2d(w.shard(devs), padding=1).relu(), atol=1e-5)
  helper_test_op([(4, 6)], lambda x: torch.nn.functional.layer_norm(x, (6,)), lambda x: x.shard(devs, 0).layernorm())

def test_reshard_between_axes(devs):
  a = np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32)
  t = Tensor(a).shard(devs, 0)
  for axis in (1, None, 0):
    t = t.shard(devs, axis)
    assert multi.layout(t.uop)[0] == axis
    np.testing.assert_equal(t.numpy(), a)
  np.testing.assert_equal(t.to(devs[-1]).numpy(), a)

@pytest.mark.parametrize("algo", ["naive", "ring", "hier"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
def test_allreduce_algorithms(devs, algo, dtype):
  rng = np.random.default_rng(1)
  a = rng.integers(-5, 5, (len(devs) * 3, 37)).astype(dtype)
  with Context(ALLREDUCE=algo):
    got = Tensor(a).shard(devs, 0).sum(0).numpy()
  np.testing.assert_allclose(got, a.astype(np.float64).sum(0), rtol=1e-3 if dtype == "float16" else 0)

def test_allreduce_same_on_every_device(devs):
  a = np.random.default_rng(2).standard_normal((len(devs) * 4, 300)).astype(np.float32)
  for algo in ("naive", "ring", "hier"):
    with Context(ALLREDUCE=algo):
      s = Tensor(a).shard(devs, 0).sum(0).realize()
    copies = [Tensor(v).numpy() for v in s.uop.src]
    assert s.uop.op is Ops.MULTI and len(copies) == len(devs)
    for c in copies[1:]: np.testing.assert_array_equal(c, copies[0])
    np.testing.assert_allclose(copies[0], a.sum(0), rtol=1e-5, atol=1e-5)

def test_hierarchical_groups():
  # two "machines" of two devices each: the leaders' ring and the broadcast back inside each group
  devs = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
  a = np.random.default_rng(3).standard_normal((4, 50)).astype(np.float32)
  shards = tuple(Tensor(a[i], device=d).uop for i, d in enumerate(devs))
  out = multi.allreduce_hierarchical(shards, Ops.ADD, groups=[[0, 1], [2, 3]])
  copies = Tensor(out[0]).realize(*[Tensor(o) for o in out[1:]])
  for o in out: np.testing.assert_allclose(Tensor(o).numpy(), a.sum(0), rtol=1e-5, atol=1e-6)
  del copies

def test_half_allreduce_keeps_half_on_the_wire(devs):
  t = Tensor(np.ones((len(devs) * 2, 64), np.float16)).shard(devs, 0).sum(0)
  for algo in ("naive", "ring", "hier"):
    with Context(ALLREDUCE=algo):
      lowered = multi.lower([t.uop])[t.uop]
    copies = [n for s in lowered.shards for n in s.toposort() if n.op is Ops.COPY]
    assert copies and all(c.dtype == dtypes.float16 for c in copies)

def test_ring_moves_less_than_naive():
  devs = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
  a = np.ones((8, 1 << 16), np.float32)
  moved = {}
  for algo in ("naive", "ring"):
    t = Tensor(a).shard(devs, 0).realize()
    with Context(ALLREDUCE=algo):
      lowered = multi.lower([t.sum(0).uop])
    copies = {n for v in lowered.values() if isinstance(v, multi.Sharded) for s in v.shards for n in s.toposort() if n.op is Ops.COPY}
    moved[algo] = sum(c.size * c.dtype.itemsize for c in copies)
  assert moved["ring"] * 2 <= moved["naive"], moved   # 2(n-1)/n of the tensor per device, not n-1 times it

def test_assign_in_place(devs):
  w = Tensor(np.zeros((5, 3), np.float32)).shard(devs, 0).realize()
  bufs = [n.buffer for n in w.uop.toposort() if n.op is Ops.BUFFER]
  w.assign(Tensor(np.arange(15, dtype=np.float32).reshape(5, 3)).shard(devs))   # another layout: moved into w's
  np.testing.assert_equal(w.numpy(), np.arange(15).reshape(5, 3))
  assert [n.buffer for n in w.uop.toposort() if n.op is Ops.BUFFER] == bufs
  w[1:3].assign(Tensor.ones(2, 3, device=devs))
  np.testing.assert_equal(w.numpy()[1:3], np.ones((2, 3)))
  w += 1
  np.testing.assert_equal(w.numpy()[0], [1, 2, 3])

def test_random_same_stream_as_one_device(devs):
  Tensor.manual_seed(7)
  one = Tensor.rand(6, 4).numpy()
  Tensor.manual_seed(7)
  many = Tensor.rand(6, 4, device=devs)
  np.testing.assert_array_equal(many.numpy(), one)
  Tensor.manual_seed(7)
  np.testing.assert_array_equal(Tensor.rand(6, 4, device=devs).shard(devs, 0).numpy(), one)

def test_creation_on_devices(devs):
  assert Tensor.zeros(2, 3, device=devs).device == Tensor.arange(4, device=devs).device == Tensor([1, 2], device=devs).device
  np.testing.assert_equal((Tensor.arange(4, device=devs) + Tensor.ones(4, device=devs)).numpy(), np.arange(1, 5))
  np.testing.assert_equal(Tensor.empty(3, device=devs).shape, (3,))

def test_errors(devs):
  a = Tensor.ones(4, 2).shard(devs, 0)
  with pytest.raises(RuntimeError, match="different devices"): _ = a + Tensor.ones(4, 2)
  with pytest.raises(RuntimeError, match="twice"): Tensor.ones(2).shard((devs[0], devs[0]))
  with pytest.raises(IndexError): Tensor.ones(2).shard(devs, axis=2)

def _mlp():
  Tensor.manual_seed(3)
  return [nn.Linear(8, 16), nn.Linear(16, 4)]

def _mlp_step(devs, opt_cls, jit: bool):
  """_mlp's parameters (on devs: the model code is untouched, weights on each device) and a training step of it."""
  layers = _mlp()
  params = nn.state.get_parameters(layers)
  if devs is not None:
    for p in params: p.to_(devs)
  opt = opt_cls(params, lr=0.01)
  def step(x, y):
    opt.zero_grad()
    loss = layers[1](layers[0](x).relu()).sparse_categorical_crossentropy(y)
    loss.backward()
    opt.step()
    return loss.realize()
  return params, TinyJit(step) if jit else step

def _train(devs, steps=4, opt_cls=nn.optim.Adam, jit=False):
  params, step = _mlp_step(devs, opt_cls, jit)
  rng = np.random.default_rng(0)
  losses = []
  with Tensor.train():
    for _ in range(steps):
      x, y = Tensor(rng.standard_normal((12, 8)).astype(np.float32)), Tensor(rng.integers(0, 4, 12))
      if devs is not None: x, y = x.shard(devs, 0), y.shard(devs, 0)
      losses.append(step(x, y).item())
  return losses, [p.numpy() for p in params]

@pytest.mark.parametrize("opt_cls,jit", [(nn.optim.SGD, False), (nn.optim.Adam, False), (nn.optim.Adam, True)])
def test_data_parallel_training_matches_one_device(devs, opt_cls, jit):
  l1, p1 = _train(None, opt_cls=opt_cls)
  ln, pn = _train(devs, opt_cls=opt_cls, jit=jit)
  np.testing.assert_allclose(ln, l1, rtol=1e-5, atol=1e-6)
  for a, b in zip(pn, p1): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

def _dp_step_kernels(devs, jit: bool) -> int:
  """Three AdamW steps of _mlp on a batch held on devs (None: one device), checked to update the parameters in their
  own memory; returns the kernels one more step ran."""
  params, step = _mlp_step(devs, nn.optim.AdamW, jit)
  bufs = [view_buffers(p.uop) for p in params]
  rng = np.random.default_rng(0)
  x, y = Tensor(rng.standard_normal((12, 8)).astype(np.float32)), Tensor(rng.integers(0, 4, 12))
  if devs is not None: x, y = x.shard(devs, 0).realize(), y.shard(devs, 0).realize()
  with Tensor.train():
    for _ in range(3): step(x, y)
    assert x.grad is None
    for p, b in zip(params, bufs): assert all(a is c for a, c in zip(view_buffers(p.uop), b)), "a parameter moved to new memory"
    GlobalCounters.reset()
    step(x, y)
  return GlobalCounters.kernel_count

@pytest.mark.parametrize("jit", [False, True])
def test_optimizer_updates_sharded_parameters_in_place(devs, jit):
  # as on one device: each step writes the parameters' own memory (no copy into new buffers, nothing copied back after
  # a replay), and the gradient of a float input nobody marked (tinygrad's rule gives it one) is dropped by the step
  # instead of being computed later from the updated weights (which ran the forward pass a second time)
  one = _dp_step_kernels(None, jit)
  assert _dp_step_kernels(devs, jit) <= 1.25 * len(devs) * one   # each device's step, plus the allreduce's adds

# A GPU-style device beside the CPU, in the OpenCL pass of CI (TEST_DEVICES=CL, PoCL): a chosen few cases, as PoCL
# takes seconds to build each new kernel
@pytest.mark.skipif("CL" not in DEVICES, reason="OpenCL pass only (TEST_DEVICES=CL)")
def test_opencl_beside_cpu():
  devs = ("CL", "CPU")
  helper_test_op([(6, 5), (6, 5)], lambda a, b: (a * b).relu().sum(0), lambda a, b: (a.shard(devs, 0) * b.shard(devs, 0)).relu().sum(0))
  helper_test_op([(4, 6), (6, 3)], lambda a, b: a @ b, lambda a, b: a.shard(devs, 1) @ b.shard(devs, 0), atol=1e-5)
  l1, p1 = _train(None, steps=2, opt_cls=nn.optim.SGD)
  ln, pn = _train(devs, steps=2, opt_cls=nn.optim.SGD)
  np.testing.assert_allclose(ln, l1, rtol=1e-5, atol=1e-6)
  for a, b in zip(pn, p1): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)

def test_tensor_parallel_mlp(devs):
  # Megatron: the first weight split by columns, the second by rows; one allreduce at the end
  rng = np.random.default_rng(4)
  x, w1, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((5, 8), (8, 12), (12, 3)))
  helper_test_op(None, lambda x, w1, w2: torch.nn.functional.gelu(x @ w1) @ w2,
                 lambda x, w1, w2: (x.shard(devs) @ w1.shard(devs, 1)).gelu() @ w2.shard(devs, 0), vals=[x, w1, w2], atol=1e-5)
  t = ((Tensor(x).shard(devs) @ Tensor(w1).shard(devs, 1)).gelu() @ Tensor(w2).shard(devs, 0))
  lowered = multi.lower([t.uop])[t.uop]
  assert lowered.axis is None   # the partial products were allreduced: each device holds the whole result

def test_backward_reads_a_sharded_weight_not_its_layout_copy(devs):
  # x @ W.T copies W.T row-major for the forward kernel; the backward's x.grad reads W itself (its rows are the lanes
  # there), on several devices as on one: reading the copy made a dot-product kernel 3-4x slower (a GPT's MLP)
  rng = np.random.default_rng(6)
  xn, wn = rng.standard_normal((32, 64)).astype(np.float32), rng.standard_normal((128, 64)).astype(np.float32)
  x, w = Tensor(xn).shard(devs, 0).realize(), Tensor(wn).to(devs).realize()
  x.requires_grad = True
  (x @ w.T).sum().backward()
  assert not any(n.op is Ops.CONTIGUOUS for n in x.grad.uop.toposort())
  np.testing.assert_allclose(x.grad.numpy(), np.ones((32, 128), np.float32) @ wn, rtol=1e-5, atol=1e-5)

def test_jit_replays_multi_device_step(devs):
  w = Tensor(np.ones((4, 3), np.float32)).shard(devs).realize()
  @TinyJit
  def step(x):
    out = (x @ w).sum(0)
    w.assign(w * 0.5)
    return out.realize()
  rng = np.random.default_rng(5)
  expect_w = np.ones((4, 3), np.float32)
  for _ in range(4):
    x = rng.standard_normal((6, 4)).astype(np.float32)
    got = step(Tensor(x).shard(devs, 0))
    np.testing.assert_allclose(got.numpy(), (x @ expect_w).sum(0), rtol=1e-5, atol=1e-5)
    expect_w *= 0.5
  assert step.cnt == 4

def test_kernels_run_on_each_device(devs):
  t = Tensor(np.ones((4, 4), np.float32)).shard(devs, 0).realize()
  GlobalCounters.reset()
  (t * 2 + 1).realize()
  assert GlobalCounters.kernel_count == sum(1 for s in multi.split_bounds(4, len(devs)) if s[1] > s[0])   # one per device, no copies
