"""Control flow (If, Loop, Scan): subgraphs parsed at load time, outer-scope values, data-dependent conditions,
TinyJit, against onnxruntime."""
from __future__ import annotations
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from petagrad import Tensor, TinyJit  # noqa: E402
from petagrad.engine.jit import JitError  # noqa: E402
from petagrad.onnx import load  # noqa: E402

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL

def _vi(name, shape, t=F): return helper.make_tensor_value_info(name, t, shape)

def _model(nodes, inputs, outputs, inits=(), opset=17):
  return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits)), opset_imports=[helper.make_opsetid("", opset)])

def _ort(model, feeds):
  ort = pytest.importorskip("onnxruntime")
  return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)

def _if_model(cond_from_data: bool):
  """y = x * w + 1 if cond else x - w, where w is an outer value both branches read; cond is sum(x) > 0 (data) or a Constant."""
  then_g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t0"]), helper.make_node("Add", ["t0", "one"], ["t1"])], "then", [],
                             [_vi("t1", [3])], initializer=[helper.make_tensor("one", F, [], [1.0])])
  else_g = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["e1"])], "else", [], [_vi("e1", [3])])
  if cond_from_data: cond = [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0), helper.make_node("Greater", ["s", "zero"], ["c"])]
  else: cond = [helper.make_node("Constant", [], ["c"], value=helper.make_tensor("cv", B, [], [True]))]
  nodes = [*cond, helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)]
  inits = [helper.make_tensor("w", F, [3], [1.0, 2.0, 3.0]), helper.make_tensor("zero", F, [], [0.0])]
  return _model(nodes, [_vi("x", [3])], [_vi("y", [3])], inits)

def test_if_takes_the_branch_the_data_says():
  model = _if_model(cond_from_data=True)
  m = load(model)
  for x in (np.array([1.0, 2.0, 3.0], np.float32), np.array([-4.0, 0.5, 0.5], np.float32)):
    got = m(x=x)["y"].numpy()
    np.testing.assert_allclose(got, _ort(model, {"x": x})[0])
  # inside TinyJit a data-dependent condition cannot be replayed: a clear error that names the node
  with pytest.raises(JitError, match="'branch'.*computed from input data"):
    TinyJit(lambda x: m(x=x)["y"].realize())(Tensor(np.ones(3, np.float32)))

def test_if_with_a_static_condition_runs_in_tinyjit():
  m = load(_if_model(cond_from_data=False))
  m(x=np.zeros(3, np.float32))   # remembers the condition for these shapes
  step = TinyJit(lambda x: m(x=x)["y"].realize())
  for i in range(3):
    x = np.full(3, float(i), np.float32)
    np.testing.assert_allclose(step(Tensor(x)).numpy(), x * [1.0, 2.0, 3.0] + 1)

def _loop_model():
  """acc starts at x; for i in range(M) while acc.sum() < limit: acc = acc * 2 + i * w (w from the outer scope); the
  scan output collects acc each iteration."""
  body = helper.make_graph(
    [helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Mul", ["fi", "w"], ["iw"]),
     helper.make_node("Mul", ["acc", "two"], ["a2"]), helper.make_node("Add", ["a2", "iw"], ["acc_out"]),
     helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0), helper.make_node("Less", ["s", "limit"], ["cond_out"]),
     helper.make_node("Identity", ["acc_out"], ["scan_out"])],
    "body", [_vi("i", [], I64), _vi("cond_in", [], B), _vi("acc", [2])], [_vi("cond_out", [], B), _vi("acc_out", [2]), _vi("scan_out", [2])],
    initializer=[helper.make_tensor("two", F, [], [2.0])])
  nodes = [helper.make_node("Loop", ["M", "c0", "x"], ["acc_final", "accs"], body=body)]
  inits = [helper.make_tensor("w", F, [2], [1.0, -1.0]), helper.make_tensor("limit", F, [], [100.0]),
           helper.make_tensor("c0", B, [], [True])]
  return _model(nodes, [_vi("x", [2]), _vi("M", [], I64)], [_vi("acc_final", [2]), _vi("accs", [None, 2])], inits)

