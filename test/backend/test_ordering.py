"""Ordering and scans vs PyTorch: sort/topk, cumulative ops, triangles, diagonals, roll, einsum, one_hot, unique."""
import math
import numpy as np
import pytest
import torch
from petagrad import Tensor, dtypes, GlobalCounters
from helpers import helper_test_op

NAN = float("nan")
TIES = [[3.0, 1.0, 3.0, -2.0, 1.0], [0.5, 0.5, 0.5, -1.0, 2.0]]

# ------------------------------------------------------------------ sort / argsort / topk

@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(device, dim, descending):
  helper_test_op([(3, 4)], lambda x: tuple(x.sort(dim=dim, descending=descending, stable=True)))

def test_sort_ties_stable(device):
  helper_test_op(None, lambda x: tuple(x.sort(dim=-1, stable=True)), vals=[TIES])
  helper_test_op(None, lambda x: tuple(x.sort(dim=-1, descending=True, stable=True)), vals=[TIES])

def test_sort_nan_inf(device):
  v = [[1.0, NAN, -math.inf, 2.0, NAN, math.inf, 0.0]]
  helper_test_op(None, lambda x: tuple(x.sort(dim=-1, stable=True)), vals=v, forward_only=True)
  helper_test_op(None, lambda x: tuple(x.sort(dim=-1, descending=True, stable=True)), vals=v, forward_only=True)

def test_sort_dtypes(device):
  for dt in ("int32", "uint8", "int64", "bool", "float16"):
    helper_test_op([(2, 5)], lambda x: tuple(x.sort(dim=-1, stable=True)), dtype=dt, low=0, high=4, forward_only=True)
  helper_test_op([(6,)], lambda x: tuple(x.sort(dim=0, descending=True, stable=True)), dtype="int8", low=-5, high=5)

def test_sort_edge_shapes(device):
  helper_test_op([(0, 3)], lambda x: tuple(x.sort(dim=0, stable=True)))
  helper_test_op([(3, 1)], lambda x: tuple(x.sort(dim=-1, stable=True)))
  helper_test_op([()], lambda x: tuple(x.sort(dim=-1, stable=True)))
  helper_test_op([(2, 3)], lambda x: tuple(x.T.sort(dim=-1, stable=True)))   # non-contiguous

def test_argsort(device):
  helper_test_op(None, lambda x: x.argsort(dim=-1, stable=True), vals=[TIES])
  helper_test_op(None, lambda x: x.argsort(dim=0, descending=True, stable=True), vals=[TIES])

@pytest.mark.parametrize("largest", [True, False])
def test_topk(device, largest):
  helper_test_op([(3, 5)], lambda x: tuple(x.topk(2, dim=-1, largest=largest)))
  helper_test_op([(4, 2)], lambda x: tuple(x.topk(3, dim=0, largest=largest)))
  helper_test_op([(4,)], lambda x: tuple(x.topk(0, largest=largest)))

def test_topk_ties_values(device):
  # torch does not fix the order of tied indices in topk; the values must match
  helper_test_op(None, lambda x: x.topk(3)[0], vals=[TIES], forward_only=True)

def test_sort_errors(device):
  x = Tensor.ones(2, 3)
  with pytest.raises(IndexError, match=r"sort: axis 2 is out of range for a 2-d tensor"): x.sort(2)
  with pytest.raises(IndexError, match=r"topk: k \(4\) is out of range for a dimension of size 3"): x.topk(4)
  with pytest.raises(IndexError, match=r"topk: axis -3"): x.topk(1, dim=-3)

# ------------------------------------------------------------------ scans

@pytest.mark.parametrize("op", ["cumsum", "cumprod", "logcumsumexp"])
def test_scan(device, op):
  helper_test_op([(3, 4)], lambda x: getattr(x, op)(1))
  helper_test_op([(3, 4)], lambda x: getattr(x, op)(-2))
  helper_test_op([(5,)], lambda x: getattr(x, op)(0))
  helper_test_op([(0, 2)], lambda x: getattr(x, op)(0))
  helper_test_op([()], lambda x: getattr(x, op)(0))
  helper_test_op([(2, 3)], lambda x: getattr(x.T, op)(1))

def test_cumprod_with_zeros(device):
  helper_test_op(None, lambda x: x.cumprod(0), vals=[[2.0, 0.0, 3.0, 0.0, -1.5]])

def test_logcumsumexp_extreme(device):
  helper_test_op(None, lambda x: x.logcumsumexp(0), vals=[[-1000.0, 1000.0, 0.0, 999.0]])
  helper_test_op(None, lambda x: x.logcumsumexp(0), vals=[[-math.inf, -math.inf, 1.0]], forward_only=True)

