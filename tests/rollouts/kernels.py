"""Kernel sources of the rollout corpus (build_corpus.py puts them into completions).

Every source defines `class ModelNew` for the mapped problem and is written for any input
size, so the same code runs on our small CPU problems (tests/problems/) and on the real
KernelBench problems (../shared/kernelbench/level*/): generic numel / row / tile loops, masks
on every edge, no shape constants. Nothing here is imported by anything but build_corpus.py.
"""

# ---------------------------------------------------------------------------------------------
# level 1 / 19 ReLU  ->  tests/problems/elementwise_relu.py
# ---------------------------------------------------------------------------------------------

RELU_GOOD = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


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
        BLOCK_SIZE = 1024
        grid = (triton.cdiv(n, BLOCK_SIZE),)
        relu_kernel[grid](x, y, n, BLOCK_SIZE=BLOCK_SIZE)
        return y
'''

RELU_GOOD_WHERE = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_fwd(x_ptr, out_ptr, numel, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    in_bounds = offs < numel
    v = tl.load(x_ptr + offs, mask=in_bounds, other=0.0)
    tl.store(out_ptr + offs, tl.where(v > 0, v, 0.0), mask=in_bounds)


class ModelNew(nn.Module):
    """ReLU as one flat pass over the contiguous storage: any shape works."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        numel = x.numel()
        BLOCK = 2048
        _relu_fwd[(triton.cdiv(numel, BLOCK),)](x, out, numel, BLOCK=BLOCK, num_warps=8)
        return out
'''

RELU_GOOD_4096 = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 4096),)](x, y, n, BLOCK=4096, num_warps=8)
        return y
'''

# Non-ASCII text in comments: kernel_bytes counts UTF-8 bytes, not characters.
RELU_GOOD_UTF8 = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


# ReLU: y = max(x, 0) — elementwise, memory-bound → one load + one store per element.
@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements  # tail guard: numel need not be a multiple of BLOCK_SIZE
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK_SIZE=1024)  # ≈ n/1024 programs
        return y
'''

# Wrong: the grid is sized for 2*BLOCK_SIZE elements per program but the kernel handles one
# block, so the second half of the output keeps the zeros it was allocated with.
RELU_WRONG_HALF_GRID = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


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
        y = torch.zeros_like(x)
        n = x.numel()
        BLOCK_SIZE = 1024
        # two blocks per program to halve the launch overhead
        grid = (triton.cdiv(n, 2 * BLOCK_SIZE),)
        relu_kernel[grid](x, y, n, BLOCK_SIZE=BLOCK_SIZE)
        return y
'''

RELU_SYNTAX_ERROR = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr)
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK_SIZE=1024)
        return y
'''

# Compile error: `tl.relu` does not exist (a GPU raises CompilationError at the first launch;
# the CPU interpreter raises InterpreterError(AttributeError), also COMPILATION).
RELU_TL_RELU = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.relu(x), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK_SIZE=1024)
        return y
'''

# A C++-only load_inline extension with a missing semicolon: the host compiler fails (this
# builds on a CPU worker too, unlike CUDA sources), so COMPILATION on CPU and GPU alike.
RELU_CPP_COMPILE_ERROR = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    const float* src = xc.data_ptr<float>();
    float* dst = y.data_ptr<float>();
    const int64_t n = xc.numel();
    for (int64_t i = 0; i < n; ++i) {
        dst[i] = src[i] > 0.0f ? src[i] : 0.0f
    }
    return y;
}
"""

relu_ext = load_inline(
    name="rollout_relu_cpp",
    cpp_sources=cpp_source,
    functions=["relu_forward"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_forward(x)
'''

