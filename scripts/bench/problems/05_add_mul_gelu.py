import torch
import torch.nn as nn


class Model(nn.Module):
    """A fused elementwise chain: gelu((x + y) * z)."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x, y, z):
        return torch.nn.functional.gelu((x + y) * z)


batch_size = 128
dim = 2000


def get_inputs():
    return [torch.rand(batch_size, dim), torch.rand(batch_size, dim), torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