def test_cumsum_dtypes(device):
  for dt in ("int32", "bool", "uint8", "int8"):
    helper_test_op([(2, 5)], lambda x: x.cumsum(1), dtype=dt, low=-3, high=4)
  helper_test_op([(2, 3)], lambda x: x.cumprod(1), dtype="int32", low=-3, high=4)
  helper_test_op([(5,)], lambda x: x.cumsum(0, dtype=torch.float64), lambda x: x.cumsum(0, dtype=dtypes.float64), dtype="int32")

@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cum_extreme(device, op):
  helper_test_op([(3, 4)], lambda x: tuple(getattr(x, op)(1)))
  helper_test_op([(3, 4)], lambda x: tuple(getattr(x, op)(0)))
  helper_test_op(None, lambda x: tuple(getattr(x, op)(-1)), vals=[TIES], forward_only=True)   # ties: the last index
  helper_test_op(None, lambda x: tuple(getattr(x, op)(0)), vals=[[1.0, NAN, 2.0, NAN, 0.0]], forward_only=True)
  helper_test_op([(5,)], lambda x: tuple(getattr(x, op)(0)), dtype="int32", low=-3, high=3)
  helper_test_op([(0,)], lambda x: tuple(getattr(x, op)(0)))

def test_scan_errors(device):
  with pytest.raises(IndexError, match=r"cumsum: axis 2 is out of range"): Tensor.ones(2, 2).cumsum(2)
  with pytest.raises(IndexError, match=r"cummax: axis 1"): Tensor.ones(2).cummax(1)

# ------------------------------------------------------------------ triangles, diagonals, roll, outer

@pytest.mark.parametrize("diagonal", [0, 1, -1, 5, -5])
def test_tril_triu(device, diagonal):
  helper_test_op([(3, 4)], lambda x: x.tril(diagonal))
  helper_test_op([(2, 3, 2)], lambda x: x.triu(diagonal))

def test_tril_triu_dtypes_errors(device):
  helper_test_op([(3, 3)], lambda x: x.tril(), dtype="bool")
  helper_test_op([(3, 3)], lambda x: x.triu(1), dtype="int32", low=-5, high=5)
  helper_test_op([(0, 3)], lambda x: x.triu())
  with pytest.raises(ValueError, match=r"tril: needs a tensor with at least 2 dims, got 1"): Tensor.ones(3).tril()

@pytest.mark.parametrize("args", [(0, 0, 1), (1, 0, 1), (-1, 0, 1), (2, 1, 0), (0, -1, 0), (1, 0, 2), (-2, 2, 1), (9, 0, 1)])
def test_diagonal(device, args):
  helper_test_op([(3, 4, 2)], lambda x: x.diagonal(*args))

def test_diag(device):
  for k in (0, 1, -2):
    helper_test_op([(3,)], lambda x: x.diag(k))
    helper_test_op([(3, 4)], lambda x: x.diag(k))
  helper_test_op([(0,)], lambda x: x.diag())
  helper_test_op([(3,)], lambda x: torch.diag_embed(x, 1), lambda x: x.diag_embed(1))
  helper_test_op([(2, 3)], lambda x: torch.diag_embed(x), lambda x: x.diag_embed())
  with pytest.raises(ValueError, match=r"diag: needs a 1-D or 2-D tensor, got 3 dims"): Tensor.ones(1, 1, 1).diag()
  with pytest.raises(ValueError, match=r"diagonal: dim1 and dim2 must differ"): Tensor.ones(2, 2).diagonal(0, 1, -1)

def test_trace(device):
  helper_test_op([(3, 4)], lambda x: x.trace())
  helper_test_op([(3, 3)], lambda x: x.trace(), dtype="int32", low=-5, high=5)
  with pytest.raises(ValueError, match=r"trace: needs a 2-D tensor"): Tensor.ones(3).trace()

@pytest.mark.parametrize("shifts,dims", [(1, 0), (-1, 1), (5, 1), ((1, -2), (0, 1)), (2, None), (0, 0), ((1, 1), (1, 1))])
def test_roll(device, shifts, dims):
  helper_test_op([(3, 4)], lambda x: x.roll(shifts, dims))

def test_roll_edge(device):
  helper_test_op([(0, 3)], lambda x: x.roll(1, 1))
  helper_test_op([(2, 3)], lambda x: x.T.roll(1, 0))
  with pytest.raises(ValueError, match=r"roll: shifts \(1, 2\) and dims \(0,\) must have the same length"): Tensor.ones(2, 2).roll((1, 2), (0,))

