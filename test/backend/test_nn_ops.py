"""NN functionals vs PyTorch (forward and gradients) on every device: conv, pooling, interpolation, padding modes,
activations, losses, normalization, dropout, attention, random sampling and initializers."""
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from petagrad import Tensor
from petagrad.dtype import dtypes
from helpers import helper_test_op

# ------------------------------------------------------------------ convolution

CONV2D = {
  # name: (x shape, w shape, kwargs (torch names))
  "basic": ((1, 2, 5, 5), (3, 2, 3, 3), {}),
  "bias": ((2, 2, 4, 4), (3, 2, 3, 3), {"bias": True}),
  "stride2": ((1, 2, 5, 5), (3, 2, 3, 3), {"stride": 2}),
  "stride_tuple": ((1, 1, 5, 6), (2, 1, 2, 3), {"stride": (2, 1)}),
  "stride_gt_kernel": ((1, 1, 7, 7), (1, 1, 2, 2), {"stride": 3}),
  "pad1": ((1, 2, 4, 4), (2, 2, 3, 3), {"padding": 1}),
  "pad_tuple": ((1, 1, 4, 4), (2, 1, 3, 3), {"padding": (2, 0)}),
  "pad_same": ((1, 2, 4, 5), (2, 2, 3, 2), {"padding": "same"}),
  "pad_same_dilated": ((1, 1, 6, 6), (1, 1, 2, 3), {"padding": "same", "dilation": 2}),
  "pad_valid": ((1, 2, 4, 4), (2, 2, 3, 3), {"padding": "valid"}),
  "dilation2": ((1, 2, 6, 6), (2, 2, 2, 2), {"dilation": 2}),
  "dilation_stride": ((1, 1, 7, 7), (1, 1, 3, 3), {"dilation": (2, 1), "stride": (1, 2), "padding": 1}),
  "groups2": ((1, 4, 4, 4), (4, 2, 2, 2), {"groups": 2}),
  "depthwise": ((1, 3, 4, 4), (3, 1, 3, 3), {"groups": 3, "padding": 1}),
  "kernel1": ((2, 3, 3, 3), (2, 3, 1, 1), {}),
  "size1_spatial": ((1, 2, 1, 4), (2, 2, 1, 2), {}),
  "batch_channel1": ((1, 1, 3, 3), (1, 1, 3, 3), {}),
}

@pytest.mark.parametrize("name", list(CONV2D))
def test_conv2d(device, name):
  xs, ws, kw = CONV2D[name]
  kw = dict(kw)
  if kw.pop("bias", False):
    helper_test_op([xs, ws, (ws[0],)], lambda x, w, b: F.conv2d(x, w, b, **kw), lambda x, w, b: x.conv2d(w, b, **kw), atol=1e-5, grad_atol=1e-5)
  else:
    helper_test_op([xs, ws], lambda x, w: F.conv2d(x, w, **kw), lambda x, w: x.conv2d(w, **kw), atol=1e-5, grad_atol=1e-5)

def test_conv2d_per_side_padding(device):
  # ((top, bottom), (left, right)) and torch F.pad flat order (left, right, top, bottom)
  helper_test_op([(1, 1, 4, 4), (2, 1, 3, 3)], lambda x, w: F.conv2d(F.pad(x, (2, 0, 1, 2)), w),
                 lambda x, w: x.conv2d(w, padding=((1, 2), (2, 0))), atol=1e-5)
  helper_test_op([(1, 1, 4, 4), (2, 1, 3, 3)], lambda x, w: F.conv2d(F.pad(x, (2, 0, 1, 2)), w),
                 lambda x, w: x.conv2d(w, padding=(2, 0, 1, 2)), atol=1e-5, forward_only=True)

def test_conv2d_permuted_input(device):
  helper_test_op([(1, 5, 5, 2), (3, 2, 3, 3)], lambda x, w: F.conv2d(x.permute(0, 3, 1, 2), w, padding=1),
                 lambda x, w: x.permute(0, 3, 1, 2).conv2d(w, padding=1), atol=1e-5)

def test_conv2d_unbatched(device):
  helper_test_op([(2, 4, 4), (3, 2, 2, 2)], lambda x, w: F.conv2d(x, w), lambda x, w: x.conv2d(w), atol=1e-5, forward_only=True)

@pytest.mark.parametrize("case", ["1x1 twice", "3x3 pad twice", "conv1d twice", "transpose then conv", "conv of itself", "conv + w.sum"])
def test_conv_weight_used_twice(device, case):
  # the weight's gradient through one conv holds its input constant: x.conv2d(w).conv2d(w) counts the path through the
  # first conv's output once (it came twice: 7 and 13 where torch has 4.5 and 8)
  shapes, tf, pf = {
    "1x1 twice": ([(1, 4, 5, 5), (4, 4, 1, 1)], lambda x, w: F.conv2d(F.conv2d(x, w), w), lambda x, w: x.conv2d(w).conv2d(w)),
    "3x3 pad twice": ([(2, 3, 5, 5), (3, 3, 3, 3)], lambda x, w: F.conv2d(F.conv2d(x, w, padding=1), w, padding=1),
                      lambda x, w: x.conv2d(w, padding=1).conv2d(w, padding=1)),
    "conv1d twice": ([(1, 2, 7), (2, 2, 3)], lambda x, w: F.conv1d(F.conv1d(x, w, padding=1), w, stride=2),
                     lambda x, w: x.conv1d(w, padding=1).conv1d(w, stride=2)),
    "transpose then conv": ([(1, 3, 4, 4), (3, 3, 2, 2)], lambda x, w: F.conv2d(F.conv_transpose2d(x, w, stride=2), w),
                            lambda x, w: x.conv_transpose2d(w, stride=2).conv2d(w)),
    "conv of itself": ([(1, 1, 1, 1)], lambda x: F.conv2d(x, x), lambda x: x.conv2d(x)),
    "conv + w.sum": ([(1, 4, 5, 5), (4, 4, 1, 1)], lambda x, w: F.conv2d(x, w).sum() + w.sum(), lambda x, w: x.conv2d(w).sum() + w.sum())}[case]
  helper_test_op(shapes, tf, pf, atol=1e-4, grad_atol=1e-3, grad_rtol=1e-3)

def test_conv1d(device):
  helper_test_op([(2, 2, 7), (3, 2, 3), (3,)], lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=1),
                 lambda x, w, b: x.conv1d(w, b, stride=2, padding=1), atol=1e-5)
  helper_test_op([(1, 4, 6), (4, 2, 2)], lambda x, w: F.conv1d(x, w, groups=2, dilation=2), lambda x, w: x.conv1d(w, groups=2, dilation=2), atol=1e-5)

def test_conv3d(device):
  helper_test_op([(1, 2, 3, 4, 4), (2, 2, 2, 2, 2), (2,)], lambda x, w, b: F.conv3d(x, w, b, padding=(0, 1, 0)),
                 lambda x, w, b: x.conv3d(w, b, padding=(0, 1, 0)), atol=1e-5)

def test_kernel_counts(device):
  # the windowed multiply-sum is one fused reduce kernel (the bias and an activation fuse into it); pooling likewise
  from petagrad.helpers import GlobalCounters
  x, w, b = Tensor.rand(1, 2, 5, 5).realize(), Tensor.rand(3, 2, 3, 3).realize(), Tensor.rand(3).realize()
  for f in (lambda: x.conv2d(w), lambda: x.conv2d(w, b, padding=1).relu(), lambda: x.conv_transpose2d(w.reshape(2, 3, 3, 3), stride=2),
            lambda: x.max_pool2d(2), lambda: x.avg_pool2d(3, 2, padding=1), lambda: x.avg_pool2d(2, ceil_mode=True, count_include_pad=False)):
    GlobalCounters.reset()
    f().realize()
    assert GlobalCounters.kernel_count == 1

