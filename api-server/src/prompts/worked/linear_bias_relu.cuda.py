import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

#define TILE 16

// out = relu(x @ w^T + b), x (M, K), w (N, K) as nn.Linear stores it. Each block computes a
// TILE x TILE tile of out from TILE-wide slices of x and w staged in shared memory; the bias and
// the ReLU are applied before the one store.
__global__ void linear_bias_relu_kernel(const float* x, const float* w, const float* b,
                                        float* out, int M, int N, int K) {
    __shared__ float xs[TILE][TILE];
    __shared__ float ws[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        int kx = k0 + threadIdx.x;
        int kw = k0 + threadIdx.y;
        xs[threadIdx.y][threadIdx.x] = (row < M && kx < K) ? x[(long)row * K + kx] : 0.f;
        int wrow = blockIdx.x * TILE + threadIdx.x;
        ws[threadIdx.y][threadIdx.x] = (wrow < N && kw < K) ? w[(long)wrow * K + kw] : 0.f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += xs[threadIdx.y][k] * ws[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) out[(long)row * N + col] = fmaxf(acc + b[col], 0.f);
}

torch::Tensor linear_bias_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && b.is_cuda(), "CUDA tensors");
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    int M = xc.size(0), K = xc.size(1), N = wc.size(0);
    auto out = torch::empty({M, N}, xc.options());
    dim3 threads(TILE, TILE);
    dim3 blocks((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
    linear_bias_relu_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), wc.data_ptr<float>(),
                                                 b.contiguous().data_ptr<float>(),
                                                 out.data_ptr<float>(), M, N, K);
    return out;
}
"""

cpp_source = "torch::Tensor linear_bias_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b);"

fused = load_inline(
    name="worked_linear_bias_relu",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["linear_bias_relu"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        # Same parameters, created in the same order as Model's nn.Linear.
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused.linear_bias_relu(x, self.linear.weight, self.linear.bias)
