"""tinygrad-0.14 / PyTorch call forms at the top level, in petagrad.helpers and the flags: the names exist, and behave
like tinygrad's (compared with tinygrad.helpers itself where it is installed: those are pure Python) or like
PyTorch's (StateDictError, the default int dtype)."""
from __future__ import annotations
import doctest, gzip, hashlib, importlib, importlib.util, json, os, subprocess, sys, time
import pytest
from petagrad import Tensor, dtypes, Context
from petagrad import helpers
from petagrad.helpers import FLAGS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

def _same_as_tinygrad(exprs: list[str], prelude: str = "", env: dict[str, str] | None = None) -> None:
  """Evaluate each expression over petagrad.helpers' names here and over tinygrad.helpers' in a subprocess (importing
  tinygrad changes the interpreter: it raises the recursion limit), and compare the reprs. Skips where tinygrad
  is not installed (pip install tinygrad==0.14.0: the bench extra)."""
  if importlib.util.find_spec("tinygrad") is None: pytest.skip("tinygrad is not installed (pip install tinygrad==0.14.0: the bench extra)")
  prog = f"import json\nfrom tinygrad.helpers import *\n{prelude}\nprint(json.dumps([repr(eval(e)) for e in {exprs!r}]))"
  r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd="/", timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  theirs = json.loads(r.stdout.strip().splitlines()[-1])
  ns: dict = dict(vars(helpers))
  old = {k: os.environ.get(k) for k in env or {}}
  os.environ.update(env or {})
  try:
    exec(prelude, ns)
    ours = [repr(eval(e, ns)) for e in exprs]
  finally:
    for k, v in old.items():
      if v is None: os.environ.pop(k, None)
      else: os.environ[k] = v
  for e, a, b in zip(exprs, ours, theirs): assert a == b, f"{e}: petagrad {a}, tinygrad {b}"

# ---------------------------------------------------------------------- top-level names

def test_top_level_names():
  from petagrad import Tensor, TinyJit, Device, dtypes, Context, GlobalCounters, nn, getenv, fetch   # noqa: F401
  import petagrad
  from petagrad.engine.jit import TinyJit as J
  from petagrad.helpers import getenv as g, fetch as f
  assert petagrad.TinyJit is J and petagrad.getenv is g and petagrad.fetch is f
  assert petagrad.nn is importlib.import_module("petagrad.nn") and petagrad.nn.optim.AdamW and petagrad.nn.state.safe_load
  for name in petagrad.__all__: assert hasattr(petagrad, name), name

def test_variable_is_real():
  # tinygrad's Variable: a bound value the kernels read at run time (docs/variables.md), not a stand-in
  from petagrad import Variable, Tensor
  v = Variable("i", 0, 3)
  assert [Tensor.arange(5)[v.bind(k)].item() for k in (0, 3)] == [0, 3]

