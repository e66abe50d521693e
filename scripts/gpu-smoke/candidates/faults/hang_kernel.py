# FAULT (expect TIMEOUT) against level1/19_ReLU.py:
# a Triton kernel whose loop never terminates at runtime. The loop counter starts
# at, and is stepped by, a value loaded from device memory (0), so the compiler
# cannot prove the trip count; the loop result is stored, so it is not dead code.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_hang_kernel(x_ptr, y_ptr, step_ptr, n_elements, limit, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    step = tl.load(step_ptr)  # == 0 at runtime
    i = step
    acc = tl.maximum(x, 0.0)
    while i < limit:  # never false: i stays 0
        acc = acc * 0.5 + tl.maximum(x, 0.0) * 0.5
        i += step
    tl.store(y_ptr + offs, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        step = torch.zeros(1, dtype=torch.int32, device=x.device)
        n = x.numel()
        BLOCK = 1024
        grid = (triton.cdiv(n, BLOCK),)
        _relu_hang_kernel[grid](x, y, step, n, 1000, BLOCK=BLOCK, num_warps=4)
        return y
