"""Optimizers, written as plain Python over Tensors: SGD, Adam, AdamW, LAMB, LARS, Muon; OptimizerGroup (several
optimizers stepped as one); gradient clipping; and (re-exported) learning-rate schedulers and the GradScaler for
float16 training.

    opt = nn.optim.AdamW(nn.state.get_parameters(model), lr=1e-3)
    for x, y in batches:
      opt.zero_grad()
      loss = model(x).cross_entropy(y)
      loss.backward()
      Tensor.realize_all(loss, *opt.schedule_step())   # or: loss.realize(); opt.step()

How a step runs: `schedule_step()` writes every parameter and every piece of optimizer state with a lazy
assign (grads are detached), and `step()` realizes them all, together with the gradients, in ONE
`Tensor.realize_all` call. The gradients come first in that call, so every kernel that reads a parameter's
old value runs before the kernel that overwrites it. Because the schedule is built over tensors only, a
step works unchanged inside TinyJit.

A lazy loss read after the step is the loss before it, as in PyTorch: the write computes the live lazy tensors that
read a parameter's old value first, in the same schedule. Realizing it with the step (above) costs nothing extra.

Parameter groups work like torch: `SGD([{"params": a, "lr": 0.1}, {"params": b}], lr=0.01, momentum=0.9)`.
Each group's lr is kept as a 1-element float32 Tensor (shape (1,), like tinygrad's `opt.lr`) in a buffer, so
changing it (schedulers, or tinygrad-style `opt.lr.assign(opt.lr * 0.1)`) never recompiles a kernel and replays
correctly under TinyJit. `opt.lr` is the first group's; `opt.lr = 0.01` sets every group's. Setting
`group["lr"] = 0.01` (a Python float) also works; the value is then baked into the kernels.

tinygrad's state attributes are views of the same state (not copies): Adam/AdamW/LAMB `opt.m`, `opt.v` (torch's
"exp_avg", "exp_avg_sq", one per parameter), `opt.b1_t`, `opt.b2_t` (beta ** step, read from and written to the step
counter), SGD/LARS/Muon `opt.b` (the momentum buffers); `nn.state.get_state_dict(opt)` names them as tinygrad does.
State moved to another device (`opt.m[0].to_("CPU")`: tinygrad's CPU offload) is updated where it lives.

Mixed precision: float16/bfloat16 parameters get float32 master weights automatically (master_weights=None;
True/False forces it): the update runs on the float32 copy, and the parameter receives its rounded value.
Optimizer state (momentum, Adam moments) is float32 for such parameters. See GradScaler for loss scaling.
"""
from __future__ import annotations
import math
from typing import Any, Iterable, Mapping, Sequence
from petagrad.tensor import Tensor
from petagrad.uop.uop import UOp
from petagrad.uop.graph import view_buffers
from petagrad.uop.ops import Ops
from petagrad.dtype import dtypes
from petagrad.helpers import prod
from petagrad.nn._inplace import write, commit, is_buffer, own_buffers
from petagrad.nn.lr_scheduler import (LRScheduler, StepLR, MultiStepLR, CosineAnnealingLR, LinearLR, LinearWarmup, OneCycleLR,   # noqa: F401
                                      LambdaLR, ExponentialLR)
from petagrad.nn.amp import GradScaler   # noqa: F401

_LOW = (dtypes.float16, dtypes.bfloat16)

def _lr_tensor(v: float, device: str) -> Tensor:
  """A realized 1-element float32 tensor (shape (1,), tinygrad's `opt.lr`) holding v (made by a copy, not a kernel:
  no compile for a new value)."""
  return Tensor([float(v)], dtype=dtypes.float32, device=device)

