# WRONG (expect incorrect) for problems/02_row_sum.py: an off-by-one grid never sums the last row.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sum_kernel(x_ptr, y_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        acc += tl.load(x_ptr + row * stride_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x):
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.zeros(n_rows, device=x.device, dtype=x.dtype)
        BLOCK = 1024
        _row_sum_kernel[(n_rows - 1,)](x, y, n_cols, x.stride(0), BLOCK=BLOCK)
        return y
