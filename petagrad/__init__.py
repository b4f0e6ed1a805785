"""petagrad: PyTorch-style tensors, lazily fused into kernels generated and compiled at run time."""
from petagrad.tensor import Tensor
from petagrad.dtype import dtypes, DType
from petagrad.device import Device
from petagrad.helpers import Context, GlobalCounters, DEBUG
__all__ = ["Tensor", "dtypes", "DType", "Device", "Context", "GlobalCounters", "DEBUG"]
