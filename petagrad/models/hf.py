"""Reading Hugging Face-layout model folders: `config.json`, the safetensors checkpoint (one `model.safetensors`, or
shards listed by `model.safetensors.index.json`) and the check that its tensors fit the model a config describes.

Nothing is read but the headers: `Checkpoint` maps each tensor name to a lazy DISK view of its file (docs/disk.md),
and `load_weights` makes each model weight a lazy copy of it onto the model's device, so the bytes are read when the
model first uses them.

>>> import json, os, tempfile
>>> from petagrad import Tensor
>>> from petagrad.nn.state import safe_save
>>> folder = tempfile.mkdtemp()
>>> safe_save({"w": Tensor([1.0, 2.0])}, os.path.join(folder, "model.safetensors"))
>>> ck = Checkpoint(folder)
>>> list(ck), ck.shape("w"), ck["w"].device.startswith("DISK")
(['w'], (2,), True)
"""
from __future__ import annotations
import json, math, os
from typing import Any, Callable, Iterator, Mapping
from petagrad.tensor import Tensor
from petagrad.dtype import DType
from petagrad.mixin.args import _dtype_arg
from petagrad.nn.state import SafeTensorsFile, get_state_dict

def read_config(folder: str | os.PathLike) -> dict[str, Any]:
  """The JSON object in folder/config.json. Raises FileNotFoundError or ValueError saying what is wrong."""
  folder = os.fspath(folder)
  if not os.path.isdir(folder): raise FileNotFoundError(f"{folder}: not a folder (from_pretrained reads a Hugging Face model folder)")
  path = os.path.join(folder, "config.json")
  if not os.path.isfile(path): raise FileNotFoundError(f"{path}: no config.json in the model folder")
  with open(path, encoding="utf-8") as f:
    try: cfg = json.load(f)
    except json.JSONDecodeError as e: raise ValueError(f"{path}: not valid JSON ({e})") from None
  if not isinstance(cfg, dict): raise ValueError(f"{path}: expected a JSON object, got a {type(cfg).__name__}")
  return cfg

def config_value(cfg: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ..., where: str = "config.json") -> Any:
  """cfg[key] checked to be of `kind` (an int is accepted for a float); default when absent or null (ValueError when
  there is no default)."""
  v = cfg.get(key)
  if v is None:
    if default is ...: raise ValueError(f"{where}: {key!r} is missing")
    return default
  kinds = kind if isinstance(kind, tuple) else (kind,)
  if float in kinds and isinstance(v, int) and not isinstance(v, bool): v = float(v)
  if isinstance(v, bool) and bool not in kinds or not isinstance(v, kinds):
    raise ValueError(f"{where}: {key!r} must be {' or '.join(k.__name__ for k in kinds)}, got {v!r}")
  if isinstance(v, float) and not math.isfinite(v): raise ValueError(f"{where}: {key!r} must be finite, got {v!r}")
  return v

def positive(name: str, v: int) -> int:
  if v <= 0: raise ValueError(f"config.json: {name!r} must be positive, got {v}")
  return v

class Checkpoint(Mapping):
  """The tensors of a Hugging Face model folder's safetensors checkpoint, by name: `model.safetensors`, or the shards
  that `model.safetensors.index.json` lists. Values are lazy DISK views (read when used)."""
  def __init__(self, folder: str | os.PathLike):
    self.folder = os.fspath(folder)
    index, single = os.path.join(self.folder, "model.safetensors.index.json"), os.path.join(self.folder, "model.safetensors")
    self._where: dict[str, SafeTensorsFile] = {}
    if os.path.isfile(index):
      with open(index, encoding="utf-8") as f:
        try: weight_map = json.load(f).get("weight_map")
        except (json.JSONDecodeError, AttributeError) as e: raise ValueError(f"{index}: not a safetensors index ({e})") from None
      if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise ValueError(f"{index}: 'weight_map' must map tensor names to shard file names")
      shards: dict[str, SafeTensorsFile] = {}
      for name, shard in weight_map.items():
        if os.path.basename(shard) != shard: raise ValueError(f"{index}: shard {shard!r} of {name!r} is not a file name in the folder")
        if shard not in shards:
          p = os.path.join(self.folder, shard)
          if not os.path.isfile(p): raise FileNotFoundError(f"{p}: shard listed in {index} is missing")
          shards[shard] = SafeTensorsFile(p)
        if name not in shards[shard]: raise ValueError(f"{index}: tensor {name!r} is not in its shard {shard}")
        self._where[name] = shards[shard]
    elif os.path.isfile(single):
      sf = SafeTensorsFile(single)
      self._where = {name: sf for name in sf}
    else:
      have = sorted(os.listdir(self.folder))
      raise FileNotFoundError(f"{self.folder}: no model.safetensors or model.safetensors.index.json (the folder has: "
                              f"{', '.join(have) or 'nothing'}); petagrad reads safetensors (save_pretrained(..., safe_serialization=True))")
  def __getitem__(self, name: str) -> Tensor: return self._where[name][name]
  def __iter__(self) -> Iterator[str]: return iter(self._where)
  def __len__(self) -> int: return len(self._where)
  def shape(self, name: str) -> tuple[int, ...]: return self._where[name].shape(name)
  def dtype(self, name: str) -> DType: return self._where[name].dtype(name)
  def file(self, name: str) -> str: return self._where[name].path
  def __repr__(self) -> str: return f"<Checkpoint {self.folder!r}: {len(self)} tensors>"

