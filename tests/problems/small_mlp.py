"""A small 3-layer MLP (KernelBench level-3 style whole model, small sizes)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear -> ReLU -> Linear -> ReLU -> Linear."""

    def __init__(self, input_size: int, hidden_sizes, output_size: int):
        super().__init__()
        layers = []
        current = input_size
        for h in hidden_sizes:
            layers.append(nn.Linear(current, h))
            layers.append(nn.ReLU())
            current = h
        layers.append(nn.Linear(current, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


batch_size = 16
input_size = 128
hidden_sizes = [256, 128]
output_size = 10


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, hidden_sizes, output_size]
