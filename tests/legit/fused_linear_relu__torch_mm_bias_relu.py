"""Honest candidate for fused_linear_relu: the GEMM stays in torch (torch.matmul, cuBLAS on a
GPU, fp32), and one Triton kernel on a 2D grid fuses the two bias additions and the ReLU in a
single pass over the GEMM output, writing into a freshly allocated output.

Parameters are created in the reference's order (nn.Linear, then the extra bias)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias2_relu_kernel(h_ptr, b1_ptr, b2_ptr, y_ptr, M, N, stride_hm, stride_ym,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    mask = (rows[:, None] < M) & col_ok[None, :]
    h = tl.load(h_ptr + rows[:, None] * stride_hm + cols[None, :], mask=mask, other=0.0)
    b = tl.load(b1_ptr + cols, mask=col_ok, other=0.0) + tl.load(b2_ptr + cols, mask=col_ok,
                                                                 other=0.0)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :],
             tl.maximum(h + b[None, :], 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.matmul(x, self.gemm.weight.t()).contiguous()
        M, N = h.shape
        y = torch.empty_like(h)
        BLOCK_M, BLOCK_N = 16, 64
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        bias2_relu_kernel[grid](h, self.gemm.bias, self.bias, y, M, N, h.stride(0), y.stride(0),
                                BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        return y