@pytest.mark.parametrize("trip", [0, 3, 20])
def test_loop_matches_onnxruntime(trip: int):
  model = _loop_model()
  feeds = {"x": np.array([1.0, 3.0], np.float32), "M": np.array(trip, np.int64)}
  want = _ort(model, feeds)
  got = load(model).run(feeds)
  for g, w in zip(got, want):
    assert g.shape == w.shape, (g.shape, w.shape)
    np.testing.assert_allclose(g, w, rtol=1e-6)

def test_scan_reverse_and_output_axis_match_onnxruntime():
  """A running sum over axis 1 of x (3, 4), read backwards, the partial sums stacked along axis 1."""
  body = helper.make_graph([helper.make_node("Add", ["s", "xt"], ["s_out"]), helper.make_node("Mul", ["s_out", "k"], ["y"])], "body",
                           [_vi("s", [3]), _vi("xt", [3])], [_vi("s_out", [3]), _vi("y", [3])])
  node = helper.make_node("Scan", ["s0", "x"], ["s_final", "ys"], body=body, num_scan_inputs=1, scan_input_axes=[1],
                          scan_input_directions=[1], scan_output_axes=[1])
  model = _model([node], [_vi("s0", [3]), _vi("x", [3, 4])], [_vi("s_final", [3]), _vi("ys", [3, 4])], [helper.make_tensor("k", F, [], [0.5])])
  feeds = {"s0": np.zeros(3, np.float32), "x": np.arange(12, dtype=np.float32).reshape(3, 4)}
  for g, w in zip(load(model).run(feeds), _ort(model, feeds)): np.testing.assert_allclose(g, w)

def test_subgraph_errors_at_load_name_the_node():
  bad = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["t"])], "then", [], [_vi("t", [3])])
  ok = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e", [3])])
  node = helper.make_node("If", ["c"], ["y"], name="pick", then_branch=bad, else_branch=ok)
  model = _model([node], [_vi("x", [3]), _vi("c", [], B)], [_vi("y", [3])])
  with pytest.raises(NotImplementedError, match="'pick'.*then_branch.*NoSuchOp"): load(model, check=False)

