"""forward sleeps for an hour (an idle, not a busy, hang): a task that stays running until it is
cancelled (tests/tests/cancel.rs) or its deadline passes -> TIMEOUT."""
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(3600)
        return torch.relu(x)
