"""BERT's WordPiece tokenizer, read from a Hugging Face folder (`tokenizer.json`, or `vocab.txt` + `tokenizer_config.json`).

The steps, in the order the Hugging Face fast tokenizer (the `tokenizers` library) runs them, whose ids this reproduces:

1. special tokens ("[CLS]", "[MASK]", added tokens) written in the text are cut out first and kept whole;
2. normalization: control characters dropped and whitespace made " " (clean_text), a space put around every CJK
   ideograph (handle_chinese_chars), accents stripped (NFD, then the nonspacing marks dropped; by default when
   lowercasing), lowercasing;
3. pre-tokenization: split on whitespace, and every punctuation character is a word of its own;
4. WordPiece: each word becomes the longest vocabulary entry that starts it, then the longest "##" entry that
   continues it, and so on; a word with a piece not in the vocabulary, or longer than max_input_chars_per_word
   characters, is one "[UNK]";
5. "[CLS]" ... "[SEP]" around the result; truncation to max_length counts them.

>>> tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "!", "caf", "##e"])
>>> tok.tokenize("Unaffable!  Café")
['un', '##aff', '##able', '!', 'caf', '##e']
>>> tok.encode("Unaffable! Café")
[2, 5, 6, 7, 8, 9, 10, 3]
>>> ids, mask = tok(["unaffable", "café [MASK] un"], return_tensors=None)
>>> ids, mask
([[2, 5, 6, 7, 3, 0], [2, 9, 10, 4, 5, 3]], [[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
"""
from __future__ import annotations
import json, os, re, unicodedata
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

# Unicode's White_Space property (what the fast tokenizer splits on; str.isspace() also counts \x1c-\x1f)
_WHITESPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(chr(c) for c in range(0x2000, 0x200B)))
# the CJK ideograph blocks BERT isolates (the fast tokenizer's ranges: its extension block starts at U+2B920)
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF),
        (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))

def _is_whitespace(c: str) -> bool: return c in _WHITESPACE
def _is_control(c: str) -> bool:
  # tab, newline and carriage return are whitespace, not control; every other "C*" category (Cc, Cf, Cn, Co, Cs) is
  return c not in "\t\n\r" and unicodedata.category(c)[0] == "C"
def _is_cjk(c: str) -> bool:
  o = ord(c)
  return any(lo <= o <= hi for lo, hi in _CJK)
def _is_punctuation(c: str) -> bool:
  # BERT counts every ASCII non-alphanumeric printable ($, +, ^, ...) as punctuation, beside Unicode's P* categories
  o = ord(c)
  return 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126 or unicodedata.category(c)[0] == "P"

@dataclass(frozen=True)
class WordPieceConfig:
  """How text is normalized and split (BERT's BasicTokenizer / the fast tokenizer's BertNormalizer), and the special tokens.

  strip_accents=None strips them when lowercase is set (BERT's rule). model_max_length is the longest sequence the
  model takes (ids, with "[CLS]" and "[SEP]"), the default max_length of `WordPieceTokenizer.__call__`.

  >>> WordPieceConfig(lowercase=False).strips_accents
  False
  """
  lowercase: bool = True
  strip_accents: bool | None = None
  clean_text: bool = True
  handle_chinese_chars: bool = True
  unk_token: str = "[UNK]"
  cls_token: str = "[CLS]"
  sep_token: str = "[SEP]"
  pad_token: str = "[PAD]"
  mask_token: str = "[MASK]"
  continuing_subword_prefix: str = "##"
  max_input_chars_per_word: int = 100
  model_max_length: int = 512

  def __post_init__(self) -> None:
    for name in ("max_input_chars_per_word", "model_max_length"):
      v = getattr(self, name)
      if type(v) is not int or v < 1: raise ValueError(f"WordPieceConfig: {name} must be a positive int, got {v!r}")
    for name in ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token", "continuing_subword_prefix"):
      if not isinstance(getattr(self, name), str): raise TypeError(f"WordPieceConfig: {name} must be a str, got {getattr(self, name)!r}")

  @property
  def strips_accents(self) -> bool: return self.lowercase if self.strip_accents is None else bool(self.strip_accents)

