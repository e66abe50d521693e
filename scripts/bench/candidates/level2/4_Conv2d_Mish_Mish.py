# Crucible GPU benchmark candidate for level2/4_Conv2d_Mish_Mish.py:
# the convolution stays cuDNN; both Mish activations run as ONE Triton kernel, in place.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _mish(x):
    # mish(x) = x * tanh(softplus(x)); softplus with torch's threshold (20); softplus >= 0,
    # so tanh(sp) = (1 - e^{-2 sp}) / (1 + e^{-2 sp}) is stable.
    sp = tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))
    t = tl.exp(-2.0 * sp)
    return x * ((1.0 - t) / (1.0 + t))


@triton.jit
def _mish_mish_kernel(y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x = _mish(_mish(x))
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        y = self.conv(x).contiguous()
        n = y.numel()
        if n == 0:
            return y
        BLOCK = 1024
        grid = (triton.cdiv(n, BLOCK),)
        _mish_mish_kernel[grid](y, n, BLOCK=BLOCK, num_warps=4)
        return y
