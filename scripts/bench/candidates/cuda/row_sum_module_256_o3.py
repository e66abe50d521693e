"""02_row_sum.py: load_inline built module, block 256, extra_cflags ['-O3']."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t dim) {
    __shared__ float partial[256];
    const float* row = x + (int64_t)blockIdx.x * dim;
    float acc = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        acc += row[j];
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            partial[threadIdx.x] += partial[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[blockIdx.x] = partial[0];
    }
}

torch::Tensor row_sum(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty({xc.size(0)}, xc.options());
    row_sum_kernel<<<(int)xc.size(0), 256>>>(xc.data_ptr<float>(), out.data_ptr<float>(),
                                               xc.size(1));
    return out;
}
"""

_ext = load_inline(
    name='crucible_row_sum_module_256_o3',
    cpp_sources='// crucible_row_sum_module_256_o3: block 256\ntorch::Tensor row_sum(torch::Tensor x);',
    cuda_sources=CUDA_SOURCE,
    functions=['row_sum'],
    extra_cflags=['-O3'],
    extra_cuda_cflags=['-O3'],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        ext = _ext
        return ext.row_sum(x)