class Optimizer:
  """Base class: param groups, zero_grad, step. Subclasses implement `_update(group, p, g, state)`, which
  returns the new parameter value and writes its state with `self._set(old, new)`."""
  def __init__(self, params: Iterable[Tensor] | Iterable[dict], defaults: dict[str, Any], master_weights: bool | None = None):
    params = list(params)
    if not params: raise ValueError("optimizer got an empty parameter list")
    groups = params if isinstance(params[0], dict) else [{"params": params}]
    self.defaults, self.master_weights = defaults, master_weights
    self.param_groups: list[dict[str, Any]] = []
    self.state: dict[Tensor, dict[str, Tensor]] = {}
    for g in groups: self.add_param_group(g)
    self._writes: list[Tensor] = []
    self._grads: list[Tensor] = []
    self._skip: Tensor | None = None
    self._zero_started: set[int] = set()   # ids of state tensors made as zeros by opt.m / opt.b before their first step

  def add_param_group(self, group: dict[str, Any]) -> None:
    """Add a group: {"params": [...], hyperparameter: value, ...}; missing hyperparameters come from defaults."""
    if not isinstance(group, dict) or "params" not in group: raise TypeError(f"a param group must be a dict with a 'params' key, got {group!r}")
    ps = [group["params"]] if isinstance(group["params"], Tensor) else list(group["params"])
    for p in ps:
      if not isinstance(p, Tensor): raise TypeError(f"optimizer params must be Tensors, got {type(p).__name__}")
    # tinygrad: requires_grad=None becomes True; requires_grad=False tensors (buffers) are not optimized
    for p in ps:
      if p.requires_grad is None: p.requires_grad = True
    ps = [p for p in ps if p.requires_grad]
    seen = {id(p) for g in self.param_groups for p in g["params"]}
    if any(id(p) in seen for p in ps): raise ValueError("some parameters appear in more than one parameter group")
    ps = list({id(p): p for p in ps}.values())
    g = {**self.defaults, **{k: v for k, v in group.items() if k != "params"}, "params": ps}
    # parameters must live in buffers of their own so that assign writes in place (lazy ones are realized now, together;
    # parameters sharing a buffer, which equal lazy graphs do after a plain realize, are split)
    own_buffers(ps, {id(b) for g in self.param_groups for q in g["params"] for b in view_buffers(q.uop) or []})
    if ps and not isinstance(g["lr"], Tensor):
      g["_lr_value"] = float(g["lr"])   # the exact Python value (schedulers start from it)
      g["lr"] = _lr_tensor(g["lr"], ps[0].device)
    self.param_groups.append(g)

  @property
  def params(self) -> list[Tensor]: return [p for g in self.param_groups for p in g["params"]]
  @property
  def lr(self) -> Tensor | float:
    """The first group's learning rate (tinygrad's `opt.lr`): a 1-element Tensor that `opt.lr.assign(...)` writes in
    place (or the Python float a group was given as `group["lr"] = x`)."""
    return self.param_groups[0]["lr"]
  @lr.setter
  def lr(self, value: float | Tensor) -> None:
    """`opt.lr = 0.01`: every group's learning rate, written in place."""
    from petagrad.nn.lr_scheduler import set_lr
    v = float(value.item()) if isinstance(value, Tensor) else float(value)
    for g in self.param_groups: set_lr(g, v)

  def zero_grad(self, set_to_none: bool = True) -> None:
    """Forget the gradients (set to None: the next backward creates them; set_to_none=False: zeros)."""
    for p in self.params: p.grad = None if set_to_none or p.grad is None else p.grad.zeros_like()

  def _uses_master(self, p: Tensor) -> bool:
    return self.master_weights if self.master_weights is not None else p.dtype in _LOW

  def _set(self, old: Tensor, new: Tensor) -> Tensor:
    """Write new into the state tensor old (lazily; skipped where self._skip is True). Returns old, which now
    reads as the new value."""
    if self._skip is not None: new = self._skip.where(old.detach(), new)
    write(old, new, ready=self._grads)
    self._writes.append(old)
    return old

  @staticmethod
  def _new_state(value: Tensor) -> Tensor:
    """A new state buffer whose first value is written lazily (realized with the step that first uses it)."""
    return write(Tensor.empty(*value.shape, dtype=value.dtype, device=value.device), value)

  def _state(self, state: dict[str, Tensor], name: str, like: Tensor, fill: float = 0.0) -> Tensor:
    """A per-parameter state tensor, created on first use (filled with `fill`, `like`'s shape and dtype)."""
    if name not in state: state[name] = self._new_state(Tensor.full(like.shape, fill, dtype=like.dtype, device=like.device))
    return state[name]

  def _group_step(self, group: dict[str, Any], device: str) -> Tensor:
    """The group's step counter (0-d int32 tensor), incremented once per step()."""
    if "step" not in group: group["step"] = self._new_state(Tensor.zeros((), dtype=dtypes.int32, device=device))
    return group["step"]

  def schedule_step(self, skip: Tensor | None = None) -> list[Tensor]:
    """Write the update of every parameter that has a gradient (lazily) and return the tensors to realize:
    the gradients first, then parameters and state. skip: a 0-d bool tensor; where True, nothing changes
    (GradScaler uses it to skip a step with inf/nan gradients without reading a value back to Python)."""
    grads, writes = self._schedule(skip)
    return grads + writes

  def _schedule(self, skip: Tensor | None) -> tuple[list[Tensor], list[Tensor]]:
    """schedule_step's two lists: the gradients (to realize first) and the written parameters and state."""
    self._writes, self._skip = [], skip
    grads: list[Tensor] = []
    self._grads = grads
    try:
      for group in self.param_groups:
        live = [p for p in group["params"] if p.grad is not None]
        if not live: continue
        self._begin_group(group, live[0].device)
        for p in live:
          if p.grad.shape != p.shape: raise RuntimeError(f"{type(self).__name__}: a gradient of shape {p.grad.shape} for a parameter of shape {p.shape}")
          grads.append(p.grad)
          g = p.grad.detach()
          if self._uses_master(p):
            master = self.state.setdefault(p, {}).get("master")
            if master is None: master = self.state[p]["master"] = self._new_state(p.detach().float())
            new = self._update(group, master, g.float(), self.state[p])
            self._set(master, new)
            self._set(p, master.cast(p.dtype))
          else:
            self._set(p, self._update(group, p.detach(), g.cast(p.dtype) if g.dtype != p.dtype else g, self.state.setdefault(p, {})))
      return grads, self._writes
    finally:
      self._skip, self._grads = None, []

  def step(self, skip: Tensor | None = None) -> None:
    """Update every parameter that has a gradient: one realize for the whole step (see schedule_step)."""
    commit(*self.schedule_step(skip))

  # ---------------------------------------------------------------- state dict (torch's format)

  def state_dict(self) -> dict[str, Any]:
    """The optimizer's state in torch.optim's format: {"state": {i: {name: Tensor}}, "param_groups": [{...,
    "params": [i, ...]}]}, where i numbers the parameters across the groups in order. Tensors are the live state
    tensors (like torch: not copies). A group's step counter (Adam-like optimizers keep one per group) appears as
    "step" in the state of each of its parameters, like torch's per-parameter step. Python values (lr as a float,
    betas, ...) are in "param_groups". Works before the first step too (then "state" is empty).

    >>> from petagrad import Tensor
    >>> w = Tensor.ones(2, requires_grad=True)
    >>> opt = Adam([w], lr=0.1)
    >>> _ = (w * w).sum().backward(); opt.step()
    >>> sd = opt.state_dict()
    >>> sorted(sd["state"][0]), sd["param_groups"][0]["params"], sd["param_groups"][0]["lr"]
    (['exp_avg', 'exp_avg_sq', 'step'], [0], 0.1)
    """
    from petagrad.nn.lr_scheduler import _lr_value
    state: dict[int, dict[str, Tensor]] = {}
    groups: list[dict[str, Any]] = []
    i = 0
    for g in self.param_groups:
      ids = list(range(i, i + len(g["params"])))
      for j, p in zip(ids, g["params"]):
        if p in self.state and self.state[p]:
          state[j] = dict(self.state[p])
          if isinstance(g.get("step"), Tensor): state[j]["step"] = g["step"]
      saved = {k: v for k, v in g.items() if k not in ("params", "step", "lr") and not k.startswith("_")}
      groups.append({"lr": _lr_value(g), **saved, "params": ids})
      i += len(ids)
    return {"state": state, "param_groups": groups}

  def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
    """Load what state_dict() returned (from this optimizer class, or torch.optim's with the same state names:
    numpy arrays and torch tensors are accepted). The groups must match in number and size. State tensors are
    written in place where they exist (so a TinyJit that captured the step keeps working), created otherwise;
    before the first step is fine. Hyperparameters are restored into the groups (lr into its tensor).

    >>> from petagrad import Tensor
    >>> w = Tensor.ones(2, requires_grad=True)
    >>> a = SGD([w], lr=0.1, momentum=0.9); _ = (w * w).sum().backward(); a.step()
    >>> b = SGD([w], lr=0.5, momentum=0.9); b.load_state_dict(a.state_dict())
    >>> b.state[w]["momentum_buffer"].tolist(), b.param_groups[0]["lr"].item()
    ([2.0, 2.0], 0.10000000149011612)
    """
    from petagrad.nn.lr_scheduler import set_lr
    if not isinstance(state_dict, Mapping) or "state" not in state_dict or "param_groups" not in state_dict:
      raise TypeError(f"{type(self).__name__}.load_state_dict: expected a dict with 'state' and 'param_groups' (what state_dict() returns), "
                      f"got {type(state_dict).__name__}" + (f" with keys {sorted(state_dict)}" if isinstance(state_dict, Mapping) else ""))
    saved_groups = list(state_dict["param_groups"])
    if len(saved_groups) != len(self.param_groups):
      raise ValueError(f"{type(self).__name__}.load_state_dict: the state dict has {len(saved_groups)} parameter groups, the optimizer {len(self.param_groups)}")
    by_index: dict[int, tuple[Tensor, dict[str, Any]]] = {}
    for n, (g, sg) in enumerate(zip(self.param_groups, saved_groups)):
      if len(sg["params"]) != len(g["params"]):
        raise ValueError(f"{type(self).__name__}.load_state_dict: parameter group {n} has {len(sg['params'])} parameters in the state dict, "
                         f"{len(g['params'])} in the optimizer")
      for i, p in zip(sg["params"], g["params"]): by_index[int(i)] = (p, g)
    saved_state = {int(k): v for k, v in state_dict["state"].items()}
    if unknown := sorted(set(saved_state) - set(by_index)):
      raise ValueError(f"{type(self).__name__}.load_state_dict: state for parameters {unknown}, which no parameter group lists")
    # check every shape before writing anything
    values: list[tuple[Tensor, dict[str, Any], str, Tensor]] = []
    for i, st in sorted(saved_state.items()):
      p, g = by_index[i]
      for name, v in st.items():
        t = _as_tensor(v)
        want = () if name == "step" else p.shape
        if t.shape != want and not (name == "step" and t.numel() == 1):
          raise ValueError(f"{type(self).__name__}.load_state_dict: state {name!r} of parameter {i} has shape {t.shape}, expected {want} "
                           f"(the parameter's shape is {p.shape})")
        values.append((p, g, name, t))
    writes: list[Tensor] = []
    steps_done: set[int] = set()
    counts_steps = type(self)._begin_group is not Optimizer._begin_group   # Adam-like: a step counter per group
    for p, g, name, t in values:
      if name == "step":   # one counter per group (every parameter of the group holds the same value)
        if id(g) in steps_done or not counts_steps: continue
        steps_done.add(id(g))
        t = t.reshape(()).to(p.device).cast(dtypes.int32)   # (moved first: a DISK tensor cannot cast)
        if isinstance(g.get("step"), Tensor): write(g["step"], t)
        else: g["step"] = self._new_state(t)
        writes.append(g["step"])
        continue
      st = self.state.setdefault(p, {})
      dt = st[name].dtype if name in st else (dtypes.float32 if self._uses_master(p) else p.dtype)
      t = t.to(p.device).cast(dt)
      if name in st and is_buffer(st[name]): write(st[name], t)
      else: st[name] = self._new_state(t)
      writes.append(st[name])
    commit(*writes)
    for g, sg in zip(self.param_groups, saved_groups):
      for k, v in sg.items():
        if k == "params": continue
        if k == "lr": set_lr(g, float(v))
        elif k in g and isinstance(g[k], tuple) and isinstance(v, list): g[k] = tuple(v)
        else: g[k] = v

  # ---------------------------------------------------------------- tinygrad's state attributes

  def _state_list(self, name: str, groups: Iterable[dict[str, Any]] | None = None) -> list[Tensor]:
    """The live state tensors `name` of the parameters (of `groups`, default all), in order: tinygrad's `opt.m`, `opt.v`,
    `opt.b`. A parameter without one yet gets it now, zeros (what the first step would start from), so code can
    inspect, load or move it (`opt.m[0].assign(...)`) before the first step."""
    out: list[Tensor] = []
    new: list[Tensor] = []
    for g in self.param_groups if groups is None else groups:
      for p in g["params"]:
        st = self.state.setdefault(p, {})
        if name not in st:
          dt = dtypes.float32 if self._uses_master(p) else p.dtype
          st[name] = self._new_state(Tensor.zeros(p.shape, dtype=dt, device=p.device))
          self._zero_started.add(id(st[name]))
          new.append(st[name])
        out.append(st[name])
    commit(*new)   # buffers now (one realize), so an assign or a move before the first step writes the state itself
    return out

  def _state_dict_items(self) -> dict[str, Any]:
    """What `nn.state.get_state_dict(opt)` walks: the optimizer's tensors under tinygrad's attribute names (params.0,
    lr, then m.0 / v.0 / b1_t / b2_t, or b.0), so a tinygrad checkpoint of an optimizer (`safe_save(get_state_dict(opt))`,
    then `load_state_dict(opt, ...)`) saves and restores the live state."""
    return {"params": self.params, "lr": self.lr}

  def _begin_group(self, group: dict[str, Any], device: str) -> None:
    """Per-group work before its parameters (the step counter and bias corrections of Adam-like optimizers)."""

  def _update(self, group: dict[str, Any], p: Tensor, g: Tensor, state: dict[str, Tensor]) -> Tensor:
    raise NotImplementedError

