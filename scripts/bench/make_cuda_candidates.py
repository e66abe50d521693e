"""Writes the CUDA build workload: real load_inline candidates in the styles models write, for
three problems of scripts/bench/problems, into scripts/bench/candidates/cuda/, and
scripts/bench/workload-cuda.json. Run again after changing it (the files are committed):

    python3 scripts/bench/make_cuda_candidates.py

Per problem, 12 correct candidates: the build at import (`module`), in ModelNew.__init__
(`init`) or on the first forward (`first_call`); two block sizes each; with and without
extra_cflags=["-O3"] (the flags decide which precompiled header a build can use). The `init`
and `first_call` ones of a problem share their cpp_sources (a GRPO group's samples differ in
the kernel, not the declaration); the `module` ones write their own. And three that fail to
compile, each with the compiler's error the model must see (scripts/bench/builds.py checks
that its first line leads error_message).
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "candidates", "cuda")

# Per problem: the CUDA source (BLOCK is the block size), the declaration, the function, the
# ModelNew body that calls it (ext is the extension), ModelNew's parameters.
PROBLEMS = {
    "01_swish_bias.py": {
        "fn": "swish_bias",
        "cuda": r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void swish_bias_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                  float* __restrict__ y, int64_t n, int64_t dim) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v / (1.0f + __expf(-v)) + bias[i % dim];
    }
}

torch::Tensor swish_bias(torch::Tensor x, torch::Tensor bias) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = BLOCK;
    const int blocks = (int)((n + threads - 1) / threads);
    swish_bias_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), bias.data_ptr<float>(),
                                           y.data_ptr<float>(), n, bias.numel());
    return y;
}
""",
        "decl": "torch::Tensor swish_bias(torch::Tensor x, torch::Tensor bias);",
        "init": "        self.bias = nn.Parameter(torch.randn(dim))\n",
        "args": "dim",
        "call": "ext.swish_bias(x, self.bias)",
        "inputs": "x",
    },
    "05_add_mul_gelu.py": {
        "fn": "add_mul_gelu",
        "cuda": r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void add_mul_gelu_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                    const float* __restrict__ z, float* __restrict__ out,
                                    int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = (x[i] + y[i]) * z[i];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

torch::Tensor add_mul_gelu(torch::Tensor x, torch::Tensor y, torch::Tensor z) {
    auto xc = x.contiguous(), yc = y.contiguous(), zc = z.contiguous();
    auto out = torch::empty_like(xc);
    int64_t n = xc.numel();
    const int threads = BLOCK;
    const int blocks = (int)((n + threads - 1) / threads);
    add_mul_gelu_kernel<<<blocks, threads>>>(xc.data_ptr<float>(), yc.data_ptr<float>(),
                                             zc.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
""",
        "decl": "torch::Tensor add_mul_gelu(torch::Tensor x, torch::Tensor y, torch::Tensor z);",
        "init": "",
        "args": "",
        "call": "ext.add_mul_gelu(x, y, z)",
        "inputs": "x, y, z",
    },
    "02_row_sum.py": {
        "fn": "row_sum",
        "cuda": r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t dim) {
    __shared__ float partial[BLOCK];
    const float* row = x + (int64_t)blockIdx.x * dim;
    float acc = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
        acc += row[j];
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            partial[threadIdx.x] += partial[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[blockIdx.x] = partial[0];
    }
}

torch::Tensor row_sum(torch::Tensor x) {
    auto xc = x.contiguous();
    auto out = torch::empty({xc.size(0)}, xc.options());
    row_sum_kernel<<<(int)xc.size(0), BLOCK>>>(xc.data_ptr<float>(), out.data_ptr<float>(),
                                               xc.size(1));
    return out;
}
""",
        "decl": "torch::Tensor row_sum(torch::Tensor x);",
        "init": "",
        "args": "",
        "call": "ext.row_sum(x)",
        "inputs": "x",
    },
}
BLOCKS = (256, 512)
STYLES = ("module", "init", "first_call")
# Three builds that fail, each on the swish-bias candidate, with the error a model must see.
BROKEN = {
    "undefined_identifier": ("    return y;\n", "    AT_CUDA_CHECK(cudaGetLastError());\n    return y;\n"),
    "kernel_syntax": ("        float v = x[i];\n", "        float v = x[i]\n"),
    "wrong_return_type": ("    return y;\n", "    return y.data_ptr<float>();\n"),
}


def build_call(p, name, block, cflags, own_decl):
    decl = p["decl"] if not own_decl else f"// {name}: block {block}\n{p['decl']}"
    flags = f"\n    extra_cflags={cflags!r}," if cflags else ""
    return (f"load_inline(\n    name={name!r},\n    cpp_sources={decl!r},\n"
            f"    cuda_sources=CUDA_SOURCE,\n    functions=[{p['fn']!r}],{flags}\n"
            f"    extra_cuda_cflags=['-O3'],\n    verbose=False,\n)")


def candidate(problem, p, style, block, cflags, cuda=None):
    tag = "o3" if cflags else "plain"
    name = f"crucible_{p['fn']}_{style}_{block}_{tag}"
    source = (cuda or p["cuda"]).replace("BLOCK", str(block))
    call = build_call(p, name, block, cflags, own_decl=(style == "module"))
    head = (f'"""{problem}: load_inline built {style.replace("_", " ")}, block {block}, '
            f'extra_cflags {cflags or "none"}."""\nimport torch\nimport torch.nn as nn\n'
            f"from torch.utils.cpp_extension import load_inline\n\nCUDA_SOURCE = r\"\"\"{source}\"\"\"\n\n")
    init_args = f", {p['args']}" if p["args"] else ""
    if style == "module":
        body = (f"_ext = {call}\n\n\nclass ModelNew(nn.Module):\n    def __init__(self{init_args}):\n"
                f"        super().__init__()\n{p['init']}\n    def forward(self, {p['inputs']}):\n"
                f"        ext = _ext\n        return {p['call']}\n")
    elif style == "init":
        body = (f"def _build():\n    return {call.replace(chr(10), chr(10) + '    ')}\n\n\n"
                f"class ModelNew(nn.Module):\n    def __init__(self{init_args}):\n"
                f"        super().__init__()\n{p['init']}        self.ext = _build()\n\n"
                f"    def forward(self, {p['inputs']}):\n        ext = self.ext\n"
                f"        return {p['call']}\n")
    else:
        body = (f"def _build():\n    return {call.replace(chr(10), chr(10) + '    ')}\n\n\n"
                f"class ModelNew(nn.Module):\n    def __init__(self{init_args}):\n"
                f"        super().__init__()\n{p['init']}        self.ext = None\n\n"
                f"    def forward(self, {p['inputs']}):\n        if self.ext is None:\n"
                f"            self.ext = _build()\n        ext = self.ext\n"
                f"        return {p['call']}\n")
    return name, head + body


def main():
    os.makedirs(OUT, exist_ok=True)
    entries = []
    for problem, p in PROBLEMS.items():
        for style in STYLES:
            for block in BLOCKS:
                for cflags in ([], ["-O3"]):
                    name, text = candidate(problem, p, style, block, cflags)
                    path = os.path.join(OUT, name.removeprefix("crucible_") + ".py")
                    with open(path, "w") as f:
                        f.write(text)
                    entries.append({"problem": problem, "candidate": os.path.relpath(path, os.path.dirname(os.path.dirname(HERE))),
                                    "backend": "cuda", "expect": "correct", "timeout_s": 300,
                                    "style": style})
    p = PROBLEMS["01_swish_bias.py"]
    for kind, (old, new) in BROKEN.items():
        assert old in p["cuda"], kind
        name, text = candidate("01_swish_bias.py", p, "module", 256, ["-O3"],
                               cuda=p["cuda"].replace(old, new, 1))
        path = os.path.join(OUT, f"broken_{kind}.py")
        with open(path, "w") as f:
            f.write(text.replace(name, f"crucible_broken_{kind}"))
        entries.append({"problem": "01_swish_bias.py", "candidate": os.path.relpath(path, os.path.dirname(os.path.dirname(HERE))),
                        "backend": "cuda", "expect": "COMPILATION", "timeout_s": 300,
                        "style": "module"})
    workload = {
        "description": "CUDA build workload (scripts/bench/make_cuda_candidates.py): 36 real "
                       "load_inline candidates for 3 small problems, built at import, in "
                       "ModelNew.__init__ or on the first forward, 2 block sizes, with and "
                       "without extra_cflags -O3; and 3 that fail to compile. Run by "
                       "scripts/bench/builds.py (torch's own load_inline beside ours) and "
                       "through the service by bench.py.",
        "problems_root": "scripts/bench/problems",
        "num_correct_trials": 3,
        "num_perf_trials": 20,
        "entries": entries,
    }
    with open(os.path.join(HERE, "workload-cuda.json"), "w") as f:
        json.dump(workload, f, indent=1)
        f.write("\n")
    print(f"{len(entries)} candidates in {OUT}")


if __name__ == "__main__":
    main()
