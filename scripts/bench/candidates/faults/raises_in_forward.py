# FAILING (expect RUNTIME) against level1/21_Sigmoid.py: a plausible model-written bug: the
# output is reshaped to the wrong shape before the launch, so forward raises.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sigmoid_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + offs, 1.0 / (1.0 + tl.exp(-x)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x).view(-1, x.shape[-1] + 1)  # BUG: wrong row length -> RuntimeError
        n = x.numel()
        BLOCK = 4096
        _sigmoid_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
        return y