def test_outer(device):
  helper_test_op([(3,), (4,)], lambda x, y: x.outer(y))
  helper_test_op([(3,), (0,)], lambda x, y: x.outer(y))
  with pytest.raises(ValueError, match=r"outer: both operands must be 1-D"): Tensor.ones(2, 2).outer(Tensor.ones(2))

# ------------------------------------------------------------------ einsum

EINSUM = [
  ("ij,jk->ik", [(2, 3), (3, 4)]),
  ("ij,jk", [(2, 3), (3, 4)]),               # implicit output
  ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
  ("i,i->", [(4,), (4,)]),
  ("i,j->ij", [(2,), (3,)]),
  ("ii->i", [(3, 3)]),                        # diagonal
  ("ii", [(3, 3)]),                           # trace
  ("iij->j", [(2, 2, 3)]),
  ("ij->ji", [(2, 3)]),
  ("ij->", [(2, 3)]),
  ("...ij,...jk->...ik", [(2, 2, 3), (3, 2)]),  # broadcast ellipsis
  ("i...->...", [(2, 3, 2)]),
  ("...,...", [(2, 3), (2, 3)]),
  ("ba,ab", [(2, 3), (3, 2)]),
  ("ij,jk,kl->il", [(2, 3), (3, 2), (2, 2)]),  # three operands, contracted left to right
  ("Ab,bA->A", [(2, 3), (3, 2)]),            # upper case letters
  ("i j , j -> i", [(2, 3), (3,)]),          # spaces
  ("ij,kj->ikj", [(1, 3), (2, 3)]),
  ("ij,ij->ij", [(0, 3), (0, 3)]),
]

@pytest.mark.parametrize("formula,shapes", EINSUM, ids=[f for f, _ in EINSUM])
def test_einsum(device, formula, shapes):
  helper_test_op(shapes, lambda *xs: torch.einsum(formula, *xs), lambda *xs: Tensor.einsum(formula, *xs))

def test_einsum_list_and_ints(device):
  helper_test_op([(2, 3), (3,)], lambda x, y: torch.einsum("ij,j->i", [x, y]), lambda x, y: Tensor.einsum("ij,j->i", [x, y]))
  helper_test_op([(2, 3), (3,)], lambda x, y: torch.einsum("ij,j->i", x, y), lambda x, y: Tensor.einsum("ij,j->i", x, y), dtype="int32", low=-4,
                 high=4)

def test_einsum_errors(device):
  a, b = Tensor.ones(2, 3), Tensor.ones(4, 5)
  with pytest.raises(ValueError, match=r"einsum: 'ij,jk' names 2 operands, got 1"): Tensor.einsum("ij,jk", a)
  with pytest.raises(ValueError, match=r"einsum: subscripts 'ijk' name 3 dims, the operand has 2"): Tensor.einsum("ijk", a)
  with pytest.raises(ValueError, match=r"einsum: subscript 'j' has size 3 in one place and 4 in another"): Tensor.einsum("ij,jk->ik", a, b)
  with pytest.raises(ValueError, match=r"output subscript 'z' does not appear"): Tensor.einsum("ij->z", a)
  with pytest.raises(ValueError, match=r"bad subscripts"): Tensor.einsum("i1->i", a)
  with pytest.raises(ValueError, match=r"einsum: subscript 'i' has size 2 in one place and 3"): Tensor.einsum("ii->i", a)
  with pytest.raises(ValueError, match=r"repeated subscript 'i' needs equal sizes, got 1 and 3"): Tensor.einsum("ii->i", Tensor.ones(1, 3))

# ------------------------------------------------------------------ one_hot, repeat_interleave, meshgrid, unique

def test_one_hot(device):
  import torch.nn.functional as F
  helper_test_op(None, lambda x: F.one_hot(x, 5), lambda x: x.one_hot(5), vals=[[[0, 4], [2, 2]]], dtype="int64")
  helper_test_op(None, lambda x: F.one_hot(x), lambda x: x.one_hot(), vals=[[3, 0, 1]], dtype="int64")
  helper_test_op(None, lambda x: F.one_hot(x.long(), 3), lambda x: x.one_hot(3), vals=[[2, 0]], dtype="int32")
  with pytest.raises(TypeError, match=r"one_hot: needs an integer tensor"): Tensor([1.0]).one_hot(2)
  with pytest.raises(IndexError, match=r"one_hot: class value 3 is out of range for num_classes=3"): Tensor([0, 3]).one_hot(3)
  with pytest.raises(IndexError, match=r"one_hot: class value -1 is out of range"): Tensor([-1, 0]).one_hot(3)
  with pytest.raises(IndexError, match=r"one_hot: a class value is out of range"): (Tensor([0, 3]) + 0).one_hot(3).tolist()   # lazy: when computed

