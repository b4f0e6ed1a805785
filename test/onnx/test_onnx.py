"""petagrad.onnx: loading, running, the op table, the onnx.backend API and the errors bad input raises."""
from __future__ import annotations
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
import petagrad.onnx  # noqa: E402
from petagrad import Tensor, TinyJit  # noqa: E402
from petagrad.onnx import OPS, load  # noqa: E402
from petagrad.onnx.backend import Backend  # noqa: E402

def _model(nodes, inputs, outputs, inits=(), opset=21, domains=()):
  g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *[helper.make_opsetid(d, v) for d, v in domains]])

def _vi(name, shape, t=TensorProto.FLOAT): return helper.make_tensor_value_info(name, t, shape)

def _small_cnn():
  rng = np.random.default_rng(0)
  w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
  b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
  fc = numpy_helper.from_array(rng.standard_normal((10, 16)).astype(np.float32), "fc")
  shape = numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "shape")
  nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
           helper.make_node("Relu", ["c"], ["r"], name="relu"),
           helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
           helper.make_node("Reshape", ["p", "shape"], ["f"], name="flat"),
           helper.make_node("Gemm", ["f", "fc"], ["y"], name="fc", transB=1),
           helper.make_node("Softmax", ["y"], ["out"], name="softmax", axis=-1)]
  return _model(nodes, [_vi("x", ["N", 3, 4, 4])], [_vi("out", ["N", 10])], [w, b, fc, shape], opset=13)

def _ort(model, feeds):
  ort = pytest.importorskip("onnxruntime")
  sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
  return sess.run(None, feeds)

# ------------------------------------------------------------ running models
def test_small_cnn_matches_onnxruntime():
  model = _small_cnn()
  x = np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32)
  got = load(model)(x=x)["out"].numpy()
  np.testing.assert_allclose(got, _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)

def test_model_from_bytes_and_path(tmp_path):
  model = _small_cnn()
  x = np.ones((1, 3, 4, 4), dtype=np.float32)
  path = tmp_path / "m.onnx"
  onnx.save(model, str(path))
  a = load(model.SerializeToString())(x)["out"].numpy()
  b = load(str(path))(x)["out"].numpy()
  np.testing.assert_array_equal(a, b)

def _external(model, folder, location="weights.bin"):
  """model saved to folder/m.onnx with every initializer in one external data file; its path."""
  path = folder / "m.onnx"
  copy = onnx.ModelProto()
  copy.CopyFrom(model)   # (saving moves the data of the proto it is given out to the file)
  onnx.save_model(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=location, size_threshold=0)
  return path

def test_external_data_is_read_lazily_from_disk(tmp_path):
  """Initializers in an external data file are views of that file on DISK when the model is loaded from its path:
  loading reads none of their bytes, the first run reads each once."""
  from petagrad.uop.ops import Ops
  model = _small_cnn()
  path = _external(model, tmp_path)
  m = load(str(path))
  w = m.graph.initializers["w"]
  assert any(u.op is Ops.BUFFER and u.device == f"DISK:{tmp_path / 'weights.bin'}" for u in w.uop.toposort())
  # the file changes after the load and before the first run: the run sees the new bytes (nothing was read before)
  ref = onnx.load(str(path), load_external_data=False).graph.initializer
  info = {e.key: e.value for e in next(t for t in ref if t.name == "w").external_data}
  w2 = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w")) * 2
  with open(tmp_path / "weights.bin", "r+b") as f:
    f.seek(int(info["offset"]))
    f.write(w2.tobytes())
  changed = onnx.ModelProto()
  changed.CopyFrom(model)
  next(t for t in changed.graph.initializer if t.name == "w").CopyFrom(numpy_helper.from_array(w2, "w"))
  x = np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32)
  want = _ort(changed, {"x": x})[0]
  np.testing.assert_allclose(m(x=x)["out"].numpy(), want, rtol=1e-5, atol=1e-6)
  # read once: the first run realized the initializers on the compute device, later file changes are not seen
  with open(tmp_path / "weights.bin", "r+b") as f:
    f.seek(int(info["offset"]))
    f.write(np.zeros_like(w2).tobytes())
  np.testing.assert_allclose(m(x=x)["out"].numpy(), want, rtol=1e-5, atol=1e-6)
  assert all(u.op is not Ops.COPY for u in w.uop.toposort())