def _as_tensor(v: Any) -> Tensor:
  """A state value as a Tensor: petagrad tensors as they are, torch tensors and numpy arrays copied."""
  if isinstance(v, Tensor): return v
  if hasattr(v, "detach") and hasattr(v, "cpu"): v = v.detach().cpu().numpy()   # a torch tensor (torch is never imported here)
  try: return Tensor(v)
  except (TypeError, ValueError) as e: raise TypeError(f"optimizer state values must be tensors or arrays, got {type(v).__name__}: {e}") from None

def _lr_for(group: dict[str, Any], p: Tensor) -> Tensor | float:
  """The group's lr as a 0-d tensor on p's device (a view of its 1-element buffer: updates keep p's shape), or a float."""
  lr = group["lr"]
  if not isinstance(lr, Tensor): return lr
  if lr.shape != ():
    if lr.numel() != 1: raise ValueError(f"a param group's lr must hold one value, got a Tensor of shape {lr.shape}")
    lr = lr.reshape(())
  return lr.to(p.device) if lr.device != p.device else lr

def _to(t: Tensor, device: str) -> Tensor:
  """t on device (itself when it is there): state a user moved elsewhere (`opt.m[0].to_("CPU")`, tinygrad's CPU offload)
  is updated where it lives, and the update comes back to the parameter's device."""
  return t if t.device == device else t.to(device)