# Winograd F(4x4, 3x3) (WINO): 3x3, stride 1, >= 8 channels in, a multiple of 8 out. Odd sizes cover tiles that
# overhang the output (cropped), asymmetric and zero padding, an output of exactly one tile row
WINO_CASES = {
  "pad1": ((2, 8, 9, 7), (8, 8, 3, 3), {"padding": 1}),
  "bias": ((1, 16, 12, 12), (16, 16, 3, 3), {"padding": 1, "bias": True}),
  "no_pad_one_tile_row": ((3, 8, 6, 11), (16, 8, 3, 3), {}),
  "pad_asymmetric": ((2, 12, 10, 5), (8, 12, 3, 3), {"padding": ((2, 0), (0, 2))}),
  "pad2_wide": ((1, 9, 5, 17), (24, 9, 3, 3), {"padding": 2}),
}

@pytest.mark.parametrize("name", list(WINO_CASES))
def test_conv2d_winograd(device, name):
  # WINO=1: conv2d transforms the weight itself (every op a Tensor op: the gradients are those of the transforms)
  from petagrad import Context
  xs, ws, kw = WINO_CASES[name]
  kw, bias = dict(kw), kw.get("bias", False)
  kw.pop("bias", None)
  tkw = dict(kw)
  if isinstance(kw.get("padding"), tuple):   # ((top, bottom), (left, right)) -> torch's F.pad order
    (t, b), (l, r) = kw["padding"]
    tkw = {"padding": 0}
    pre = lambda x: F.pad(x, (l, r, t, b))   # noqa: E731
  else: pre = lambda x: x   # noqa: E731
  with Context(WINO=1):
    if bias:
      helper_test_op([xs, ws, (ws[0],)], lambda x, w, b: F.conv2d(pre(x), w, b, **tkw), lambda x, w, b: x.conv2d(w, b, **kw),
                     atol=1e-4, rtol=1e-4, grad_atol=1e-4, grad_rtol=1e-4)
    else:
      helper_test_op([xs, ws], lambda x, w: F.conv2d(pre(x), w, **tkw), lambda x, w: x.conv2d(w, **kw),
                     atol=1e-4, rtol=1e-4, grad_atol=1e-4, grad_rtol=1e-4)

def test_conv2d_winograd_kernels(device):
  # a transformed weight given: 4 kernels (input transform in two passes, 36 products, output transform: it
  # stores the convolution channels-last) and the bias and activation in the kernel that reads it (here the copy of
  # the result; in a network the next convolution's input transform); WINO=1 transforms the weight too (two more), a plain
  # conv2d under WINO=0 (the default) and a convolution that does not fit (stride 2, too few channels) take the direct path (the padded input and the
  # weight's channels-last copy written once, then the reduce with the bias and activation)
  from petagrad import Context
  from petagrad.helpers import GlobalCounters
  from petagrad.mixin.conv import winograd_weight, winograd_fits
  rng = np.random.default_rng(0)
  xn, wn, bn = (rng.standard_normal(s).astype(np.float32) for s in ((2, 8, 12, 12), (16, 8, 3, 3), (16,)))
  x, w, b = Tensor(xn).realize(), Tensor(wn).realize(), Tensor(bn).realize()
  u = winograd_weight(w).realize()
  def count(f, mode, stride=1):
    with Context(WINO=mode):
      GlobalCounters.reset()
      out = f().realize()
      np.testing.assert_allclose(out.numpy(), F.conv2d(torch.tensor(xn), torch.tensor(wn), torch.tensor(bn), stride=stride, padding=1).relu().numpy(),
                                 rtol=1e-4, atol=1e-4)
      return GlobalCounters.kernel_count
  assert count(lambda: x.conv2d(w, b, padding=1, winograd=u).relu(), 0) == 5
  assert count(lambda: x.conv2d(w, b, padding=1).relu(), 1) == 7
  assert count(lambda: x.conv2d(w, b, padding=1).relu(), 0) == 3
  assert count(lambda: x.conv2d(w, b, stride=2, padding=1, winograd=u).relu(), 1, stride=2) == 3
  assert winograd_fits(x.shape, w.shape, pads=((1, 1), (1, 1))) and not winograd_fits(x.shape, w.shape, stride=(2, 2))
  f32, f16 = dtypes.float32, dtypes.float16
  assert winograd_fits(x.shape, w.shape, dts=(f32, f32)) and not winograd_fits(x.shape, w.shape, dts=(f16, f16)) \
    and not winograd_fits(x.shape, w.shape, dts=(f32, dtypes.float64))
  assert not winograd_fits((1, 4, 12, 12), (16, 4, 3, 3)) and not winograd_fits((1, 8, 5, 5), (16, 8, 3, 3))   # 3x3 output: no whole tile
  # few tiles and a transformed weight too big for the cache (4 tiles, 36 x 512 x 512 floats): direct; more tiles, or a
  # small weight: Winograd
  p1 = ((1, 1), (1, 1))
  assert not winograd_fits((1, 512, 7, 7), (512, 512, 3, 3), pads=p1) and winograd_fits((4, 512, 7, 7), (512, 512, 3, 3), pads=p1)
  assert winograd_fits((1, 64, 8, 8), (64, 64, 3, 3), pads=p1)
  f64 = (dtypes.float64, dtypes.float64)   # (its transformed weight in float64: 1.2 MB)
  assert winograd_fits((1, 64, 8, 8), (64, 64, 3, 3), pads=p1, dts=(f32, f32)) and not winograd_fits((1, 64, 8, 8), (64, 64, 3, 3), pads=p1, dts=f64)
  with pytest.raises(ValueError, match=r"(?s)conv2d: winograd= must be winograd_weight\(weight\), of shape \(36, 8, 16\)"):
    x.conv2d(w, padding=1, winograd=u[:, :4])
  with pytest.raises(ValueError, match=r"winograd_weight: expected a 3x3 conv weight"): winograd_weight(Tensor.zeros(8, 8, 5, 5))

CONVT = {
  "basic": ((1, 2, 3, 3), (2, 3, 3, 3), {}),
  "stride2": ((1, 2, 3, 3), (2, 2, 3, 3), {"stride": 2}),
  "stride2_pad_outpad": ((1, 2, 3, 3), (2, 2, 3, 3), {"stride": 2, "padding": 1, "output_padding": 1}),
  "dilation": ((1, 1, 3, 3), (1, 2, 2, 2), {"dilation": 2}),
  "groups": ((1, 4, 3, 3), (4, 1, 2, 2), {"groups": 2, "stride": (2, 1)}),
  "pad_big": ((1, 1, 4, 4), (1, 1, 3, 3), {"padding": 2}),
  "bias": ((2, 2, 2, 3), (2, 3, 2, 2), {"bias": True, "stride": 3, "output_padding": (2, 1)}),
}

@pytest.mark.parametrize("name", list(CONVT))
def test_conv_transpose2d(device, name):
  xs, ws, kw = CONVT[name]
  kw = dict(kw)
  if kw.pop("bias", False):
    helper_test_op([xs, ws, (ws[1] * kw.get("groups", 1),)], lambda x, w, b: F.conv_transpose2d(x, w, b, **kw),
                   lambda x, w, b: x.conv_transpose2d(w, b, **kw), atol=1e-5, grad_atol=1e-5)
  else:
    helper_test_op([xs, ws], lambda x, w: F.conv_transpose2d(x, w, **kw), lambda x, w: x.conv_transpose2d(w, **kw), atol=1e-5, grad_atol=1e-5)

