"""Loading an ONNX model and running its graph with Tensor ops.

`OnnxModel(model)` checks the model, turns its initializers into Tensors (lazy copies of their bytes in the model's
files when it is loaded from a path: onnx/files.py), looks every node up in the op table
(petagrad/onnx/ops.py) at the opset the model imports for the node's domain, and parses the node's attributes into
Python values, once. Calling it runs the nodes in order (ONNX graphs are topologically sorted; the checker says so)
and returns lazy Tensors: nothing is computed until they are realized, so a whole graph becomes as few kernels as
the scheduler can fuse. Values that decide shapes (Reshape's shape, Slice's starts, ...) are read when the op
needs them, which realizes the small tensors they come from.

Subgraph attributes (If's branches, Loop's and Scan's bodies) are parsed the same way at load time and run with the
same runner (`run_subgraph`), seeing the values of the graphs around them by name (ONNX's outer scope).

Errors name the node (its name and op type) and what was wrong; unknown ops, domains and opsets raise
NotImplementedError when the model is loaded, not when it runs.
"""
from __future__ import annotations
import contextvars, inspect, os
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, MutableMapping, Sequence
from petagrad.tensor import Tensor
from petagrad.device import Device
from petagrad.helpers import Context
from petagrad.onnx import types
from petagrad.onnx.files import ModelFiles
from petagrad.onnx.ops import OPS
from petagrad.onnx.common import NodeContext, StaticValues, _STATIC

DEFAULT_DOMAINS = ("", "ai.onnx")

class OnnxError(RuntimeError):
  """An error raised while running a node whose own exception type could not be kept."""

def _onnx():
  try:
    import onnx
  except ImportError:   # pragma: no cover - the extra is missing
    raise ImportError("petagrad.onnx needs the onnx package: pip install 'petagrad[onnx]' (onnx==1.23.2)") from None
  return onnx

def load_model(source: Any) -> Any:
  """A ModelProto from a ModelProto, a path, a file object or the serialized bytes; a malformed file raises ValueError.
  Tensors kept in external data files stay there (read lazily: onnx/files.py)."""
  onnx = _onnx()
  if isinstance(source, onnx.ModelProto): return source
  try:
    if isinstance(source, (bytes, bytearray, memoryview)): return onnx.load_model_from_string(bytes(source))
    if isinstance(source, (str, os.PathLike)):
      if not os.path.exists(source): raise FileNotFoundError(f"no ONNX model at {os.fspath(source)!r}")
      return onnx.load(os.fspath(source), load_external_data=False)
    if hasattr(source, "read"): return onnx.load(source, load_external_data=False)
  except (FileNotFoundError, IsADirectoryError): raise
  except Exception as e:   # protobuf's DecodeError and friends
    raise ValueError(f"not a valid ONNX model ({type(e).__name__}: {e})") from e
  raise TypeError(f"cannot load an ONNX model from {type(source).__name__}; give a path, bytes, a file or an onnx.ModelProto")

# ------------------------------------------------------------ attributes
def _attr_value(a: Any, device: str, files: ModelFiles | None = None) -> Any:
  """One AttributeProto -> a Python value: int, float, str, tuples of them, a Tensor, or a GraphProto (subgraphs)."""
  onnx = _onnx()
  A = onnx.AttributeProto
  if a.ref_attr_name: raise NotImplementedError(f"attribute {a.name!r} refers to a function attribute ({a.ref_attr_name!r})")
  if a.type == A.FLOAT: return float(a.f)
  if a.type == A.INT: return int(a.i)
  if a.type == A.STRING: return a.s.decode("utf-8", errors="replace")
  if a.type == A.FLOATS: return tuple(float(v) for v in a.floats)
  if a.type == A.INTS: return tuple(int(v) for v in a.ints)
  if a.type == A.STRINGS: return tuple(s.decode("utf-8", errors="replace") for s in a.strings)
  if a.type == A.TENSOR: return tensor_from_proto(a.t, device, files)
  if a.type == A.TENSORS: return tuple(tensor_from_proto(t, device, files) for t in a.tensors)
  if a.type == A.GRAPH: return a.g
  if a.type == A.GRAPHS: return tuple(a.graphs)
  if a.type == A.TYPE_PROTO: return a.tp
  raise NotImplementedError(f"attribute {a.name!r} has a type petagrad.onnx does not read ({A.AttributeType.Name(a.type)})")

