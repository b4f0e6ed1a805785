"""Activation checkpointing: `nn.checkpoint(fn, *args)` computes fn(*args) without keeping what fn computed inside for
the backward pass; the backward pass computes it again (torch.utils.checkpoint.checkpoint's trade: memory for compute).

How, in a lazy graph: the forward value is fn over detached inputs, wrapped in a CUSTOM_GRAD node whose backward
rule builds fn's graph a second time. The second graph reads each input through an AFTER node that depends on the
(realized) gradient of fn's output, so the scheduler runs the recompute only once the backward pass reaches it, and
the forward's intermediates die at the end of the forward (engine/realize.py frees a buffer after its last reader).
What stays alive from forward to backward is fn's inputs: a decoder layer's input, one activation per layer.

fn must compute the same values when called again: no random draws (dropout) inside it, and no in-place updates of
what it reads between the forward and the backward pass.

>>> from petagrad import Tensor, nn
>>> lin = nn.Linear(3, 3)
>>> x = Tensor.ones(2, 3, requires_grad=True)
>>> nn.checkpoint(lambda t: lin(t).relu(), x).sum().backward() is not None, x.grad.shape, lin.weight.grad.shape
(True, (2, 3), (3, 3))
"""
from __future__ import annotations
from typing import Any, Callable
from petagrad.tensor import Tensor, _fail, _grad_leaves
from petagrad.uop.ops import Ops
from petagrad.uop.uop import UOp
from petagrad.uop.gradient import compute_gradient, custom_backward
from petagrad.helpers import NO_GRAD, Context

class _Recompute:
  """What the backward rule needs to build fn's graph again: fn, its arguments with the differentiable tensors left
  out (their places in `slots`), and kwargs. Compared by identity (a CUSTOM_GRAD arg)."""
  def __init__(self, fn: Callable[..., Tensor], args: tuple, slots: tuple[int, ...], kwargs: dict[str, Any]):
    self.fn, self.args, self.slots, self.kwargs = fn, args, slots, kwargs
  def __repr__(self) -> str: return f"checkpoint({getattr(self.fn, '__name__', type(self.fn).__name__)})"
  def call(self, inputs: list[Tensor]) -> Tensor:
    args = list(self.args)
    for i, t in zip(self.slots, inputs): args[i] = t
    return self.fn(*args, **self.kwargs)

def checkpoint(fn: Callable[..., Tensor], *args: Any, **kwargs: Any) -> Tensor:
  """fn(*args, **kwargs) (one Tensor), whose intermediate values are computed again in the backward pass instead of
  kept. Gradients reach the tensor arguments that require grad and every parameter fn reads (tensors with
  requires_grad=True), as without checkpointing. Without gradients (no_grad, or nothing that requires grad) it is
  fn(*args, **kwargs)."""
  if not callable(fn): raise TypeError(f"checkpoint: fn must be callable, got {type(fn).__name__}")
  if NO_GRAD.value: return fn(*args, **kwargs)
  slots = tuple(i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad)
  held = [a for i, a in enumerate(args) if i in slots]
  rec = _Recompute(fn, tuple(None if i in slots else a for i, a in enumerate(args)), slots, kwargs)
  value = rec.call([a.detach() for a in held])
  if not isinstance(value, Tensor): raise TypeError(f"checkpoint: fn must return one Tensor, got {type(value).__name__}")
  nodes = _undetached(value.uop)   # (the inputs' own graphs are under the DETACHes: their gradients come through the inputs)
  params = [t for t in list(_grad_leaves.values()) if t.requires_grad and (t.uop in nodes or t._ctx in nodes)]
  if not held and not params: return value
  ins = [a.uop for a in held] + [t._ctx if t._ctx is not None and t._ctx in nodes else t.uop for t in params]
  return value._new(UOp(Ops.CUSTOM_GRAD, value.dtype, (value.uop, *ins), ("checkpoint", rec)), *held, *params)

def _undetached(root: UOp) -> set[UOp]:
  """The nodes of root's graph that are not below a DETACH."""
  seen, stack = set(), [root]
  while stack:
    u = stack.pop()
    if u in seen: continue
    seen.add(u)
    if u.op is not Ops.DETACH: stack.extend(u.src)
  return seen

def _backward(ctx: UOp, node: UOp) -> tuple[UOp | None, ...]:
  """The gradients of a checkpoint's inputs: fn's graph built again over its inputs, each read through AFTER(input,
  the output's gradient realized), and differentiated."""
  rec: _Recompute = node.arg[1]
  n_held, ins = len(rec.slots), node.src[1:]
  grad = UOp(Ops.CONTIGUOUS, ctx.dtype, (ctx,))
  again = [UOp(Ops.AFTER, s.dtype, (s, grad)) for s in ins[:n_held]]
  with Context(NO_GRAD=0): value = rec.call([Tensor(u) for u in again])
  if value.shape != node.shape or value.dtype != node.dtype:
    raise _fail(RuntimeError, "checkpoint", f"fn computed {value.shape} {value.dtype} in the backward pass, {node.shape} {node.dtype} in the forward")
  params = set(ins[n_held:])
  missing = params - set(value.uop.toposort())
  if missing:
    raise _fail(RuntimeError, "checkpoint", f"{len(missing)} parameter(s) fn read in the forward pass are not in its graph in the backward "
                "pass (changed in place or replaced in between?)")
  grads = compute_gradient(value.uop, grad, set(again) | params)
  return tuple(grads.get(u) for u in (*again, *ins[n_held:]))

custom_backward["checkpoint"] = _backward
