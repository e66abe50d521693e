import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _l1norm_row_kernel(x_ptr, y_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    # One program per row: mean(|x|) over the row, then y = x / mean.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_row
    y_row = y_ptr + row * stride_row
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
        acc += tl.abs(x)
    mean = tl.sum(acc, axis=0) / n_cols
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (x / mean).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (batch, dim) input, normalised over dim=1
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        if x.numel() == 0:
            return y
        BLOCK = 4096
        _l1norm_row_kernel[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK=BLOCK, num_warps=8)
        return y
