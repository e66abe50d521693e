# Crucible GPU benchmark candidate for level2/25_Conv2d_Min_Tanh_Tanh.py:
# the convolution stays cuDNN; the minimum over channels and both tanh run as ONE Triton
# kernel (one program per block of output pixels, looping over the channels).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _stable_tanh(x):
    t = tl.exp(-2.0 * tl.abs(x))
    th = (1.0 - t) / (1.0 + t)
    return tl.where(x >= 0, th, -th)


@triton.jit
def _min_tanh_tanh_kernel(y_ptr, out_ptr, n_pixels, hw, channels, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_pixels
    n = offs // hw
    p = offs % hw
    base = n * channels * hw + p
    m = tl.full([BLOCK], float("inf"), tl.float32)
    for c in range(0, channels):
        v = tl.load(y_ptr + base + c * hw, mask=mask, other=float("inf")).to(tl.float32)
        m = tl.minimum(m, v)
    m = _stable_tanh(_stable_tanh(m))
    tl.store(out_ptr + offs, m.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super(ModelNew, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        y = self.conv(x).contiguous()
        b, c, h, w = y.shape
        out = torch.empty((b, 1, h, w), device=y.device, dtype=y.dtype)
        n_pixels = b * h * w
        if n_pixels == 0:
            return out
        BLOCK = 256
        grid = (triton.cdiv(n_pixels, BLOCK),)
        _min_tanh_tanh_kernel[grid](y, out, n_pixels, h * w, c, BLOCK=BLOCK, num_warps=4)
        return out
