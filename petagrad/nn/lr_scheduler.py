"""Learning-rate schedulers with torch.optim.lr_scheduler's semantics, computed in closed form in Python.

A scheduler writes each param group's lr: into its 0-d Tensor (a copy into the buffer: no recompile, and a
TinyJit replay reads the new value) or, if the group holds a Python float, by replacing the float. Call
`sched.step()` after `opt.step()`, outside a jitted function (it runs a tiny copy kernel of its own).

    opt = nn.optim.SGD(params, lr=0.1, momentum=0.9)
    sched = nn.optim.CosineAnnealingLR(opt, T_max=100)
    for _ in range(100):
      ...; opt.step(); sched.step()
"""
from __future__ import annotations
import bisect, math
from typing import Any, Callable, Sequence
from petagrad.tensor import Tensor

def _lr_value(group: dict[str, Any]) -> float:
  """A group's current lr as a Python float: the exact value last written by the optimizer or a scheduler,
  unless the tensor was changed since (then its float32 value)."""
  lr = group["lr"]
  if not isinstance(lr, Tensor): return float(lr)
  v = float(lr.item())
  exact = group.get("_lr_value")
  return exact if exact is not None and Tensor([exact], dtype=lr.dtype).item() == v else v

def set_lr(group: dict[str, Any], value: float) -> None:
  """Set a param group's learning rate, in place when it is a Tensor."""
  lr = group["lr"]
  if isinstance(lr, Tensor):
    lr.assign(Tensor([float(value)], dtype=lr.dtype, device=lr.device).reshape(lr.shape))   # realized now, in place
    group["_lr_value"] = float(value)
  else: group["lr"] = float(value)

class LRScheduler:
  """Base class: subclasses give `get_lr()` for `self.last_epoch` from `self.base_lrs` (the groups'
  "initial_lr", set from their lr when the first scheduler is made, like torch)."""
  def __init__(self, optimizer: Any, last_epoch: int = -1):
    self.optimizer = optimizer
    for g in optimizer.param_groups:
      if "initial_lr" not in g:
        if last_epoch != -1: raise KeyError("param 'initial_lr' is not specified in param_groups when resuming an optimizer")
        g["initial_lr"] = _lr_value(g)
    self.base_lrs: list[float] = [g["initial_lr"] for g in optimizer.param_groups]
    self.last_epoch = last_epoch
    self._last_lr: list[float] = []
    self.step()
  def get_lr(self) -> list[float]: raise NotImplementedError
  def step(self) -> None:
    """Advance one epoch (or iteration) and write the new learning rates."""
    self.last_epoch += 1
    lrs = self.get_lr()
    for g, lr in zip(self.optimizer.param_groups, lrs): set_lr(g, lr)
    self._last_lr = list(lrs)
  def get_last_lr(self) -> list[float]: return self._last_lr
  def state_dict(self) -> dict[str, Any]:
    """The scheduler's plain-Python state (like torch: every attribute but the optimizer and functions, such as
    LambdaLR's lambdas); a nested scheduler (LinearWarmup's `after`) as its own state dict.

    >>> from petagrad import Tensor
    >>> from petagrad.nn.optim import SGD
    >>> opt = SGD([Tensor.ones(2, requires_grad=True)], lr=1.0)
    >>> s = StepLR(opt, step_size=2); s.step(); s.step()
    >>> s.state_dict()["last_epoch"], s.get_last_lr()
    (2, [0.1])
    """
    out: dict[str, Any] = {}
    for k, v in self.__dict__.items():
      if k == "optimizer" or callable(v) or (isinstance(v, list) and v and all(callable(f) for f in v)): continue
      out[k] = v.state_dict() if isinstance(v, LRScheduler) else v
    return out
  def load_state_dict(self, state_dict: dict[str, Any]) -> None:
    """Restore what state_dict() returned. It does not write the learning rates: the optimizer's own
    load_state_dict restores them (like torch)."""
    if not isinstance(state_dict, dict) or "last_epoch" not in state_dict:
      raise TypeError(f"{type(self).__name__}.load_state_dict: expected what state_dict() returns (a dict with 'last_epoch'), got {state_dict!r:.80}")
    for k, v in state_dict.items():
      cur = self.__dict__.get(k)
      if isinstance(cur, LRScheduler): cur.load_state_dict(v)
      else: self.__dict__[k] = v

class LambdaLR(LRScheduler):
  """lr = base_lr * lr_lambda(epoch) (one function, or one per group)."""
  def __init__(self, optimizer, lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]], last_epoch: int = -1):
    n = len(optimizer.param_groups)
    self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
    if len(self.lr_lambdas) != n: raise ValueError(f"expected {n} lr_lambdas, got {len(self.lr_lambdas)}")
    super().__init__(optimizer, last_epoch)
  def get_lr(self): return [b * f(self.last_epoch) for b, f in zip(self.base_lrs, self.lr_lambdas)]

class StepLR(LRScheduler):
  """lr = base_lr * gamma ** (epoch // step_size)."""
  def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
    self.step_size, self.gamma = step_size, gamma
    super().__init__(optimizer, last_epoch)
  def get_lr(self): return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]

class MultiStepLR(LRScheduler):
  """lr = base_lr * gamma ** (number of milestones <= epoch)."""
  def __init__(self, optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1):
    self.milestones, self.gamma = sorted(milestones), gamma
    super().__init__(optimizer, last_epoch)
  def get_lr(self): return [b * self.gamma ** bisect.bisect_right(self.milestones, self.last_epoch) for b in self.base_lrs]

