"""The CUDA ReLU built on its first call: load_inline runs in forward the first time. The CPU
stage's dry run calls forward once, which builds it there, not on the device stage."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

// Grid-stride loop with 64-bit indices: numel may exceed 2^31.
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        const float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "relu_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) {
        return y;
    }
    const int threads = 256;
    const int64_t needed = (n + threads - 1) / threads;
    const int blocks = (int)std::min<int64_t>(needed, (int64_t)1 << 20);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    relu_kernel<<<blocks, threads, 0, stream>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

relu_cpp_source = "torch::Tensor relu_forward(torch::Tensor x);"


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()
        self.ext = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ext is None:
            self.ext = load_inline(
                name="crucible_smoke_relu_cuda_lazy_call",
                cpp_sources=relu_cpp_source,
                cuda_sources=relu_cuda_source,
                functions=["relu_forward"],
                extra_cuda_cflags=["-O3"],
                verbose=False,
            )
        return self.ext.relu_forward(x)
