"""Tensor plumbing vs PyTorch: realize, numpy, item, tolist, .to() copies between devices, properties."""
import numpy as np
import pytest
import torch
from petagrad import Tensor
from petagrad.device import Device
from helpers import compare, TORCH_DTYPES

def test_realize_returns_self(device):
  x = Tensor([1.0, 2.0]) * 2
  assert x.realize() is x
  assert x.tolist() == [2.0, 4.0]
  assert x.realize().tolist() == [2.0, 4.0]     # realizing twice is harmless

def test_realize_many(device):
  a, b = Tensor([1, 2]) + 1, Tensor([3, 4]) * 2
  a.realize(b)
  assert a.tolist() == [2, 3] and b.tolist() == [6, 8]

def test_realize_then_more_ops(device):
  x = (Tensor([1.0, 2.0, 3.0]) * 2).realize()
  y = x + 1
  z = (x * y).sum()
  assert y.tolist() == [3.0, 5.0, 7.0] and z.item() == 2 * 3 + 4 * 5 + 6 * 7

def test_lazy_until_needed(device):
  # building graph does not run anything; the values appear at realize
  x = Tensor.arange(5).float()
  y = x.exp() * 0
  assert y.tolist() == [0.0] * 5

@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool", "uint32"])
def test_numpy_tolist_item(device, dtype):
  data = [[0, 1, 2], [3, 4, 5]] if dtype != "bool" else [[True, False, True], [False, False, True]]
  t, tt = Tensor(data, dtype=dtype), torch.tensor(data, dtype=TORCH_DTYPES[dtype])
  assert t.tolist() == tt.tolist()
  a = t.numpy()
  assert isinstance(a, np.ndarray) and a.shape == (2, 3)
  exp_np = tt.float().numpy() if dtype == "bfloat16" else tt.numpy()
  assert a.dtype == exp_np.dtype
  np.testing.assert_array_equal(a, exp_np)
  assert t[1, 2].item() == tt[1, 2].item()
  assert type(t[1, 2].item()) is type(tt[1, 2].item())

def test_tolist_shapes(device):
  for shape in [(), (1,), (0,), (2, 0), (0, 2), (2, 1, 3), (1, 1, 1)]:
    tt = torch.arange(int(np.prod(shape))).reshape(shape)
    assert Tensor.arange(int(np.prod(shape))).reshape(shape).tolist() == tt.tolist(), shape

def test_numpy_of_view(device):
  x = Tensor.arange(12).reshape(3, 4)
  np.testing.assert_array_equal(x.T.numpy(), np.arange(12).reshape(3, 4).T)
  np.testing.assert_array_equal(x[::2, 1:].numpy(), np.arange(12).reshape(3, 4)[::2, 1:])
  np.testing.assert_array_equal(x[1].numpy(), np.arange(4, 8))

def test_numpy_is_a_copy(device):
  x = Tensor([1.0, 2.0]).realize()
  a = x.numpy()
  a[0] = 100
  assert x.tolist() == [1.0, 2.0]

def test_item(device):
  assert Tensor(3.5).item() == 3.5
  assert Tensor([[7]]).item() == 7
  assert isinstance(Tensor([True]).item(), bool)
  assert isinstance(Tensor([1]).item(), int)
  assert isinstance(Tensor([1.0]).item(), float)
  with pytest.raises(ValueError):
    Tensor([1, 2]).item()

def test_item_after_ops(device):
  x = Tensor([1.0, 2.0, 3.0])
  assert (x * x).sum().item() == 14.0
  assert x.max().item() == 3.0 and x.argmax().item() == 2

def test_bool_and_len(device):
  assert bool(Tensor([1.0])) and not bool(Tensor(0))
  with pytest.raises(RuntimeError):
    bool(Tensor([1, 2]))
  assert len(Tensor.zeros(3, 2)) == 3
  with pytest.raises(TypeError):
    len(Tensor(1.0))

def test_properties(device):
  t, tt = Tensor.zeros(2, 3, 4), torch.zeros(2, 3, 4)
  assert t.shape == tuple(tt.shape) and t.ndim == tt.ndim and t.numel() == tt.numel()
  assert t.size() == tuple(tt.size()) and t.size(1) == tt.size(1) and t.size(-1) == tt.size(-1)
  assert t.element_size() == tt.element_size() and t.nbytes() == tt.nbytes
  assert t.device == Device.DEFAULT
  assert t.is_floating_point() and not Tensor([1]).is_floating_point()
  assert "(2, 3, 4)" in repr(t)

@pytest.mark.parametrize("dtype", ["float32", "int32", "bfloat16", "bool", "int8", "float64"])
def test_to_other_device(device, dtype):
  other = "PYTHON" if device == "CPU" else "CPU"
  data = [[1, 0, 3], [4, 5, 0]]
  x = Tensor(data, dtype=dtype)
  y = x.to(other)
  assert y.device == other and x.device == device and y.dtype == x.dtype and y.shape == x.shape
  assert y.tolist() == x.tolist() == torch.tensor(data, dtype=TORCH_DTYPES[dtype]).tolist()
  z = y.to(device)
  assert z.device == device and z.tolist() == x.tolist()

def test_to_same_device_is_same(device):
  x = Tensor([1, 2])
  assert x.to(device) is x

def test_to_lazy_result_and_compute_there(device):
  other = "PYTHON" if device == "CPU" else "CPU"
  x = Tensor([1.0, 2.0, 3.0]) * 2                      # unrealized
  y = x.to(other) + Tensor([1.0, 1.0, 1.0], device=other)
  assert y.device == other and y.tolist() == [3.0, 5.0, 7.0]
  v = Tensor.arange(6).reshape(2, 3).T.to(other)       # a view crosses devices as its values
  assert v.tolist() == [[0, 3], [1, 4], [2, 5]]

def test_to_is_a_copy(device):
  other = "PYTHON" if device == "CPU" else "CPU"
  x = Tensor([1.0, 2.0]).realize()
  y = x.to(other).realize()
  x += 1
  assert y.tolist() == [1.0, 2.0] and x.tolist() == [2.0, 3.0]

def test_to_grad_flows(device):
  other = "PYTHON" if device == "CPU" else "CPU"
  x = Tensor([1.0, 2.0], requires_grad=True)
  (x.to(other) * Tensor([3.0, 4.0], device=other)).sum().backward()
  assert x.grad is not None and x.grad.device == device and x.grad.tolist() == [3.0, 4.0]

def test_device_canonical_names(device):
  assert Tensor([1], device="cpu").device == "CPU"
  assert Tensor([1], device="python").device == "PYTHON"

def test_assign(device):
  x = Tensor([1.0, 2.0, 3.0]).realize()
  x.assign(Tensor([4.0, 5.0, 6.0]))
  assert x.tolist() == [4.0, 5.0, 6.0]
  x.assign(x * 2)
  assert x.tolist() == [8.0, 10.0, 12.0]

def test_data_bytes(device):
  x = Tensor([1.0, 2.0], dtype="float32")
  assert bytes(x.data()) == np.array([1.0, 2.0], dtype=np.float32).tobytes()
  assert bytes(Tensor.arange(4, dtype="int16").reshape(2, 2).T.data()) == np.arange(4, dtype=np.int16).reshape(2, 2).T.tobytes()

def test_contiguous_of_view_values(device):
  x = Tensor.arange(6).reshape(2, 3)
  compare("contiguous", x.T.contiguous(), torch.arange(6).reshape(2, 3).T.contiguous(), 0, 0)
