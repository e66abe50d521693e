# FAILING (expect SYNTAX) against level1/22_Tanh.py: a completion cut off by the sampler's
# token limit, as RL rollouts often are.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _tanh_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    t = tl.exp(-2.0 * tl.abs(x)
