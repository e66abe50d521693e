"""05_add_mul_gelu.py: load_inline built first call, block 256, extra_cflags none."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void add_mul_gelu_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                    const float* __restrict__ z, float* __restrict__ out,
                                    int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = (x[i] + y[i]) * z[i];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

torch::Tensor add_mul_gelu(torch::Tensor x, torch::Tensor y, torch::Tensor z) {
    auto xc = x.contiguous(), yc = y.contiguous(), zc = z.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = 256;
    const int blocks = (int)((n + threads - 1) / threads);
    add_mul_gelu_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), yc.data_ptr<float>(),
                                             zc.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

def _build():
    return load_inline(
        name='crucible_add_mul_gelu_first_call_256_plain',
        cpp_sources='torch::Tensor add_mul_gelu(torch::Tensor x, torch::Tensor y, torch::Tensor z);',
        cuda_sources=CUDA_SOURCE,
        functions=['add_mul_gelu'],
        extra_cuda_cflags=['-O3'],
        verbose=False,
    )


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = None

    def forward(self, x, y, z):
        if self.ext is None:
            self.ext = _build()
        ext = self.ext
        return ext.add_mul_gelu(x, y, z)