def test_initializers_in_the_file_are_read_lazily(tmp_path):
  """A model loaded from its path keeps the initializers of its main graph in the .onnx file (DISK views of their
  raw_data, found by walking the protobuf wire format): the first run reads them."""
  from petagrad.onnx.files import raw_data_offsets
  model = _small_cnn()
  path = tmp_path / "m.onnx"
  onnx.save(model, str(path))
  data = path.read_bytes()
  offsets = raw_data_offsets(str(path))
  assert set(offsets) == {t.name for t in model.graph.initializer}
  for t in model.graph.initializer: assert data[offsets[t.name][0]:sum(offsets[t.name])] == t.raw_data
  m = load(str(path))
  w2 = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w")) * 2
  with open(path, "r+b") as f:   # changed after the load, before the first run: the run reads the new bytes
    f.seek(offsets["w"][0])
    f.write(w2.tobytes())
  next(t for t in model.graph.initializer if t.name == "w").CopyFrom(numpy_helper.from_array(w2, "w"))
  x = np.random.default_rng(1).standard_normal((2, 3, 4, 4)).astype(np.float32)
  np.testing.assert_allclose(m(x=x)["out"].numpy(), _ort(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
  (tmp_path / "odd.onnx").write_bytes(b"\x0f\x01")   # (wire type 7: nothing found, not an error)
  assert raw_data_offsets(str(tmp_path / "odd.onnx")) == {}

def test_external_data_of_every_kind(tmp_path):
  # a bfloat16, a bool, an int64 scalar, an empty tensor and an emulated float8 (read through onnx's reader), each from
  # the external file, against the same model with its data inside
  import ml_dtypes
  rng = np.random.default_rng(0)
  f8 = rng.standard_normal(6).astype(ml_dtypes.float8_e4m3fn)
  bf = rng.standard_normal((2, 3)).astype(ml_dtypes.bfloat16)
  inits = [helper.make_tensor("f8", TensorProto.FLOAT8E4M3FN, [6], f8.astype(np.float32).tolist()),
           helper.make_tensor("bf", TensorProto.BFLOAT16, [2, 3], bf.view(np.uint16).tobytes(), raw=True),
           numpy_helper.from_array(np.array([True, False, True]), "mask"), numpy_helper.from_array(np.array(3, np.int64), "k"),
           numpy_helper.from_array(np.zeros((0, 4), np.float32), "empty")]
  nodes = [helper.make_node("Cast", ["f8"], ["a"], to=TensorProto.FLOAT), helper.make_node("Cast", ["bf"], ["b"], to=TensorProto.FLOAT),
           helper.make_node("Identity", ["mask"], ["m"]), helper.make_node("Identity", ["k"], ["kk"]),
           helper.make_node("Identity", ["empty"], ["e"])]
  model = _model(nodes, [], [_vi("a", [6]), _vi("b", [2, 3]), _vi("m", [3], TensorProto.BOOL), _vi("kk", [], TensorProto.INT64),
                             _vi("e", [0, 4])], inits)
  want = load(model).run({})
  got = load(str(_external(model, tmp_path))).run({})
  for g, w in zip(got, want): np.testing.assert_array_equal(g, w)
  np.testing.assert_array_equal(got[0], f8.astype(np.float32))

def test_external_data_errors(tmp_path):
  model = _small_cnn()
  path = _external(model, tmp_path)
  proto = onnx.load(str(path), load_external_data=False)
  # given as a ModelProto whose external data was not read: nothing says where the file is
  with pytest.raises(ValueError, match="tensor 'w' keeps its data in an external file, and the model was not loaded from its path"):
    load(proto)
  def saved(edit, name):
    p = onnx.ModelProto()
    p.CopyFrom(proto)
    t = next(t for t in p.graph.initializer if t.name == "w")
    edit({e.key: e for e in t.external_data})
    out = tmp_path / name
    out.write_bytes(p.SerializeToString())
    return str(out)
  def set_location(v): return lambda es: setattr(es["location"], "value", v)
  with pytest.raises(ValueError, match="location '../weights.bin' must be a relative path inside the model's folder"):
    load(saved(set_location("../weights.bin"), "up.onnx"), check=False)
  with pytest.raises(FileNotFoundError, match="tensor 'w': its external data file .*missing.bin' does not exist"):
    load(saved(set_location("missing.bin"), "missing.onnx"), check=False)
  def past_end(es): es["offset"].value = str((tmp_path / "weights.bin").stat().st_size - 8)
  with pytest.raises(ValueError, match=r"tensor 'w': its bytes \d+\.\.\d+ are not inside .*weights.bin"):
    load(saved(past_end, "past.onnx"), check=False)
  def wrong_length(es): es["length"].value = "12"
  with pytest.raises(ValueError, match=r"tensor 'w': its external data is 12 bytes, but \(4, 3, 3, 3\) of float32 needs 432"):
    load(saved(wrong_length, "length.onnx"), check=False)

def test_runs_in_tinyjit_and_on_python_device():
  m = load(_small_cnn())
  xs = [np.random.default_rng(i).standard_normal((1, 3, 4, 4)).astype(np.float32) for i in range(3)]
  # Reshape's target shape is a static value (an initializer): read once outside the JIT, remembered for its shapes
  with pytest.raises(RuntimeError, match="call the model once outside TinyJit"): TinyJit(lambda x: m(x=x)["out"].realize())(Tensor(xs[0]))
  m(x=xs[0])
  step = TinyJit(lambda x: m(x=x)["out"].realize())
  for x in xs: np.testing.assert_allclose(step(Tensor(x)).numpy(), m(x=x)["out"].numpy(), rtol=1e-5, atol=1e-6)
  mp = load(_small_cnn(), device="PYTHON")
  np.testing.assert_allclose(mp(x=xs[0])["out"].numpy(), m(x=xs[0])["out"].numpy(), rtol=1e-5, atol=1e-6)

def test_backend_api():
  model = _small_cnn()
  x = np.ones((1, 3, 4, 4), dtype=np.float32)
  rep = Backend.prepare(model, "CPU")
  out = rep.run([x])
  assert out[0].shape == (1, 10) and out[0].dtype == np.float32 and out["out"] is out[0]
  np.testing.assert_array_equal(Backend.run_model(model, {"x": x})[0], out[0])
  node = helper.make_node("Add", ["a", "b"], ["c"])
  r = Backend.run_node(node, [np.array([1, 2], dtype=np.int32), np.array([3, 4], dtype=np.int32)])
  assert r[0].dtype == np.int32 and r[0].tolist() == [4, 6]
  assert Backend.supports_device("CPU") and not Backend.supports_device("NOT_A_DEVICE")
  assert petagrad.onnx.Backend is Backend

def test_dynamic_shape_values_are_read_at_run_time():
  # Shape -> Gather -> Unsqueeze -> Concat -> Reshape: the target shape is computed in the graph
  idx = numpy_helper.from_array(np.array(0, dtype=np.int64), "i0")
  m1 = numpy_helper.from_array(np.array([-1], dtype=np.int64), "m1")
  ax = numpy_helper.from_array(np.array([0], dtype=np.int64), "ax")
  nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i0"], ["n"]),
           helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]), helper.make_node("Concat", ["n1", "m1"], ["t"], axis=0),
           helper.make_node("Reshape", ["x", "t"], ["y"])]
  m = _model(nodes, [_vi("x", ["a", "b", "c"])], [_vi("y", ["a", "d"])], [idx, m1, ax])
  x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
  assert load(m)(x=x)["y"].shape == (2, 12)

