# Crucible GPU benchmark candidate for level2/86_Matmul_Divide_GELU.py:
# the GEMM stays a cuBLAS call (torch.mm, no bias), the bias add and the whole elementwise
# tail run as ONE fused Triton kernel, in place on the GEMM output.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fused_tail_kernel(y_ptr, b_ptr, n_elements, n_cols, divisor, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    col = offs % n_cols
    x = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    x = x + tl.load(b_ptr + col, mask=mask, other=0.0).to(tl.float32)
    x = x / divisor
    x = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))  # exact GELU
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, input_size, output_size, divisor):
        super(ModelNew, self).__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x):
        weight, bias = self.linear.weight, self.linear.bias
        y = torch.mm(x.contiguous(), weight.t())
        n = y.numel()
        if n == 0:
            return y
        BLOCK = 2048
        grid = (triton.cdiv(n, BLOCK),)
        _fused_tail_kernel[grid](y, bias, n, y.shape[1], float(self.divisor), BLOCK=BLOCK, num_warps=8)
        return y