# ====================================================================== SGD

class _MomentumState(Optimizer):
  """The optimizers that keep a momentum buffer (SGD, LARS, Muon: all LARS in tinygrad), with tinygrad's `opt.b`."""
  def _momentum_buffers(self) -> list[Tensor]: return self._state_list("momentum_buffer", [g for g in self.param_groups if g["momentum"]])
  def _state_dict_items(self) -> dict[str, Any]: return {**super()._state_dict_items(), "b": self._momentum_buffers()}

  @property
  def b(self) -> list[Tensor]:
    """tinygrad's `opt.b`: the momentum buffers (torch's state "momentum_buffer"), one per parameter of the groups
    with momentum, in order; [] without momentum. The live state tensors: writing one (`assign`) changes the next
    step. Made (zeros) on first use, like tinygrad's; SGD with dampening (torch's) still starts a buffer made this way
    from the first gradient, as torch does.

    >>> from petagrad import Tensor
    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> opt = SGD([w], lr=0.1, momentum=0.9)
    >>> _ = (w * w).sum().backward(); opt.step()
    >>> opt.b[0].tolist(), opt.b[0] is opt.state[w]["momentum_buffer"]
    ([2.0, 4.0], True)
    """
    return self._momentum_buffers()

class SGD(_MomentumState):
  """torch.optim.SGD: momentum, dampening, nesterov, weight_decay (L2, added to the gradient), maximize.
  The first step copies the gradient into the momentum buffer (like torch); later steps use
  buf = momentum * buf + (1 - dampening) * g."""
  def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
               nesterov: bool = False, maximize: bool = False, master_weights: bool | None = None):
    if nesterov and (momentum <= 0 or dampening != 0): raise ValueError("nesterov momentum requires a momentum and zero dampening")
    if lr < 0 or momentum < 0 or weight_decay < 0: raise ValueError(f"invalid lr={lr}, momentum={momentum} or weight_decay={weight_decay}")
    super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov, maximize=maximize), master_weights)

  def _update(self, group, p, g, state):
    if group["maximize"]: g = -g
    if group["weight_decay"]: g = g + group["weight_decay"] * p
    if (m := group["momentum"]):
      first = "momentum_buffer" not in state
      buf = self._state(state, "momentum_buffer", p)
      # a buffer opt.b made (zeros) counts as new only where it matters, with dampening: m * 0 + g is g otherwise
      if id(buf) in self._zero_started:
        self._zero_started.discard(id(buf))
        first = bool(group["dampening"])
      # step 1: buf = g (torch); a Python branch is fine under TinyJit, which captures from the second call
      gb = _to(g, buf.device)
      self._set(buf, gb if first else m * buf + (1 - group["dampening"]) * gb)
      g = g + m * _to(buf, p.device) if group["nesterov"] else _to(buf, p.device)
    return p - _lr_for(group, p) * g

# ====================================================================== Adam family

