import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over the last dimension of a (batch, dim) tensor."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.sum(x, dim=-1)


batch_size = 128
dim = 3000


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
