"""Bad input raises at the call (not at realize), and the message names the op, the shapes and the user's line."""
import os, sys
import numpy as np
import pytest
import torch
from petagrad import Tensor
from petagrad.dtype import dtypes
from helpers import helper_test_op

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
  # like torch: an empty dim given -> IndexError; a full reduction of an empty tensor -> RuntimeError (argmax: IndexError)
  check_error(IndexError, lambda: Tensor.zeros(0, 3).max(0), "max", (0, 3), "dim 0")
  check_error(IndexError, lambda: Tensor.zeros(3, 0).min(1), "min", (3, 0), "dim 1")
  check_error(IndexError, lambda: Tensor.zeros(3, 0, dtype=dtypes.int32).amin((0, 1)), "min", (3, 0))
  check_error(IndexError, lambda: Tensor.zeros(3, 0).argmax(1), "argmax", (3, 0))
  check_error(IndexError, lambda: Tensor.zeros(3, 0).argmin(-1), "argmin", (3, 0))
  check_error(RuntimeError, lambda: Tensor.zeros(0).max(), "max", (0,))
  check_error(RuntimeError, lambda: Tensor.zeros(2, 0).min(), "min", (2, 0))
  check_error(IndexError, lambda: Tensor.zeros(0).argmax(), "argmax", (0,))
  check_error(RuntimeError, lambda: Tensor.zeros(3, 0).norm(float("inf"), dim=1), "norm", (3, 0))
  check_error(RuntimeError, lambda: Tensor.zeros(0).norm(-1.0), "norm", (0,))
  # a non-empty reduced dim of an empty tensor is fine
  assert Tensor.zeros(0, 3).max(1).values.shape == (0,) and Tensor.zeros(0, 3).argmin(1).shape == (0,)

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
  check_error(IndexError, lambda: x[..., ..., 1], "getitem", (3, 4))
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
  check_error(RuntimeError, lambda: (Tensor.zeros(2, dtype="int32") * 2).sum().backward(), "backward")
  check_error(RuntimeError, lambda: (x < 1).sum().backward(), "backward", "does not require grad")

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

