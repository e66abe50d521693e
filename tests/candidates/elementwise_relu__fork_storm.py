"""forward forks children in a loop: the worker's process limit must stop it -> RESOURCE.

Bounded on purpose, so that a broken supervisor cannot take the machine down: at most 3000
children, each sleeps 60 s and exits. If a fork fails (process limit reached), the OSError
(EAGAIN) propagates; the harness classifies it as RESOURCE."""
import os
import time

import torch
import torch.nn as nn

MAX_CHILDREN = 3000
CHILD_SLEEP_S = 60


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(MAX_CHILDREN):
            pid = os.fork()
            if pid == 0:
                try:
                    time.sleep(CHILD_SLEEP_S)
                finally:
                    os._exit(0)
        return torch.relu(x)
