"""Honest Triton candidate for fused_linear_relu: one program per block of rows computes the
whole output row block (all N columns in one tile) with tl.dot over K in BLOCK_K steps
(fp32 accumulator, IEEE fp32 inputs), then adds both biases and applies the ReLU before the
single store. The weight is read in its nn.Linear (N, K) layout through its strides."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fused_rows_kernel(x_ptr, w_ptr, b_ptr, extra_ptr, y_ptr, M, N, K,
                      stride_xm, stride_wn, stride_ym,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + ks
        k_ok = k < K
        x = tl.load(x_ptr + rows[:, None] * stride_xm + k[None, :],
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        wt = tl.load(w_ptr + cols[None, :] * stride_wn + k[:, None],
                     mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc += tl.dot(x, wt, input_precision="ieee")
    bias = tl.load(b_ptr + cols, mask=col_ok, other=0.0) + tl.load(extra_ptr + cols,
                                                                   mask=col_ok, other=0.0)
    out = tl.maximum(acc + bias[None, :], 0.0)
    tl.store(y_ptr + rows[:, None] * stride_ym + cols[None, :], out,
             mask=row_ok[:, None] & col_ok[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.gemm.weight.contiguous()
        M, K = x.shape
        N = w.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=torch.float32)
        BLOCK_M, BLOCK_K = 16, 32
        BLOCK_N = max(16, triton.next_power_of_2(N))
        fused_rows_kernel[(triton.cdiv(M, BLOCK_M),)](
            x, w, self.gemm.bias, self.bias, y, M, N, K, x.stride(0), w.stride(0), y.stride(0),
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
        return y
