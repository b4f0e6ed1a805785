"""Whole models through petagrad.onnx: the light models of the onnx wheel, compared with onnxruntime on the same inputs.

* The light models shipped in the onnx wheel (onnx/backend/test/data/light): fed as onnx's own test runner feeds them
  (`arange(n) / n` in the input's shape, float32), compared with the shipped `*_output_0.pb` and with onnxruntime.
  Their weights are all one constant (ConstantOfShape), so `test_light_model_random_weights` also runs a few of them
  with the weights replaced by random initializers, against onnxruntime alone.
* SqueezeNet inside TinyJit.

test_torch_models.py has the models exported from torch.

Compiling a large model's kernels takes most of the time (kernels are cached on disk, so a second run is quick):
DenseNet-121 (1,267 kernels, ~140 s) and Inception v1/v2 (~50 s each) only run with ONNX_MODELS=all in the environment.
"""
from __future__ import annotations
import os
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import numpy_helper  # noqa: E402
import petagrad.onnx  # noqa: E402

LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
ALL = os.environ.get("ONNX_MODELS", "") == "all"
# name -> whether it runs by default (the heavy ones compile hundreds of kernels: minutes on two busy cores)
LIGHT = {"bvlc_alexnet": True, "squeezenet": True, "zfnet512": True, "shufflenet": True, "resnet50": True, "vgg19": True,
         "densenet121": False, "inception_v1": False, "inception_v2": False}

def _light(name: str) -> str:
  if not LIGHT[name] and not ALL: pytest.skip(f"{name} compiles many kernels; run it with ONNX_MODELS=all")
  return os.path.join(LIGHT_DIR, f"light_{name}.onnx")

def runner_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
  """The inputs onnx's backend test runner feeds a light model: arange(n) / n in the input's shape (symbolic dims 1)."""
  inits = {t.name for t in model.graph.initializer}
  feeds = {}
  for vi in model.graph.input:
    if vi.name in inits: continue
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
  return feeds

def ort_run(model: onnx.ModelProto | bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
  data = model if isinstance(model, bytes) else model.SerializeToString()
  return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)

def assert_close(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 1e-4, atol: float = 1e-5) -> None:
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)

# ------------------------------------------------------------ the light models of the onnx wheel
@pytest.mark.parametrize("name", list(LIGHT))
def test_light_model(name: str):
  path = _light(name)
  model = onnx.load(path)
  feeds = runner_inputs(model)
  got = petagrad.onnx.load(model).run(feeds)
  ref = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT_DIR, f"light_{name}_output_0.pb")))
  assert_close(got[:1], [ref], rtol=1e-3, atol=1e-7)   # onnx's runner: rtol 1e-3, atol 1e-7
  assert_close(got, ort_run(model, feeds), rtol=1e-4, atol=1e-6)

def random_weights(model: onnx.ModelProto, seed: int = 0, vectors: bool = True) -> onnx.ModelProto:
  """The model with every ConstantOfShape of a constant shape (the light models' weights) replaced by a random
  initializer: He-scaled normal for weights of 2+ dims, uniform [0.5, 1.5) for vectors (biases, BatchNorm scales and
  variances stay positive; `vectors=False` keeps them ConstantOfShape)."""
  rng = np.random.default_rng(seed)
  m = onnx.ModelProto()
  m.CopyFrom(model)
  shapes = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
  keep = []
  for n in m.graph.node:
    if n.op_type == "ConstantOfShape" and n.input[0] in shapes and (vectors or len(shapes[n.input[0]]) > 1):
      shape = tuple(int(d) for d in shapes[n.input[0]])
      fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
      w = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in) if len(shape) > 1 else rng.uniform(0.5, 1.5, shape)
      m.graph.initializer.append(numpy_helper.from_array(w.astype(np.float32), n.output[0]))
      m.graph.input.append(onnx.helper.make_tensor_value_info(n.output[0], onnx.TensorProto.FLOAT, shape))   # IR < 4: initializers are inputs
    else: keep.append(n)
  del m.graph.node[:]
  m.graph.node.extend(keep)
  softmax = [n for n in keep if n.op_type == "Softmax"][-1]   # it saturates: its input (same shape) is an output too
  out = onnx.ValueInfoProto()
  out.CopyFrom(next(o for o in m.graph.output if o.name == softmax.output[0]))
  out.name = softmax.input[0]
  m.graph.output.append(out)
  return m

