"""Quantized weights (petagrad/models/quant.py): ggml's Q8_0 and Q4_0 blocks, kept packed, decoded inside the kernels."""
from __future__ import annotations
import doctest
import numpy as np
import pytest
from petagrad import Tensor, Variable, TinyJit, GlobalCounters, dtypes
from petagrad.nn.state import get_state_dict
from petagrad.models import quant
from petagrad.models.llama import Llama, LlamaConfig

def ggml_q4_0(w: np.ndarray) -> np.ndarray:
  """ggml's quantize_row_q4_0, written from its definition, in numpy: the reference bytes."""
  b = w.reshape(-1, 32).astype(np.float32)
  m = b[np.arange(len(b)), np.abs(b).argmax(1)]
  d = (m / -8).astype(np.float32)
  inv = np.where(d != 0, 1 / np.where(d != 0, d, 1), 0).astype(np.float32)
  q = np.minimum(15, np.floor(b * inv[:, None] + 8.5)).clip(0, 15).astype(np.uint8)
  return np.concatenate([d.astype(np.float16).view(np.uint8).reshape(-1, 2), q[:, :16] | (q[:, 16:] << 4)], 1).reshape(-1)

@pytest.mark.parametrize("kind,bits", [("q8_0", 127), ("q4_0", 8)])
def test_roundtrip_error(kind, bits):
  w = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
  packed, view = quant.quantize(Tensor(w), kind)
  assert packed.dtype == dtypes.uint8 and packed.shape == (8 * 64 // 32 * (34 if kind == "q8_0" else 18),)
  scale = np.abs(w.reshape(-1, 32)).max(1, keepdims=True) / bits
  err = np.abs(view.numpy() - w).reshape(-1, 32)
  assert (err <= scale * 0.51 + 1e-3 * scale).all()   # half a step (and the float16 rounding of the scale)

def test_q4_0_bytes_are_ggml_s():
  w = np.random.default_rng(1).standard_normal((4, 96)).astype(np.float32)
  w[0, :32] = 0.0   # a block of zeros: scale 0
  np.testing.assert_array_equal(quant.pack(Tensor(w), "q4_0").numpy(), ggml_q4_0(w))

def test_decode_reads_packed_bytes():
  # a matrix-vector product over a quantized weight decodes it in its loop: it reads the bytes, not float32 weights
  w = np.random.default_rng(2).standard_normal((512, 1024)).astype(np.float32)
  x = np.random.default_rng(3).standard_normal((1, 1024)).astype(np.float32)
  for kind, nbytes in (("q8_0", 34), ("q4_0", 18)):
    _, view = quant.quantize(Tensor(w), kind)
    xt = Tensor(x).realize()
    GlobalCounters.reset()
    out = (xt @ view.T).realize()
    assert GlobalCounters.kernel_count == 1
    assert GlobalCounters.global_mem < 512 * 1024 // 32 * nbytes + 64 * 1024   # the packed bytes and x, not 2 MB of floats
    np.testing.assert_allclose(out.numpy(), x @ view.numpy().T, rtol=1e-4, atol=1e-3)

def ggml_q8_0_dot(w_packed: np.ndarray, x: np.ndarray, n_out: int) -> np.ndarray:
  """llama.cpp's Q8_0 x Q8_0 product, written from its definition in numpy: x quantized per block of 32 (d = max|x| /
  127, q = round(x / d)), each block's int products summed exactly, then scaled by both blocks' d."""
  b = w_packed.reshape(n_out, -1, 34)
  dw, qw = b[:, :, :2].copy().view(np.float16).astype(np.float64), b[:, :, 2:].view(np.int8).astype(np.int64)
  xb = x.reshape(-1, 32).astype(np.float32)
  dx = (np.abs(xb).max(1, keepdims=True) / np.float32(127)).astype(np.float32)
  qx = np.round(xb / np.where(dx > 0, dx, 1)).astype(np.int64)
  return ((qw * qx).sum(2) * dw[:, :, 0] * dx[:, 0].astype(np.float64)).sum(1)

def test_q8_0_int8_activations():
  # a decode step's product quantizes its activations to Q8_0 too (llama.cpp's CPU scheme): the same numbers as a numpy
  # reference of that scheme, reading the packed weight's bytes and the activations' int8s (two small kernels quantize
  # x), while a product over several rows (a prefill) stays the float one over the decoded weight
  from petagrad import nn
  rng = np.random.default_rng(6)
  net = nn.Sequential(nn.Linear(1024, 512))
  net[0].weight = Tensor(rng.standard_normal((512, 1024)).astype(np.float32))
  net[0].bias.realize()
  assert quant.quantize_linears(net, "q8_0", int8_activations=True) == 1
  lin = net[0]
  assert isinstance(lin, quant.Q8_0Linear) and list(get_state_dict(net)) == ["0.weight", "0.bias"]
  x = rng.standard_normal((1, 1, 1024)).astype(np.float32)
  x[0, 0, :32] = 0.0   # a block of zeros: scale 0
  xt = Tensor(x).realize()
  GlobalCounters.reset()
  out = lin(xt).realize()
  assert out.shape == (1, 1, 512) and GlobalCounters.kernel_count == 3
  assert GlobalCounters.global_mem < 512 * 1024 // 32 * 34 + 64 * 1024   # bytes, not 2 MB of float weights
  want = ggml_q8_0_dot(lin.packed.numpy(), x, 512) + lin.bias.numpy()
  np.testing.assert_allclose(out.numpy()[0, 0], want, rtol=1e-5, atol=1e-4)
  # (close to the float activations' product: the activations' rounding only)
  full = x[0] @ lin.weight.numpy().T + lin.bias.numpy()
  assert np.abs(out.numpy()[0] - full).max() < 0.02 * np.abs(full).max()
  rows = rng.standard_normal((4, 1024)).astype(np.float32)
  np.testing.assert_allclose(lin(Tensor(rows)).numpy(), rows @ lin.weight.numpy().T + lin.bias.numpy(), rtol=1e-4, atol=1e-3)
  with pytest.raises(ValueError, match="only with q8_0"): quant.quantize_linears(net, "q4_0", int8_activations=True)
  # rows of 48 (Q8_0 blocks straddle them): the weight's view, float activations
  odd = nn.Sequential(nn.Linear(48, 64))
  xo = rng.standard_normal((1, 48)).astype(np.float32)
  want = odd(Tensor(xo)).numpy()
  assert quant.quantize_linears(odd, "q8_0", int8_activations=True) == 1 and not isinstance(odd[0], quant.Q8_0Linear)
  np.testing.assert_allclose(odd(Tensor(xo)).numpy(), want, rtol=0.05, atol=0.05)

def test_fused_siblings_decode_in_one_kernel():
  # a LLaMA's q/k/v and gate/up layers with int8 activations share one buffer each (their FUSED_LINEARS), and a decode
  # step computes each group in one matrix-vector kernel: the same logits as layer by layer, 3 kernels fewer per layer
  Tensor.manual_seed(0)
  cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=32)
  model = Llama(cfg).realize_weights()
  quant.quantize_linears(model, "q8_0", int8_activations=True)
  attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
  group = attn.q_proj.fused[0]
  assert [(l.fused[0] is group, l.fused[1]) for l in (attn.q_proj, attn.k_proj, attn.v_proj)] == [(True, 0), (True, 64), (True, 96)]
  assert mlp.up_proj.fused[0] is mlp.gate_proj.fused[0] and mlp.up_proj.fused[1] == 128
  # (layers of two groups, or out of order, are computed one by one)
  assert quant.fused_matvec(Tensor.ones(1, 1, 64), (attn.q_proj, mlp.up_proj)) is None
  assert quant.fused_matvec(Tensor.ones(1, 1, 64), (attn.k_proj, attn.v_proj)) is None
  assert group.numel() == (64 + 32 + 32) * 2 * 34 and attn.k_proj.packed.numel() == 32 * 2 * 34
  ids = Tensor([[5, 17, 33, 2]], dtype=dtypes.int32)
  model(ids, 0).realize()
  tok = Tensor([[7]], dtype=dtypes.int32)
  GlobalCounters.reset()
  fused = model(tok, 4).numpy()
  n_fused = GlobalCounters.kernel_count
  for layer in model.model.layers:
    for l in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.mlp.gate_proj, layer.mlp.up_proj): l.fused = None
  model.clear_cache(); model(ids, 0).realize()
  GlobalCounters.reset()
  apart = model(tok, 4).numpy()
  assert GlobalCounters.kernel_count - n_fused == 3 * cfg.num_hidden_layers, (n_fused, GlobalCounters.kernel_count)
  np.testing.assert_allclose(fused, apart, rtol=1e-5, atol=1e-5)

