"""Symbolic shapes: sizes that are expressions over bound Variables (x[:v], Tensor.arange(v)). One compile (and one
JIT capture) serves every value; results and gradients match torch on the concrete slices."""
from __future__ import annotations
import numpy as np
import pytest
import torch
from petagrad import Tensor, Variable, TinyJit, GlobalCounters
from helpers import compare

V = Variable("n", 1, 12)
VALUES = (3, 12, 1, 7)

def _each_value(fn, device, values=VALUES) -> list[int]:
  """Run fn(bound n, n) for each value; the compiles each call made."""
  compiles = []
  for n in values:
    c0 = GlobalCounters.compile_count
    fn(V.bind(n), n)
    compiles.append(GlobalCounters.compile_count - c0)
  return compiles

def test_slice_ops_against_torch(device):
  xn = np.random.default_rng(0).standard_normal((12, 5)).astype(np.float32)
  x = Tensor(xn, device=device).realize()
  def check(b, n):
    y, ty = x[:b], torch.tensor(xn[:n])
    assert y.shape == (b, 5) and y.concrete_shape == (n, 5)
    compare("elementwise", (y * 2 + 1).exp(), (ty * 2 + 1).exp(), 1e-5, 1e-5)
    compare("sum0", y.sum(0), ty.sum(0), 1e-5, 1e-5)
    compare("sum", y.sum(), ty.sum(), 1e-4, 1e-5)
    compare("mean0", y.mean(0), ty.mean(0), 1e-5, 1e-5)
    compare("max0", y.max(0).values, ty.max(0).values, 0, 0)
    compare("argmax0", y.argmax(0), ty.argmax(0), 0, 0)
    compare("softmax0", y.softmax(0), ty.softmax(0), 1e-6, 1e-5)
    compare("logsumexp1", y.logsumexp(1), ty.logsumexp(1), 1e-5, 1e-5)
  compiles = _each_value(check, device)
  assert compiles[1:] == [0] * (len(VALUES) - 1), compiles   # one compile serves every value

def test_movement_ops(device):
  xn = np.arange(12 * 8, dtype=np.float32).reshape(12, 8)
  x = Tensor(xn, device=device).realize()
  def check(b, n):
    y = x[:b]
    np.testing.assert_array_equal(y.reshape(b, 2, 4).permute(1, 0, 2).numpy(), xn[:n].reshape(n, 2, 4).transpose(1, 0, 2))
    np.testing.assert_array_equal(y.reshape(-1).numpy(), xn[:n].reshape(-1))
    np.testing.assert_array_equal(y.reshape(b, 2, -1).numpy(), xn[:n].reshape(n, 2, 4))   # -1: (8*n) / (2*n) is 4
    np.testing.assert_array_equal(y.reshape(-1, 4).numpy(), xn[:n].reshape(-1, 4))         # -1: (8*n) / 4 is 2*n
    np.testing.assert_array_equal(y.reshape(b * 8).reshape(b, 8).numpy(), xn[:n])
    np.testing.assert_array_equal(y.reshape(8, b).numpy(), xn[:n].reshape(8, n))   # a reshape across the symbolic size
    np.testing.assert_array_equal(y.T.contiguous().numpy(), xn[:n].T)
    np.testing.assert_array_equal(y.flip(0).numpy(), xn[:n][::-1])
    np.testing.assert_array_equal(y[1:].numpy() if n > 1 else xn[1:n], xn[1:n])
    np.testing.assert_array_equal(y[:, 2:5].numpy(), xn[:n, 2:5])
    np.testing.assert_array_equal(Tensor.ones(1, 8, device=device).expand(b, 8).numpy(), np.ones((n, 8), np.float32))
    np.testing.assert_array_equal(Tensor.arange(b, device=device).numpy(), np.arange(n))
    np.testing.assert_array_equal(Tensor.cat(y, y * 2, dim=1).numpy(), np.concatenate([xn[:n], xn[:n] * 2], 1))
    np.testing.assert_array_equal(y.pad(((1, 2), None)).numpy(), np.pad(xn[:n], ((1, 2), (0, 0))))
    np.testing.assert_array_equal(x[:2].pad(((b, 0), None)).numpy(), np.pad(xn[:2], ((n, 0), (0, 0))))   # a padded size of v + 2
    assert y.tolist() == xn[:n].tolist()
  _each_value(check, device)

