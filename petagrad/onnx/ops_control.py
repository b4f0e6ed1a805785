"""Control flow: If, Loop and Scan, whose subgraphs (parsed once, when the model is loaded) run with the graph runner.

A subgraph sees the values of the graphs around it by name (ONNX's outer scope). What decides the control flow (If's
condition, Loop's trip count and condition) is read into Python: a static value (computed from constants and shapes)
is remembered, so it replays inside TinyJit; one computed from input data is read on every call, which works eagerly
and raises TinyJit's JitError, naming the node, inside a jitted function. Each iteration's loop-carried values are
realized, so that a long loop is the same few small kernels again and again (compiled once) rather than one graph
that grows with the trip count.
"""
from __future__ import annotations
from typing import Any, Sequence
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.onnx import types
from petagrad.onnx.common import NodeContext, axis_of, ints, scalar


def _settle(vals: Sequence[Any]) -> None:
  """Realize the tensors among one iteration's results (lists are sequence values)."""
  ts = [t for v in vals for t in (v if isinstance(v, list) else [v]) if isinstance(t, Tensor)]
  if ts: Tensor.realize_all(*ts)

def If(ctx: NodeContext, cond: Tensor, *, then_branch: Any, else_branch: Any) -> tuple:
  """Run one branch; its outputs are the node's."""
  if cond.numel() != 1: raise ValueError(f"If's condition must hold one value, got shape {tuple(cond.shape)}")
  take = bool(scalar(cond))
  return tuple((then_branch if take else else_branch).run([], "then_branch" if take else "else_branch"))

def _stack(items: list[Any], axis: int, declared: Any, what: str) -> Tensor:
  """Stack the per-iteration scan outputs along `axis`; with no iteration, an empty tensor of the declared shape."""
  if items: return Tensor.stack(*items, dim=axis_of(axis, items[0].ndim + 1))
  shape = declared.shape if declared is not None else None
  if shape is None or not all(isinstance(d, int) for d in shape) or declared.elem_type is None:
    raise NotImplementedError(f"{what}: no iteration ran and the body does not declare a static shape for its scan output")
  full = list(shape)
  full.insert(axis_of(axis, len(shape) + 1), 0)
  return Tensor.zeros(*full, dtype=types.to_dtype(declared.elem_type))

def Loop(ctx: NodeContext, M: Tensor | None = None, cond: Tensor | None = None, *v_initial: Any, body: Any) -> tuple:
  """for i in range(M) while cond: (cond, carried..., scan outputs...) = body(i, cond, carried...). Outputs: the final
  carried values, then each scan output stacked over the iterations (axis 0)."""
  n_in = len(body.inputs)
  if n_in != 2 + len(v_initial): raise ValueError(f"Loop's body takes {n_in} inputs; the node gives 2 + {len(v_initial)} loop-carried values")
  n_scan = len(body.outputs) - 1 - len(v_initial)
  if n_scan < 0: raise ValueError(f"Loop's body has {len(body.outputs)} outputs, fewer than 1 + {len(v_initial)} loop-carried values")
  trip = int(scalar(M)) if M is not None else None
  if trip is None and cond is None: raise ValueError("Loop has neither a trip count M nor a condition: it would never end")
  keep = bool(scalar(cond)) if cond is not None else True
  carried, scans = list(v_initial), [[] for _ in range(n_scan)]
  i = 0
  it_dtype = M.dtype if M is not None else dtypes.int64
  while keep and (trip is None or i < trip):
    outs = body.run([Tensor(i, dtype=it_dtype, device=ctx.device), Tensor(keep, dtype=dtypes.bool, device=ctx.device), *carried], "body")
    carried = list(outs[1:1 + len(carried)])
    for s, v in zip(scans, outs[1 + len(carried):]): s.append(v)
    _settle(carried)
    if cond is not None: keep = bool(scalar(outs[0]))   # with no cond input, the body's cond output is ignored (a for loop)
    i += 1
  declared = body.outputs[1 + len(carried):]
  return (*carried, *[_stack(s, 0, d, f"Loop's scan output {d.name!r}") for s, d in zip(scans, declared)])

