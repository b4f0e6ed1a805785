"""nn.datasets: IDX parsing (on small files written here), where MNIST is looked for, the error that lists every
place, the download path (urlopen faked), and the Batches iterator."""
from __future__ import annotations
import gzip, io, os, re, struct, subprocess, sys
import pytest
from petagrad import Tensor, dtypes, Context
from petagrad.nn import datasets
from petagrad.nn.datasets import read_idx, idx_tensor, mnist, mnist_files, Batches, IDXError, MNIST_FILES

def idx_bytes(shape: tuple[int, ...], code: int = 0x08, fmt: str = "B", values=None) -> bytes:
  n = 1
  for s in shape: n *= s
  values = list(range(n)) if values is None else values
  return struct.pack(">HBB", 0, code, len(shape)) + struct.pack(f">{len(shape)}I", *shape) + \
    struct.pack(f">{n}{fmt}", *[v % 256 if fmt == "B" else v for v in values])

def write(path, data: bytes, gz: bool) -> str:
  path = str(path)
  if gz:
    with gzip.open(path, "wb") as f: f.write(data)
  else:
    with open(path, "wb") as f: f.write(data)
  return path

def fake_mnist(folder, n_train: int = 6, n_test: int = 4, gz: bool = True, rows: int = 3, cols: int = 2) -> None:
  os.makedirs(folder, exist_ok=True)
  for name, n in zip(MNIST_FILES, (n_train, n_train, n_test, n_test)):
    data = idx_bytes((n, rows, cols)) if "images" in name else idx_bytes((n,), values=[i % 10 for i in range(n)])
    write(os.path.join(folder, name + (".gz" if gz else "")), data, gz)

# ---------------------------------------------------------------------- IDX

@pytest.mark.parametrize("gz", [True, False])
def test_read_idx_uint8(tmp_path, gz):
  p = write(tmp_path / "a-idx3-ubyte", idx_bytes((2, 3, 4)), gz)
  shape, dt, raw = read_idx(p)
  assert shape == (2, 3, 4) and dt == dtypes.uint8 and raw == bytes(range(24))
  t = idx_tensor(p)
  assert t.shape == (2, 3, 4) and t.dtype == dtypes.uint8 and t[1, 2].tolist() == [20, 21, 22, 23]

@pytest.mark.parametrize("code,fmt,dt,vals", [(0x09, "b", dtypes.int8, [-3, 0, 7]), (0x0B, "h", dtypes.int16, [-300, 2, 30000]),
                                               (0x0C, "i", dtypes.int32, [-70000, 1, 2 ** 30]), (0x0D, "f", dtypes.float32, [1.5, -2.25, 1e10]),
                                               (0x0E, "d", dtypes.float64, [0.1, -1e300, 3.0])])
def test_read_idx_big_endian_types(tmp_path, code, fmt, dt, vals):
  p = write(tmp_path / "x.idx", idx_bytes((3,), code, fmt, vals), gz=True)
  t = idx_tensor(p)
  assert t.dtype == dt and t.shape == (3,)
  assert t.tolist() == pytest.approx(vals)

def test_read_idx_0d_and_empty(tmp_path):
  assert read_idx(write(tmp_path / "z", idx_bytes((0, 5)), gz=False))[0] == (0, 5)

@pytest.mark.parametrize("data,msg", [(b"\x00\x00", "too short"), (b"\x01\x02\x08\x01" + b"\x00" * 8, "not an IDX file"),
                                      (b"\x00\x00\x07\x01\x00\x00\x00\x01\x00", "not an IDX file"),
                                      (b"\x00\x00\x08\x03\x00\x00\x00\x02", "truncated header"),
                                      (struct.pack(">HBBI", 0, 8, 1, 10) + b"\x00" * 9, "needs 10 data bytes, the file has 9 (truncated?)"),
                                      (struct.pack(">HBBI", 0, 8, 1, 2) + b"\x00" * 3, "needs 2 data bytes, the file has 3")],
                         ids=["short", "magic", "typecode", "header", "truncated", "trailing"])
def test_read_idx_errors_name_the_file(tmp_path, data, msg):
  p = write(tmp_path / "bad-idx", data, gz=False)
  with pytest.raises(IDXError, match=re.escape(msg)) as e: read_idx(p)
  assert str(p) in str(e.value)

def test_read_idx_bad_gzip(tmp_path):
  p = write(tmp_path / "bad.gz", b"\x1f\x8b" + b"garbage", gz=False)
  with pytest.raises(IDXError, match="cannot read"): read_idx(p)

