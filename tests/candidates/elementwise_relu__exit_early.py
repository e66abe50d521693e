"""forward calls os._exit(0): the child exits 0 without a result -> RUNTIME (decided by the
worker)."""
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os._exit(0)
