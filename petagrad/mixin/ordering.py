"""Ordering and scans: sort, topk, cumsum & co, tril/triu and diagonals, unique, median/quantile, searchsorted,
bucketize, bincount, diff.

Costs (documented, to be improved):
  * sort / argsort / topk / unique: rows up to SORT_DIRECT (16384) elements rank each element by
    comparing it with every other element of its row: O(n^2) work, two reduce kernels. Longer rows
    (with or without gradient) sort blocks of SORT_BLOCK elements by ranks, then merge them with a
    bitonic network over (value, index) pairs in Stone's perfect-shuffle form: O(n log^2 n) work,
    log2(N / SORT_BLOCK) * log2(N) steps, each a launch of one and the same compiled kernel (a step's
    stage is data it reads, not code), and so is each step of the backward. There is no data-dependent
    load in the IR, so no O(n log n) merge sort.
  * cumsum / cumprod / cummax / cummin / logcumsumexp: rows up to SCAN_DIRECT (256) elements are one
    masked reduce over a lower-triangular (n, n) window (O(n^2), one kernel); longer rows are scanned in
    blocks of SCAN_BLOCK (128): scan inside each block, scan the block totals (recursively), combine,
    O(n * SCAN_BLOCK), about 4 kernels per level. cummax/cummin give the gradient of each output to the
    element at its returned index (the last one attaining the extreme), like torch, on both paths.

`unique` and `bincount` have data-dependent shapes: they realize their input (compute it and read it back) at
the call (so do `one_hot(-1)`, indexing.py, and `repeat_interleave` with per-element repeats, movement.py).
"""
from __future__ import annotations
import math
from typing import Any, NamedTuple
from petagrad.dtype import dtypes
from petagrad.helpers import prod
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import _fail, _is_tensor, _resolve_axis as _resolve, _int_arg, axis_keywords

def _int(op: str, name: str, v: Any, t: Any = None, minimum: int | None = None) -> int:
  return _int_arg(op, name, v, t, minimum)

def _pick(x: Tensor, mask: Tensor, axis, keepdim: bool = False) -> Tensor:
  """Sum of x over `axis` where mask is True, in x's dtype (exact when one element is selected)."""
  if x.dtype.is_bool: return (mask & x).any(axis, keepdim)
  return mask.where(x, 0).sum(axis, keepdim, dtype=x.dtype if x.dtype.is_int else None)

def _zero_of(dt) -> Any: return False if dt.is_bool else 0

def _tri(T, n: int, device: str) -> Tensor:
  """(n_i, n_j) mask j <= i: the window of a cumulative op."""
  return T.arange(n, device=device).reshape(1, n) <= T.arange(n, device=device).reshape(n, 1)

class _ValuesIndices(NamedTuple):
  values: Any
  indices: Any
  def __repr__(self) -> str: return f"{self._op}(values={self.values!r}, indices={self.indices!r})"
# what sort, topk, cummax, cummin and median(dim) return: (values, indices) with .values and .indices, like torch.return_types
class SortResult(_ValuesIndices): _op = "sort"
class TopkResult(_ValuesIndices): _op = "topk"
class CummaxResult(_ValuesIndices): _op = "cummax"
class CumminResult(_ValuesIndices): _op = "cummin"
class MedianResult(_ValuesIndices): _op = "median"