@dataclass(frozen=True)
class AddedToken:
  """A token matched in the raw text before anything else (the special tokens, tokens added to a vocabulary).
  lstrip/rstrip: the whitespace on that side is part of the match; single_word: it matches only as a whole word;
  normalized: it is matched in the normalized text (so "[mask]" would match a lowercased "[MASK]") instead of the raw text."""
  content: str
  id: int
  special: bool = True
  lstrip: bool = False
  rstrip: bool = False
  single_word: bool = False
  normalized: bool = False

class WordPieceTokenizer:
  """BERT's tokenizer: text -> token ids (see the module docstring for the steps).

  vocab: the tokens in id order (vocab.txt's lines) or a {token: id} mapping. `from_pretrained(folder)` reads a
  Hugging Face folder. `encode(text)` gives one sequence's ids with "[CLS]"/"[SEP]"; calling the tokenizer on a list of
  texts gives a padded batch and its attention mask, as petagrad Tensors (return_tensors=None: lists).

  >>> tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "!"])
  >>> tok.encode("Hello, world!")
  [2, 5, 1, 6, 7, 3]
  >>> tok.decode(tok.encode("Hello world !"))
  'hello world!'
  """
  def __init__(self, vocab: Sequence[str] | Mapping[str, int], config: WordPieceConfig | None = None,
               added_tokens: Iterable[AddedToken] = (), special_prefix: Sequence[str] | None = None,
               special_suffix: Sequence[str] | None = None, match_special_tokens: bool = True):
    if isinstance(vocab, Mapping): self.vocab: dict[str, int] = {str(k): int(v) for k, v in vocab.items()}
    elif isinstance(vocab, (list, tuple)): self.vocab = {str(t): i for i, t in enumerate(vocab)}
    else: raise TypeError(f"WordPieceTokenizer: vocab must be a list of tokens or a {{token: id}} mapping, got {type(vocab).__name__}")
    self.config = config if config is not None else WordPieceConfig()
    if not isinstance(self.config, WordPieceConfig): raise TypeError(f"WordPieceTokenizer: config must be a WordPieceConfig, got {config!r}")
    c = self.config
    self.added_tokens: list[AddedToken] = list(added_tokens)
    for t in self.added_tokens: self.vocab.setdefault(t.content, t.id)
    # match_special_tokens: the special tokens the vocabulary has are matched whole in raw text, as BertTokenizer does
    # (a tokenizer.json lists the ones it matches among its added tokens)
    known = {t.content for t in self.added_tokens}
    for s in (c.pad_token, c.unk_token, c.cls_token, c.sep_token, c.mask_token) if match_special_tokens else ():
      if s in self.vocab and s not in known: self.added_tokens.append(AddedToken(s, self.vocab[s]))
    if c.unk_token not in self.vocab: raise ValueError(f"WordPieceTokenizer: the unknown token {c.unk_token!r} is not in the vocabulary")
    self.ids_to_tokens: dict[int, str] = {i: t for t, i in self.vocab.items()}
    self.special_prefix = [c.cls_token] if special_prefix is None else list(special_prefix)
    self.special_suffix = [c.sep_token] if special_suffix is None else list(special_suffix)
    for s in self.special_prefix + self.special_suffix:
      if s not in self.vocab: raise ValueError(f"WordPieceTokenizer: the special token {s!r} is not in the vocabulary")
    self.unk_id = self.vocab[c.unk_token]
    self.pad_id = self.vocab.get(c.pad_token, 0)
    self._raw_split = _matcher([t for t in self.added_tokens if not t.normalized])
    self._norm_split = _matcher([t for t in self.added_tokens if t.normalized])
    self._special_ids = {t.id for t in self.added_tokens if t.special}

  # ------------------------------------------------------------ loading
  @classmethod
  def from_pretrained(cls, path: str | os.PathLike) -> WordPieceTokenizer:
    """The tokenizer of a Hugging Face folder: its tokenizer.json when there is one, else vocab.txt with the settings of
    tokenizer_config.json. A path to one of those files works too."""
    path = os.fspath(path)
    if os.path.isfile(path):
      return cls.from_file(path) if path.endswith(".json") else cls.from_vocab(path, os.path.join(os.path.dirname(path), "tokenizer_config.json"))
    if not os.path.isdir(path): raise FileNotFoundError(f"WordPieceTokenizer.from_pretrained: {path!r} is no folder or file")
    if os.path.isfile(tj := os.path.join(path, "tokenizer.json")): return cls.from_file(tj)
    if os.path.isfile(vt := os.path.join(path, "vocab.txt")): return cls.from_vocab(vt, os.path.join(path, "tokenizer_config.json"))
    raise FileNotFoundError(f"WordPieceTokenizer.from_pretrained: {path!r} has neither tokenizer.json nor vocab.txt")

  @classmethod
  def from_file(cls, path: str | os.PathLike) -> WordPieceTokenizer:
    """A `tokenizers` tokenizer.json whose model is WordPiece (BERT's normalizer, pre-tokenizer and post-processor).
    Its own truncation and padding settings are not used: give max_length to the call."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f: spec = json.load(f)
    model = spec.get("model") or {}
    if model.get("type") != "WordPiece": raise ValueError(f"{path}: the tokenizer model is {model.get('type')!r}, not WordPiece")
    if not isinstance(model.get("vocab"), dict): raise ValueError(f"{path}: the WordPiece model has no vocab mapping")
    added = [AddedToken(str(t["content"]), int(t["id"]), bool(t.get("special", False)), bool(t.get("lstrip", False)),
                        bool(t.get("rstrip", False)), bool(t.get("single_word", False)), bool(t.get("normalized", False)))
             for t in spec.get("added_tokens") or []]
    norm = _normalizer_settings(path, spec.get("normalizer"))
    pre = spec.get("pre_tokenizer")
    if pre is not None and pre.get("type") != "BertPreTokenizer":
      raise ValueError(f"{path}: pre_tokenizer {pre.get('type')!r} is not supported (BertPreTokenizer is)")
    prefix, suffix = _template(path, spec.get("post_processor"))
    cfg = WordPieceConfig(**norm, unk_token=str(model.get("unk_token", "[UNK]")),
                          continuing_subword_prefix=str(model.get("continuing_subword_prefix") or "##"),
                          max_input_chars_per_word=int(model.get("max_input_chars_per_word", 100)),
                          cls_token=prefix[0] if prefix else "[CLS]", sep_token=suffix[-1] if suffix else "[SEP]",
                          model_max_length=_model_max_length(os.path.join(os.path.dirname(path), "tokenizer_config.json")))
    return cls(model["vocab"], cfg, added, prefix, suffix, match_special_tokens=False)

  @classmethod
  def from_vocab(cls, vocab_file: str | os.PathLike, config_file: str | os.PathLike | None = None) -> WordPieceTokenizer:
    """vocab.txt (one token a line, ids in line order) with the BertTokenizer settings of a tokenizer_config.json
    (do_lower_case, strip_accents, tokenize_chinese_chars, the special tokens), when that file exists."""
    with open(vocab_file, encoding="utf-8") as f: tokens = [line.rstrip("\n").rstrip("\r") for line in f]
    while tokens and tokens[-1] == "": tokens.pop()   # a trailing empty line is no token
    conf: dict[str, Any] = {}
    if config_file is not None and os.path.isfile(config_file):
      with open(config_file, encoding="utf-8") as f: conf = json.load(f)
    def tok(name: str, default: str) -> str:
      v = conf.get(name, default)
      return str(v.get("content", default) if isinstance(v, dict) else v if v is not None else default)
    added = []
    for i, t in (conf.get("added_tokens_decoder") or {}).items():
      added.append(AddedToken(str(t["content"]), int(i), bool(t.get("special", False)), bool(t.get("lstrip", False)),
                              bool(t.get("rstrip", False)), bool(t.get("single_word", False)), bool(t.get("normalized", False))))
    cfg = WordPieceConfig(lowercase=bool(conf.get("do_lower_case", True)), strip_accents=conf.get("strip_accents"),
                          handle_chinese_chars=bool(conf.get("tokenize_chinese_chars", True)),
                          unk_token=tok("unk_token", "[UNK]"), cls_token=tok("cls_token", "[CLS]"), sep_token=tok("sep_token", "[SEP]"),
                          pad_token=tok("pad_token", "[PAD]"), mask_token=tok("mask_token", "[MASK]"),
                          model_max_length=_model_max_length(config_file))
    return cls(tokens, cfg, added)

  # ------------------------------------------------------------ text -> tokens
  def normalize(self, text: str) -> str:
    """The normalizer's output: cleaned, CJK ideographs spaced, accents stripped, lowercased (per the config)."""
    c = self.config
    if c.clean_text:
      text = "".join(" " if _is_whitespace(ch) else ch for ch in text if ch != "\x00" and ch != "\ufffd" and not _is_control(ch))
    if c.handle_chinese_chars: text = "".join(f" {ch} " if _is_cjk(ch) else ch for ch in text)
    if c.strips_accents: text = "".join(ch for ch in unicodedata.normalize("NFD", text) if unicodedata.category(ch) != "Mn")
    # character by character, like the fast tokenizer (str.lower() would turn a word-final capital sigma into "ς")
    if c.lowercase: text = "".join(ch.lower() for ch in text)
    return text

  def pre_tokenize(self, text: str) -> list[str]:
    """Normalized text -> words: split on whitespace, each punctuation character a word of its own."""
    words, cur = [], []
    for ch in text:
      if _is_whitespace(ch) or _is_punctuation(ch):
        if cur: words.append("".join(cur)); cur = []
        if not _is_whitespace(ch): words.append(ch)
      else: cur.append(ch)
    if cur: words.append("".join(cur))
    return words

  def wordpiece(self, word: str) -> list[str]:
    """One word -> its pieces: greedy longest match first, "##" on continuations; ["[UNK]"] when a piece is missing."""
    c = self.config
    if len(word) > c.max_input_chars_per_word: return [c.unk_token]
    pieces, start = [], 0
    while start < len(word):
      for end in range(len(word), start, -1):
        piece = word[start:end] if start == 0 else c.continuing_subword_prefix + word[start:end]
        if piece in self.vocab: break
      else: return [c.unk_token]
      pieces.append(piece)
      start = end
    return pieces

  def tokenize(self, text: str) -> list[str]:
    """text -> WordPiece tokens, without "[CLS]"/"[SEP]"; added tokens written in the text stay whole."""
    if not isinstance(text, str): raise TypeError(f"WordPieceTokenizer: text must be a str, got {type(text).__name__}")
    out: list[str] = []
    for piece, token in self._raw_split(text):
      if token is not None: out.append(token.content); continue
      for npiece, ntoken in self._norm_split(self.normalize(piece)):
        if ntoken is not None: out.append(ntoken.content); continue
        for word in self.pre_tokenize(npiece): out.extend(self.wordpiece(word))
    return out

  def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
    return [self.vocab.get(t, self.unk_id) for t in tokens]

  def encode(self, text: str, add_special_tokens: bool = True, max_length: int | None = None) -> list[int]:
    """text -> ids, "[CLS]" ... "[SEP]" around them (add_special_tokens); max_length: at most that many ids, the
    special tokens included (the text's last tokens are dropped)."""
    ids = self.convert_tokens_to_ids(self.tokenize(text))
    pre = self.convert_tokens_to_ids(self.special_prefix) if add_special_tokens else []
    post = self.convert_tokens_to_ids(self.special_suffix) if add_special_tokens else []
    if max_length is not None:
      if type(max_length) is not int: raise TypeError(f"WordPieceTokenizer: max_length must be an int, got {max_length!r}")
      if max_length < len(pre) + len(post):
        raise ValueError(f"WordPieceTokenizer: max_length={max_length} leaves no room for the {len(pre) + len(post)} special tokens")
      ids = ids[:max_length - len(pre) - len(post)]
    return pre + ids + post

  def __call__(self, texts: str | Sequence[str], max_length: int | None = None, padding: str = "longest",
               return_tensors: str | None = "petagrad", device: str | None = None) -> tuple[Any, Any]:
    """A batch: (input_ids, attention_mask), both (len(texts), length) with 1 on tokens and 0 on padding ("[PAD]" ids,
    on the right). max_length (default: the config's model_max_length) truncates each text; padding="longest" pads to
    the longest text, "max_length" to max_length (one shape for every batch). return_tensors="petagrad" gives int32
    Tensors on device, None nested lists."""
    if isinstance(texts, str): texts = [texts]
    if not isinstance(texts, (list, tuple)): raise TypeError(f"WordPieceTokenizer: texts must be a str or a list of str, got {type(texts).__name__}")
    if padding not in ("longest", "max_length"): raise ValueError(f"WordPieceTokenizer: padding must be 'longest' or 'max_length', got {padding!r}")
    if return_tensors not in ("petagrad", None):
      raise ValueError(f"WordPieceTokenizer: return_tensors must be 'petagrad' or None, got {return_tensors!r}")
    limit = self.config.model_max_length if max_length is None else max_length
    seqs = [self.encode(t, max_length=limit) for t in texts]
    width = limit if padding == "max_length" else max((len(s) for s in seqs), default=0)
    ids = [s + [self.pad_id] * (width - len(s)) for s in seqs]
    mask = [[1] * len(s) + [0] * (width - len(s)) for s in seqs]
    if return_tensors is None: return ids, mask
    from petagrad.tensor import Tensor
    from petagrad.dtype import dtypes
    if not seqs: return Tensor.empty(0, 0, dtype=dtypes.int32, device=device), Tensor.empty(0, 0, dtype=dtypes.int32, device=device)
    return Tensor(ids, dtype=dtypes.int32, device=device), Tensor(mask, dtype=dtypes.int32, device=device)

  # ------------------------------------------------------------ ids -> text
  def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
    return [self.ids_to_tokens.get(int(i), self.config.unk_token) for i in ids]

  def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
    """ids -> text: "##" pieces joined to the word before, the space before . ? ! , taken out (the normalization is not
    undone: lowercased text stays lowercase)."""
    special = self._special_ids | {self.vocab[t] for t in self.special_prefix + self.special_suffix}
    words: list[str] = []
    p = self.config.continuing_subword_prefix
    for i in ids:
      if skip_special_tokens and int(i) in special: continue
      t = self.ids_to_tokens.get(int(i), self.config.unk_token)
      if t.startswith(p) and words: words[-1] += t[len(p):]
      else: words.append(t)
    text = " ".join(words)
    for a, b in _CLEANUP: text = text.replace(a, b)
    return text

  def __len__(self) -> int: return len(self.vocab)
  def __repr__(self) -> str: return f"WordPieceTokenizer(vocab_size={len(self.vocab)}, {self.config})"

