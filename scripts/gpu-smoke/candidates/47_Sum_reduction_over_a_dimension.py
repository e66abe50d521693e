import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sum_dim_kernel(x_ptr, y_ptr, R, INNER,
                     BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    # x viewed as (OUTER, R, INNER) contiguous; reduce over R.
    # 1D grid of OUTER * cdiv(INNER, BLOCK_I) programs; each owns BLOCK_I contiguous
    # inner positions of one outer index and walks R in BLOCK_R-row tiles
    # (loads are coalesced along INNER).
    pid = tl.program_id(0)
    n_i_blocks = tl.cdiv(INNER, BLOCK_I)
    o = (pid // n_i_blocks).to(tl.int64)
    pid_i = pid % n_i_blocks
    i_offs = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    i_mask = i_offs < INNER
    r_base = tl.arange(0, BLOCK_R)
    base = x_ptr + o * R * INNER
    acc = tl.zeros([BLOCK_R, BLOCK_I], tl.float32)
    for r0 in range(0, R, BLOCK_R):
        r = r0 + r_base
        mask = (r[:, None] < R) & i_mask[None, :]
        ptrs = base + r[:, None].to(tl.int64) * INNER + i_offs[None, :]
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    res = tl.sum(acc, axis=0)
    tl.store(y_ptr + o * INNER + i_offs, res.to(y_ptr.dtype.element_ty), mask=i_mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        d = self.dim % x.dim()
        shape = list(x.shape)
        R = shape[d]
        OUTER = 1
        for s in shape[:d]:
            OUTER *= s
        INNER = 1
        for s in shape[d + 1:]:
            INNER *= s
        out_shape = shape[:d] + [1] + shape[d + 1:]  # keepdim=True
        y = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        if y.numel() == 0:
            return y
        BLOCK_R = 32
        BLOCK_I = 128
        grid = (OUTER * triton.cdiv(INNER, BLOCK_I),)
        _sum_dim_kernel[grid](x, y, R, INNER, BLOCK_R=BLOCK_R, BLOCK_I=BLOCK_I, num_warps=8)
        return y
