"""The DISK device (runtime/ops_disk.py): tensors that are byte ranges of files, copies of exactly those bytes, writes
through to the file, the checkpoint loaders' lazy DISK tensors, and the errors for what DISK cannot do."""
from __future__ import annotations
import collections, os, pathlib, stat, struct, zipfile
import numpy as np
import pytest
import torch
from petagrad import Tensor, dtypes, nn
from petagrad.device import Buffer, Device
from petagrad.helpers import GlobalCounters
from petagrad.nn.state import safe_save, safe_load, torch_load, gguf_load, load_state_dict, get_state_dict
from petagrad.runtime import ops_disk

RNG = np.random.default_rng(0)

def disk(path) -> str: return f"DISK:{path}"

@pytest.fixture
def reads(monkeypatch):
  """The byte counts of every read from a DISK file (DiskAllocator.copyout), in order."""
  got: list[int] = []
  orig = ops_disk.DiskAllocator.copyout
  def spy(self, dest, src):
    got.append(dest.nbytes)
    orig(self, dest, src)
  monkeypatch.setattr(ops_disk.DiskAllocator, "copyout", spy)
  return got

# ---------------------------------------------------------------------- tensors on a file

def test_empty_assign_read_back(tmp_path):
  p = tmp_path / "a.bin"
  t = Tensor.empty(3, 4, dtype=dtypes.float32, device=disk(p))
  assert t.device == disk(p) and p.stat().st_size == 48   # the file is made by empty()
  ref = RNG.standard_normal((3, 4)).astype(np.float32)
  assert t.assign(Tensor(ref)) is t
  np.testing.assert_array_equal(np.fromfile(p, np.float32).reshape(3, 4), ref)   # written through to the file
  np.testing.assert_array_equal(t.numpy(), ref)
  np.testing.assert_array_equal(t.to("CPU").numpy(), ref)
  # an existing longer file keeps its length, a shorter one is grown (zeros)
  t2 = Tensor.empty(2, dtype=dtypes.int32, device=disk(p))
  assert p.stat().st_size == 48 and t2.numpy().view(np.float32).tolist() == ref.flatten()[:2].tolist()
  q = tmp_path / "short.bin"
  q.write_bytes(b"\x01\x02")
  assert Tensor.empty(8, dtype=dtypes.uint8, device=disk(q)).tolist() == [1, 2, 0, 0, 0, 0, 0, 0] and q.stat().st_size == 8

def test_assign_forms(tmp_path, device):
  """assign from another device, a scalar, a list, a broadcast value, another dtype; setitem through slices."""
  p = tmp_path / "b.bin"
  t = Tensor.empty(4, 3, dtype=dtypes.int32, device=disk(p))
  ref = np.zeros((4, 3), np.int32)
  t.assign(7); ref[:] = 7
  t[1].assign(Tensor([1, 2, 3], dtype=dtypes.int32, device=device)); ref[1] = [1, 2, 3]
  t[2:4] = Tensor([[5.7, -1.2, 3.0]], device=device); ref[2:4] = np.array([[5.7, -1.2, 3.0]], np.float32).astype(np.int32)
  t[0, 1:] = [8, 9]; ref[0, 1:] = [8, 9]
  np.testing.assert_array_equal(np.fromfile(p, np.int32).reshape(4, 3), ref)
  np.testing.assert_array_equal(Tensor(p, dtype=dtypes.int32).reshape(4, 3).to(device).numpy(), ref)

def test_path_tensor(tmp_path, device):
  p = tmp_path / "raw.bin"
  data = RNG.integers(0, 256, 1000, dtype=np.uint8)
  p.write_bytes(data.tobytes())
  t = Tensor(p)
  assert t.shape == (1000,) and t.dtype == dtypes.uint8 and t.device == disk(p.resolve())
  np.testing.assert_array_equal(t.to(device).numpy(), data)
  f = Tensor(pathlib.Path(p), dtype=dtypes.float32)   # the bytes as float32
  np.testing.assert_array_equal(f.to(device).numpy(), data.view(np.float32))
  c = Tensor(p, device=device)   # copied (lazily) to the device
  assert c.device == device and c.tolist() == data.tolist()