def test_conv_transpose1d_3d(device):
  helper_test_op([(1, 2, 4), (2, 3, 3)], lambda x, w: F.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1),
                 lambda x, w: x.conv_transpose1d(w, stride=2, padding=1, output_padding=1), atol=1e-5)
  helper_test_op([(1, 1, 2, 2, 2), (1, 2, 2, 2, 2)], lambda x, w: F.conv_transpose3d(x, w, stride=2),
                 lambda x, w: x.conv_transpose3d(w, stride=2), atol=1e-5, forward_only=True)

def test_im2col(device):
  helper_test_op([(1, 2, 4, 5)], lambda x: F.unfold(x, (2, 3)), lambda x: x.im2col((2, 3)))
  helper_test_op([(2, 1, 5, 5)], lambda x: F.unfold(x, 3, dilation=2, padding=1, stride=2), lambda x: x.im2col(3, dilation=2, padding=1, stride=2))

def test_fold(device):
  helper_test_op([(1, 6, 4)], lambda x: F.fold(x, (3, 4), (2, 3)), lambda x: x.fold((3, 4), (2, 3)))
  helper_test_op([(2, 4, 9)], lambda x: F.fold(x, (5, 6), 2, dilation=(1, 2), padding=1, stride=2),
                 lambda x: x.fold((5, 6), 2, dilation=(1, 2), padding=1, stride=2))
  with pytest.raises(ValueError, match=r"(?s)fold: .*sliding blocks 4, but got 5"): Tensor.zeros(1, 6, 5).fold((3, 4), (2, 3))

def test_conv_errors(device):
  x = Tensor.zeros(1, 3, 5, 5)
  with pytest.raises(ValueError, match=r"(?s)conv2d: input has 3 channels.*test_nn_ops.py"): x.conv2d(Tensor.zeros(2, 2, 3, 3))
  with pytest.raises(ValueError, match=r"(?s)conv2d: kernel.*larger"): x.conv2d(Tensor.zeros(2, 3, 7, 7))
  with pytest.raises(ValueError, match=r"(?s)conv2d: .*groups"): Tensor.zeros(1, 4, 5, 5).conv2d(Tensor.zeros(3, 2, 3, 3), groups=2)
  with pytest.raises(ValueError, match=r"(?s)conv2d: bias must have shape \(2,\)"): x.conv2d(Tensor.zeros(2, 3, 3, 3), Tensor.zeros(3))
  with pytest.raises(ValueError, match=r"(?s)conv2d: padding='same' is not supported for strided"):
    x.conv2d(Tensor.zeros(2, 3, 3, 3), stride=2, padding="same")
  with pytest.raises(ValueError, match=r"(?s)conv2d: padding string"): x.conv2d(Tensor.zeros(2, 3, 3, 3), padding="full")
  with pytest.raises(ValueError, match=r"(?s)conv2d: stride must be >= 1"): x.conv2d(Tensor.zeros(2, 3, 3, 3), stride=0)
  with pytest.raises(ValueError, match=r"(?s)conv1d: a 1-d kernel"): x.conv2d(Tensor.zeros(2, 3, 3))
  with pytest.raises(TypeError, match=r"(?s)conv2d: weight must be a Tensor"): x.conv2d(np.zeros((2, 3, 3, 3)))
  with pytest.raises(ValueError, match=r"(?s)conv_transpose2d: output padding"):
    x.conv_transpose2d(Tensor.zeros(3, 2, 3, 3), stride=2, output_padding=2)
  with pytest.raises(ValueError, match=r"(?s)conv_transpose2d: input has 3 channels"): x.conv_transpose2d(Tensor.zeros(2, 2, 3, 3))

# ------------------------------------------------------------------ pooling