def _unread_external(t: Any) -> ValueError | None:
  """The error for a TensorProto whose bytes are in an external data file that no folder says where to find (a
  ModelProto whose external data onnx.load did not read), else None."""
  if t.data_location != _onnx().TensorProto.EXTERNAL or t.raw_data: return None
  return ValueError(f"tensor {t.name!r} keeps its data in an external file, and the model was not loaded from its path "
                    "(give petagrad.onnx.load the path, or an onnx.load(path) that read the external data)")

def tensor_from_proto(t: Any, device: str, files: ModelFiles | None = None) -> Tensor:
  """A TensorProto (an initializer or a tensor attribute) -> Tensor, checked against the types petagrad supports; one
  whose bytes are in an external data file is read from there lazily (files: the model's, loaded from its path;
  onnx/files.py)."""
  from onnx import numpy_helper
  if not types.supported(t.data_type):
    raise NotImplementedError(f"tensor {t.name!r} has ONNX type {types.type_name(t.data_type)}, which petagrad.onnx does not support")
  if (err := _unread_external(t)) is not None:
    if files is None: raise err
    return files.external(t, device)
  return types.from_numpy(numpy_helper.to_array(t), t.data_type, device)

# ------------------------------------------------------------ value types
@dataclass(frozen=True)
class ValueInfo:
  """A graph input or output: its name, ONNX element type (None if not a tensor or not given) and shape (None:
  unknown rank; a dim is an int, a symbolic name, or None)."""
  name: str
  elem_type: int | None
  shape: tuple[int | str | None, ...] | None
  kind: str = "tensor"
  optional: bool = False   # an optional value (None when empty) of this type

def _value_info(vi: Any) -> ValueInfo: return _type_info(vi.name, vi.type)

def _type_info(name: str, tp: Any) -> ValueInfo:
  which = tp.WhichOneof("value")
  if which == "optional_type":
    inner = _type_info(name, tp.optional_type.elem_type)
    return ValueInfo(name, inner.elem_type, inner.shape, inner.kind, optional=True)
  if which != "tensor_type":
    return ValueInfo(name, None, None, which or "unknown")
  tt = tp.tensor_type
  et = tt.elem_type or None
  if not tt.HasField("shape"): return ValueInfo(name, et, None)
  dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim)
  return ValueInfo(name, et, dims)

# ------------------------------------------------------------ nodes
@dataclass
class Node:
  """One graph node, looked up and with its attributes parsed: run(values) computes its outputs."""
  name: str
  op_type: str
  domain: str
  opset: int
  fn: Callable
  inputs: tuple[str, ...]
  outputs: tuple[str, ...]
  attrs: dict[str, Any]
  ctx: NodeContext
  def where(self) -> str:
    what = self.op_type + (f", domain {self.domain}" if self.domain not in DEFAULT_DOMAINS else "") + f", opset {self.opset}"
    return f"ONNX node {self.name!r} ({what})" if self.name else f"ONNX node #{self.ctx.index} ({what})"

def _lookup(op_type: str, domain: str, opsets: dict[str, int], where: str) -> tuple[Callable, int]:
  dom = "" if domain == "ai.onnx" else domain
  if dom not in opsets: raise NotImplementedError(f"{where}: the model imports no opset for domain {domain!r}")
  version = opsets[dom]
  table = OPS.get(dom, {}).get(op_type)
  if table is None:
    known = "" if dom in OPS else f" (petagrad.onnx knows no ops of domain {dom!r})"
    raise NotImplementedError(f"{where}: op {op_type!r} of domain {domain or 'ai.onnx'!r} is not implemented{known}")
  usable = [v for v in table if v <= version]
  if not usable:
    raise NotImplementedError(f"{where}: op {op_type} has no implementation at opset {version} (petagrad.onnx has versions {sorted(table)})")
  return table[max(usable)], version

