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

# ------------------------------------------------------------------ the ops of the full Tensor API: bad calls
# each entry: (exception, call, op named first in the message, texts that must appear: operand shapes, dtypes, values)
API_BAD_CALLS = {
  "conv2d_channels": (ValueError, lambda _x, _img: _img.conv2d(Tensor.ones(2, 4, 3, 3)), "conv2d", [(1, 3, 4, 4), (2, 4, 3, 3), "float32"]),
  "conv3d_weight": (ValueError, lambda _x, _img: Tensor.ones(1, 2, 3, 3, 3).conv3d(Tensor.ones(1, 2, 2, 2)), "conv3d", [(1, 2, 3, 3, 3), (1, 2, 2, 2)]),
  "conv1d_weight": (ValueError, lambda _x, _img: Tensor.ones(1, 2, 5).conv1d(Tensor.ones(1, 2, 2, 2)), "conv1d", [(1, 2, 5), (1, 2, 2, 2)]),
  "conv_transpose2d": (ValueError, lambda _x, _img: _img.conv_transpose2d(Tensor.ones(4, 2, 3, 3)), "conv_transpose2d", [(1, 3, 4, 4), (4, 2, 3, 3)]),
  "max_pool2d": (ValueError, lambda _x, _img: _img.max_pool2d(kernel_size=(9, 9)), "max_pool2d", [(1, 3, 4, 4)]),
  "avg_pool2d": (ValueError, lambda _x, _img: _img.avg_pool2d(kernel_size=0), "avg_pool2d", [(1, 3, 4, 4)]),
  "adaptive_avg_pool2d": (ValueError, lambda _x, _img: _img.adaptive_avg_pool2d((2, 2, 2)), "adaptive_avg_pool2d", [(1, 3, 4, 4)]),
  "interpolate": (ValueError, lambda _x, _img: _img.interpolate((8, 8), mode="cubic"), "interpolate", [(1, 3, 4, 4), "cubic"]),
  "pad_reflect": (ValueError, lambda _x, _img: _img.pad((5, 5), mode="reflect"), "pad", [(1, 3, 4, 4)]),
  "cross_entropy": (ValueError, lambda _x, _img: _x.cross_entropy(Tensor([0, 1, 2])), "cross_entropy", [(2, 3), (3,), "int64"]),
  "cross_entropy_target_range": (IndexError, lambda _x, _img: _x.cross_entropy(Tensor([0, 3])), "cross_entropy", [(2, 3), (2,), "int64", "target 3 is out of bounds"]),
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
  "sdpa": (ValueError, lambda _x, _img: Tensor.ones(2, 3, 4).scaled_dot_product_attention(Tensor.ones(2, 3, 5), Tensor.ones(2, 3, 5)), "scaled_dot_product_attention", [(2, 3, 4), (2, 3, 5)]),
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
  "norm_nuc": (NotImplementedError, lambda _x, _img: _x.norm("nuc"), "norm", [(2, 3), "'nuc'"]),
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