def test_repeat_interleave(device):
  helper_test_op([(2, 3)], lambda x: x.repeat_interleave(2))
  helper_test_op([(2, 3)], lambda x: x.repeat_interleave(3, dim=1))
  helper_test_op([(2, 3)], lambda x: x.repeat_interleave(0, dim=-2))
  helper_test_op([(3, 2)], lambda x: x.repeat_interleave(torch.tensor([1, 0, 2]), dim=0), lambda x: x.repeat_interleave(Tensor([1, 0, 2]), dim=0))
  helper_test_op([(3,)], lambda x: x.repeat_interleave(torch.tensor([2, 1, 1])), lambda x: x.repeat_interleave([2, 1, 1]))
  with pytest.raises(ValueError, match=r"repeat_interleave: repeats has 2 entries, dim 0 has size 3"): Tensor.ones(3).repeat_interleave([1, 2])

@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(device, indexing):
  helper_test_op([(3,), (2,)], lambda x, y: torch.meshgrid(x, y, indexing=indexing), lambda x, y: Tensor.meshgrid(x, y, indexing=indexing))
  helper_test_op([(2,), (3,), (1,)], lambda x, y, z: torch.meshgrid([x, y, z], indexing=indexing),
                 lambda x, y, z: Tensor.meshgrid([x, y, z], indexing=indexing))
  helper_test_op([(4,)], lambda x: torch.meshgrid(x, indexing=indexing), lambda x: Tensor.meshgrid(x, indexing=indexing))
  helper_test_op([(2,), (0,)], lambda x, y: torch.meshgrid(x, y, indexing=indexing), lambda x, y: Tensor.meshgrid(x, y, indexing=indexing))
  # tinygrad's method form: x.meshgrid(y) (the grids of x and y, not y's alone)
  helper_test_op([(3,), (4,)], lambda x, y: torch.meshgrid(x, y, indexing=indexing), lambda x, y: x.meshgrid(y, indexing=indexing))

def test_meshgrid_errors(device):
  with pytest.raises(ValueError, match=r"meshgrid: indexing must be 'ij' or 'xy'"): Tensor.meshgrid(Tensor.ones(2), indexing="ji")
  with pytest.raises(ValueError, match=r"meshgrid: expects 0-D or 1-D tensors"): Tensor.meshgrid(Tensor.ones(2, 2))

def test_unique(device):
  v = [[3, 1, 2], [3, 1, 5]]
  helper_test_op(None, lambda x: x.unique(), vals=[v], dtype="int32")
  helper_test_op(None, lambda x: x.unique(return_inverse=True, return_counts=True), vals=[v], dtype="int32")
  helper_test_op(None, lambda x: x.unique(return_counts=True), vals=[[0.5, -1.0, 0.5, 2.0]], forward_only=True)
  helper_test_op(None, lambda x: x.unique(), vals=[[True, True]], dtype="bool")
  helper_test_op(None, lambda x: x.unique(return_inverse=True), vals=[[7]], dtype="int64")
  helper_test_op(None, lambda x: x.unique(return_inverse=True, return_counts=True), vals=[np.zeros(0, np.int64)], dtype="int64")

def test_unique_dim(device):
  m = [[1, 2, 0], [3, 4, 1], [1, 2, 0], [0, 9, 1]]
  helper_test_op(None, lambda x: x.unique(dim=0, return_inverse=True, return_counts=True), vals=[m], dtype="int32")
  helper_test_op(None, lambda x: x.unique(dim=1, return_inverse=True, return_counts=True), vals=[m], dtype="int32")
  helper_test_op(None, lambda x: x.unique(dim=-1), vals=[[[[1, 2], [1, 2]], [[0, 1], [0, 1]]]], dtype="int64")
  helper_test_op(None, lambda x: x.unique(dim=0, return_counts=True), vals=[[[1.5, -2.0], [1.5, -2.0], [-0.5, 3.0]]], forward_only=True)
  helper_test_op(None, lambda x: x.unique(dim=0), vals=[[[True, False], [True, False], [False, True]]], dtype="bool")
  helper_test_op(None, lambda x: x.unique(dim=0, return_inverse=True), vals=[[5, 5, 2]], dtype="int32")
  helper_test_op(None, lambda x: x.unique(dim=0, return_inverse=True, return_counts=True), vals=[np.zeros((0, 3))], forward_only=True)
  with pytest.raises(RuntimeError, match=r"unique: dims of size 0 other than dim 0"): Tensor.zeros(2, 0).unique(dim=0)
  with pytest.raises(IndexError, match=r"unique: axis 2 is out of range"): Tensor.zeros(2, 2).unique(dim=2)
  with pytest.raises(IndexError, match=r"unique: dim 0 given for a 0-d tensor"): Tensor(1).unique(dim=0)

