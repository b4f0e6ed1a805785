"""Normalization: layernorm/layer_norm, rms_norm, batchnorm/batch_norm, instance_norm, group_norm, normalize."""
from __future__ import annotations
from petagrad.helpers import prod
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import _fail, _is_int, _resolve_axis, _shapes, _check_tensor, _check_axes, axis_keywords
_FLOAT_EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}

class NormMixin(TensorMixin):
  __slots__ = ()

  def layernorm(self, axis=-1, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) over `axis` (int or tuple), no affine (tinygrad's Tensor.layernorm)."""
    x = self._float("layernorm")
    _check_axes("layernorm", axis, self)
    y = x - x.mean(axis, keepdim=True)
    return y * (y * y).mean(axis, keepdim=True).add(eps).rsqrt()
  def layer_norm(self, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.layer_norm: normalize over the trailing dims `normalized_shape`, then weight and bias."""
    op = "layer_norm"
    ns = _shapes(op, normalized_shape, self)
    if not ns or len(ns) > self.ndim or self.shape[self.ndim - len(ns):] != ns:
      raise _fail(ValueError, op, f"normalized_shape {ns} must match the trailing dims of the input {self.shape}", self)
    for name, p in (("weight", weight), ("bias", bias)):
      if p is not None:
        _check_tensor(op, name, p, self)
        if p.shape != ns: raise _fail(ValueError, op, f"{name} must have shape {ns}, got {p.shape}", self, p)
    x = self.layernorm(tuple(range(-len(ns), 0)), eps)
    if weight is not None: x = x * weight
    return x + bias if bias is not None else x
  def rms_norm(self, normalized_shape=None, weight: Tensor | None = None, eps: float | None = None, axis=None) -> Tensor:
    """torch.nn.functional.rms_norm: x / sqrt(mean(x^2) + eps) over the trailing dims `normalized_shape` (or `axis`;
    default: the last dim), times weight. eps None: the dtype's machine epsilon (torch)."""
    op = "rms_norm"
    x = self._float(op)
    if normalized_shape is not None and axis is not None: raise _fail(ValueError, op, "give normalized_shape or axis, not both", self)
    if axis is not None: axes = _check_axes(op, axis, self)
    else:
      ns = (self.shape[-1],) if normalized_shape is None else _shapes(op, normalized_shape, self)
      if not ns or len(ns) > self.ndim or self.shape[self.ndim - len(ns):] != ns:
        raise _fail(ValueError, op, f"normalized_shape {ns} must match the trailing dims of the input {self.shape}", self)
      axes = tuple(range(-len(ns), 0))
    e = _FLOAT_EPS.get(x.dtype.name, 2.0 ** -23) if eps is None else eps
    out = x * (x * x).mean(axes, keepdim=True).add(e).rsqrt()
    if weight is not None:
      _check_tensor(op, "weight", weight, self)
      out = out * weight
    return out
  def batchnorm(self, weight: Tensor | None, bias: Tensor | None, mean: Tensor, invstd: Tensor, axis=1) -> Tensor:
    """tinygrad's Tensor.batchnorm: (x - mean) * weight * invstd + bias, the 1-d params broadcast along `axis`."""
    axes = (axis,) if _is_int(axis) else tuple(axis)
    axes = tuple(_resolve_axis("batchnorm", a, self.ndim, self) for a in axes)
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    want = tuple(self.shape[a] for a in axes)
    for name, t in (("weight", weight), ("bias", bias), ("mean", mean), ("invstd", invstd)):
      if t is None: continue
      _check_tensor("batchnorm", name, t, self)
      if t.shape not in (want, shape) and t.numel() != 1:
        raise _fail(ValueError, "batchnorm", f"{name} must have shape {want} (the input's dims {axes}), got {t.shape}", self, t)
    def r(t): return t.reshape(shape) if t.ndim == len(axes) and t.shape != shape else t
    x = self - r(mean)
    if weight is not None: x = x * r(weight)
    ret = x * r(invstd)
    return ret + r(bias) if bias is not None else ret
  def batch_norm(self, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None, bias: Tensor | None = None,
                 training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.batch_norm on (N, C, *). training: normalize with the batch statistics and update the
    running stats in place (running_var with the unbiased variance); otherwise use the running stats."""
    op = "batch_norm"
    if self.ndim < 2: raise _fail(ValueError, op, f"input must be (N, C, *), got shape {self.shape}", self)
    C = self.shape[1]
    for name, p in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
      if p is not None:
        _check_tensor(op, name, p, self)
        if p.shape != (C,): raise _fail(ValueError, op, f"{name} must have shape ({C},), got {p.shape}", self, p)
    x = self._float(op)
    axes = (0,) + tuple(range(2, self.ndim))
    shape = (1, C) + (1,) * (self.ndim - 2)
    if training:
      n = prod(self.shape[a] for a in axes)
      if n == 1: raise _fail(ValueError, op, f"expected more than 1 value per channel when training, got input shape {self.shape}", self)
      mean = x.mean(axes)
      var = (x - mean.reshape(shape)).square().mean(axes)
      if n == 0: running_mean = running_var = None   # an empty batch: an empty result, the running stats stay (torch)
      if running_mean is not None: running_mean.assign((running_mean * (1 - momentum) + mean.detach() * momentum).cast(running_mean.dtype))
      if running_var is not None: running_var.assign((running_var * (1 - momentum) + var.detach() * (momentum * n / (n - 1))).cast(running_var.dtype))
    else:
      if running_mean is None or running_var is None:
        raise _fail(ValueError, op, "running_mean and running_var are required when training=False", self)
      mean, var = running_mean, running_var
    return x.batchnorm(weight, bias, mean, (var + eps).rsqrt(), axis=1)
  def instance_norm(self, running_mean: Tensor | None = None, running_var: Tensor | None = None, weight: Tensor | None = None,
                    bias: Tensor | None = None, use_input_stats: bool = True, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.instance_norm: normalize each (sample, channel) plane over its spatial dims."""
    op = "instance_norm"
    if self.ndim < 3: raise _fail(ValueError, op, f"input must be (N, C, *spatial), got shape {self.shape}", self)
    N, C = self.shape[:2]
    for name, p in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight), ("bias", bias)):
      if p is not None:
        _check_tensor(op, name, p, self)
        if p.shape != (C,): raise _fail(ValueError, op, f"{name} must have shape ({C},), got {p.shape}", self, p)
    x = self._float(op)
    axes = tuple(range(2, self.ndim))
    shape = (1, C) + (1,) * (self.ndim - 2)
    if use_input_stats:
      n = prod(self.shape[2:])
      mean = x.mean(axes, keepdim=True)
      var = (x - mean).square().mean(axes, keepdim=True)
      if running_mean is not None:
        running_mean.assign((running_mean * (1 - momentum) + mean.detach().reshape(N, C).mean(0) * momentum).cast(running_mean.dtype))
      if running_var is not None and n > 1:
        running_var.assign((running_var * (1 - momentum) + var.detach().reshape(N, C).mean(0) * (momentum * n / (n - 1))).cast(running_var.dtype))
      y = (x - mean) * (var + eps).rsqrt()
    else:
      if running_mean is None or running_var is None:
        raise _fail(ValueError, op, "running_mean and running_var are required when use_input_stats=False", self)
      y = (x - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    if weight is not None: y = y * weight.reshape(shape)
    return y + bias.reshape(shape) if bias is not None else y
  def group_norm(self, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """torch.nn.functional.group_norm: normalize over (channels of a group, *spatial) per sample, then per-channel affine."""
    op = "group_norm"
    if self.ndim < 2: raise _fail(ValueError, op, f"input must be (N, C, *), got shape {self.shape}", self)
    N, C = self.shape[:2]
    if not _is_int(num_groups) or num_groups < 1 or C % num_groups:
      raise _fail(ValueError, op, f"num_groups ({num_groups!r}) must be a positive int that divides the channels ({C})", self)
    for name, p in (("weight", weight), ("bias", bias)):
      if p is not None:
        _check_tensor(op, name, p, self)
        if p.shape != (C,): raise _fail(ValueError, op, f"{name} must have shape ({C},), got {p.shape}", self, p)
    x = self._float(op).reshape(N, num_groups, (C // num_groups) * prod(self.shape[2:])).layernorm(-1, eps).reshape(self.shape)
    shape = (1, C) + (1,) * (self.ndim - 2)
    if weight is not None: x = x * weight.reshape(shape)
    return x + bias.reshape(shape) if bias is not None else x
  @axis_keywords
  def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """torch.nn.functional.normalize: x / max(||x||_p, eps) along dim (axis= works too). A zero vector gives 0 with
    torch's finite gradient (upstream / eps): the norm's own gradient is 0 where the norm is 0, not 0 / 0.

    >>> Tensor([[0.0, 0.0], [3.0, 4.0]]).normalize(dim=1).tolist()
    [[0.0, 0.0], [0.6000000238418579, 0.800000011920929]]
    """
    x = self._float("normalize")
    _check_axes("normalize", dim, x)
    n = x.norm(p=p, dim=dim, keepdim=True)   # any p (inf too); its gradient is 0 at a zero vector, as torch's
    return x / n.clamp_min(eps)   # clamp_min: the gradient passes at n == eps, as torch's
