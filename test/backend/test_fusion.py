"""Fusion is pinned: these tests count the kernels each expression runs."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from petagrad import Tensor, GlobalCounters
from petagrad.helpers import Context
from petagrad.uop.ops import Ops
from helpers import helper_test_op

def kernels(*ts: Tensor) -> int:
  GlobalCounters.reset()
  Tensor.realize_all(*ts)
  return GlobalCounters.kernel_count

@pytest.fixture
def abc(device):
  Tensor.manual_seed(0)
  return [Tensor.rand(4, 5).realize() for _ in range(3)]

def test_elementwise_chain_into_reduce(abc):
  a, b, c = abc
  out = (a * b + c).relu().sum()
  assert kernels(out) == 1
  np.testing.assert_allclose(out.item(), np.maximum(a.numpy() * b.numpy() + c.numpy(), 0).sum(), rtol=1e-5)

def test_matmul_bias_relu_one_kernel(device):
  x, w, c = Tensor.rand(3, 4).realize(), Tensor.rand(4, 5).realize(), Tensor.rand(5).realize()
  out = (x @ w + c).relu()
  assert kernels(out) == 1
  np.testing.assert_allclose(out.numpy(), np.maximum(x.numpy() @ w.numpy() + c.numpy(), 0), rtol=1e-5)

def test_movement_chain_no_copies(device):
  x = Tensor.rand(4, 6).realize()
  out = x.reshape(6, 4).permute(1, 0).pad(((1, 2), (0, 1))).shrink(((1, 6), (0, 7))).flip(0) + 1
  assert kernels(out) == 1
  ref = np.pad(x.numpy().reshape(6, 4).T, ((1, 2), (0, 1)))[1:6, 0:7][::-1] + 1
  np.testing.assert_allclose(out.numpy(), ref)

def test_softmax_at_most_three(device):
  x = Tensor.rand(4, 8).realize()
  out = x.softmax(-1)
  assert kernels(out) <= 3
  e = np.exp(x.numpy() - x.numpy().max(-1, keepdims=True))
  np.testing.assert_allclose(out.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)

def test_rand_one_kernel():
  assert kernels(Tensor.rand(1000, 1000, device="CPU")) == 1

def test_forward_backward_at_most_three(device):
  x = Tensor.rand(4, 3).realize()
  w = Tensor.rand(3, 5, requires_grad=True).realize()
  loss = (x @ w).relu().sum()
  loss.backward()
  assert kernels(loss, w.grad) <= 3
  xn, wn = x.numpy(), w.numpy()
  np.testing.assert_allclose(w.grad.numpy(), xn.T @ ((xn @ wn) > 0).astype(np.float32), rtol=1e-5)

def test_reduce_after_reduce_fuses(device):
  x = Tensor.rand(3, 4, 5).realize()
  assert kernels(x.sum(2).amax(1)) == 1

def test_contraction_under_a_reduce_gets_a_buffer(device):
  # nested in the sum's loop the matmul's output dims would be reduce dims there, with no register tile
  x, w = Tensor.rand(8, 16).realize(), Tensor.rand(16, 12).realize()
  out = (x @ w).relu().mean()
  assert kernels(out) == 2
  np.testing.assert_allclose(out.item(), np.maximum(x.numpy() @ w.numpy(), 0).mean(), rtol=1e-5)
  conv = Tensor.rand(2, 3, 6, 6).realize().conv2d(Tensor.rand(8, 3, 3, 3).realize()).mean((2, 3))   # a global average pool
  assert kernels(conv) >= 2

def test_conv_reads_a_stored_weight_layout_as_it_is(device):
  # conv2d stores a weight with >= 8 output channels channels-last (one copy kernel); a weight laid out once that way
  # (conv_weight_layout, realized) is read with no copy: contiguous() of a permute undone by its inverse is the buffer
  from petagrad.mixin.conv import conv_weight_layout
  x, w = Tensor.rand(2, 3, 6, 6).realize(), Tensor.rand(8, 3, 3, 3).realize()
  stored = conv_weight_layout(w).realize()
  assert kernels(conv_weight_layout(stored)) == 0
  assert kernels(x.conv2d(w)) == 2 and kernels(x.conv2d(stored)) == 1
  np.testing.assert_allclose(x.conv2d(stored).numpy(), x.conv2d(w).numpy(), rtol=1e-5, atol=1e-6)
  t = Tensor.rand(3, 4, 5).realize()
  assert kernels(t.permute(2, 0, 1).permute(1, 2, 0).contiguous()) == 0 and kernels(t.permute(2, 0, 1).contiguous()) == 1

def test_scaled_transposed_operand_is_copied_row_major(device):
  # attention's scores q @ (k.T * scale) (a short head dim): read as is, every output would combine partial sums of
  # the 32-long reduction; the scaled keys are copied row-major once (like a plain k.T) and the lanes come from the keys
  q, k = Tensor.rand(1, 16, 8).realize(), Tensor.rand(1, 64, 8).realize()
  for right in (k.transpose(-1, -2), k.transpose(-1, -2) * 0.125, (k * 0.5).transpose(-1, -2) + 1.0):
    assert kernels(q @ right) == 2
    np.testing.assert_allclose((q @ right).numpy(), q.numpy() @ right.numpy(), rtol=1e-5, atol=1e-6)
  assert kernels(q @ (Tensor.rand(1, 8, 64).realize() * 0.125)) == 1   # row-major already: no copy
  # keys sliced out of a packed qkv projection plus its bias, heads split through a merged (batch*heads) axis as
  # torch's MultiheadAttention export does: the merge is uneven, the split undoes it, the keys are still transposed
  qkv, bias = Tensor.rand(64, 2, 3 * 32).realize(), Tensor.rand(3 * 32).realize()
  keys = (qkv + bias).reshape(64, 2, 3, 32)[:, :, 1].reshape(64, 2 * 4, 8).permute(1, 0, 2).reshape(2, 4, 64, 8)
  qs = Tensor.rand(2, 4, 64, 8).realize()
  assert kernels(qs @ (keys.transpose(-1, -2) * 0.5)) == 2
  np.testing.assert_allclose((qs @ (keys.transpose(-1, -2) * 0.5)).numpy(), qs.numpy() @ (keys.numpy().transpose(0, 1, 3, 2) * 0.5),
                             rtol=1e-5, atol=1e-6)

def test_backward_products_choose_their_own_layout(device):
  # the gradients of a matmul are matmuls: attention's dP = dO @ V^T reads V^T, whose contiguous head dim is the
  # reduction, so that product copies V^T row-major as a forward one would (differentiating the forward's multiply-and-
  # sum read it as it is: partial sums combined per output, ~6x slower)
  p, v = Tensor.rand(2, 64, 64, requires_grad=True), Tensor.rand(2, 64, 32).realize()
  (p @ v).sum().backward()
  assert any(n.op is Ops.CONTIGUOUS and n.src[0].op is Ops.PERMUTE for n in p.grad.uop.toposort())
  np.testing.assert_allclose(p.grad.numpy(), np.ones((2, 64, 32), np.float32) @ v.numpy().transpose(0, 2, 1), rtol=1e-5)

def test_shared_reduce_computed_once(device):
  x = Tensor.rand(6, 5).realize()
  s = x.sum(1)
  assert kernels(s + 1, s * 2) == 3   # s, then one kernel each for the two outputs

def test_cat_is_one_kernel(device):
  a, b = Tensor.rand(2, 3).realize(), Tensor.rand(4, 3).realize()
  out = a.cat(b, dim=0)
  assert kernels(out) == 1
  np.testing.assert_allclose(out.numpy(), np.concatenate([a.numpy(), b.numpy()]))

def test_realized_tensor_is_not_recomputed(device):
  x = Tensor.rand(5).realize()
  y = (x * 2).realize()
  assert kernels(y + 1) == 1
  assert kernels(y) == 0

def test_decoded_weight_stays_packed(device):
  # a realize that computes an elementwise expansion of memory (a Q8_0 weight decoded once for a product over many
  # rows, as a prefill's) does not hand that value to the live graphs: they keep reading the packed bytes (a decode
  # step after a short prompt read float32 weights instead: 3.8x the bytes and the memory). A reduce's value is
  # still handed over.
  from petagrad import Variable
  from petagrad.models.quant import quantize
  w = quantize(Tensor.randn(64, 64), "q8_0")[1]
  x = Tensor.randn(512, 64).realize()
  y = x[:Variable("n", 1, 512).bind(300)] @ w.T
  assert kernels(y) == 2   # the decoded weight gets a kernel of its own
  assert [u.dtype.name for u in w.uop.toposort() if u.op is Ops.BUFFER] == ["uint8"]
  np.testing.assert_allclose(y.numpy(), x.numpy()[:300] @ w.numpy().T, rtol=1e-4, atol=1e-4)
  s = x.sum(1)
  t = s + 1
  assert kernels(s * 2, s + 3) == 3   # s, then the two outputs
  assert any(u.op is Ops.CUSTOM_GRAD for u in t.uop.toposort())   # (t reads s's buffer: "computed")

def test_views_of_buffers_need_no_kernel(device):
  x = Tensor.rand(4, 4).realize()
  assert kernels(x.T.reshape(16)) == 0

def test_contiguous_keeps_its_boundary_in_backward(device):
  # each stage reads the previous one at two views; fused into one backward kernel the expression would double per stage
  x = Tensor.rand(1, 16, requires_grad=True)
  y, n = x, 12
  for _ in range(n): y = (y.flip(1) * 0.5 + y).contiguous()
  y.sum().backward()
  assert kernels(x.grad) >= n
  np.testing.assert_allclose(x.grad.numpy(), np.full((1, 16), 1.5 ** n), rtol=1e-5)

def test_costly_prologue_of_matmul_is_realized(device):
  x, w = Tensor.rand(8, 16).realize(), Tensor.rand(16, 32).realize()
  out = x.gelu(approximate="tanh") @ w
  assert kernels(out) == 2
  xn = x.numpy()
  g = 0.5 * xn * (1 + np.tanh(np.sqrt(2 / np.pi) * (xn + 0.044715 * xn ** 3)))
  np.testing.assert_allclose(out.numpy(), g @ w.numpy(), rtol=1e-4)

def test_cheap_prologue_of_matmul_stays_fused(device):
  x, w = Tensor.rand(8, 16).realize(), Tensor.rand(16, 32).realize()
  out = (x * 2 + 1) @ w
  assert kernels(out) == 1
  np.testing.assert_allclose(out.numpy(), (x.numpy() * 2 + 1) @ w.numpy(), rtol=1e-5)

def test_contiguous_backward_realizes_the_gradient(device):
  def grad_kernels(boundary: bool) -> int:
    x = Tensor.rand(8, 8, requires_grad=True).realize()
    y = x * 3 + 1
    if boundary: y = y.contiguous_backward()
    (y.exp() * x).sum().backward()
    assert kernels(Tensor.rand(1)) == 1   # reset the counter
    n = kernels(x.grad)
    xn, yn = x.numpy(), x.numpy() * 3 + 1
    np.testing.assert_allclose(x.grad.numpy(), np.exp(yn) * 3 * xn + np.exp(yn), rtol=1e-5)
    return n
  assert grad_kernels(True) == grad_kernels(False) + 1

def test_repeated_graph_skips_scheduling(device, monkeypatch):
  import petagrad.schedule.schedule as S
  calls = []
  orig = S.create_schedule
  monkeypatch.setattr(S, "create_schedule", lambda targets: calls.append(1) or orig(targets))
  rng = np.random.default_rng(3)
  for _ in range(3):
    xn, yn = rng.standard_normal((5, 13)).astype(np.float32), rng.standard_normal((5, 13)).astype(np.float32)
    x, y = Tensor(xn, device=device), Tensor(yn, device=device)
    s = (x * 2 + y).exp().sum(1)
    out = (x / s.reshape(5, 1)).realize()   # 2 kernels, new buffers every time
    np.testing.assert_allclose(out.numpy(), xn / np.exp(xn * 2 + yn).sum(1, keepdims=True), rtol=1e-5)
  assert len(calls) == 1

def test_gather_is_one_load_per_element(device):
  # x[idx] is a sum over the indexed dim of where(idx == r, x[r], 0) (a one-hot): codegen/collapse.py makes it one gated
  # load per output element, and a costly lazy index (randint) gets its own small buffer rather than the one-hot
  # mask (rule 6): no O(rows) reduce, however large x is
  x = Tensor.randn(3000, 8).realize()
  for idx in (Tensor([5, 2999, 0, -1, -3000]), Tensor.randint(64, high=3000)):
    GlobalCounters.reset()
    out = x[idx].realize()
    assert GlobalCounters.global_ops < 64 * 8 * 20, GlobalCounters.global_ops   # a reduce over 3000 rows: 64*8*3000*2 ops
    np.testing.assert_array_equal(out.numpy(), x.numpy()[idx.numpy()])
  # embedding and gather (the same one-hot form), with the bounds checks of their data
  from petagrad import nn
  emb = nn.Embedding(5000, 4)
  emb.weight.realize()
  tok = Tensor([[1, 4999], [0, 7]])
  GlobalCounters.reset()
  got = emb(tok).realize()
  assert GlobalCounters.global_ops < 5000, GlobalCounters.global_ops
  np.testing.assert_array_equal(got.numpy(), emb.weight.numpy()[tok.numpy()])
  for dt in ("float16", "bfloat16"):   # a half table: its one-hot product is summed in float32, a load all the same
    emb.weight = emb.weight.cast(dt).realize()
    GlobalCounters.reset()
    got = emb(tok).realize()
    assert GlobalCounters.global_ops < 5000, (dt, GlobalCounters.global_ops)
    np.testing.assert_array_equal(got.float().numpy(), emb.weight.float().numpy()[tok.numpy()])
  src, index = Tensor.randn(4, 1000).realize(), Tensor([[3, 999], [0, 1], [7, 7], [500, 2]])
  np.testing.assert_array_equal(src.gather(1, index).numpy(), np.take_along_axis(src.numpy(), index.numpy(), 1))

def test_gather_out_of_range_index_reads_nothing(device):
  # the collapsed load is gated by 0 <= idx < rows: an index outside reads no memory (the data check raises first)
  x = Tensor.arange(6).reshape(3, 2).float().realize()
  with pytest.raises(IndexError): x[Tensor([1, 3])].realize()
  with pytest.raises(IndexError): x[Tensor([-4])].realize()

def test_long_contraction_over_strided_rows_is_split(device):
  if device == "PYTHON": pytest.skip("millions of products: too slow for the interpreter")
  # x.T @ g sums over 2048 rows reading both operands a row at a time (a weight gradient's shape): the partial sums
  # of chunks of 256 rows, then their sum (the chunk's operand panels stay in cache)
  x, g = Tensor.rand(2048, 64).realize(), Tensor.rand(2048, 48).realize()
  out = x.T @ g
  assert kernels(out) == 2
  np.testing.assert_allclose(out.numpy(), x.numpy().T @ g.numpy(), rtol=1e-5)
  with Context(SPLIT_REDUCE=0): assert kernels(x.T @ g) == 1
  # read along the reduction (x @ w.T, a forward Linear): a few sequential streams, left as one kernel
  a, b = Tensor.rand(64, 2048).realize(), Tensor.rand(48, 2048).realize()
  assert kernels(a @ b.T) == 1
  # too few rows or columns to reuse a panel (a matrix-vector product): one kernel
  assert kernels(x.T @ g[:, :1]) == 1

@pytest.mark.parametrize("shapes,fn", [
  ([(4, 512, 64), (48, 64)], lambda x, w: x @ w.T),                               # a Linear's weight gradient over b x t
  ([(1000, 40), (1000, 36)], lambda a, b: a.T @ b),                              # 1000 rows: chunks of 250
  ([(1031, 40), (1031, 36)], lambda a, b: a.T @ b),                              # a prime count: no even chunk, one kernel
  ([(8, 200, 40), (8, 200, 36)], (lambda a, b: torch.einsum("bki,bkj->ij", a, b), lambda a, b: Tensor.einsum("bki,bkj->ij", a, b))),
])
def test_split_contraction_values_and_gradients(device, shapes, fn):
  if device == "PYTHON": pytest.skip("millions of products: too slow for the interpreter")
  fns = fn if isinstance(fn, tuple) else (fn,)
  tol = dict(low=-1, high=1, atol=1e-4, rtol=1e-4, grad_atol=1e-4, grad_rtol=1e-4)
  helper_test_op(shapes, *fns, **tol)
  with Context(SPLIT_REDUCE=64): helper_test_op(shapes, *fns, **tol)

def test_split_plan_andview_strides():
  from petagrad.schedule.schedule import _split_plan
  from petagrad.uop.graph import reshape_strides, view_strides
  assert reshape_strides((4, 6), (6, 1), (2, 2, 3, 2)) == (12, 6, 2, 1)
  assert reshape_strides((6, 4), (1, 6), (24,)) is None             # a transposed view does not merge
  assert reshape_strides((6, 4), (1, 6), (6, 1, 4)) == (1, 0, 6)    # a size-1 axis may go anywhere
  x = Tensor.rand(32, 16).realize()
  assert view_strides(x.T.reshape(16, 1, 32).expand(16, 8, 32).uop) == (1, 0, 16)
  # a merge that is uneven, split back by a later reshape, is regular again; an uneven merge left as it is is not
  y = Tensor.rand(6, 4, 5).realize()
  assert view_strides(y.permute(1, 0, 2).reshape(24, 5).uop) is None
  assert view_strides(y.permute(1, 0, 2).reshape(24, 5).reshape(2, 2, 6, 5).uop) == (10, 5, 20, 1)
  # every view of a random chain of movement ops: the strides, where regular, give each element's offset
  rng = np.random.default_rng(0)
  regular = 0
  for _ in range(400):
    a = np.arange(int(np.prod(shape := tuple(int(n) for n in rng.choice([1, 2, 3, 4, 6], rng.integers(1, 5)))))).reshape(shape)
    t = Tensor(a.astype(np.float32))
    for _ in range(rng.integers(1, 6)):
      kind = rng.integers(4)
      if kind == 0: perm = [int(i) for i in rng.permutation(a.ndim)]; t, a = t.permute(*perm), a.transpose(perm)
      elif kind == 1:
        dims, n = [], a.size
        while n > 1: dims.append(d := int(rng.choice([d for d in range(2, n + 1) if n % d == 0]))); n //= d
        dims = [int(d) for d in rng.permutation(dims)] or [1]
        t, a = t.reshape(*dims), a.reshape(dims)
      elif kind == 2 and 1 in a.shape:
        big = tuple(3 if i == a.shape.index(1) else n for i, n in enumerate(a.shape))
        t, a = t.expand(*big), np.broadcast_to(a, big)
      elif kind == 3 and max(a.shape) > 1:
        i = int(np.argmax(a.shape)); cut = tuple(slice(1, None) if j == i else slice(None) for j in range(a.ndim))
        t, a = t[cut], a[cut]
    if (st := view_strides(t.uop)) is None: continue
    regular += 1
    np.testing.assert_array_equal(a.reshape(-1)[0] + np.indices(a.shape).reshape(a.ndim, -1).T @ np.array(st, dtype=np.int64), a.reshape(-1))
  assert regular > 250
  # the gradient of a Linear's weight: reduced over the adjacent (batch, token) axes, split at 256 of their 2048
  xs, ws = Tensor.rand(4, 512, 64).realize(), Tensor.rand(48, 64, requires_grad=True).realize()
  ((xs @ ws.T) * Tensor.rand(4, 512, 48).realize()).sum().backward()
  plans = [_split_plan(u) for u in ws.grad.uop.toposort() if u.op is Ops.REDUCE_AXIS]
  assert [p[1] for p in plans if p is not None] == [256]   # (the axis: where the matmul's reduction over the rows is)

def test_epilogue_of_a_contraction_is_computed_in_its_kernel(device, monkeypatch):
  # a product (or convolution) read by the next one through an expand: when its value is only the input of an
  # elementwise epilogue (bias, normalization, activation), the epilogue gets the buffer, computed once per element in
  # the product's own kernel, not once per element read in the next product's (or in a padded copy: a ResNet block's
  # BatchNorm + ReLU; here 3 kernels became 2). Its value is still the product's when something else reads it
  import petagrad.schedule.schedule as S
  scheduled: list = []
  orig = S.create_schedule
  monkeypatch.setattr(S, "create_schedule", lambda targets: scheduled.append(r := orig(targets)) or r)
  def selects() -> list[bool]:   # for each kernel of the last schedule: does it compute a select (the ReLU)?
    return [any(u.op is Ops.WHERE for u in it.value.toposort()) for it in scheduled[-1][0] if it.kind == "kernel"]
  Tensor.manual_seed(0)
  x, w1, w2, c = (Tensor.rand(*s, device=device).realize() for s in ((16, 32), (32, 32), (32, 8), (32,)))
  out = (x @ w1 + c).relu() @ w2
  assert kernels(out) == 2 and selects() == [True, False]   # the ReLU in the first product's kernel
  np.testing.assert_allclose(out.numpy(), np.maximum(x.numpy() @ w1.numpy() + c.numpy(), 0) @ w2.numpy(), rtol=1e-5)
  h = x @ w1
  out, twice = (h + c).relu() @ w2, h * 2
  # h's own buffer first; the ReLU (costly enough to be stored once for the expand) a kernel of its own, as before
  assert kernels(out, twice) == 4 and selects() == [False, True, False, False]
  np.testing.assert_allclose(twice.numpy(), h.numpy() * 2, rtol=1e-5)
  # an epilogue of two products (a SwiGLU's gate and up) is not one kernel computing both: neither would get a
  # register tile (a decode step's Q8_0 products 63 -> 850 us); each product its own kernel, then the activation
  w3 = Tensor.rand(32, 32, device=device).realize()
  swiglu = ((x @ w1).silu() * (x @ w3)) @ w2
  assert kernels(swiglu) == 4
  helper_test_op([(6, 2, 10, 10)], lambda x: torch.relu(torch.nn.functional.conv2d(
    torch.relu(torch.nn.functional.conv2d(x, torch.ones(8, 2, 3, 3) / 9, padding=1) * 0.5 + 0.1), torch.ones(8, 8, 3, 3) / 72, padding=1)),
    lambda x: (x.conv2d(Tensor.ones(8, 2, 3, 3) / 9, padding=1) * 0.5 + 0.1).relu().conv2d(Tensor.ones(8, 8, 3, 3) / 72, padding=1).relu())

def test_epilogue_check_sees_every_node_above_its_reduce(device):
  # the epilogue rule checks every node between the reduce and the epilogue for other readers. A node shared by two
  # users is walked after the first of them only (here exp(r), read by the epilogue's add and by another output):
  # seen in the walk's reverse order alone it was missed, and the epilogue took the buffer though exp(r) is read
  # elsewhere
  from petagrad.schedule.schedule import _epilogue
  x, w = Tensor.rand(8, 8, device=device).realize(), Tensor.rand(8, 8, device=device).realize()
  r = (x * w).sum(1)
  shared = r.exp()
  base, other = (shared + r.relu()).uop, (shared * 5).uop
  users: dict = {}
  for root in (base, other):
    for u in root.toposort():
      for s in u.src: users.setdefault(s, []).append(u)
  assert _epilogue(base, set(), {k: list(dict.fromkeys(v)) for k, v in users.items()}) is False
  assert _epilogue(base, set(), {k: list(dict.fromkeys(v)) for k, v in users.items() if k is not shared.uop} | {shared.uop: [base]}) is True
