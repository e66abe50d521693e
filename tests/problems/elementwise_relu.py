"""Elementwise ReLU (KernelBench level-1 style, small sizes for CPU + Triton interpreter)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies ReLU elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 16
dim = 1024


def get_inputs():
    # randn, not rand: half of the values are negative, so an identity "kernel" fails.
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
