# FAILING (expect INSTANTIATION) against level1/20_LeakyReLU.py: the class is misnamed, so
# there is no ModelNew to build.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _leaky_relu_kernel(x_ptr, y_ptr, n_elements, slope, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.where(x >= 0, x, x * slope), mask=mask)


class ModelNewLeaky(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super(ModelNewLeaky, self).__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        BLOCK = 4096
        _leaky_relu_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, self.negative_slope, BLOCK=BLOCK)
        return y
