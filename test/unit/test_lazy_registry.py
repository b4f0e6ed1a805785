"""The registry of lazy tensors (petagrad/tensor.py: lazy_tensors) keeps the order in which tensors became lazy. Every
MPI rank realizes the live tensors that read an old value (the loss after an optimizer step) in that order, and the
ranks check that they run the same program: an order that depended on which ids Python reused made ranks disagree
(test_mpi.py's data-parallel training with 4 ranks failed that way)."""
from __future__ import annotations
import gc, weakref
import petagrad.tensor as T
from petagrad import Tensor

def _order(*ts: Tensor) -> list[int]:
  return [next(i for i, t in enumerate(ts) if t is x) for x in T.lazy_tensors() if any(x is t for t in ts)]

def test_a_tensor_that_becomes_lazy_again_moves_to_the_end():
  a, b = Tensor([1.0]) + 1, Tensor([2.0]) + 1
  assert _order(a, b) == [0, 1]
  a.uop = (a * 2).uop
  assert _order(a, b) == [1, 0]

def test_a_reused_id_takes_no_dead_tensors_place():
  b = Tensor([2.0]) + 1
  c = Tensor([3.0]).realize()   # a buffer: not lazy
  dead = Tensor([4.0]) + 1
  ref = weakref.ref(dead)
  del dead
  gc.collect()
  assert ref() is None
  # a dead tensor's entry under c's id, before b's (as if c's id had been the dead tensor's)
  entries = list(T._lazy_tensors.items())
  T._lazy_tensors.clear()
  T._lazy_tensors[id(c)] = ref
  T._lazy_tensors.update((k, r) for k, r in entries if k != id(c))
  c.uop = (c + 1).uop   # c becomes lazy after b
  assert _order(b, c) == [0, 1]
