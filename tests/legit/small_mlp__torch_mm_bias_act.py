"""Honest candidate for small_mlp: each layer's GEMM is torch.mm (fp32), and a Triton kernel
then adds the bias and applies the ReLU in place on that freshly allocated GEMM output (one
pass instead of two). The layers are built like the reference (Linear, ReLU, ..., Linear)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bias_act_inplace_kernel(h_ptr, b_ptr, n_elements, N,
                            RELU: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    h = tl.load(h_ptr + offs, mask=mask, other=0.0)
    b = tl.load(b_ptr + offs % N, mask=mask, other=0.0)
    v = h + b
    if RELU:
        v = tl.maximum(v, 0.0)
    tl.store(h_ptr + offs, v, mask=mask)


class ModelNew(nn.Module):
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
        self.linears = [m for m in self.network if isinstance(m, nn.Linear)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.linears) - 1
        for i, layer in enumerate(self.linears):
            h = torch.mm(x, layer.weight.t())       # a fresh, contiguous (M, N) tensor
            N = h.shape[1]
            BLOCK = 1024
            bias_act_inplace_kernel[(triton.cdiv(h.numel(), BLOCK),)](
                h, layer.bias, h.numel(), N, RELU=(i != last), BLOCK=BLOCK)
            x = h
        return x
