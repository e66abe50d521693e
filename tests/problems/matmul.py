"""Matrix multiplication C = A @ B (KernelBench level-1 style, small sizes)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """Plain matmul of an (M, K) and a (K, N) matrix."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 128
K = 96   # not a multiple of the usual 64-wide K tile: the K loop has to mask
N = 80


def get_inputs():
    A = torch.randn(M, K)
    B = torch.randn(K, N)
    return [A, B]


def get_init_inputs():
    return []