@pytest.mark.parametrize("name", ["squeezenet", "shufflenet", "resnet50"])
def test_light_model_random_weights(name: str):
  """Eager (direct convolutions) and replayed by TinyJit (where ONNX_WINO's default runs the 3x3 ones as Winograd)."""
  from petagrad import Tensor, TinyJit
  model = random_weights(onnx.load(_light(name)))
  feeds = {k: np.random.default_rng(1).random(v.shape, dtype=np.float32) for k, v in runner_inputs(model).items()}
  m = petagrad.onnx.load(model)
  (k, x), = feeds.items()
  eager = m.run(feeds)   # (outside TinyJit first: it remembers the static shape values)
  step = TinyJit(lambda t: [m({k: t})[o].realize() for o in m.output_names])
  for _ in range(3): jitted = [t.numpy() for t in step(Tensor(x))]
  want = ort_run(model, feeds)
  assert len(want) == 2 and want[1].std() > 1e-2 * np.abs(want[1]).max()   # the logits are not a constant
  for got in (eager, jitted):
    assert_close(got[:1], want[:1], rtol=1e-3, atol=1e-5)
    assert_close(got[1:], want[1:], rtol=1e-3, atol=1e-4 * float(np.abs(want[1]).max()))

def test_light_model_in_tinyjit():
  """SqueezeNet's biases are ConstantOfShape of initializers that are also graph inputs (IR version 3): static while
  the caller overrides none of them, so the model replays inside TinyJit after one call outside it."""
  from petagrad import Tensor, TinyJit
  model = petagrad.onnx.load(random_weights(onnx.load(_light("squeezenet")), vectors=False))
  assert "ConstantOfShape" in {n.op_type for n in model.graph.nodes}
  feeds = runner_inputs(model.proto)
  (name, x), = feeds.items()
  want = model.run(feeds)[0]
  assert want.std() > 1e-4   # the output depends on the input
  step = TinyJit(lambda t: model({name: t})[model.output_names[0]].realize())
  for scale in (1.0, 0.5, 2.0):
    np.testing.assert_allclose(step(Tensor(x * scale)).numpy(), model.run({name: x * scale})[0], rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(step(Tensor(x)).numpy(), want, rtol=1e-5, atol=1e-7)

def test_conv_weights_are_laid_out_once():
  """A Conv's weight initializer is stored channels-last (or transformed for Winograd) for its kernel once, at the first
  call: a TinyJit replay runs the convolutions and nothing that copies or transforms a weight."""
  from onnx import helper, TensorProto, numpy_helper
  from petagrad import Tensor, TinyJit, GlobalCounters, Context
  rng = np.random.default_rng(0)
  w1, w2 = rng.standard_normal((16, 3, 3, 3)).astype(np.float32), rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
  g = helper.make_graph([helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["h"], ["r"]),
                         helper.make_node("Conv", ["r", "w2"], ["y"])], "g",
                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
                        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 6, 6])],
                        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
  proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
  x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
  want = ort_run(proto, {"x": x})[0]
  atol = 1e-5 * float(np.abs(want).max())   # (Winograd's rounding: ~4e-6 of the largest output)
  # the padded input, two convolutions (the relu fused into the second's input); as Winograd the second (16 channels)
  # is four kernels: its input transform in two passes (the first with the relu), the products, the output transform.
  # ONNX_WINO=1 takes Winograd inside TinyJit only, 2 in eager calls too. (kernels of an eager call, of a replay)
  for wino, kernels in ((0, (3, 3)), (1, (3, 6)), (2, (6, 6))):
    with Context(ONNX_WINO=wino):
      model = petagrad.onnx.load(proto)
      for _ in range(2): np.testing.assert_allclose(model(x=x)["y"].numpy(), want, rtol=1e-4, atol=atol)
      GlobalCounters.reset()
      model(x=x)["y"].realize()
      eager = GlobalCounters.kernel_count
      step = TinyJit(lambda t: model(x=t)["y"].realize())
      for _ in range(3): got = step(Tensor(x)).numpy()
      np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol)
      GlobalCounters.reset()
      step(Tensor(x))
      assert (eager, GlobalCounters.kernel_count) == kernels, wino

def test_gather_of_constant_consecutive_indices_is_a_view():
  """Gather with constant indices that pick one run (an exported attention's q, k and v out of one projection) is a
  shrink of its input, no gather kernel; other constant or fed indices still gather."""
  from onnx import helper, TensorProto, numpy_helper
  from petagrad.uop.ops import Ops
  x = np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32)
  for idx, view in ((np.array(1, np.int64), True), (np.array([-2, -1], np.int64), True), (np.array([2, 0], np.int64), False)):
    g = helper.make_graph([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(idx.shape) + [4, 5])],
                          [numpy_helper.from_array(idx, "i")])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    y = petagrad.onnx.load(proto)(x=x)["y"]
    assert (not any(u.op is Ops.REDUCE_AXIS for u in y.uop.toposort())) == view
    np.testing.assert_array_equal(y.numpy(), ort_run(proto, {"x": x})[0])