# ------------------------------------------------------------------ the ops of the full Tensor API: bad calls
# each entry: (exception, call, op named first in the message, texts that must appear: operand shapes, dtypes, values)
API_BAD_CALLS = {
  "conv2d_channels": (ValueError, lambda _x, _img: _img.conv2d(Tensor.ones(2, 4, 3, 3)), "conv2d", [(1, 3, 4, 4), (2, 4, 3, 3), "float32"]),
  "conv3d_weight": (ValueError, lambda _x, _img: Tensor.ones(1, 2, 3, 3, 3).conv3d(Tensor.ones(1, 2, 2, 2)), "conv3d",
                    [(1, 2, 3, 3, 3), (1, 2, 2, 2)]),
  "conv1d_weight": (ValueError, lambda _x, _img: Tensor.ones(1, 2, 5).conv1d(Tensor.ones(1, 2, 2, 2)), "conv1d", [(1, 2, 5), (1, 2, 2, 2)]),
  "conv_transpose2d": (ValueError, lambda _x, _img: _img.conv_transpose2d(Tensor.ones(4, 2, 3, 3)), "conv_transpose2d", [(1, 3, 4, 4), (4, 2, 3, 3)]),
  "max_pool2d": (ValueError, lambda _x, _img: _img.max_pool2d(kernel_size=(9, 9)), "max_pool2d", [(1, 3, 4, 4)]),
  "avg_pool2d": (ValueError, lambda _x, _img: _img.avg_pool2d(kernel_size=0), "avg_pool2d", [(1, 3, 4, 4)]),
  "adaptive_avg_pool2d": (ValueError, lambda _x, _img: _img.adaptive_avg_pool2d((2, 2, 2)), "adaptive_avg_pool2d", [(1, 3, 4, 4)]),
  "interpolate": (ValueError, lambda _x, _img: _img.interpolate((8, 8), mode="cubic"), "interpolate", [(1, 3, 4, 4), "cubic"]),
  "pad_reflect": (ValueError, lambda _x, _img: _img.pad((5, 5), mode="reflect"), "pad", [(1, 3, 4, 4)]),
  "cross_entropy": (ValueError, lambda _x, _img: _x.cross_entropy(Tensor([0, 1, 2])), "cross_entropy", [(2, 3), (3,), "int64"]),
  "cross_entropy_target_range": (IndexError, lambda _x, _img: _x.cross_entropy(Tensor([0, 3])), "cross_entropy",
                                 [(2, 3), (2,), "int64", "target 3 is out of bounds"]),
  "nll_loss_target_range": (IndexError, lambda _x, _img: _x.nll_loss(Tensor([-1, 0])), "nll_loss", [(2, 3), (2,), "target -1"]),
  "nll_loss": (TypeError, lambda _x, _img: _x.nll_loss(Tensor([0.5, 1.0])), "nll_loss", [(2, 3), (2,), "float32"]),
  "binary_cross_entropy": (ValueError, lambda _x, _img: _x.binary_cross_entropy(Tensor.ones(3)), "binary_cross_entropy", [(2, 3), (3,)]),
  "kl_div": (ValueError, lambda _x, _img: _x.kl_div(Tensor.ones(4)), "kl_div", [(2, 3), (4,)]),
  "cosine_similarity": (ValueError, lambda _x, _img: _x.cosine_similarity(Tensor.ones(2, 4)), "cosine_similarity", [(2, 3), (2, 4)]),
  "layernorm": (IndexError, lambda _x, _img: _x.layernorm(axis=3), "layernorm", [(2, 3)]),
  "layer_norm": (ValueError, lambda _x, _img: _x.layer_norm((4,)), "layer_norm", [(2, 3)]),
  "rms_norm": (IndexError, lambda _x, _img: _x.rms_norm(axis=4), "rms_norm", [(2, 3)]),
  "batchnorm": (ValueError, lambda _x, _img: _img.batchnorm(Tensor.ones(4), None, Tensor.ones(3), Tensor.ones(3)), "batchnorm", [(1, 3, 4, 4), (4,)]),
  "group_norm": (ValueError, lambda _x, _img: _img.group_norm(2), "group_norm", [(1, 3, 4, 4)]),
  "dropout": (ValueError, lambda _x, _img: _x.dropout(1.5), "dropout", [(2, 3), "1.5"]),
  "sdpa": (ValueError, lambda _x, _img: Tensor.ones(2, 3, 4).scaled_dot_product_attention(Tensor.ones(2, 3, 5), Tensor.ones(2, 3, 5)),
           "scaled_dot_product_attention", [(2, 3, 4), (2, 3, 5)]),
  "multinomial": (ValueError, lambda _x, _img: Tensor.ones(3).multinomial(5, replacement=False), "multinomial", [(3,)]),
  "gather": (ValueError, lambda _x, _img: _x.gather(0, Tensor([0])), "gather", [(2, 3), (1,), "int64"]),
  "gather_range": (IndexError, lambda _x, _img: _x.gather(1, Tensor([[3]])), "gather", [(2, 3), (1, 1), "index 3"]),
  "scatter": (ValueError, lambda _x, _img: _x.scatter(0, Tensor([[0, 1]]), Tensor.ones(3)), "scatter", [(2, 3), (1, 2), (3,)]),
  "scatter_reduce": (ValueError, lambda _x, _img: _x.scatter_reduce(0, Tensor([[0]]), Tensor([[1.0]]), "max"), "scatter_reduce", [(2, 3), "'max'"]),
  "index_select": (IndexError, lambda _x, _img: _x.index_select(1, Tensor([-1])), "index_select", [(2, 3), (1,), "index -1"]),
  "masked_fill": (TypeError, lambda _x, _img: _x.masked_fill(Tensor.ones(2, 3), 0), "masked_fill", [(2, 3), "float32"]),
  "masked_select": (ValueError, lambda _x, _img: _x.masked_select(Tensor([True, False])), "masked_select", [(2, 3), (2,), "bool"]),
  "take_along_dim": (IndexError, lambda _x, _img: _x.take_along_dim(Tensor([[0]]), 5), "take_along_dim", [(2, 3)]),
  "sort": (IndexError, lambda _x, _img: _x.sort(5), "sort", [(2, 3)]),
  "topk": (IndexError, lambda _x, _img: _x.topk(5), "topk", [(2, 3), "k (5)"]),
  "cumsum": (IndexError, lambda _x, _img: _x.cumsum(3), "cumsum", [(2, 3)]),
  "cummax": (IndexError, lambda _x, _img: _x.cummax(-3), "cummax", [(2, 3)]),
  "logcumsumexp": (IndexError, lambda _x, _img: _x.logcumsumexp(9), "logcumsumexp", [(2, 3)]),
  "tril": (ValueError, lambda _x, _img: Tensor.ones(3).tril(), "tril", [(3,)]),
  "roll": (IndexError, lambda _x, _img: _x.roll(1, 4), "roll", [(2, 3)]),
  "diag": (ValueError, lambda _x, _img: Tensor.ones(2, 2, 2).diag(), "diag", [(2, 2, 2)]),
  "trace": (ValueError, lambda _x, _img: Tensor.ones(3).trace(), "trace", [(3,)]),
  "outer": (ValueError, lambda _x, _img: _x.outer(_x), "outer", [(2, 3)]),
  "einsum": (ValueError, lambda _x, _img: Tensor.einsum("ij,jk->ik", _x, _x), "einsum", [(2, 3)]),
  "one_hot": (TypeError, lambda _x, _img: Tensor([1.5]).one_hot(3), "one_hot", [(1,), "float32"]),
  "repeat_interleave": (ValueError, lambda _x, _img: _x.repeat_interleave(-1), "repeat_interleave", [(2, 3)]),
  "meshgrid": (ValueError, lambda _x, _img: Tensor.meshgrid(_x), "meshgrid", [(2, 3)]),
  "unique": (IndexError, lambda _x, _img: _x.unique(dim=5), "unique", [(2, 3)]),
  "lerp": (ValueError, lambda _x, _img: _x.lerp(Tensor.ones(4), 0.5), "lerp", [(2, 3), (4,)]),
  "atan2": (ValueError, lambda _x, _img: _x.atan2(Tensor.ones(4)), "atan2", [(2, 3), (4,)]),
  "hypot": (ValueError, lambda _x, _img: _x.hypot(Tensor.ones(3, 3)), "hypot", [(2, 3), (3, 3)]),
  "fmod": (ValueError, lambda _x, _img: _x.fmod(Tensor.ones(5)), "fmod", [(2, 3), (5,)]),
  "idiv": (ValueError, lambda _x, _img: Tensor([1, 2]).idiv(Tensor([1, 2, 3])), "idiv", [(2,), (3,), "int64"]),
  "frac": (TypeError, lambda _x, _img: Tensor([1]).frac(), "frac", [(1,), "int64"]),
  "lshift": (TypeError, lambda _x, _img: _x << 1, "lshift", [(2, 3), "float32"]),
  "norm": (IndexError, lambda _x, _img: _x.norm(dim=3), "norm", [(2, 3)]),
  "nan_to_num": (TypeError, lambda _x, _img: _x.nan_to_num(nan="a"), "nan_to_num", [(2, 3)]),
  "cross": (ValueError, lambda _x, _img: Tensor.ones(2, 4).cross(Tensor.ones(2, 4)), "cross", [(2, 4)]),
  "cdist": (ValueError, lambda _x, _img: _x.cdist(Tensor.ones(2, 4)), "cdist", [(2, 3), (2, 4)]),
  "glu": (RuntimeError, lambda _x, _img: _x.glu(1), "glu", [(2, 3)]),
  "bernoulli": (ValueError, lambda _x, _img: Tensor.ones(3).bernoulli(p=2.0), "bernoulli", [(3,)]),
}

