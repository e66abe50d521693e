# Crucible GPU benchmark candidate for level2/9_Matmul_Subtract_Multiply_ReLU.py:
# the GEMM stays a cuBLAS call (torch.mm, no bias), the bias add and the whole elementwise
# tail run as ONE fused Triton kernel, in place on the GEMM output.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fused_tail_kernel(y_ptr, b_ptr, n_elements, n_cols, subtract_value, multiply_value, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    col = offs % n_cols
    x = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x = x + tl.load(b_ptr + col, mask=mask, other=0.0).to(tl.float32)
    x = (x - subtract_value) * multiply_value
    x = tl.maximum(x, 0.0)
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super(ModelNew, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x):
        weight, bias = self.linear.weight, self.linear.bias
        y = torch.mm(x.contiguous(), weight.t())
        n = y.numel()
        if n == 0:
            return y
        BLOCK = 2048
        grid = (triton.cdiv(n, BLOCK),)
        _fused_tail_kernel[grid](y, bias, n, y.shape[1], float(self.subtract_value), float(self.multiply_value), BLOCK=BLOCK, num_warps=8)
        return y
