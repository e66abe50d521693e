"""Honest Triton candidate for reduction_sum: a two-stage reduction that avoids atomics.

The input is seen as (outer, R, inner) around the reduced dimension. Stage 1 splits R into
chunks: each program sums one (outer, chunk, inner block) tile into its own slot of a fresh
partials buffer (outer, n_chunks, inner). Stage 2 sums the partials of each (outer, inner)
in a fixed order and writes the keepdim output. Deterministic, fp32 accumulation."""
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_sum_kernel(x_ptr, p_ptr, R, INNER, N_CHUNKS, CHUNK,
                       BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    pid_o = tl.program_id(0)
    pid_c = tl.program_id(1)
    pid_i = tl.program_id(2)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    i_ok = offs_i < INNER
    r_start = pid_c * CHUNK
    acc = tl.zeros((BLOCK_I,), dtype=tl.float32)
    for r0 in range(0, CHUNK, BLOCK_R):
        r = r_start + r0 + tl.arange(0, BLOCK_R)
        mask = (r[:, None] < R) & (r[:, None] < r_start + CHUNK) & i_ok[None, :]
        tile = tl.load(x_ptr + pid_o * R * INNER + r[:, None] * INNER + offs_i[None, :],
                       mask=mask, other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(p_ptr + (pid_o * N_CHUNKS + pid_c) * INNER + offs_i, acc, mask=i_ok)


@triton.jit
def combine_kernel(p_ptr, y_ptr, INNER, N_CHUNKS, BLOCK_I: tl.constexpr):
    pid_o = tl.program_id(0)
    pid_i = tl.program_id(1)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    i_ok = offs_i < INNER
    acc = tl.zeros((BLOCK_I,), dtype=tl.float32)
    for c in range(0, N_CHUNKS):
        acc += tl.load(p_ptr + (pid_o * N_CHUNKS + c) * INNER + offs_i, mask=i_ok, other=0.0)
    tl.store(y_ptr + pid_o * INNER + offs_i, acc, mask=i_ok)


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
        CHUNK, BLOCK_R, BLOCK_I = 16, 16, 64
        n_chunks = triton.cdiv(r, CHUNK)
        partials = torch.empty((outer, n_chunks, inner), device=x.device, dtype=torch.float32)
        partial_sum_kernel[(outer, n_chunks, triton.cdiv(inner, BLOCK_I))](
            x, partials, r, inner, n_chunks, CHUNK, BLOCK_R=BLOCK_R, BLOCK_I=BLOCK_I)
        y = torch.empty(shape[:dim] + [1] + shape[dim + 1:], device=x.device, dtype=x.dtype)
        combine_kernel[(outer, triton.cdiv(inner, BLOCK_I))](partials, y, inner, n_chunks,
                                                              BLOCK_I=BLOCK_I)
        return y