def test_loop_with_a_static_trip_count_runs_in_tinyjit():
  """A for loop (M from an initializer, no condition input): replayed by TinyJit after one call outside it."""
  body = helper.make_graph([helper.make_node("Add", ["acc", "x"], ["acc_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
                           [_vi("i", [], I64), _vi("cond_in", [], B), _vi("acc", [2])], [_vi("cond_out", [], B), _vi("acc_out", [2])])
  model = _model([helper.make_node("Loop", ["M", "", "zero"], ["y"], body=body)], [_vi("x", [2])], [_vi("y", [2])],
                 [helper.make_tensor("M", I64, [], [4]), helper.make_tensor("zero", F, [2], [0.0, 0.0])])
  m = load(model)
  m(x=np.zeros(2, np.float32))
  step = TinyJit(lambda x: m(x=x)["y"].realize())
  for i in range(3):
    x = np.array([i, -i], np.float32)
    np.testing.assert_allclose(step(Tensor(x)).numpy(), 4 * x)

def test_nested_if_in_loop_sees_both_scopes():
  """A Loop body holds an If whose branches read the body's value (acc) and the main graph's (w)."""
  then_g = helper.make_graph([helper.make_node("Add", ["acc", "w"], ["t"])], "then", [], [_vi("t", [2])])
  else_g = helper.make_graph([helper.make_node("Sub", ["acc", "w"], ["e"])], "else", [], [_vi("e", [2])])
  body = helper.make_graph(
    [helper.make_node("Mod", ["i", "two"], ["r"]), helper.make_node("Equal", ["r", "zero"], ["even"]),
     helper.make_node("If", ["even"], ["acc_out"], then_branch=then_g, else_branch=else_g),
     helper.make_node("Identity", ["cond_in"], ["cond_out"])],
    "body", [_vi("i", [], I64), _vi("cond_in", [], B), _vi("acc", [2])], [_vi("cond_out", [], B), _vi("acc_out", [2])],
    initializer=[helper.make_tensor("two", I64, [], [2]), helper.make_tensor("zero", I64, [], [0])])
  model = _model([helper.make_node("Loop", ["M", "", "x"], ["y"], body=body)], [_vi("x", [2]), _vi("M", [], I64)], [_vi("y", [2])],
                 [helper.make_tensor("w", F, [2], [1.0, 10.0])])
  feeds = {"x": np.array([0.5, -0.5], np.float32), "M": np.array(5, np.int64)}
  np.testing.assert_allclose(load(model).run(feeds)[0], _ort(model, feeds)[0])
  np.testing.assert_allclose(load(model).run(feeds)[0], feeds["x"] + [1.0, 10.0])   # + - + - +

def test_scan_body_with_a_constant_shape_runs_in_tinyjit():
  """The body's Reshape reads a shape from its own Constant: static, remembered, so the Scan replays in TinyJit."""
  body = helper.make_graph([helper.make_node("Constant", [], ["shape"], value=helper.make_tensor("sv", I64, [2], [2, 2])),
                            helper.make_node("Reshape", ["xt", "shape"], ["m"]), helper.make_node("MatMul", ["s", "m"], ["s_out"]),
                            helper.make_node("Identity", ["s_out"], ["y"])], "body",
                           [_vi("s", [2, 2]), _vi("xt", [4])], [_vi("s_out", [2, 2]), _vi("y", [2, 2])])
  node = helper.make_node("Scan", ["s0", "x"], ["s_final", "ys"], body=body, num_scan_inputs=1)
  model = _model([node], [_vi("s0", [2, 2]), _vi("x", [3, 4])], [_vi("s_final", [2, 2]), _vi("ys", [3, 2, 2])])
  m = load(model)
  s0 = np.eye(2, dtype=np.float32)
  m(s0=s0, x=np.zeros((3, 4), np.float32))
  step = TinyJit(lambda s, x: [v.realize() for v in m(s0=s, x=x).values()])
  for i in range(3):
    x = np.random.default_rng(i).standard_normal((3, 4)).astype(np.float32)
    got = [t.numpy() for t in step(Tensor(s0), Tensor(x))]
    for g, w in zip(got, _ort(model, {"s0": s0, "x": x})): np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)

def test_sequences_split_map_concat_match_onnxruntime():
  """SplitToSequence -> SequenceMap (body: x * w, w from the outer scope) -> SequenceInsert -> ConcatFromSequence."""
  body = helper.make_graph([helper.make_node("Mul", ["e", "w"], ["o"])], "body", [_vi("e", [None, 3])], [_vi("o", [None, 3])])
  nodes = [helper.make_node("SplitToSequence", ["x", "sizes"], ["seq"], axis=0),
           helper.make_node("SequenceMap", ["seq"], ["mapped"], body=body),
           helper.make_node("SequenceInsert", ["mapped", "x"], ["more"]),
           helper.make_node("SequenceLength", ["more"], ["n"]),
           helper.make_node("ConcatFromSequence", ["more"], ["y"], axis=0)]
  inits = [helper.make_tensor("sizes", I64, [2], [1, 3]), helper.make_tensor("w", F, [3], [1.0, 2.0, 3.0])]
  model = _model(nodes, [_vi("x", [4, 3])], [_vi("y", [8, 3]), _vi("n", [], I64)], inits)
  feeds = {"x": np.arange(12, dtype=np.float32).reshape(4, 3)}
  for g, w in zip(load(model).run(feeds), _ort(model, feeds)): np.testing.assert_allclose(g, w)
