"""Honest CUDA candidate for small_mlp: one load_inline kernel computes a whole linear layer
y = x W^T + b (optionally followed by ReLU) with shared-memory tiles; ModelNew calls it once
per layer. Layers are created in the reference's order, so the seeded weights match."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int TILE = 16;

// y[m, n] = sum_k x[m, k] * w[n, k] + b[n]
__global__ void linear_kernel(const float* __restrict__ x, const float* __restrict__ w,
                              const float* __restrict__ b, float* __restrict__ y,
                              int M, int N, int K, bool relu) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE];
    int m = blockIdx.y * TILE + threadIdx.y;
    int n = blockIdx.x * TILE + threadIdx.x;
    int wn = blockIdx.x * TILE + threadIdx.y;   // the weight row this thread stages
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        int k = k0 + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = (m < M && k < K) ? x[(int64_t)m * K + k] : 0.0f;
        ws[threadIdx.y][threadIdx.x] = (wn < N && k < K) ? w[(int64_t)wn * K + k] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) {
            acc += xs[threadIdx.y][kk] * ws[threadIdx.x][kk];
        }
        __syncthreads();
    }
    if (m < M && n < N) {
        float v = acc + b[n];
        y[(int64_t)m * N + n] = (relu && v < 0.0f) ? 0.0f : v;
    }
}

torch::Tensor linear_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, bool relu) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(x.scalar_type() == torch::kFloat && w.scalar_type() == torch::kFloat &&
                b.scalar_type() == torch::kFloat, "inputs must be float32");
    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "shape mismatch");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto bc = b.contiguous();
    int M = (int)xc.size(0), K = (int)xc.size(1), N = (int)wc.size(0);
    TORCH_CHECK(bc.numel() == N, "bias size mismatch");
    auto y = torch::empty({M, N}, xc.options());
    if (M == 0 || N == 0) {
        return y;
    }
    dim3 block(TILE, TILE);
    dim3 grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    linear_kernel<<<grid, block, 0, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(),
                                             bc.data_ptr<float>(), y.data_ptr<float>(),
                                             M, N, K, relu);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = ("torch::Tensor linear_forward(torch::Tensor x, torch::Tensor w, torch::Tensor b, "
              "bool relu);")

linear_ext = load_inline(
    name="crucible_legit_linear_layers",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["linear_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, input_size: int, hidden_sizes, output_size: int):
        super().__init__()
        self.layers = nn.ModuleList()
        current = input_size
        for h in hidden_sizes:
            self.layers.append(nn.Linear(current, h))
            current = h
        self.layers.append(nn.Linear(current, output_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = linear_ext.linear_forward(x, layer.weight, layer.bias, i != last)
        return x