class OrderingMixin(TensorMixin):
  __slots__ = ()

  # ------------------------------------------------------------------ sorting
  @axis_keywords
  def sort(self, dim: int = -1, descending: bool = False, stable: bool = True) -> tuple[Tensor, Tensor]:
    """(values, indices) sorted along `dim`. Always stable (equal values keep their order, so the result
    is torch's with stable=True; with stable=False torch may order ties differently, the values agree);
    NaN sorts as the largest value, like torch. Rows up to SORT_DIRECT elements: ranks from pairwise
    comparisons (O(n^2), two kernels); longer rows: block ranks + a bitonic merge network
    (O(n log^2 n), one launch of one compiled kernel per step). Differentiable on both paths, any length.

    >>> [t.tolist() for t in Tensor([3, 1, 2]).sort()]
    [[1, 2, 3], [1, 2, 0]]
    """
    T = type(self)
    if self.ndim == 0:
      _resolve("sort", dim, 0, self)
      return SortResult(self, T.zeros((), dtype=dtypes.default_int, device=self.device))
    d = _resolve("sort", dim, self.ndim, self)
    x = self.transpose(d, -1)
    n = x.shape[-1]
    if n == 0 or x.numel() == 0: return SortResult(self, T.zeros(self.shape, dtype=dtypes.default_int, device=self.device))
    # (a dim of symbolic length sorts by ranks: the network's steps need its length; up to SORT_DIRECT_SYMBOLIC at most,
    # and a comparison it cannot decide raises naming the op)
    if n > (SORT_DIRECT if isinstance(n, int) else SORT_DIRECT_SYMBOLIC):
      values, indices = _bitonic(x, descending)
      return SortResult(values.transpose(d, -1), indices.transpose(d, -1).cast(dtypes.default_int))
    rank = _rank(x, descending)                                           # (..., n)
    oh = rank.unsqueeze(-2) == T.arange(n, device=self.device).reshape(n, 1)   # (..., n_r, n_i)
    values = _pick(x.unsqueeze(-2), oh, -1)
    indices = _pick(T.arange(n, device=self.device, dtype=dtypes.default_int).reshape((1,) * (x.ndim - 1) + (1, n)), oh, -1)
    return SortResult(values.transpose(d, -1), indices.transpose(d, -1))

  @axis_keywords
  def argsort(self, dim: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """Indices that sort `dim` (stable)."""
    return self.sort(dim, descending, stable)[1]

  def msort(self) -> Tensor: return self.sort(0)[0]

  @axis_keywords
  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True, *, sorted_: bool | None = None) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest (or smallest) elements along `dim`, in sorted order (also with sorted=False,
    which torch leaves unspecified; tinygrad spells it sorted_=)."""
    if not isinstance(k, int) or isinstance(k, bool): raise _fail(TypeError, "topk", f"k must be an int, got {k!r}", self)
    d = _resolve("topk", dim, self.ndim, self) if self.ndim else 0
    n = self.shape[d] if self.ndim else 1
    if not 0 <= k <= n: raise _fail(IndexError, "topk", f"k ({k}) is out of range for a dimension of size {n}", self)
    v, i = self.sort(dim, descending=largest)
    if not self.ndim: return TopkResult(v, i)
    sl = tuple((0, k) if a == d else None for a in range(self.ndim))
    return TopkResult(v.shrink(sl), i.shrink(sl))

  # ------------------------------------------------------------------ scans
  def _scan_input(self, op: str, dim: int) -> tuple[Tensor, int]:
    """Self with `dim` moved last."""
    if self.ndim == 0:
      _resolve(op, dim, 0, self)
      return self.reshape(1), 0
    d = _resolve(op, dim, self.ndim, self)
    return self.transpose(d, -1), d

  def _scan_output(self, out: Tensor, d: int) -> Tensor:
    return out.reshape(()) if self.ndim == 0 else out.transpose(d, -1)

  @axis_keywords
  def cumsum(self, dim: int = 0, dtype=None) -> Tensor:
    """Cumulative sum along `dim` (ints and bools give int64, like torch). See the module doc for the cost.

    >>> Tensor([1, 2, 3]).cumsum(0).tolist()
    [1, 3, 6]
    """
    x, d = self._scan_input("cumsum", dim)
    if dtype is not None: x = x.cast(dtype)
    if x.dtype.is_bool or (x.dtype.is_int and dtype is None): x = x.cast(dtypes.int64 if not x.dtype.is_unsigned or x.dtype.itemsize < 8 else x.dtype)
    return self._scan_output(_scan(x, "sum") if x.numel() else x, d)

  @axis_keywords
  def cumprod(self, dim: int = 0, dtype=None) -> Tensor:
    """Cumulative product along `dim` (ints and bools give int64)."""
    x, d = self._scan_input("cumprod", dim)
    if dtype is not None: x = x.cast(dtype)
    if x.dtype.is_bool or (x.dtype.is_int and dtype is None): x = x.cast(dtypes.int64)
    return self._scan_output(_scan(x, "prod") if x.numel() else x, d)

  def _cum_extreme(self, op: str, dim: int, largest: bool) -> tuple[Tensor, Tensor]:
    T = type(self)
    x, d = self._scan_input(op, dim)
    n = x.shape[-1]
    R = CummaxResult if largest else CumminResult
    if x.numel() == 0: return R(self, T.zeros(self.shape, dtype=dtypes.default_int, device=self.device))
    j = T.arange(n, device=self.device, dtype=dtypes.default_int)
    if n <= SCAN_DIRECT:
      m = _tri(T, n, self.device)
      xj = x.unsqueeze(-2)                                                 # (..., 1, n_j)
      xd = xj.detach()
      ident = x.dtype.min if largest else x.dtype.max
      masked = m.where(xd, ident)
      ext = masked.amax(-1, keepdim=True) if largest else masked.amin(-1, keepdim=True)   # (..., n_i, 1)
      hit = xd == ext
      if x.dtype.is_float:   # a NaN wins from where it appears on, like torch
        isnan = xd != xd
        hit = (m & isnan).any(-1, keepdim=True).where(isnan, hit)
      idx = (m & hit).where(j.reshape(1, n), -1).amax(-1)                  # the last position that attains it
      values = _pick(xj, j.reshape(1, n) == idx.unsqueeze(-1), -1)         # gradient goes to that element, like torch
      return R(self._scan_output(values, d), self._scan_output(idx, d))
    # long rows: the running extreme by a blocked scan (detached); the index is the running max of the positions
    # where x equals its running extreme; the values are x at that index, forward-filled by a blocked scan, so the
    # gradient of each output goes to the element at its index, like torch (also with ties)
    key = x.detach() if largest else (-x.detach() if x.dtype.is_float else x.detach().bitwise_not())
    if key.dtype.is_float:
      isnan = key != key
      v = _scan(isnan.where(-math.inf, key), "max")
      seen = _scan(isnan.cast(dtypes.int8), "max") > 0
      hit = seen.where(isnan, key == v)
    else:
      v = _scan(key, "max")
      hit = key == v
    idx = _scan(hit.where(j, -1), "max")
    values = _ffill(x, idx == j)[0]
    return R(self._scan_output(values, d), self._scan_output(idx, d))

  @axis_keywords
  def cummax(self, dim: int = 0) -> tuple[Tensor, Tensor]:
    """(values, indices) of the running maximum along `dim`; the index is the last position attaining it."""
    return self._cum_extreme("cummax", dim, True)

  @axis_keywords
  def cummin(self, dim: int = 0) -> tuple[Tensor, Tensor]:
    """(values, indices) of the running minimum along `dim`; the index is the last position attaining it."""
    return self._cum_extreme("cummin", dim, False)

  @axis_keywords
  def logcumsumexp(self, dim: int = 0) -> Tensor:
    """log(cumsum(exp(x))) along `dim`, computed stably (each prefix shifted by its own max)."""
    x, d = self._scan_input("logcumsumexp", dim)
    x = x._float("logcumsumexp")
    return self._scan_output(_scan(x, "lse") if x.numel() else x, d)

  # ------------------------------------------------------------------ triangles and diagonals
  def _tri_mask(self, op: str, diagonal: int, upper: bool) -> Tensor:
    diagonal = _int(op, "diagonal", diagonal, self)
    if self.ndim < 2: raise _fail(ValueError, op, f"needs a tensor with at least 2 dims, got {self.ndim}", self)
    T = type(self)
    r, c = self.shape[-2:]
    diff = T.arange(c, device=self.device).reshape(1, c) - T.arange(r, device=self.device).reshape(r, 1)
    return diff >= diagonal if upper else diff <= diagonal

  def tril(self, diagonal: int = 0) -> Tensor:
    """The lower triangle of the last two dims (elements with col - row <= diagonal), zeros elsewhere."""
    return self._tri_mask("tril", diagonal, False).where(self, _zero_of(self.dtype))

  def triu(self, diagonal: int = 0) -> Tensor:
    """The upper triangle of the last two dims (elements with col - row >= diagonal), zeros elsewhere."""
    return self._tri_mask("triu", diagonal, True).where(self, _zero_of(self.dtype))

  def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    """The diagonal of the (dim1, dim2) planes, appended as the last dim (a view: pad + reshape + shrink)."""
    if self.ndim < 2: raise _fail(ValueError, "diagonal", f"needs a tensor with at least 2 dims, got {self.ndim}", self)
    offset = _int("diagonal", "offset", offset, self)
    a, b = _resolve("diagonal", dim1, self.ndim, self), _resolve("diagonal", dim2, self.ndim, self)
    if a == b: raise _fail(ValueError, "diagonal", f"dim1 and dim2 must differ, both are {a}", self)
    rest = [k for k in range(self.ndim) if k not in (a, b)]
    x = self.permute(*rest, a, b)
    lead = x.shape[:-2]
    r, c = x.shape[-2:]
    r0, c0 = (0, min(offset, c)) if offset >= 0 else (min(-offset, r), 0)
    k = max(0, min(r - r0, c - c0))
    x = x.shrink(tuple((0, s) for s in lead) + ((r0, r0 + k), (c0, c0 + k)))
    if k == 0: return x.reshape(lead + (0,))
    x = x.reshape(lead + (k * k,)).pad(tuple((0, 0) for _ in lead) + ((0, k),))
    return x.reshape(lead + (k, k + 1)).shrink(tuple((0, s) for s in lead) + ((0, k), (0, 1))).reshape(lead + (k,))

  def diag(self, diagonal: int = 0) -> Tensor:
    """1-D input: a square matrix with it on the `diagonal`-th diagonal. 2-D input: that diagonal."""
    diagonal = _int("diag", "diagonal", diagonal, self)
    if self.ndim == 2: return self.diagonal(diagonal)
    if self.ndim != 1: raise _fail(ValueError, "diag", f"needs a 1-D or 2-D tensor, got {self.ndim} dims", self)
    n = self.shape[0]
    x = self.unsqueeze(1).pad(((0, 0), (0, n))).reshape(n * (n + 1)).shrink(((0, n * n),)).reshape(n, n)
    k = diagonal
    return x.pad(((0, k), (k, 0))) if k >= 0 else x.pad(((-k, 0), (0, -k)))

  def diag_embed(self, offset: int = 0) -> Tensor:
    """The last dim placed on the diagonal of new (n, n) last two dims."""
    if self.ndim == 0: raise _fail(ValueError, "diag_embed", "needs at least 1 dim", self)
    offset = _int("diag_embed", "offset", offset, self)
    lead, n = self.shape[:-1], self.shape[-1]
    x = self.unsqueeze(-1).pad(((0, 0),) * len(lead) + ((0, 0), (0, n))).reshape(lead + (n * (n + 1),))
    x = x.shrink(tuple((0, s) for s in lead) + ((0, n * n),)).reshape(lead + (n, n))
    z = ((0, 0),) * len(lead)
    return x.pad(z + ((0, offset), (offset, 0))) if offset >= 0 else x.pad(z + ((-offset, 0), (0, -offset)))

  def trace(self) -> Tensor:
    """Sum of the main diagonal of a 2-D tensor (ints give int64, like torch)."""
    if self.ndim != 2: raise _fail(ValueError, "trace", f"needs a 2-D tensor, got {self.ndim} dims", self)
    return self.diagonal().sum()

  # ------------------------------------------------------------------ distinct values
  def unique(self, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None):
    """The distinct values (sorted, flat), or with `dim` the distinct slices along dim (sorted
    lexicographically, like torch.unique(dim=)). The output shape depends on the data: the count is
    realized (computed and read back) at the call. With return_inverse, also the index of each
    element (each slice) in the result; with return_counts, how often each one occurs. NaNs are all
    distinct (a slice holding a NaN equals no other slice; with dim, the order of such slices may
    differ from torch's). Work: O(n log^2 n) flat, O(n^2 * slice size) with dim.

    >>> Tensor([3, 1, 3]).unique().tolist()
    [1, 3]
    >>> Tensor([[1, 2], [0, 5], [1, 2]]).unique(dim=0).tolist()
    [[0, 5], [1, 2]]
    """
    if dim is not None: return self._unique_dim(dim, return_inverse, return_counts)
    x = self.flatten()
    if x.numel() == 0: u = x
    else:
      s = x.sort()[0]
      first = type(self).full((1,), True, dtypes.bool, self.device).cat(s[1:].ne(s[:-1])) if s.shape[0] > 1 else \
        type(self).full((1,), True, dtypes.bool, self.device)
      u = s[first]
    out = [u]
    if return_inverse or return_counts:
      eq = x.unsqueeze(1) == u.unsqueeze(0)                    # (n, u)
      ii = dtypes.default_int
      if return_inverse: out.append(eq.where(type(self).arange(u.shape[0], device=self.device, dtype=ii), 0).sum(1, dtype=ii).reshape(self.shape))
      if return_counts: out.append(eq.cast(ii).sum(0, dtype=ii))
    return out[0] if len(out) == 1 else tuple(out)

  def _unique_dim(self, dim: int, return_inverse: bool, return_counts: bool):
    """unique(dim=): pairwise lexicographic comparison of the n slices (O(n^2 m) for slices of m elements)."""
    if self.ndim == 0: raise _fail(IndexError, "unique", f"dim {dim} given for a 0-d tensor", self)
    d = _resolve("unique", dim, self.ndim, self)
    n, rest = self.shape[d], self.shape[:d] + self.shape[d + 1:]
    if 0 in rest: raise _fail(RuntimeError, "unique", f"dims of size 0 other than dim {d} leave no slices to compare", self)
    x = self.permute(d, *[k for k in range(self.ndim) if k != d])
    m = prod(rest)
    i64 = dtypes.default_int
    if n == 0:
      out = [self]
      if return_inverse: out.append(type(self).zeros(0, dtype=i64, device=self.device))
      if return_counts: out.append(type(self).zeros(0, dtype=i64, device=self.device))
      return out[0] if len(out) == 1 else tuple(out)
    x2 = x.reshape(n, m).detach()
    a, b = x2.unsqueeze(1), x2.unsqueeze(0)                               # row a (n, 1, m), row b (1, n, m)
    eq = a == b
    def less(p: Tensor, q: Tensor) -> Tensor:   # p's element sorts before q's (False < True, NaN last)
      if p.dtype.is_bool: return q & p.logical_not()
      if p.dtype.is_float: return (p < q) | ((p == p) & (q != q))
      return p < q
    c = type(self).arange(m, device=self.device)
    first_diff = eq.logical_not().where(c, m).amin(-1, keepdim=True)       # (n, n, 1): the first column where a, b differ
    at_first = c == first_diff
    b_lt_a, a_lt_b = (at_first & less(b, a)).any(-1), (at_first & less(a, b)).any(-1)   # (n, n)
    same = first_diff.squeeze(-1) == m                                    # (n, n): equal slices
    ia, ib = type(self).arange(n, device=self.device).reshape(n, 1), type(self).arange(n, device=self.device).reshape(1, n)
    first = (same & (ib < ia)).any(1).logical_not()                       # (n,): the first slice of its kind
    # b before a: lexicographically, or incomparable (NaN) and earlier
    before = b_lt_a | (b_lt_a.logical_not() & a_lt_b.logical_not() & same.logical_not() & (ib < ia))
    rank = (first.reshape(1, n) & before).cast(i64).sum(1, dtype=i64)                # (n,): the output slot of each slice
    u = int(first.cast(i64).sum().item())
    oh = (rank.reshape(1, n) == type(self).arange(u, device=self.device).reshape(u, 1))   # (u, n)
    picked = _pick(x.reshape(n, m).unsqueeze(0), (oh & first.reshape(1, n)).unsqueeze(-1), 1)   # (u, m)
    res = picked.reshape((u,) + rest)
    res = res.permute(*range(1, d + 1), 0, *range(d + 1, self.ndim))
    out = [res]
    if return_inverse: out.append(rank)
    if return_counts: out.append(oh.cast(i64).sum(1, dtype=i64))
    return out[0] if len(out) == 1 else tuple(out)

  # ------------------------------------------------------------------ order statistics and searching
  @axis_keywords
  def median(self, dim: int | None = None, keepdim: bool = False):
    """The lower median (element (n - 1) // 2 of the sorted values). dim None: of all elements (a 0-d tensor);
    with dim: (values, indices) like torch.median. A NaN in the row makes the result NaN (its index: the
    first NaN).

    >>> Tensor([3.0, 1.0, 4.0, 2.0]).median().item()
    2.0
    """
    if dim is None:
      x = self.flatten()
      if x.numel() == 0: return type(self).full((), math.nan, self.dtype if self.dtype.is_float else dtypes.default_float, self.device)
      return x._median_along(0, False)[0]
    d = _resolve("median", dim, self.ndim, self) if self.ndim else 0
    if self.ndim and self.shape[d] == 0: raise _fail(IndexError, "median", f"cannot take the median of an empty dim {d}", self)
    if self.ndim == 0: return MedianResult(self, type(self).zeros((), dtype=dtypes.default_int, device=self.device))
    return MedianResult(*self._median_along(d, keepdim))

  def _median_along(self, d: int, keepdim: bool) -> tuple[Tensor, Tensor]:
    T = type(self)
    v, i = self.sort(d)
    n = self.shape[d]
    pos: Any = (n - 1) // 2
    if self.dtype.is_float:   # NaN sorts last: the first NaN's position n - count
      nans = (self != self).cast(dtypes.int64).sum(d, keepdim=True)
      pos = (nans > 0).where(n - nans, pos)
      oh = T.arange(n, device=self.device).reshape(tuple(n if k == d else 1 for k in range(self.ndim))) == pos
      vals, idx = _pick(v, oh, d, keepdim=True), _pick(i, oh, d, keepdim=True)
    else:
      sl = tuple((pos, pos + 1) if k == d else None for k in range(self.ndim))
      vals, idx = v.shrink(sl), i.shrink(sl)
    return (vals, idx) if keepdim else (vals.squeeze(d), idx.squeeze(d))

  @axis_keywords
  def quantile(self, q, dim: int | None = None, keepdim: bool = False, interpolation: str = "linear") -> Tensor:
    """The q-th quantiles (q a float or a 1-D list/tensor of floats in [0, 1]) along dim (all elements when
    None), with torch's interpolation modes 'linear', 'lower', 'higher', 'nearest', 'midpoint'. A 1-D q adds
    a leading dim. NaN in a row makes its quantiles NaN.

    >>> Tensor([1.0, 2.0, 3.0, 4.0]).quantile([0.25, 0.5]).tolist()
    [1.75, 2.5]
    """
    if interpolation not in ("linear", "lower", "higher", "nearest", "midpoint"):
      raise _fail(ValueError, "quantile", f"interpolation must be 'linear', 'lower', 'higher', 'midpoint' or 'nearest', got {interpolation!r}", self)
    if not self.dtype.is_float: raise _fail(TypeError, "quantile", f"needs a float tensor, got {self.dtype}", self)
    scalar_q = isinstance(q, (int, float)) or (isinstance(q, TensorMixin) and q.ndim == 0)
    vals = [q] if isinstance(q, (int, float)) else q.reshape(-1).tolist() if isinstance(q, TensorMixin) else \
      q if isinstance(q, (list, tuple)) else None
    if vals is None or not all(isinstance(v, (int, float)) for v in vals):
      raise _fail(TypeError, "quantile", f"q must be a float, a sequence of floats or a Tensor, got {q!r}", self)
    qs = [float(v) for v in vals]
    if any(not 0 <= v <= 1 for v in qs): raise _fail(ValueError, "quantile", f"q must be in [0, 1], got {qs}", self)
    x, d = (self.flatten(), 0) if dim is None else (self, _resolve("quantile", dim, self.ndim, self))
    if x.ndim == 0: x, d = x.reshape(1), 0
    n = x.shape[d]
    if n == 0: raise _fail(IndexError, "quantile", f"cannot take quantiles of an empty dim {d}", self)
    v = x.sort(d)[0]
    def at(k: int) -> Tensor: return v.shrink(tuple((k, k + 1) if a == d else None for a in range(x.ndim)))
    outs = []
    for qv in qs:
      p = qv * (n - 1)
      lo, hi = math.floor(p), math.ceil(p)
      if interpolation == "lower": r = at(lo)
      elif interpolation == "higher": r = at(hi)
      elif interpolation == "nearest": r = at(round(p))
      elif interpolation == "midpoint": r = (at(lo) + at(hi)) / 2 if lo != hi else at(lo)
      else: r = at(lo) + (at(hi) - at(lo)) * (p - lo) if lo != hi else at(lo)
      outs.append(r)
    out = outs[0] if len(outs) == 1 else outs[0].cat(*outs[1:], dim=d)
    out = (x != x).any(d, keepdim=True).where(math.nan, out)   # (..., len(qs) at d, ...)
    L = len(qs)
    if dim is None:   # x is flat: out is (L,)
      return out.reshape(((1,) * self.ndim if keepdim else ()) if scalar_q else (L,) + ((1,) * self.ndim if keepdim else ()))
    if scalar_q: return out if keepdim else out.squeeze(d)
    out = out.permute(d, *[k for k in range(x.ndim) if k != d])                  # q's dim first
    return out.unsqueeze(d + 1) if keepdim else out

  @classmethod
  def searchsorted(cls, sorted_sequence: Tensor, values, right: bool = False, side: str | None = None, out_int32: bool = False) -> Tensor:
    """For each value, the index where it would be inserted in the sorted last dim of sorted_sequence to keep
    it sorted (torch.searchsorted): the count of elements < value (<= with right=True / side='right'). A 1-D
    sequence serves any values shape; otherwise the leading dims must match. O(len * values) work.

    >>> Tensor.searchsorted(Tensor([1, 3, 5, 7, 9]), Tensor([3, 6, 9]), right=True).tolist()
    [2, 3, 5]
    """
    seq = sorted_sequence
    if not isinstance(seq, TensorMixin): raise _fail(TypeError, "searchsorted", f"sorted_sequence must be a Tensor, got {type(seq).__name__}")
    if side is not None:
      if side not in ("left", "right"): raise _fail(ValueError, "searchsorted", f"side must be 'left' or 'right', got {side!r}", seq)
      if right and side == "left": raise _fail(ValueError, "searchsorted", "side='left' contradicts right=True", seq)
      right = side == "right"
    v = values if isinstance(values, TensorMixin) else cls.full((), values,
      seq.dtype if not isinstance(values, float) or seq.dtype.is_float else None, seq.device)
    if seq.ndim == 0: raise _fail(ValueError, "searchsorted", "sorted_sequence must have at least 1 dim", seq, v)
    if seq.ndim > 1 and (v.ndim != seq.ndim or v.shape[:-1] != seq.shape[:-1]):
      raise _fail(ValueError, "searchsorted", f"the leading dims of sorted_sequence {seq.shape[:-1]} and values {v.shape[:-1]} must match", seq, v)
    s = seq.unsqueeze(-2) if seq.ndim > 1 else seq.reshape((1,) * v.ndim + seq.shape)
    vv = v.unsqueeze(-1)
    hit = (s <= vv) if right else (s < vv)
    it = dtypes.int32 if out_int32 else dtypes.default_int
    return hit.cast(it).sum(-1, dtype=it)

  def bucketize(self, boundaries: Tensor, right: bool = False, out_int32: bool = False) -> Tensor:
    """The bucket of each element among the sorted 1-D `boundaries` (torch.bucketize): the count of boundaries
    < x (right=False) or <= x (right=True)."""
    if not isinstance(boundaries, TensorMixin) or boundaries.ndim != 1:
      raise _fail(ValueError, "bucketize", "boundaries must be a 1-D Tensor", self, boundaries)
    return type(self).searchsorted(boundaries, self, right=right, out_int32=out_int32)

  def bincount(self, weights: Tensor | None = None, minlength: int = 0) -> Tensor:
    """Counts (or summed weights) of each value of a 1-D non-negative int tensor; the length max + 1 (at least
    minlength) is data-dependent: the max is realized at the call. Out-of-range values raise when known."""
    if self.ndim != 1 or not self.dtype.is_int:
      raise _fail(ValueError, "bincount", f"needs a 1-D integer tensor, got {self.ndim}-D {self.dtype}", self)
    minlength = _int("bincount", "minlength", minlength, self, minimum=0)
    if weights is not None and not _is_tensor(weights):
      raise _fail(TypeError, "bincount", f"weights must be a Tensor, got {type(weights).__name__}", self)
    if self.numel() and int(self.min().item()) < 0: raise _fail(ValueError, "bincount", "values must be non-negative", self)
    n = max(int(self.max().item()) + 1 if self.numel() else 0, minlength)
    oh = self.cast(dtypes.int64).unsqueeze(-1) == type(self).arange(n, device=self.device, dtype=dtypes.int64)   # (len, n)
    if weights is None: return oh.cast(dtypes.default_int).sum(0, dtype=dtypes.default_int)
    if weights.shape != self.shape:
      raise _fail(ValueError, "bincount", f"weights must have the input's shape {self.shape}, got {weights.shape}", self, weights)
    w = weights if weights.dtype.is_float else weights.cast(dtypes.float64)
    return oh.where(w.unsqueeze(-1), 0).sum(0)

  @axis_keywords
  def diff(self, n: int = 1, dim: int = -1, prepend: Tensor | None = None, append: Tensor | None = None) -> Tensor:
    """The n-th forward difference along dim (torch.diff); bools use xor. prepend/append are concatenated first.

    >>> Tensor([1, 3, 6, 10]).diff().tolist()
    [2, 3, 4]
    """
    if self.ndim == 0: raise _fail(ValueError, "diff", "needs at least 1 dim", self)
    if not isinstance(n, int) or n < 0: raise _fail(ValueError, "diff", f"n must be a non-negative int, got {n!r}", self)
    d = _resolve("diff", dim, self.ndim, self)
    x = self
    for name, t in (("prepend", prepend), ("append", append)):
      if t is not None and not _is_tensor(t): raise _fail(TypeError, "diff", f"{name} must be a Tensor, got {type(t).__name__}", self)
    if prepend is not None:
      x = (prepend if prepend.ndim else prepend.reshape(1).expand(tuple(1 if k == d else s for k, s in enumerate(self.shape)))).cat(x, dim=d)
    if append is not None:
      x = x.cat(append if append.ndim else append.reshape(1).expand(tuple(1 if k == d else s for k, s in enumerate(self.shape))), dim=d)
    for _ in range(n):
      m = x.shape[d]
      if m == 0: break
      a = x.shrink(tuple((1, m) if k == d else None for k in range(x.ndim)))
      b = x.shrink(tuple((0, m - 1) if k == d else None for k in range(x.ndim)))
      x = (a ^ b) if x.dtype.is_bool else a - b
    return x

def _rank(x: Tensor, descending: bool) -> Tensor:
  """Position of each element of the last dim in the stable sorted order (NaN is the largest)."""
  T = type(x)
  n = x.shape[-1]
  a, b = x.unsqueeze(-1).detach(), x.unsqueeze(-2).detach()     # a: element i, b: element j
  if x.dtype.is_float:
    na, nb = a != a, b != b
    before = ((b > a) | (nb & na.logical_not())) if descending else ((b < a) | (na & nb.logical_not()))
    eq = (b == a) | (na & nb)
  else:
    before = (b > a) if descending else (b < a)
    eq = b == a
  j_first = T.arange(n, device=x.device).reshape(1, n) < T.arange(n, device=x.device).reshape(n, 1)   # j < i
  return (before | (eq & j_first)).cast(dtypes.int64).sum(-1)

# rows up to this length sort by pairwise ranks (O(n^2), 2 kernels; measured on a CPU: as fast as the network at
# 16k, 4x slower at 32k, 10x at 64k); longer rows use blocks of SORT_BLOCK sorted by ranks, then bitonic merges
# (log2(N/SORT_BLOCK) merge phases of log2(N) steps each)
SORT_DIRECT, SORT_DIRECT_SYMBOLIC = 1 << 14, 1 << 16
SORT_BLOCK = 1 << 11
# rows up to this length scan with one masked (n, n) reduce; longer rows are scanned in blocks of SCAN_BLOCK
SCAN_DIRECT, SCAN_BLOCK = 256, 128

def _scan_ident(x: Tensor, op: str):
  return {"sum": 0, "prod": 1, "max": x.dtype.min, "lse": -math.inf}[op]

def _lse_combine(a: Tensor, b: Tensor) -> Tensor:
  m = a.detach().maximum(b.detach())
  m = (m.abs() == math.inf).where(0.0, m)
  return ((a - m).exp() + (b - m).exp()).log() + m

def _scan(x: Tensor, op: str) -> Tensor:
  """Inclusive scan along the last dim: op 'sum', 'prod', 'max' (NaN is not handled) or 'lse' (log-sum-exp).

  Short rows: one reduce over a lower-triangular (n, n) window, O(n^2). Long rows: split into blocks of
  SCAN_BLOCK, scan inside the blocks, scan the block totals (recursively) and combine, O(n * SCAN_BLOCK)."""
  T = type(x)
  n, lead = x.shape[-1], x.shape[:-1]
  if n <= SCAN_DIRECT:
    m = _tri(T, n, x.device)
    xj = x.unsqueeze(-2)
    if op == "sum": return m.where(xj, 0).sum(-1, dtype=x.dtype)
    if op == "prod": return m.where(xj, 1).prod(-1, dtype=x.dtype)
    if op == "max": return m.where(xj, x.dtype.min).amax(-1)
    mx = m.where(xj, -math.inf).amax(-1, keepdim=True).detach()          # (..., n_i, 1)
    mx = (mx.abs() == math.inf).where(0.0, mx)
    return (m.where(xj - mx, -math.inf).exp().sum(-1, keepdim=True).log() + mx).squeeze(-1)
  B = SCAN_BLOCK
  nb = -(-n // B)
  z = ((0, 0),) * len(lead)
  ident = _scan_ident(x, op)
  xp = x.pad(z + ((0, nb * B - n),), value=ident) if nb * B != n else x
  inner = _scan(xp.reshape(lead + (nb, B)), op)                           # (..., nb, B)
  tot = inner.shrink(tuple((0, s) for s in lead) + ((0, nb), (B - 1, B))).reshape(lead + (nb,))
  pre = _scan(tot, op).pad(z + ((1, 0),), value=ident).shrink(tuple((0, s) for s in lead) + ((0, nb),)).unsqueeze(-1)
  if op == "sum": out = inner + pre
  elif op == "prod": out = inner * pre
  elif op == "max": out = inner.maximum(pre)
  else: out = _lse_combine(inner, pre)
  return out.reshape(lead + (nb * B,)).shrink(tuple((0, s) for s in lead) + ((0, n),))

def _before_fn(x: Tensor, descending: bool, n: int):
  """The total order of the long-row sort: (value, index) pairs, NaN the largest value, ties by index
  (stable), padding (index >= n) after everything. before(av, ai, bv, bi): does a sort strictly before b?"""
  isf = x.dtype.is_float
  def before(av, ai, bv, bi):
    if isf:
      na, nb_ = av != av, bv != bv
      lt = ((av > bv) | (na & nb_.logical_not())) if descending else ((av < bv) | (nb_ & na.logical_not()))
      tie = (av == bv) | (na & nb_)
    else:
      lt = (av > bv) if descending else (av < bv)
      tie = av == bv
    pa, pb = ai >= n, bi >= n
    return (pb & pa.logical_not()) | ((pa == pb) & (lt | (tie & (ai < bi))))
  return before

def _ffill(x: Tensor, hit: Tensor) -> tuple[Tensor, Tensor]:
  """Forward fill along the last dim: y[i] = x[the last j <= i with hit[j]] (0 when there is none) and whether
  there is one. The gradient of y[i] goes to that x[j]. Short rows: one masked (n, n) pick; long rows: blocked
  like _scan, O(n * SCAN_BLOCK)."""
  T = type(x)
  n, lead = x.shape[-1], x.shape[:-1]
  if n <= SCAN_DIRECT:
    j = T.arange(n, device=x.device).reshape(1, n)
    last = (_tri(T, n, x.device) & hit.unsqueeze(-2)).where(j, -1).amax(-1)    # (..., n_i)
    return _pick(x.unsqueeze(-2), j == last.unsqueeze(-1), -1), last >= 0
  B = SCAN_BLOCK
  nb = -(-n // B)
  z = ((0, 0),) * len(lead)
  full = tuple((0, s) for s in lead)
  xp = x.pad(z + ((0, nb * B - n),)) if nb * B != n else x
  hp = hit.pad(z + ((0, nb * B - n),), value=False) if nb * B != n else hit
  inner, has = _ffill(xp.reshape(lead + (nb, B)), hp.reshape(lead + (nb, B)))   # (..., nb, B)
  last_of = lambda t: t.shrink(full + ((0, nb), (B - 1, B))).reshape(lead + (nb,))
  pv, ph = _ffill(last_of(inner), last_of(has))                                   # over the blocks
  # what comes before block b: the fill at the end of block b - 1
  pv = pv.pad(z + ((1, 0),)).shrink(full + ((0, nb),)).unsqueeze(-1)
  ph = ph.pad(z + ((1, 0),), value=False).shrink(full + ((0, nb),)).unsqueeze(-1)
  out, out_has = has.where(inner, pv), has | ph
  keep = full + ((0, n),)
  return out.reshape(lead + (nb * B,)).shrink(keep), out_has.reshape(lead + (nb * B,)).shrink(keep)

def _bitonic(x: Tensor, descending: bool) -> tuple[Tensor, Tensor]:
  """Stable sort of the last dim, padded to a power of two N: blocks of SORT_BLOCK elements are sorted by
  pairwise ranks (O(n * SORT_BLOCK), even blocks ascending and odd ones descending), then bitonic merges
  double the sorted runs up to N (O(n log^2 n), one kernel per step). The network carries (value, index)
  pairs; values keep their gradient through the compare-exchange `where`s (each step is a kernel, and so
  is its backward). Padding sorts last (it is recognized by its index); NaN is the largest value."""
  T = type(x)
  n, lead = x.shape[-1], x.shape[:-1]
  N = 1 << (n - 1).bit_length()
  z = ((0, 0),) * len(lead)
  full = tuple((0, s) for s in lead)
  v = x.pad(z + ((0, N - n),)) if N != n else x
  idx = T.arange(N, device=x.device).reshape((1,) * len(lead) + (N,)).expand(lead + (N,))
  before = _before_fn(x, descending, n)
  # 1. blocks of B: rank each element among its block (pairwise), place it with a one-hot pick
  B = min(max(2, SORT_BLOCK), N)
  nb = N // B
  vb, ib = v.reshape(lead + (nb, B)), idx.reshape(lead + (nb, B))
  vd = vb.detach()
  rank = before(vd.unsqueeze(-2), ib.unsqueeze(-2), vd.unsqueeze(-1), ib.unsqueeze(-1)).cast(dtypes.int64).sum(-1)   # (..., nb, B)
  oh = rank.unsqueeze(-2) == T.arange(B, device=x.device).reshape(B, 1)             # (..., nb, B_r, B_i)
  vb, ib = _pick(vb.unsqueeze(-2), oh, -1), _pick(ib.unsqueeze(-2), oh, -1)
  if nb > 1:   # odd blocks descending: each pair of blocks is then a bitonic sequence
    def alternate(t):
      r = t.reshape(lead + (nb // 2, 2, B))
      even = r.shrink(full + ((0, nb // 2), (0, 1), (0, B)))
      odd = r.shrink(full + ((0, nb // 2), (1, 2), (0, B))).flip(-1)
      return even.cat(odd, dim=-2).reshape(lead + (N,))
    vb, ib = alternate(vb), alternate(ib)
  v, idx = vb.reshape(lead + (N,)).contiguous(), ib.reshape(lead + (N,)).contiguous()
  # 2. bitonic merges as Stone's perfect-shuffle network: every step is one fixed view (the perfect shuffle: position
  # q moves to q rotated left by one bit) and a compare-exchange of neighbours 2i, 2i+1. After t shuffles position q
  # holds element rotr(q, t) of the usual in-place network, so neighbours differ in its bit (m - t) % m: a merge of
  # runs of 2**(p-1) into runs of 2**p is m steps, of which the last p compare bits p-1 .. 0. What changes from
  # step to step (t, p) is data in a small buffer, not code: one compiled kernel serves every step of every sort
  # of this length (and one its backward), instead of a compile per stage.
  m = N.bit_length() - 1
  q = T.arange(0, N, 2, device=x.device, dtype=dtypes.int32)        # each pair's first position
  def shuffle(t: Tensor) -> Tensor: return t.reshape(lead + (2, N // 2)).transpose(-1, -2).reshape(lead + (N // 2, 2))
  def first(t: Tensor) -> Tensor: return t.shrink(full + ((0, N // 2), (0, 1))).reshape(lead + (N // 2,))
  def second(t: Tensor) -> Tensor: return t.shrink(full + ((0, N // 2), (1, 2))).reshape(lead + (N // 2,))
  for p in range(B.bit_length(), m + 1):
    for t in range(1, m + 1):
      # (t, 2**t - 1, m - t): the rotation back to the network's positions; 2**p: the run length; compare or only shuffle
      prm = T([t, (1 << t) - 1, m - t, 1 << p, int((m - t) % m < p)], dtype=dtypes.int32, device=x.device)
      rot, mask, up_shift, run, compare = (prm.shrink(((i, i + 1),)).reshape(()) for i in range(5))
      sv, si = shuffle(v), shuffle(idx)
      av, bv, ai, bi = first(sv), second(sv), first(si), second(si)
      pos = (q >> rot) | ((q & mask) << up_shift)
      up = (pos & run) == 0                                           # this run sorts up
      swap = (compare != 0) & up.where(before(bv.detach(), bi, av.detach(), ai), before(av.detach(), ai, bv.detach(), bi))
      v = swap.where(bv, av).unsqueeze(-1).cat(swap.where(av, bv).unsqueeze(-1), dim=-1).reshape(lead + (N,)).contiguous()
      idx = swap.where(bi, ai).unsqueeze(-1).cat(swap.where(ai, bi).unsqueeze(-1), dim=-1).reshape(lead + (N,)).contiguous()
  keep = full + ((0, n),)
  return v.shrink(keep), idx.shrink(keep)
