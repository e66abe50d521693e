# FAULT (expect COMPILATION) against level1/19_ReLU.py: load_inline with CUDA source
# that nvcc rejects (undeclared identifier), raised while importing the candidate.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

broken_cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <cstdint>

__global__ void broken_relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = fmaxf(x[i], undeclared_zero_value);
    }
}

torch::Tensor broken_relu_forward(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    broken_relu_kernel<<<(unsigned)((n + 255) / 256), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

broken_cpp_source = "torch::Tensor broken_relu_forward(torch::Tensor x);"

broken_ext = load_inline(
    name="crucible_smoke_fault_compile_error_v1",
    cpp_sources=broken_cpp_source,
    cuda_sources=broken_cuda_source,
    functions=["broken_relu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return broken_ext.broken_relu_forward(x)
