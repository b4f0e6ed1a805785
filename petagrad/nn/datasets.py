"""Datasets: MNIST and Fashion-MNIST from IDX files, and a seeded batching iterator.

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
Parsing uses only the standard library (gzip, struct, array): no numpy.

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
import array, gzip, os, random, struct, sys, tempfile, urllib.request
from typing import Iterator, Sequence
from petagrad.tensor import Tensor
from petagrad.dtype import DType, dtypes
from petagrad.helpers import prod, cache_dir, MNIST_PATH

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
        with urllib.request.urlopen(base + name + ".gz", timeout=timeout) as r: data = r.read()
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=folder)
        try:
          with os.fdopen(fd, "wb") as f: f.write(data)
          read_idx(tmp)   # a proxy's error page is not an IDX file: check before keeping it
          os.replace(tmp, dest)
        except BaseException:
          if os.path.exists(tmp): os.unlink(tmp)
          raise
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