class ExponentialLR(LRScheduler):
  """lr = base_lr * gamma ** epoch."""
  def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
    self.gamma = gamma
    super().__init__(optimizer, last_epoch)
  def get_lr(self): return [b * self.gamma ** self.last_epoch for b in self.base_lrs]

class CosineAnnealingLR(LRScheduler):
  """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2."""
  def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
    self.T_max, self.eta_min = T_max, eta_min
    super().__init__(optimizer, last_epoch)
  def get_lr(self):
    return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2 for b in self.base_lrs]

class LinearLR(LRScheduler):
  """lr = base_lr * factor, the factor going linearly from start_factor to end_factor over total_iters epochs."""
  def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1):
    if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1: raise ValueError(f"factors must be in (0, 1] and [0, 1], got {start_factor}, {end_factor}")
    self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
    super().__init__(optimizer, last_epoch)
  def get_lr(self):
    f = self.start_factor + (self.end_factor - self.start_factor) * min(self.last_epoch, self.total_iters) / self.total_iters
    return [b * f for b in self.base_lrs]

class LinearWarmup(LRScheduler):
  """Linear warmup for warmup_steps steps (lr = base_lr * (start_factor + (1 - start_factor) * step / warmup_steps)),
  then the schedule `after` (any closed-form scheduler of this module, made on the same optimizer), counted
  from the end of the warmup; without `after`, base_lr.

      sched = LinearWarmup(opt, 100, after=CosineAnnealingLR(opt, T_max=900))"""
  def __init__(self, optimizer, warmup_steps: int, after: LRScheduler | None = None, start_factor: float = 0.0, last_epoch: int = -1):
    if warmup_steps < 1: raise ValueError(f"warmup_steps must be >= 1, got {warmup_steps}")
    self.warmup_steps, self.after, self.start_factor = warmup_steps, after, start_factor
    super().__init__(optimizer, last_epoch)
  def get_lr(self):
    e = self.last_epoch
    if e < self.warmup_steps: return [b * (self.start_factor + (1 - self.start_factor) * e / self.warmup_steps) for b in self.base_lrs]
    if self.after is None: return list(self.base_lrs)
    self.after.last_epoch = e - self.warmup_steps
    return self.after.get_lr()

class OneCycleLR(LRScheduler):
  """torch.optim.lr_scheduler.OneCycleLR (lr only): from max_lr/div_factor up to max_lr over pct_start of the
  steps, then down to initial_lr/final_div_factor (three_phase: up, back down to the initial lr, then to the
  minimum), annealed with cos or linear. Stepping past total_steps raises ValueError like torch.
  cycle_momentum defaults to False here (torch: True): momentum is a Python float that would be baked into
  the kernels, so cycling it would recompile every step; True writes group["momentum"] / group["betas"]."""
  def __init__(self, optimizer, max_lr: float | Sequence[float], total_steps: int | None = None, epochs: int | None = None,
               steps_per_epoch: int | None = None, pct_start: float = 0.3, anneal_strategy: str = "cos", cycle_momentum: bool = False,
               base_momentum: float = 0.85, max_momentum: float = 0.95, div_factor: float = 25.0, final_div_factor: float = 1e4,
               three_phase: bool = False, last_epoch: int = -1):
    if total_steps is None:
      if epochs is None or steps_per_epoch is None: raise ValueError("give total_steps, or epochs and steps_per_epoch")
      total_steps = epochs * steps_per_epoch
    if total_steps <= 0: raise ValueError(f"total_steps must be positive, got {total_steps}")
    if anneal_strategy not in ("cos", "linear"): raise ValueError(f"anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
    self.total_steps, self.cycle_momentum = total_steps, cycle_momentum
    self.anneal = self._cos if anneal_strategy == "cos" else self._linear
    n = len(optimizer.param_groups)
    max_lrs = list(max_lr) if isinstance(max_lr, (list, tuple)) else [max_lr] * n
    for g, m in zip(optimizer.param_groups, max_lrs):
      if last_epoch == -1:
        g["initial_lr"], g["max_lr"], g["min_lr"] = m / div_factor, m, m / div_factor / final_div_factor
      if cycle_momentum: g["max_momentum"], g["base_momentum"] = max_momentum, base_momentum
    p = float(pct_start * total_steps)
    self.phases = [(p - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                   (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
    if three_phase:
      self.phases = [(p - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                     (2 * p - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                     (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
    super().__init__(optimizer, last_epoch)
  @staticmethod
  def _cos(start: float, end: float, pct: float) -> float: return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
  @staticmethod
  def _linear(start: float, end: float, pct: float) -> float: return (end - start) * pct + start
  def get_lr(self):
    t = self.last_epoch
    if t > self.total_steps: raise ValueError(f"OneCycleLR stepped {t} times, more than total_steps={self.total_steps}")
    lrs = []
    for g in self.optimizer.param_groups:
      start = 0.0
      for i, (end, lr0, lr1, m0, m1) in enumerate(self.phases):
        if t <= end or i == len(self.phases) - 1:
          pct = (t - start) / (end - start)
          lrs.append(self.anneal(g[lr0], g[lr1], pct))
          if self.cycle_momentum:
            m = self.anneal(g[m0], g[m1], pct)
            if "betas" in g: g["betas"] = (m, *g["betas"][1:])
            else: g["momentum"] = m
          break
        start = end
    return lrs