def test_int8_linear_reads_int8():
  w = np.random.default_rng(4).standard_normal((512, 1024)).astype(np.float32)
  x = np.random.default_rng(5).standard_normal((1, 1024)).astype(np.float32)
  from petagrad import nn
  lin = nn.Linear(1024, 512, bias=False)
  lin.weight = Tensor(w)
  q = quant.Int8Linear.from_linear(lin)
  scale = np.abs(w).max(1, keepdims=True) / 127
  np.testing.assert_array_equal(q.weight.numpy(), np.clip(np.round(w / scale.astype(np.float32)), -127, 127).astype(np.int8))
  xt = Tensor(x).realize()
  GlobalCounters.reset()
  out = q(xt).realize()
  assert GlobalCounters.kernel_count == 1
  assert GlobalCounters.global_mem < 512 * 1024 + 64 * 1024   # one byte per weight (and x, the scales), not 2 MB of floats
  np.testing.assert_allclose(out.numpy(), x @ (q.weight.numpy().astype(np.float32) * q.weight_scale.numpy()).T, rtol=1e-4, atol=1e-3)

def test_quantized_llama_decodes_close_to_float():
  Tensor.manual_seed(0)
  cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=32)
  model = Llama(cfg).realize_weights()
  ids = Tensor([[5, 17, 33, 2]], dtype=dtypes.int32)
  ref = model(ids, 0).numpy()
  assert quant.quantize_linears(model, "q8_0") == 2 * 7 + 1
  model.clear_cache()
  got = model(ids, 0).numpy()
  assert np.abs(got - ref).max() < 0.05 * np.abs(ref).max()
  Tensor.manual_seed(0)
  int8 = Llama(cfg).realize_weights()
  assert quant.quantize_linears(int8, "int8", skip=("lm_head",)) == 2 * 7
  assert isinstance(int8.model.layers[1].self_attn.o_proj, quant.Int8Linear)
  got = int8(ids, 0).numpy()
  assert np.abs(got - ref).max() < 0.02 * np.abs(ref).max()
  v = Variable("start_pos", 0, 31)
  step = TinyJit(lambda t, p: model(t, p).realize())
  for i in range(3): out = step(Tensor([[7 + i]], dtype=dtypes.int32), v.bind(4 + i))
  assert out.shape == (1, 1, 96) and np.isfinite(out.numpy()).all()
  # int8 activations in the decode steps: the same tokens' logits, close to the float model's
  Tensor.manual_seed(0)
  a8 = Llama(cfg).realize_weights()
  assert quant.quantize_linears(a8, "q8_0", int8_activations=True) == 2 * 7 + 1
  a8(ids, 0).realize()
  model.clear_cache(); model(ids, 0).realize()
  step8 = TinyJit(lambda t, p: a8(t, p).realize())
  for i in range(3):
    tok, p = Tensor([[7 + i]], dtype=dtypes.int32), v.bind(4 + i)
    got, want = step8(tok, p).numpy(), model(tok, p).numpy()
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()

def test_bad_quantization():
  with pytest.raises(ValueError, match="not supported"): quant.pack(Tensor.ones(32), "q5_1")
  with pytest.raises(ValueError, match="blocks of 32"): quant.pack(Tensor.ones(40), "q8_0")
  with pytest.raises(ValueError, match="not supported"): quant.quantize_linears(Tensor.ones(1), "int4")

def test_docstrings():
  res = doctest.testmod(quant, optionflags=doctest.ELLIPSIS)
  assert res.failed == 0 and res.attempted > 0
