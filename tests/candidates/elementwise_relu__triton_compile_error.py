"""A @triton.jit kernel that cannot compile: it calls `relu_fn`, a name that does not exist.

On a GPU, Triton raises triton.compiler.errors.CompilationError at the first launch. Under
TRITON_INTERPRET=1 the kernel body runs as Python and the NameError comes back wrapped in
triton.runtime.errors.InterpreterError; the harness classifies both as COMPILATION with
compiled=false."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = relu_fn(x)  # noqa: F821 -- undefined on purpose
    tl.store(y_ptr + offsets, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK_SIZE=1024)
        return y