def _betas(name: str, betas: Any, b1: float | None, b2: float | None) -> tuple[float, float]:
  """torch's betas=(b1, b2), or tinygrad's b1= / b2= keywords (either overrides its half of betas)."""
  if not isinstance(betas, (tuple, list)) or len(betas) != 2:
    raise TypeError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r} (tinygrad's b1 and b2 are keywords here: {name}(params, lr, b1=..., b2=...))")
  out = (float(betas[0]) if b1 is None else float(b1), float(betas[1]) if b2 is None else float(b2))
  if not 0 <= out[0] < 1 or not 0 <= out[1] < 1: raise ValueError(f"{name}: invalid betas {out}")
  return out

class Adam(Optimizer):
  """torch.optim.Adam (weight_decay is L2 added to the gradient; amsgrad; maximize). Bias corrections are
  computed on the device from the step counter as -expm1(step * log(beta)), accurate in float32. tinygrad's
  b1= / b2= keywords work too (Adam, AdamW, LAMB)."""
  decoupled = False
  def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
               amsgrad: bool = False, maximize: bool = False, master_weights: bool | None = None, *, b1: float | None = None, b2: float | None = None):
    betas = _betas(type(self).__name__, betas, b1, b2)
    if lr < 0 or eps < 0 or weight_decay < 0: raise ValueError(f"invalid lr={lr}, eps={eps} or weight_decay={weight_decay}")
    super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize), master_weights)

  def _begin_group(self, group, device):
    step = self._set(self._group_step(group, device), self._group_step(group, device) + 1).float()
    b1, b2 = group["betas"]
    # 1 - beta**t without cancellation: -expm1(t * log(beta)); beta == 0 gives 1
    bc1 = -(step * math.log(b1)).expm1() if b1 > 0 else step * 0 + 1
    bc2 = -(step * math.log(b2)).expm1() if b2 > 0 else step * 0 + 1
    # computed once per group in a tiny kernel of its own (contiguous): fused into the update, expm1 would run per element
    bc = Tensor.stack([bc1, bc2, bc2.sqrt()]).contiguous()
    self._bc1, self._bc2, self._sqrt_bc2 = bc[0], bc[1], bc[2]

  def _moments(self, group, p, g, state) -> tuple[Tensor, Tensor]:
    b1, b2 = group["betas"]
    m, v = self._state(state, "exp_avg", p), self._state(state, "exp_avg_sq", p)
    self._set(m, m + (_to(g, m.device) - m) * (1 - b1))              # torch: exp_avg.lerp_(grad, 1 - beta1)
    gv = _to(g, v.device)
    self._set(v, v * b2 + gv * gv * (1 - b2))
    return m, v

  def _update(self, group, p, g, state):
    if group["maximize"]: g = -g
    lr, wd = _lr_for(group, p), group["weight_decay"]
    if wd and self.decoupled: p = p * (1 - lr * wd)
    elif wd: g = g + wd * p
    m, v = self._moments(group, p, g, state)
    if group["amsgrad"]:
      vmax = self._state(state, "max_exp_avg_sq", p)
      v = self._set(vmax, vmax.maximum(_to(v, vmax.device)))
    dev = m.device   # the state's device (the parameter's, unless the state was moved)
    denom = _to(v, dev).sqrt() / _to(self._sqrt_bc2, dev) + group["eps"]
    return p - (lr / self._bc1) * _to(m / denom, p.device)

  # tinygrad's LAMB state attributes (Adam and AdamW are LAMB in tinygrad), as views of this optimizer's state
  @property
  def m(self) -> list[Tensor]:
    """tinygrad's `opt.m`: the first moments (torch's state "exp_avg"), one per parameter in order. The live state
    tensors (made, zeros, on first use): `opt.m[0].assign(x)` changes the next step, and a moment moved to another device
    (tinygrad's CPU offload) is updated there."""
    return self._state_list("exp_avg")
  @property
  def v(self) -> list[Tensor]:
    """tinygrad's `opt.v`: the second moments (torch's state "exp_avg_sq"), one per parameter in order (see `m`)."""
    return self._state_list("exp_avg_sq")
  @property
  def b1_t(self) -> Tensor:
    """tinygrad's `opt.b1_t`: beta1 ** step as a (1,) float32 tensor. petagrad keeps the step counter (torch's "step";
    the bias corrections come from it accurately), and b1_t is a live view of it: it reads the current value after every
    step, and writing it (`assign`, `replace`, `*=`, or `load_state_dict`) sets the step counter to the step whose power
    it is, so a tinygrad checkpoint of b1_t / b2_t resumes at the right step.

    >>> from petagrad import Tensor
    >>> w = Tensor([1.0], requires_grad=True)
    >>> opt = Adam([w], b1=0.5)
    >>> for _ in range(3): _ = (w * w).sum().backward(); opt.step()
    >>> opt.b1_t.tolist(), opt.param_groups[0]["step"].item()
    ([0.125], 3)
    >>> _ = opt.b1_t.assign(Tensor([0.5 ** 7])); opt.param_groups[0]["step"].item()
    7
    """
    return self._beta_power(0)
  @property
  def b2_t(self) -> Tensor:
    """tinygrad's `opt.b2_t`: beta2 ** step, a live view of the step counter (see `b1_t`)."""
    return self._beta_power(1)
  @b1_t.setter
  def b1_t(self, value: Any) -> None: self._set_beta_power(0, value)
  @b2_t.setter
  def b2_t(self, value: Any) -> None: self._set_beta_power(1, value)
  def _set_beta_power(self, which: int, value: Any) -> None:
    """`opt.b1_t = x` (and `opt.b1_t *= b1`, which ends in it): written into the view, so into the step counter."""
    if value is not (view := self._beta_power(which)): view.assign(value)
  def _beta_power(self, which: int) -> Tensor:
    views = self.__dict__.setdefault("_beta_views", {})
    if which not in views: views[which] = _BetaPower(self, which)
    return views[which]
  def _state_dict_items(self) -> dict[str, Any]:
    return {**super()._state_dict_items(), "b1_t": self.b1_t, "b2_t": self.b2_t, "m": self.m, "v": self.v}

