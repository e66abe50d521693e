"""The correct candidate every escape rides on (appended to each attack by
tests/tests/escapes.rs): a Triton ReLU whose ModelNew runs the attack defined above it once,
when the runner builds it, and prints what happened. The test judges by what it sees from
outside (keys, files, processes, neighbours' verdicts), and by these lines only to know the
attack ran."""
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


def report(outcome):
    print(f"crucible-escape {NAME}: {outcome}", flush=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        report("attempted")
        try:
            report(f"SUCCEEDED {attack()}")
        except Exception as e:
            report(f"blocked {type(e).__name__}: {e}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK_SIZE=1024)
        return y
