"""Activation functions: relu and its relatives, sigmoid, silu, gelu, softplus, the shrink functions, glu, softmin."""
from __future__ import annotations
import functools, math
from typing import Any
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.uop.gradient import custom_backward
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import _fail, _resolve_axis, axis_keywords

GELU_C, GELU_A = math.sqrt(2 / math.pi), 0.044715   # the tanh form: 0.5 x (1 + tanh(C (x + A x^3)))

def _gelu_backward(T: Any, ctx: UOp, node: UOp) -> tuple[UOp | None, ...]:
  """GELU's derivative in closed form (node = CUSTOM_GRAD(value, x), arg ("gelu", approximate)), as PyTorch computes it:
  the tanh form 0.5 (1 + t) + 0.5 x (1 - t^2) C (1 + 3 A x^2) with t its tanh, the exact form Phi(x) + x phi(x).
  Autograd through the tanh's sigmoid built more (a GPT MLP's backward kernel: 110 -> 90 statements per element), and
  through erf's polynomial it is the derivative of the approximation, not of erf."""
  g, x = T(ctx), T(node.src[1])
  if node.arg[1] == "tanh":
    t = (GELU_C * (x + GELU_A * x * x * x)).tanh()
    d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * (GELU_C * (1 + 3 * GELU_A * x * x))
  else: d = 0.5 * (1 + (x * (1 / math.sqrt(2))).erf()) + x * (-0.5 * x * x).exp() * (1 / math.sqrt(2 * math.pi))
  return ((g * d).uop,)

class ActivationMixin(TensorMixin):
  __slots__ = ()

  def __init_subclass__(cls, **kwargs: Any) -> None:
    super().__init_subclass__(**kwargs)
    # (the rule builds tensors of the class that combines the mixins: petagrad.tensor.Tensor)
    custom_backward.setdefault("gelu", functools.partial(_gelu_backward, cls))

  def sigmoid(self) -> Tensor:
    # one exp of -|x| (in (0, 1]): it never overflows, so no gradient becomes inf * 0 = nan
    x = self._float("sigmoid")
    pos = x >= 0
    e = pos.where(-x, x).exp()
    r = (1 + e).reciprocal()
    return pos.where(r, e * r)
  def relu(self) -> Tensor: return ((self < 0) | (self == 0)).where(0, self)   # NaN stays NaN, like PyTorch
  def silu(self) -> Tensor: return self * self.sigmoid()
  swish = silu
  def gelu(self, approximate: str = "none") -> Tensor:
    """GELU; approximate='tanh' for the tanh form (PyTorch's default is the exact erf form).

    >>> Tensor([-1.0, 0.0, 2.0]).gelu(approximate="tanh").numpy().round(4).tolist()
    [-0.1588, 0.0, 1.9546]
    """
    if approximate not in ("none", "tanh"): raise _fail(ValueError, "gelu", f"approximate must be 'none' or 'tanh', got {approximate!r}")
    x = self._float("gelu")
    if approximate == "tanh": y = 0.5 * x * (1 + (GELU_C * (x + GELU_A * x * x * x)).tanh())
    else: y = 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())
    return y._new(UOp(Ops.CUSTOM_GRAD, y.dtype, (y.uop, x.uop), ("gelu", approximate)), x)
  def elu(self, alpha: float = 1.0) -> Tensor:
    x = self._float("elu")
    return (x > 0).where(x, alpha * (x.minimum(0.0).exp() - 1))
  def celu(self, alpha: float = 1.0) -> Tensor:
    x = self._float("celu")
    # no outer minimum(0): exp(min(x, 0) / alpha) - 1 <= 0 already, and where it rounds to 0 (|x| < 7e-4 in float16)
    # the tie halved the gradient
    return x.maximum(0.0) + alpha * ((x.minimum(0.0) / alpha).exp() - 1)
  def selu(self) -> Tensor:
    alpha, scale = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return scale * self.elu(alpha)
  def leaky_relu(self, neg_slope: float = 0.01) -> Tensor:
    x = self._float("leaky_relu")
    return (x > 0).where(x, x * neg_slope)
  def relu6(self) -> Tensor: return self.relu() - (self - 6).relu()
  def hardtanh(self, min_val: float = -1.0, max_val: float = 1.0) -> Tensor: return self.clip(min_val, max_val)
  def hardsigmoid(self, alpha: float = 1 / 6, beta: float = 0.5) -> Tensor:
    """torch.nn.functional.hardsigmoid: relu6(x + 3) / 6 (alpha, beta as in tinygrad)."""
    y = alpha * self._float("hardsigmoid") + beta
    return y.relu() - (y - 1).relu()
  def hardswish(self) -> Tensor: return self * (self + 3).relu6() * (1 / 6)
  def softplus(self, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta*x)) / beta, and x where beta*x > threshold (torch)."""
    x = self._float("softplus")
    z = x * beta
    sp = z.maximum(0.0) + ((-z.abs()).exp() + 1).log()
    return (z > threshold).where(x, sp * (1 / beta))
  def softsign(self) -> Tensor: return self / (1 + self.abs())
  def logsigmoid(self) -> Tensor: return -(-self).softplus()
  def mish(self) -> Tensor: return self * self.softplus().tanh()
  def quick_gelu(self) -> Tensor: return self * (self * 1.702).sigmoid()
  @axis_keywords
  def glu(self, dim: int = -1) -> Tensor:
    d = _resolve_axis("glu", dim, self.ndim, self)
    if self.shape[d] % 2: raise _fail(RuntimeError, "glu", f"halving dimension must be even, but dimension {d} is size {self.shape[d]}", self)
    a, b = self.chunk(2, d)
    return a * b.sigmoid()
  @axis_keywords
  def softmin(self, axis: int = -1, dtype=None) -> Tensor:
    """softmax(-x) along axis (torch's dim= works too; dtype: the dtype to compute in, as torch)."""
    return (-self).softmax(axis, dtype=dtype)
  def tanhshrink(self) -> Tensor: return self - self.tanh()
  def hardshrink(self, lambd: float = 0.5) -> Tensor: return (self.abs() > lambd).where(self, 0)
  def softshrink(self, lambd: float = 0.5) -> Tensor:
    return (self > lambd).where(self - lambd, (self < -lambd).where(self + lambd, 0))
  def threshold(self, threshold: float, value: float) -> Tensor: return (self > threshold).where(self, value)
