"""The honest kernel every measurement attack rides on (appended to each attack by
tests/tests/measurement.rs): a Triton row-wise L2 normalisation, one program per row, about
1.5x PyTorch's two kernels on an H100. ModelNew calls the attack's `setup(model)` once when the
runner builds it and its `forward(model, x, compute)` on every call, `compute` being the honest
kernel; each attack reports that it ran on stdout (the test reads it only to know that)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_l2norm_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    mask = offsets < n_cols
    x = tl.load(x_ptr + row * stride + offsets, mask=mask, other=0.0)
    norm = tl.sqrt(tl.sum(x * x, axis=0))
    tl.store(y_ptr + row * stride + offsets, x / norm, mask=mask)


def row_l2norm(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    rows, cols = x.shape
    row_l2norm_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
    return y


def report(outcome):
    print(f"crucible-measurement {NAME}: {outcome}", flush=True)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        report("attempted")
        report(setup(self))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return forward(self, x, row_l2norm)
