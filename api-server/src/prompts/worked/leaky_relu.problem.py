import torch
import torch.nn as nn


class Model(nn.Module):
    """LeakyReLU with slope 0.1 on negative values, elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope=0.1)


batch_size = 64
dim = 4099


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
