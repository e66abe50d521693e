# WRONG (expect incorrect) against level2/76_Gemm_Add_ReLU.py: the fused tail forgets the bias add.
# the GEMM stays a cuBLAS call (torch.mm, no bias), the bias add and the whole elementwise
# tail run as ONE fused Triton kernel, in place on the GEMM output.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fused_tail_kernel(y_ptr, b_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    col = offs % n_cols
    x = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    # BUG: the bias add was dropped
    x = tl.maximum(x, 0.0)
    tl.store(y_ptr + offs, x.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super(ModelNew, self).__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        weight, bias = self.gemm.weight, self.bias
        y = torch.mm(x.contiguous(), weight.t())
        n = y.numel()
        if n == 0:
            return y
        BLOCK = 2048
        grid = (triton.cdiv(n, BLOCK),)
        _fused_tail_kernel[grid](y, bias, n, y.shape[1], BLOCK=BLOCK, num_warps=8)
        return y
