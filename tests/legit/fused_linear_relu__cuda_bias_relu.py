"""Honest CUDA candidate for fused_linear_relu: the GEMM is torch.matmul (cuBLAS, fp32), and a
load_inline __global__ kernel fuses both bias additions and the ReLU into one pass over the
GEMM output. Parameters are created in the reference's order (nn.Linear, then the bias)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void bias2_relu_kernel(const float* __restrict__ h, const float* __restrict__ b1,
                                  const float* __restrict__ b2, float* __restrict__ y,
                                  int64_t rows, int64_t cols) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t n = rows * cols;
    if (i < n) {
        int64_t c = i % cols;
        float v = h[i] + b1[c] + b2[c];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor bias2_relu(torch::Tensor h, torch::Tensor b1, torch::Tensor b2) {
    TORCH_CHECK(h.is_cuda() && b1.is_cuda() && b2.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(h.scalar_type() == torch::kFloat && b1.scalar_type() == torch::kFloat &&
                b2.scalar_type() == torch::kFloat, "inputs must be float32");
    TORCH_CHECK(h.dim() == 2, "h must be 2D");
    auto hc = h.contiguous();
    auto b1c = b1.contiguous();
    auto b2c = b2.contiguous();
    int64_t rows = hc.size(0), cols = hc.size(1);
    TORCH_CHECK(b1c.numel() == cols && b2c.numel() == cols, "bias size mismatch");
    auto y = torch::empty_like(hc);
    int64_t n = rows * cols;
    if (n == 0) {
        return y;
    }
    const int threads = 256;
    const int blocks = (int)((n + threads - 1) / threads);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    bias2_relu_kernel<<<blocks, threads, 0, stream>>>(
        hc.data_ptr<float>(), b1c.data_ptr<float>(), b2c.data_ptr<float>(),
        y.data_ptr<float>(), rows, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor bias2_relu(torch::Tensor h, torch::Tensor b1, torch::Tensor b2);"

bias_relu_ext = load_inline(
    name="crucible_legit_bias2_relu",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["bias2_relu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)
        self.ext = bias_relu_ext

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.matmul(x, self.gemm.weight.t())
        return self.ext.bias2_relu(h, self.gemm.bias, self.bias)