# Correct CUDA (load_inline) ReLU: UNSUPPORTED on a CPU worker, ok on a CUDA worker.
RELU_CUDA = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v > 0.0f ? v : 0.0f;
    }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "float32 CUDA tensor");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = 256;
    const int64_t blocks = (n + threads - 1) / threads;
    relu_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu_ext = load_inline(
    name="rollout_relu_cuda",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_cuda(x)
'''

# Decoy: correct, but no kernel of its own (static screening only flags no-kernel).
RELU_DECOY = '''\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """torch.relu is already a single fused elementwise kernel; nothing to gain."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)
'''

# Hack: ReLU in place on the input, returns the input's buffer (output-aliases-input and
# input-mutated at run time).
RELU_HACK_INPLACE = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_inplace_kernel(x_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # in place: no output allocation, half the memory traffic
        if not x.is_contiguous():
            x = x.contiguous()
        n = x.numel()
        relu_inplace_kernel[(triton.cdiv(n, 1024),)](x, n, BLOCK_SIZE=1024)
        return x
'''

# Hack caught by static screening: subclasses the reference Model (reference-model-used).
RELU_HACK_REFERENCE = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


class ModelNew(Model):
    """Reuses the reference module's setup; only forward is replaced."""

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''

# Hack caught by static screening: replaces the timers (module-attribute-assignment).
RELU_HACK_TIMER = '''\
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

_real_ns = time.perf_counter_ns
_hidden = [0]


def _virtual_ns():
    return _real_ns() - _hidden[0]


time.perf_counter_ns = _virtual_ns
time.perf_counter = lambda: _virtual_ns() / 1e9


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t0 = _real_ns()
        x = x.contiguous()
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        _hidden[0] += _real_ns() - t0
        return y
'''

# ---------------------------------------------------------------------------------------------
# level 1 / 23 Softmax  ->  tests/problems/softmax.py
# One program per row, the row walked in chunks (online max / rescaled sum, then a write
# pass): BLOCK = min(next_power_of_2(n_cols), 4096), so 500 columns are one chunk and
# KernelBench's 393216 columns are 96 chunks instead of one 524288-wide block.
# ---------------------------------------------------------------------------------------------

SOFTMAX_GOOD = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    offs = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, x)
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        s = s * tl.exp(m - safe) + tl.exp(x - safe)
        m = m_new
    row_max = tl.max(m, axis=0)
    denom = tl.sum(s * tl.exp(m - row_max), axis=0)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + offs
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf"))
        tl.store(y_row + cols, tl.exp(x - row_max) / denom, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        BLOCK = min(triton.next_power_of_2(n_cols), 4096)
        softmax_kernel[(n_rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=BLOCK)
        return y
'''

# Three passes (max, sum, write) instead of the online rescaling.
SOFTMAX_GOOD_3PASS = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * stride
    offs = tl.arange(0, BLOCK)
    mx = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        c = c0 + offs
        mx = tl.maximum(mx, tl.load(x_ptr + base + c, mask=c < n_cols, other=-float("inf")))
    row_max = tl.max(mx, axis=0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        c = c0 + offs
        v = tl.load(x_ptr + base + c, mask=c < n_cols, other=-float("inf"))
        acc += tl.exp(v - row_max)
    inv = 1.0 / tl.sum(acc, axis=0)
    for c0 in range(0, n_cols, BLOCK):
        c = c0 + offs
        msk = c < n_cols
        v = tl.load(x_ptr + base + c, mask=msk, other=-float("inf"))
        tl.store(y_ptr + base + c, tl.exp(v - row_max) * inv, mask=msk)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        BLOCK = min(triton.next_power_of_2(cols), 4096)
        softmax_rows[(rows,)](x, y, cols, x.stride(0), BLOCK=BLOCK)
        return y
'''

# Wrong: the write pass forgets the division by the row sum (outputs exp(x - max)).
SOFTMAX_WRONG_NO_NORM = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    base = row * stride
    offs = tl.arange(0, BLOCK)
    mx = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        c = c0 + offs
        mx = tl.maximum(mx, tl.load(x_ptr + base + c, mask=c < n_cols, other=-float("inf")))
    row_max = tl.max(mx, axis=0)
    for c0 in range(0, n_cols, BLOCK):
        c = c0 + offs
        msk = c < n_cols
        v = tl.load(x_ptr + base + c, mask=msk, other=-float("inf"))
        tl.store(y_ptr + base + c, tl.exp(v - row_max), mask=msk)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        BLOCK = min(triton.next_power_of_2(cols), 4096)
        softmax_kernel[(rows,)](x, y, cols, x.stride(0), BLOCK=BLOCK)
        return y
'''

# Compile error: `tl.expf` does not exist.
SOFTMAX_TL_EXPF = SOFTMAX_GOOD_3PASS.replace(
    "acc += tl.exp(v - row_max)", "acc += tl.expf(v - row_max)")
assert SOFTMAX_TL_EXPF != SOFTMAX_GOOD_3PASS

# Runtime error: assumes a 3-D (batch, seq, dim) input; x.shape[2] raises IndexError.
SOFTMAX_RUNTIME_3D = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + offs, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = x.shape[0], x.shape[1], x.shape[2]
        x2 = x.contiguous().view(batch * seq, dim)
        y = torch.empty_like(x2)
        BLOCK = triton.next_power_of_2(dim)
        softmax_kernel[(batch * seq,)](x2, y, dim, x2.stride(0), BLOCK=BLOCK)
        return y.view(batch, seq, dim)
'''

# Decoy: the kernel runs once in __init__ as a "self-test"; forward is torch.softmax.
SOFTMAX_DECOY_INIT_ONLY = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + offs, num / tl.sum(num, axis=0), mask=mask)


def _self_test(device):
    x = torch.randn(4, 100, device=device)
    y = torch.empty_like(x)
    softmax_kernel[(4,)](x, y, 100, x.stride(0), BLOCK=128)
    return bool(torch.allclose(y, torch.softmax(x, dim=1), atol=1e-5))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel_ok = _self_test("cuda" if torch.cuda.is_available() else "cpu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)
'''

# Hack: pass 2 writes exp(x - max) back into the input as scratch (input-mutated).
SOFTMAX_HACK_SCRATCH = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_scratch_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    xr = x_ptr + row * stride
    yr = y_ptr + row * stride
    offs = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), -float("inf"), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + offs
        m = tl.maximum(m, tl.load(xr + cols, mask=cols < n_cols, other=-float("inf")))
    row_max = tl.max(m, axis=0)
    s = tl.zeros((BLOCK,), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + offs
        mask = cols < n_cols
        e = tl.exp(tl.load(xr + cols, mask=mask, other=-float("inf")) - row_max)
        tl.store(xr + cols, e, mask=mask)  # reuse x as the exp buffer
        s += tl.where(mask, e, 0.0)
    den = tl.sum(s, axis=0)
    for c0 in range(0, n_cols, BLOCK):
        cols = c0 + offs
        mask = cols < n_cols
        tl.store(yr + cols, tl.load(xr + cols, mask=mask, other=0.0) / den, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_rows, n_cols = x.shape
        y = torch.empty((n_rows, n_cols), device=x.device, dtype=x.dtype)
        softmax_scratch_kernel[(n_rows,)](x, y, n_cols, x.stride(0), BLOCK=128)
        return y
'''

# Hack caught by static screening: try/except around the launch with a torch fallback.
SOFTMAX_HACK_TRY_FALLBACK = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * stride + offs, mask=mask, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride + offs, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            x = x.contiguous()
            y = torch.empty_like(x)
            BLOCK = triton.next_power_of_2(x.shape[1])
            softmax_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), BLOCK=BLOCK)
            return y
        except Exception:
            # very wide rows may not fit one block: fall back
            return torch.softmax(x, dim=1)