class _BetaPower(Tensor):
  """tinygrad's LAMB `b1_t` / `b2_t` (beta ** step, shape (1,), float32) as a live view of the optimizer's step counter
  (the first group's; petagrad computes the bias corrections from the step, accurately, and keeps it for torch's
  state_dict). Reading gives the value for the current step, also after later steps (a reference held across steps
  stays current). Writing (assign, replace, in-place ops, nn.state.load_state_dict) sets every group's step counter to
  round(log(value) / log(beta)): the step a saved beta ** step belongs to. A value that underflowed to 0 (beta ** step
  below float32's range: about 1000 steps for 0.9) only says the step is at least that large, so the counter becomes at
  least that; with both b1_t and b2_t saved, the one that did not underflow gives the exact step. to_(device) leaves it
  where the step counter is (on the parameters' device)."""
  _derived = True   # (nn.state.load_state_dict writes it with assign)
  def __init__(self, opt: Adam, which: int):   # pylint: disable=super-init-not-called
    self.grad, self._leaf, self._ctx, self._requires_grad, self._lazy_key = None, False, None, False, None
    self._opt, self._which, self._src, self._cache = opt, which, None, None

  def _step(self) -> Tensor:
    g = next(g for g in self._opt.param_groups if g["params"])   # (the optimizer refuses to be made without any parameter)
    step = self._opt._group_step(g, g["params"][0].device)
    if not is_buffer(step) or step.uop.op is Ops.ASSIGN: commit(step)   # a new counter's zero (else its realize moves it under the view)
    return step
  def _beta(self) -> float: return float(next(g for g in self._opt.param_groups if g["params"])["betas"][self._which])

  @property   # type: ignore[override]
  def uop(self) -> UOp:
    step = self._step()
    if self._cache is None or self._src is not step.uop:
      t, b = step.detach().float().reshape(1), self._beta()
      val = (t * math.log(b)).exp() if b > 0 else (t == 0).where(1.0, 0.0)
      self._src, self._cache = step.uop, val.cast(dtypes.float32).uop
    return self._cache
  @uop.setter
  def uop(self, u: UOp) -> None:   # a realize hands back the computed value (of the current step)
    self._src, self._cache = self._step().uop, u

  def assign(self, x: Any) -> Tensor:
    v = x if isinstance(x, Tensor) else Tensor(x, dtype=dtypes.float32)
    if v.numel() != 1: raise ValueError(f"{type(self._opt).__name__}.b{self._which + 1}_t holds one value (beta ** step), got a tensor of shape {v.shape}")
    step, b = self._step(), self._beta()
    v = _to(v.detach().reshape(()).float(), step.device)
    if b > 0:
      # float32 beta ** t is 0 from t0 on (below 2**-149, the smallest denormal, once rounded)
      t0 = math.ceil(-150 * math.log(2) / math.log(b))
      exact = (v.log() / math.log(b)).round().minimum(2 ** 30).maximum(0).cast(dtypes.int32)
      new = (v > 0).where(exact, step.maximum(t0))
    else: new = (v > 0).where(0, step.maximum(1))   # 0 ** 0 is 1, 0 ** t is 0
    opt = self._opt
    counters = [opt._group_step(g, g["params"][0].device) for g in opt.param_groups if g["params"]]
    for c in counters: write(c, _to(new, c.device))
    commit(*counters)
    return self
  def replace(self, x: Any) -> Tensor: return self.assign(x)
  def _inplace(self, r: Tensor, op: str) -> Tensor: return self.assign(r)
  def to_(self, device: Any) -> Tensor: return self

class AdamW(Adam):
  """torch.optim.AdamW: Adam with decoupled weight decay (p *= 1 - lr * weight_decay before the update);
  default weight_decay 0.01 like torch."""
  decoupled = True
  def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.01,
               amsgrad: bool = False, maximize: bool = False, master_weights: bool | None = None, *, b1: float | None = None, b2: float | None = None):
    super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize, master_weights, b1=b1, b2=b2)

class LAMB(Adam):
  """LAMB (You et al. 2019), as in tinygrad: the Adam direction (bias-corrected) plus weight_decay * p, scaled
  per parameter by the trust ratio ||p|| / ||update|| (1 where either norm is 0). adam=True: no trust ratio."""
  def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.0,
               adam: bool = False, master_weights: bool | None = None, *, b1: float | None = None, b2: float | None = None):
    betas = _betas("LAMB", betas, b1, b2)
    Optimizer.__init__(self, params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adam=adam), master_weights)

  def _update(self, group, p, g, state):
    m, v = self._moments(group, p, g, state)
    dev = m.device
    up = _to((m / _to(self._bc1, dev)) / ((_to(v, dev) / _to(self._bc2, dev)).sqrt() + group["eps"]), p.device) + group["weight_decay"] * p
    if not group["adam"]:
      r1, r2 = p.square().sum().sqrt(), up.square().sum().sqrt()
      trust = ((r1 > 0) & (r2 > 0)).where(r1 / r2, 1.0)
      up = up * trust
    return p - _lr_for(group, p) * up

