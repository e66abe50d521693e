import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _log_softmax_row_kernel(x_ptr, y_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    # One program per row: online max / sum-of-exp, then y = x - max - log(sum).
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_row
    y_row = y_ptr + row * stride_row
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        # lanes that have only seen masked values keep m_new == -inf: shift by 0 there so
        # exp(-inf - 0) = 0 instead of exp(-inf - -inf) = nan
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)
        p = tl.exp(x - m_safe)
        s = s * alpha + p
        m = m_new
    row_max = tl.max(m, axis=0)
    scale = tl.exp(m - row_max)  # 0 for lanes that never saw data (m == -inf)
    row_sum = tl.sum(s * scale, axis=0)
    shift = row_max + tl.log(row_sum)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (x - shift).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.dim % x.dim()
        # move the softmax dim last (a no-op for the problem's (batch, dim) input with dim=1)
        xt = x.movedim(dim, -1).contiguous()
        n_cols = xt.shape[-1]
        x2 = xt.view(-1, n_cols)
        y2 = torch.empty_like(x2)
        if x2.numel() > 0:
            BLOCK = 4096
            _log_softmax_row_kernel[(x2.shape[0],)](x2, y2, n_cols, x2.stride(0), BLOCK=BLOCK, num_warps=8)
        return y2.view(xt.shape).movedim(-1, dim).contiguous()
