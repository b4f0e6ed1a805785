"""Models exported with `torch.onnx.export` from small modules built here, run with petagrad.onnx and compared with
onnxruntime and torch on the same inputs: a ResNet-style CNN with BatchNorm (kept as BatchNormalization nodes, and
folded into the convolutions), a transformer encoder layer (attention, LayerNorm), a two-layer LSTM.

torch 2.13's default exporter is the dynamo one, which needs the onnxscript package; these use the TorchScript
exporter (`dynamo=False`).
"""
from __future__ import annotations
import io, warnings
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
import petagrad.onnx  # noqa: E402
nn = torch.nn

def ort_run(data: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
  import onnxruntime as ort
  return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)

def assert_close(got: list[np.ndarray], want: list[np.ndarray], rtol: float, atol: float) -> None:
  assert len(got) == len(want)
  for g, w in zip(got, want):
    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)

class _Block(nn.Module):
  def __init__(self, c: int):
    super().__init__()
    self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
    self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
  def forward(self, x): return torch.relu(x + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))

class SmallResNet(nn.Module):
  """A stem (conv, BatchNorm, ReLU, max pool), two residual blocks, global average pooling and a linear head."""
  def __init__(self):
    super().__init__()
    self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2))
    self.blocks, self.fc = nn.Sequential(_Block(8), _Block(8)), nn.Linear(8, 10)
  def forward(self, x): return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1), 1))

class EncoderLayer(nn.Module):
  """nn.TransformerEncoderLayer: multi-head self-attention, LayerNorm, a ReLU MLP (eval: no dropout)."""
  def __init__(self):
    super().__init__()
    self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
  def forward(self, x): return self.layer(x)

class SmallLSTM(nn.Module):
  """A two-layer LSTM and a linear head; returns the head's output and the final hidden and cell states."""
  def __init__(self):
    super().__init__()
    self.lstm, self.fc = nn.LSTM(6, 8, num_layers=2, batch_first=True), nn.Linear(8, 3)
  def forward(self, x):
    y, (h, c) = self.lstm(x)
    return self.fc(y), h, c

def _randomize_batchnorm(mod: nn.Module) -> None:
  """Non-trivial running statistics and affine parameters, so that BatchNorm is not an identity in eval mode."""
  g = torch.Generator().manual_seed(0)
  for m in mod.modules():
    if isinstance(m, nn.BatchNorm2d):
      with torch.no_grad():
        m.running_mean.copy_(torch.rand(m.num_features, generator=g) - 0.5)
        m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
        m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
        m.bias.copy_(torch.rand(m.num_features, generator=g) - 0.5)

def export(mod: nn.Module, x: np.ndarray, outputs: list[str], **kw) -> bytes:
  f = io.BytesIO()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(mod, (torch.from_numpy(x),), f, dynamo=False, input_names=["x"], output_names=outputs, opset_version=17, **kw)
  return f.getvalue()

def _check_torch_model(mod: nn.Module, x: np.ndarray, outputs: list[str], ops: set[str], rtol: float = 1e-4, atol: float = 1e-5, **kw):
  torch.manual_seed(0)
  mod.eval()
  data = export(mod, x, outputs, **kw)
  assert ops <= {n.op_type for n in onnx.load_from_string(data).graph.node}   # the graph has the ops this test is about
  got = petagrad.onnx.load(data).run({"x": x})
  assert_close(got, ort_run(data, {"x": x}), rtol=rtol, atol=atol)
  with torch.no_grad():
    ref = mod(torch.from_numpy(x))
  assert_close(got, [t.numpy() for t in (ref if isinstance(ref, tuple) else (ref,))], rtol=rtol, atol=atol)

def test_torch_resnet_with_batchnorm():
  torch.manual_seed(0)
  mod = SmallResNet()
  _randomize_batchnorm(mod)
  x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
  # TrainingMode.PRESERVE keeps BatchNormalization nodes (EVAL folds them into the convolutions)
  _check_torch_model(mod, x, ["y"], {"Conv", "BatchNormalization", "MaxPool", "GlobalAveragePool", "Gemm"},
                     training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False)

@pytest.mark.parametrize("wino", [0, 2])
def test_torch_resnet_folded(wino):
  # ONNX_WINO=2: the blocks' 3x3 convolutions (8 channels, 4x4) as Winograd F(4x4, 3x3) in this eager run too
  from petagrad import Context
  torch.manual_seed(0)
  mod = SmallResNet()
  _randomize_batchnorm(mod)
  x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
  with Context(ONNX_WINO=wino): _check_torch_model(mod, x, ["y"], {"Conv", "MaxPool", "GlobalAveragePool", "Gemm"})

def test_torch_transformer_encoder_layer():
  torch.manual_seed(0)
  x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
  _check_torch_model(EncoderLayer(), x, ["y"], {"MatMul", "Softmax", "LayerNormalization"})

def test_torch_lstm():
  torch.manual_seed(0)
  x = np.random.default_rng(0).standard_normal((2, 4, 6)).astype(np.float32)
  _check_torch_model(SmallLSTM(), x, ["y", "h", "c"], {"LSTM"})
