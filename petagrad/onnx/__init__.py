"""petagrad.onnx: run ONNX models with petagrad Tensor ops (needs the onnx extra: pip install 'petagrad[onnx]').

Every ONNX op is composed from Tensor ops (petagrad/onnx/ops.py is the table), so a model runs on every petagrad
device and inside TinyJit. `load` reads and checks a model; calling it returns lazy Tensors; `Backend` is the
onnx.backend API (docs/onnx.md).

>>> import numpy as np
>>> from onnx import helper, TensorProto
>>> import petagrad.onnx
>>> node = helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)
>>> graph = helper.make_graph([node], "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
...                           [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
...                           initializer=[helper.make_tensor("w", TensorProto.FLOAT, [3, 2], [1, 0, 0, 1, 1, 1])])
>>> model = petagrad.onnx.load(helper.make_model(graph))
>>> model(x=np.array([[2.0, 3.0]], dtype=np.float32))["y"].tolist()
[[2.0, 3.0, 5.0]]
>>> petagrad.onnx.Backend.run_model(helper.make_model(graph), [np.array([[1.0, 1.0]], dtype=np.float32)])[0].tolist()
[[1.0, 1.0, 2.0]]
"""
from __future__ import annotations
from typing import Any
from petagrad.onnx.model import OnnxModel, OnnxError, load_model
from petagrad.onnx.ops import OPS

def load(model: Any, device: str | None = None, check: bool = True) -> OnnxModel:
  """An OnnxModel from a path, bytes, a file object or an onnx.ModelProto, checked (onnx.checker) and ready to run."""
  return OnnxModel(model, device=device, check=check)

def __getattr__(name: str) -> Any:
  # the onnx.backend classes import onnx.backend, which is slow: only when asked for
  if name in ("Backend", "BackendRep"):
    from petagrad.onnx import backend
    return getattr(backend, name)
  raise AttributeError(f"module 'petagrad.onnx' has no attribute {name!r}")

__all__ = ["load", "OnnxModel", "OnnxError", "load_model", "OPS", "Backend", "BackendRep"]