def _accepts(fn: Callable) -> tuple[set[str], bool]:
  """The keyword names fn takes (and whether it takes **kwargs)."""
  sig = inspect.signature(fn)
  names = {p.name for p in sig.parameters.values() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)}
  return names, any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())

@dataclass
class Graph:
  """A parsed graph: its inputs, outputs, initializers (Tensors) and nodes; `static` names the values computed only
  from initializers, constants and shapes (their values depend on the input shapes alone)."""
  inputs: list[ValueInfo]
  outputs: list[ValueInfo]
  initializers: dict[str, Tensor]
  nodes: list[Node]
  value_types: dict[str, int] = field(default_factory=dict)
  static: set[str] = field(default_factory=set)
  static_defaults: set[str] = field(default_factory=set)   # the static values of a call that overrides no initializer
  def run(self, inputs: Sequence[Any], what: str) -> list[Any]:
    """Run it as a subgraph (an op's graph attribute: If's branches, Loop's body, ...): see run_subgraph. The ops call
    this method, so the op table needs no import of this module."""
    return run_subgraph(self, inputs, what)

# ops whose outputs depend only on their inputs' shapes, and ops whose outputs are random (never static)
_SHAPE_ONLY = {"Shape", "Size"}
_RANDOM = {"RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Bernoulli", "Multinomial", "Dropout"}

def _static_values(g: Graph, defaults: bool = False, subgraph: bool = False) -> set[str]:
  """The values computed only from initializers, constants and shapes. An initializer that is also a graph input (a
  caller may override it; models of IR version < 4 list every initializer so) counts only with `defaults=True`: the
  set for a call that overrides none of them. In a subgraph only what comes from its own initializers and constants
  is static (its inputs' shapes may change from one iteration to the next)."""
  static = set(g.initializers) if defaults or subgraph else set(g.initializers) - {v.name for v in g.inputs}
  static.add("")
  for n in g.nodes:
    if n.op_type in _RANDOM or any(isinstance(v, Graph) for v in n.attrs.values()): continue   # a subgraph reads outer values too
    if (n.op_type in _SHAPE_ONLY and not subgraph) or all(x in static for x in n.inputs): static.update(n.outputs)
  return static

def parse_graph(g: Any, opsets: dict[str, int], device: str, value_types: dict[str, int], subgraph: bool = False,
                files: ModelFiles | None = None) -> Graph:
  """A GraphProto -> Graph: initializers become Tensors, nodes are looked up and their attributes parsed (subgraphs
  too). A subgraph's (`subgraph=True`) static values are those of its own initializers and constants. files: the model's
  external data, when it was loaded from a path."""
  inits: dict[str, Tensor] = {}
  for t in g.initializer:
    # (the main graph's initializers of a model loaded from its path: slices of the .onnx file, read lazily)
    lazy = files.in_file(t, device) if files is not None and not subgraph else None
    inits[t.name] = lazy if lazy is not None else tensor_from_proto(t, device, files)
    value_types[t.name] = t.data_type
  if len(g.sparse_initializer): raise NotImplementedError("sparse initializers are not supported by petagrad.onnx")
  inputs = [_value_info(v) for v in g.input]
  outputs = [_value_info(v) for v in g.output]
  for vi in list(g.input) + list(g.value_info) + list(g.output):
    if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type: value_types.setdefault(vi.name, vi.type.tensor_type.elem_type)
  nodes = []
  for i, n in enumerate(g.node):
    label = f"ONNX node {n.name!r} ({n.op_type})" if n.name else f"ONNX node #{i} ({n.op_type})"
    fn, version = _lookup(n.op_type, n.domain, opsets, label)
    names, var_kw = _accepts(fn)
    attrs: dict[str, Any] = {}
    for a in n.attribute:
      try: attrs[a.name] = _attr_value(a, device, files)
      except (NotImplementedError, ValueError) as e: raise type(e)(f"{label}: {e}") from None
      if a.name not in names and not var_kw:
        raise NotImplementedError(f"{label}: attribute {a.name!r} is not supported by petagrad.onnx's {n.op_type} "
                                  f"(it knows {sorted(names - {'ctx'})})")
    for k, v in attrs.items():   # subgraphs (If's branches, Loop's and Scan's bodies) are parsed once, now
      if isinstance(v, onnx_graph_type()): attrs[k] = _subgraph(v, opsets, device, value_types, f"{label}, attribute {k!r}", files)
      elif isinstance(v, tuple) and v and isinstance(v[0], onnx_graph_type()):
        attrs[k] = tuple(_subgraph(x, opsets, device, value_types, f"{label}, attribute {k!r}", files) for x in v)
    ctx = NodeContext(name=n.name, op_type=n.op_type, opset=version, index=i, n_outputs=len(n.output), device=device,
                      in_types=tuple(value_types.get(x) for x in n.input), out_types=tuple(value_types.get(x) for x in n.output))
    nodes.append(Node(n.name, n.op_type, n.domain, version, fn, tuple(n.input), tuple(n.output), attrs, ctx))
  g = Graph(inputs, outputs, inits, nodes, value_types)
  g.static = _static_values(g, subgraph=subgraph)
  g.static_defaults = g.static if subgraph else _static_values(g, defaults=True)
  return g