def test_import_nn_first_in_fresh_process():
  # petagrad.nn imports petagrad.tensor: importing it (or its submodules) first must not hit an import cycle
  for stmt in ("import petagrad.nn", "from petagrad.nn import optim", "import petagrad.nn.state", "from petagrad import nn, TinyJit",
               "import petagrad.helpers", "import petagrad.engine.jit"):
    r = subprocess.run([sys.executable, "-c", stmt + "; import petagrad; print(petagrad.nn.Linear)"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{stmt}: {r.stderr}"

def test_tinyjit_from_top_level_runs():
  from petagrad import TinyJit
  @TinyJit
  def f(x: Tensor) -> Tensor: return (x * 2 + 1).realize()
  for i in range(3): assert f(Tensor([float(i), 1.0])).tolist() == [2.0 * i + 1, 3.0]

# ---------------------------------------------------------------------- helpers

def test_helpers_doctests():
  res = doctest.testmod(helpers, optionflags=doctest.ELLIPSIS)
  assert res.failed == 0 and res.attempted >= 10

def test_getenv(monkeypatch):
  from petagrad.helpers import getenv
  monkeypatch.setenv("PG_T_INT", "7"); monkeypatch.setenv("PG_T_STR", "abc"); monkeypatch.setenv("PG_T_F", "0.5")
  monkeypatch.setenv("PG_T_B0", "0"); monkeypatch.setenv("PG_T_B1", "1"); monkeypatch.setenv("PG_T_EMPTY", "")
  monkeypatch.delenv("PG_T_MISSING", raising=False)
  assert getenv("PG_T_INT") == 7 and isinstance(getenv("PG_T_INT"), int)
  assert getenv("PG_T_INT", 3) == 7 and getenv("PG_T_MISSING", 3) == 3 and getenv("PG_T_MISSING") == 0
  assert getenv("PG_T_STR", "") == "abc" and getenv("PG_T_F", 1.0) == 0.5 and getenv("PG_T_INT", "") == "7"
  assert getenv("PG_T_B0", False) is False and getenv("PG_T_B1", False) is True and getenv("PG_T_EMPTY", 5) == 5
  monkeypatch.setenv("PG_T_INT", "8")
  assert getenv("PG_T_INT") == 8   # read on every call
  with pytest.raises(ValueError, match="PG_T_STR"): getenv("PG_T_STR", 1)

def test_getenv_matches_tinygrad():
  _same_as_tinygrad(['getenv("PG_TG_A", 0)', 'getenv("PG_TG_A", "")', 'getenv("PG_TG_S", "")', 'getenv("PG_TG_NONE", 4)', 'getenv("PG_TG_NONE", "d")',
                     'getenv("PG_TG_A", 1.5)', 'getenv("PG_TG_NONE")'], env={"PG_TG_A": "12", "PG_TG_S": "xyz"})

def test_colored(monkeypatch):
  from petagrad.helpers import colored
  assert colored("x", "red") == "\x1b[31mx\x1b[0m" and colored("x", "RED") == "\x1b[91mx\x1b[0m"
  assert colored("x", "blue", background=True) == "\x1b[44mx\x1b[0m" and colored("x", None) == "x"
  with Context(NO_COLOR=1): assert colored("x", "red") == "x"
  with pytest.raises(ValueError, match="purple"): colored("x", "purple")

def test_colored_matches_tinygrad():
  _same_as_tinygrad([f"colored('st', {c!r}, {bg})" for c in ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white", "GREEN", "WHITE", None)
                     for bg in (False, True)], env={"NO_COLOR": "0"})

def test_get_child():
  from petagrad import nn
  from petagrad.helpers import get_child
  net = nn.Sequential(nn.Linear(2, 3), Tensor.relu, nn.Linear(3, 1))
  assert get_child(net, "2.weight") is net[2].weight and get_child({"a": [1, {"b": 5}]}, "a.1.b") == 5
  for k in nn.state.get_state_dict(net): assert get_child(net, k) is nn.state.get_state_dict(net)[k]
  with pytest.raises(AttributeError): get_child(net, "0.nope")

def test_get_child_matches_tinygrad():
  _same_as_tinygrad(['get_child(obj, "layers.0.w")', 'get_child(obj, "layers.1.x.y")', 'get_child(obj, "layers.1.x")'],
                    prelude='obj = {"layers": [{"w": 1}, type("O", (), {"x": {"y": 2}})()]}')

def test_small_utils_match_tinygrad():
  from petagrad.helpers import flatten, prod, all_same, dedup, argfix, make_pair, make_tuple, OSX, CI, DEBUG   # noqa: F401
  assert flatten([[1], [2, 3]]) == [1, 2, 3] and prod([2, 5]) == 10 and all_same([1, 1]) and not all_same([1, 2]) and all_same([])
  assert dedup([2, 1, 2]) == [2, 1] and argfix((1, 2)) == (1, 2) == argfix(1, 2) and make_pair(3) == (3, 3) and make_tuple(2, 3) == (2, 2, 2)
  assert OSX == (sys.platform == "darwin") and isinstance(CI, bool)

def test_small_utils_same_as_tinygrad():
  _same_as_tinygrad(["flatten([[1, 2], [3]])", "flatten([[]])", "prod([])", "prod([3, 4])", "prod((2, 2, 2))", "all_same([])", "all_same([3, 4])",
                     "all_same((2, 2, 2))", "argfix(1, 2)", "argfix((1, 2))", "argfix([3])", "dedup([3, 1, 3])", "make_tuple(3, 2)",
                     "make_tuple([1, 2], 2)", "OSX", "WIN"])

def test_timing(capsys):
  from petagrad.helpers import Timing
  with Timing("step: "): time.sleep(0.01)
  out = capsys.readouterr().out
  assert out.startswith("step: ") and out.rstrip().endswith(" ms") and float(out.split()[1]) >= 9.0
  with Timing("x ", on_exit=lambda ns: f" ({ns // 1000} us)"): pass
  assert capsys.readouterr().out.rstrip().endswith(" us)")
  with Timing("quiet", enabled=False) as t: pass
  assert capsys.readouterr().out == "" and t.et >= 0
  @Timing("deco: ")
  def f(): return 3
  assert f() == 3 and capsys.readouterr().out.startswith("deco: ")

def test_tqdm_and_trange(capsys):
  from petagrad.helpers import tqdm, trange, _PlainProgress
  assert list(tqdm([1, 2, 3], desc="d", disable=True)) == [1, 2, 3] and list(trange(3, disable=True)) == [0, 1, 2]
  with tqdm(total=10, disable=True) as bar:
    for _ in range(4): bar.update(1)
    bar.set_description("x")
  # the fallback (what runs without the tqdm package): iterates, counts, prints one plain line when done
  bar = _PlainProgress(range(5), desc="steps", total=5)
  assert list(bar) == [0, 1, 2, 3, 4] and bar.n == 5
  err = capsys.readouterr().err
  assert "steps: 5/5 it" in err and "\r" not in err and "\x1b" not in err
  p = _PlainProgress(total=3, disable=True); p.update(2); p.close()
  assert p.n == 2 and capsys.readouterr().err == ""

def test_tqdm_uses_the_package_when_installed():
  from petagrad.helpers import tqdm, _PlainProgress
  try: import tqdm as real   # the examples extra
  except ImportError:
    assert isinstance(tqdm(range(2), disable=True), _PlainProgress)
    return
  assert isinstance(tqdm(range(2), disable=True), real.tqdm)

def test_fetch_file_url(tmp_path):
  from petagrad.helpers import fetch
  src = tmp_path / "src.bin"
  src.write_bytes(b"petagrad" * 100)
  with Context(CACHEDIR=str(tmp_path / "cache")):
    p = fetch(src.as_uri())
    assert p.read_bytes() == src.read_bytes() and p.parent == tmp_path / "cache" / "downloads"
    src.write_bytes(b"changed")
    assert fetch(src.as_uri()).read_bytes() == b"petagrad" * 100          # cached: not downloaded again
    assert fetch(src.as_uri(), allow_caching=False).read_bytes() == b"changed"
    named = fetch(src.as_uri(), name="data.txt", subdir="sets")
    assert named == tmp_path / "cache" / "downloads" / "sets" / "data.txt" and named.read_bytes() == b"changed"
    gz = tmp_path / "a.gz"
    gz.write_bytes(gzip.compress(b"unzipped"))
    assert fetch(gz.as_uri(), gunzip=True).read_bytes() == b"unzipped"
    good = hashlib.sha256(b"changed").hexdigest()
    assert fetch(src.as_uri(), name="h", sha256=good).read_bytes() == b"changed"
    with pytest.raises(ValueError, match="sha256"): fetch(src.as_uri(), name="bad", sha256="0" * 64)
    assert not (tmp_path / "cache" / "downloads" / "bad").exists()
    assert [f.name for f in (tmp_path / "cache" / "downloads").iterdir() if ".tmp" in f.name] == []
    own = tmp_path / "own" / "x.bin"
    assert fetch(src.as_uri(), name=own) == own and own.read_bytes() == b"changed"
  assert fetch(str(src)) == src   # a local path is returned as it is
  with pytest.raises(OSError): fetch((tmp_path / "missing").as_uri(), allow_caching=False)

# ---------------------------------------------------------------------- flags: TRAINING, DEFAULT_INT, DEFAULT_FLOAT with DTypes

def test_training_flag():
  assert "TRAINING" in FLAGS and FLAGS["TRAINING"].default == 0
  with Context(TRAINING=1): assert helpers.TRAINING.value == 1 and bool(helpers.TRAINING)
  with Context(TRAINING=True): assert int(helpers.TRAINING) == 1
  assert helpers.TRAINING.value == 0

@pytest.mark.parametrize("flag", ["DEFAULT_FLOAT", "DEFAULT_INT"])
def test_dtype_flags_take_dtypes_and_names(flag):
  default = {"DEFAULT_FLOAT": "float32", "DEFAULT_INT": "int64"}[flag]
  prop = {"DEFAULT_FLOAT": "default_float", "DEFAULT_INT": "default_int"}[flag]
  good = {"DEFAULT_FLOAT": [(dtypes.half, dtypes.float16), (dtypes.bfloat16, dtypes.bfloat16), ("float64", dtypes.float64), ("half", dtypes.float16),
                            (dtypes.float32, dtypes.float32)],
          "DEFAULT_INT": [(dtypes.int32, dtypes.int32), ("int32", dtypes.int32), ("int", dtypes.int32), ("long", dtypes.int64), (dtypes.int64, dtypes.int64)]}[flag]
  for v, want in good:
    with Context(**{flag: v}):
      assert getattr(dtypes, prop) is want and isinstance(FLAGS[flag].value, str)
    assert FLAGS[flag].value == default and getattr(dtypes, prop) is getattr(dtypes, default)
  bad_value = {"DEFAULT_FLOAT": [dtypes.int32, "int8"], "DEFAULT_INT": [dtypes.int8, dtypes.float32, "int16", dtypes.uint32]}[flag]
  for v in bad_value:
    with pytest.raises(ValueError, match=flag): Context(**{flag: v})
  for v in (3, 2.5, object()):
    with pytest.raises(TypeError, match=flag): Context(**{flag: v})

def test_dtype_flag_accepts_torch_dtype():
  torch = pytest.importorskip("torch")
  with Context(DEFAULT_FLOAT=torch.float16): assert dtypes.default_float is dtypes.float16
  with Context(DEFAULT_INT=torch.int32): assert dtypes.default_int is dtypes.int32

def test_default_float_half_context_builds_half_tensors():
  with Context(DEFAULT_FLOAT=dtypes.half):
    assert Tensor([1.5]).dtype == dtypes.float16 and Tensor.rand(2).dtype == dtypes.float16 and Tensor.zeros(2).dtype == dtypes.float16

def test_default_int_follows_flag_and_matches_torch():
  torch = pytest.importorskip("torch")
  # petagrad's default (like PyTorch): int64
  assert dtypes.default_int is dtypes.int64 and str(torch.tensor([1, 2]).dtype) == "torch.int64" and Tensor([1, 2]).dtype == dtypes.int64
  assert (Tensor([True, False]) + 1).dtype == dtypes.int64 == dtypes.from_py(3)
  # tinygrad's default, by the switch
  with Context(DEFAULT_INT="int32"):
    assert Tensor([1, 2]).dtype == dtypes.int32 and (Tensor([True]) + 1).dtype == dtypes.int32 and dtypes.from_py([1, 2]) == dtypes.int32
    assert Tensor([1, 2]).tolist() == [1, 2]
  assert Tensor([1, 2]).dtype == dtypes.int64

def test_default_setters():
  try:
    dtypes.default_int = dtypes.int32
    assert dtypes.default_int is dtypes.int32 and FLAGS["DEFAULT_INT"].value == "int32"
    dtypes.default_float = "half"
    assert dtypes.default_float is dtypes.float16
    with pytest.raises(ValueError, match="DEFAULT_INT"): dtypes.default_int = dtypes.float32
    with pytest.raises(ValueError, match="DEFAULT_FLOAT"): dtypes.default_float = dtypes.int32
  finally:
    dtypes.default_int, dtypes.default_float = dtypes.int64, dtypes.float32
  assert dtypes.default_int is dtypes.int64 and dtypes.default_float is dtypes.float32

@pytest.mark.parametrize("env, want", [("DEFAULT_INT=int32", "int32"), ("DEFAULT_INT=", "int64"), ("DEFAULT_FLOAT=half", "float16")])
def test_dtype_flags_from_environment(env, want):
  k, v = env.split("=")
  code = "from petagrad import dtypes; print((dtypes.default_int if 'INT' in %r else dtypes.default_float).name)" % k
  r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env={**os.environ, k: v}, timeout=120)
  assert r.returncode == 0 and r.stdout.strip() == want, r.stderr

def test_bad_default_int_in_environment():
  r = subprocess.run([sys.executable, "-c", "import petagrad"], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "DEFAULT_INT": "int8"}, timeout=120)
  assert r.returncode != 0 and "DEFAULT_INT" in r.stderr and "int8" in r.stderr

