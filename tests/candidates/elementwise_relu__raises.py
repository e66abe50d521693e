"""forward raises RuntimeError: must be judged RUNTIME (compiled=true)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("candidate failed on purpose in forward")
