# FAULT (expect CUDA_FAULT) against level1/19_ReLU.py:
# a ReLU whose unmasked loads/stores are shifted 2**40 elements (4 TiB) past the
# tensors, far outside any mapped allocation -> "an illegal memory access was encountered".
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_oob_kernel(x_ptr, y_ptr, n_elements, shift, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK) + shift  # no mask on purpose
    x = tl.load(x_ptr + offs)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0))


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        BLOCK = 1024
        grid = (triton.cdiv(n, BLOCK),)
        _relu_oob_kernel[grid](x, y, n, 2 ** 40, BLOCK=BLOCK, num_warps=4)
        return y