def test_float8_cast_round_trip():
  nodes = [helper.make_node("Cast", ["x"], ["f8"], to=TensorProto.FLOAT8E4M3FN), helper.make_node("Cast", ["f8"], ["y"], to=TensorProto.FLOAT)]
  m = _model(nodes, [_vi("x", [5])], [_vi("y", [5])])
  x = np.array([0.1, 1.0, 300.0, 1000.0, -0.3], dtype=np.float32)
  import ml_dtypes
  want = x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
  want[3] = 448.0   # saturate
  np.testing.assert_array_equal(Backend.run_model(m, [x])[0], want)

# ------------------------------------------------------------ the table
def test_table_versions_are_onnx_versions():
  """Every implementation is keyed by a version in which that op's schema changed (so it is picked at the right opsets)."""
  history: dict = {}
  for s in onnx.defs.get_all_schemas_with_history(): history.setdefault((s.domain, s.name), set()).add(s.since_version)
  for domain, rows in OPS.items():
    for op, versions in rows.items():
      known = history.get((domain, op))
      assert known, f"{op} ({domain or 'ai.onnx'}) is not an ONNX op"
      assert set(versions) <= known, f"{op}: versions {sorted(versions)} not all in onnx's {sorted(known)}"

def test_newest_implementation_at_or_below_opset():
  # Softmax-1 flattens to 2-d around axis (default 1); Softmax-13 works along one axis (default -1)
  x = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
  node = helper.make_node("Softmax", ["x"], ["y"])
  old = Backend.run_model(_model([node], [_vi("x", [2, 2, 2])], [_vi("y", [2, 2, 2])], opset=11), [x])[0]
  new = Backend.run_model(_model([node], [_vi("x", [2, 2, 2])], [_vi("y", [2, 2, 2])], opset=13), [x])[0]
  e = np.exp(x.reshape(2, 4) - x.reshape(2, 4).max(1, keepdims=True))
  np.testing.assert_allclose(old, (e / e.sum(1, keepdims=True)).reshape(2, 2, 2), rtol=1e-6)
  e = np.exp(x - x.max(-1, keepdims=True))
  np.testing.assert_allclose(new, e / e.sum(-1, keepdims=True), rtol=1e-6)

