"""Honest CUDA candidate for reduction_sum: the input is seen as (outer, R, inner) around the
reduced dimension; each thread owns one (outer, inner) output and sums its R values in fp32
(consecutive threads read consecutive inner addresses: coalesced)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void sum_dim_kernel(const float* __restrict__ x, float* __restrict__ y,
                               int64_t outer, int64_t r, int64_t inner) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= outer * inner) {
        return;
    }
    int64_t o = i / inner;
    int64_t in = i % inner;
    const float* p = x + o * r * inner + in;
    float acc = 0.0f;
    for (int64_t k = 0; k < r; ++k) {
        acc += p[k * inner];
    }
    y[i] = acc;
}

torch::Tensor sum_dim_keepdim(torch::Tensor x, int64_t dim) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat, "x must be float32");
    TORCH_CHECK(x.dim() > 0, "x must have at least one dimension");
    auto xc = x.contiguous();
    int64_t nd = xc.dim();
    if (dim < 0) {
        dim += nd;
    }
    TORCH_CHECK(dim >= 0 && dim < nd, "dim out of range");
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) {
        outer *= xc.size(d);
    }
    for (int64_t d = dim + 1; d < nd; ++d) {
        inner *= xc.size(d);
    }
    int64_t r = xc.size(dim);
    std::vector<int64_t> out_shape(xc.sizes().begin(), xc.sizes().end());
    out_shape[dim] = 1;
    auto y = torch::empty(out_shape, xc.options());
    int64_t n = outer * inner;
    if (n == 0) {
        return y;
    }
    const int threads = 256;
    const int blocks = (int)((n + threads - 1) / threads);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    sum_dim_kernel<<<blocks, threads, 0, stream>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), outer, r, inner);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

cpp_source = "torch::Tensor sum_dim_keepdim(torch::Tensor x, int64_t dim);"

sum_ext = load_inline(
    name="crucible_legit_sum_dim",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["sum_dim_keepdim"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum_ext.sum_dim_keepdim(x, self.dim)
