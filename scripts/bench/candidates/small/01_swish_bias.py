# Small-batch candidate for problems/01_swish_bias.py: x * sigmoid(x) + bias, one pass.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _swish_bias_kernel(x_ptr, b_ptr, y_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + offs % n_cols, mask=mask, other=0.0).to(tl.float32)
    y = x / (1.0 + tl.exp(-x)) + b
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super(ModelNew, self).__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        BLOCK = 1024
        _swish_bias_kernel[(triton.cdiv(n, BLOCK),)](x, self.bias, y, n, x.shape[-1], BLOCK=BLOCK)
        return y