class LARS(_MomentumState):
  """LARS (You et al. 2017), as in tinygrad and MLPerf: the gradient plus weight_decay * p is scaled by the
  trust ratio trust_coefficient * ||p|| / (||g|| + weight_decay * ||p||) (1 where either norm is 0), then
  goes through SGD momentum (buf = momentum * buf + g; nesterov: g + momentum * buf), then p -= lr * buf."""
  def __init__(self, params, lr: float = 1e-3, momentum: float = 0.9, weight_decay: float = 0.0, nesterov: bool = False,
               trust_coefficient: float = 0.001, master_weights: bool | None = None):
    super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, nesterov=nesterov, trust_coefficient=trust_coefficient), master_weights)

  def _update(self, group, p, g, state):
    wd, tc = group["weight_decay"], group["trust_coefficient"]
    if tc:
      r1, r2 = p.square().sum().sqrt(), g.square().sum().sqrt()
      trust = ((r1 > 0) & (r2 > 0)).where(tc * r1 / (r2 + wd * r1), 1.0)
    else: trust = 1.0
    g = (g + wd * p) * trust
    if (m := group["momentum"]):
      buf = self._state(state, "momentum_buffer", p)
      self._zero_started.discard(id(buf))
      self._set(buf, m * buf + _to(g, buf.device))
      g = g + m * _to(buf, p.device) if group["nesterov"] else _to(buf, p.device)
    return p - _lr_for(group, p) * g

# ====================================================================== Muon

def newton_schulz(G: Tensor, steps: int, coefficients: Sequence[float], eps: float = 1e-7) -> Tensor:
  """Orthogonalize a matrix (or a batch of them, over the last two dims) with `steps` Newton-Schulz iterations of
  the odd polynomial sum_i c_i (G G^T)^i G (tinygrad's Tensor.newton_schulz), after scaling G to Frobenius norm 1
  (G / (||G|| + eps)). A tall matrix is done transposed. Muon's default coefficients (3.4445, -4.775, 2.0315) push
  every singular value near 1 (to about 0.7-1.2) in 5 steps.

  >>> from petagrad import Tensor
  >>> q = newton_schulz(Tensor([[3.0, 0.0], [0.0, 0.5]]), 10, (1.5, -0.5))   # the classic cubic: converges to U V^T
  >>> [[round(v, 3) for v in row] for row in q.tolist()]
  [[1.0, 0.0], [0.0, 1.0]]
  """
  return G.newton_schulz(steps, tuple(coefficients), eps)

class Muon(_MomentumState):
  """Muon (https://kellerjordan.github.io/posts/muon/), tinygrad's nn.optim.Muon rule and defaults: SGD momentum
  (buf = momentum * buf + g, starting from zeros; nesterov: g + momentum * buf), the result orthogonalized by
  `ns_steps` Newton-Schulz iterations on its (shape[0], -1) matrix view, then
  p -= lr * (ns + weight_decay * p) (decoupled weight decay, from the old p).

  torch.optim.Muon differs in three ways: its momentum is an average (buf.lerp_(g, 1 - momentum)), which only scales
  the matrix Newton-Schulz normalizes anyway; it scales the lr of tall matrices by sqrt(rows / cols)
  (`adjust_lr_fn=None` there means "original"; here None means no adjustment, as in tinygrad: pass
  adjust_lr_fn="original" or "match_rms_adamw" for torch's); and it takes only 2-d parameters (here any with >= 1
  dim, like tinygrad; give biases and norms to another optimizer, see OptimizerGroup). The arguments are in
  tinygrad's order; torch's names (weight_decay, momentum, nesterov, ns_coefficients, eps, ns_steps, adjust_lr_fn)
  all work as keywords.

  >>> from petagrad import Tensor
  >>> w = Tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
  >>> opt = Muon([w], lr=0.1, weight_decay=0.0)
  >>> _ = (w * Tensor([[1.0, 0.0], [0.0, 1.0]])).sum().backward(); opt.step()   # gradient I: ns(I) = 1.11 I
  >>> [[round(v, 3) for v in row] for row in w.tolist()]
  [[0.889, 2.0], [3.0, 3.889]]
  """
  def __init__(self, params, lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1, ns_steps: int = 5,
               ns_coefficients: Sequence[float] = (3.4445, -4.775, 2.0315), nesterov: bool = True, *, eps: float = 1e-7,
               adjust_lr_fn: str | None = None, master_weights: bool | None = None):
    if lr < 0 or momentum < 0 or weight_decay < 0: raise ValueError(f"Muon: invalid lr={lr}, momentum={momentum} or weight_decay={weight_decay}")
    if adjust_lr_fn not in (None, "original", "match_rms_adamw"):
      raise ValueError(f"Muon: adjust_lr_fn must be None, 'original' or 'match_rms_adamw', got {adjust_lr_fn!r}")
    if not isinstance(ns_steps, int) or ns_steps < 0: raise ValueError(f"Muon: ns_steps must be an int >= 0, got {ns_steps!r}")
    super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, ns_steps=ns_steps, ns_coefficients=tuple(ns_coefficients),
                                  nesterov=nesterov, eps=eps, adjust_lr_fn=adjust_lr_fn), master_weights)
    for p in self.params:
      if p.ndim == 0: raise ValueError("Muon: a 0-d parameter has no matrix to orthogonalize; give it to another optimizer (see OptimizerGroup)")

  def _update(self, group, p, g, state):
    if (m := group["momentum"]):
      buf = self._state(state, "momentum_buffer", p)
      self._zero_started.discard(id(buf))
      self._set(buf, m * buf + _to(g, buf.device))
      g = g + m * _to(buf, p.device) if group["nesterov"] else _to(buf, p.device)
    if group["ns_coefficients"] and group["ns_steps"]:
      g = newton_schulz(g.reshape(g.shape[0], -1), group["ns_steps"], group["ns_coefficients"], group["eps"]).reshape(g.shape)
    rows, cols = p.shape[0], (prod(p.shape[1:]) if p.ndim > 1 else 1)
    ratio = {None: 1.0, "original": math.sqrt(max(1.0, rows / cols)), "match_rms_adamw": 0.2 * math.sqrt(max(rows, cols))}[group["adjust_lr_fn"]]
    lr = _lr_for(group, p)
    up = g * (lr * ratio if ratio != 1.0 else lr)
    if group["weight_decay"]: up = up + p * (lr * group["weight_decay"])
    return p - up

