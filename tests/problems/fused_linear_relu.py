"""Gemm + bias add + ReLU (KernelBench level-2 style fused chain, small sizes).

nn.Linear (weight, then bias) is created first, then the extra bias parameter: a candidate
that creates the same parameters in the same order gets identical values under the seed.
"""
import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x @ W^T + b_linear + bias)."""

    def __init__(self, in_features: int, out_features: int, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        x = x + self.bias
        return torch.relu(x)


batch_size = 32
in_features = 256
out_features = 128
bias_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape]
