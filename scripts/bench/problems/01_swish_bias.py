import torch
import torch.nn as nn


class Model(nn.Module):
    """Swish with a per-column bias: x * sigmoid(x) + bias."""

    def __init__(self, dim):
        super(Model, self).__init__()
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return x * torch.sigmoid(x) + self.bias


batch_size = 128
dim = 2000


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return [dim]
