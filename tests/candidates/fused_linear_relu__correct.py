"""Correct Triton candidate for fused_linear_relu: one kernel computes
relu(x @ W^T + b_linear + bias) tile by tile.

Parameters are created exactly like the reference (nn.Linear first, then the extra bias from
torch.randn), so the seeded construction gives identical values."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_bias_relu_kernel(x_ptr, w_ptr, b_ptr, bias_ptr, y_ptr, M, N, K,
                            stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        # W is (N, K); read it transposed as a (BLOCK_K, BLOCK_N) tile.
        w = tl.load(w_ptr + k[:, None] * stride_wk + offs_n[None, :] * stride_wn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    mask_n = offs_n < N
    b = tl.load(b_ptr + offs_n, mask=mask_n, other=0.0)
    extra = tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)
    acc = acc + (b + extra)[None, :]
    acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc,
             mask=(offs_m[:, None] < M) & mask_n[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.gemm.weight
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 64
        grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
        linear_bias_relu_kernel[grid](x, w, self.gemm.bias, self.bias, y, M, N, K,
                                      x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                                      y.stride(0), y.stride(1),
                                      BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
        return y