def _index(x: Tensor, axis: int, i: int) -> Tensor:
  return x[(slice(None),) * axis + (i,)]

def _scan(states: list[Any], xs: Sequence[Tensor], body: Any, in_axes: Sequence[int], in_dirs: Sequence[int]) -> tuple[list[Any], list[list]]:
  """Run the body over the scan axis: returns the final states and, per scan output, the list of its slices."""
  axes = [axis_of(a, x.ndim) for a, x in zip(in_axes, xs)]
  lengths = {x.shape[a] for x, a in zip(xs, axes)}
  if len(lengths) > 1: raise ValueError(f"Scan's inputs have different lengths along their scan axes: {sorted(lengths)}")
  T = lengths.pop() if lengths else 0
  ys: list[list] = [[] for _ in range(len(body.outputs) - len(states))]
  for t in range(T):
    slices = [_index(x, a, T - 1 - t if d else t) for x, a, d in zip(xs, axes, in_dirs)]
    outs = body.run([*states, *slices], "body")
    states = list(outs[:len(states)])
    for y, o in zip(ys, outs[len(states):]): y.append(o)
    _settle(states)
  return states, ys

def Scan(ctx: NodeContext, *inputs: Tensor, body: Any, num_scan_inputs: int, scan_input_axes: tuple | None = None,
         scan_input_directions: tuple | None = None, scan_output_axes: tuple | None = None, scan_output_directions: tuple | None = None) -> tuple:
  """(opset 9) states..., scan inputs... -> final states..., scan outputs (each body output stacked over the scan)."""
  n_state = len(inputs) - num_scan_inputs
  if n_state < 0: raise ValueError(f"Scan has {len(inputs)} inputs, fewer than num_scan_inputs={num_scan_inputs}")
  n_out = len(body.outputs) - n_state
  if n_out < 0: raise ValueError(f"Scan's body has {len(body.outputs)} outputs, fewer than its {n_state} states")
  states, xs = list(inputs[:n_state]), inputs[n_state:]
  in_axes = scan_input_axes or (0,) * num_scan_inputs
  in_dirs = scan_input_directions or (0,) * num_scan_inputs
  out_axes = scan_output_axes or (0,) * n_out
  out_dirs = scan_output_directions or (0,) * n_out
  if not len(in_axes) == len(in_dirs) == num_scan_inputs or not len(out_axes) == len(out_dirs) == n_out:
    raise ValueError("Scan's axes and directions attributes must have one entry per scan input / scan output")
  states, ys = _scan(states, xs, body, in_axes, in_dirs)
  declared = body.outputs[n_state:]
  outs = [_stack(y[::-1] if d else y, a, dv, f"Scan's scan output {dv.name!r}") for y, a, d, dv in zip(ys, out_axes, out_dirs, declared)]
  return (*states, *outs)

def Scan_8(ctx: NodeContext, sequence_lens: Tensor | None, *inputs: Tensor, body: Any, num_scan_inputs: int,
           directions: tuple | None = None) -> tuple:
  """(opset 8) a batch axis 0 on every input, the scan axis 1: Scan-9 per batch entry, the results stacked."""
  n_state = len(inputs) - num_scan_inputs
  if n_state < 0: raise ValueError(f"Scan has {len(inputs)} inputs, fewer than num_scan_inputs={num_scan_inputs}")
  dirs = directions or (0,) * num_scan_inputs
  xs = inputs[n_state:]
  B = inputs[0].shape[0] if inputs else 0
  if sequence_lens is not None:
    lens = ints(sequence_lens, "sequence_lens") or []
    full = {x.shape[1] for x in xs}
    if any(n not in full for n in lens):
      raise NotImplementedError(f"Scan (opset 8) with sequence_lens {lens} shorter than the inputs is not supported")
  per_batch = []
  for b in range(B):
    states, ys = _scan([s[b] for s in inputs[:n_state]], [x[b] for x in xs], body, (0,) * num_scan_inputs, dirs)
    per_batch.append([*states, *[_stack(y, 0, dv, f"Scan's scan output {dv.name!r}") for y, dv in zip(ys, body.outputs[n_state:])]])
  return tuple(Tensor.stack(*col, dim=0) for col in zip(*per_batch))