@pytest.mark.parametrize("name", list(API_BAD_CALLS))
def test_api_bad_calls(device, name):
  exc, fn, op, needles = API_BAD_CALLS[name]
  line = fn.__code__.co_firstlineno   # the line of the table entry: the user's call
  with pytest.raises(exc) as e:
    fn(Tensor.ones(2, 3), Tensor.ones(1, 3, 4, 4))   # made on the test device
  msg = str(e.value)
  assert msg.startswith(op + ":"), f"the message must start with the op name {op!r}: {msg}"
  for n in needles: assert str(n) in msg, f"{n!r} not in message: {msg}"
  assert f"{THIS_FILE}:{line}" in msg, f"user line {THIS_FILE}:{line} not in message: {msg}"

def test_index_ops_on_different_devices(device):
  # an index (or src) on another device: RuntimeError naming the op and both devices, at the call
  other = "PYTHON" if device == "CPU" else "CPU"
  x, i = Tensor.ones(2, 3), Tensor([[0, 1]], device=other)
  check_error(RuntimeError, lambda: x[i[0]], "getitem", device, other)
  check_error(RuntimeError, lambda: x.gather(1, i), "gather", device, other)
  check_error(RuntimeError, lambda: x.scatter(1, i, 1.0), "scatter", device, other)
  check_error(RuntimeError, lambda: x.scatter(1, Tensor([[0, 1]]), Tensor.ones(1, 2, device=other)), "scatter", device, other)
  check_error(RuntimeError, lambda: x.index_select(1, i[0]), "index_select", device, other)
  check_error(RuntimeError, lambda: x.index_add(1, i[0], Tensor.ones(2, 2)), "index_add", device, other)
  check_error(RuntimeError, lambda: x.take_along_dim(i, 1), "take_along_dim", device, other)

# ------------------------------------------------------------------ Python numbers that do not fit the dtype
from petagrad.dtype import DTypeOverflowError
from petagrad.tensor import IntegerDivisionByZeroError

def test_int_overflow_in_data(device):
  # like torch, ints never wrap into a dtype: the exception is both a RuntimeError and an OverflowError (torch raises either)
  msg = check_error(OverflowError, lambda: Tensor([2**70]), "Tensor", "int64", "without overflow")
  assert isinstance(pytest.raises(RuntimeError, lambda: Tensor([2**70])).value, DTypeOverflowError)
  check_error(RuntimeError, lambda: Tensor([1, 2**63]), "Tensor", "9223372036854775808", "int64")
  check_error(RuntimeError, lambda: Tensor([300], dtype=dtypes.uint8), "Tensor", "300", "uint8")
  check_error(RuntimeError, lambda: Tensor([-1], dtype=dtypes.uint32), "Tensor", "-1", "uint32")
  check_error(RuntimeError, lambda: Tensor(300, dtype=dtypes.uint8), "Tensor", "300", "uint8")
  check_error(RuntimeError, lambda: Tensor([[1.0], [1e20]], dtype=dtypes.int32), "Tensor", "int32")
  check_error(RuntimeError, lambda: Tensor([float("nan")], dtype=dtypes.int64), "Tensor", "nan")
  check_error(OverflowError, lambda: Tensor([2**1100], dtype=dtypes.float64), "Tensor", "1101 bits")
  assert "range is" in msg
  # the edges fit, floats that overflow float16 become inf as in torch (data, not an error), floats truncate into ints
  assert Tensor([2**63 - 1, -2**63]).tolist() == [2**63 - 1, -2**63]
  assert Tensor([2**64 - 1], dtype=dtypes.uint64).tolist() == [2**64 - 1]
  assert Tensor([1e6, -1e6], dtype=dtypes.float16).tolist() == [float("inf"), float("-inf")]
  assert Tensor([2.7, -2.7], dtype=dtypes.int32).tolist() == [2, -2]

def test_int_overflow_in_fill_values(device):
  # full, arange, randint, linspace and every scalar written into a tensor are checked like torch's fill values
  check_error(OverflowError, lambda: Tensor.full((2,), 2**64), "full", "65 bits", "int64")
  check_error(RuntimeError, lambda: Tensor.full((2,), 300, dtype=dtypes.uint8), "full", "300", "uint8")
  check_error(RuntimeError, lambda: Tensor.full((2,), 1e6, dtype=dtypes.float16), "full", "float16")   # torch raises here too
  check_error(RuntimeError, lambda: Tensor.ones(2, dtype=dtypes.int8).full_like(300), "full", "int8")
  check_error(RuntimeError, lambda: Tensor.arange(2**63), "arange", "elements")
  check_error(RuntimeError, lambda: Tensor.arange(2**62, 2**63 + 5, 2**61), "arange", "int64")
  check_error(RuntimeError, lambda: Tensor.arange(300, dtype=dtypes.uint8), "arange", "299", "uint8")
  check_error(RuntimeError, lambda: Tensor.randint(3, low=0, high=300, dtype=dtypes.uint8), "randint", "299", "uint8")
  check_error(RuntimeError, lambda: Tensor.linspace(0, 300, 3, dtype=dtypes.uint8), "linspace", "300", "uint8")
  i8 = Tensor([1, 2], dtype=dtypes.int8)
  check_error(RuntimeError, lambda: i8.masked_fill(Tensor([True, False]), 1000), "masked_fill", "1000", "int8")
  check_error(RuntimeError, lambda: i8.clamp(max=1000), "clip", "1000", "int8")
  check_error(RuntimeError, lambda: i8.pad((1, 1), value=1000), "pad", "1000", "int8")
  check_error(RuntimeError, lambda: Tensor([True, False]).where(i8, 1000), "where", "1000", "int8")
  check_error(RuntimeError, lambda: i8.__setitem__(0, 1000), "setitem", "1000")
  check_error(RuntimeError, lambda: i8.scatter(0, Tensor([0]), 1000), "scatter", "1000")
  check_error(RuntimeError, lambda: i8.index_fill(0, Tensor([0]), 1000), "index_fill", "1000")
  check_error(RuntimeError, lambda: Tensor.empty(2, dtype=dtypes.int8).assign(1000), "assign", "1000")
  check_error(TypeError, lambda: Tensor.full((2,), "a"), "full", "fill_value", "str")
  assert Tensor.full((2,), float("inf"), dtype=dtypes.float16).tolist() == [float("inf")] * 2

