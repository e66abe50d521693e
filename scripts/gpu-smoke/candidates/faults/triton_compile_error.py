# FAULT (expect COMPILATION) against level1/19_ReLU.py: the Triton kernel fails to
# compile on first launch (tl.arange needs a power-of-two range; 1000 is not).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_bad_arange_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        BLOCK = 1000  # not a power of two -> CompilationError
        grid = (triton.cdiv(n, BLOCK),)
        _relu_bad_arange_kernel[grid](x, y, n, BLOCK=BLOCK)
        return y
