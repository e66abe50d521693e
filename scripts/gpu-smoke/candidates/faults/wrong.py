# FAULT (expect incorrect / CORRECTNESS) against level1/19_ReLU.py:
# a plausible ReLU with an off-by-one in the load index: y[i] = relu(x[i + 1])
# (the last element reads 0). Every element is wrong for random inputs, and the
# output is fully written, so no stale memory can make it pass by accident.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_off_by_one_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    src = offs + 1  # off by one
    x = tl.load(x_ptr + src, mask=src < n_elements, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        BLOCK = 4096
        grid = (triton.cdiv(n, BLOCK),)
        _relu_off_by_one_kernel[grid](x, y, n, BLOCK=BLOCK, num_warps=8)
        return y
