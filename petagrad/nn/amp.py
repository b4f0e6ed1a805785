"""Dynamic loss scaling for float16 training (torch.amp.GradScaler's algorithm), decided on the device.

    opt = nn.optim.AdamW(params, lr=1e-3)        # float16 params get float32 master weights automatically
    scaler = nn.optim.GradScaler()
    for x, y in batches:
      opt.zero_grad()
      loss = model(x).cross_entropy(y)
      scaler.scale(loss).backward()             # gradients of loss * scale: small ones no longer flush to 0
      scaler.unscale_(opt)                      # optional: before clip_grad_norm_, to clip true gradients
      nn.optim.clip_grad_norm_(params, 1.0)
      scaler.step(opt)                          # unscales (if not done), skips the step if any grad is inf/nan
      scaler.update()                           # inf/nan: scale *= backoff_factor; growth_interval clean steps: *= growth_factor

Nothing here reads a value back to Python: the skip is a `where` inside the step's kernels, and the scale
lives in a 0-d float32 buffer, so the whole loop works inside TinyJit. Unscaled gradients are float32.
bfloat16 has float32's range and rarely needs loss scaling; `enabled=False` makes every method a no-op.
"""
from __future__ import annotations
import math
from typing import Any
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.nn._inplace import write, commit

class GradScaler:
  def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5, growth_interval: int = 2000,
               enabled: bool = True, device: str | None = None):
    if growth_factor <= 1 or not 0 < backoff_factor < 1: raise ValueError(f"need growth_factor > 1 and 0 < backoff_factor < 1, got {growth_factor}, {backoff_factor}")
    self.growth_factor, self.backoff_factor, self.growth_interval, self.enabled = growth_factor, backoff_factor, growth_interval, enabled
    self._scale = Tensor([float(init_scale)], dtype=dtypes.float32, device=device).reshape(())
    self._growth_tracker = Tensor([0], dtype=dtypes.int32, device=device).reshape(())
    self._found_inf: Tensor | None = None
    self._unscaled: set[int] = set()

  def scale(self, outputs: Tensor) -> Tensor:
    """outputs * scale (backward of the result gives scaled gradients)."""
    if not self.enabled: return outputs
    return outputs * self._scale.to(outputs.device).cast(outputs.dtype)

  def unscale_(self, optimizer: Any) -> Tensor | None:
    """Divide the gradients of optimizer's parameters by the scale (lazily, as float32) and record whether any
    is inf/nan (one fused reduction). Returns that flag (a lazy 0-d bool tensor)."""
    if not self.enabled: return None
    if id(optimizer) in self._unscaled: raise RuntimeError("unscale_() has already been called on this optimizer since the last update()")
    inv = 1.0 / self._scale
    grads = []
    for p in optimizer.params:
      if p.grad is None: continue
      p.grad = p.grad.float() * inv.to(p.grad.device)
      grads.append(p.grad)
    bad = [g.detach().isfinite().logical_not().any().cast(dtypes.float32) for g in grads]
    found = (sum(bad[1:], bad[0]) > 0) if bad else Tensor.full((), False, dtype=dtypes.bool, device=self._scale.device)
    self._found_inf = found if self._found_inf is None else (self._found_inf | found)
    self._unscaled.add(id(optimizer))
    return found

  def step(self, optimizer: Any) -> None:
    """Unscale (unless unscale_ ran) and step the optimizer, unless a gradient is inf/nan (decided on the device)."""
    if not self.enabled:
      optimizer.step()
      return
    if id(optimizer) not in self._unscaled: self.unscale_(optimizer)
    assert self._found_inf is not None
    optimizer.step(skip=self._found_inf)

  def update(self, new_scale: float | None = None) -> None:
    """Adjust the scale for the next iteration: backoff after an inf/nan, growth after growth_interval clean steps."""
    if not self.enabled: return
    if new_scale is not None:
      write(self._scale, Tensor([float(new_scale)], dtype=dtypes.float32, device=self._scale.device).reshape(()))
      commit(self._scale)
    elif self._found_inf is not None:
      found = self._found_inf
      tracker = self._growth_tracker + 1
      grow = tracker >= self.growth_interval
      grown = self._scale * self.growth_factor
      grown = grown.isfinite().where(grown, self._scale)
      write(self._scale, found.where(self._scale * self.backoff_factor, grow.where(grown, self._scale)))
      write(self._growth_tracker, (found | grow).where(0, tracker))
      commit(self._scale, self._growth_tracker)
    self._found_inf, self._unscaled = None, set()

  def get_scale(self) -> float:
    """The current scale as a Python float (reads the device)."""
    return float(self._scale.item()) if self.enabled else 1.0
  def get_growth_tracker(self) -> int: return int(self._growth_tracker.item())
  def is_enabled(self) -> bool: return self.enabled
  def state_dict(self) -> dict[str, Any]:
    return {"scale": self.get_scale(), "growth_factor": self.growth_factor, "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval, "_growth_tracker": self.get_growth_tracker()} if self.enabled else {}
  def load_state_dict(self, state_dict: dict[str, Any]) -> None:
    """Restore what state_dict() returned (also torch.amp.GradScaler's): the scale and growth tracker are written
    in place (a TinyJit that captured the step keeps working), the factors and interval replaced.

    >>> s = GradScaler(init_scale=8.0); t = GradScaler(); t.load_state_dict(s.state_dict()); t.get_scale()
    8.0
    """
    if not self.enabled: return
    if not isinstance(state_dict, dict) or "scale" not in state_dict:
      raise TypeError(f"GradScaler.load_state_dict: expected what state_dict() returns (a dict with 'scale'), got {state_dict!r:.80}")
    for k in ("growth_factor", "backoff_factor", "growth_interval"):
      if k in state_dict: setattr(self, k, state_dict[k])
    write(self._scale, Tensor([float(state_dict["scale"])], dtype=dtypes.float32, device=self._scale.device).reshape(()))
    write(self._growth_tracker, Tensor([int(state_dict.get("_growth_tracker", 0))], dtype=dtypes.int32, device=self._growth_tracker.device).reshape(()))
    commit(self._scale, self._growth_tracker)
