"""Honest Triton candidate for elementwise_relu: a fixed number of programs, each walking
the tensor in BLOCK-sized steps (grid-stride loop), so the grid does not grow with the input."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_grid_stride_kernel(x_ptr, y_ptr, n_elements, num_programs,
                            BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    for i in range(ITERS):
        block = pid + i * num_programs
        offs = block * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n_elements
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(y_ptr + offs, tl.where(x > 0, x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        BLOCK = 512
        n_blocks = triton.cdiv(n, BLOCK)
        num_programs = min(n_blocks, 8)
        iters = triton.cdiv(n_blocks, num_programs)
        relu_grid_stride_kernel[(num_programs,)](x, y, n, num_programs,
                                                 BLOCK=BLOCK, ITERS=iters)
        return y