def load_weights(model: Any, ckpt: Checkpoint, what: str, rename: Callable[[str], str] = lambda n: n,
                 ignore: Callable[[str], bool] = lambda n: False) -> None:
  """Make every weight of model (get_state_dict's names) a lazy copy of the checkpoint tensor of that name onto the
  weight's device, cast to its dtype. rename maps a checkpoint name to the model's; names for which ignore is true are
  skipped (buffers such as GPT-2's attn.bias). Everything is checked before anything is loaded: a tensor the model
  has no weight for, a shape that differs from the weight's, or a weight no tensor fills raise ValueError naming
  the tensor. A weight held under two names (tied) needs one of them."""
  weights = get_state_dict(model)
  plan: dict[int, tuple[Tensor, str]] = {}
  for cname in ckpt:
    name = rename(cname)
    if ignore(name): continue
    if name not in weights:
      raise ValueError(f"{ckpt.file(cname)}: tensor {cname!r} is not a weight of {what} with this config.json "
                       f"(a checkpoint of another architecture, or a config that does not match it?)")
    t = weights[name]
    if (got := ckpt.shape(cname)) != t.shape:
      raise ValueError(f"{ckpt.file(cname)}: tensor {cname!r} has shape {got}, but {what} with this config.json expects {t.shape} for it")
    plan[id(t)] = (t, cname)
  missing = [n for n, t in weights.items() if id(t) not in plan]
  if missing:
    more = f" (and {len(missing) - 1} more: {', '.join(missing[1:6])}{', ...' if len(missing) > 6 else ''})" if len(missing) > 1 else ""
    raise ValueError(f"{ckpt.folder}: the checkpoint has no tensor for weight {missing[0]!r} of {what}{more}")
  for t, cname in plan.values():
    v = ckpt[cname].to(t.device)   # lazy: the bytes are read when the model first uses the weight
    t.replace(v if v.dtype == t.dtype else v.cast(t.dtype))

def materialize(model: Any) -> None:
  """Compute every weight of model that is not in memory yet (lazy checkpoint copies, random init), one at a time (at
  most one weight's intermediate copy in memory). Why: a weight first computed inside a forward pass stays wrapped
  with the graph it came from, which every later realize walks; realized on its own it is a plain buffer."""
  for t in {id(t): t for t in get_state_dict(model).values()}.values(): t.realize()

def float_dtype(ckpt: Checkpoint, name: str) -> DType:
  """The dtype a model loaded without dtype= computes in: that of the checkpoint tensor `name` (the embedding)."""
  if name not in ckpt: raise ValueError(f"{ckpt.folder}: the checkpoint has no tensor {name!r}")
  dt = ckpt.dtype(name)
  if not dt.is_float: raise ValueError(f"{ckpt.file(name)}: tensor {name!r} is {dt}, not a float dtype; pass dtype=")
  return dt

def float_dtype_arg(dt: DType | str) -> DType:
  """A model's dtype= argument: a float DType or its name."""
  d = _dtype_arg(dt)
  if not d.is_float: raise TypeError(f"dtype must be a float dtype, got {d}")
  return d

def activation(name: str, where: str) -> Callable[[Tensor], Tensor]:
  """The function of a Hugging Face activation name (config.json's hidden_act / activation_function)."""
  acts: dict[str, Callable[[Tensor], Tensor]] = {
    "silu": Tensor.silu, "swish": Tensor.silu, "relu": Tensor.relu, "gelu": Tensor.gelu,
    "gelu_new": lambda x: x.gelu(approximate="tanh"), "gelu_pytorch_tanh": lambda x: x.gelu(approximate="tanh"),
    "gelu_fast": lambda x: x.gelu(approximate="tanh"), "quick_gelu": Tensor.quick_gelu, "tanh": Tensor.tanh,
  }
  if name not in acts: raise ValueError(f"config.json: {where} {name!r} is not supported (supported: {', '.join(acts)})")
  return acts[name]