# ------------------------------------------------------------------ long-row paths (thresholds lowered so tiny inputs take them)

@pytest.fixture
def small_thresholds(monkeypatch):
  import petagrad.mixin.ordering as O
  monkeypatch.setattr(O, "SCAN_DIRECT", 4)
  monkeypatch.setattr(O, "SCAN_BLOCK", 3)     # n=11: blocks of 3, block totals scanned in blocks again
  monkeypatch.setattr(O, "SORT_DIRECT", 2)

def test_blocked_scans(device, small_thresholds):
  helper_test_op([(2, 11)], lambda x: x.cumsum(1))
  helper_test_op([(11,)], lambda x: x.logcumsumexp(0))
  helper_test_op([(11,)], lambda x: x.cumprod(0), low=0.5, high=1.5)
  v = [[1.0, 3.0, 3.0, 0.0, NAN, 2.0, 5.0, -1.0, NAN, 4.0, 0.0], [2.0, 2.0, 1.0, 1.0, 3.0, 0.0, 3.0, 3.0, -4.0, 9.0, 9.0]]
  helper_test_op(None, lambda x: tuple(x.cummax(1)), vals=[v], forward_only=True)
  helper_test_op(None, lambda x: tuple(x.cummin(1)), vals=[v], forward_only=True)
  helper_test_op([(11,)], lambda x: tuple(x.cummin(0)), dtype="int32", low=-4, high=4)
  # ties on long rows: the gradient of each output goes to the element at its index (the last tied one), like torch
  ties = [[2.0, 2.0, 1.0, 2.0, 3.0, 3.0, 0.0, 3.0, 1.0, 5.0, 5.0], [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0]]
  helper_test_op(None, lambda x: tuple(x.cummax(1)), vals=[ties])
  helper_test_op(None, lambda x: tuple(x.cummin(1)), vals=[[[-v for v in r] for r in ties]])

def test_bitonic_sort(device, small_thresholds, monkeypatch):
  # rows longer than SORT_DIRECT: blocks of SORT_BLOCK sorted by ranks, then bitonic merges; gradients through the network
  import petagrad.mixin.ordering as O
  monkeypatch.setattr(O, "SORT_BLOCK", 2)    # n=5 -> N=8: 4 blocks of 2, merges of runs of 2 and 4
  helper_test_op(None, lambda x: tuple(x.sort(dim=-1, stable=True)), vals=[[[3.0, 1.0, 2.0, 1.0, -1.0], [0.5, 0.25, 0.5, 0.75, 0.0]]])
  helper_test_op(None, lambda x: tuple(x.sort(dim=0, descending=True, stable=True)),
                 vals=[[[2.0, 1.0], [NAN, 5.0], [2.0, -1.0], [-3.0, 5.0], [NAN, 0.0]]])
  monkeypatch.setattr(O, "SORT_BLOCK", 4)    # n=6..8 -> N=8: 2 blocks of 4, one merge phase
  helper_test_op(None, lambda x: tuple(x.topk(3)), vals=[[4, -1, 7, 0, 2, 6]], dtype="int32")
  helper_test_op(None, lambda x: x.argsort(stable=True), vals=[[1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0]], forward_only=True)

def test_bitonic_stages_compile_once(device, small_thresholds, monkeypatch, applied_opts):
  # every merge step is one kernel whose stage is data: the programs compiled for a sort (and its backward) do not
  # grow with the number of stages (n=16: 12 steps, n=64: 30 steps)
  import petagrad.mixin.ordering as O, petagrad.schedule.schedule as S
  monkeypatch.setattr(O, "SORT_BLOCK", 2)
  monkeypatch.setattr(S, "GROUP_CHAIN_WORK", 8)   # the steps are big kernels, as a long row's are (no launch groups)
  compiles = []
  for n in (16, 64):
    vals = np.random.default_rng(n).integers(-8, 8, (2, n)).astype(np.float32)   # ties: the sort is stable
    c0 = GlobalCounters.compile_count
    helper_test_op(None, lambda x: tuple(x.sort(dim=-1, descending=True, stable=True)), vals=[vals.tolist()])
    compiles.append(GlobalCounters.compile_count - c0)
  assert compiles[1] <= compiles[0], compiles   # (one compile per stage: 5 stages at n=16, 15 at n=64)