POOL = {
  # name: (shape, kwargs)
  "k2": ((1, 2, 4, 4), {"kernel_size": 2}),
  "k3s1": ((1, 1, 5, 5), {"kernel_size": 3, "stride": 1}),
  "k3s2_pad1": ((2, 1, 5, 5), {"kernel_size": 3, "stride": 2, "padding": 1}),
  "rect": ((1, 2, 5, 6), {"kernel_size": (2, 3), "stride": (1, 2)}),
  "ceil": ((1, 1, 5, 5), {"kernel_size": 2, "ceil_mode": True}),
  "ceil_pad": ((1, 1, 6, 6), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
  "size1": ((1, 3, 1, 4), {"kernel_size": (1, 2)}),
}

@pytest.mark.parametrize("name", list(POOL))
def test_max_pool2d(device, name):
  shape, kw = POOL[name]
  helper_test_op([shape], lambda x: F.max_pool2d(x, **kw), lambda x: x.max_pool2d(**kw))

@pytest.mark.parametrize("name", list(POOL))
def test_avg_pool2d(device, name):
  shape, kw = POOL[name]
  helper_test_op([shape], lambda x: F.avg_pool2d(x, **kw), lambda x: x.avg_pool2d(**kw))
  if kw.get("padding"):
    helper_test_op([shape], lambda x: F.avg_pool2d(x, **kw, count_include_pad=False), lambda x: x.avg_pool2d(**kw, count_include_pad=False))

def test_max_pool2d_dilation(device):
  helper_test_op([(1, 1, 6, 6)], lambda x: F.max_pool2d(x, 2, stride=1, dilation=2), lambda x: x.max_pool2d(2, stride=1, dilation=2))
  helper_test_op([(1, 1, 7, 7)], lambda x: F.max_pool2d(x, 3, stride=2, dilation=2, padding=1, ceil_mode=True),
                 lambda x: x.max_pool2d(3, stride=2, dilation=2, padding=1, ceil_mode=True))

def test_avg_pool2d_divisor_override(device):
  helper_test_op([(1, 1, 4, 4)], lambda x: F.avg_pool2d(x, 2, divisor_override=3), lambda x: x.avg_pool2d(2, divisor_override=3))

def test_pool_permuted_input(device):
  helper_test_op([(1, 4, 4, 2)], lambda x: F.max_pool2d(x.permute(0, 3, 1, 2), 2), lambda x: x.permute(0, 3, 1, 2).max_pool2d(2))
  helper_test_op([(4, 5, 2)], lambda x: F.avg_pool2d(x.permute(2, 0, 1), 3, 1, 1), lambda x: x.permute(2, 0, 1).avg_pool2d(3, 1, padding=1))

def test_max_pool2d_return_indices(device):
  for kw in ({"kernel_size": 2}, {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, {"kernel_size": (1, 3), "stride": 1}):
    helper_test_op([(1, 2, 5, 5)], lambda x: F.max_pool2d(x, **kw, return_indices=True), lambda x: x.max_pool2d(**kw, return_indices=True))

def test_pool_1d_3d(device):
  helper_test_op([(2, 2, 7)], lambda x: F.max_pool1d(x, 3, 2, 1), lambda x: x.max_pool1d(3, 2, padding=1))
  helper_test_op([(2, 2, 7)], lambda x: F.avg_pool1d(x, 2, ceil_mode=True), lambda x: x.avg_pool1d(2, ceil_mode=True))
  helper_test_op([(1, 1, 3, 4, 4)], lambda x: F.max_pool3d(x, 2, padding=(0, 1, 1)), lambda x: x.max_pool3d(2, padding=(0, 1, 1)))
  helper_test_op([(1, 1, 3, 4, 4)], lambda x: F.avg_pool3d(x, (1, 2, 2), count_include_pad=False, padding=(0, 1, 0)),
                 lambda x: x.avg_pool3d((1, 2, 2), count_include_pad=False, padding=(0, 1, 0)))
  helper_test_op([(1, 2, 6)], lambda x: F.max_pool1d(x, 2, return_indices=True), lambda x: x.max_pool1d(2, return_indices=True))

def test_avg_pool_int(device):
  helper_test_op([(1, 1, 4, 5)], lambda x: F.avg_pool2d(x, 2, padding=1), lambda x: x.avg_pool2d(2, padding=1), dtype="int64", low=-50, high=50)

def test_max_pool_int(device):
  helper_test_op([(1, 1, 4, 4)], lambda x: F.max_pool2d(x.float(), 2, padding=1).int(), lambda x: x.max_pool2d(2, padding=1), dtype="int32",
                 low=-50, high=50, forward_only=True)

def test_max_unpool(device):
  def tf(x):
    y, i = F.max_pool2d(x, 2, return_indices=True)
    return F.max_unpool2d(y, i, 2, output_size=(4, 5))
  def pf(x):
    y, i = x.max_pool2d(2, return_indices=True)
    return y.max_unpool2d(i, 2, output_size=(4, 5))
  helper_test_op([(1, 2, 4, 5)], tf, pf)
  def tf2(x):
    y, i = F.max_pool1d(x, 2, return_indices=True)
    return F.max_unpool1d(y, i, 2, output_size=(7,))
  def pf2(x):
    y, i = x.max_pool1d(2, return_indices=True)
    return y.max_unpool1d(i, 2, output_size=(7,))
  helper_test_op([(1, 2, 7)], tf2, pf2)

@pytest.mark.parametrize("osz", [(2, 2), (3, 2), 1, (5, 4), (None, 3)])
def test_adaptive_avg_pool2d(device, osz):
  helper_test_op([(1, 2, 5, 4)], lambda x: F.adaptive_avg_pool2d(x, osz), lambda x: x.adaptive_avg_pool2d(osz))

@pytest.mark.parametrize("osz", [(2, 2), (3, 2), 1])
def test_adaptive_max_pool2d(device, osz):
  helper_test_op([(1, 2, 5, 4)], lambda x: F.adaptive_max_pool2d(x, osz), lambda x: x.adaptive_max_pool2d(osz))
  helper_test_op([(1, 2, 5, 4)], lambda x: F.adaptive_max_pool2d(x, osz, return_indices=True),
                 lambda x: x.adaptive_max_pool2d(osz, return_indices=True))

def test_adaptive_pool_1d_3d(device):
  helper_test_op([(2, 7)], lambda x: F.adaptive_avg_pool1d(x, 3), lambda x: x.adaptive_avg_pool1d(3))
  helper_test_op([(1, 2, 7)], lambda x: F.adaptive_max_pool1d(x, 3), lambda x: x.adaptive_max_pool1d(3))
  helper_test_op([(1, 1, 3, 4, 5)], lambda x: F.adaptive_avg_pool3d(x, (2, 2, 3)), lambda x: x.adaptive_avg_pool3d((2, 2, 3)))
  helper_test_op([(1, 1, 3, 4, 5)], lambda x: F.adaptive_max_pool3d(x, (2, 3, 2)), lambda x: x.adaptive_max_pool3d((2, 3, 2)))

def test_pool_errors(device):
  x = Tensor.zeros(1, 1, 4, 4)
  with pytest.raises(ValueError, match=r"(?s)max_pool2d: pad should be at most half.*test_nn_ops.py"): x.max_pool2d(2, padding=2)
  with pytest.raises(ValueError, match=r"(?s)avg_pool2d: kernel size .* larger"): x.avg_pool2d(5)
  with pytest.raises(ValueError, match=r"(?s)max_pool2d: kernel_size must be >= 1"): x.max_pool2d(0)
  with pytest.raises(ValueError, match=r"(?s)max_pool2d: stride must be an int or a sequence of 2"): x.max_pool2d(2, stride=(1, 1, 1))
  with pytest.raises(ValueError, match=r"(?s)max_pool3d: a 3-d pool needs"): Tensor.zeros(4, 4).max_pool3d(2)
  with pytest.raises(ValueError, match=r"(?s)adaptive_avg_pool2d: output_size"): x.adaptive_avg_pool2d((0, 2))

# ------------------------------------------------------------------ interpolate and padding modes

INTERP = [
  ((1, 2, 3), {"size": 5, "mode": "nearest"}),
  ((1, 1, 5), {"scale_factor": 0.5, "mode": "nearest"}),
  ((1, 1, 3, 4), {"size": (5, 7), "mode": "nearest"}),
  ((1, 1, 3, 4), {"scale_factor": 2, "mode": "nearest"}),
  ((1, 1, 4, 3), {"size": (3, 7), "mode": "nearest-exact"}),
  ((1, 2, 4), {"size": 7, "mode": "linear"}),
  ((1, 2, 4), {"size": 7, "mode": "linear", "align_corners": True}),
  ((1, 1, 3, 4), {"size": (5, 2), "mode": "bilinear"}),
  ((1, 1, 3, 4), {"scale_factor": (1.5, 2), "mode": "bilinear"}),
  ((1, 1, 3, 4), {"size": (5, 6), "mode": "bilinear", "align_corners": True}),
  ((1, 1, 2, 3, 2), {"size": (3, 2, 4), "mode": "trilinear"}),
  ((1, 1, 4, 5), {"size": (2, 3), "mode": "area"}),
  ((1, 1, 3, 4), {"size": (5, 3), "mode": "bicubic"}),
  ((1, 1, 3, 4), {"scale_factor": 1.5, "mode": "bicubic", "align_corners": True}),
  ((1, 1, 5), {"scale_factor": 1.7, "mode": "linear", "recompute_scale_factor": True}),
]

@pytest.mark.parametrize("i", range(len(INTERP)))
def test_interpolate(device, i):
  shape, kw = INTERP[i]
  helper_test_op([shape], lambda x: F.interpolate(x, **kw), lambda x: x.interpolate(**kw), atol=1e-5, grad_atol=1e-5)

def test_interpolate_nearest_int(device):
  helper_test_op([(1, 2, 3, 2)], lambda x: F.interpolate(x, scale_factor=(2, 1.5)), lambda x: x.interpolate(scale_factor=(2, 1.5)), dtype="uint8",
                 low=0, high=255)

def test_interpolate_errors(device):
  x = Tensor.zeros(1, 1, 3, 3)
  with pytest.raises(ValueError, match=r"(?s)interpolate: mode 'bilinear' needs a 4-d input"): Tensor.zeros(1, 3, 3).interpolate(4, mode="bilinear")
  with pytest.raises(ValueError, match=r"(?s)interpolate: exactly one of size and scale_factor"): x.interpolate()
  with pytest.raises(ValueError, match=r"(?s)interpolate: mode must be one of"): x.interpolate(size=4, mode="cubic")

PADS = [((2, 1),), ((0, 2, 1, 1),), ((1, 1, 0, 2, 1, 0),)]

@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(2, 1), (0, 2, 1, 1), (1, 1, 0, 2, 1, 0)])
def test_pad_modes(device, mode, pad):
  shape = {2: (2, 3, 4), 4: (1, 2, 3, 4), 6: (1, 1, 2, 3, 4)}[len(pad)]
  helper_test_op([shape], lambda x: F.pad(x, pad, mode=mode), lambda x: x.pad_mode(pad, mode))

def test_pad_modes_pairs_and_negative(device):
  helper_test_op([(3, 4)], lambda x: F.pad(x, (-1, 2), mode="replicate"), lambda x: x.pad_mode(((0, 0), (-1, 2)), "replicate"))
  helper_test_op([(1, 3, 4)], lambda x: F.pad(x, (1, -1, 2, 0), mode="circular"), lambda x: x.pad_mode((1, -1, 2, 0), "circular"))

