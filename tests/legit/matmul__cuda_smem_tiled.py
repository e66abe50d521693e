"""Honest CUDA candidate for matmul: the classic shared-memory tiled kernel, 16x16 tiles of
A and B staged in shared memory, fp32 accumulation, bounds-checked on M, N and K."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int TILE = 16;

__global__ void tiled_matmul_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                    float* __restrict__ c, int M, int N, int K) {
    __shared__ float as[TILE][TILE];
    __shared__ float bs[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        int ka = k0 + threadIdx.x;
        int kb = k0 + threadIdx.y;
        as[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? a[(int64_t)row * K + ka] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? b[(int64_t)kb * N + col] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE; ++k) {
            acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        c[(int64_t)row * N + col] = acc;
    }
}

torch::Tensor tiled_matmul(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat,
                "inputs must be float32");
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "shape mismatch");
    auto ac = a.contiguous();
    auto bc = b.contiguous();
    int M = (int)ac.size(0), K = (int)ac.size(1), N = (int)bc.size(1);
    auto c = torch::empty({M, N}, ac.options());
    if (M == 0 || N == 0) {
        return c;
    }
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    tiled_matmul_kernel<<<grid, block, 0, stream>>>(
        ac.data_ptr<float>(), bc.data_ptr<float>(), c.data_ptr<float>(), M, N, K);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return c;
}
"""

cpp_source = "torch::Tensor tiled_matmul(torch::Tensor a, torch::Tensor b);"

matmul_ext = load_inline(
    name="crucible_legit_tiled_matmul",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["tiled_matmul"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return matmul_ext.tiled_matmul(A, B)
