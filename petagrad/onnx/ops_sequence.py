"""Sequence values: ONNX's `seq(tensor)` is a Python list of Tensors inside the graph runner.

The ops only build and take apart lists (positions are read into Python, like any shape-deciding value); the tensors
themselves stay lazy. SequenceMap runs its body subgraph once per position with the runner (ops_control.py's way).
An op that returns a sequence carries `returns_sequence = True`, so the runner keeps the list as one value.
"""
from __future__ import annotations
from typing import Any, Callable
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes
from petagrad.onnx.common import NodeContext, axis_of, ints, scalar

def _sequence(fn: Callable) -> Callable:
  fn.returns_sequence = True   # type: ignore[attr-defined]
  return fn

def _pos(seq: list, pos: Tensor | None, default: int, insert: bool = False) -> int:
  """An ONNX position (negative counts from the end) -> a list index, checked."""
  n = len(seq)
  p = default if pos is None else int(scalar(pos))
  hi = n if insert else n - 1
  if not -n <= p <= hi: raise IndexError(f"position {p} is out of range for a sequence of {n} tensors")
  return p + n if p < 0 else p

@_sequence
def Identity(ctx: NodeContext, x: Any) -> Any:
  """A tensor or a sequence, unchanged."""
  return x

@_sequence
def SequenceConstruct(ctx: NodeContext, *xs: Tensor) -> list:
  return list(xs)

@_sequence
def SequenceEmpty(ctx: NodeContext, dtype: int | None = None) -> list:
  return []

@_sequence
def SequenceInsert(ctx: NodeContext, seq: list, x: Tensor, position: Tensor | None = None) -> list:
  out = list(seq)
  out.insert(_pos(seq, position, len(seq), insert=True), x)
  return out

@_sequence
def SequenceErase(ctx: NodeContext, seq: list, position: Tensor | None = None) -> list:
  out = list(seq)
  del out[_pos(seq, position, len(seq) - 1)]
  return out

def SequenceAt(ctx: NodeContext, seq: list, position: Tensor) -> Tensor:
  return seq[_pos(seq, position, 0)]

def SequenceLength(ctx: NodeContext, seq: list) -> Tensor:
  return Tensor(len(seq), dtype=dtypes.int64, device=ctx.device)

def ConcatFromSequence(ctx: NodeContext, seq: list, axis: int = 0, new_axis: int = 0) -> Tensor:
  if not seq: raise ValueError("ConcatFromSequence of an empty sequence")
  if new_axis: return Tensor.stack(*seq, dim=axis_of(axis, seq[0].ndim + 1))
  return Tensor.cat(*seq, dim=axis_of(axis, seq[0].ndim))

@_sequence
def SplitToSequence(ctx: NodeContext, x: Tensor, split: Tensor | None = None, axis: int = 0, keepdims: int = 1) -> list:
  ax = axis_of(axis, x.ndim)
  n = x.shape[ax]
  if split is None:   # one piece per index along the axis (keepdims decides whether the axis stays)
    return [x[(slice(None),) * ax + ((slice(i, i + 1),) if keepdims else (i,))] for i in range(n)]
  sizes = ints(split, "split") or []
  if split.ndim == 0: sizes = [sizes[0]] * (n // sizes[0]) + ([n % sizes[0]] if n % sizes[0] else [])
  if sum(sizes) != n: raise ValueError(f"split sizes {sizes} do not add up to the axis length {n}")
  return list(x.split(sizes, dim=ax))

def SequenceMap(ctx: NodeContext, seq: list, *extra: Any, body: Any) -> Any:
  """Run the body on each position: its inputs are the sequences' elements there (a tensor input is passed whole);
  each body output becomes a sequence (a tuple of lists: the runner gives one list to each output)."""
  n = len(seq)
  for e in extra:
    if isinstance(e, list) and len(e) != n: raise ValueError(f"SequenceMap's sequences have different lengths: {n} and {len(e)}")
  outs: list[list] = [[] for _ in body.outputs]
  for i in range(n):
    res = body.run([seq[i], *[e[i] if isinstance(e, list) else e for e in extra]], "body")
    for o, r in zip(outs, res): o.append(r)
  return tuple(outs)

# optional values: an empty optional is None, a full one its tensor or sequence
@_sequence
def Optional(ctx: NodeContext, x: Any = None, type: Any = None) -> Any:
  return x

def OptionalHasElement(ctx: NodeContext, x: Any = None) -> Tensor:
  return Tensor(x is not None, dtype=dtypes.bool, device=ctx.device)

@_sequence
def OptionalGetElement(ctx: NodeContext, x: Any = None) -> Any:
  if x is None: raise ValueError("OptionalGetElement of an empty optional")
  return x
