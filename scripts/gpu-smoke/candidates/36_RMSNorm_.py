import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rmsnorm_dim1_kernel(x_ptr, y_ptr, C, S, eps,
                         C_PAD: tl.constexpr, BLOCK_S: tl.constexpr):
    # x viewed as (B, C, S) contiguous; normalise over C for every (b, s).
    # Each program holds a [C_PAD, BLOCK_S] tile in registers: one read, one write.
    pid = tl.program_id(0)
    n_s_blocks = tl.cdiv(S, BLOCK_S)
    b = (pid // n_s_blocks).to(tl.int64)
    pid_s = pid % n_s_blocks
    s_offs = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    c_offs = tl.arange(0, C_PAD)
    mask = (c_offs[:, None] < C) & (s_offs[None, :] < S)
    offs = b * C * S + c_offs[:, None].to(tl.int64) * S + s_offs[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / C
    rms = tl.sqrt(ms + eps)
    y = x / rms[None, :]
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super(ModelNew, self).__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        B, C = x.shape[0], x.shape[1]
        S = x.numel() // max(B * C, 1)
        y = torch.empty_like(x, memory_format=torch.contiguous_format)
        if x.numel() == 0:
            return y
        C_PAD = triton.next_power_of_2(C)
        # keep the register tile at ~8K fp32 elements
        BLOCK_S = max(1, min(triton.next_power_of_2(S), 8192 // C_PAD))
        grid = (B * triton.cdiv(S, BLOCK_S),)
        _rmsnorm_dim1_kernel[grid](x, y, C, S, float(self.eps),
                                   C_PAD=C_PAD, BLOCK_S=BLOCK_S, num_warps=8)
        return y