def test_int_overflow_in_scalar_operands(device):
  x = Tensor([1, 2])
  check_error(OverflowError, lambda: x + 2**70, "add", "71 bits", "int64")
  check_error(OverflowError, lambda: 2**64 * x, "mul", "int64")
  check_error(OverflowError, lambda: x.maximum(-2**70), "maximum", "int64")
  check_error(OverflowError, lambda: Tensor([1.0]) + 2**1100, "add", "float32")
  check_error(OverflowError, lambda: Tensor([True]) + 2**70, "add", "int64")
  check_error(OverflowError, lambda: Tensor([1, 2], dtype=dtypes.uint8) != 2**70, "ne", "uint8")
  # in the 64-bit range a scalar operand wraps into the tensor's dtype exactly as torch wraps it (test_ops pins this)
  t8 = torch.tensor([1, -2], dtype=torch.int8)
  assert (Tensor([1, -2], dtype=dtypes.int8) + 1000).tolist() == (t8 + 1000).tolist()
  assert (Tensor([1, -2], dtype=dtypes.int8) < 1000).tolist() == (t8 < 1000).tolist()
  assert (Tensor([1, 2], dtype=dtypes.int32) & 0xFFFFFFFF).tolist() == [1, 2]
  # arithmetic may overflow a float to inf, as in torch
  assert (Tensor([2.0], dtype=dtypes.float16) * 1e6).tolist() == [float("inf")]

