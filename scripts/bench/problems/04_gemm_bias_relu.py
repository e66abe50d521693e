import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer (matmul + bias) followed by ReLU."""

    def __init__(self, in_features, out_features):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))


batch_size = 256
in_features = 384
out_features = 200


def get_inputs():
    return [torch.rand(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