# ---------------------------------------------------------------------- finding MNIST

@pytest.fixture
def no_system(monkeypatch, tmp_path):
  """No system package, no MNIST_PATH, an empty cache dir, and no network."""
  monkeypatch.setattr(datasets, "FASHION_MNIST_SYSTEM_DIRS", (str(tmp_path / "system-fashion"),))
  monkeypatch.setattr(datasets, "MNIST_SYSTEM_DIRS", ())
  def offline(*a, **k): raise OSError("network is unreachable (test)")
  monkeypatch.setattr(datasets.urllib.request, "urlopen", offline)
  with Context(CACHEDIR=str(tmp_path / "cache"), MNIST_PATH=""): yield tmp_path

@pytest.mark.parametrize("gz", [True, False])
def test_mnist_from_path(no_system, gz):
  fake_mnist(no_system / "d", gz=gz)
  X, Y, Xt, Yt = mnist(path=no_system / "d")
  assert X.shape == (6, 1, 3, 2) and X.dtype == dtypes.uint8 and Y.shape == (6,) and Y.dtype == dtypes.uint8
  assert Xt.shape == (4, 1, 3, 2) and Yt.tolist() == [0, 1, 2, 3]
  assert X[1].flatten().tolist() == [6, 7, 8, 9, 10, 11]

def test_mnist_path_flag(no_system):
  fake_mnist(no_system / "env")
  with Context(MNIST_PATH=str(no_system / "env")): assert mnist(fashion=True)[0].shape == (6, 1, 3, 2)

