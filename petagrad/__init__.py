"""petagrad: PyTorch-style tensors, lazily fused into kernels generated and compiled at run time.

The top-level names are tinygrad's (`from tinygrad import Tensor, TinyJit, ...` ports with an import change):

>>> from petagrad import Tensor, TinyJit, Device, dtypes, Context, GlobalCounters, nn, getenv, fetch
>>> nn.Linear(2, 3)(Tensor.ones(1, 2)).shape
(1, 3)

`Variable` (tinygrad's) is a symbolic integer bound per call: view offsets, values and sizes (symbolic shapes, `x[:v]`)
that kernels read at run time, so one compile serves every value (docs/variables.md).
"""
from petagrad.tensor import Tensor, Variable
from petagrad.dtype import dtypes, DType
from petagrad.device import Device
from petagrad.helpers import Context, GlobalCounters, DEBUG, getenv, fetch
from petagrad.engine.jit import TinyJit
from petagrad import nn   # after Tensor: petagrad.nn imports petagrad.tensor
no_grad = Tensor.no_grad   # `with petagrad.no_grad(): ...` (torch.no_grad())
inference_mode = Tensor.inference_mode   # torch.inference_mode()
__all__ = ["Tensor", "Variable", "TinyJit", "dtypes", "DType", "Device", "Context", "GlobalCounters", "DEBUG", "getenv", "fetch", "nn", "no_grad",
           "inference_mode"]