def test_int_division_by_zero(device):
  # a divisor known to be 0 at the call (a Python 0, a constant tensor not realized yet) raises like torch's
  # "RuntimeError: ZeroDivisionError"; the exception is a RuntimeError and a ZeroDivisionError
  x, z = Tensor([5, -7], dtype=dtypes.int32), Tensor.zeros(2, dtype=dtypes.int32)
  check_error(ZeroDivisionError, lambda: x // 0, "floordiv", "division by zero", "int32")
  check_error(RuntimeError, lambda: x % 0, "remainder", "division by zero")
  check_error(RuntimeError, lambda: x.div(0, rounding_mode="trunc"), "div", "division by zero")
  check_error(RuntimeError, lambda: x.div(z, rounding_mode="floor"), "div", "division by zero")
  check_error(RuntimeError, lambda: x.floordiv(z), "floordiv", "division by zero")
  check_error(RuntimeError, lambda: x.remainder(Tensor.zeros(1, dtype=dtypes.int32)), "remainder", "division by zero")
  check_error(RuntimeError, lambda: x.fmod(0), "fmod", "division by zero")
  check_error(RuntimeError, lambda: x.idiv(z), "idiv", "division by zero")
  check_error(RuntimeError, lambda: 5 // z, "floordiv", "division by zero")
  check_error(RuntimeError, lambda: 5 % Tensor.zeros(3, dtype=dtypes.int64).contiguous(), "remainder", "division by zero")
  check_error(RuntimeError, lambda: x // False, "floordiv", "division by zero")
  check_error(RuntimeError, lambda: Tensor([True]) // Tensor.full((1,), False), "floordiv", "division by zero")
  check_error(RuntimeError, lambda: x // Tensor.zeros(2).cast(dtypes.int32), "floordiv", "division by zero")
  with pytest.raises(IntegerDivisionByZeroError): x //= 0
  # not errors (as in torch): float division, an empty result, and nonzero divisors
  assert (Tensor([1.0]) // 0).tolist() == [float("inf")] and (x / 0).tolist() == [float("inf"), float("-inf")]
  assert (Tensor.zeros(0, dtype=dtypes.int32) // 0).shape == (0,)
  assert (x // 2).tolist() == [2, -4] and (x % Tensor.full((2,), 3, dtype=dtypes.int32)).tolist() == [2, 2]

# ------------------------------------------------------------------ sizes and shapes
def test_creation_bad_sizes(device):
  check_error(ValueError, lambda: Tensor.empty(-1), "empty", "-1")
  check_error(ValueError, lambda: Tensor.zeros(2, -3), "zeros", "-3")
  check_error(TypeError, lambda: Tensor.zeros(2.0), "zeros", "float")
  check_error(TypeError, lambda: Tensor.ones("a"), "ones", "str")
  check_error(TypeError, lambda: Tensor.full((2, None), 1.0), "full", "NoneType")
  check_error(TypeError, lambda: Tensor.zeros(True), "zeros", "bool")
  check_error(TypeError, lambda: Tensor.zeros((2, 3), 4), "zeros", "sequence")
  check_error(ValueError, lambda: Tensor.rand(-1), "rand", "-1")
  check_error(TypeError, lambda: Tensor.randn(2.5), "randn", "2.5")
  check_error(ValueError, lambda: Tensor.randint(-3), "randint", "-3")
  check_error(ValueError, lambda: Tensor.empty(2**62, 4), "empty", "elements")
  check_error(ValueError, lambda: Tensor.eye(-1), "eye", "-1")
  check_error(ValueError, lambda: Tensor.eye(2, -1), "eye", "-1")
  check_error(TypeError, lambda: Tensor.eye(2.0), "eye", "float")
  check_error(ValueError, lambda: Tensor.linspace(0, 1, -1), "linspace", "-1")
  check_error(TypeError, lambda: Tensor.linspace(0, 1, 2.5), "linspace", "2.5")
  check_error(RuntimeError, lambda: Tensor.arange(0, float("inf")), "arange", "inf")
  check_error(RuntimeError, lambda: Tensor.arange(float("nan")), "arange", "nan")
  check_error(TypeError, lambda: Tensor.arange("a"), "arange", "str")
  check_error(ValueError, lambda: Tensor.ones(2).new_zeros(-1), "new_zeros", "-1")
  check_error(TypeError, lambda: Tensor.zeros(2, dtype="float33"), "zeros", "float33")
  check_error(TypeError, lambda: Tensor.ones(2).zeros_like(dtype="nope"), "full_like", "nope")
  check_error(TypeError, lambda: Tensor.ones(2).cast("nope"), "cast", "nope")
  assert Tensor.zeros(np.int64(2), 0).shape == (2, 0) and Tensor.eye(0).shape == (0, 0)

def test_shape_ops_bad_sizes(device):
  x = Tensor.ones(2, 3)
  check_error(TypeError, lambda: x.reshape(True, 6), "reshape", "bool")
  check_error(ValueError, lambda: x.reshape(-2, -3), "reshape", "-2")
  check_error(TypeError, lambda: x.view(-1, 2.0), "reshape", "float")
  check_error(ValueError, lambda: x.reshape(None), "reshape", "into (2,)")   # None keeps dim 0 (tinygrad): (2,) does not hold 6
  check_error(TypeError, lambda: x[:, :1].expand(2, 2.0), "expand", "float")
  check_error(ValueError, lambda: x.expand(-2, 3), "expand", "-2")
  check_error(ValueError, lambda: x.expand(-1, 2, 3), "expand", "leading")
  check_error(TypeError, lambda: x.pad(((1.5, 0), None)), "pad", "1.5")
  check_error(TypeError, lambda: x.pad(None), "pad", "NoneType")
  check_error(TypeError, lambda: x.pad(1), "pad", "int")
  check_error(ValueError, lambda: x.pad((1, 0, 1, 1, 1, 1)), "pad", "even length")
  check_error(ValueError, lambda: x.pad((-4, 0)), "pad", "crops more")
  check_error(TypeError, lambda: x.shrink(((0.0, 1), None)), "shrink", "0.0")
  check_error(ValueError, lambda: x.repeat(1, -1), "repeat", "-1")
  check_error(TypeError, lambda: x.repeat(2.0, 1), "repeat", "float")
  check_error(ValueError, lambda: x.tile(-1), "tile", "-1")
  check_error(ValueError, lambda: x.unflatten(1, (2, 2)), "unflatten", "(2, 2)")
  check_error(ValueError, lambda: x.unflatten(1, ()), "unflatten", "non-empty")
  check_error(TypeError, lambda: x.unflatten(1, (3, 1.0)), "unflatten", "float")
  check_error(TypeError, lambda: x.permute(0.0, 1), "permute", "float")
  check_error(TypeError, lambda: x.split([1, 1.5], 1), "split", "float")
  check_error(ValueError, lambda: x.split(0), "split", "split_size")
  check_error(ValueError, lambda: x.chunk(0), "chunk", "chunks")
  check_error(TypeError, lambda: x.squeeze(1.5), "squeeze", "float")
  check_error(TypeError, lambda: x.flatten(0.5), "flatten", "float")
  assert x.tile(2).shape == (2, 6) and x.unflatten(1, (-1, 1)).shape == (2, 3, 1) and x.expand(4, -1, -1).shape == (4, 2, 3)

# ------------------------------------------------------------------ axis arguments and empty reductions
def test_reduction_axis_arguments(device):
  x = Tensor.ones(2, 3)
  check_error(TypeError, lambda: x.sum(axis=1.0), "sum", "float")
  check_error(TypeError, lambda: x.sum(axis="a"), "sum", "str")
  check_error(TypeError, lambda: x.sum(axis=(0, None)), "sum", "NoneType")
  check_error(TypeError, lambda: x.max(axis=True), "max", "bool")
  check_error(ValueError, lambda: x.mean(axis=[1, -1]), "mean", "repeated")
  check_error(IndexError, lambda: x.var(axis=2), "var", "out of range")
  check_error(TypeError, lambda: x.std(1.5), "std", "float")
  check_error(TypeError, lambda: x.prod(axis=1.0), "prod", "float")
  check_error(TypeError, lambda: x.any(axis=1.0), "any", "float")
  check_error(TypeError, lambda: x.min(axis=1.0), "min", "float")
  check_error(TypeError, lambda: x.logsumexp(axis=1.0), "logsumexp", "float")
  check_error(TypeError, lambda: x.softmax(1.0), "softmax", "float")
  check_error(TypeError, lambda: x.log_softmax("a"), "log_softmax", "str")
  check_error(TypeError, lambda: x.argmax(1.0), "argmax", "float")
  check_error(TypeError, lambda: x.cumsum(1.0), "cumsum", "float")
  check_error(TypeError, lambda: x.norm(dim=1.5), "norm", "float")
  check_error(TypeError, lambda: x.layernorm(axis=1.5), "layernorm", "float")
  check_error(TypeError, lambda: x.var(1, correction="a"), "var", "correction")
  check_error(IndexError, lambda: Tensor(3.0).sum(1), "sum", "out of range")
  assert Tensor(3.0).sum(0).item() == 3.0 and Tensor(3.0).sum(-1).item() == 3.0   # a 0-d tensor takes dim 0 / -1, like torch

# empty inputs give what torch gives (shapes with a 0)
EMPTY_OPS = {
  "softmax_empty_dim": ([(3, 0)], lambda x: x.softmax(1)),
  "softmax_empty_rows": ([(0, 3)], lambda x: x.softmax(1)),
  "log_softmax_empty_dim": ([(3, 0)], lambda x: x.log_softmax(-1)),
  "logsumexp_empty_dim": ([(3, 0)], lambda x: x.logsumexp(1)),
  "logsumexp_empty_all": ([(0,)], lambda x: x.logsumexp(0)),
  "logsumexp_empty_keepdim": ([(2, 0, 3)], lambda x: x.logsumexp(1, keepdim=True)),
  "max_nonempty_dim": ([(0, 3)], lambda x: x.amax(1)),
  "argmax_nonempty_dim": ([(0, 3)], lambda x: x.argmax(1)),
  "cumsum_empty": ([(3, 0)], lambda x: x.cumsum(1)),
  "cumprod_empty": ([(0,)], lambda x: x.cumprod(0)),
  "logcumsumexp_empty": ([(3, 0)], lambda x: x.logcumsumexp(1)),
  "mean_empty": ([(0,)], lambda x: x.mean()),
  "mean_empty_dim": ([(3, 0)], lambda x: x.mean(1)),
  "var_empty_dim": ([(3, 0)], lambda x: x.var(1)),
  "std_empty": ([(0, 2)], lambda x: x.std(0)),
  "sum_prod_empty": ([(0,)], lambda x: x.sum() + x.prod()),
  "matmul_zero_inner": ([(3, 0), (0, 4)], lambda x, y: x @ y),
  "matmul_zero_rows": ([(0, 3), (3, 4)], lambda x, y: x @ y),
}

@pytest.mark.parametrize("name", list(EMPTY_OPS))
def test_empty_inputs_like_torch(device, name):
  shapes, fn = EMPTY_OPS[name]
  helper_test_op(shapes, fn)

def test_empty_nn_inputs_like_torch(device):
  F = torch.nn.functional
  # attention with zero keys gives zeros (torch), with zero queries an empty result
  helper_test_op([(2, 3, 4), (2, 0, 4), (2, 0, 5)], F.scaled_dot_product_attention, lambda q, k, v: q.scaled_dot_product_attention(k, v))
  helper_test_op([(2, 0, 4), (2, 3, 4), (2, 3, 5)], F.scaled_dot_product_attention, lambda q, k, v: q.scaled_dot_product_attention(k, v))
  helper_test_op([(0, 3, 5, 5), (2, 3, 3, 3)], F.conv2d, lambda x, w: x.conv2d(w))
  helper_test_op([(0, 4)], lambda x: F.layer_norm(x, (4,)), lambda x: x.layer_norm((4,)))
  helper_test_op([(0, 3)], lambda x: F.batch_norm(x, None, None, training=True), lambda x: x.batch_norm(None, None, training=True))
  helper_test_op([(0, 4, 2)], lambda x: F.group_norm(x, 2), lambda x: x.group_norm(2))
  helper_test_op([(0, 3)], lambda x: F.cross_entropy(x, torch.zeros(0, dtype=torch.long), reduction="sum"),
                 lambda x: x.cross_entropy(Tensor.zeros(0, dtype=dtypes.int64), reduction="sum"))
  # an empty batch in training leaves the running statistics alone, like torch
  rm, rv = Tensor.zeros(3).contiguous().realize(), Tensor.ones(3).contiguous().realize()
  assert Tensor.ones(0, 3).batch_norm(rm, rv, training=True).shape == (0, 3)
  assert rm.tolist() == [0.0] * 3 and rv.tolist() == [1.0] * 3
  from petagrad import nn
  for momentum in (0.1, None):   # the layer too (torch counts the batch in num_batches_tracked)
    bn = nn.BatchNorm1d(3, momentum=momentum)
    with nn.train(): assert bn(Tensor.ones(0, 3)).shape == (0, 3)
    assert bn.running_mean.tolist() == [0.0] * 3 and bn.running_var.tolist() == [1.0] * 3 and bn.num_batches_tracked.item() == 1

# ------------------------------------------------------------------ flags
def test_flag_values_checked_at_the_call(device):
  from petagrad.helpers import Context, DEBUG
  check_error(ValueError, lambda: Context(DEBUG="x"), "DEBUG", "integer", "'x'")
  check_error(TypeError, lambda: Context(DEBUG=2.5), "DEBUG", "float")
  check_error(TypeError, lambda: Context(DEV=3), "DEV", "string")
  check_error(ValueError, lambda: Context(DEFAULT_FLOAT="int8"), "DEFAULT_FLOAT", "int8")
  with pytest.raises(KeyError, match="unknown flag"): Context(NOT_A_FLAG=1)
  with Context(DEBUG="0"): assert DEBUG.value == 0   # a string of an int, as from the environment

@pytest.mark.parametrize("env", ["DEBUG=x", "BEAM=1.5", "DEFAULT_FLOAT=int8"])
def test_flag_env_vars_checked_at_import(env):
  import subprocess
  name, value = env.split("=")
  r = subprocess.run([sys.executable, "-c", "import petagrad"], env={**os.environ, name: value}, capture_output=True, text=True, timeout=120)
  assert r.returncode != 0, "a bad environment variable must fail the import"
  last = r.stderr.strip().splitlines()[-1]
  assert last.startswith("ValueError") and f"environment variable {name}=" in last and repr(value) in last, last

# ------------------------------------------------------------------ wrong-type arguments and bad indices
def test_wrong_type_arguments(device):
  x = Tensor.ones(2, 3)
  check_error(TypeError, lambda: x + "a", "add", "str")
  check_error(TypeError, lambda: x * [x], "mul", "list")
  check_error(TypeError, lambda: x.matmul([x.T]), "matmul", "list")
  check_error(TypeError, lambda: x.expand_as(3), "expand_as", "int")
  check_error(TypeError, lambda: x.type_as("float32"), "type_as", "str")
  check_error(TypeError, lambda: x.linear([Tensor.ones(4, 3)]), "linear", "list")
  check_error(TypeError, lambda: Tensor.stack(3), "stack", "int")   # Tensor.stack(x) is x.stack() (tinygrad): x.unsqueeze(0)
  check_error(TypeError, lambda: Tensor.stack([x, 1.0]), "stack", "float")
  check_error(TypeError, lambda: x.cat(1), "cat", "int")
  check_error(TypeError, lambda: Tensor.meshgrid(Tensor.ones(2), 3), "meshgrid", "int")
  check_error(TypeError, lambda: Tensor.einsum(x, x), "einsum", "sublist")   # (torch's sublist form: operand, [dims], ...)
  check_error(TypeError, lambda: x.where(1.0, "b"), "where", "str")
  check_error(TypeError, lambda: x.logical_and("a"), "logical_and", "str")
  check_error(TypeError, lambda: x.dropout("a"), "dropout", "str")
  check_error(TypeError, lambda: x.one_hot if False else Tensor([1]).one_hot(3.0), "one_hot", "float")
  check_error(TypeError, lambda: x.diagonal("a"), "diagonal", "str")
  check_error(TypeError, lambda: x.tril(0.5), "tril", "float")
  check_error(TypeError, lambda: x.roll(1.5, 0), "roll", "float")
  check_error(TypeError, lambda: x.quantile("a"), "quantile", "'a'")
  check_error(TypeError, lambda: x.tensordot(x.T, 1.5), "tensordot", "1.5")
  check_error(TypeError, lambda: x.hinge_embedding_loss(1.0), "hinge_embedding_loss", "target")
  check_error(TypeError, lambda: x.diff(prepend=1.0), "diff", "prepend")
  check_error(ValueError, lambda: x.cross_entropy(Tensor([0, 1]), label_smoothing="a"), "cross_entropy", "label_smoothing")
  check_error(ValueError, lambda: x.round(400), "round", "400")
  # torch-style spellings that are valid calls
  assert Tensor.cat([x, x], dim=1).shape == (2, 6) and x.clamp(max=0.5).tolist() == [[0.5] * 3] * 2
  assert Tensor.stack([x, Tensor.ones(2, 3, dtype=dtypes.int32)]).dtype == dtypes.float32   # mixed dtypes promote, like torch

def test_cat_stack_mismatches(device):
  x = Tensor.ones(2, 3)
  check_error(ValueError, lambda: x.cat(Tensor.ones(3, 3), dim=1), "cat", (2, 3), (3, 3))
  check_error(ValueError, lambda: x.cat(Tensor.ones(2, 3, 1)), "cat", (2, 3, 1))
  check_error(ValueError, lambda: Tensor(1.0).cat(Tensor(2.0)), "cat", "0-d")
  check_error(TypeError, lambda: Tensor.ones(2, dtype=dtypes.uint64).cat(Tensor.ones(2, dtype=dtypes.int64)), "cat", "uint64", "int64")
  check_error(ValueError, lambda: Tensor.stack([x, x.T]), "stack", (2, 3), (3, 2))
  check_error(ValueError, lambda: Tensor.stack([]), "stack", "at least one")
  check_error(ValueError, lambda: Tensor.cat([]), "cat", "at least one")

def test_getitem_bad_indices(device):
  x = Tensor.ones(3, 4)
  check_error(TypeError, lambda: x[1.5:], "getitem", "slice")
  check_error(TypeError, lambda: x[:, slice("a")], "getitem", "slice")
  check_error(TypeError, lambda: x["a"], "getitem", "'a'")
  check_error(IndexError, lambda: x[2**70], "getitem", str(2**70))
  check_error(IndexError, lambda: x[None, None, 5], "getitem", "5")
  check_error(IndexError, lambda: x[Tensor(5)], "getitem", "index 5")   # a constant index is known at the call
  check_error(IndexError, lambda: x[Tensor.full((2,), -4)], "getitem", "-4")
  check_error(IndexError, lambda: x[[0, 1.5]], "getitem", "float")
  check_error(IndexError, lambda: x[Tensor([0.5])], "getitem", "float32")
  check_error(ValueError, lambda: x[::0], "getitem", "step")
  check_error(TypeError, lambda: x.__setitem__(0, "a"), "setitem", "str")
  check_error(ValueError, lambda: x.__setitem__(0, Tensor.ones(5)), "setitem", (5,))

def test_gather_scatter_bad_calls(device):
  x, i = Tensor.ones(3, 4), Tensor([[0, 1]])
  check_error(TypeError, lambda: x.gather(1, Tensor([[0.0, 1.0]])), "gather", "integer")
  check_error(TypeError, lambda: x.gather(1, [[0, 1]]), "gather", "integer")
  check_error(ValueError, lambda: x.gather(1, Tensor([0, 1])), "gather", "dims")
  check_error(IndexError, lambda: x.gather(1, Tensor([[4]])), "gather", "index 4")
  check_error(IndexError, lambda: x.gather(2, i), "gather", "axis 2")
  check_error(TypeError, lambda: x.scatter(1, i.float(), 1.0), "scatter", "integer")
  check_error(ValueError, lambda: x.scatter(1, i, Tensor.ones(2)), "scatter", "src")
  check_error(ValueError, lambda: x.scatter(0, Tensor([[0, 1, 2, 0, 1]]), 1.0), "scatter", "index size 5")
  check_error(TypeError, lambda: x.scatter(1, i, "a"), "scatter", "str")
  check_error(TypeError, lambda: x.index_select(0, [0]), "index_select", "integer")

def test_nn_functional_bad_calls(device):
  x, img = Tensor.ones(2, 3), Tensor.ones(1, 4, 5, 5)
  check_error(ValueError, lambda: img.conv2d(Tensor.ones(2, 2, 3, 3), groups=3), "conv2d", "groups=3")
  check_error(ValueError, lambda: img.conv2d(Tensor.ones(3, 2, 3, 3), groups=2), "conv2d", "divisible by groups")
  check_error(ValueError, lambda: img.conv2d(Tensor.ones(2, 4, 3, 3), groups=0), "conv2d", "groups")
  check_error(ValueError, lambda: x.dropout(2), "dropout", "2")
  check_error(ValueError, lambda: x.dropout(-0.1), "dropout", "-0.1")
  check_error(ValueError, lambda: img.interpolate(size=(0, 3)), "interpolate", "(0, 3)")
  check_error(ValueError, lambda: img.interpolate(size=(2.5, 3)), "interpolate", "2.5")
  check_error(ValueError, lambda: img.interpolate(size=-1), "interpolate", "-1")
  check_error(ValueError, lambda: img.interpolate(size=(3,)), "interpolate", "(3,)")
  check_error(ValueError, lambda: img.interpolate(scale_factor=0), "interpolate", "scale_factor")
  check_error(ValueError, lambda: img.interpolate(size=3, mode=["nearest"]), "interpolate", "mode")
  check_error(IndexError, lambda: Tensor([-1, 2]).one_hot(3), "one_hot", "-1")
  check_error(ValueError, lambda: Tensor([1]).one_hot(-2), "one_hot", "-2")
  check_error(ValueError, lambda: Tensor.ones(3).pad((1, 1, 1, 1)), "pad", "even length")

def test_nn_layer_bad_inputs(device):
  from petagrad import nn
  check_error(ValueError, lambda: nn.Linear(3, 4)(Tensor.ones(2, 5)), "Linear", "(2, 5)", "in_features=3")
  check_error(ValueError, lambda: nn.Linear(3, 4)(Tensor.ones(())), "Linear", "()")
  check_error(TypeError, lambda: nn.Linear(3, 4)([Tensor.ones(3)]), "Linear", "list")
  check_error(ValueError, lambda: nn.Linear(-1, 4), "Linear", "in_features")
  check_error(TypeError, lambda: nn.Linear(2.0, 4), "Linear", "float")
  check_error(ValueError, lambda: nn.Conv2d(3, 4, 3)(Tensor.ones(1, 2, 5, 5)), "conv2d", "2 channels", (1, 2, 5, 5))
  check_error(ValueError, lambda: nn.Conv2d(3, 4, 3)(Tensor.ones(3, 5)), "conv2d", (3, 5))
  check_error(ValueError, lambda: nn.Conv2d(3, 4, 3)(Tensor.ones(1, 3, 2, 2)), "conv2d", "larger")
  check_error(ValueError, lambda: nn.Conv2d(3, 4, 0), "Conv2d", "kernel_size")
  check_error(TypeError, lambda: nn.Conv2d(3, 4, 2.5), "Conv2d", "kernel_size")
  check_error(ValueError, lambda: nn.Conv2d(3, 4, 3, groups=0), "Conv2d", "groups")
  check_error(ValueError, lambda: nn.Conv2d(3, 4, 3, groups=2), "Conv2d", "divisible")
  check_error(ValueError, lambda: nn.Conv2d(3, 4, 3, stride=0), "Conv2d", "stride")
  check_error(ValueError, lambda: nn.Conv2d(3, 4, 3, padding="bogus"), "Conv2d", "bogus")
  check_error(TypeError, lambda: nn.Embedding(3, 4)(Tensor([1.0])), "Embedding", "float32")
  check_error(IndexError, lambda: nn.Embedding(3, 4)(Tensor([0, 3])), "Embedding", "index 3")
  check_error(ValueError, lambda: nn.Embedding(3, 4, padding_idx=5), "Embedding", "padding_idx")
  check_error(ValueError, lambda: nn.BatchNorm2d(3)(Tensor.ones(2, 4, 2, 2)), "BatchNorm2d", "expected input (N, 3")
  check_error(ValueError, lambda: nn.BatchNorm2d(3)(Tensor.ones(2, 3)), "BatchNorm2d", "4-d")
  check_error(ValueError, lambda: nn.BatchNorm1d(3)(Tensor.ones(2, 3, 2, 2)), "BatchNorm1d", "2-d or 3-d")
  check_error(ValueError, lambda: nn.LayerNorm(3)(Tensor.ones(2, 4)), "layer_norm", "(3,)")
  check_error(ValueError, lambda: nn.LayerNorm(-3), "LayerNorm", "-3")
  check_error(ValueError, lambda: nn.GroupNorm(2, 3), "GroupNorm", "divisible")
  check_error(ValueError, lambda: nn.Dropout(2), "Dropout", "2")
  check_error(ValueError, lambda: nn.LSTMCell(3, 4)(Tensor.ones(2, 5)), "LSTMCell", "input_size=3")
  mha = nn.MultiheadAttention(4, 2)
  check_error(ValueError, lambda: mha(Tensor.ones(3, 2, 5), Tensor.ones(3, 2, 4), Tensor.ones(3, 2, 4)), "MultiheadAttention", "query", (3, 2, 5))
  check_error(ValueError, lambda: nn.MultiheadAttention(4, 3), "MultiheadAttention", "divisible")
