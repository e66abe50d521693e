"""Honest Triton candidate for elementwise_relu: @triton.autotune over two block sizes.

The Triton interpreter (CPU) has no benchmarker, so the pruning hook keeps only the first
config when the input is not on a GPU; on a GPU both configs are timed and the best is kept."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


def _prune_off_gpu(configs, named_args, **kwargs):
    x = named_args["x_ptr"]
    return configs if x.is_cuda else configs[:1]


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_SIZE": 1024}, num_warps=4),
        triton.Config({"BLOCK_SIZE": 4096}, num_warps=8),
    ],
    key=["n_elements"],
    prune_configs_by={"early_config_prune": _prune_off_gpu},
)
@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)
        relu_kernel[grid](x, y, n)
        return y
