# FAULT (expect CUDA_FAULT) against level1/19_ReLU.py:
# a load_inline CUDA "ReLU" that stores through the invalid pointer (float*)0x10.
# The fault is asynchronous: it surfaces at the next synchronising call
# (e.g. when the harness copies or compares the output).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

bad_cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

__global__ void bad_relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
        // invalid address: volatile so the store cannot be elided
        volatile float* bad = reinterpret_cast<volatile float*>(static_cast<uintptr_t>(0x10));
        *bad = v;
    }
}

torch::Tensor bad_relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "x must be float32");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) {
        return y;
    }
    const int threads = 256;
    const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, (int64_t)1 << 20);
    bad_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

bad_cpp_source = "torch::Tensor bad_relu_forward(torch::Tensor x);"

bad_ext = load_inline(
    name="crucible_smoke_fault_illegal_address_v1",
    cpp_sources=bad_cpp_source,
    cuda_sources=bad_cuda_source,
    functions=["bad_relu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bad_ext.bad_relu_forward(x)