def test_mnist_path_env_var(tmp_path):
  # read from the environment when petagrad is imported, like every flag
  fake_mnist(tmp_path / "env")
  code = ("from petagrad.helpers import MNIST_PATH; from petagrad.nn.datasets import mnist_files; "
          "print(MNIST_PATH.value, len(mnist_files(download=False)))")
  env = {**os.environ, "MNIST_PATH": str(tmp_path / "env"),
         "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
  out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.split()
  assert out == [str(tmp_path / "env"), "4"]

def test_fashion_from_system_dir(no_system):
  fake_mnist(no_system / "system-fashion", n_train=5)
  assert mnist(fashion=True)[0].shape[0] == 5
  with pytest.raises(FileNotFoundError): mnist(fashion=False, download=False)   # the system dir holds Fashion-MNIST only

def test_missing_lists_every_place(no_system):
  with Context(MNIST_PATH=str(no_system / "nowhere")), pytest.raises(FileNotFoundError) as e: mnist(fashion=True)
  msg = str(e.value)
  for where in (f"MNIST_PATH: {no_system / 'nowhere'} (no such folder)",
                f"system package: {no_system / 'system-fashion'}", f"download cache: {no_system / 'cache' / 'datasets' / 'fashion-mnist'}",
                "download: http://fashion-mnist", "network is unreachable", "apt-get install -y dataset-fashion-mnist", "MNIST_PATH=/that/folder"):
    assert where in msg, (where, msg)
  assert not os.path.exists(no_system / "cache" / "datasets" / "fashion-mnist")   # a failed download leaves no empty folder

def test_explicit_path_is_the_only_place(no_system):
  fake_mnist(no_system / "system-fashion")
  fake_mnist(no_system / "partial")
  os.remove(no_system / "partial" / "t10k-labels-idx1-ubyte.gz")   # three of four files is not enough
  with pytest.raises(FileNotFoundError, match=re.escape(f"Fashion-MNIST not found in {no_system / 'partial'}: it needs all of")):
    mnist(fashion=True, path=no_system / "partial")
  with pytest.raises(FileNotFoundError, match="no such folder"): mnist(fashion=True, path=no_system / "nope")
  assert mnist(fashion=True)[0].shape == (6, 1, 3, 2)   # without the argument the system folder is found

def test_missing_without_download(no_system):
  with pytest.raises(FileNotFoundError, match=r"MNIST_PATH: \(not set\)[\s\S]*download: not tried"): mnist_files(download=False)

def test_download_into_cache(no_system, monkeypatch):
  src = no_system / "server"
  fake_mnist(src)
  calls = []
  def urlopen(url, timeout=None):
    calls.append(url)
    if url.startswith(datasets.MNIST_URLS[0]): raise OSError("first mirror down")
    return io.BytesIO(open(src / url.rsplit("/", 1)[1], "rb").read())
  monkeypatch.setattr(datasets.urllib.request, "urlopen", urlopen)
  X, Y, Xt, Yt = mnist()
  assert X.shape == (6, 1, 3, 2) and Yt.shape == (4,)
  cache = no_system / "cache" / "datasets" / "mnist"
  assert sorted(os.listdir(cache)) == sorted(n + ".gz" for n in MNIST_FILES)   # no temporary files left
  assert calls[0].startswith(datasets.MNIST_URLS[0]) and all(c.startswith(datasets.MNIST_URLS[1]) for c in calls[1:])
  n = len(calls)
  mnist()
  assert len(calls) == n   # the second time it reads the cache

def test_download_rejects_non_idx(no_system, monkeypatch):
  monkeypatch.setattr(datasets.urllib.request, "urlopen", lambda url, timeout=None: io.BytesIO(b"<html>captive portal</html>"))
  with pytest.raises(FileNotFoundError, match="not an IDX file"): mnist()
  assert not os.path.exists(no_system / "cache" / "datasets" / "mnist")

def test_mismatched_counts(no_system):
  fake_mnist(no_system / "d")
  write(no_system / "d" / "train-labels-idx1-ubyte.gz", idx_bytes((5,)), gz=True)
  with pytest.raises(IDXError, match="train: 6 images but 5 labels"): mnist(path=no_system / "d")

# ---------------------------------------------------------------------- Batches

def test_batches_cover_every_row_once():
  X = Tensor(bytes(range(20)), dtype=dtypes.uint8).reshape(10, 2)
  Y = Tensor(list(range(10)), dtype=dtypes.int32)
  b = Batches(X, Y, batch_size=3, seed=1)
  assert len(b) == 4
  seen = []
  for x, y in b:
    assert x.dtype == dtypes.uint8 and y.dtype == dtypes.int32 and x.shape[1:] == (2,)
    for row, label in zip(x.tolist(), y.tolist()): assert row == [2 * label, 2 * label + 1]   # rows stay with their labels
    seen += y.tolist()
  assert sorted(seen) == list(range(10)) and seen != list(range(10))
  assert [x.shape[0] for x, _ in b] == [3, 3, 3, 1]

def test_batches_drop_last_and_no_shuffle():
  Y = Tensor.arange(10)
  b = Batches(Y, batch_size=4, shuffle=False, drop_last=True)
  assert len(b) == 2 and [y.tolist() for (y,) in b] == [[0, 1, 2, 3], [4, 5, 6, 7]]

def test_batches_seeded_per_epoch():
  Y = Tensor.arange(50)
  a, b = Batches(Y, batch_size=50, seed=3), Batches(Y, batch_size=50, seed=3)
  e0, e1 = [t.tolist() for (t,) in a], [t.tolist() for (t,) in a]   # two epochs
  assert e0 == [t.tolist() for (t,) in b] and e0 != e1                # same seed, same first epoch; the next differs
  c = Batches(Y, batch_size=50, seed=3)
  c.set_epoch(1)
  assert [t.tolist() for (t,) in c] == e1                               # a resumed run sees the same order
  assert [t.tolist() for (t,) in Batches(Y, batch_size=50, seed=4)] != e0

def test_batches_errors():
  with pytest.raises(ValueError, match="same first dimension"): Batches(Tensor.arange(4), Tensor.arange(5), batch_size=2)
  with pytest.raises(ValueError, match="batch_size"): Batches(Tensor.arange(4), batch_size=0)

# ---------------------------------------------------------------------- CIFAR-10

import importlib.util, io as _io, json, pickle, tarfile, textwrap   # noqa: E402
import numpy as np   # noqa: E402
from petagrad.nn.datasets import cifar, cifar_files, CIFARError, CIFAR_BATCHES   # noqa: E402

def cifar_batch(i: int, n: int) -> tuple[np.ndarray, list[int]]:
  """Batch i of a fake release: n images whose pixels depend on (batch, image, channel, row, col); labels (i + k) % 10."""
  idx = np.indices((n, 3, 32, 32))
  data = ((idx[0] * 7 + idx[1] * 50 + idx[2] * 3 + idx[3] + i * 31) % 256).astype(np.uint8).reshape(n, 3072)
  return data, [(i + k) % 10 for k in range(n)]

def fake_cifar(folder, kind: str = "py", n: int = 3, protocol: int = 2, sub: str = "") -> None:
  """The six batch files of either release (kind "py": pickled dicts with b'data' and b'labels', like the python version;
  "bin": label byte + 3072 pixel bytes per record), or a release tarball (kind "py.tar.gz" / "bin.tar.gz")."""
  files = {}
  for i, name in enumerate(CIFAR_BATCHES):
    data, labels = cifar_batch(i, n)
    if kind.startswith("py"):
      files[name] = pickle.dumps({b"batch_label": b"batch %d" % i, b"labels": labels, b"data": data, b"filenames": [b"x.png"] * n}, protocol=protocol)
    else:
      files[name + ".bin"] = b"".join(bytes([lab]) + row.tobytes() for lab, row in zip(labels, data))
  os.makedirs(folder, exist_ok=True)
  if kind.endswith(".tar.gz"):
    sub = "cifar-10-batches-py" if kind.startswith("py") else "cifar-10-batches-bin"
    with tarfile.open(os.path.join(folder, f"cifar-10-{'python' if kind.startswith('py') else 'binary'}.tar.gz"), "w:gz") as tf:
      for name, raw in files.items():
        info = tarfile.TarInfo(f"{sub}/{name}")
        info.size = len(raw)
        tf.addfile(info, _io.BytesIO(raw))
    return
  os.makedirs(os.path.join(folder, sub), exist_ok=True)
  for name, raw in files.items():
    with open(os.path.join(folder, sub, name), "wb") as f: f.write(raw)

def expected_cifar(n: int = 3):
  xs, ys = zip(*[cifar_batch(i, n) for i in range(6)])
  return np.concatenate(xs[:5]).reshape(-1, 3, 32, 32), np.concatenate(ys[:5]), xs[5].reshape(-1, 3, 32, 32), np.array(ys[5])

@pytest.fixture
def no_cifar(monkeypatch, tmp_path):
  """No CIFAR_PATH, an empty cache dir, and no network."""
  def offline(*a, **k): raise OSError("network is unreachable (test)")
  monkeypatch.setattr(datasets.urllib.request, "urlopen", offline)
  with Context(CACHEDIR=str(tmp_path / "cache"), CIFAR_PATH=""): yield tmp_path

def check_cifar(out, n: int = 3) -> None:
  X, Y, Xt, Yt = out
  assert X.shape == (5 * n, 3, 32, 32) and Xt.shape == (n, 3, 32, 32) and Y.shape == (5 * n,) and Yt.shape == (n,)
  assert X.dtype == Y.dtype == Xt.dtype == Yt.dtype == dtypes.uint8
  for got, want in zip(out, expected_cifar(n)): np.testing.assert_array_equal(got.numpy(), want)

@pytest.mark.parametrize("kind,protocol,sub", [("py", 2, ""), ("py", 4, ""), ("py", 5, "cifar-10-batches-py"), ("bin", 0, ""),
                                               ("bin", 0, "cifar-10-batches-bin"), ("py.tar.gz", 2, ""), ("bin.tar.gz", 0, "")])
def test_cifar_from_path(no_cifar, kind, protocol, sub):
  fake_cifar(no_cifar / "d", kind, protocol=protocol, sub=sub)
  check_cifar(cifar(path=no_cifar / "d"))

def test_cifar_path_setting(no_cifar):
  fake_cifar(no_cifar / "env", "bin", n=2)
  with Context(CIFAR_PATH=str(no_cifar / "env")): check_cifar(cifar(), n=2)

def test_cifar_matches_tinygrad(tmp_path):
  """tinygrad 0.14's cifar() (its download replaced by the same fake binary tarball) returns what petagrad's does."""
  if importlib.util.find_spec("tinygrad") is None: pytest.skip("tinygrad is not installed (pip install tinygrad==0.14.0: the bench extra)")
  fake_cifar(tmp_path, "bin.tar.gz", n=2)
  tarball = str(tmp_path / "cifar-10-binary.tar.gz")
  prog = textwrap.dedent(f"""
    import gzip, json
    from tinygrad import Tensor
    from tinygrad.nn import datasets
    urls = []
    def from_url(url, gunzip=False, **kw):
      urls.append(url)
      return Tensor(gzip.decompress(open({tarball!r}, "rb").read()), **kw)
    Tensor.from_url = staticmethod(from_url)
    out = datasets.cifar()
    print(json.dumps({{"urls": urls, "shapes": [list(t.shape) for t in out], "dtypes": [str(t.dtype) for t in out],
                      "data": [t.numpy().flatten().tolist() for t in out]}}))
  """)
  env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "BEAM", "NOOPT")}
  env["DEV"] = "PYTHON"
  r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, cwd="/", timeout=600)
  if r.returncode != 0: pytest.fail(f"tinygrad reference failed:\n{r.stderr[-3000:]}")
  ref = json.loads(r.stdout.strip().splitlines()[-1])
  assert ref["urls"] == [datasets.CIFAR_URLS[0]]   # the URL petagrad downloads first is tinygrad's
  mine = cifar(path=tmp_path)
  assert [list(t.shape) for t in mine] == ref["shapes"] and all(d.endswith("uchar") or d.endswith("uint8") for d in ref["dtypes"])
  for t, want in zip(mine, ref["data"]): assert t.numpy().flatten().tolist() == want