def test_pad_modes_through_core_pad(device):
  helper_test_op([(1, 2, 3, 4)], lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"), lambda x: x.pad((2, 1, 1, 2), mode="reflect"))

def test_pad_mode_errors(device):
  x = Tensor.zeros(2, 3)
  with pytest.raises(ValueError, match=r"(?s)pad: reflect padding .* must be smaller"): x.pad_mode((3, 0), "reflect")
  with pytest.raises(ValueError, match=r"(?s)pad: circular padding"): x.pad_mode((4, 0), "circular")
  with pytest.raises(ValueError, match=r"(?s)pad: mode must be"): x.pad_mode((1, 0), "wrap")

# ------------------------------------------------------------------ activations

ACTS = {
  "elu": (lambda x: F.elu(x), lambda x: x.elu()),
  "elu_alpha": (lambda x: F.elu(x, 0.5), lambda x: x.elu(0.5)),
  "celu": (lambda x: F.celu(x, 1.5), lambda x: x.celu(1.5)),
  "selu": (lambda x: F.selu(x), lambda x: x.selu()),
  "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: x.leaky_relu(0.2)),
  "relu6": (lambda x: F.relu6(x * 4), lambda x: (x * 4).relu6()),
  "hardtanh": (lambda x: F.hardtanh(x, -0.5, 1.5), lambda x: x.hardtanh(-0.5, 1.5)),
  "hardsigmoid": (lambda x: F.hardsigmoid(x * 3), lambda x: (x * 3).hardsigmoid()),
  "hardswish": (lambda x: F.hardswish(x * 3), lambda x: (x * 3).hardswish()),
  "mish": (lambda x: F.mish(x), lambda x: x.mish()),
  "softplus": (lambda x: F.softplus(x), lambda x: x.softplus()),
  "softplus_beta": (lambda x: F.softplus(x * 10, beta=2, threshold=5), lambda x: (x * 10).softplus(beta=2, threshold=5)),
  "softsign": (lambda x: F.softsign(x), lambda x: x.softsign()),
  "logsigmoid": (lambda x: F.logsigmoid(x * 20), lambda x: (x * 20).logsigmoid()),
  "glu": (lambda x: F.glu(x), lambda x: x.glu()),
  "glu_dim0": (lambda x: F.glu(x, 0), lambda x: x.glu(0)),
  "swish": (lambda x: F.silu(x), lambda x: x.swish()),
  "quick_gelu": (lambda x: x * torch.sigmoid(1.702 * x), lambda x: x.quick_gelu()),
  "softmin": (lambda x: F.softmin(x, -1), lambda x: x.softmin(-1)),
  "tanhshrink": (lambda x: F.tanhshrink(x), lambda x: x.tanhshrink()),
  "hardshrink": (lambda x: F.hardshrink(x, 0.7), lambda x: x.hardshrink(0.7)),
  "softshrink": (lambda x: F.softshrink(x, 0.7), lambda x: x.softshrink(0.7)),
  "threshold": (lambda x: F.threshold(x, 0.3, -2.0), lambda x: x.threshold(0.3, -2.0)),
}

@pytest.mark.parametrize("name", list(ACTS))
def test_activation(device, name):
  tf, pf = ACTS[name]
  helper_test_op([(4, 6)], tf, pf, low=-3, high=3, atol=1e-6, grad_atol=1e-5)

def test_activation_extremes(device):
  v = [[-200.0, -30.0, -1.0, 0.5, 30.0, 200.0]]
  for tf, pf in (ACTS["elu"], ACTS["selu"], ACTS["celu"], ACTS["softplus"], ACTS["mish"], ACTS["logsigmoid"]):
    helper_test_op(None, tf, pf, vals=v, atol=1e-5)

def test_glu_odd(device):
  with pytest.raises(RuntimeError, match=r"(?s)glu: halving dimension must be even"): Tensor.zeros(2, 3).glu()

# ------------------------------------------------------------------ losses

def _cls(shape, classes, seed=0, ignore=None):
  rng = np.random.default_rng(seed)
  t = rng.integers(0, classes, size=shape)
  if ignore is not None: t[tuple(0 for _ in shape)] = ignore
  return t.astype(np.int64)

def _rnd(shape, seed=1, lo=-2.0, hi=2.0):
  return np.random.default_rng(seed).uniform(lo, hi, size=shape).astype(np.float32)

REDUCTIONS = ["mean", "sum", "none"]

def _reds(f):
  """One function returning f(*xs, reduction) for every reduction: one helper call (and one backward) checks them all."""
  return lambda *xs: tuple(f(*xs, r) for r in REDUCTIONS)

def test_cross_entropy_indices(device):
  helper_test_op(None, _reds(lambda x, t, r: F.cross_entropy(x, t, reduction=r)), _reds(lambda x, t, r: x.cross_entropy(t, reduction=r)),
                 vals=[_rnd((4, 5)), _cls((4,), 5)], dtype=["float32", "int64"])

def test_cross_entropy_all_options(device):
  # weight, ignore_index (a valid class here, so it needs masking), label smoothing, spatial dims
  kw = dict(ignore_index=1, label_smoothing=0.2)
  w = _rnd((3,), 3, 0.5, 2)   # (torch: class weights cannot require grad)
  helper_test_op(None, _reds(lambda x, t, r: F.cross_entropy(x, t, weight=torch.tensor(w), reduction=r, **kw)),
                 _reds(lambda x, t, r: x.cross_entropy(t, weight=Tensor(w), reduction=r, **kw)),
                 vals=[_rnd((2, 3, 2, 2)), _cls((2, 2, 2), 3)], dtype=["float32", "int64"])

def test_cross_entropy_ignore_default(device):
  helper_test_op(None, lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), lambda x, t: x.cross_entropy(t, label_smoothing=0.1),
                 vals=[_rnd((4, 3)), _cls((4,), 3, ignore=-100)], dtype=["float32", "int64"])

def test_cross_entropy_probs(device):
  p = np.random.default_rng(2).dirichlet(np.ones(4), size=3).astype(np.float32)
  w = _rnd((4,), 3, 0.5, 2)
  helper_test_op(None, _reds(lambda x, t, r: F.cross_entropy(x, t, weight=torch.tensor(w), reduction=r, label_smoothing=0.1)),
                 _reds(lambda x, t, r: x.cross_entropy(t, weight=Tensor(w), reduction=r, label_smoothing=0.1)), vals=[_rnd((3, 4)), p])

def test_cross_entropy_unbatched(device):
  helper_test_op(None, lambda x, t: F.cross_entropy(x, t.reshape(())), lambda x, t: x.cross_entropy(t.reshape(())), vals=[_rnd((5,)), [3]],
                 dtype=["float32", "int64"])

def test_nll_loss(device):
  w = _rnd((4,), 3, 0.5, 2)
  helper_test_op(None, _reds(lambda x, t, r: F.nll_loss(x.log_softmax(1), t, weight=torch.tensor(w), ignore_index=2, reduction=r)),
                 _reds(lambda x, t, r: x.log_softmax(1).nll_loss(t, weight=Tensor(w), ignore_index=2, reduction=r)),
                 vals=[_rnd((5, 4)), _cls((5,), 4, 3)], dtype=["float32", "int64"])
  helper_test_op(None, _reds(lambda x, t, r: F.nll_loss(x, t, reduction=r)), _reds(lambda x, t, r: x.nll_loss(t, reduction=r)),
                 vals=[_rnd((2, 3, 4)), _cls((2, 4), 3, 4)], dtype=["float32", "int64"])

def test_sparse_categorical_crossentropy(device):
  helper_test_op(None, lambda x, t: F.cross_entropy(x, t, ignore_index=-1), lambda x, t: x.sparse_categorical_crossentropy(t),
                 vals=[_rnd((4, 3)), _cls((4,), 3, ignore=-1)], dtype=["float32", "int64"])