# decode's cleanup: no space before . ? ! , (what the fast tokenizer's WordPiece decoder takes out; "don ' t" stays)
_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","))

def _matcher(tokens: list[AddedToken]):
  """text -> [(piece, None) | (matched text, token)]: the added tokens cut out of text, leftmost first, the longest
  at a position (what the fast tokenizer's matcher does), honoring lstrip/rstrip/single_word."""
  if not tokens:
    return lambda text: [(text, None)]
  by_content = {t.content: t for t in tokens}
  pattern = re.compile("|".join(re.escape(c) for c in sorted(by_content, key=len, reverse=True)))
  def word_char(ch: str) -> bool: return ch.isalnum() or ch == "_"
  def split(text: str) -> list[tuple[str, AddedToken | None]]:
    out: list[tuple[str, AddedToken | None]] = []
    pos, search = 0, 0
    while (m := pattern.search(text, search)) is not None:
      tok, s, e = by_content[m.group()], m.start(), m.end()
      if tok.single_word and ((s > 0 and word_char(text[s - 1])) or (e < len(text) and word_char(text[e]))):
        search = s + 1
        continue
      if tok.lstrip:
        while s > pos and _is_whitespace(text[s - 1]): s -= 1
      if tok.rstrip:
        while e < len(text) and _is_whitespace(text[e]): e += 1
      if s > pos: out.append((text[pos:s], None))
      out.append((text[s:e], tok))
      pos = search = e
    if pos < len(text): out.append((text[pos:], None))
    return out
  return split