def test_cifar_download_into_cache(no_cifar, monkeypatch):
  fake_cifar(no_cifar / "server", "bin.tar.gz")
  calls = []
  def urlopen(url, timeout=None):
    calls.append(url)
    if url == datasets.CIFAR_URLS[0]: raise OSError("first mirror down")
    return open(no_cifar / "server" / "cifar-10-binary.tar.gz", "rb")
  monkeypatch.setattr(datasets.urllib.request, "urlopen", urlopen)
  check_cifar(cifar())
  assert calls == list(datasets.CIFAR_URLS)
  assert os.listdir(no_cifar / "cache" / "datasets" / "cifar-10") == ["cifar-10-binary.tar.gz"]   # no temporary files left
  check_cifar(cifar())
  assert len(calls) == 2   # the second time it reads the cache

def test_cifar_download_rejects_non_tar(no_cifar, monkeypatch):
  monkeypatch.setattr(datasets.urllib.request, "urlopen", lambda url, timeout=None: _io.BytesIO(b"<html>captive portal</html>"))
  with pytest.raises(FileNotFoundError, match="not a tar archive"): cifar()
  assert not os.path.exists(no_cifar / "cache" / "datasets" / "cifar-10")

def test_cifar_missing_lists_every_place(no_cifar):
  with pytest.raises(FileNotFoundError) as e: cifar_files()
  msg = str(e.value)
  for where in ("CIFAR_PATH: (not set)", f"download cache: {no_cifar / 'cache' / 'datasets' / 'cifar-10'} (no such folder)",
                f"download: {datasets.CIFAR_URLS[0]}", "network is unreachable", "CIFAR_PATH=/that/folder"):
    assert where in msg, (where, msg)
  with pytest.raises(FileNotFoundError, match=r"download: not tried"): cifar_files(download=False)
  fake_cifar(no_cifar / "partial", "bin")
  os.remove(no_cifar / "partial" / "test_batch.bin")
  with pytest.raises(FileNotFoundError, match=re.escape(f"CIFAR-10 not found in {no_cifar / 'partial'}: it needs data_batch_1")):
    cifar(path=no_cifar / "partial")