def test_gradients_against_torch(device):
  rng = np.random.default_rng(1)
  xn, wn = rng.standard_normal((12, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
  for n in VALUES:
    x, w = Tensor(xn, requires_grad=True, device=device), Tensor(wn, requires_grad=True, device=device)
    tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    out = (x[:V.bind(n)] @ w).relu().softmax(0).mean(1).sum() + x[:V.bind(n)].square().mean()
    tout = (tx[:n] @ tw).relu().softmax(0).mean(1).sum() + tx[:n].square().mean()
    out.backward(); tout.backward()
    compare("loss", out, tout, 1e-5, 1e-5)
    compare("dx", x.grad, tx.grad, 1e-5, 1e-4)
    compare("dw", w.grad, tw.grad, 1e-5, 1e-4)

def test_attention_over_a_kv_cache_one_capture(device):
  """The decode pattern: attention over the first start_pos + 1 rows of a preallocated cache, one capture."""
  rng = np.random.default_rng(2)
  kn, vn = rng.standard_normal((2, 12, 8)).astype(np.float32), rng.standard_normal((2, 12, 8)).astype(np.float32)
  k, v = Tensor(kn, device=device).realize(), Tensor(vn, device=device).realize()
  @TinyJit
  def step(q: Tensor, pos) -> Tensor:
    return q.scaled_dot_product_attention(k[:, :pos + 1], v[:, :pos + 1]).realize()
  for p in (2, 5, 0, 11, 7):
    qn = rng.standard_normal((2, 1, 8)).astype(np.float32)
    out = step(Tensor(qn, device=device), Variable("pos", 0, 11).bind(p))
    want = torch.nn.functional.scaled_dot_product_attention(torch.tensor(qn), torch.tensor(kn[:, :p + 1]), torch.tensor(vn[:, :p + 1]))
    compare("attention", out, want, 1e-5, 1e-5)
  assert len(step.captured) >= 1 and step.cnt == 5

def test_symbolic_output_of_a_jit(device):
  x = Tensor(np.arange(24, dtype=np.float32).reshape(12, 2), device=device).realize()
  @TinyJit
  def f(b) -> Tensor: return (x[:b] * 3).realize()
  for n in (4, 9, 2, 12):
    out = f(V.bind(n))
    assert out.shape == (V.bind(n), 2)
    np.testing.assert_array_equal(out.numpy(), np.arange(24, dtype=np.float32).reshape(12, 2)[:n] * 3)

def test_sort_and_cumsum_along_a_symbolic_dim(device, monkeypatch):
  # (longer than SORT_DIRECT: an int length would take the network, a symbolic one sorts by ranks up to 64k)
  import petagrad.mixin.ordering as O
  monkeypatch.setattr(O, "SORT_DIRECT", 2)
  xn = np.array([5, 3, 7, 1, 0, 2, 6, 4, 11, 9, 8, 10], dtype=np.float32)
  x = Tensor(xn, device=device).realize()
  for n in VALUES:
    y, ty = x[:V.bind(n)], torch.tensor(xn[:n])
    values, indices = y.sort(descending=True)
    tv, ti = ty.sort(descending=True)
    compare("sort values", values, tv, 0, 0)
    compare("sort indices", indices, ti, 0, 0)
    compare("cumsum", y.cumsum(0), ty.cumsum(0), 1e-6, 1e-6)

def test_cache_keys_tell_ranges_apart():
  """Kernels are cached (on disk too) under their structure; one name with two ranges must not share an entry."""
  a, b = Variable("same", 0, 8), Variable("same", 1, 8)
  assert repr(a) != repr(b) and repr(a.bind(3) + 1) != repr(b.bind(3) + 1)
  x = Tensor.arange(8).realize()
  assert x[:a.bind(0)].sum().item() == 0 and x[:b.bind(3)].sum().item() == 3 and x[:a.bind(3)].sum().item() == 3

def test_empty_value():
  v = Variable("m", 0, 4)
  x = Tensor.ones(4, 3)
  np.testing.assert_array_equal(x[:v.bind(0)].sum(0).numpy(), np.zeros(3, np.float32))
  assert x[:v.bind(0)].numpy().shape == (0, 3)

def test_errors():
  x = Tensor.ones(12, 4)
  a, b = x[:V.bind(3)], x[:Variable("m", 1, 12).bind(3)]
  with pytest.raises(ValueError):   # two symbolic sizes that are not the same expression do not broadcast
    (a + b).realize()
  with pytest.raises(TypeError, match="cannot decide"):   # an undecidable comparison of a symbolic size in Python
    if a.shape[0] < 5: pass
  assert not (a.shape[0] < 0)   # a comparison that holds for every value is decided
  with pytest.raises(IndexError, match="out of bounds"): x[:Variable("big", 1, 13).bind(2)]   # 13 > 12 rows
  with pytest.raises(ValueError, match="cannot reshape"): a.reshape(3, 4)
  with pytest.raises(ValueError, match="cannot reshape"): a.reshape(-1, 3)   # (4*n) / 3 is not a size
  with pytest.raises(ValueError, match="must be bound"): x[:Variable("free", 1, 12)]
  with pytest.raises(ValueError, match="rand"): Tensor.rand(V.bind(3), 2)   # random ops take no symbolic size
  with pytest.raises(TypeError, match="interpolate"): a.reshape(1, 1, -1).interpolate((4,))   # an op that needs a float of a size

# ------------------------------------------------------------------ a fuzzer of random graphs over a symbolic dim
# Each program is a few random ops over x[:n] and y[:n] (x, y: (12, c)); the shapes it tracks hold "S" for the
# symbolic size. It runs for several values of n against torch on the same slices; the values after the first must
# compile nothing. A failure prints the program. Widths 3 and 32 (32: the kernels the heuristics tile and thread).
FUZZ_PROGRAMS, FUZZ_OPS = int(__import__("os").environ.get("FUZZ_SYMBOLIC", "24")), 7
FUZZ_VALUES = (0, 12, 1, 5)

def _ops(shape: tuple, c: int) -> list[tuple[str, tuple]]:
  """The ops that apply to a node of this shape: (code with {a}, the result's shape)."""
  out = [("({a}).tanh().exp()", shape), ("({a}).relu()", shape), ("-({a})", shape), ("({a}) * ({a})", shape), ("({a}).abs().sqrt()", shape)]
  nd = len(shape)
  for ax in range(nd):
    rest = shape[:ax] + shape[ax + 1:]
    out += [(f"({{a}}).sum({ax})", rest), (f"({{a}}).mean({ax}, keepdim=True)", shape[:ax] + (1,) + shape[ax + 1:]),
            (f"({{a}}).flip({ax})", shape), (f"({{a}}).cumsum({ax})", shape)]
    if shape[ax] != "S": out += [(f"({{a}}).softmax({ax})", shape), (f"pad({{a}}, {ax})", shape[:ax] + (shape[ax] + 3,) + shape[ax + 1:]),
                                 (f"cat({{a}}, {{a}} * 2, {ax})", shape[:ax] + (2 * shape[ax],) + shape[ax + 1:])]
  if nd == 2:
    out.append(("({a}).T", shape[::-1]))
    if shape == ("S", c):
      out += [("({a}).reshape(-1).reshape(B, C)", shape), ("({a}) + ROW", shape), ("({a}) @ W", ("S", 16)), ("({a}) @ W.T.T", ("S", 16)),
              ("({a}).T @ ({a})", (c, c)), ("(({a}) @ W).sigmoid()", ("S", 16))]
    if shape == (c, "S"): out.append(("({a}) @ ({a}).T", (c, c)))
  if shape == (c,): out.append(("({a}).reshape(1, C).expand(B, C)", ("S", c)))
  return out

def _program(rng, c: int) -> tuple[str, list[str]]:
  nodes = {"x": ("S", c), "y": ("S", c)}
  lines = []
  for i in range(rng.randint(2, FUZZ_OPS)):
    name = rng.choice(list(nodes))
    code, shape = rng.choice(_ops(nodes[name], c))
    same = [m for m in nodes if m != name and nodes[m] == nodes[name]]
    if same and rng.random() < 0.3:   # a binary op with another node of the same (symbolic) shape instead
      code, shape = f"({{a}}) {rng.choice(['+', '*', '-'])} {rng.choice(same)}", nodes[name]
    lines.append(f"t{i} = " + code.replace("{a}", name))
    nodes[f"t{i}"] = shape
  outs = rng.sample([n for n in nodes if n.startswith("t")], k=min(3, len(nodes) - 2))
  return "\n".join(lines), outs

@pytest.mark.parametrize("c", [3, 32])
def test_fuzz_symbolic_graphs(device, c):
  if device == "PYTHON" and c > 3: pytest.skip("the PYTHON device interprets one scalar at a time")
  rng = np.random.default_rng(5)
  xn, yn = rng.standard_normal((12, c)).astype(np.float32), rng.standard_normal((12, c)).astype(np.float32)
  wn, rown = rng.standard_normal((c, 16)).astype(np.float32), rng.standard_normal((c,)).astype(np.float32)
  xt, yt = Tensor(xn, device=device).realize(), Tensor(yn, device=device).realize()
  prng = __import__("random").Random(int(__import__("os").environ.get("FUZZ_SYMBOLIC_SEED", "7")) + c)
  for _ in range(FUZZ_PROGRAMS):
    code, outs = _program(prng, c)
    for k, n in enumerate(FUZZ_VALUES):
      b = Variable("S", 0, 12).bind(n)
      c0 = GlobalCounters.compile_count
      pg = {"x": xt[:b], "y": yt[:b], "B": b, "C": c, "W": Tensor(wn, device=device), "ROW": Tensor(rown, device=device),
            "cat": lambda a, o, d: a.cat(o, dim=d), "pad": lambda a, d: a.pad(tuple((1, 2) if i == d else (0, 0) for i in range(a.ndim)))}
      ref = {"x": torch.tensor(xn[:n], dtype=torch.float64), "y": torch.tensor(yn[:n], dtype=torch.float64), "B": n, "C": c,
             "W": torch.tensor(wn, dtype=torch.float64), "ROW": torch.tensor(rown, dtype=torch.float64),
             "cat": lambda a, o, d: torch.cat((a, o), d),
             "pad": lambda a, d: torch.nn.functional.pad(a, [x for i in reversed(range(a.ndim)) for x in ((1, 2) if i == d else (0, 0))])}
      try:
        exec(code, {}, pg)
        Tensor.realize_all(*[pg[o] for o in outs])
        exec(code, {}, ref)
        for o in outs: compare(o, pg[o], ref[o].float(), 1e-4, 1e-4)
      except Exception as e: raise AssertionError(f"n = {n}, outputs {outs}:\n{code}") from e
      if k: assert GlobalCounters.compile_count == c0, f"n = {n} compiled {GlobalCounters.compile_count - c0} kernels:\n{code}"

def test_symbolic_rows_tile_clamped(applied_opts, device):
  """A matmul over a symbolic number of rows (a prefill of any prompt length) is register-tiled over those rows: blocks
  of rows, the last block's extra rows clamped to the last one (OptOps.CLAMP); every count, multiples of the tile or
  not, against torch."""
  from petagrad.codegen.opt import OptOps
  rng = np.random.default_rng(6)
  xn, wn = rng.standard_normal((40, 64)).astype(np.float32), rng.standard_normal((48, 64)).astype(np.float32)
  x, w = Tensor(xn, device=device).realize(), Tensor(wn, device=device).realize()
  v = Variable("rows", 1, 40)
  for n in (1, 3, 8, 13, 40):
    b = v.bind(n)
    compare("x @ w.T", x[:b] @ w.T, torch.tensor(xn[:n]) @ torch.tensor(wn).T, 1e-4, 1e-5)
    compare("x @ w", x[:b, :48] @ w, torch.tensor(xn[:n, :48]) @ torch.tensor(wn), 1e-4, 1e-5)
  if device == "CPU": assert any(o.op is OptOps.CLAMP for opts in applied_opts for o in opts), applied_opts
