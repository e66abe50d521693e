"""The correct candidate every hostile entry rides on (appended to each by
tests/tests/node_safety.rs and scripts/soak.sh): a Triton ReLU whose ModelNew runs the entry's
`hostile()` once, when it is built, and prints what it returns. Nothing is caught here: an
entry that raises (ENOSPC, EAGAIN) ends as the harness classifies it. The tests judge by what
they see from outside (verdicts, the services' health, the disk, the mounts, the processes)."""
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
    tl.store(y_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        print(f"crucible-hostile {NAME}: started", flush=True)
        print(f"crucible-hostile {NAME}: {hostile()}", flush=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK_SIZE=1024)
        return y