def test_env_vars_doc_lists_new_flags():
  text = open(os.path.join(ROOT, "docs", "env_vars.md"), encoding="utf-8").read()
  for name in ("TRAINING", "DEFAULT_INT", "NO_COLOR"): assert f"| `{name}` |" in text
  r = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "check_env_vars.py")], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr

# ---------------------------------------------------------------------- flags: JIT, and tinygrad's flags accepted with no effect

def test_jit_flag():
  assert FLAGS["JIT"].default == 1 and int(helpers.JIT) == 1
  with Context(JIT=0): assert not helpers.JIT
  assert int(helpers.JIT) == 1
  with pytest.raises(ValueError, match="JIT"): Context(JIT="x")

def test_jit_and_accepted_flags_match_tinygrad_defaults():
  # tinygrad 0.14 defines JIT, SPLIT_REDUCEOP, TRANSCENDENTAL, CAPTURING and WINO (not FUSE_ARANGE: older tinygrad had it)
  _same_as_tinygrad(["JIT.value", "SPLIT_REDUCEOP.value", "TRANSCENDENTAL.value", "CAPTURING.value", "WINO.value"])

def test_tinygrad_flags_accepted_and_ignored():
  from petagrad.helpers import TINYGRAD_NOOP_FLAGS, SPLIT_REDUCEOP, FUSE_ARANGE, TRANSCENDENTAL
  assert set(TINYGRAD_NOOP_FLAGS) == {"SPLIT_REDUCEOP", "FUSE_ARANGE", "TRANSCENDENTAL", "CHECK_OOB", "DEVECTORIZE"} and not set(TINYGRAD_NOOP_FLAGS) & set(FLAGS)
  before = {k: f.value for k, f in FLAGS.items()}
  with Context(SPLIT_REDUCEOP=0, FUSE_ARANGE=1, TRANSCENDENTAL=2):
    assert (SPLIT_REDUCEOP.value, FUSE_ARANGE.value, TRANSCENDENTAL.value) == (0, 1, 2)   # reading one gives the value set
    assert {k: f.value for k, f in FLAGS.items()} == before                               # and nothing else changes
    assert (Tensor([1.0, 2.0]).sum() + 1).item() == 4.0
  assert (SPLIT_REDUCEOP.value, FUSE_ARANGE.value, TRANSCENDENTAL.value) == (1, 0, 1)
  with pytest.raises(ValueError, match="SPLIT_REDUCEOP"): Context(SPLIT_REDUCEOP="no")
  with pytest.raises(KeyError, match="NOT_A_FLAG"): Context(NOT_A_FLAG=1)
  with pytest.raises(KeyError, match="FUSE_CONV_BW"): Context(SPLIT_REDUCEOP=0, FUSE_CONV_BW=1)   # other tinygrad names still raise
  text = open(os.path.join(ROOT, "docs", "env_vars.md"), encoding="utf-8").read()
  for name in TINYGRAD_NOOP_FLAGS: assert f"| `{name}` |" in text