def test_binary_cross_entropy(device):
  w = _rnd((4,), 3, 0, 2)   # (torch: weights cannot require grad)
  helper_test_op(None, _reds(lambda x, t, r: F.binary_cross_entropy(x.sigmoid(), t, weight=torch.tensor(w), reduction=r)),
                 _reds(lambda x, t, r: x.sigmoid().binary_cross_entropy(t, weight=Tensor(w), reduction=r)),
                 vals=[_rnd((3, 4)), _rnd((3, 4), 2, 0, 1)])
  helper_test_op(None, _reds(lambda x, t, r: F.binary_cross_entropy(x, t, reduction=r)),
                 _reds(lambda x, t, r: x.binary_cross_entropy(t, reduction=r)),
                 vals=[[0.0, 1.0, 0.5, 1e-3], [1.0, 0.0, 0.3, 1.0]], forward_only=True, atol=1e-4)

def test_binary_cross_entropy_with_logits(device):
  pw, w = _rnd((4,), 3, 0.5, 3), _rnd((3, 1), 3, 0.5, 3)
  helper_test_op(None, _reds(lambda x, t, r: F.binary_cross_entropy_with_logits(x, t, reduction=r, pos_weight=torch.tensor(pw))),
                 _reds(lambda x, t, r: x.binary_cross_entropy_with_logits(t, reduction=r, pos_weight=Tensor(pw))),
                 vals=[_rnd((3, 4), 1, -30, 30), _rnd((3, 4), 2, 0, 1)], atol=1e-5)
  helper_test_op(None, _reds(lambda x, t, r: F.binary_cross_entropy_with_logits(x, t, weight=torch.tensor(w), reduction=r)),
                 _reds(lambda x, t, r: x.binary_cross_entropy_with_logits(t, weight=Tensor(w), reduction=r)),
                 vals=[_rnd((3, 4)), _rnd((3, 4), 2, 0, 1)], atol=1e-5)

PAIR_LOSSES = {
  "mse_loss": (lambda x, y, r: F.mse_loss(x, y, reduction=r), lambda x, y, r: x.mse_loss(y, reduction=r)),
  "l1_loss": (lambda x, y, r: F.l1_loss(x, y, reduction=r), lambda x, y, r: x.l1_loss(y, reduction=r)),
  "smooth_l1": (lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.7), lambda x, y, r: x.smooth_l1_loss(y, reduction=r, beta=0.7)),
  "smooth_l1_beta0": (lambda x, y, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.0), lambda x, y, r: x.smooth_l1_loss(y, reduction=r, beta=0.0)),
  "huber": (lambda x, y, r: F.huber_loss(x, y, reduction=r, delta=0.8), lambda x, y, r: x.huber_loss(y, reduction=r, delta=0.8)),
  "kl_div": (lambda x, y, r: F.kl_div(x.log_softmax(-1), y.softmax(-1), reduction=r),
             lambda x, y, r: x.log_softmax(-1).kl_div(y.softmax(-1), reduction=r)),
  "kl_div_log_target": (lambda x, y, r: F.kl_div(x.log_softmax(-1), y.log_softmax(-1), reduction=r, log_target=True),
                        lambda x, y, r: x.log_softmax(-1).kl_div(y.log_softmax(-1), reduction=r, log_target=True)),
}

@pytest.mark.parametrize("name", list(PAIR_LOSSES))
def test_pair_loss(device, name):
  # every reduction in one call: the outputs (and the gradient of their weighted sum) are compared together
  tf, pf = PAIR_LOSSES[name]
  helper_test_op([(3, 4), (3, 4)], lambda x, y: tuple(tf(x, y, r) for r in REDUCTIONS), lambda x, y: tuple(pf(x, y, r) for r in REDUCTIONS))

def test_kl_div_batchmean_zero_target(device):
  t = np.array([[0.0, 0.5, 0.5], [0.2, 0.8, 0.0]], np.float32)   # (a constant: torch's target gradient is nan at 0)
  helper_test_op([(2, 3)], lambda x: F.kl_div(x, torch.tensor(t), reduction="batchmean"), lambda x: x.kl_div(Tensor(t), reduction="batchmean"),
                 low=-3, high=-0.1)

def test_cosine_similarity(device):
  helper_test_op([(3, 4), (3, 4)], lambda x, y: F.cosine_similarity(x, y), lambda x, y: x.cosine_similarity(y))
  helper_test_op([(2, 3, 4), (3, 1)], lambda x, y: F.cosine_similarity(x, y, dim=-1), lambda x, y: x.cosine_similarity(y, dim=-1))
  helper_test_op(None, lambda x, y: F.cosine_similarity(x, y, dim=0), lambda x, y: x.cosine_similarity(y, dim=0), vals=[[0.0, 0.0], [1.0, 2.0]],
                 forward_only=True)

@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_other_losses(device, reduction):
  sign = np.where(np.random.default_rng(7).random((3, 4)) < 0.5, -1.0, 1.0).astype(np.float32)
  helper_test_op([(3, 4), (3, 4)], lambda x, y: F.margin_ranking_loss(x, y, torch.tensor(sign), margin=0.3, reduction=reduction),
                 lambda x, y: x.margin_ranking_loss(y, Tensor(sign), margin=0.3, reduction=reduction))
  helper_test_op([(3, 4)], lambda x: F.hinge_embedding_loss(x, torch.tensor(sign), margin=0.5, reduction=reduction),
                 lambda x: x.hinge_embedding_loss(Tensor(sign), margin=0.5, reduction=reduction))

def test_pairwise_distance(device):
  helper_test_op([(3, 4), (3, 4)], lambda x, y: F.pairwise_distance(x, y), lambda x, y: x.pairwise_distance(y))
  helper_test_op([(3, 4), (4,)], lambda x, y: F.pairwise_distance(x, y, p=1.5, keepdim=True),
                 lambda x, y: x.pairwise_distance(y, p=1.5, keepdim=True))

def test_loss_errors(device):
  x = Tensor.zeros(4, 5)
  with pytest.raises(ValueError, match=r"(?s)cross_entropy: class-index target must have shape \(4,\).*test_nn_ops.py"):
    x.cross_entropy(Tensor([1, 2, 3]))
  with pytest.raises(TypeError, match=r"(?s)cross_entropy: target must be class indices"): x.cross_entropy(Tensor.zeros(4))
  with pytest.raises(ValueError, match=r"(?s)cross_entropy: reduction must be"): x.cross_entropy(Tensor([1, 2, 3, 0]), reduction="avg")
  with pytest.raises(ValueError, match=r"(?s)cross_entropy: weight must have shape \(5,\)"):
    x.cross_entropy(Tensor([1, 2, 3, 0]), weight=Tensor.ones(4))
  with pytest.raises(ValueError, match=r"(?s)mse_loss: target shape \(4,\) must match"): x.mse_loss(Tensor.zeros(4))
  with pytest.raises(TypeError, match=r"(?s)nll_loss: target must be class indices"): x.nll_loss(Tensor.zeros(4, 5))

# ------------------------------------------------------------------ normalization

def test_layernorm(device):
  helper_test_op([(2, 3, 4)], lambda x: F.layer_norm(x, (4,)), lambda x: x.layernorm(), grad_atol=1e-5)
  helper_test_op([(2, 3, 4)], lambda x: F.layer_norm(x, (3, 4), eps=1e-3), lambda x: x.layernorm((1, 2), eps=1e-3), grad_atol=1e-5)

def test_layer_norm(device):
  helper_test_op([(2, 3, 4), (3, 4), (3, 4)], lambda x, w, b: F.layer_norm(x, (3, 4), w, b), lambda x, w, b: x.layer_norm((3, 4), w, b),
                 grad_atol=1e-5)
  helper_test_op([(2, 4, 3)], lambda x: F.layer_norm(x.permute(0, 2, 1), (4,)), lambda x: x.permute(0, 2, 1).layer_norm(4), grad_atol=1e-5)