def test_views_copy_like_numpy(tmp_path, device):
  """Slices, reshapes and bitcasts of a file are views: .to() gives numpy's values for the same views."""
  p = tmp_path / "v.bin"
  a = RNG.standard_normal((6, 5, 4)).astype(np.float32)
  p.write_bytes(a.tobytes())
  t = Tensor(p).bitcast(dtypes.float32).reshape(6, 5, 4)
  views = {
    "row": (lambda x: x[2], lambda n: n[2]), "rows": (lambda x: x[1:4], lambda n: n[1:4]),
    "elem": (lambda x: x[3, 2, 1], lambda n: n[3, 2, 1]), "inner": (lambda x: x[4, 1:3], lambda n: n[4, 1:3]),
    "tail": (lambda x: x[5, 4, 1:], lambda n: n[5, 4, 1:]), "empty": (lambda x: x[2:2], lambda n: n[2:2]),
    "reshaped": (lambda x: x.reshape(30, 4)[7:19].reshape(3, 16), lambda n: n.reshape(30, 4)[7:19].reshape(3, 16)),
    "flat": (lambda x: x.flatten()[13:77], lambda n: n.flatten()[13:77]),
    "unsqueezed": (lambda x: x[1:3].unsqueeze(1).permute(1, 0, 2, 3), lambda n: n[1:3][None]),
    "as_int": (lambda x: x[2:4].bitcast(dtypes.int32), lambda n: n[2:4].view(np.int32)),
    "as_half": (lambda x: x[1, 1:3].bitcast(dtypes.float16), lambda n: n[1, 1:3].copy().view(np.float16)),
    "as_bytes": (lambda x: x[0, 0].bitcast(dtypes.uint8), lambda n: n[0, 0].copy().view(np.uint8)),
    "as_i64": (lambda x: x[3].reshape(-1).bitcast(dtypes.int64)[2:5], lambda n: n[3].reshape(-1).view(np.int64)[2:5]),
  }
  for name, (f, g) in views.items():
    v = f(t)
    assert v.device == t.device, name   # still a view of the file
    np.testing.assert_array_equal(v.to(device).numpy(), g(a), err_msg=name)
    np.testing.assert_array_equal(v.numpy(), g(a), err_msg=name)   # read back straight from the file

def test_copy_reads_only_the_view(tmp_path, reads):
  """A 1 KiB slice of a 64 MiB file: the copy reads 1 KiB, no more memory is allocated than that."""
  p = tmp_path / "big.bin"
  with open(p, "wb") as f:
    f.truncate(64 << 20)   # sparse: 64 MiB of zeros
    f.seek(10 << 20)
    f.write(bytes(range(256)) * 4)
  mem0 = GlobalCounters.mem_used
  t = Tensor(p)
  assert GlobalCounters.mem_used == mem0   # a mapped file is not device memory
  GlobalCounters.reset()
  out = t[10 << 20:(10 << 20) + 1024].to("CPU").realize()
  assert reads == [1024] and GlobalCounters.global_mem == 1024 and GlobalCounters.kernel_count == 0
  assert GlobalCounters.mem_used - mem0 == 1024   # the copy's own buffer only
  assert out.tolist() == list(range(256)) * 4
  reads.clear()
  assert t[(10 << 20) + 4:(10 << 20) + 12].bitcast(dtypes.uint64).tolist() == [int.from_bytes(bytes(range(4, 12)), "little")]
  assert reads == [8]

def test_to_disk_and_between_files(tmp_path):
  p, q = tmp_path / "x.bin", tmp_path / "y.bin"
  x = Tensor([[1.5, -2.0], [3.25, 4.0]])
  d = x.to(disk(p))   # written now, from the start of the file
  assert d.device == disk(p) and d.shape == (2, 2) and np.fromfile(p, np.float32).tolist() == [1.5, -2.0, 3.25, 4.0]
  e = d[1].to(disk(q))
  assert np.fromfile(q, np.float32).tolist() == [3.25, 4.0] and e.tolist() == [3.25, 4.0]
  assert d.contiguous().device == disk(p) and d[1].contiguous().tolist() == [3.25, 4.0]   # already one byte run: a view

def test_write_after_lazy_read(tmp_path):
  """A copy made before a write reads the old bytes (as a torch copy would have); one made after reads the new."""
  p = tmp_path / "w.bin"
  d = Tensor([1, 2, 3, 4], dtype=dtypes.int32).to(disk(p))
  before = d[1:3].to("CPU")   # lazy
  also = Tensor(p, dtype=dtypes.int32).to("CPU") * 10   # another tensor of the same file, lazy
  d[1:3] = Tensor([20, 30], dtype=dtypes.int32)
  after = d.to("CPU")
  assert before.tolist() == [2, 3] and also.tolist() == [10, 20, 30, 40] and after.tolist() == [1, 20, 30, 4]