# ====================================================================== OptimizerGroup

class OptimizerGroup(Optimizer):
  """Several optimizers used as one (tinygrad's OptimizerGroup): zero_grad, step and schedule_step act on all of
  them, and one step is one realize. `group[i]` is the i-th optimizer; param_groups and params are all of theirs,
  in order (so an lr scheduler made on the group scales every optimizer's lr); `group.lr = x` sets all of them.
  The usual use: Muon for the weight matrices, AdamW for the rest.

  >>> from petagrad import Tensor
  >>> w, b = Tensor.ones(2, 2, requires_grad=True), Tensor.ones(2, requires_grad=True)
  >>> opt = OptimizerGroup(Muon([w], lr=0.02), AdamW([b], lr=0.01))
  >>> _ = ((Tensor.ones(3, 2) @ w) + b).sum().backward(); opt.step()
  >>> len(opt.params), opt[1].param_groups[0]["params"][0] is b
  (2, True)
  """
  def __init__(self, *optimizers: Optimizer):   # pylint: disable=super-init-not-called
    if len(optimizers) == 1 and isinstance(optimizers[0], (list, tuple)): optimizers = tuple(optimizers[0])
    if not optimizers: raise ValueError("OptimizerGroup: give at least one optimizer")
    for o in optimizers:
      if not isinstance(o, Optimizer): raise TypeError(f"OptimizerGroup takes optimizers, got {type(o).__name__}")
    ids = [id(p) for o in optimizers for p in o.params]
    if len(ids) != len(set(ids)): raise ValueError("OptimizerGroup: a parameter is in more than one of the optimizers (it would be updated twice)")
    self.optimizers = list(optimizers)
  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def __len__(self) -> int: return len(self.optimizers)
  def __iter__(self): return iter(self.optimizers)
  @property
  def param_groups(self) -> list[dict[str, Any]]: return [g for o in self.optimizers for g in o.param_groups]   # type: ignore[override]
  @property
  def params(self) -> list[Tensor]: return [p for o in self.optimizers for p in o.params]
  @property
  def state(self) -> dict[Tensor, dict[str, Tensor]]:   # type: ignore[override]
    return {p: st for o in self.optimizers for p, st in o.state.items()}
  def zero_grad(self, set_to_none: bool = True) -> None:
    for o in self.optimizers: o.zero_grad(set_to_none)
  def _state_dict_items(self) -> dict[str, Any]: return {"optimizers": self.optimizers, "params": self.params}   # tinygrad's names
  def _schedule(self, skip: Tensor | None) -> tuple[list[Tensor], list[Tensor]]:
    # every optimizer's gradients come before any write: a gradient of one optimizer's parameter may read another's
    grads: list[Tensor] = []
    writes: list[Tensor] = []
    for o in self.optimizers:
      g, w = o._schedule(skip)
      grads += g
      writes += w
    return grads, writes
  def state_dict(self) -> dict[str, Any]:
    """{"optimizers": [each optimizer's state_dict()]}."""
    return {"optimizers": [o.state_dict() for o in self.optimizers]}
  def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
    sds = state_dict.get("optimizers") if isinstance(state_dict, Mapping) else None
    if not isinstance(sds, (list, tuple)) or len(sds) != len(self.optimizers):
      raise ValueError(f"OptimizerGroup.load_state_dict: expected {{'optimizers': [{len(self.optimizers)} state dicts]}} (what state_dict() returns)")
    for o, sd in zip(self.optimizers, sds): o.load_state_dict(sd)

# ====================================================================== gradient clipping

def clip_grad_norm_(parameters: Tensor | Iterable[Tensor], max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False) -> Tensor:
  """torch.nn.utils.clip_grad_norm_: scale all gradients by min(1, max_norm / (total_norm + 1e-6)). The total
  norm is one fused reduction over every gradient; the gradients become lazy scaled tensors (they are
  realized with the optimizer step). Returns the total norm (a lazy 0-d float32 tensor).
  error_if_nonfinite needs a value on the host: it realizes the norm and raises if it is inf or nan."""
  ps = [parameters] if isinstance(parameters, Tensor) else list(parameters)
  grads = [p.grad for p in ps if p.grad is not None]
  if not grads: return Tensor.zeros(())
  if norm_type == math.inf: total = Tensor.stack([g.detach().abs().max().float() for g in grads]).max()
  elif norm_type == 2.0: total = sum((g.detach().float().square().sum() for g in grads[1:]), grads[0].detach().float().square().sum()).sqrt()
  else: total = sum((g.detach().float().abs().pow(norm_type).sum() for g in grads[1:]), grads[0].detach().float().abs().pow(norm_type).sum()).pow(1.0 / norm_type)
  if error_if_nonfinite and not math.isfinite(total.item()):
    raise RuntimeError(f"the total norm of order {norm_type} of the gradients is non-finite ({total.item()}), so it cannot be clipped")
  coef = (max_norm / (total + 1e-6)).minimum(1.0)
  for p in ps:
    if p.grad is not None: p.grad = (p.grad * coef).cast(p.grad.dtype)
  return total

def clip_grad_value_(parameters: Tensor | Iterable[Tensor], clip_value: float) -> None:
  """torch.nn.utils.clip_grad_value_: clamp every gradient to [-clip_value, clip_value] (lazily)."""
  for p in [parameters] if isinstance(parameters, Tensor) else parameters:
    if p.grad is not None: p.grad = p.grad.clip(-clip_value, clip_value)
