# Crucible GPU benchmark candidate for level2/70_Gemm_Sigmoid_Scaling_ResidualAdd.py:
# the GEMM stays a cuBLAS call (torch.mm, no bias), the bias add and the whole elementwise
# tail run as ONE fused Triton kernel, in place on the GEMM output.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fused_tail_kernel(y_ptr, b_ptr, n_elements, n_cols, scaling_factor, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    col = offs % n_cols
    x = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x = x + tl.load(b_ptr + col, mask=mask, other=0.0).to(tl.float32)
    x = (1.0 / (1.0 + tl.exp(-x))) * scaling_factor + x
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(input_size, hidden_size)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        weight, bias = self.gemm.weight, self.gemm.bias
        y = torch.mm(x.contiguous(), weight.t())
        n = y.numel()
        if n == 0:
            return y
        BLOCK = 2048
        grid = (triton.cdiv(n, BLOCK),)
        _fused_tail_kernel[grid](y, bias, n, y.shape[1], float(self.scaling_factor), BLOCK=BLOCK, num_warps=8)
        return y
