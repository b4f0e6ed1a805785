"""The IR core: hash-consing, toposort, content keys, deep graphs, the pattern matcher and graph_rewrite."""
from __future__ import annotations
import gc, math, os, subprocess, sys
from petagrad.uop.uop import UOp
from petagrad.uop.ops import Ops, GroupOp
from petagrad.uop.rewrite import UPat, PatternMatcher, graph_rewrite
from petagrad.uop.symbolic import simplify
from petagrad.dtype import dtypes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def rng(i: int, n: int) -> UOp: return UOp(Ops.RANGE, dtypes.int64, (), (i, n, "loop"))
def c(v, dt=dtypes.int64) -> UOp: return UOp.const(dt, v)

# ------------------------------------------------------------ hash-consing

class TestHashCons:
  def test_same_structure_same_object(self):
    a, b = rng(0, 4), rng(0, 4)
    assert a is b
    assert (a + 1) * 3 is (b + 1) * 3
    assert UOp(Ops.ADD, dtypes.int64, (a, c(1))) is a + 1
    assert UOp(Ops.CONST, dtypes.float32, (), 2.5) is UOp.const(dtypes.float32, 2.5)

  def test_different_structure_different_object(self):
    a, b = rng(0, 4), rng(1, 4)
    assert a is not b
    assert a + b is not b + a                      # source order is structure
    assert a + 1 is not a * 1
    assert c(1, dtypes.int32) is not c(1, dtypes.int64)
    assert rng(0, 4) is not rng(0, 5)
    assert UOp(Ops.RANGE, dtypes.int64, (), (0, 4, "loop")) is not UOp(Ops.RANGE, dtypes.int64, (), (0, 4, "reduce"))

  def test_signed_zero_distinct(self):
    pz, nz = UOp.const(dtypes.float32, 0.0), UOp.const(dtypes.float32, -0.0)
    assert pz is not nz
    assert math.copysign(1.0, pz.arg) == 1.0 and math.copysign(1.0, nz.arg) == -1.0
    assert pz is UOp.const(dtypes.float32, 0.0) and nz is UOp.const(dtypes.float32, -0.0)
    # also inside tuple args
    assert UOp(Ops.CONST, dtypes.float32, (), (0.0, 1)) is not UOp(Ops.CONST, dtypes.float32, (), (-0.0, 1))

  def test_int_float_bool_distinct(self):
    vals = [UOp(Ops.CONST, dtypes.int64, (), v) for v in (1, 1.0, True)]
    assert len({id(u) for u in vals}) == 3
    assert [type(u.arg) for u in vals] == [int, float, bool]
    zeros = [UOp(Ops.CONST, dtypes.int64, (), v) for v in (0, 0.0, -0.0, False)]
    assert len({id(u) for u in zeros}) == 4
    assert UOp(Ops.RANGE, dtypes.int64, (), (0, 1, "loop")) is not UOp(Ops.RANGE, dtypes.int64, (), (0, 1.0, "loop"))
    assert UOp(Ops.RANGE, dtypes.int64, (), (0, 1, "loop")) is not UOp(Ops.RANGE, dtypes.int64, (), (0, True, "loop"))

  def test_nan_const_is_consed(self):
    assert UOp.const(dtypes.float32, math.nan) is UOp.const(dtypes.float32, float("nan"))

  def test_const_truncates_to_dtype(self):
    assert UOp.const(dtypes.int8, 130).arg == -126
    assert UOp.const(dtypes.uint8, -1).arg == 255
    assert UOp.const(dtypes.int32, 3) is UOp.const(dtypes.int32, 3 + (1 << 32))
    assert UOp.const(dtypes.bool, 5).arg is True

  def test_eq_is_identity_and_hashable(self):
    a = rng(0, 4) + 1
    assert a == rng(0, 4) + 1 and a != rng(0, 4) + 2
    assert len({a, rng(0, 4) + 1, rng(0, 4) + 2}) == 2

  def test_dead_nodes_are_collected_and_rebuilt(self):
    def make(): return (rng(7, 13) * 11 + 5) // 3
    key = make().key
    gc.collect()
    again = make()
    assert again.key == key and again is make()

  def test_replace(self):
    a = rng(0, 4) + 1
    assert a.replace(op=Ops.MUL) is rng(0, 4) * 1
    assert a.replace() is a

