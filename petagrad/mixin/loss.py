"""Losses: cross_entropy/nll_loss (class indices or probabilities), binary cross entropy (with logits), mse, l1,
smooth l1, huber, kl_div, cosine similarity, pairwise distance, margin ranking, hinge embedding."""
from __future__ import annotations
from petagrad.dtype import dtypes
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import _fail, _resolve_axis, _broadcast_shape, _check_tensor, _int_arg
from petagrad.mixin.indexing import _known_values

def _reduce_loss(op: str, loss, reduction: str, self):
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  if reduction == "mean": return loss.mean()
  raise _fail(ValueError, op, f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}", self)

def _check_reduction(op: str, reduction: str, self, extra: tuple[str, ...] = ()) -> None:
  if reduction not in ("none", "mean", "sum") + extra:
    raise _fail(ValueError, op, f"reduction must be one of {('none', 'mean', 'sum') + extra}, got {reduction!r}", self)

def _check_smoothing(op: str, label_smoothing, self) -> None:
  if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)) or not 0.0 <= label_smoothing <= 1.0:
    raise _fail(ValueError, op, f"label_smoothing must be a float in [0, 1], got {label_smoothing!r}", self)

class LossMixin(TensorMixin):
  __slots__ = ()

  # ------------------------------------------------------------ classification
  def _class_target(self, op: str, target: Tensor) -> tuple[int, bool]:
    """(class dim, target holds probabilities) with torch's shape rules; raises on a bad target. A target with the
    input's shape holds probabilities whatever its dtype (tinygrad's `Y.one_hot(C)` is an int one-hot): class indices
    never have that shape."""
    _check_tensor(op, "target", target, self)
    if self.ndim == 0: raise _fail(ValueError, op, "input must have at least 1 dim (classes)", self, target)
    cd = 0 if self.ndim == 1 else 1
    if target.shape == self.shape: return cd, True
    if target.dtype.is_float or target.dtype.is_bool:
      raise _fail(TypeError, op,
        f"target must be class indices (an integer tensor) or probabilities with the input's shape {self.shape}, got {target.shape} {target.dtype}",
        self, target)
    want = self.shape[:cd] + self.shape[cd + 1:]
    if target.shape != want:
      raise _fail(ValueError, op, f"class-index target must have shape {want} for input {self.shape}, got {target.shape}", self, target)
    return cd, False
  def _class_weight(self, op: str, weight: Tensor | None, cd: int, target=None):
    if weight is None: return None
    _check_tensor(op, "weight", weight, self)
    C = self.shape[cd]
    if weight.shape != (C,): raise _fail(ValueError, op, f"weight must have shape ({C},) (one per class), got {weight.shape}", self, weight)
    return weight.reshape((C,) + (1,) * (self.ndim - cd - 1))
  def _index_nll(self, op: str, logp: Tensor, target: Tensor, cd: int, w, ignore_index: int, reduction: str, smoothing: float = 0.0) -> Tensor:
    T = type(self)
    C = self.shape[cd]
    known = _known_values(target)   # class indices already in memory are checked like PyTorch does, others when computed
    if known is not None:
      bad = next((v for v in known if v != ignore_index and not 0 <= v < C), None)
      if bad is not None: raise _fail(IndexError, op, f"target {bad} is out of bounds for {C} classes (ignore_index={ignore_index})", self, target)
    elif target.numel():
      t64 = target.cast(dtypes.int64)
      target = target._checked((t64 == ignore_index) | ((t64 >= 0) & (t64 < C)), IndexError, op,
                               f"a target is out of bounds for {C} classes (ignore_index={ignore_index})", self, target)
    hot = target.unsqueeze(cd) == T.arange(C, device=self.device).cast(target.dtype).reshape((C,) + (1,) * (self.ndim - cd - 1))
    valid = target != ignore_index
    wl = logp * w if w is not None else logp
    loss = -hot.where(wl, 0.0).sum(cd)
    if smoothing: loss = (1 - smoothing) * loss - (smoothing / C) * wl.sum(cd)
    loss = valid.where(loss, 0.0)
    if reduction == "none": return loss
    if reduction == "sum": return loss.sum()
    denom = valid.where(hot.where(w, 0.0).sum(cd), 0.0).sum() if w is not None else valid.sum().cast(loss.dtype)
    return loss.sum() / denom
  def cross_entropy(self, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                    label_smoothing: float = 0.0) -> Tensor:
    """torch.nn.functional.cross_entropy on logits (N, C, *d) or (C,): target is class indices (N, *d) or probabilities
    with the input's shape (any dtype: an int one-hot is cast to the input's float dtype). Out-of-range class indices
    (other than ignore_index) raise IndexError when their values are known at the call (see the index rules in
    docs/ops.md) and contribute 0 when they are lazy."""
    op = "cross_entropy"
    cd, probs = self._class_target(op, target)
    _check_reduction(op, reduction, self)
    _check_smoothing(op, label_smoothing, self)
    w = self._class_weight(op, weight, cd)
    logp = self._float(op).log_softmax(cd)
    C = self.shape[cd]
    if probs:
      t = target.cast(logp.dtype)   # an int or bool one-hot counts as probabilities (tinygrad)
      if label_smoothing: t = t * (1 - label_smoothing) + label_smoothing / C
      loss = -(logp * t * w if w is not None else logp * t).sum(cd)
      return _reduce_loss(op, loss, reduction, self)
    return self._index_nll(op, logp, target, cd, w, ignore_index, reduction, label_smoothing)
  def nll_loss(self, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """torch.nn.functional.nll_loss: self holds log-probabilities (N, C, *d) or (C,); target class indices."""
    op = "nll_loss"
    cd, probs = self._class_target(op, target)
    if probs:
      want = self.shape[:cd] + self.shape[cd + 1:]
      raise _fail(ValueError if target.dtype.is_int else TypeError, op, f"target must be class indices of shape {want} (an integer "
                  f"tensor), got the input's shape {target.shape} {target.dtype}", self, target)
    _check_reduction(op, reduction, self)
    return self._index_nll(op, self._float(op), target, cd, self._class_weight(op, weight, cd), ignore_index, reduction)
  def sparse_categorical_crossentropy(self, Y: Tensor, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
    """tinygrad's loss: cross entropy of logits (*, C), classes on the LAST axis (unlike cross_entropy), with integer
    class indices Y of shape (*) (an LM's (B, T, C) logits and (B, T) tokens). Targets equal to ignore_index (an int)
    are left out of the sum and of the mean's count; out-of-range ones raise like cross_entropy's.

    >>> round(Tensor([[[0.0, 1.0, 2.0]]]).sparse_categorical_crossentropy(Tensor([[2]])).item(), 4)
    0.4076
    """
    op = "sparse_categorical_crossentropy"
    _check_tensor(op, "Y", Y, self)
    if self.ndim == 0: raise _fail(ValueError, op, "logits must have at least 1 dim (classes, last)", self, Y)
    if not Y.dtype.is_int: raise _fail(TypeError, op, f"Y must hold integer class indices, got {Y.dtype}", self, Y)
    if Y.shape != self.shape[:-1]:
      raise _fail(ValueError, op, f"Y must have shape {self.shape[:-1]} (the logits' shape without the class axis, the last), got {Y.shape}", self, Y)
    ignore_index = _int_arg(op, "ignore_index", ignore_index, self, minimum=None)
    _check_reduction(op, reduction, self)
    _check_smoothing(op, label_smoothing, self)
    return self._index_nll(op, self._float(op).log_softmax(-1), Y, self.ndim - 1, None, ignore_index, reduction, label_smoothing)
  def _pair_loss(self, op: str, target: Tensor) -> Tensor:
    _check_tensor(op, "target", target, self)
    if target.shape != self.shape:
      raise _fail(ValueError, op, f"target shape {target.shape} must match the input shape {self.shape}", self, target)
    return target
  def binary_cross_entropy(self, target: Tensor, weight: Tensor | None = None, reduction: str = "mean") -> Tensor:
    """torch.nn.functional.binary_cross_entropy on probabilities (logs are clamped at -100 like torch)."""
    op = "binary_cross_entropy"
    self._pair_loss(op, target)
    _check_reduction(op, reduction, self)
    x = self._float(op)
    loss = -(target * x.log().maximum(-100.0) + (1 - target) * (1 - x).log().maximum(-100.0))
    if weight is not None: loss = loss * weight
    return _reduce_loss(op, loss, reduction, self)
  def binary_crossentropy(self, Y: Tensor, reduction: str = "mean") -> Tensor: return self.binary_cross_entropy(Y, reduction=reduction)
  def binary_cross_entropy_with_logits(self, target: Tensor, weight: Tensor | None = None, reduction: str = "mean",
                                       pos_weight: Tensor | None = None) -> Tensor:
    """torch.nn.functional.binary_cross_entropy_with_logits (numerically stable; pos_weight weighs the positives)."""
    op = "binary_cross_entropy_with_logits"
    self._pair_loss(op, target)
    _check_reduction(op, reduction, self)
    x = self._float(op)
    sp = (-x.abs()).exp().add(1).log() + (-x).maximum(0.0)   # log(1 + exp(-x))
    if pos_weight is not None:
      lw = (pos_weight - 1) * target + 1
      loss = (1 - target) * x + lw * sp
    else: loss = (1 - target) * x + sp
    if weight is not None: loss = loss * weight
    return _reduce_loss(op, loss, reduction, self)
  def binary_crossentropy_logits(self, Y: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    return self.binary_cross_entropy_with_logits(Y, reduction=reduction, pos_weight=pos_weight)

  # ------------------------------------------------------------ regression and distances
  def mse_loss(self, target: Tensor, reduction: str = "mean") -> Tensor:
    self._pair_loss("mse_loss", target); _check_reduction("mse_loss", reduction, self)
    return _reduce_loss("mse_loss", (self - target).square(), reduction, self)
  def l1_loss(self, target: Tensor, reduction: str = "mean") -> Tensor:
    self._pair_loss("l1_loss", target); _check_reduction("l1_loss", reduction, self)
    return _reduce_loss("l1_loss", (self - target).abs(), reduction, self)
  def smooth_l1_loss(self, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    op = "smooth_l1_loss"
    self._pair_loss(op, target); _check_reduction(op, reduction, self)
    if beta < 0: raise _fail(ValueError, op, f"beta must be >= 0, got {beta}", self)
    d = (self - target).abs()
    loss = d if beta == 0 else (d < beta).where(0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce_loss(op, loss, reduction, self)
  def huber_loss(self, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    op = "huber_loss"
    self._pair_loss(op, target); _check_reduction(op, reduction, self)
    if delta <= 0: raise _fail(ValueError, op, f"delta must be > 0, got {delta}", self)
    d = (self - target).abs()
    return _reduce_loss(op, (d < delta).where(0.5 * d * d, delta * (d - 0.5 * delta)), reduction, self)
  def kl_div(self, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """torch.nn.functional.kl_div: self holds log-probabilities; reduction also 'batchmean' (sum / batch size)."""
    op = "kl_div"
    _check_tensor(op, "target", target, self)
    _broadcast_shape(op, self, target)
    _check_reduction(op, reduction, self, ("batchmean",))
    if log_target: loss = target.exp() * (target - self)
    else:
      safe = (target > 0).where(target, 1.0)
      loss = (target > 0).where(target * (safe.log() - self), (target == 0).where(-target * self, float("nan")))
    if reduction == "batchmean": return loss.sum() / (loss.shape[0] if loss.ndim else 1)
    return _reduce_loss(op, loss, reduction, self)
  def cosine_similarity(self, other: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 * x2) / (max(|x1|, eps) * max(|x2|, eps)) along dim (inputs broadcast), like torch."""
    op = "cosine_similarity"
    _check_tensor(op, "other", other, self)
    shape = _broadcast_shape(op, self, other)
    a, b = self._float(op).expand(shape), other._float(op).expand(shape)
    d = _resolve_axis(op, dim, len(shape), self)
    na = a.square().sum(d, keepdim=True).sqrt().maximum(eps)
    nb = b.square().sum(d, keepdim=True).sqrt().maximum(eps)
    return ((a / na) * (b / nb)).sum(d)
  def pairwise_distance(self, other: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    _check_tensor("pairwise_distance", "other", other, self)
    d = (self - other + eps).abs()
    return (d ** p).sum(-1, keepdim=keepdim) ** (1 / p)
  def margin_ranking_loss(self, other: Tensor, target: Tensor, margin: float = 0.0, reduction: str = "mean") -> Tensor:
    _check_tensor("margin_ranking_loss", "other", other, self); _check_tensor("margin_ranking_loss", "target", target, self)
    _check_reduction("margin_ranking_loss", reduction, self)
    return _reduce_loss("margin_ranking_loss", (-target * (self - other) + margin).relu(), reduction, self)
  def hinge_embedding_loss(self, target: Tensor, margin: float = 1.0, reduction: str = "mean") -> Tensor:
    _check_tensor("hinge_embedding_loss", "target", target, self)
    _check_reduction("hinge_embedding_loss", reduction, self)
    loss = (target == 1).where(self, 0.0) + (target == -1).where((margin - self).relu(), 0.0)
    return _reduce_loss("hinge_embedding_loss", loss, reduction, self)