def onnx_graph_type() -> type: return _onnx().GraphProto

def _subgraph(g: Any, opsets: dict[str, int], device: str, value_types: dict[str, int], where: str, files: ModelFiles | None) -> Graph:
  try: return parse_graph(g, opsets, device, dict(value_types), subgraph=True, files=files)
  except (NotImplementedError, ValueError, TypeError) as e: raise type(e)(f"{where}: {e}") from None

def _wrap(e: Exception, where: str) -> Exception:
  """e with `where` (the node) in front of its message, of the same type when that type can be rebuilt."""
  msg = f"{where}: {e}"
  for cls in (type(e), *(c for c in (ValueError, TypeError, IndexError, NotImplementedError, RuntimeError) if isinstance(e, c))):
    try: return cls(msg)
    except Exception:   # an exception class with its own __init__ signature: the next best type
      continue
  return OnnxError(msg)

# ------------------------------------------------------------ the model
class OnnxModel:
  """A loaded ONNX model, ready to run with Tensor ops.

  >>> import onnx, numpy as np
  >>> from onnx import helper, TensorProto
  >>> g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
  ...                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
  ...                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
  >>> m = OnnxModel(helper.make_model(g))
  >>> m(x=np.array([-1.0, 0.0, 2.0], dtype=np.float32))["y"].tolist()
  [0.0, 0.0, 2.0]
  """
  def __init__(self, model: Any, device: str | None = None, check: bool = True):
    onnx = _onnx()
    self.proto = load_model(model)
    self.device = Device.canonicalize(device) if device is not None else Device.DEFAULT
    # a model loaded from a path reads its initializers from the file and its external data files, when a run needs them
    path = model if isinstance(model, (str, os.PathLike)) else getattr(model, "name", None) if hasattr(model, "read") else None
    files = ModelFiles(os.path.abspath(os.fspath(path))) if isinstance(path, (str, os.PathLike)) and os.path.isfile(path) else None
    for t in self.proto.graph.initializer if files is None else ():   # (before the checker, which looks in the working directory)
      if (err := _unread_external(t)) is not None: raise err
    if check:
      # from its path, the checker finds the external data files (their locations must stay inside the model's folder)
      try: onnx.checker.check_model(files.path if files is not None else self.proto)
      except onnx.checker.ValidationError as e: raise ValueError(f"the ONNX model does not pass onnx.checker: {e}") from e
    self.opsets: dict[str, int] = {}
    for o in self.proto.opset_import: self.opsets["" if o.domain == "ai.onnx" else o.domain] = int(o.version)
    if not self.proto.opset_import: self.opsets[""] = 1
    value_types: dict[str, int] = {}
    try:
      inferred = onnx.shape_inference.infer_shapes(self.proto)
      for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.elem_type: value_types[vi.name] = vi.type.tensor_type.elem_type
    except Exception:   # shape inference is a help (emulated types of intermediate values), never a requirement
      pass
    self.graph = parse_graph(self.proto.graph, self.opsets, self.device, value_types, files=files)
    self._from_files = files.made if files is not None else []   # realized by the first call
    init = set(self.graph.initializers)
    self.inputs: list[ValueInfo] = [v for v in self.graph.inputs if v.name not in init]   # what a caller must feed
    self.outputs: list[ValueInfo] = self.graph.outputs
    self._static_cache: dict[tuple, list] = {}

  @property
  def input_names(self) -> list[str]: return [v.name for v in self.inputs]
  @property
  def output_names(self) -> list[str]: return [v.name for v in self.outputs]

  def _feed(self, vi: ValueInfo, value: Any) -> Any:
    """Check and convert one graph input (numpy array, numpy scalar, Python number or Tensor) to a Tensor."""
    if value is None: return None
    if vi.kind == "sequence_type":   # a list of arrays (or Tensors)
      if not isinstance(value, (list, tuple)):
        raise TypeError(f"graph input {vi.name!r} is a sequence: give a list of arrays, got {type(value).__name__}")
      return [v if isinstance(v, Tensor) else types.from_numpy(v, None, self.device) for v in value]
    if vi.kind != "tensor":
      raise NotImplementedError(f"graph input {vi.name!r} has {vi.kind.replace('_type', '')} type, which petagrad.onnx does not support yet")
    if isinstance(value, Tensor):
      t = value
      if vi.elem_type is not None and types.supported(vi.elem_type) and t.dtype != types.to_dtype(vi.elem_type):
        raise TypeError(f"graph input {vi.name!r} must be {types.type_name(vi.elem_type)}, got a Tensor of {t.dtype}")
    else:
      import numpy as np
      arr = np.asarray(value)
      if arr.dtype == object or arr.dtype.kind in "SU":
        raise NotImplementedError(f"graph input {vi.name!r}: string tensors are not supported by petagrad.onnx")
      et = types.elem_type_of_array(arr)
      if vi.elem_type is not None and et != vi.elem_type:
        raise TypeError(f"graph input {vi.name!r} must be {types.type_name(vi.elem_type)}, got numpy {arr.dtype} ({types.type_name(et)})")
      t = types.from_numpy(arr, et, self.device)
    if vi.shape is not None:
      if len(vi.shape) != t.ndim:
        raise ValueError(f"graph input {vi.name!r} must have {len(vi.shape)} dims {_dims(vi.shape)}, got shape {tuple(t.shape)}")
      for i, (want, got) in enumerate(zip(vi.shape, t.shape)):
        if isinstance(want, int) and want > 0 and want != got:
          raise ValueError(f"graph input {vi.name!r} must have shape {_dims(vi.shape)}, got {tuple(t.shape)} (dim {i} is {got}, not {want})")
    return t

  def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """Run the graph. Inputs by position (in graph order), by name, or as one dict; returns {output name: Tensor}
    (lazy: realize or read them). Inputs with an initializer default to it."""
    feeds: dict[str, Any] = {}
    if len(args) == 1 and isinstance(args[0], dict) and not kwargs: feeds = dict(args[0])
    else:
      if len(args) > len(self.inputs): raise TypeError(f"the model takes {len(self.inputs)} inputs ({self.input_names}), got {len(args)}")
      feeds = dict(zip(self.input_names, args))
      for k, v in kwargs.items():
        if k in feeds: raise TypeError(f"input {k!r} given twice")
        feeds[k] = v
    known = {v.name for v in self.graph.inputs}
    if (extra := [k for k in feeds if k not in known]): raise ValueError(f"unknown graph inputs {extra}; the model takes {self.input_names}")
    values: dict[str, Any] = dict(self.graph.initializers)
    values[""] = None
    for vi in self.graph.inputs:
      if vi.name in feeds: values[vi.name] = self._feed(vi, feeds[vi.name])
      elif vi.name not in values: raise ValueError(f"graph input {vi.name!r} is missing; the model takes {self.input_names}")
    if self._from_files:   # the initializers in files, read once (under TinyJit: run now, not replayed)
      with Context(CAPTURING=0): Tensor.realize_all(*self._from_files)
      self._from_files = []
    sig = tuple((vi.name, tuple(v.shape)) for vi in self.graph.inputs if isinstance(v := values.get(vi.name), Tensor))
    reg = StaticValues(self._static_cache)
    token = _STATIC.set(reg)
    static = self.graph.static if any(k in self.graph.initializers for k in feeds) else self.graph.static_defaults
    try: run_nodes(self.graph.nodes, values, static, reg, sig)
    finally: _STATIC.reset(token)
    return {vi.name: values[vi.name] for vi in self.outputs}

  def run(self, inputs: Sequence[Any] | dict[str, Any]) -> list[Any]:
    """Run and return numpy arrays of the output types the graph declares (the onnx.backend convention)."""
    outs = self(dict(inputs) if isinstance(inputs, dict) else dict(zip(self.input_names, inputs)))
    res = []
    for vi in self.outputs:
      v = outs[vi.name]
      try: res.append(_to_numpy(v, vi.elem_type))
      except (TypeError, NotImplementedError) as e: raise type(e)(f"graph output {vi.name!r}: {e}") from None
    return res

