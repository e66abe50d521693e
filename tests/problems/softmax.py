"""Row softmax over the last dimension (KernelBench level-1 style, small sizes)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax along dim=1 of a (batch, dim) tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 16
dim = 500  # not a power of two: the kernel has to mask the tail of each row


def get_inputs():
    # Scaled so that a softmax without max-subtraction would still be tested on a wide range.
    x = torch.randn(batch_size, dim) * 4.0
    return [x]


def get_init_inputs():
    return []