def test_disk_memory_is_not_counted(tmp_path):
  mem0 = GlobalCounters.mem_used
  t = Tensor.empty(1 << 20, dtype=dtypes.uint8, device=disk(tmp_path / "m.bin"))
  t[:4] = 1
  assert GlobalCounters.mem_used == mem0 and GlobalCounters.mem_used_per_device[t.device] == 0

def test_buffer_view():
  b = Buffer(disk("/nonexistent/never/opened"), 16, dtypes.uint8)
  v = b.view(4, 2, dtypes.int32)
  assert (v.base, v.offset, v.nbytes) == (b, 4, 8) and (v.view(4, 1, dtypes.float32).base, v.view(4, 1, dtypes.float32).offset) == (b, 8)
  for off, n in ((-1, 1), (12, 2), (0, 5)):
    with pytest.raises(ValueError, match="does not fit"): b.view(off, n, dtypes.int32)

# ---------------------------------------------------------------------- checkpoints

def _state():
  return {"w": RNG.standard_normal((64, 32)).astype(np.float32), "b": RNG.standard_normal(32).astype(np.float32),
          "h": RNG.standard_normal((3, 5)).astype(np.float16), "i": np.arange(-5, 5, dtype=np.int64), "m": np.array([True, False]),
          "e": np.zeros((0, 4), np.float32), "s": np.array(2.5, np.float64)}

def test_safe_load_is_lazy_disk(tmp_path, reads, device):
  arrs = _state()
  p = tmp_path / "m.safetensors"
  safe_save({k: Tensor(v) for k, v in arrs.items()}, p)
  mem0 = GlobalCounters.mem_used
  GlobalCounters.reset()
  sd = dict(safe_load(p))
  assert reads == [] and GlobalCounters.mem_used == mem0 and GlobalCounters.launch_count == 0   # nothing read or allocated
  assert all(t.device == disk(p.resolve()) for t in sd.values())
  for k, v in arrs.items():
    assert sd[k].shape == v.shape and sd[k].dtype.name == (v.dtype.name if v.dtype != np.bool_ else "bool"), k
    np.testing.assert_array_equal(sd[k].to(device).numpy(), v, err_msg=k)
  assert sorted(reads) == sorted(v.nbytes for v in arrs.values() if v.nbytes)   # each tensor's bytes, once, nothing else
  on = safe_load(p, device=device)["w"]   # with a device: a lazy copy onto it
  assert on.device == device and reads.count(arrs["w"].nbytes) == 1
  np.testing.assert_array_equal(on.numpy(), arrs["w"])
  bf = torch.randn(3, 2).to(torch.bfloat16)
  from safetensors.torch import save_file
  save_file({"bf": bf}, str(tmp_path / "bf.safetensors"))
  np.testing.assert_array_equal(safe_load(tmp_path / "bf.safetensors")["bf"].numpy(), bf.float().numpy())   # numpy(): via a copy
  safe_save(sd, tmp_path / "again.safetensors")   # DISK tensors save as they are
  np.testing.assert_array_equal(safe_load(tmp_path / "again.safetensors")["h"].numpy(), arrs["h"])

class _Model:
  def __init__(self):
    self.layers = [nn.Linear(128, 128) for _ in range(4)]
    self.norm = nn.LayerNorm(128)

def test_load_state_dict_piece_by_piece(tmp_path, monkeypatch):
  """Loading a DISK checkpoint into a CPU model: exact values, and at most one tensor's copy in memory at a time (the
  peak of GlobalCounters.mem_used above the model's own memory stays below the largest tensor plus slack, far below
  the checkpoint)."""
  model = _Model()
  Tensor.realize_all(*get_state_dict(model).values())
  ref = {k: RNG.standard_normal(t.shape).astype(np.float32) for k, t in get_state_dict(model).items()}
  p = tmp_path / "ck.safetensors"
  safe_save({k: Tensor(v) for k, v in ref.items()}, p)
  sd = safe_load(p)
  peak = [GlobalCounters.mem_used]
  orig = Buffer.ensure_allocated
  def tracked(self):
    out = orig(self)
    peak[0] = max(peak[0], GlobalCounters.mem_used)
    return out
  monkeypatch.setattr(Buffer, "ensure_allocated", tracked)
  base = GlobalCounters.mem_used
  load_state_dict(model, sd)
  largest, total = max(v.nbytes for v in ref.values()), sum(v.nbytes for v in ref.values())
  assert peak[0] - base <= largest + 4096 and largest + 4096 < total // 2, (peak[0] - base, largest, total)
  for k, t in get_state_dict(model).items():
    assert t.device == "CPU"
    np.testing.assert_array_equal(t.numpy(), ref[k], err_msg=k)