def test_rms_norm(device):
  helper_test_op([(2, 3, 4), (4,)], lambda x, w: F.rms_norm(x, (4,), w), lambda x, w: x.rms_norm(4, w), grad_atol=1e-5)
  helper_test_op([(2, 3, 4)], lambda x: F.rms_norm(x, (3, 4), eps=1e-3), lambda x: x.rms_norm((3, 4), eps=1e-3), grad_atol=1e-5)
  helper_test_op([(2, 3, 4)], lambda x: F.rms_norm(x, (4,)), lambda x: x.rms_norm(axis=-1), grad_atol=1e-5)

def test_batchnorm_tinygrad(device):
  m, v = _rnd((3,), 3), _rnd((3,), 4, 0.5, 2)
  helper_test_op([(2, 3, 2, 2), (3,), (3,)], lambda x, w, b: F.batch_norm(x, torch.tensor(m), torch.tensor(v), w, b, eps=0.0),
                 lambda x, w, b: x.batchnorm(w, b, Tensor(m), Tensor(v).rsqrt()), grad_atol=1e-5)

@pytest.mark.parametrize("training", [False, True])
def test_batch_norm(device, training):
  rm, rv = np.zeros(3, np.float32) + 0.1, np.ones(3, np.float32) * 1.5
  trm, trv = torch.tensor(rm), torch.tensor(rv)
  prm, prv = Tensor(rm), Tensor(rv)
  helper_test_op([(4, 3, 2), (3,), (3,)], lambda x, w, b: F.batch_norm(x, trm, trv, w, b, training=training, momentum=0.3),
                 lambda x, w, b: x.batch_norm(prm, prv, w, b, training=training, momentum=0.3), grad_atol=1e-5)
  np.testing.assert_allclose(prm.numpy(), trm.numpy(), atol=1e-6)
  np.testing.assert_allclose(prv.numpy(), trv.numpy(), atol=1e-6)

def test_batch_norm_no_running_stats(device):
  helper_test_op([(4, 2)], lambda x: F.batch_norm(x, None, None, training=True), lambda x: x.batch_norm(None, None, training=True), grad_atol=1e-5)
  with pytest.raises(ValueError, match=r"(?s)batch_norm: running_mean and running_var are required"): Tensor.zeros(4, 2).batch_norm(None, None)
  with pytest.raises(ValueError, match=r"(?s)batch_norm: expected more than 1 value per channel"):
    Tensor.zeros(1, 2).batch_norm(None, None, training=True)

def test_instance_norm(device):
  helper_test_op([(2, 3, 2, 3), (3,), (3,)], lambda x, w, b: F.instance_norm(x, weight=w, bias=b), lambda x, w, b: x.instance_norm(weight=w, bias=b),
                 grad_atol=1e-5)
  rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
  trm, trv, prm, prv = torch.tensor(rm), torch.tensor(rv), Tensor(rm), Tensor(rv)
  helper_test_op([(2, 3, 4)], lambda x: F.instance_norm(x, trm, trv, momentum=0.5), lambda x: x.instance_norm(prm, prv, momentum=0.5), grad_atol=1e-5)
  np.testing.assert_allclose(prm.numpy(), trm.numpy(), atol=1e-6)
  np.testing.assert_allclose(prv.numpy(), trv.numpy(), atol=1e-6)

def test_group_norm(device):
  helper_test_op([(2, 4, 3), (4,), (4,)], lambda x, w, b: F.group_norm(x, 2, w, b), lambda x, w, b: x.group_norm(2, w, b), grad_atol=1e-5)
  helper_test_op([(2, 6, 2, 2)], lambda x: F.group_norm(x, 3, eps=1e-3), lambda x: x.group_norm(3, eps=1e-3), grad_atol=1e-5)
  with pytest.raises(ValueError, match=r"(?s)group_norm: num_groups \(4\) must be a positive int that divides the channels \(6\)"):
    Tensor.zeros(1, 6, 2).group_norm(4)

def test_normalize(device):
  helper_test_op([(3, 4)], lambda x: F.normalize(x), lambda x: x.normalize())
  helper_test_op([(3, 4)], lambda x: F.normalize(x, p=1, dim=0), lambda x: x.normalize(p=1, dim=0))

def test_norm_errors(device):
  with pytest.raises(ValueError, match=r"(?s)layer_norm: normalized_shape \(3,\) must match"): Tensor.zeros(2, 4).layer_norm(3)
  with pytest.raises(ValueError, match=r"(?s)layer_norm: weight must have shape \(4,\)"): Tensor.zeros(2, 4).layer_norm(4, Tensor.ones(3))

# ------------------------------------------------------------------ dropout and attention

def test_dropout(device):
  x = Tensor.ones(64, 64)
  assert x.dropout(0.5) is x   # not training: identity
  old = Tensor.training
  try:
    Tensor.training = True
    Tensor.manual_seed(0)
    y = x.dropout(0.25).numpy()
    assert set(np.unique(y).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
    assert abs((y == 0).mean() - 0.25) < 0.03
    Tensor.manual_seed(0)
    np.testing.assert_array_equal(x.dropout(0.25).numpy(), y)   # reproducible
    assert (x.dropout(1.0).numpy() == 0).all()
    # gradient goes through the kept elements, scaled
    w = Tensor.ones(8, 8, requires_grad=True)
    d = w.dropout(0.5)
    d.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), d.numpy())
  finally:
    Tensor.training = old
  with pytest.raises(ValueError, match="(?s)dropout: dropout probability"): x.dropout(1.5)

@pytest.mark.parametrize("kind", ["none", "causal", "bool", "float", "scale"])
def test_scaled_dot_product_attention(device, kind):
  shapes = [(2, 3, 4), (2, 5, 4), (2, 5, 3)]
  if kind == "none": tf, pf = F.scaled_dot_product_attention, None
  elif kind == "causal":
    shapes = [(1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 2)]
    tf = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    pf = lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True)
  elif kind == "scale":
    tf = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3)
    pf = lambda q, k, v: q.scaled_dot_product_attention(k, v, scale=0.3)
  else:
    m = np.random.default_rng(5).random((3, 5)) < 0.6
    m[:, 0] = True
    if kind == "bool":
      tf = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(m))
      pf = lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=Tensor(m))
    else:
      fm = np.where(m, 0.5, -3.0).astype(np.float32)
      tf = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(fm))
      pf = lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=Tensor(fm))
  helper_test_op(shapes, tf, pf or (lambda q, k, v: q.scaled_dot_product_attention(k, v)), atol=1e-5, grad_atol=1e-5)

def test_sdpa_dropout(device):
  q = Tensor.rand(1, 4, 8)
  plain = q.scaled_dot_product_attention(q, q).numpy()
  np.testing.assert_array_equal(q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy(), plain)   # eval: no dropout (tinygrad)
  old = Tensor.training
  try:
    Tensor.training = True
    Tensor.manual_seed(9)
    a = q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy()
    Tensor.manual_seed(9)
    np.testing.assert_array_equal(q.scaled_dot_product_attention(q, q, dropout_p=0.5).numpy(), a)   # reproducible
    assert not np.allclose(a, plain)   # training: drops
  finally:
    Tensor.training = old

def test_sdpa_gqa(device):
  helper_test_op([(1, 4, 3, 2), (1, 2, 3, 2), (1, 2, 3, 2)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, enable_gqa=True), atol=1e-5, grad_atol=1e-5)
  # causal, a 2-D mask (both read each key/value head once per group of query heads) and a per-head 4-D mask (the heads
  # repeated), with several query heads per key/value head and a value width of its own
  helper_test_op([(2, 6, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3)], lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
                 lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True, enable_gqa=True), atol=1e-5, grad_atol=1e-5)
  m2 = np.random.default_rng(0).random((5, 5)) < 0.7
  m2[:, 0] = True
  m4 = np.random.default_rng(1).random((2, 6, 5, 5)) < 0.7
  m4[..., 0] = True
  for m in (m2, m4):
    helper_test_op([(2, 6, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3)],
                   lambda q, k, v, m=m: F.scaled_dot_product_attention(q, k, v, attn_mask=torch.tensor(m), enable_gqa=True),
                   lambda q, k, v, m=m: q.scaled_dot_product_attention(k, v, attn_mask=Tensor(m, device=q.device), enable_gqa=True),
                   atol=1e-5, grad_atol=1e-5)