def _to_numpy(v: Any, elem_type: int | None) -> Any:
  if v is None: return None
  if isinstance(v, (list, tuple)): return [_to_numpy(x, None) for x in v]
  return types.to_numpy(v, elem_type)

def _dims(shape: tuple) -> str: return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"

# the values of the graph being run: a subgraph run by one of its nodes sees them (ONNX's outer scope)
_SCOPE: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar("onnx_scope", default={})

def run_subgraph(g: Graph, inputs: Sequence[Any], what: str) -> list[Any]:
  """Run a subgraph (If's branch, Loop's or Scan's body) on its inputs (by position) with the values of the graphs
  around it visible by name; returns its outputs in order."""
  if len(inputs) != len(g.inputs): raise ValueError(f"{what} declares {len(g.inputs)} inputs, the op gives it {len(inputs)}")
  local: dict[str, Any] = {"": None, **g.initializers}
  for vi, v in zip(g.inputs, inputs): local[vi.name] = v
  values = ChainMap(local, _SCOPE.get())
  # its static values are the same on every run: remembered under this subgraph (sibling branches may reuse names)
  run_nodes(g.nodes, values, g.static, _STATIC.get(), ("subgraph", id(g)))
  missing = [vi.name for vi in g.outputs if vi.name not in values]
  if missing: raise RuntimeError(f"{what}: outputs {missing} are not computed by the subgraph")
  return [values[vi.name] for vi in g.outputs]