def test_torch_load_through_disk(tmp_path, reads):
  base = torch.arange(60, dtype=torch.float32).reshape(3, 4, 5)
  sd = collections.OrderedDict(w=torch.randn(8, 6), bf=torch.randn(4, 3).to(torch.bfloat16), row=base[1], t=base.transpose(0, 2),
                               stepped=base[:, ::2], expanded=torch.tensor([1.5]).expand(7), i=torch.arange(5))
  for zip_format in (True, False):
    p = tmp_path / f"m{zip_format}.pth"
    torch.save(sd, p, _use_new_zipfile_serialization=zip_format)
    ref = torch.load(p, weights_only=True)
    reads.clear()
    got = torch_load(p)
    assert reads == [] and list(got) == list(sd)
    for k in ("w", "bf", "row", "i"): assert got[k].device == disk(os.path.abspath(p)), k   # byte ranges: DISK views
    for k in ("t", "stepped", "expanded"): assert got[k].device == Device.DEFAULT, k   # strided: viewed on a compute device
    for k, v in ref.items():
      g = got[k].to("CPU")
      assert g.shape == tuple(v.shape) and g.dtype.name == str(v.dtype)[6:], k
      np.testing.assert_array_equal(g.float().numpy(), v.float().numpy(), err_msg=k)
    assert reads.count(base[1].nbytes) >= 1   # the row is read as its own bytes, not its storage's
  model = nn.Linear(6, 8)
  load_state_dict(model, {"weight": got["w"], "bias": got["i"][:5].to("CPU").float().pad(((0, 3),))}, strict=True)
  np.testing.assert_array_equal(model.weight.numpy(), sd["w"].numpy())

def test_torch_load_compressed_member(tmp_path):
  """A zip member that is compressed is no byte range of the file: it is read and decoded on the compute device."""
  p = tmp_path / "c.pth"
  w = torch.randn(5, 3)
  torch.save({"w": w}, p)
  q = tmp_path / "deflated.pth"
  with zipfile.ZipFile(p) as src, zipfile.ZipFile(q, "w", zipfile.ZIP_DEFLATED) as dst:
    for n in src.namelist(): dst.writestr(n, src.read(n))
  got = torch_load(q)["w"]
  assert got.device == Device.DEFAULT
  np.testing.assert_array_equal(got.numpy(), w.numpy())

def _gguf(path, tensors: list[tuple[str, tuple[int, ...], int, bytes]]) -> None:
  """A minimal GGUF v3 file (no metadata, alignment 32)."""
  s = lambda x: struct.pack("<Q", len(x)) + x.encode()
  head, data, infos = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 0), b"", b""
  for name, shape, kind, raw in tensors:
    data += b"\0" * (-len(data) % 32)
    infos += s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape)) + struct.pack("<IQ", kind, len(data))
    data += raw
  out = head + infos
  path.write_bytes(out + b"\0" * (-len(out) % 32) + data)

def test_gguf_load_through_disk(tmp_path, reads, device):
  f32 = RNG.standard_normal((4, 8)).astype(np.float32)
  d = np.float16(0.05)
  q = RNG.integers(-128, 128, 64, dtype=np.int8)
  q8 = b"".join(np.array([d], np.float16).tobytes() + q[i:i + 32].tobytes() for i in (0, 32))   # two Q8_0 blocks
  p = tmp_path / "m.gguf"
  _gguf(p, [("f", (4, 8), 0, f32.tobytes()), ("q", (2, 32), 8, q8), ("z", (0, 8), 0, b"")])
  _, got = gguf_load(p)
  assert reads == [] and got["f"].device == disk(p.resolve()) and got["z"].device == disk(p.resolve())
  assert got["q"].device == Device.DEFAULT and got["q"].dtype == dtypes.float32   # dequantized on a compute device, later
  np.testing.assert_array_equal(got["f"].to(device).numpy(), f32)
  np.testing.assert_array_equal(got["q"].numpy(), (q.astype(np.float32) * np.float32(d)).reshape(2, 32))
  assert got["z"].shape == (0, 8) and got["z"].numpy().shape == (0, 8)
  _, on = gguf_load(p, device=device)
  assert all(t.device == device for t in on.values())
  np.testing.assert_array_equal(on["f"].numpy(), f32)