# ------------------------------------------------------------ bad input
def test_truncated_file(tmp_path):
  data = _small_cnn().SerializeToString()
  with pytest.raises(ValueError, match="not a valid ONNX model"): load(data[:len(data) // 2])
  p = tmp_path / "bad.onnx"
  p.write_bytes(b"\x08\x07garbage\xff\xff\xff")
  with pytest.raises(ValueError, match="not a valid ONNX model"): load(str(p))
  with pytest.raises(FileNotFoundError): load(str(tmp_path / "missing.onnx"))

def test_unknown_op_names_the_node():
  node = helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery", domain="com.example")
  m = _model([node], [_vi("x", [2])], [_vi("y", [2])], domains=[("com.example", 1)])
  with pytest.raises(NotImplementedError, match=r"'mystery' \(NoSuchOp\).*not implemented"): load(m, check=False)

def test_unknown_domain_and_missing_opset():
  node = helper.make_node("Relu", ["x"], ["y"], name="r", domain="com.other")
  m = _model([node], [_vi("x", [2])], [_vi("y", [2])])
  with pytest.raises(NotImplementedError, match="'r' .*no opset for domain 'com.other'"): load(m, check=False)

def test_op_newer_than_model_opset():
  node = helper.make_node("Gelu", ["x"], ["y"], name="g")
  m = _model([node], [_vi("x", [2])], [_vi("y", [2])], opset=13)
  with pytest.raises(NotImplementedError, match="'g' \\(Gelu\\).*opset 13"): load(m, check=False)

def test_unsupported_attribute_names_the_node():
  node = helper.make_node("Relu", ["x"], ["y"], name="r", bogus=3)
  m = _model([node], [_vi("x", [2])], [_vi("y", [2])])
  with pytest.raises(NotImplementedError, match="'r' \\(Relu\\): attribute 'bogus'"): load(m, check=False)

def test_wrong_input_shape_and_dtype():
  m = load(_small_cnn())
  with pytest.raises(ValueError, match="graph input 'x' must have shape"): m(x=np.ones((1, 2, 4, 4), dtype=np.float32))
  with pytest.raises(ValueError, match="graph input 'x' must have 4 dims"): m(x=np.ones((3, 4, 4), dtype=np.float32))
  with pytest.raises(TypeError, match="graph input 'x' must be FLOAT, got numpy float64"): m(x=np.ones((1, 3, 4, 4)))
  with pytest.raises(ValueError, match="graph input 'x' is missing"): m()
  with pytest.raises(ValueError, match="unknown graph inputs"): m(x=np.ones((1, 3, 4, 4), dtype=np.float32), z=1)

def test_shape_error_inside_a_node_names_it():
  node = helper.make_node("MatMul", ["a", "b"], ["c"], name="mm")
  m = load(_model([node], [_vi("a", ["n", "k"]), _vi("b", ["k2", "m"])], [_vi("c", ["n", "m"])]))
  with pytest.raises(ValueError, match=r"ONNX node 'mm' \(MatMul, opset 21\)"):
    m(a=np.ones((2, 3), dtype=np.float32), b=np.ones((4, 5), dtype=np.float32))

def test_unsupported_types_raise_not_wrong_answers():
  m = _model([helper.make_node("Identity", ["x"], ["y"])], [_vi("x", [2], TensorProto.STRING)], [_vi("y", [2], TensorProto.STRING)])
  with pytest.raises(NotImplementedError, match="string"): load(m)(x=np.array(["a", "b"], dtype=object))
  m = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT6E2M3)], [_vi("x", [2])], [_vi("y", [2], TensorProto.FLOAT6E2M3)],
             opset=26)
  with pytest.raises(NotImplementedError, match="FLOAT6E2M3"): load(m, check=False)(x=np.ones(2, dtype=np.float32))

def test_no_code_runs_from_the_model():
  # a model is data: attribute strings never reach eval/exec/import (an op only reads the values it knows)
  node = helper.make_node("Gelu", ["x"], ["y"], approximate="__import__('os').system('false')")
  m = load(_model([node], [_vi("x", [2])], [_vi("y", [2])]), check=False)
  with pytest.raises(ValueError, match="approximate"): m(x=np.ones(2, dtype=np.float32))