def run_nodes(nodes: list[Node], values: MutableMapping[str, Any], static: set[str] | None = None, reg: StaticValues | None = None,
              sig: tuple = ()) -> None:
  """Run nodes in order, reading and writing `values` (name -> Tensor, list of Tensors, or None). Static values (in
  `static`) are marked in `reg`, so that reading one remembers it for the next call with the same input shapes."""
  token = _SCOPE.set(values)
  try: _run_nodes(nodes, values, static, reg, sig)
  finally: _SCOPE.reset(token)

def _run_nodes(nodes: list[Node], values: MutableMapping[str, Any], static: set[str] | None, reg: StaticValues | None, sig: tuple) -> None:
  if reg is not None and static:
    for name in static:
      if isinstance(v := values.get(name), Tensor): reg.mark(v, (name, sig))
  for node in nodes:
    args = []
    for x in node.inputs:
      if x not in values: raise RuntimeError(f"{node.where()}: input {x!r} is not computed before this node (the graph is not in topological order)")
      args.append(values[x])
    while args and args[-1] is None: args.pop()
    try:
      out = node.fn(node.ctx, *args, **node.attrs)
    except Exception as e:   # every error names the node (keeping its type where it can)
      raise _wrap(e, node.where()) from e
    outs = out if isinstance(out, (tuple, list)) and not getattr(node.fn, "returns_sequence", False) else (out,)
    if len(outs) < len([o for o in node.outputs if o]):
      want = [o for o in node.outputs if o]
      if len(outs) < len(node.outputs) and all(not o for o in node.outputs[len(outs):]): pass
      else: raise NotImplementedError(f"{node.where()}: petagrad.onnx computes {len(outs)} outputs, the node asks for {len(want)}")
    for name, v in zip(node.outputs, outs):
      if name:
        values[name] = v
        if reg is not None and static and name in static and isinstance(v, Tensor): reg.mark(v, (name, sig))
