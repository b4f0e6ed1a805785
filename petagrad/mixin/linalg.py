"""Linear algebra: matmul (and dot, linear, mv, bmm, addmm, baddbmm, inner, outer, tensordot, kron, einsum), norms,
cross products, pairwise distances, scaled dot-product attention.

A matmul is one broadcast multiply + sum over the shared dim: (..., n, 1, k) * (..., 1, m, k) summed over k, one
reduce kernel whose tiling the optimizer chooses.
"""
from __future__ import annotations
import functools, math
from typing import Any
from petagrad.dtype import dtypes, promote
from petagrad.helpers import prod
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.graph import view_strides
from petagrad.uop.uop import UOp
from petagrad.uop.gradient import custom_backward, compute_gradient
from petagrad.mixin import Tensor, TensorMixin
from petagrad.mixin.args import _fail, _resolve_axis, _dtype_arg, _tensor_arg, _broadcast_shape, _check_tensor, axis_keywords

def _einsum_sublists(args: tuple) -> tuple[str, tuple]:
  """torch.einsum's sublist form (op1, [0, 1], op2, [1, 2], ..., [0, 2]) -> ("ab,bc->ac", (op1, op2))."""
  letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
  def subs(lst: Any) -> str:
    if not isinstance(lst, (list, tuple)): raise _fail(TypeError, "einsum", f"a sublist must be a list of ints (or Ellipsis), got {lst!r}")
    out = []
    for d in lst:
      if d is Ellipsis: out.append("...")
      elif isinstance(d, int) and not isinstance(d, bool) and 0 <= d < len(letters): out.append(letters[d])
      else: raise _fail(ValueError, "einsum", f"sublist entries must be ints in [0, {len(letters)}) or Ellipsis, got {d!r} in {lst!r}")
    return "".join(out)
  operands, ins = args[0::2][:len(args) // 2], [subs(lst) for lst in args[1::2][:len(args) // 2]]
  formula = ",".join(ins) + ("->" + subs(args[-1]) if len(args) % 2 else "")
  return formula, tuple(operands)

def _matmul_backward(T: Any, ctx: UOp, node: UOp) -> tuple[UOp | None, UOp | None, None]:
  """Gradients of a matmul's operands (node = CUSTOM_GRAD(product, x, w, held), x (..., n, k) and w (..., k, m) as the
  product read them, held: the product with its x operand detached). Matmuls of their own, g @ w^T and x^T @ g
  (summed over the batch dims an operand was broadcast along), so each backward product gets a layout of its own (a
  transposed operand copied row-major, panels): differentiating the forward's multiply-and-sum reads the forward's
  layouts, chosen for the forward (attention's dP = dO @ V^T reduced over the contiguous head dim of both: 1 ms per
  layer instead of ~0.15). A weight shared by every batch (a Linear's) takes the product's own derivative instead
  (`held`): its reduction over all rows is split into panels by the scheduler, ~1.4x faster than x^T @ g here."""
  _, x, w, held = node.src
  g = T(ctx)
  def to_shape(d: Any, like: UOp) -> UOp:
    if (extra := d.ndim - len(like.shape)) > 0: d = d.sum(tuple(range(extra)))
    if axes := tuple(i for i, (a, b) in enumerate(zip(like.shape, d.shape)) if a == 1 and b != 1): d = d.sum(axes, keepdim=True)
    return d.cast(like.dtype).uop
  dx = to_shape(g.matmul(T(w).transpose(-1, -2)), x) if x.dtype.is_float else None
  if not w.dtype.is_float: dw = None
  elif all(d == 1 for d in w.shape[:-2]): dw = compute_gradient(held, ctx, {w}).get(w)
  else: dw = to_shape(T(x).transpose(-1, -2).matmul(g), w)
  return dx, dw, None

class LinalgMixin(TensorMixin):
  __slots__ = ()

  def __init_subclass__(cls, **kwargs: Any) -> None:
    super().__init_subclass__(**kwargs)
    custom_backward.setdefault("matmul", functools.partial(_matmul_backward, cls))   # (tensors of the combined class)

  # ------------------------------------------------------------ matrix products
  def matmul(self, w: Tensor, dtype=None) -> Tensor:
    """Matrix product with batching and broadcasting (1-D operands like torch.matmul)."""
    if not isinstance(w, TensorMixin): raise _fail(TypeError, "matmul", f"expected a Tensor, got {type(w).__name__}", self)
    x = self
    if x.ndim == 0 or w.ndim == 0: raise _fail(RuntimeError, "matmul", "both arguments need at least 1 dimension", x, w)
    if x.device != w.device: raise _fail(RuntimeError, "matmul", f"tensors are on different devices: {x.device} and {w.device}", x, w)
    kx, kw = x.shape[-1], w.shape[-2] if w.ndim > 1 else w.shape[0]
    if kx != kw: raise _fail(ValueError, "matmul", f"inner dimensions do not match: {x.shape} @ {w.shape}", x, w)
    try: dt = promote(x.dtype, w.dtype)
    except TypeError as e: raise _fail(TypeError, "matmul", str(e), x, w) from None
    # the rows that read each right matrix: all of x's for one matrix, x's last-but-one dim for a batch of them
    wv = _right_operand_layout(w.reshape(kw, 1) if w.ndim == 1 else w, prod(x.shape[:-1]) if w.ndim <= 2 else (x.shape[-2] if x.ndim > 1 else 1))
    # built on the graph directly (one Tensor for the result, not one per step): (..., n, 1, k) * (..., 1, m, k),
    # summed over k
    xu, wu = x.uop.reshape((1, kx)) if x.ndim == 1 else x.uop, wv.uop
    bx, bw = xu.shape[:-2], wu.shape[:-2]
    nb = max(len(bx), len(bw))
    bx, bw = (1,) * (nb - len(bx)) + bx, (1,) * (nb - len(bw)) + bw
    if any(a != b and a != 1 and b != 1 for a, b in zip(bx, bw)):
      raise _fail(ValueError, "matmul", f"batch dimensions {xu.shape[:-2]} and {wu.shape[:-2]} are not broadcastable", x, w)
    n, m = xu.shape[-2], wu.shape[-1]
    full = tuple(b if a == 1 else a for a, b in zip(bx, bw)) + (n, m, kx)   # broadcast (1 with 0 is 0, not max)
    # cast before the expand: the gradient of a float16 operand then sums its broadcast copies in float32
    acc = dtypes.float32 if dt in (dtypes.float16, dtypes.bfloat16) else dt
    xr = xu.reshape(bx + (n, 1, kx)).cast(dt).cast(acc).expand(full)
    nw = len(wu.shape) - 2
    wr = wu.permute(tuple(range(nw)) + (nw + 1, nw)).reshape(bw + (1, m, kw)).cast(dt).cast(acc).expand(full)
    def product(a: UOp) -> UOp: return UOp(Ops.MUL, acc, (a, wr)).reduce(Ops.ADD, (nb + 2,)).reshape(full[:-1])
    # x's gradient is a matmul of its own (_matmul_backward), w's the product's derivative with x held constant
    wg = w.uop.reshape((kw, 1)) if w.ndim == 1 else w.uop
    out = UOp(Ops.CUSTOM_GRAD, acc, (product(xr), xu, wg, product(UOp(Ops.DETACH, xr.dtype, (xr,)))), ("matmul",))
    out = out.cast(_dtype_arg(dtype) if dtype else dt)
    if x.ndim == 1: out = out.reshape(out.shape[:-2] + out.shape[-1:])
    if w.ndim == 1: out = out.reshape(out.shape[:-1])
    return x._new(out, w)
  def dot(self, w: Tensor, dtype=None) -> Tensor:
    """self @ w (tinygrad's dot, torch.matmul's rules): 1-d . 1-d is a scalar, 2-d . 1-d a vector (n,), 1-d . 2-d a
    vector (m,), and batched operands broadcast. dtype: the result's dtype (tinygrad's accumulate dtype).

    >>> Tensor([1.0, 2.0]).dot(Tensor([3.0, 4.0])).item(), Tensor([[1.0, 2.0]]).dot(Tensor([3.0, 4.0])).tolist()
    (11.0, [11.0])
    """
    return self.matmul(w, dtype=dtype)
  def linear(self, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """self @ weight.T + bias, like torch.nn.functional.linear: weight is (out_features, in_features), as
    nn.Linear.weight (tinygrad's x.linear(w, b) takes w as (in, out): write x @ w + b for that); a 1-d weight
    multiplies elementwise (tinygrad).

    >>> Tensor([[1.0, 2.0]]).linear(Tensor([[1.0, 1.0], [0.0, 2.0], [1.0, 0.0]]), Tensor([0.5, 0.5, 0.5])).tolist()
    [[3.5, 4.5, 1.5]]
    """
    _tensor_arg("linear", "weight", weight, self)
    if bias is not None: _tensor_arg("linear", "bias", bias, self)
    x = self.matmul(weight.T) if weight.ndim > 1 else self * weight
    return x + bias if bias is not None else x
  def sequential(self, ll: list) -> Tensor:
    """Apply each callable of ll in order: x.sequential([f, g]) is g(f(x)) (tinygrad; layers, Tensor methods such as
    Tensor.relu, or lambdas).

    >>> Tensor([-1.0, 2.0]).sequential([lambda x: x * 2, Tensor.relu]).tolist()
    [0.0, 4.0]
    """
    if not isinstance(ll, (list, tuple)) or not all(callable(f) for f in ll):
      raise _fail(TypeError, "sequential", f"expects a list of callables, got {ll!r}", self)
    x = self
    for f in ll: x = f(x)
    return x
  def _check_nd(self, op: str, other: Any, nd: int, other_nd: int) -> None:
    if not isinstance(other, TensorMixin): raise _fail(TypeError, op, f"expected a Tensor, got {type(other).__name__}", self)
    if self.ndim != nd or other.ndim != other_nd:
      raise _fail(ValueError, op, f"expects a {nd}-D and a {other_nd}-D tensor, got {self.ndim}-D and {other.ndim}-D", self, other)
  def mv(self, vec: Tensor) -> Tensor:
    """Matrix (n, m) times vector (m,) -> (n,)."""
    self._check_nd("mv", vec, 2, 1)
    return self.matmul(vec)
  def bmm(self, mat2: Tensor) -> Tensor:
    """Batched matmul of (b, n, m) and (b, m, p) -> (b, n, p), no broadcasting (torch.bmm)."""
    self._check_nd("bmm", mat2, 3, 3)
    if self.shape[0] != mat2.shape[0]: raise _fail(ValueError, "bmm", f"batch sizes differ: {self.shape[0]} and {mat2.shape[0]}", self, mat2)
    return self.matmul(mat2)
  def addmm(self, mat1: Tensor, mat2: Tensor, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * self + alpha * (mat1 @ mat2) (torch.addmm; self broadcasts to the product's shape)."""
    mat1._check_nd("addmm", mat2, 2, 2)
    return _scaled_sum("addmm", self, mat1.matmul(mat2), beta, alpha)
  def baddbmm(self, batch1: Tensor, batch2: Tensor, beta: float = 1, alpha: float = 1) -> Tensor:
    """beta * self + alpha * bmm(batch1, batch2) (torch.baddbmm)."""
    return _scaled_sum("baddbmm", self, batch1.bmm(batch2), beta, alpha)
  def inner(self, other: Tensor) -> Tensor:
    """Sum over the last dims of self and other (torch.inner): (..., k) x (..., k) -> self.shape[:-1] + other.shape[:-1]."""
    if not isinstance(other, TensorMixin): raise _fail(TypeError, "inner", f"expected a Tensor, got {type(other).__name__}", self)
    if self.ndim == 0 or other.ndim == 0: return self * other
    if self.shape[-1] != other.shape[-1]:
      raise _fail(ValueError, "inner", f"the last dims differ: {self.shape[-1]} and {other.shape[-1]}", self, other)
    return self.tensordot(other, ([self.ndim - 1], [other.ndim - 1]))
  def outer(self, other: Tensor) -> Tensor:
    """Outer product of two 1-D tensors."""
    if not isinstance(other, TensorMixin): raise _fail(TypeError, "outer", f"expected a Tensor, got {type(other).__name__}", self)
    if self.ndim != 1 or other.ndim != 1: raise _fail(ValueError, "outer", "both operands must be 1-D", self, other)
    return self.unsqueeze(1) * other.unsqueeze(0)
  ger = outer
  def tensordot(self, other: Tensor, dims=2) -> Tensor:
    """Contract dims of self with dims of other (torch.tensordot): dims an int n (the last n of self with the
    first n of other) or two lists of dims. The result has self's free dims, then other's.

    >>> Tensor.ones(2, 3, 4).tensordot(Tensor.ones(3, 4, 5)).shape
    (2, 5)
    """
    if not isinstance(other, TensorMixin): raise _fail(TypeError, "tensordot", f"expected a Tensor, got {type(other).__name__}", self)
    if not (isinstance(dims, int) and not isinstance(dims, bool)) and not (isinstance(dims, (tuple, list)) and len(dims) == 2):
      raise _fail(TypeError, "tensordot", f"dims must be an int or a pair of dim lists, got {dims!r}", self, other)
    if isinstance(dims, int):
      if dims < 0 or dims > min(self.ndim, other.ndim):
        raise _fail(ValueError, "tensordot", f"dims={dims} is out of range for {self.ndim}-D and {other.ndim}-D tensors", self, other)
      da, db = list(range(self.ndim - dims, self.ndim)), list(range(dims))
    else:
      da, db = ([dims[0]] if isinstance(dims[0], int) else list(dims[0])), ([dims[1]] if isinstance(dims[1], int) else list(dims[1]))
      da, db = [_resolve_axis("tensordot", d, self.ndim, self) for d in da], [_resolve_axis("tensordot", d, other.ndim, other) for d in db]
    if len(da) != len(db): raise _fail(ValueError, "tensordot", f"dims {da} and {db} must have the same length", self, other)
    for p, q in zip(da, db):
      if self.shape[p] != other.shape[q]:
        raise _fail(ValueError, "tensordot", f"contracted dims differ: {self.shape[p]} (dim {p}) and {other.shape[q]} (dim {q})", self, other)
    fa, fb = [k for k in range(self.ndim) if k not in da], [k for k in range(other.ndim) if k not in db]
    k = prod(self.shape[p] for p in da)
    a = self.permute(*fa, *da).reshape(prod(self.shape[p] for p in fa), k)
    b = other.permute(*db, *fb).reshape(k, prod(other.shape[q] for q in fb))
    return a.matmul(b).reshape(tuple(self.shape[p] for p in fa) + tuple(other.shape[q] for q in fb))
  def kron(self, other: Tensor) -> Tensor:
    """Kronecker product (torch.kron): the smaller-rank operand gets leading 1 dims; out.shape[i] = a.shape[i] * b.shape[i]."""
    if not isinstance(other, TensorMixin): raise _fail(TypeError, "kron", f"expected a Tensor, got {type(other).__name__}", self)
    n = max(self.ndim, other.ndim)
    a = self.reshape((1,) * (n - self.ndim) + self.shape)
    b = other.reshape((1,) * (n - other.ndim) + other.shape)
    # (a0, 1, a1, 1, ...) * (1, b0, 1, b1, ...) -> (a0*b0, a1*b1, ...)
    pa = a.reshape(tuple(x for s in a.shape for x in (s, 1)))
    pb = b.reshape(tuple(x for s in b.shape for x in (1, s)))
    return (pa * pb).reshape(tuple(s * t for s, t in zip(a.shape, b.shape)))
  @classmethod
  def einsum(cls, formula: str, *operands) -> Tensor:
    """Einstein summation like torch.einsum: any subscripts, repeated indices in one operand (its
    diagonal), '...' and the implicit output (letters used once, in alphabetical order). Operands are
    contracted left to right; each step is a broadcast multiply + sum (one reduce kernel).

    >>> Tensor.einsum("ij,j->i", Tensor([[1, 2], [3, 4]]), Tensor([1, 1])).tolist()
    [3, 7]

    torch's sublist form (operand, [dims], operand, [dims], ..., [output dims]; ints 0-51, Ellipsis for '...') too:

    >>> Tensor.einsum(Tensor([[1, 2], [3, 4]]), [0, 1], Tensor([1, 1]), [1], [0]).tolist()
    [3, 7]
    """
    if isinstance(formula, TensorMixin): formula, operands = _einsum_sublists((formula,) + operands)
    if not isinstance(formula, str):
      raise _fail(TypeError, "einsum", f"the first argument must be the subscripts string or an operand, got {type(formula).__name__}")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)): operands = tuple(operands[0])
    for t in operands:
      if not isinstance(t, TensorMixin): raise _fail(TypeError, "einsum", f"operands must be Tensors, got {type(t).__name__}")
    f = formula.replace(" ", "")
    lhs, rhs = f.split("->") if "->" in f else (f, None)
    ins = lhs.split(",")
    if len(ins) != len(operands): raise _fail(ValueError, "einsum", f"{formula!r} names {len(ins)} operands, got {len(operands)}", *operands)
    for s in ins + ([rhs] if rhs is not None else []):
      bad = [ch for ch in s.replace("...", "") if not ch.isalpha()]
      if bad or s.count("...") > 1: raise _fail(ValueError, "einsum", f"bad subscripts {s!r} in {formula!r}", *operands)
    # '...' -> placeholder letters, right-aligned over the broadcast ellipsis dims
    n_ell = 0
    for s, t in zip(ins, operands):
      k = len(s.replace("...", ""))
      if "..." in s: n_ell = max(n_ell, t.ndim - k)
      elif t.ndim != k: raise _fail(ValueError, "einsum", f"subscripts {s!r} name {k} dims, the operand has {t.ndim}", *operands)
    ell = [chr(0x3b1 + i) for i in range(n_ell)]   # greek letters: never in a formula (isalpha, but not ascii)
    subs: list[list[str]] = []
    for s, t in zip(ins, operands):
      if "..." in s:
        a, b = s.split("...")
        k = t.ndim - len(a) - len(b)
        if k < 0: raise _fail(ValueError, "einsum", f"subscripts {s!r} name more dims than the operand has ({t.ndim})", *operands)
        subs.append(list(a) + ell[n_ell - k:] + list(b))
      else: subs.append(list(s))
    counts: dict[str, int] = {}
    for sb in subs:
      for ch in sb: counts[ch] = counts.get(ch, 0) + 1
    if rhs is None: out = ell + sorted(ch for ch in counts if counts[ch] == 1 and ch not in ell)
    else:
      if "..." not in rhs and n_ell: out = list(rhs)
      else:
        a, b = rhs.split("...") if "..." in rhs else (rhs, "")
        out = list(a) + ell + list(b)
    if len(set(out)) != len(out): raise _fail(ValueError, "einsum", f"output subscripts repeat a letter in {formula!r}", *operands)
    for ch in out:
      if ch not in counts: raise _fail(ValueError, "einsum", f"output subscript {ch!r} does not appear in the inputs of {formula!r}", *operands)
    # sizes: equal, or 1 (broadcast)
    size: dict[str, int] = {}
    for sb, t in zip(subs, operands):
      for ch, n in zip(sb, t.shape):
        if ch in size and size[ch] != n and 1 not in (size[ch], n):
          raise _fail(ValueError, "einsum", f"subscript {ch!r} has size {size[ch]} in one place and {n} in another", *operands)
        size[ch] = n if ch not in size or size[ch] == 1 else size[ch]
    # repeated letters in one operand: take the diagonal
    terms = []
    for sb, t in zip(subs, operands):
      sb = list(sb)
      while len(set(sb)) != len(sb):
        ch = next(c for c in sb if sb.count(c) > 1)
        p = sb.index(ch); q = sb.index(ch, p + 1)
        if t.shape[p] != t.shape[q]:
          raise _fail(ValueError, "einsum", f"repeated subscript {ch!r} needs equal sizes, got {t.shape[p]} and {t.shape[q]}", *operands)
        t = t.diagonal(0, p, q)
        sb = [c for k, c in enumerate(sb) if k not in (p, q)] + [ch]
      terms.append((t, sb))
    def contract(a, sa, b, sb, keep):
      letters = sa + [c for c in sb if c not in sa]
      ta = a.permute([sa.index(c) for c in letters if c in sa]).reshape(tuple(a.shape[sa.index(c)] if c in sa else 1 for c in letters))
      tb = b.permute([sb.index(c) for c in letters if c in sb]).reshape(tuple(b.shape[sb.index(c)] if c in sb else 1 for c in letters))
      p = ta * tb
      red = [k for k, c in enumerate(letters) if c not in keep]
      if red: p = _sum_keep_dtype(p, tuple(red))
      return p, [c for c in letters if c in keep]
    t, st = terms[0]
    rest = terms[1:]
    def needed(i): return set(out) | {c for _, s in rest[i:] for c in s}
    red = [k for k, c in enumerate(st) if c not in needed(0)]
    if red: t, st = _sum_keep_dtype(t, tuple(red)), [c for c in st if c in needed(0)]
    for i, (u, su) in enumerate(rest):
      t, st = contract(t, st, u, su, needed(i + 1))
    # broadcast size-1 letters to the output sizes, order as requested
    t = t.permute([st.index(c) for c in out]) if st else t
    return t.expand(tuple(size[c] for c in out)) if out else t

  # ------------------------------------------------------------ decompositions
  def _decomp_arg(self, op: str) -> Tensor:
    if self.ndim < 2: raise _fail(ValueError, op, f"needs a matrix or a batch of them (2 or more dims), got {self.ndim} dims", self)
    if not self.dtype.is_float: raise _fail(TypeError, op, f"needs a floating-point tensor, got {self.dtype}", self)
    return self
  def qr(self, mode: str = "complete") -> tuple[Tensor, Tensor]:
    """QR decomposition of the last two dims (m, n) by Householder reflections, one per column: self = Q @ R, Q
    orthogonal, R upper triangular. mode "complete" (tinygrad's qr(), the default): Q (..., m, m), R (..., m, n);
    "reduced" (torch.linalg.qr's default): Q (..., m, k), R (..., k, n), k = min(m, n). Signs as LAPACK (torch):
    R[j, j] = -sign(x0) * ||x|| for each reflected column; a column with nothing below the diagonal is not reflected.

    >>> Q, R = Tensor([[3.0, 1.0], [4.0, 2.0]]).qr()
    >>> [[round(v, 4) for v in r] for r in R.tolist()], round((Q @ R - Tensor([[3.0, 1.0], [4.0, 2.0]])).abs().max().item(), 5)
    ([[-5.0, -2.2], [0.0, 0.4]], 0.0)
    """
    x = self._decomp_arg("qr")
    if mode not in ("complete", "reduced"): raise _fail(ValueError, "qr", f"mode must be 'complete' or 'reduced', got {mode!r}", self)
    T, b, m, n = type(self), self.shape[:-2], self.shape[-2], self.shape[-1]
    R, Q = x, T.eye(m, dtype=x.dtype, device=x.device).expand(b + (m, m))
    row = T.arange(m, device=x.device)
    for j in range(min(m - 1, n)):
      col = R[..., :, j]
      at_j, below = row == j, row > j
      alpha = at_j.where(col, 0).sum(-1, keepdim=True)
      sigma = below.where(col, 0).square().sum(-1, keepdim=True)   # ||x[j+1:]||^2: 0 leaves the column as it is
      norm = (alpha.square() + sigma).sqrt()
      beta = -(alpha >= 0).where(norm, -norm)
      active = sigma > 0
      # v = x - beta e_j (zero above row j), H = I - tau v v^T, tau = 2 / (v.v) = 1 / (norm (norm + |alpha|))
      v = at_j.where(alpha - beta, below.where(col, 0)).unsqueeze(-1)
      tau = active.where(1 / active.where(norm * (norm + alpha.abs()), 1), 0).unsqueeze(-1)
      R = R - (tau * v) @ (v.transpose(-2, -1) @ R)
      Q = Q - (Q @ v) @ (tau * v).transpose(-2, -1)
    R = R.triu()
    if mode == "reduced" and m > n: return Q[..., :, :n], R[..., :n, :]
    return Q, R
  def svd(self, full_matrices: bool = True) -> tuple[Tensor, Tensor, Tensor]:
    """Singular value decomposition of the last two dims (m, n): (U, S, Vh) with self = U @ diag(S) @ Vh, S (..., k)
    descending and >= 0, k = min(m, n), as tinygrad's svd (whose third result, named V, is V transposed) and
    torch.linalg.svd. full_matrices: U (..., m, m) and Vh (..., n, n); else U (..., m, k) and Vh (..., k, n).

    Algorithm: a QR of a tall matrix (of the transpose of a wide one), then one-sided Jacobi on the k x k factor:
    fixed sweeps of round-robin pair rotations (k // 2 pairs a round, all at once), the singular values the column
    norms, sorted; U's columns are re-orthonormalized with a QR, which also completes them for zero singular values.

    >>> U, S, Vh = Tensor([[3.0, 0.0], [0.0, -4.0]]).svd()
    >>> [round(s, 4) for s in S.tolist()], round((U @ (S.unsqueeze(-2) * Vh.transpose(-2, -1)).transpose(-2, -1)).abs().sum().item(), 4)
    ([4.0, 3.0], 7.0)
    """
    x = self._decomp_arg("svd")
    T, b, m, n = type(self), self.shape[:-2], self.shape[-2], self.shape[-1]
    if m < n:   # A^T = U' S Vh'  ->  A = Vh'^T S U'^T
      u, s, vh = x.transpose(-2, -1).svd(full_matrices)
      return vh.transpose(-2, -1), s, u.transpose(-2, -1)
    k = n
    eye = T.eye(k, dtype=x.dtype, device=x.device).expand(b + (k, k))
    if k == 0: return T.eye(m, dtype=x.dtype, device=x.device).expand(b + (m, m if full_matrices else 0)), x.sum(-1)[..., :0], eye
    if m > k: Qa, Ra = x.qr(); A = Ra[..., :k, :]
    else: Qa, A = None, x
    # W stacks the working matrix over V's columns: every rotation applies to both. An odd k gets a zero column (the
    # round-robin bye): its products are 0, so it is never rotated and never moves another column.
    N = k + k % 2
    h, labels = N // 2, list(range(N))
    W = A.cat(eye, dim=-2)
    if N > k: W = W.pad((None,) * len(b) + (None, (0, 1)))
    sweeps = 6 + math.ceil(math.log2(k)) if k > 2 else 1
    for _ in range(sweeps * (N - 1)):
      L, Rt = W[..., :h], W[..., h:]
      Lu, Ru = L[..., :k, :], Rt[..., :k, :]
      alpha, beta, gamma = Lu.square().sum(-2, keepdim=True), Ru.square().sum(-2, keepdim=True), (Lu * Ru).sum(-2, keepdim=True)
      # the rotation [[c, s], [-s, c]] that makes the pair's columns orthogonal (the smaller root t of t^2 + 2 zeta t - 1)
      rot = gamma != 0
      zeta = (beta - alpha) / (2 * rot.where(gamma, 1))
      t = rot.where((zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta.square()).sqrt()), 0)
      c = 1 / (1 + t.square()).sqrt()
      s = c * t
      L, Rt = c * L - s * Rt, s * L + c * Rt
      if h > 1:   # next round-robin round: player 0 stays, the others move one place round the table
        L, Rt = L[..., :1].cat(Rt[..., :1], L[..., 1:h - 1], dim=-1), Rt[..., 1:].cat(L[..., h - 1:], dim=-1)
        labels = [labels[0], labels[h]] + labels[1:h - 1] + labels[h + 1:] + [labels[h - 1]]
      W = L.cat(Rt, dim=-1).contiguous()
    if N > k:   # drop the bye column
      p = labels.index(k)
      W = W[..., :p].cat(W[..., p + 1:], dim=-1)
    Wu, V = W[..., :k, :], W[..., k:, :]
    S, order = Wu.square().sum(-2).sqrt().sort(-1, descending=True)
    idx = order.unsqueeze(-2).expand(b + (k, k))
    Wu, V = Wu.gather(-1, idx), V.gather(-1, idx)
    # U's columns: W's over S; a (numerically) zero singular value's column is completed by the QR instead
    tiny = S <= S[..., :1] * (k * _eps(x.dtype))
    Ur, Rr = tiny.unsqueeze(-2).where(0, Wu / tiny.where(1, S).unsqueeze(-2)).qr()
    d = Rr.diagonal(0, -2, -1)
    Ur = Ur * (d < 0).where(-1.0, 1.0).cast(x.dtype).unsqueeze(-2)
    if Qa is None: U = Ur
    elif full_matrices: U = (Qa[..., :, :k] @ Ur).cat(Qa[..., :, k:], dim=-1)
    else: U = Qa[..., :, :k] @ Ur
    return U, S, V.transpose(-2, -1)
  def newton_schulz(self, steps: int, params: tuple, eps: float = 1.0e-7) -> Tensor:
    """Orthogonalize the last two dims (Muon's Newton-Schulz, tinygrad's newton_schulz): G = self / (||self||_F + eps),
    then `steps` times G = sum_i params[i] * (G G^T)^i G, an odd polynomial of G's singular values (U, V kept). A tall
    matrix is done transposed. params (2, -1.5, 0.5) converge to U @ Vh (the sign function of the singular values).

    >>> [[round(v, 3) for v in r] for r in Tensor([[3.0, 0.0], [0.0, 0.5]]).newton_schulz(20, (1.5, -0.5)).tolist()]
    [[1.0, 0.0], [0.0, 1.0]]
    """
    x = self._decomp_arg("newton_schulz")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
      raise _fail(ValueError, "newton_schulz", f"steps must be an int >= 0, got {steps!r}", self)
    if not isinstance(params, (tuple, list)) or not params or not all(isinstance(p, (int, float)) for p in params):
      raise _fail(TypeError, "newton_schulz", f"params must be a non-empty sequence of numbers, got {params!r}", self)
    if x.shape[-2] > x.shape[-1]: return x.transpose(-2, -1).newton_schulz(steps, params, eps).transpose(-2, -1)
    G = x / (x.square().sum((-2, -1), keepdim=True).sqrt() + eps)
    for _ in range(steps):
      A, X = G @ G.transpose(-2, -1), G
      out = G * params[0]
      for p in params[1:]:
        X = A @ X
        out = out + X * p
      G = out.contiguous()
    return G

  # ------------------------------------------------------------ norms and distances
  @axis_keywords
  def norm(self, ord=None, dim=None, keepdim: bool = False, dtype=None, p=None) -> Tensor:
    """Vector and matrix norms, torch.linalg.norm style (axis= works for dim=).

    dim None: the whole tensor as a vector (ord None/'fro' is the 2-norm = Frobenius norm).
    dim an int: vector norms, ord in {None (2), p (any float), inf, -inf, 0}.
    dim a pair: matrix norms, ord in {None/'fro', 1, -1, inf, -inf, 'nuc', 2, -2} (the last three from svd's
    singular values).
    p= (torch.Tensor.norm's keyword): a number is the vector p-norm over all of dim (a pair too), 'fro'/'nuc' as ord.

    >>> Tensor([3.0, 4.0]).norm().item(), Tensor([[1.0, -2.0], [3.0, 4.0]]).norm(p=1, dim=(0, 1)).item()
    (5.0, 10.0)
    """
    if p is not None:
      if ord is not None: raise _fail(TypeError, "norm", "got both ord= and p= (give one)", self)
      if not isinstance(p, str):
        x = self._float("norm") if dtype is None else self.cast(dtype)
        for a in (() if dim is None else tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)): _resolve_axis("norm", a, self.ndim, self)
        return x._vector_norm(p, dim, keepdim)
      ord = p
    x = self._float("norm") if dtype is None else self.cast(dtype)
    for a in (() if dim is None else tuple(dim) if isinstance(dim, (tuple, list)) else (dim,)): _resolve_axis("norm", a, self.ndim, self)
    if dim is None and ord == "nuc":   # torch.Tensor.norm('nuc') of a matrix: the nuclear norm
      if self.ndim != 2: raise _fail(ValueError, "norm", f"ord 'nuc' needs a 2-D tensor or a pair of dims, got {self.ndim} dims", self)
      dim = (0, 1)
    if dim is None or isinstance(dim, int) or (isinstance(dim, (tuple, list)) and len(dim) == 1) or (isinstance(dim, (tuple, list)) and len(dim) > 2):
      if ord == "fro" or ord is None: ord = 2
      if isinstance(ord, str): raise _fail(ValueError, "norm", f"ord {ord!r} needs a pair of dims", self)
      return x._vector_norm(ord, dim, keepdim)
    if len(dim) != 2: raise _fail(ValueError, "norm", f"bad dim {dim}", self)
    d0, d1 = _resolve_axis("norm", dim[0], self.ndim, self), _resolve_axis("norm", dim[1], self.ndim, self)
    if d0 == d1: raise _fail(ValueError, "norm", f"dims must differ, got {dim}", self)
    if ord is None or ord == "fro": return x._vector_norm(2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):   # from the singular values of the (d0, d1) matrices
      rest = [d for d in range(x.ndim) if d not in (d0, d1)]
      sv = x.permute(*rest, d0, d1).svd(full_matrices=False)[1]
      r = sv.sum(-1) if ord == "nuc" else sv.amax(-1) if ord == 2 else sv.amin(-1)
      if not keepdim: return r
      for d in sorted((d0, d1)): r = r.unsqueeze(d)
      return r
    if ord in (1, -1, math.inf, -math.inf):
      # 1: max over columns of the column sums; inf: max over rows of the row sums
      sum_dim, red_dim = (d0, d1) if ord in (1, -1) else (d1, d0)
      s = x.abs().sum(sum_dim, keepdim=True)
      r = s.amax(red_dim, keepdim=True) if ord > 0 else s.amin(red_dim, keepdim=True)
      return r if keepdim else r.squeeze((d0, d1))
    raise _fail(ValueError, "norm", f"unsupported matrix norm ord {ord!r}", self)
  def _vector_norm(self, ord, dim, keepdim: bool) -> Tensor:
    a = self.abs()
    # no identity for these: torch raises on an empty reduction
    if 0 in self.shape and (isinstance(ord, (int, float)) and ord < 0 or ord == math.inf):
      dims = range(self.ndim) if dim is None else (dim,) if isinstance(dim, int) else dim
      if any(self.shape[d] == 0 for d in dims):
        raise _fail(RuntimeError, "norm", f"cannot compute the {ord} norm over an empty dim (no identity)", self)
    if ord == math.inf: return a.amax(dim, keepdim)
    if ord == -math.inf: return a.amin(dim, keepdim)
    if ord == 0: return self._new((a != 0).cast(self.dtype).sum(dim, keepdim).uop, self)   # (gradient 0, as torch's)
    if ord == 1: return a.sum(dim, keepdim)
    if not isinstance(ord, (int, float)) or isinstance(ord, bool): raise _fail(ValueError, "norm", f"unsupported vector norm ord {ord!r}", self)
    if ord < 1:   # |x|**p has an infinite slope at 0 for p < 1: torch's gradient there is 0, so the power is taken at 1 there
      zero_el = a == 0
      ap = zero_el.where(0.0 if ord > 0 else math.inf, zero_el.where(1.0, a).pow(float(ord)))
    s = (self * self).sum(dim, keepdim) if ord == 2 else a.pow(float(ord)).sum(dim, keepdim) if ord >= 1 else ap.sum(dim, keepdim)
    if ord < 0: return s.pow(1.0 / ord)
    # the gradient at a zero vector is 0, as torch's (not the root's inf times 0): the root is taken at 1 there
    zero = s == 0
    safe = zero.where(1.0, s)
    return zero.where(0.0, safe.sqrt() if ord == 2 else safe.pow(1.0 / ord))
  def cross(self, other: Tensor, dim: int = -1) -> Tensor:
    """Cross product of 3-vectors along `dim` (default -1, like torch.linalg.cross), with broadcasting."""
    a, b = self._operands("cross", other)
    d = _resolve_axis("cross", dim, a.ndim, a)
    if a.shape[d] != 3: raise _fail(ValueError, "cross", f"dim {d} must have size 3, got {a.shape[d]}", self, other)
    def comp(t: Tensor, i: int) -> Tensor: return t.shrink(tuple((i, i + 1) if k == d else None for k in range(t.ndim)))
    a0, a1, a2 = comp(a, 0), comp(a, 1), comp(a, 2)
    b0, b1, b2 = comp(b, 0), comp(b, 1), comp(b, 2)
    return (a1 * b2 - a2 * b1).cat(a2 * b0 - a0 * b2, a0 * b1 - a1 * b0, dim=d)
  def cdist(self, x2: Tensor, p: float = 2.0) -> Tensor:
    """Pairwise p-norm distances between the rows of self (..., P, M) and x2 (..., R, M) -> (..., P, R)."""
    if not isinstance(x2, TensorMixin): raise _fail(TypeError, "cdist", f"expected a Tensor, got {type(x2).__name__}", self)
    if self.ndim < 2 or x2.ndim < 2: raise _fail(ValueError, "cdist", "both inputs need at least 2 dims", self, x2)
    if self.shape[-1] != x2.shape[-1]: raise _fail(ValueError, "cdist", f"the last dims differ: {self.shape[-1]} and {x2.shape[-1]}", self, x2)
    if p < 0: raise _fail(ValueError, "cdist", f"p must be >= 0, got {p}", self, x2)
    diff = self._float("cdist").unsqueeze(-2) - x2._float("cdist").unsqueeze(-3)
    return diff._vector_norm(p, -1, False)

  # ------------------------------------------------------------ attention
  def scaled_dot_product_attention(self, key: Tensor, value: Tensor, attn_mask: Tensor | None = None, dropout_p: float = 0.0,
                                   is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False) -> Tensor:
    """softmax(q @ k^T * scale + mask) @ v, like torch.nn.functional.scaled_dot_product_attention: q (..., L, E),
    k (..., S, E), v (..., S, Ev). A bool mask keeps True; a float mask is added. is_causal: the top-left lower
    triangle.

    dropout_p > 0 drops attention weights only when Tensor.training is True (it is `w.dropout(dropout_p)`), as in
    tinygrad and as torch's modules (nn.MultiheadAttention, nn.TransformerEncoderLayer) do in eval(): a model in eval
    mode is deterministic. torch's functional F.scaled_dot_product_attention drops whatever the mode; code that
    called it with dropout_p=0.0 outside training (the usual `dropout_p=self.p if self.training else 0.0`) is the same.

    >>> q = Tensor.ones(1, 2, 4)
    >>> Tensor.training, q.scaled_dot_product_attention(q, q, dropout_p=0.5).tolist() == q.tolist()
    (False, True)
    """
    op = "scaled_dot_product_attention"
    _check_tensor(op, "key", key, self); _check_tensor(op, "value", value, self)
    q, k, v = self, key, value
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2: raise _fail(ValueError, op, "query, key and value need at least 2 dims", q, k, v)
    if q.shape[-1] != k.shape[-1]: raise _fail(ValueError, op, f"query and key embedding dims differ: {q.shape[-1]} vs {k.shape[-1]}", q, k, v)
    if k.shape[-2] != v.shape[-2]: raise _fail(ValueError, op, f"key and value sequence lengths differ: {k.shape[-2]} vs {v.shape[-2]}", q, k, v)
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
      hq, hk = q.shape[-3], k.shape[-3]
      if hq % hk: raise _fail(ValueError, op, f"query heads ({hq}) must be a multiple of key/value heads ({hk})", q, k, v)
      if (attn_mask is None or attn_mask.ndim <= 2) and k.ndim == q.ndim and v.ndim == q.ndim:
        # the query heads of one key/value head as a group axis: each key/value head is read once per group (broadcast)
        # instead of copied hq/hk times
        qg = q.reshape(q.shape[:-3] + (hk, hq // hk) + q.shape[-2:])
        out = qg.scaled_dot_product_attention(k.unsqueeze(-3), v.unsqueeze(-3), attn_mask, dropout_p, is_causal, scale)
        return out.reshape(q.shape[:-1] + (v.shape[-1],))
      def rep(t):
        return t.unsqueeze(-3).expand(t.shape[:-2] + (hq // hk,) + t.shape[-2:]).reshape(t.shape[:-3] + (hq,) + t.shape[-2:])
      k, v = rep(k), rep(v)
    L, S = q.shape[-2], k.shape[-2]
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    qk = q.matmul(k.transpose(-1, -2)) * sc
    T = type(self)
    if is_causal:
      if attn_mask is not None: raise _fail(ValueError, op, "give attn_mask or is_causal, not both", q, k, v)
      # int32 positions: the mask is computed inside the softmax's reductions, where 64-bit lanes took twice the
      # registers and a conversion per compare (a training step's row max over 128 keys 2.9 -> 1.0 ms)
      pos = lambda n: T.arange(n, dtype=dtypes.int32, device=self.device)
      attn_mask = pos(L).reshape(L, 1) >= pos(S).reshape(1, S)
    if attn_mask is not None:
      _check_tensor(op, "attn_mask", attn_mask, self)
      _broadcast_shape(op, qk, attn_mask)
      qk = attn_mask.where(qk, -float("inf")) if attn_mask.dtype.is_bool else qk + attn_mask
    w = qk.softmax(-1)
    if isinstance(dropout_p, bool) or not isinstance(dropout_p, (int, float)):
      raise _fail(TypeError, op, f"dropout_p must be a float, got {dropout_p!r}", q)
    if not 0 <= dropout_p <= 1: raise _fail(ValueError, op, f"dropout_p must be in [0, 1], got {dropout_p}", q)
    if dropout_p > 0 and T.training: w = w.dropout(dropout_p)   # eval: no dropout (tinygrad, torch's modules)
    return w.matmul(v)

PANEL = 32

def _right_operand_layout(w: Tensor, rows: int) -> Tensor:
  """The layout a matmul reads its right operand in (values and gradients unchanged; at most one copy kernel), for a
  left operand of `rows` rows:
  * a transposed view with a short reduction, or read by many rows, is copied row-major, so the kernel takes its lanes
    from the output columns instead of combining partial sums of the reduction for every output (a few rows, as in
    decoding one token, read the weight once either way: the copy would only add its own traffic);
  * a big row-major operand whose rows are a multiple of 1 KiB apart is read column panel by column panel, each
    row of a panel at the same cache-set offset, which thrashes the cache: it is copied into (N/32, K, 32)
    panels, read through a view.
  A symbolic size (a KV cache's first start_pos rows) leaves the operand as it is: the choices weigh sizes."""
  if isinstance(rows, UOp) or any(isinstance(s, UOp) for s in w.shape): return w
  if w.ndim >= 2 and _read_transposed(w.uop):
    # a transposed view (x @ W.T, a Linear layer) is read along its contiguous rows: lanes come from the
    # reduction, whose partial sums must be combined per output. With a short reduction that combining
    # dominates, so the weight is transposed once (a small copy) and the columns become the lanes.
    # (1376 x 384 @ (1536 x 384).T on two cores: 18 ms read as is, 14 ms with the copy; 8 rows: 1.3 ms vs 25 ms).
    # A few rows (a decode step's query against its KV cache) read it once either way: no copy
    # (12 heads x 128 cached keys: the copy took 70 us of each layer's step)
    if not (rows >= 16 and (w.shape[-2] <= 256 or rows >= 256) and w.shape[-1] % 16 == 0 and w.shape[-1] >= 64): return w
    # the copy is made in panels when row-major rows would thrash the cache (below): x @ W.T with W 768 x 3072 and
    # 2048 rows, 170 -> ~45 ms
    if not _panels_pay(w, rows): return w.contiguous()
  elif not _panels_pay(w, rows): return w
  k, n = w.shape
  packed = w.reshape(k, n // PANEL, PANEL).permute(1, 0, 2).contiguous()
  return packed.permute(1, 0, 2).reshape(k, n)

def _read_transposed(u: UOp) -> bool:
  """Is u (..., k, n) a transposed view, or elementwise ops over transposed views and broadcasts (attention's
  q @ (k.T * scale)): does every piece of data it reads run contiguously along k, not along n?"""
  if u.op is Ops.PERMUTE:   # (a permute of a permute may read in row-major order again: W.T.T, a backward's)
    st = view_strides(u)
    return st is None or st[-1] != 1
  if u.op not in GroupOp.Elementwise: return False
  stack, seen, data = [u], set(), 0
  while stack:
    v = stack.pop()
    if v in seen: continue
    seen.add(v)
    if v.op in GroupOp.Elementwise: stack.extend(v.src); continue
    st = view_strides(v)
    if st is None: return False
    if st[-1] == 0 and st[-2] == 0: continue   # a broadcast value (a scale)
    if st[-2] != 1 or st[-1] == 1: return False
    data += 1
  return data > 0

def _panels_pay(w: Tensor, rows: int) -> bool:
  """Is w (k, n) read best from (n/32, k, 32) panels: a long reduction (the panel outgrows the L1 cache), rows a
  multiple of 1 KiB apart, and enough rows (a few rows read each panel once: no reuse for the copy to pay for)?"""
  return (w.ndim == 2 and rows >= 64 and w.shape[0] >= 512 and w.shape[1] >= 256 and w.shape[1] % PANEL == 0
          and (w.shape[1] * w.dtype.itemsize) % 1024 == 0)

def _scaled_sum(op: str, x: Tensor, prod_: Tensor, beta: float, alpha: float) -> Tensor:
  """beta * x + alpha * prod_, x broadcast to prod_'s shape (torch ignores x's values when beta == 0)."""
  p = prod_ if alpha == 1 else prod_ * alpha
  if _broadcast_shape(op, x, p) != p.shape:
    raise _fail(ValueError, op, f"self of shape {x.shape} does not broadcast to the product's shape {p.shape}", x, p)
  if beta == 0: return p   # torch ignores self's values (NaN too) when beta == 0
  return (x if beta == 1 else x * beta) + p

def _eps(dt) -> float:
  """Machine epsilon of a float dtype."""
  return {2: 2.0 ** -7 if 'bfloat' in str(dt) else 2.0 ** -10, 4: 2.0 ** -23}.get(dt.itemsize, 2.0 ** -52)

def _sum_keep_dtype(x: Tensor, axes: tuple[int, ...]) -> Tensor:
  if x.dtype.is_bool: return x.any(axes)
  return x.sum(axes, dtype=x.dtype if x.dtype.is_int else None)
