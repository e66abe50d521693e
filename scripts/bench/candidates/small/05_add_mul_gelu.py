# Small-batch candidate for problems/05_add_mul_gelu.py: gelu((x + y) * z) in one pass (erf GELU).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_mul_gelu_kernel(x_ptr, y_ptr, z_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    z = tl.load(z_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    v = (x + y) * z
    g = 0.5 * v * (1.0 + tl.math.erf(v * 0.7071067811865476))
    tl.store(out_ptr + offs, g.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x, y, z):
        x, y, z = x.contiguous(), y.contiguous(), z.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = 1024
        _add_mul_gelu_kernel[(triton.cdiv(n, BLOCK),)](x, y, z, out, n, BLOCK=BLOCK)
        return out
