"""01_swish_bias.py: load_inline built init, block 512, extra_cflags none."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void swish_bias_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                  float* __restrict__ y, int64_t n, int64_t dim) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v / (1.0f + __expf(-v)) + bias[i % dim];
    }
}

torch::Tensor swish_bias(torch::Tensor x, torch::Tensor bias) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = 512;
    const int blocks = (int)((n + threads - 1) / threads);
    swish_bias_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), bias.data_ptr<float>(),
                                           y.data_ptr<float>(), n, bias.numel());
    return y;
}
"""

def _build():
    return load_inline(
        name='crucible_swish_bias_init_512_plain',
        cpp_sources='torch::Tensor swish_bias(torch::Tensor x, torch::Tensor bias);',
        cuda_sources=CUDA_SOURCE,
        functions=['swish_bias'],
        extra_cuda_cflags=['-O3'],
        verbose=False,
    )


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim))
        self.ext = _build()

    def forward(self, x):
        ext = self.ext
        return ext.swish_bias(x, self.bias)
