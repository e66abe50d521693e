"""Correct Triton candidate for reduction_sum.

The input is viewed as (outer, R, inner) around the reduced dimension; each program sums a
BLOCK_I-wide strip of `inner` over R in BLOCK_R chunks, accumulating in fp32.
"""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim_kernel(x_ptr, y_ptr, R, INNER, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    pid_o = tl.program_id(0)
    pid_i = tl.program_id(1)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < INNER
    acc = tl.zeros((BLOCK_I,), dtype=tl.float32)
    base = x_ptr + pid_o * R * INNER
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        mask = (offs_r[:, None] < R) & mask_i[None, :]
        tile = tl.load(base + offs_r[:, None] * INNER + offs_i[None, :], mask=mask, other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(y_ptr + pid_o * INNER + offs_i, acc, mask=mask_i)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        shape = list(x.shape)
        outer = math.prod(shape[:dim])
        r = shape[dim]
        inner = math.prod(shape[dim + 1:])
        out_shape = shape[:dim] + [1] + shape[dim + 1:]
        y = torch.empty(out_shape, device=x.device, dtype=x.dtype)
        BLOCK_R = 32
        BLOCK_I = 128
        grid = (outer, triton.cdiv(inner, BLOCK_I))
        sum_dim_kernel[grid](x, y, r, inner, BLOCK_R=BLOCK_R, BLOCK_I=BLOCK_I)
        return y