def test_tinygrad_flag_from_environment():
  r = subprocess.run([sys.executable, "-c", "from petagrad.helpers import SPLIT_REDUCEOP, FLAGS; print(SPLIT_REDUCEOP.value, 'SPLIT_REDUCEOP' in FLAGS)"],
                     cwd=ROOT, capture_output=True, text=True, env={**os.environ, "SPLIT_REDUCEOP": "0"}, timeout=120)
  assert r.returncode == 0 and r.stdout.split() == ["0", "False"], r.stderr

# ---------------------------------------------------------------------- partition, and `from petagrad.tensor import cast`

def test_partition():
  from petagrad.helpers import partition
  assert partition([3, 1, 4, 1, 5, 9, 2, 6], lambda x: x > 3) == ([4, 5, 9, 6], [3, 1, 1, 2])
  assert partition([], bool) == ([], []) and partition(iter("aBcD"), str.isupper) == (["B", "D"], ["a", "c"])

def test_partition_same_as_tinygrad():
  _same_as_tinygrad(["partition([3, 1, 4, 1, 5, 9, 2, 6], lambda x: x > 3)", "partition([], bool)", "partition(range(5), lambda x: x % 2)"])

def test_tensor_module_exports_typing_cast():
  # tinygrad's extra/models/bert.py does `from tinygrad.tensor import cast` (typing.cast, imported by tinygrad's tensor.py)
  import typing
  from petagrad.tensor import cast
  assert cast is typing.cast and cast(int, "x") == "x"

