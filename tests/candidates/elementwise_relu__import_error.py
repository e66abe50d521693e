"""Imports a module that does not exist: must be judged IMPORT (compiled=false)."""
import torch
import torch.nn as nn
import crucible_no_such_module_for_tests  # noqa: F401


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
