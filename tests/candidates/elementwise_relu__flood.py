"""forward prints without end: the worker must cap the output and kill it -> OUTPUT_LIMIT."""
import sys

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        line = "flood " * 170 + "\n"  # ~1 KiB per line
        while True:
            sys.stdout.write(line)
