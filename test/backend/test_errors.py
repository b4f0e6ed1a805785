"""Bad input raises at the call (not at realize), and the message names the op, the shapes and the user's line."""
import os, sys
import pytest
from petagrad import Tensor
from petagrad.dtype import dtypes

THIS_FILE = os.path.basename(__file__)

def check_error(exc: type[Exception] | tuple[type[Exception], ...], fn, op: str, *needles) -> str:
  """fn() must raise exc; the message must name `op`, contain every needle and point at this file and the
  line where fn (a lambda) is written: the caller's line."""
  line = sys._getframe(1).f_lineno
  with pytest.raises(exc) as e:
    fn()
  msg = str(e.value)
  assert op in msg, f"op {op!r} not in message: {msg}"
  for n in needles: assert str(n) in msg, f"{n!r} not in message: {msg}"
  assert f"{THIS_FILE}:{line}" in msg, f"user line {THIS_FILE}:{line} not in message: {msg}"
  return msg

def test_add_shape_mismatch(device):
  a, b = Tensor.zeros(2, 3), Tensor.zeros(4, 3)
  check_error(ValueError, lambda: a + b, "add", (2, 3), (4, 3))
  check_error(ValueError, lambda: a * Tensor.zeros(2), "mul", (2, 3), (2,))
  check_error(ValueError, lambda: a.sub(Tensor.zeros(3, 3)), "sub", (2, 3), (3, 3))
  check_error(ValueError, lambda: a < Tensor.zeros(5), "lt", (2, 3), (5,))
  check_error(ValueError, lambda: a.maximum(b), "maximum", (2, 3), (4, 3))

def test_where_shape_mismatch(device):
  c = Tensor.zeros(2, 3, dtype="bool")
  check_error(ValueError, lambda: c.where(Tensor.zeros(4), 1.0), "where", (2, 3), (4,))

def test_matmul_inner_dim_mismatch(device):
  a, b = Tensor.zeros(2, 3), Tensor.zeros(4, 5)
  check_error(ValueError, lambda: a @ b, "matmul", (2, 3), (4, 5))
  check_error(ValueError, lambda: a.matmul(Tensor.zeros(2)), "matmul", (2, 3), (2,))
  check_error(ValueError, lambda: Tensor.zeros(3).dot(Tensor.zeros(4)), "matmul", (3,), (4,))

def test_matmul_0d(device):
  check_error(RuntimeError, lambda: Tensor(1.0) @ Tensor.zeros(3), "matmul", "()", (3,))

def test_matmul_batch_mismatch(device):
  check_error(ValueError, lambda: Tensor.zeros(2, 3, 4) @ Tensor.zeros(3, 4, 5), "matmul", (2, 3, 4), (3, 4, 5))

def test_sum_bad_axis(device):
  x = Tensor.zeros(2, 3)
  check_error(IndexError, lambda: x.sum(axis=2), "sum", (2, 3))
  check_error(IndexError, lambda: x.sum(-3), "sum", (2, 3))
  check_error(IndexError, lambda: x.max(axis=(0, 5)), "max", (2, 3))
  check_error(IndexError, lambda: x.mean(7), "mean", (2, 3))
  check_error(ValueError, lambda: x.sum((0, 0)), "sum", (2, 3))
  check_error(IndexError, lambda: x.softmax(3), "max", (2, 3))
  check_error(IndexError, lambda: x.argmax(2), "argmax", (2, 3))

def test_max_over_empty(device):
  check_error(RuntimeError, lambda: Tensor.zeros(0, 3).max(0), "max", (0, 3))

def test_bad_reshape(device):
  x = Tensor.zeros(2, 3)
  check_error(ValueError, lambda: x.reshape(7), "reshape", (2, 3), "7")
  check_error(ValueError, lambda: x.reshape(4, -1), "reshape", (2, 3), (4, -1))
  check_error(ValueError, lambda: x.reshape(-1, -1), "reshape", (-1, -1))
  check_error(ValueError, lambda: x.view(3, 3), "reshape", (2, 3), (3, 3))

def test_permute_not_a_permutation(device):
  x = Tensor.zeros(2, 3, 4)
  check_error(ValueError, lambda: x.permute(0, 0, 1), "permute", (0, 0, 1), (2, 3, 4))
  check_error(ValueError, lambda: x.permute(0, 1), "permute", (0, 1), (2, 3, 4))
  check_error(IndexError, lambda: x.permute(0, 1, 3), "permute", (2, 3, 4))
  check_error(IndexError, lambda: x.transpose(0, 3), "transpose", (2, 3, 4))

def test_index_out_of_range(device):
  x = Tensor.zeros(3, 4)
  check_error(IndexError, lambda: x[3], "getitem", (3, 4), "3")
  check_error(IndexError, lambda: x[-4], "getitem", (3, 4))
  check_error(IndexError, lambda: x[0, 4], "getitem", (3, 4))
  check_error(IndexError, lambda: x[0, 0, 0], "getitem", (3, 4))
  check_error(IndexError, lambda: x[..., 1, ...], "getitem", (3, 4))
  check_error(TypeError, lambda: x[1.5], "getitem", (3, 4))

def test_index_zero_step(device):
  check_error(ValueError, lambda: Tensor.zeros(3, 4)[::0], "getitem", (3, 4))

