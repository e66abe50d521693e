# WRONG (expect incorrect) against level1/25_Swish.py: returns sigmoid(x) instead of x * sigmoid(x).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _swish_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    # 1D grid over numel; int64 offsets so numel > 2**31 stays addressable.
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = 1.0 / (1.0 + tl.exp(-x))  # BUG: forgot the x * factor
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        n = x.numel()
        if n == 0:
            return y
        BLOCK = 4096
        grid = (triton.cdiv(n, BLOCK),)
        _swish_kernel[grid](x, y, n, BLOCK=BLOCK, num_warps=8)
        return y
