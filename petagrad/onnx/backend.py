"""The onnx.backend API: `petagrad.onnx.Backend`, usable as `onnx.backend.test.BackendTest(Backend, __name__)`.

Device names are ONNX's ("CPU", "CUDA", "CUDA:1") or petagrad's ("CPU", "PYTHON", "CL", ...); both map to the
petagrad device of that name. Outputs are numpy arrays of exactly the element types the graph declares.
"""
from __future__ import annotations
from typing import Any, Sequence
import onnx
from onnx.backend.base import Backend as _OnnxBackend, BackendRep as _OnnxBackendRep, namedtupledict
from petagrad.device import Device
from petagrad.onnx.model import OnnxModel

def petagrad_device(device: str) -> str:
  """An ONNX backend device string -> a petagrad device name."""
  if not isinstance(device, str): raise TypeError(f"device must be a string like 'CPU', got {device!r}")
  return Device.canonicalize(device)

class BackendRep(_OnnxBackendRep):
  """A prepared model: run(inputs) -> a namedtuple of numpy arrays, one per graph output."""
  def __init__(self, model: OnnxModel):
    self.model = model
  def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
    if kwargs: raise TypeError(f"BackendRep.run takes no options, got {sorted(kwargs)}")
    if isinstance(inputs, dict): feeds = inputs
    else:
      seq = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
      names = self.model.input_names
      if len(seq) > len(names): raise ValueError(f"the model takes {len(names)} inputs ({names}), got {len(seq)}")
      feeds = dict(zip(names, seq))
    outs = self.model.run(feeds)
    return namedtupledict("Outputs", self.model.output_names)(*outs)

class Backend(_OnnxBackend):
  """petagrad as an ONNX backend (onnx.backend.base.Backend)."""
  @classmethod
  def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool: return cls.supports_device(device)

  @classmethod
  def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> BackendRep:
    """Load (a ModelProto, a path or bytes), check and look up every node now; run many times later."""
    check = kwargs.pop("check", True)
    if kwargs: raise TypeError(f"Backend.prepare takes no options but check=, got {sorted(kwargs)}")
    return BackendRep(OnnxModel(model, device=petagrad_device(device), check=check))

  @classmethod
  def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
    return cls.prepare(model, device, **kwargs).run(inputs)

  @classmethod
  def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None,
               **kwargs: Any) -> tuple[Any, ...]:
    """Run one node on numpy inputs (by position or by name), wrapping it in a one-node model."""
    import numpy as np
    from onnx import helper
    from petagrad.onnx import types
    opset = kwargs.pop("opset_version", None)
    if kwargs: raise TypeError(f"Backend.run_node takes no options but opset_version=, got {sorted(kwargs)}")
    names = [n for n in node.input if n]
    if isinstance(inputs, dict): feeds = {k: np.asarray(v) for k, v in inputs.items()}
    else: feeds = {n: np.asarray(v) for n, v in zip(names, inputs)}
    vin = [helper.make_tensor_value_info(n, types.elem_type_of_array(a), a.shape) for n, a in feeds.items()]
    vout = []
    for i, o in enumerate(node.output):
      if outputs_info is not None and i < len(outputs_info):
        dt, shape = outputs_info[i]
        vout.append(helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape))
      else: vout.append(helper.make_empty_tensor_value_info(o))
    graph = helper.make_graph([node], "run_node", vin, [v for v in vout if v.name])
    imports = [helper.make_opsetid(node.domain or "", opset if opset is not None else onnx.defs.onnx_opset_version())]
    model = helper.make_model(graph, opset_imports=imports)
    return cls.prepare(model, device, check=False).run(feeds)

  @classmethod
  def supports_device(cls, device: str) -> bool:
    """Whether petagrad can run on this device here (its runtime loads)."""
    try:
      Device[petagrad_device(device)]
      return True
    except Exception:
      return False

prepare, run_model, run_node, supports_device = Backend.prepare, Backend.run_model, Backend.run_node, Backend.supports_device
