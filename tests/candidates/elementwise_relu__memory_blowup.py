"""forward allocates 64 MiB blocks forever (each written, so really resident) -> RESOURCE.

Under an address-space rlimit Python raises MemoryError (the harness says RESOURCE); under a
cgroup limit the kernel kills the child (the worker says RESOURCE)."""
import torch
import torch.nn as nn

CHUNK = 64 << 20


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hoard = []
        while True:
            hoard.append(bytearray(b"\xab") * CHUNK)
