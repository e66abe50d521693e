"""Honest Triton candidate for elementwise_relu: a 2D grid over (row blocks, column blocks)
that reads the input through its strides, so a non-contiguous (e.g. transposed) 2D input
needs no copy; inputs of any other rank are flattened with .contiguous() first. The kernel
is launched through a module-level helper."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_2d_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_xr, stride_xc, stride_yr, stride_yc,
                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride_xr + cols[None, :] * stride_xc, mask=mask)
    tl.store(y_ptr + rows[:, None] * stride_yr + cols[None, :] * stride_yc,
             tl.maximum(x, 0.0), mask=mask)


def relu_2d(x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 2:
        flat = x.contiguous().view(1, -1)
        return relu_2d(flat).view(x.shape)
    n_rows, n_cols = x.shape
    y = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
    BLOCK_R, BLOCK_C = 8, 256
    grid = (triton.cdiv(n_rows, BLOCK_R), triton.cdiv(n_cols, BLOCK_C))
    relu_2d_kernel[grid](x, y, n_rows, n_cols, x.stride(0), x.stride(1),
                         y.stride(0), y.stride(1), BLOCK_R=BLOCK_R, BLOCK_C=BLOCK_C)
    return y


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_2d(x)