def _normalizer_settings(path: str, spec: Any) -> dict[str, Any]:
  """WordPieceConfig's normalization fields from a tokenizer.json normalizer: BertNormalizer, or a Sequence of
  Lowercase / NFD / StripAccents (which is what BERT's steps are), or none."""
  if spec is None: return {"lowercase": False, "strip_accents": False, "clean_text": False, "handle_chinese_chars": False}
  if spec.get("type") == "BertNormalizer":
    return {"lowercase": bool(spec.get("lowercase", True)), "strip_accents": spec.get("strip_accents"),
            "clean_text": bool(spec.get("clean_text", True)), "handle_chinese_chars": bool(spec.get("handle_chinese_chars", True))}
  steps = [s.get("type") for s in spec.get("normalizers", [])] if spec.get("type") == "Sequence" else [spec.get("type")]
  out = {"lowercase": False, "strip_accents": False, "clean_text": False, "handle_chinese_chars": False}
  for s in steps:
    if s == "Lowercase": out["lowercase"] = True
    elif s == "StripAccents": out["strip_accents"] = True
    elif s == "NFD" and "StripAccents" in steps: pass   # the decomposition StripAccents needs: part of strip_accents
    else: raise ValueError(f"{path}: normalizer {s!r} is not supported (BertNormalizer, Lowercase, NFD + StripAccents are)")
  return out

def _template(path: str, spec: Any) -> tuple[list[str] | None, list[str] | None]:
  """The special tokens put before and after a single sequence by the post-processor (None: BERT's [CLS] ... [SEP])."""
  if spec is None: return [], []
  kind = spec.get("type")
  if kind == "BertProcessing": return [str(spec["cls"][0])], [str(spec["sep"][0])]
  if kind == "TemplateProcessing":
    items, pre, post, seen = spec.get("single") or [], [], [], False
    for it in items:
      if "Sequence" in it: seen = True
      elif "SpecialToken" in it: (post if seen else pre).append(str(it["SpecialToken"]["id"]))
    return pre, post
  raise ValueError(f"{path}: post_processor {kind!r} is not supported (TemplateProcessing and BertProcessing are)")

def _model_max_length(config_file: str | os.PathLike | None) -> int:
  """tokenizer_config.json's model_max_length when it is a sane int (some files hold 1e30 for "no limit"), else 512."""
  if config_file is None or not os.path.isfile(config_file): return 512
  with open(config_file, encoding="utf-8") as f: v = json.load(f).get("model_max_length")
  return v if type(v) is int and 0 < v <= 1 << 20 else 512