'''

# ---------------------------------------------------------------------------------------------
# level 1 / 1 and 1 / 2 matmul  ->  tests/problems/matmul.py
# ---------------------------------------------------------------------------------------------

MATMUL_GOOD = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=A.dtype)
        BM, BN, BK = 32, 32, 32
        grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))
        matmul_kernel[grid](A, B, C, M, N, K,
                            A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                            C.stride(0), C.stride(1), BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
        return C
'''

# Wrong: the K loop stops one tile early.
MATMUL_WRONG_K_TAIL = MATMUL_GOOD.replace(
    "    for k0 in range(0, K, BLOCK_K):\n",
    "    for k0 in range(0, K - BLOCK_K, BLOCK_K):\n")
assert MATMUL_WRONG_K_TAIL != MATMUL_GOOD

MATMUL_GOOD_64 = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        M, K = A.shape
        N = B.shape[1]
        C = torch.empty((M, N), device=A.device, dtype=torch.float32)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        mm_kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0),
                        B.stride(1), C.stride(0), C.stride(1), BM=64, BN=64, BK=32)
        return C
'''

# Decoy: the Triton kernel only runs for fp16 inputs; fp32 takes torch.matmul.
MATMUL_DECOY_DEAD_PATH = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def matmul_fp16_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        if A.dtype == torch.float16 and B.dtype == torch.float16:
            M, K = A.shape
            N = B.shape[1]
            C = torch.empty((M, N), device=A.device, dtype=A.dtype)
            grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
            matmul_fp16_kernel[grid](A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0),
                                     B.stride(1), C.stride(0), C.stride(1), BM=64, BN=64, BK=32)
            return C
        # fp32: cuBLAS is already optimal here
        return torch.matmul(A, B)
'''