# ------------------------------------------------------------ toposort and keys

class TestToposort:
  def test_children_first_each_once(self):
    a, b = rng(0, 4), rng(1, 5)
    s = a + b
    root = (s * s) + (s // 2)
    order = list(root.toposort())
    assert order[-1] is root
    assert len(order) == len(set(order))
    pos = {u: i for i, u in enumerate(order)}
    for u in order:
      for src in u.src: assert pos[src] < pos[u]
    assert set(order) == {a, b, s, s * s, c(2), s // 2, root}

  def test_sources_in_order(self):
    a, b, d = rng(0, 2), rng(1, 2), rng(2, 2)
    order = list(UOp(Ops.WHERE, dtypes.int64, (a < b, d, a)).toposort())
    # depth-first, sources left to right: a, b, a<b, d, where
    assert order[:4] == [a, b, a < b, d]

  def test_deterministic(self):
    root = ((rng(0, 4) + rng(1, 4)) * 3) % 5
    assert list(root.toposort()) == list(root.toposort())

class TestKey:
  def test_structural(self):
    a = (rng(0, 4) * 3 + 1).key
    assert isinstance(a, str) and len(a) == 32
    assert a == (rng(0, 4) * 3 + 1).key
    assert a != (rng(0, 4) * 3 + 2).key
    assert (rng(0, 4) + rng(1, 4)).key != (rng(1, 4) + rng(0, 4)).key
    assert c(1, dtypes.int32).key != c(1, dtypes.int64).key

  def test_distinguishes_zero_signs_and_types(self):
    keys = {UOp(Ops.CONST, dtypes.float32, (), v).key for v in (0.0, -0.0)}
    keys |= {UOp(Ops.CONST, dtypes.int64, (), v).key for v in (1, 1.0, True)}
    assert len(keys) == 5

  def test_stable_across_processes(self):
    # the key keys on-disk caches: it must not depend on id(), hash seeds or the process
    expr = "((UOp(Ops.RANGE, dtypes.int64, (), (0, 12, 'loop')) * 4 + UOp.const(dtypes.int64, -3)) // 5).maximum(UOp.const(dtypes.int64, 0))"
    here = eval(expr).key
    code = f"from petagrad.uop.uop import UOp; from petagrad.uop.ops import Ops; from petagrad.dtype import dtypes; print({expr}.key)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": ROOT})
    assert out.stdout.strip() == here

# ------------------------------------------------------------ deep graphs (no recursion)

DEPTH = 10_000

