"""Honest Triton candidate for softmax: each program handles ROWS rows at once as a 2D tile
(rows x padded columns), subtracting each row's maximum before exp for stability. The launch
lives in a small nn.Module (TritonRowSoftmax) that ModelNew holds as a submodule."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_rows_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x, stride_y,
                        ROWS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride_x + cols[None, :], mask=mask,
                other=-float("inf"))
    row_max = tl.max(x, axis=1)
    # fully masked (padding) rows: keep them finite, they are never stored
    row_max = tl.where(rows < n_rows, row_max, 0.0)
    num = tl.exp(x - row_max[:, None])
    num = tl.where(mask, num, 0.0)
    den = tl.sum(num, axis=1)
    den = tl.where(den > 0, den, 1.0)
    tl.store(y_ptr + rows[:, None] * stride_y + cols[None, :], num / den[:, None], mask=mask)


class TritonRowSoftmax(nn.Module):
    def __init__(self, rows_per_program: int = 4):
        super().__init__()
        self.rows = rows_per_program

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        BLOCK = triton.next_power_of_2(n_cols)
        grid = (triton.cdiv(n_rows, self.rows),)
        softmax_rows_kernel[grid](x, y, n_rows, n_cols, x.stride(0), y.stride(0),
                                  ROWS=self.rows, BLOCK=BLOCK)
        return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.softmax = TritonRowSoftmax(rows_per_program=4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.softmax(x)
