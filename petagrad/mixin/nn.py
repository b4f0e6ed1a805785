"""Neural-network functionals: convolution, pooling, interpolation, activations, losses, normalization,
attention, dropout, and random initializers."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any, Sequence
from petagrad.dtype import dtypes
from petagrad.helpers import prod, argfix, flatten as flatten_list
if TYPE_CHECKING: from petagrad.tensor import Tensor

class NNMixin:
  __slots__ = ()