# ---------------------------------------------------------------------- errors: StateDictError is a ValueError and a RuntimeError

@pytest.mark.parametrize("habit", [ValueError, RuntimeError])
def test_state_dict_error_caught_both_ways(habit):
  from petagrad import nn
  from petagrad.nn.state import StateDictError, load_state_dict
  lin = nn.Linear(2, 3)
  for bad in ({}, {"weight": Tensor.ones(3, 2), "bias": Tensor.ones(3), "extra": Tensor.ones(1)}, {"weight": Tensor.ones(2, 2), "bias": Tensor.ones(3)}):
    with pytest.raises(habit) as e: load_state_dict(lin, bad)
    assert isinstance(e.value, StateDictError)

def test_state_dict_error_like_torch_and_tinygrad():
  torch = pytest.importorskip("torch")
  from petagrad import nn
  # torch: RuntimeError for a strict mismatch
  with pytest.raises(RuntimeError): torch.nn.Linear(2, 3).load_state_dict({})
  with pytest.raises(RuntimeError): nn.state.load_state_dict(nn.Linear(2, 3), {})
  # tinygrad: ValueError for a shape mismatch
  with pytest.raises(ValueError, match="size mismatch for weight"): nn.state.load_state_dict(nn.Linear(2, 3), {"weight": Tensor.ones(2, 2), "bias": Tensor.ones(3)})

def test_load_state_dict_tinygrad_keywords():
  from petagrad import nn
  src, dst = nn.Linear(2, 3), nn.Linear(2, 3)
  sd = dict(nn.state.get_state_dict(src))
  nn.state.load_state_dict(dst, sd, strict=True, verbose=False, consume=True, realize=True)
  assert sd == {} and dst.weight.tolist() == src.weight.tolist()

# ---------------------------------------------------------------------- docs/coming_from_tinygrad.md

def test_coming_from_tinygrad_examples_run():
  import re
  text = open(os.path.join(ROOT, "docs", "coming_from_tinygrad.md"), encoding="utf-8").read()
  blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
  assert len(blocks) >= 3
  prev = Tensor.training
  try:
    for code in blocks: exec(compile(code, "docs/coming_from_tinygrad.md", "exec"), {})
  finally: Tensor.training = prev
  assert "[docs/coming_from_tinygrad.md](docs/coming_from_tinygrad.md)" in open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