# ---------------------------------------------------------------------- what DISK cannot do

def test_errors(tmp_path):
  p = tmp_path / "e.bin"
  t = Tensor.empty(4, 4, dtype=dtypes.float32, device=disk(p))
  where = f"DISK:{p}"
  for op in (lambda: t + 1, lambda: t.sum(), lambda: t.float().half(), lambda: t.clone(), lambda: t.exp(), lambda: t.cast(dtypes.int32),
             lambda: Tensor.zeros(3, device=where), lambda: t.gather(0, t[:1].bitcast(dtypes.int32))):
    with pytest.raises(RuntimeError, match=rf"{where} runs no kernels .*\.to\('CPU'\)"): op()
  for view in (t[:, 1], t.T, t[::2], t[0].reshape(1, 4).expand(3, 4), t[:3].pad(((0, 1), (0, 0)))):
    with pytest.raises(RuntimeError, match=rf"not one contiguous byte range of the file.*on {where}"): view.to("CPU")
  with pytest.raises(RuntimeError, match="not one contiguous byte range"): t[:, 1].assign(Tensor.zeros(4))
  with pytest.raises(RuntimeError, match="not one contiguous byte range"): t.T.bitcast(dtypes.uint8)
  with pytest.raises(ValueError, match=rf"out of range .*on {where}"): t.shrink(((0, 5), (0, 4)))
  with pytest.raises(IndexError, match=rf"out of bounds .*on {where}"): t[4]
  with pytest.raises(ValueError, match="not a whole number of dtypes.float32"): t[0, :3].bitcast(dtypes.uint8)[:5].bitcast(dtypes.float32)
  with pytest.raises(ValueError, match="cannot be broadcast|broadcast"): t.assign(Tensor.ones(3))

def test_bad_files(tmp_path):
  missing = tmp_path / "missing.bin"
  with pytest.raises(FileNotFoundError, match=rf"DISK:{missing}: no such file"): Tensor(missing)
  with pytest.raises(FileNotFoundError, match="missing.safetensors"): safe_load(tmp_path / "missing.safetensors")
  assert not missing.exists()   # reading never creates a file
  with pytest.raises(IsADirectoryError, match=rf"DISK:{tmp_path}: is a directory"): Tensor(tmp_path)
  with pytest.raises(IsADirectoryError, match=rf"DISK:{tmp_path}: is a directory"): Tensor.empty(4, device=disk(tmp_path))
  with pytest.raises(FileNotFoundError, match="does not exist"): Tensor.empty(4, device=disk(tmp_path / "no" / "f.bin"))
  odd = tmp_path / "odd.bin"
  odd.write_bytes(b"123")
  with pytest.raises(ValueError, match=rf"DISK:{odd}: 3 bytes is not a whole number of dtypes.float32"): Tensor(odd, dtype=dtypes.float32)

def test_read_only_file(tmp_path, monkeypatch):
  p = tmp_path / "ro.bin"
  p.write_bytes(b"\x01\x02\x03\x04")
  p.chmod(stat.S_IRUSR)
  if os.geteuid() == 0:   # root may write it anyway: opening it for writing fails as it would for anyone else
    def no_write(path, mode="r", *a, **kw):
      if "+" in mode or "w" in mode: raise PermissionError(13, "Permission denied")
      return open(path, mode, *a, **kw)
    monkeypatch.setattr(ops_disk, "open", no_write, raising=False)
  t = Tensor(p)
  assert t.tolist() == [1, 2, 3, 4]
  with pytest.raises(PermissionError, match=rf"DISK:{p}: the file is read-only"): t[0:2] = 5
  with pytest.raises(PermissionError, match="read-only file has 4 bytes"): Tensor.empty(8, dtype=dtypes.uint8, device=disk(p))

def test_truncated_file_raises(tmp_path):
  """Reading a mapped page past the end of a file that shrank would kill the process (SIGBUS): it raises instead."""
  p = tmp_path / "t.bin"
  p.write_bytes(bytes(range(200)) * 100)
  t = Tensor(p)
  assert t[100:104].tolist() == [100, 101, 102, 103]
  with open(p, "r+b") as f: f.truncate(100)
  with pytest.raises(RuntimeError, match=rf"DISK:{p}: the file has 100 bytes now"): t[19000:19004].to("CPU").realize()
  assert t[10:14].tolist() == [10, 11, 12, 13]   # what is left still reads
