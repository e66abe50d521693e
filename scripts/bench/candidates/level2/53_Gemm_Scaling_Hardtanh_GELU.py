# Crucible GPU benchmark candidate for level2/53_Gemm_Scaling_Hardtanh_GELU.py:
# the GEMM stays a cuBLAS call (torch.mm, no bias), the bias add and the whole elementwise
# tail run as ONE fused Triton kernel, in place on the GEMM output.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fused_tail_kernel(y_ptr, b_ptr, n_elements, n_cols, scaling_factor, lo, hi, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    col = offs % n_cols
    x = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x = x + tl.load(b_ptr + col, mask=mask, other=0.0).to(tl.float32)
    x = x * scaling_factor
    x = tl.minimum(tl.maximum(x, lo), hi)
    x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scaling_factor, hardtanh_min, hardtanh_max):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor
        self.hardtanh_min = hardtanh_min
        self.hardtanh_max = hardtanh_max

    def forward(self, x):
        weight, bias = self.gemm.weight, self.gemm.bias
        y = torch.mm(x.contiguous(), weight.t())
        n = y.numel()
        if n == 0:
            return y
        BLOCK = 2048
        grid = (triton.cdiv(n, BLOCK),)
        _fused_tail_kernel[grid](y, bias, n, y.shape[1], float(self.scaling_factor), float(self.hardtanh_min), float(self.hardtanh_max), BLOCK=BLOCK, num_warps=8)
        return y