class TestDeepGraph:
  def test_deep_chain(self):
    assert sys.getrecursionlimit() < DEPTH   # a recursive walk would fail here
    r = rng(0, 10)
    x = r
    for i in range(DEPTH): x = x + 1 if i % 2 else x.maximum(r)
    order = x.toposort()
    assert len(order) == DEPTH + 2 and next(iter(order)) is r   # r, const 1, the chain
    assert len(x.key) == 32
    assert x.bounds == (DEPTH // 2, 9 + DEPTH // 2)
    assert len(repr(x)) > 0
    # a matcher that rewrites every node of the chain (MAX(x, r) -> MAX(r, x) once, by op order)
    pm = PatternMatcher([(UPat(Ops.MAX, src=(UPat(Ops.ADD, name="a"), UPat(Ops.RANGE, name="b"))), lambda a, b: UOp(Ops.MAX, a.dtype, (b, a)))])
    y = graph_rewrite(x, pm)
    assert len(y.toposort()) == DEPTH + 2
    assert all(u.src[0] is r for u in y.toposort() if u.op is Ops.MAX)
    # the simplifier on the whole chain
    s = simplify(x)
    assert s.bounds == x.bounds
    del x, y, s, order
    gc.collect()   # freeing a deep chain must not overflow the C stack either

  def test_deep_chain_folds(self):
    # ((r + 1) + 1) + ... folds to r + DEPTH through the linear normalization, bottom-up
    r = rng(0, 10)
    x = r
    for _ in range(DEPTH): x = x + 1
    assert simplify(x) is r + DEPTH

  def test_wide_and_deep_dag(self):
    # every node used twice: a naive tree walk would be exponential
    a = rng(0, 3)
    x = a
    for _ in range(2000): x = x * x
    order = x.toposort()
    assert len(order) == 2001
    assert len(x.key) == 32
    count = [0]
    def f(m):
      count[0] += 1
      return None
    graph_rewrite(x, PatternMatcher([(UPat(Ops.MUL, name="m"), f)]))
    assert count[0] == 2000   # each node rewritten once

# ------------------------------------------------------------ pattern matcher

def _match(pat: UPat, u: UOp) -> list[dict]: return pat.match(u, {})

class TestUPat:
  a, b = rng(0, 4), rng(1, 5)

  def test_op_and_name(self):
    u = self.a + self.b
    assert _match(UPat(Ops.ADD, name="x"), u) == [{"x": u}]
    assert _match(UPat(Ops.MUL), u) == []
    assert _match(UPat({Ops.MUL, Ops.ADD}), u) == [{}]
    assert _match(UPat(), u) == [{}]

  def test_tuple_src_in_order(self):
    u = self.a + 3
    assert _match(UPat(Ops.ADD, src=(UPat(Ops.RANGE, name="x"), UPat.cvar("k"))), u) == [{"x": self.a, "k": c(3)}]
    assert _match(UPat(Ops.ADD, src=(UPat.cvar("k"), UPat(Ops.RANGE, name="x"))), u) == []

  def test_list_src_permutations(self):
    u = self.a + 3
    pat = UPat(Ops.ADD, src=[UPat.cvar("k"), UPat(Ops.RANGE, name="x")])
    assert _match(pat, u) == [{"x": self.a, "k": c(3)}]
    assert _match(pat, UOp(Ops.ADD, dtypes.int64, (c(3), self.a))) == [{"x": self.a, "k": c(3)}]
    # both orders can match: all matches are returned
    ms = _match(UPat(Ops.ADD, src=[UPat(Ops.RANGE, name="x"), UPat(Ops.RANGE, name="y")]), self.a + self.b)
    assert {(m["x"], m["y"]) for m in ms} == {(self.a, self.b), (self.b, self.a)}

  def test_single_upat_for_all_srcs(self):
    w = UOp(Ops.WHERE, dtypes.int64, (self.a < self.b, self.a, self.b))
    assert _match(UPat(Ops.WHERE, src=UPat(name="s")), w) == []   # s must be the same node for all
    assert len(_match(UPat(Ops.WHERE, src=UPat()), w)) == 1
    assert len(_match(UPat(Ops.ADD, src=UPat(Ops.RANGE)), self.a + self.b)) == 1
    assert _match(UPat(Ops.ADD, src=UPat(Ops.RANGE)), self.a + 1) == []
    assert _match(UPat(Ops.ADD, src=UPat(Ops.RANGE, name="r")), self.a + self.a) == [{"r": self.a}]

  def test_consistent_names(self):
    pat = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
    assert _match(pat, self.a + self.a) == [{"x": self.a}]
    assert _match(pat, self.a + self.b) == []
    # a name shared between levels
    deep = UPat(Ops.MUL, src=(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar())), UPat.var("x")))
    assert len(_match(deep, (self.a + 1) * self.a)) == 1
    assert _match(deep, (self.a + 1) * self.b) == []

  def test_cvar(self):
    assert _match(UPat.cvar("k"), c(5)) == [{"k": c(5)}]
    assert _match(UPat.cvar("k"), self.a) == []
    assert _match(UPat.cvar("k", 5), c(5)) == [{"k": c(5)}]
    assert _match(UPat.cvar("k", 5), c(6)) == []
    # the value's Python type matters: 0 does not match 0.0 or False, 1 does not match True
    assert _match(UPat.cvar(value=0), UOp.const(dtypes.float32, 0.0)) == []
    assert _match(UPat.cvar(value=0), UOp.const(dtypes.bool, False)) == []
    assert _match(UPat.cvar(value=1), UOp.const(dtypes.bool, True)) == []
    assert _match(UPat.cvar(value=1.0), UOp.const(dtypes.float32, 1.0)) != []

  def test_dtype_filter(self):
    f = UOp.const(dtypes.float32, 1.0)
    assert _match(UPat.var("x", dtype=dtypes.float32), f) == [{"x": f}]
    assert _match(UPat.var("x", dtype=dtypes.int64), f) == []
    assert _match(UPat.var("x", dtype=(dtypes.int64, dtypes.float32)), f) == [{"x": f}]
    assert _match(UPat.cvar("k", dtype=dtypes.int64), c(2)) == [{"k": c(2)}]
    assert _match(UPat.cvar("k", dtype=dtypes.int32), c(2)) == []

  def test_arg_and_custom(self):
    assert _match(UPat(Ops.RANGE, arg=(0, 4, "loop")), self.a) == [{}]
    assert _match(UPat(Ops.RANGE, arg=(0, 5, "loop")), self.a) == []
    assert _match(UPat(Ops.RANGE, custom=lambda u: u.arg[1] > 4), self.b) == [{}]
    assert _match(UPat(Ops.RANGE, custom=lambda u: u.arg[1] > 4), self.a) == []

  def test_src_length(self):
    w = UOp(Ops.WHERE, dtypes.int64, (self.a < self.b, self.a, self.b))
    assert _match(UPat(Ops.WHERE, src=(UPat(), UPat())), w) == []
    assert _match(UPat(Ops.WHERE, src=(UPat(Ops.CMPLT, name="cond"),), allow_any_len=True), w) == [{"cond": self.a < self.b}]
    assert _match(UPat(Ops.WHERE, src=(UPat(), UPat(), UPat(), UPat()), allow_any_len=True), w) == []
    assert _match(UPat(Ops.RANGE, src=()), self.a) == [{}]

