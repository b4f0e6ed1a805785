"""In-place writes: new graphs see the new values, results realized before keep theirs, and a write
never overwrites a value another kernel of the same schedule still has to read."""
from __future__ import annotations
import pytest
from petagrad import Tensor, GlobalCounters
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.engine.jit import TinyJit

def test_rebuilt_graph_sees_assign(device):
  w = Tensor([1.0, 2.0]).realize()
  got = []
  for _ in range(3):
    got.append((w * 2).sum().item())
    w.assign(w + 1)
  assert got == [6.0, 10.0, 14.0]

def test_views_see_write_and_new_graphs_recompute(device):
  w = Tensor([1.0, 2.0, 3.0]).realize()
  v = w[0:2]
  before = (v * 2).sum().item()
  w += 1
  assert before == 6.0 and (v * 2).sum().item() == 10.0 and v.tolist() == [2.0, 3.0]

def test_realized_result_keeps_its_value():
  x = Tensor([1.0, 2.0], requires_grad=True)
  w = Tensor([3.0, 4.0]).realize()
  loss = (x * w).sum()
  assert loss.item() == 11.0
  w.assign(w * 0)
  assert loss.item() == 11.0 and (x * w).sum().item() == 0.0

def test_lazy_results_keep_the_value_from_before_a_write(device):
  # like PyTorch's eager results: a lazy tensor computed from a buffer is computed before a write to it lands
  x = Tensor([1.0, 2.0], device=device).realize()
  v, view = x * 1, x[0:1]
  x += 1
  assert v.tolist() == [1.0, 2.0] and x.tolist() == [2.0, 3.0]
  assert view.tolist() == [2.0]   # a view (movement ops only) shows the write, like a torch view
  w = Tensor([1.0, 2.0], device=device).realize()
  s = (w * w).sum()
  w.assign(w * 0)
  assert s.item() == 5.0 and w.tolist() == [0.0, 0.0]

def test_loss_read_after_step_is_the_loss_before_it(device):
  from petagrad.nn.optim import SGD
  w = Tensor([1.0, 2.0], device=device, requires_grad=True)
  opt = SGD([w], lr=0.1)
  for want in (5.0, 3.2):
    loss = (w * w).sum()
    opt.zero_grad(); loss.backward(); opt.step()
    assert loss.item() == pytest.approx(want)   # torch's loop logs this after opt.step()

def test_jit_writes_renew_buffer_nodes():
  w = Tensor.zeros(3).contiguous().realize()
  step = TinyJit(lambda x: w.assign(w + x))
  for _ in range(4):
    step(Tensor.ones(3))
    assert (w * 1).sum().item() == w.numpy().sum()
  assert w.tolist() == [4.0] * 3

def test_writes_mark_views_and_looking_renews_them_with_one_node():
  # an in-place write only marks the tensors viewing the buffer (a JIT replay writes every parameter: nothing is built
  # for them); each gets the buffer's fresh node when looked at, the same node for all of them
  w = Tensor.zeros(4).contiguous().realize()
  v, before = w[1:3], w.uop
  step = TinyJit(lambda x: w.assign(w + x))
  for _ in range(4): step(Tensor.ones(4))
  assert w._stale is not None and v._stale is not None   # (the replays built no node)
  assert w.uop.op is Ops.BUFFER and w.uop is not before and v.uop.base is w.uop and w._stale is None
  assert v.tolist() == [4.0, 4.0] and (w * 2).sum().item() == 32.0

def _lazy_assign(t: Tensor, v: Tensor) -> Tensor: return Tensor(UOp(Ops.ASSIGN, t.dtype, (t.uop, v.uop)))

def test_reader_runs_before_writer_in_one_schedule():
  a, b = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
  s = (a * 10).contiguous()
  Tensor.realize_all(_lazy_assign(a, b + 0), s)   # s reads a's old value
  assert s.tolist() == [10.0, 20.0] and a.tolist() == [3.0, 4.0]

def test_write_cycle_is_refused():
  a, b = Tensor([1.0, 2.0]).realize(), Tensor([3.0, 4.0]).realize()
  with pytest.raises(RuntimeError, match="cycle"):
    Tensor.realize_all(_lazy_assign(a, b + 0), _lazy_assign(b, a + 0))

def test_cat_of_reduces_realizes_pieces():
  x, y = Tensor.rand(8, 4).realize(), Tensor.rand(8, 4).realize()
  GlobalCounters.reset()
  out = x.sum(0).cat(y.sum(0)).realize()
  assert GlobalCounters.kernel_count == 3   # each piece once, then the cheap cat
  assert abs(out.sum().item() - (x.sum() + y.sum()).item()) < 1e-4