def test_different_devices(device):
  a, b = Tensor.zeros(3, device="CPU"), Tensor.zeros(3, device="PYTHON")
  check_error(RuntimeError, lambda: a + b, "add", "CPU", "PYTHON")
  check_error(RuntimeError, lambda: b * a, "mul", "CPU", "PYTHON")
  check_error(RuntimeError, lambda: a @ b, "matmul", "CPU", "PYTHON")
  check_error(RuntimeError, lambda: a.cat(b), "cat", (3,))
  check_error(RuntimeError, lambda: (a > 0).where(b, 1.0), "where", "CPU", "PYTHON")

def test_bool_subtraction(device):
  a, b = Tensor([True, False]), Tensor([False, False])
  check_error(TypeError, lambda: a - b, "sub", (2,), "bool")
  check_error(TypeError, lambda: a - True, "sub", (2,), "bool")
  check_error(TypeError, lambda: -a, "neg", (2,), "bool")

def test_bitwise_on_floats(device):
  f, i = Tensor([1.0, 2.0]), Tensor([1, 2])
  check_error(TypeError, lambda: f & i, "bitwise_and", "float32")
  check_error(TypeError, lambda: f | f, "bitwise_or", "float32")
  check_error(TypeError, lambda: i ^ f, "bitwise_xor", "float32")
  check_error(TypeError, lambda: ~f, "bitwise_not", "float32")
  check_error(TypeError, lambda: f << 1, "lshift", "float32")
  check_error(TypeError, lambda: i >> 1.5, "rshift", "float32")

def test_movement_errors(device):
  x = Tensor.zeros(2, 3)
  check_error(ValueError, lambda: x.expand(4, 3), "expand", (2, 3), (4, 3))
  check_error(ValueError, lambda: x.expand(3), "expand", (2, 3))
  check_error(ValueError, lambda: x.shrink(((0, 3), None)), "shrink", (2, 3))
  check_error(ValueError, lambda: x.pad((1, 2, 3)), "pad", (2, 3))
  check_error(ValueError, lambda: x.cat(Tensor.zeros(2, 4)), "cat", (2, 3), (2, 4))
  check_error(ValueError, lambda: Tensor.stack([x, Tensor.zeros(3, 2)]), "stack", (2, 3), (3, 2))
  check_error(ValueError, lambda: x.split([1, 2]), "split", (2, 3))
  check_error(IndexError, lambda: x.squeeze(2), "squeeze", (2, 3))
  check_error(IndexError, lambda: x.unsqueeze(4), "unsqueeze", (2, 3))
  check_error(IndexError, lambda: x.flip(2), "flip", (2, 3))
  check_error(ValueError, lambda: x.repeat(2), "repeat", (2, 3))

def test_item_of_many(device):
  check_error(ValueError, lambda: Tensor.zeros(2, 3).item(), "item", (2, 3))

def test_promotion_error(device):
  a, b = Tensor.zeros(2, dtype="uint64"), Tensor.zeros(2, dtype="int64")
  check_error(TypeError, lambda: a + b, "add", "uint64", "int64")

def test_bad_operand_type(device):
  check_error(TypeError, lambda: Tensor.zeros(2) + "a", "add", (2,))
  check_error(TypeError, lambda: Tensor.zeros(2) * [1, 2], "mul", (2,))

def test_backward_errors(device):
  x = Tensor.zeros(2, 3, requires_grad=True)
  check_error(RuntimeError, lambda: (x * 2).backward(), "backward", (2, 3))
  check_error(ValueError, lambda: (x * 2).backward(Tensor.zeros(3)), "backward", (2, 3), (3,))
  check_error(RuntimeError, lambda: (Tensor.zeros(2) * 2).sum().backward(), "backward")

def test_creation_errors(device):
  check_error(ValueError, lambda: Tensor([[1, 2], [3]]), "Tensor")
  check_error(TypeError, lambda: Tensor([Tensor([1])]), "Tensor")
  check_error(TypeError, lambda: Tensor(object()), "Tensor", "object")
  check_error(ValueError, lambda: Tensor.arange(0, 5, 0), "arange")
  check_error(ValueError, lambda: Tensor.full((2, -1), 1.0), "full", (2, -1))
  check_error(ValueError, lambda: Tensor.randint(3, low=4, high=2), "randint")
  check_error(TypeError, lambda: Tensor.rand(3, dtype="int32"), "rand", "int32")
  check_error(ValueError, lambda: Tensor(b"\x01\x02\x03", dtype="float32"), "Tensor", "3 bytes")

def test_misc_arg_errors(device):
  x = Tensor.zeros(2, 3)
  check_error(ValueError, lambda: x.div(x, rounding_mode="round"), "div", "round")
  check_error(ValueError, lambda: x.gelu(approximate="fast"), "gelu", "fast")
  check_error(ValueError, lambda: x.clip(), "clip", (2, 3))
  check_error(TypeError, lambda: x.bitcast("int16"), "bitcast", "float32", "int16")
  check_error((ValueError, NotImplementedError), lambda: x.pad((1, 1), mode="bogus"), "pad", "bogus")

def test_error_does_not_realize(device):
  # the check happens while building the graph: nothing is computed before the error
  from petagrad.helpers import GlobalCounters
  a = Tensor.ones(2, 3) * 2
  GlobalCounters.reset()
  with pytest.raises(ValueError):
    a + Tensor.ones(3, 2)
  assert GlobalCounters.kernel_count == 0

def test_error_points_at_user_line_in_helper_function(device):
  # the user's line is the innermost frame outside petagrad, even when the bad call is nested in user code
  def user_fn(t): return t.reshape(5)
  line = user_fn.__code__.co_firstlineno
  with pytest.raises(ValueError) as e:
    user_fn(Tensor.zeros(2, 3))
  assert f"{THIS_FILE}:{line}" in str(e.value)