class TestPatternMatcher:
  def test_first_rule_wins_in_table_order(self):
    u = rng(0, 4) + 1
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: c(1)), (UPat(Ops.ADD, name="x"), lambda x: c(2))])
    assert pm.rewrite(u) is c(1)
    # a rule with no op keeps its place in the table relative to rules with an op
    pm = PatternMatcher([(UPat(name="x"), lambda x: c(1) if x.op is Ops.ADD else None), (UPat(Ops.ADD, name="x"), lambda x: c(2))])
    assert pm.rewrite(u) is c(1)
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: c(2)), (UPat(name="x"), lambda x: c(1) if x.op is Ops.ADD else None)])
    assert pm.rewrite(u) is c(2)

  def test_none_and_self_fall_through(self):
    u = rng(0, 4) + 1
    pm = PatternMatcher([(UPat(Ops.ADD, name="x"), lambda x: None), (UPat(Ops.ADD, name="x"), lambda x: x),
                         (UPat(Ops.ADD, name="x"), lambda x: c(3))])
    assert pm.rewrite(u) is c(3)
    assert PatternMatcher([(UPat(Ops.MUL), lambda: c(0))]).rewrite(u) is None

  def test_ctx(self):
    seen = []
    def f(x, ctx):
      ctx.append(x); return None
    pm = PatternMatcher([(UPat(Ops.RANGE, name="x"), f)])
    u = rng(0, 4) + rng(1, 4)
    assert graph_rewrite(u, pm, ctx=seen) is u
    assert seen == [rng(0, 4), rng(1, 4)]
    # the ctx value is passed as is, also to rules that rewrite
    pm2 = PatternMatcher([(UPat(Ops.RANGE, name="x"), lambda x, ctx: ctx[x.arg[0]])])
    assert graph_rewrite(u, pm2, ctx={0: c(5), 1: c(6)}) is c(5) + c(6)
    # rules without ctx do not get it
    pm3 = PatternMatcher([(UPat(Ops.RANGE, name="x"), lambda x: c(x.arg[0]))])
    assert graph_rewrite(u, pm3, ctx="unused") is c(0) + c(1)

  def test_add(self):
    p1 = PatternMatcher([(UPat(Ops.RANGE, name="x"), lambda x: c(1))])
    p2 = PatternMatcher([(UPat(Ops.RANGE, name="x"), lambda x: c(2)), (UPat(Ops.ADD), lambda: c(9))])
    assert (p1 + p2).rewrite(rng(0, 4)) is c(1)
    assert (p2 + p1).rewrite(rng(0, 4)) is c(2)
    assert (p1 + p2).rewrite(rng(0, 4) + 1) is c(9)