def test_equal_graphs_are_separate_memory(device):
  # two Tensor.zeros(3) are one graph node (hash-consed); each realized tensor still owns its memory
  a, b = Tensor.zeros(3).contiguous(), Tensor.zeros(3).contiguous()
  a.realize()
  a.assign(Tensor.ones(3))
  assert b.tolist() == [0.0, 0.0, 0.0] and a.tolist() == [1.0, 1.0, 1.0]
  assert Tensor.zeros(3).contiguous().tolist() == [0.0, 0.0, 0.0]   # built after the write: not the written buffer
  c, d = Tensor.ones(4), Tensor.ones(4)
  Tensor.realize_all(c, d)   # the same node twice in one realize
  c.assign(Tensor.full((4,), 3.0))
  assert c.tolist() == [3.0] * 4 and d.tolist() == [1.0] * 4 and Tensor.ones(4).tolist() == [1.0] * 4

def test_dead_views_are_forgotten():
  """A buffer keeps weak references to the tensors viewing it (an in-place write renews their nodes); views that
  die drop out, so a loop making views of a long-lived buffer does not grow that list, and live views still
  see a later write."""
  import gc
  x = Tensor([[1.0, 2.0], [3.0, 4.0]]).realize()
  keep = x.reshape(4)
  for _ in range(500): y, z = x.reshape(4), x.permute(1, 0)
  del y, z
  gc.collect()
  assert len(x.uop.base.buffer.views) == 2   # x and keep
  x.assign(x * 10)
  assert keep.tolist() == [10.0, 20.0, 30.0, 40.0]

def test_writes_through_views_land(device):
  # torch semantics for the views a write goes through (each was a silent no-op, found by tinygrad's test_assign)
  import torch
  from petagrad import dtypes
  t, tt = Tensor([[1.0, 2, 3], [4, 5, 6]]).realize(), torch.tensor([[1.0, 2, 3], [4, 5, 6]])
  d, td = t.detach(), tt.detach()
  d[1, 2] = 50; td[1, 2] = 50   # detach() shares the memory
  assert t.tolist() == tt.tolist() and d.tolist() == td.tolist()
  t.detach().assign(t + 1); tt.detach().copy_(tt + 1)
  assert t.tolist() == tt.tolist()
  # a slice of an unrealized clone / contiguous / computed tensor writes into that tensor
  for make in (lambda x: x.T.clone(), lambda x: x.T.contiguous(), lambda x: x * 2):
    src, tsrc = Tensor([[1.0, 2], [3, 4]]).realize(), torch.tensor([[1.0, 2], [3, 4]])
    c, tc = make(src), make(tsrc)
    c[:, 1:2].assign(Tensor.ones(2, 1)); tc[:, 1:2].copy_(torch.ones(2, 1))
    assert c.tolist() == tc.tolist() and src.tolist() == tsrc.tolist()
  # a same-size bitcast view writes the bits
  a = Tensor([1.0, 2.0]).realize()
  a.bitcast(dtypes.uint32).assign(Tensor([0, 0x3f800000], dtype=dtypes.uint32))
  assert a.tolist() == [0.0, 1.0]
  a.bitcast(dtypes.uint32).bitcast(dtypes.int32).assign(Tensor([0x40000000, 0], dtype=dtypes.int32))
  a[0:1].bitcast(dtypes.int32).assign(Tensor([0x3f800000], dtype=dtypes.int32))
  assert a.tolist() == [1.0, 0.0]
  # assign into an unrealized tensor copies: a later write to it leaves the source alone (it aliased it)
  src = Tensor([1.0, 2, 3, 4]).realize()
  b = Tensor.ones(4) * 1
  b.assign(src)
  b.assign(Tensor.zeros(4))
  assert src.tolist() == [1.0, 2, 3, 4] and b.tolist() == [0.0] * 4

def test_setitem_keeps_the_gradient(device):
  # z[:3] = x with x requiring grad: the gradient flows to x, as torch's
  import numpy as np, torch
  z0, x0 = np.arange(16, dtype=np.float32).reshape(4, 4), np.ones(4, np.float32) * 3
  z, x = Tensor(z0) * 1, Tensor(x0, requires_grad=True)
  tz, tx = torch.tensor(z0) * 1, torch.tensor(x0, requires_grad=True)
  z[:2] = x * 2; tz[:2] = tx * 2
  (z * z).sum().backward(); (tz * tz).sum().backward()
  assert z.tolist() == tz.tolist() and x.grad.tolist() == tx.grad.tolist()
  # into a realized tensor, and with a tensor index
  z, x = Tensor(z0).realize(), Tensor(x0, requires_grad=True)
  tz, tx = torch.tensor(z0), torch.tensor(x0, requires_grad=True)
  z[Tensor([3, 1])] = x * 2; tz[torch.tensor([3, 1])] = tx * 2
  (z * z).sum().backward(); (tz * tz).sum().backward()
  assert z.tolist() == tz.tolist() and x.grad.tolist() == tx.grad.tolist()
