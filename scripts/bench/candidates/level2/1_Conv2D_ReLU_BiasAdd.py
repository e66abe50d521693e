# Crucible GPU benchmark candidate for level2/1_Conv2D_ReLU_BiasAdd.py:
# the convolution stays cuDNN (F.conv2d with its own bias); ReLU and the per-channel bias add
# run as ONE fused Triton kernel, in place on the convolution output.
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _relu_bias_kernel(y_ptr, b_ptr, n_elements, hw, channels, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    c = (offs // hw) % channels
    x = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + c, mask=mask, other=0.0).to(tl.float32)
    x = tl.maximum(x, 0.0) + b
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        y = self.conv(x).contiguous()
        n = y.numel()
        if n == 0:
            return y
        channels = y.shape[1]
        hw = y.shape[2] * y.shape[3]
        BLOCK = 1024
        grid = (triton.cdiv(n, BLOCK),)
        _relu_bias_kernel[grid](y, self.bias.contiguous(), n, hw, channels, BLOCK=BLOCK, num_warps=4)
        return y
