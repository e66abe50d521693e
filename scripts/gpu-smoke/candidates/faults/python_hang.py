# FAULT (expect TIMEOUT) against level1/19_ReLU.py: forward sleeps forever.
import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            time.sleep(3600)
        return x
