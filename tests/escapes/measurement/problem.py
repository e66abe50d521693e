"""The measurement corpus's problem: row-wise L2 normalisation (KernelBench level-1 style),
each row divided by its L2 norm. Small sizes for the CPU and the Triton interpreter; the GPU run
of tests/tests/measurement.rs substitutes larger ones."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """x / ||x||_2 over each row."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


batch_size = 16
dim = 1024


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