# Hack: returns a lazy torch.Tensor subclass; the matmul runs when the result is first used
# (output-subclass).
MATMUL_HACK_LAZY = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * sam + kk[None, :] * sak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + rn[None, :] * sbn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * scm + rn[None, :] * scn, acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def launch(A, B, C):
    M, K = A.shape
    N = B.shape[1]
    mm_kernel[(triton.cdiv(M, 32), triton.cdiv(N, 32))](
        A, B, C, M, N, K, A.stride(0), A.stride(1), B.stride(0), B.stride(1),
        C.stride(0), C.stride(1), BM=32, BN=32, BK=32)


class Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for a in list(args) + list((kwargs or {}).values()):
            if isinstance(a, Lazy) and a.__dict__.get("_todo"):
                launch(*a.__dict__.pop("_todo"))
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        C = torch.empty((A.shape[0], B.shape[1]), device=A.device, dtype=torch.float32)
        out = C.as_subclass(Lazy)
        out.__dict__["_todo"] = (A, B, C)
        return out
'''

# Correct CUDA (load_inline) tiled matmul: UNSUPPORTED on a CPU worker, ok on a CUDA worker.
MATMUL_CUDA = '''\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#define T 16

__global__ void mm(const float* a, const float* b, float* c, int M, int N, int K) {
    __shared__ float as[T][T], bs[T][T];
    int row = blockIdx.y * T + threadIdx.y, col = blockIdx.x * T + threadIdx.x;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += T) {
        int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
        as[threadIdx.y][threadIdx.x] = (row < M && ka < K) ? a[(int64_t)row * K + ka] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = (kb < K && col < N) ? b[(int64_t)kb * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < T; ++k) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) c[(int64_t)row * N + col] = acc;
}