def test_cifar_bad_files(no_cifar):
  fake_cifar(no_cifar / "d", "py")
  class Evil:
    def __reduce__(self): return (os.system, ("echo pwned",))
  with open(no_cifar / "d" / "data_batch_3", "wb") as f: pickle.dump({b"data": Evil(), b"labels": []}, f)
  with pytest.raises(CIFARError, match=r"data_batch_3: not a CIFAR-10 batch pickle .*refused to load the global"): cifar(path=no_cifar / "d")
  with open(no_cifar / "d" / "data_batch_3", "wb") as f: pickle.dump({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}, f)
  with pytest.raises(CIFARError, match="must be a C-ordered uint8 array"): cifar(path=no_cifar / "d")
  with open(no_cifar / "d" / "data_batch_3", "wb") as f: pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, f)
  with pytest.raises(CIFARError, match="'labels' must be 2 ints in 0..9"): cifar(path=no_cifar / "d")
  fake_cifar(no_cifar / "b", "bin")
  with open(no_cifar / "b" / "test_batch.bin", "ab") as f: f.write(b"\x00")
  with pytest.raises(CIFARError, match="not a whole number of 3073-byte records"): cifar(path=no_cifar / "b")
  with open(no_cifar / "b" / "cifar-10-binary.tar.gz", "wb") as f: f.write(b"junk")
  os.remove(no_cifar / "b" / "test_batch.bin")
  with pytest.raises(CIFARError, match="cannot read it as a tar archive"): cifar(path=no_cifar / "b")

def test_cifar_labels_as_numpy_ints(no_cifar):
  """Re-saved releases keep the labels as a numpy array (any int width): read as the same uint8 labels."""
  fake_cifar(no_cifar / "d", "py")
  for i, name in enumerate(CIFAR_BATCHES):
    data, labels = cifar_batch(i, 3)
    with open(no_cifar / "d" / name, "wb") as f: pickle.dump({"data": data, "labels": np.array(labels, np.int64)}, f, protocol=4)
  check_cifar(cifar(path=no_cifar / "d"))
