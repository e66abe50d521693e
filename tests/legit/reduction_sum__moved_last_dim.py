"""Honest Triton candidate for reduction_sum: the reduced dimension is moved last
(movedim, then .contiguous() to materialise the non-contiguous view), so every program sums
contiguous rows; BLOCK_ROWS rows per program, the row walked in BLOCK_C chunks, fp32
accumulation. The kernel is reached through a module-level function."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, y_ptr, n_rows, n_cols,
                   BLOCK_ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < n_rows
    acc = tl.zeros((BLOCK_ROWS,), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK_C):
        cols = c0 + tl.arange(0, BLOCK_C)
        tile = tl.load(x_ptr + rows[:, None] * n_cols + cols[None, :],
                       mask=row_ok[:, None] & (cols[None, :] < n_cols), other=0.0)
        acc += tl.sum(tile, axis=1)
    tl.store(y_ptr + rows, acc, mask=row_ok)


def sum_keepdim(x: torch.Tensor, dim: int) -> torch.Tensor:
    dim = dim % x.dim()
    moved = torch.movedim(x, dim, -1).contiguous()
    n_cols = moved.shape[-1]
    n_rows = moved.numel() // n_cols
    out = torch.empty(n_rows, device=x.device, dtype=x.dtype)
    BLOCK_ROWS, BLOCK_C = 16, 64
    row_sum_kernel[(triton.cdiv(n_rows, BLOCK_ROWS),)](moved, out, n_rows, n_cols,
                                                       BLOCK_ROWS=BLOCK_ROWS, BLOCK_C=BLOCK_C)
    out_shape = list(moved.shape[:-1]) + [1]
    return torch.movedim(out.view(out_shape), -1, dim).contiguous()


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_keepdim(x, self.dim)