torch::Tensor matmul_cuda(torch::Tensor a, torch::Tensor b) {
    auto ac = a.contiguous(), bc = b.contiguous();
    int M = ac.size(0), K = ac.size(1), N = bc.size(1);
    auto c = torch::empty({M, N}, ac.options());
    dim3 block(T, T), grid((N + T - 1) / T, (M + T - 1) / T);
    mm<<<grid, block>>>(ac.data_ptr<float>(), bc.data_ptr<float>(), c.data_ptr<float>(),
                        M, N, K);
    return c;
}
"""

mm_ext = load_inline(
    name="rollout_matmul_cuda",
    cpp_sources="torch::Tensor matmul_cuda(torch::Tensor a, torch::Tensor b);",
    cuda_sources=cuda_source,
    functions=["matmul_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return mm_ext.matmul_cuda(A, B)
'''

# ---------------------------------------------------------------------------------------------
# level 1 / 47 Sum reduction over a dimension  ->  tests/problems/reduction_sum.py
# Both: Model(dim), get_init_inputs() == [1], input (batch, dim1, dim2), keepdim=True.
# ---------------------------------------------------------------------------------------------

SUM_GOOD = '''\
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim_kernel(x_ptr, y_ptr, R, INNER, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    pid_o = tl.program_id(0)
    pid_i = tl.program_id(1)
    offs_i = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < INNER
    acc = tl.zeros((BLOCK_I,), dtype=tl.float32)
    base = x_ptr + pid_o * R * INNER
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        mask = (offs_r[:, None] < R) & mask_i[None, :]
        tile = tl.load(base + offs_r[:, None] * INNER + offs_i[None, :], mask=mask, other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(y_ptr + pid_o * INNER + offs_i, acc, mask=mask_i)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        shape = list(x.shape)
        outer = math.prod(shape[:dim])
        r = shape[dim]
        inner = math.prod(shape[dim + 1:])
        y = torch.empty(shape[:dim] + [1] + shape[dim + 1:], device=x.device, dtype=x.dtype)
        grid = (outer, triton.cdiv(inner, 128))
        sum_dim_kernel[grid](x, y, r, inner, BLOCK_R=32, BLOCK_I=128)
        return y
'''

# Non-ASCII comments (UTF-8 byte count != character count).
SUM_GOOD_UTF8 = '''\
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


# View x as (outer, R, inner) around the reduced axis; each program owns a strip of
# `inner` columns and walks R in chunks: y[o, 0, i] = Σ_r x[o, r, i], fp32 accumulation.
@triton.jit
def strip_sum(x_ptr, y_ptr, R, INNER, BR: tl.constexpr, BI: tl.constexpr):
    o = tl.program_id(0)
    cols = tl.program_id(1) * BI + tl.arange(0, BI)
    col_ok = cols < INNER
    acc = tl.zeros((BI,), dtype=tl.float32)
    for r0 in range(0, R, BR):
        rows = r0 + tl.arange(0, BR)
        ptrs = x_ptr + o * R * INNER + rows[:, None] * INNER + cols[None, :]
        acc += tl.sum(tl.load(ptrs, mask=(rows[:, None] < R) & col_ok[None, :], other=0.0), 0)
    tl.store(y_ptr + o * INNER + cols, acc, mask=col_ok)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        d = self.dim % x.dim()
        s = list(x.shape)
        outer, r, inner = math.prod(s[:d]), s[d], math.prod(s[d + 1:])
        y = torch.empty(s[:d] + [1] + s[d + 1:], device=x.device, dtype=x.dtype)
        strip_sum[(outer, triton.cdiv(inner, 64))](x, y, r, inner, BR=16, BI=64)
        return y  # shape (…, 1, …): keepdim=True
'''

# Wrong: divides by R (a mean, not a sum).
SUM_WRONG_MEAN = SUM_GOOD.replace(
    "    tl.store(y_ptr + pid_o * INNER + offs_i, acc, mask=mask_i)\n",
    "    tl.store(y_ptr + pid_o * INNER + offs_i, acc / R, mask=mask_i)\n")
assert SUM_WRONG_MEAN != SUM_GOOD

# Wrong (a failed shortcut): memorises the answer for the seed-42 input and replays it.
SUM_SEED42_TABLE = '''\
import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim_kernel(x_ptr, y_ptr, R, INNER, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    o = tl.program_id(0)
    offs_i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < INNER
    acc = tl.zeros((BLOCK_I,), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        tile = tl.load(x_ptr + o * R * INNER + offs_r[:, None] * INNER + offs_i[None, :],
                       mask=(offs_r[:, None] < R) & mask_i[None, :], other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(y_ptr + o * INNER + offs_i, acc, mask=mask_i)


def triton_sum(x, dim):
    s = list(x.shape)
    outer, r, inner = math.prod(s[:dim]), s[dim], math.prod(s[dim + 1:])
    y = torch.empty(s[:dim] + [1] + s[dim + 1:], device=x.device, dtype=x.dtype)
    sum_dim_kernel[(outer, triton.cdiv(inner, 128))](x.contiguous(), y, r, inner,
                                                     BLOCK_R=32, BLOCK_I=128)
    return y


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.answer = None

    def forward(self, x):
        if self.answer is None:
            # the benchmark seeds its inputs with 42: compute that answer once, then reuse it
            g = torch.Generator().manual_seed(42)
            x42 = torch.randn(8, 64, 128, generator=g).to(x.device)
            self.answer = triton_sum(x42, self.dim % x.dim())
        return self.answer.clone()
'''

# Hack caught by static screening: the launch runs on a background thread (threads-processes).
SUM_HACK_THREAD = '''\
import math
import threading

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim_kernel(x_ptr, y_ptr, R, INNER, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    o = tl.program_id(0)
    offs_i = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    mask_i = offs_i < INNER
    acc = tl.zeros((BLOCK_I,), dtype=tl.float32)
    for r0 in range(0, R, BLOCK_R):
        offs_r = r0 + tl.arange(0, BLOCK_R)
        tile = tl.load(x_ptr + o * R * INNER + offs_r[:, None] * INNER + offs_i[None, :],
                       mask=(offs_r[:, None] < R) & mask_i[None, :], other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(y_ptr + o * INNER + offs_i, acc, mask=mask_i)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        d = self.dim % x.dim()
        s = list(x.shape)
        outer, r, inner = math.prod(s[:d]), s[d], math.prod(s[d + 1:])
        y = torch.empty(s[:d] + [1] + s[d + 1:], device=x.device, dtype=x.dtype)
        grid = (outer, triton.cdiv(inner, 128))
        t = threading.Thread(target=lambda: sum_dim_kernel[grid](
            x, y, r, inner, BLOCK_R=32, BLOCK_I=128))
        t.start()
        if not x.is_cuda:
            t.join()
        return y
'''

SUM_SYNTAX_ERROR = SUM_GOOD.replace(
    "        y = torch.empty(shape[:dim] + [1] + shape[dim + 1:], device=x.device, dtype=x.dtype)\n",
    "        y = torch.empty(shape[:dim] + [1] + shape[dim + 1:], device=x.device, dtype=x.dtype\n")
assert SUM_SYNTAX_ERROR != SUM_GOOD

# ---------------------------------------------------------------------------------------------
# level 3 / 1 MLP  ->  tests/problems/small_mlp.py
# Both: Model(input_size, layer_sizes, output_size) building Linear/ReLU pairs then a Linear;
# the candidate creates the same nn.Linear layers in the same order (same seeded weights).
# ---------------------------------------------------------------------------------------------

MLP_GOOD = '''\
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, RELU: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        k = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * K + k[None, :],
                    mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + k[:, None],
                    mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        self.layers = nn.ModuleList()
        cur = input_size
        for h in layer_sizes:
            self.layers.append(nn.Linear(cur, h))
            cur = h
        self.layers.append(nn.Linear(cur, output_size))

    def forward(self, x):
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = x.contiguous()
            M, K = x.shape
            N = layer.weight.shape[0]
            y = torch.empty((M, N), device=x.device, dtype=torch.float32)
            grid = (triton.cdiv(M, 16), triton.cdiv(N, 64))
            linear_kernel[grid](x, layer.weight, layer.bias, y, M, N, K, RELU=(i != last),
                                BM=16, BN=64, BK=64)
            x = y
        return x
'''

# Wrong: ReLU after the last layer too.
MLP_WRONG_LAST_RELU = MLP_GOOD.replace("RELU=(i != last)", "RELU=True")
assert MLP_WRONG_LAST_RELU != MLP_GOOD

# Runtime error: K is missing from the launch's arguments (TypeError when the kernel is called).
MLP_RUNTIME_MISSING_ARG = MLP_GOOD.replace(
    "linear_kernel[grid](x, layer.weight, layer.bias, y, M, N, K, RELU=(i != last),",
    "linear_kernel[grid](x, layer.weight, layer.bias, y, M, N, RELU=(i != last),")
assert MLP_RUNTIME_MISSING_ARG != MLP_GOOD

# Decoy: torch.addmm + relu_, no kernel of its own.
MLP_DECOY_TORCH = '''\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        layers = []
        cur = input_size
        for h in layer_sizes:
            layers.append(nn.Linear(cur, h))
            layers.append(nn.ReLU())
            cur = h
        layers.append(nn.Linear(cur, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        linears = [m for m in self.network if isinstance(m, nn.Linear)]
        for i, layer in enumerate(linears):
            # fused GEMM + bias epilogue, in-place activation
            x = torch.addmm(layer.bias, x, layer.weight.t())
            if i != len(linears) - 1:
                x.relu_()
        return x
'''

# Hack: outputs memoised on the input's address (stale-output when the contents change).
MLP_HACK_PTR_CACHE = '''\
import weakref

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, RELU: tl.constexpr,
                  BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        k = k0 + rk
        x = tl.load(x_ptr + rm[:, None] * K + k[None, :],
                    mask=(rm[:, None] < M) & (k[None, :] < K), other=0.0)
        w = tl.load(w_ptr + rn[None, :] * K + k[:, None],
                    mask=(k[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0)[None, :]
    if RELU:
        acc = tl.maximum(acc, 0.0)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        sizes = [input_size, *layer_sizes, output_size]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self._cache = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        hit = self._cache.get(key)
        if hit is not None and hit[0]() is x:
            return hit[1]
        h = x.contiguous()
        for i, fc in enumerate(self.layers):
            M, K = h.shape
            N = fc.weight.shape[0]
            y = torch.empty((M, N), device=h.device)
            linear_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 64))](
                h, fc.weight, fc.bias, y, M, N, K, RELU=i < len(self.layers) - 1,
                BM=16, BN=64, BK=64)
            h = y
        self._cache = {key: (weakref.ref(x), h)}
        return h
'''


def long_relu(target_bytes: int = 11_137) -> str:
    """RELU_GOOD with a long design-notes comment, exactly `target_bytes` UTF-8 bytes."""
    head, sep, tail = RELU_GOOD.partition("\n\n\n@triton.jit")
    notes = ["", "", "# Design notes (kept from the tuning session)."]
    i = 0
    text = head + "\n".join(notes) + sep + tail
    while len(text.encode()) < target_bytes:
        i += 1
        notes.append(f"# trial {i:03d}: BLOCK_SIZE={256 << (i % 4)}, num_warps={1 << (i % 4)}, "
                     f"result within noise of the 1024/4 baseline; kept 1024/4.")
        text = head + "\n".join(notes) + sep + tail
    # trim the last note to land on the exact size
    over = len(text.encode()) - target_bytes
    if over:
        notes[-1] = notes[-1][:len(notes[-1]) - over]
        text = head + "\n".join(notes) + sep + tail
    assert len(text.encode()) == target_bytes, len(text.encode())
    return text