def test_sdpa_errors(device):
  q = Tensor.zeros(2, 3, 4)
  with pytest.raises(ValueError, match=r"(?s)scaled_dot_product_attention: query and key embedding dims differ"):
    q.scaled_dot_product_attention(Tensor.zeros(2, 3, 5), Tensor.zeros(2, 3, 5))
  with pytest.raises(ValueError, match=r"(?s)scaled_dot_product_attention: shapes .* not broadcastable"):
    q.scaled_dot_product_attention(q, q, attn_mask=Tensor.ones(4, 4, dtype="bool"))

# ------------------------------------------------------------------ random

def test_multinomial_with_replacement(device):
  Tensor.manual_seed(1)
  p = Tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 0.0, 2.0]])
  s = p.multinomial(400, replacement=True)
  assert s.shape == (2, 400) and s.dtype == dtypes.int64
  s = s.numpy()
  assert not (s == 1)[0].any() and not (s == 2)[1].any()   # zero weights are never drawn
  freq = np.bincount(s[0], minlength=4) / 400
  np.testing.assert_allclose(freq, [0.1, 0.0, 0.6, 0.3], atol=0.08)
  freq = np.bincount(s[1], minlength=4) / 400
  np.testing.assert_allclose(freq, [0.25, 0.25, 0.0, 0.5], atol=0.08)
  assert Tensor([0.2, 0.8]).multinomial().shape == (1,)

def test_multinomial_without_replacement(device):
  Tensor.manual_seed(2)
  p = Tensor([[1.0, 2.0, 0.0, 3.0, 4.0]] * 3)
  s = p.multinomial(4).numpy()
  for row in s: assert sorted(row.tolist()) == [0, 1, 3, 4]   # distinct, never the zero-weight class
  first = Tensor([1.0, 20.0, 1.0]).multinomial(1)
  assert first.shape == (1,)
  with pytest.raises(ValueError, match=r"(?s)multinomial: cannot sample 6 > 5 classes without replacement"): p.multinomial(6)

def test_bernoulli(device):
  Tensor.manual_seed(3)
  p = Tensor([[0.0, 0.3, 1.0]] * 300)
  b = p.bernoulli()
  assert b.dtype == dtypes.float32
  b = b.numpy()
  assert (b[:, 0] == 0).all() and (b[:, 2] == 1).all() and abs(b[:, 1].mean() - 0.3) < 0.08
  assert abs(Tensor.zeros(500).bernoulli(0.7).numpy().mean() - 0.7) < 0.08

def test_randperm(device):
  Tensor.manual_seed(4)
  a = Tensor.randperm(20)
  assert a.dtype == dtypes.int64 and sorted(a.tolist()) == list(range(20))
  b = Tensor.randperm(20).tolist()
  assert b != a.tolist()
  Tensor.manual_seed(4)
  assert Tensor.randperm(20).tolist() == a.tolist()
  assert Tensor.randperm(0).shape == (0,)

def test_initializers(device):
  # the statistics need many samples: full sizes on CPU, a small smoke run on the (slow) PYTHON interpreter
  big = device != "PYTHON"
  shape = (64, 32, 3, 3) if big else (4, 2, 3, 3)
  fan_in, fan_out = shape[1] * 9, shape[0] * 9
  Tensor.manual_seed(5)
  ku = Tensor.kaiming_uniform(*shape).numpy()
  bound = math.sqrt(2) * math.sqrt(3 / fan_in)
  assert ku.shape == shape and abs(ku).max() <= bound and (abs(ku).max() > 0.95 * bound or not big)
  Tensor.manual_seed(5)
  np.testing.assert_array_equal(Tensor.kaiming_uniform(*shape).numpy(), ku)   # reproducible from the seed
  gu = Tensor.glorot_uniform(shape).numpy()
  b = math.sqrt(6 / (fan_in + fan_out))
  assert abs(gu).max() <= b and (abs(gu).max() > 0.95 * b or not big)
  assert Tensor.xavier_uniform == Tensor.glorot_uniform   # one class method under two names (bound anew on each access)
  assert Tensor.kaiming_uniform(4, 3, requires_grad=True).requires_grad
  with pytest.raises(ValueError, match="(?s)kaiming_uniform: fan in and fan out"): Tensor.kaiming_uniform(5)
  tn = Tensor.trunc_normal(5000 if big else 50, 2, mean=1.0, std=2.0, a=-1.0, b=4.0).numpy()
  assert tn.min() >= -1.0 and tn.max() <= 4.0
  if not big: return
  kn = Tensor.kaiming_normal(shape, a=0.1, mode="fan_out").numpy()
  assert abs(kn.std() - math.sqrt(2 / 1.01) / math.sqrt(fan_out)) < 0.005
  gn = Tensor.xavier_normal(128, 64).numpy()
  assert abs(gn.std() - math.sqrt(2 / 192)) < 0.005
  ref = torch.nn.init.trunc_normal_(torch.empty(200000), mean=1.0, std=2.0, a=-1.0, b=4.0).numpy()
  assert abs(tn.mean() - ref.mean()) < 0.05 and abs(tn.std() - ref.std()) < 0.05

# ------------------------------------------------------------------ errors name the op, the operands and the user's line

def check_error(exc, fn, op, *needles):
  import os, sys
  line = sys._getframe(1).f_lineno
  with pytest.raises(exc) as e: fn()
  msg = str(e.value)
  assert msg.startswith(op + ":"), msg
  for n in needles: assert str(n) in msg, f"{n!r} not in {msg}"
  assert f"{os.path.basename(__file__)}:{line}" in msg, msg

def test_errors_at_call(device):
  x, w = Tensor.zeros(1, 3, 5, 5), Tensor.zeros(2, 2, 3, 3)
  check_error(ValueError, lambda: x.conv2d(w), "conv2d", (1, 3, 5, 5), (2, 2, 3, 3), "3 channels")
  check_error(ValueError, lambda: x.conv_transpose2d(w), "conv_transpose2d", (1, 3, 5, 5), (2, 2, 3, 3))
  check_error(ValueError, lambda: Tensor.zeros(1, 2, 5).conv1d(Tensor.zeros(2, 2, 9)), "conv1d", "larger")
  check_error(ValueError, lambda: x.max_pool2d(6), "max_pool2d", (1, 3, 5, 5), "larger")
  check_error(ValueError, lambda: x.avg_pool2d((2, 2), padding=2), "avg_pool2d", "half of effective kernel")
  check_error(ValueError, lambda: x.im2col(7), "im2col", "larger")
  check_error(ValueError, lambda: x.cross_entropy(Tensor([0, 1])), "cross_entropy", (1, 3, 5, 5), (2,))
  check_error(ValueError, lambda: x.l1_loss(Tensor.zeros(3)), "l1_loss", (1, 3, 5, 5), (3,))
  check_error(ValueError, lambda: x.group_norm(2), "group_norm", "(3)")
  check_error(ValueError, lambda: x.interpolate(size=(2, 2, 2, 2, 2)), "interpolate", "size must be 2")
  check_error(ValueError, lambda: x.pad_mode((5, 5), "reflect"), "pad", "reflect padding")
  check_error(ValueError, lambda: Tensor.zeros(3).multinomial(4), "multinomial", "without replacement")
  check_error(ValueError, lambda: x.dropout(-0.1), "dropout", "between 0 and 1")
  check_error(ValueError, lambda: Tensor.trunc_normal(3, a=2, b=1), "trunc_normal", "a < b")
