"""Ordering and scans: sort, topk, cumsum & co, tril/triu, roll, diag, einsum, one_hot, meshgrid, unique."""
from __future__ import annotations
import math
from typing import TYPE_CHECKING, Any, Sequence
from petagrad.dtype import dtypes
from petagrad.helpers import prod, argfix, flatten as flatten_list
if TYPE_CHECKING: from petagrad.tensor import Tensor

class OrderingMixin:
  __slots__ = ()