# ------------------------------------------------------------ graph_rewrite

def _is_fixed_point(root: UOp, pm: PatternMatcher) -> bool: return all(pm.rewrite(u) is None for u in root.toposort())

class TestGraphRewrite:
  def test_fixed_point_bottom_up(self):
    # x + 0 -> x, x * 1 -> x: the parent only becomes rewritable after its source is rewritten
    pm = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar(value=0))), lambda x: x),
                         (UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar(value=1))), lambda x: x)])
    a = rng(0, 4)
    u = ((((a + 0) * 1) + 0) * 1 + 0) * (a * 1 + 0)
    out = graph_rewrite(u, pm)
    assert out is a * a
    assert _is_fixed_point(out, pm)

  def test_rewrite_result_is_rewritten_again(self):
    # a rule whose output matches another rule (and itself): 3-step chains to the end
    pm = PatternMatcher([(UPat(Ops.CONST, name="k", custom=lambda u: u.arg > 0), lambda k: c(k.arg - 1) + c(0)),
                         (UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar(value=0))), lambda x: x)])
    out = graph_rewrite(c(5) * rng(0, 3), pm)
    assert out is c(0) * rng(0, 3)
    assert _is_fixed_point(out, pm)

  def test_parent_rewritten_after_new_sources(self):
    # swap the sources of every SUB until the smaller-id range comes first; the ADD above must see the new SUB
    pm = PatternMatcher([(UPat(Ops.SUB, src=(UPat(Ops.RANGE, name="x"), UPat(Ops.RANGE, name="y"))),
                          lambda x, y: UOp(Ops.SUB, x.dtype, (y, x)) if x.arg[0] > y.arg[0] else None),
                         (UPat(Ops.ADD, src=(UPat(Ops.SUB, src=(UPat(Ops.RANGE, arg=(0, 4, "loop")), UPat())), UPat.cvar("k"))),
                          lambda k: c(k.arg * 10))])
    u = (rng(1, 4) - rng(0, 4)) + 7
    assert graph_rewrite(u, pm) is c(70)

  def test_shared_node_rewritten_once(self):
    calls = []
    def f(x):
      calls.append(x)
      return rng(9, 2)
    pm = PatternMatcher([(UPat(Ops.RANGE, arg=(0, 4, "loop"), name="x"), f)])
    a = rng(0, 4)
    u = (a + a) * (a + 1)
    assert graph_rewrite(u, pm) is (rng(9, 2) + rng(9, 2)) * (rng(9, 2) + 1)
    assert calls == [a]

  def test_untouched_graph_is_same_object(self):
    u = (rng(0, 4) * 3 + 1) // 2
    assert graph_rewrite(u, PatternMatcher([])) is u
    assert graph_rewrite(u, PatternMatcher([(UPat(Ops.FDIV), lambda: c(0))])) is u

  def test_all_alu_groups_known(self):
    # every op the simplifier folds is an ALU op with a definition in exec_alu
    from petagrad.uop.alu import PYTHON_ALU
    assert set(PYTHON_ALU) == set(GroupOp.ALU)
