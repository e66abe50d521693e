"""Which processes make their CUDA context with one hardware queue (contexts.py): a program
that names no stream and no graph, whatever the case or the language (Python, CUDA source in a
string, nvcc flags); an unreadable one keeps the driver's default; an operator's own setting
is never replaced. The repository's candidates as the rule sorts them. Run by scripts/test.sh;
exit 1 on the first failure."""
import glob
import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")
entry = importlib.util.spec_from_file_location("crucible_harness_entry", HARNESS)
entry.loader.exec_module(importlib.util.module_from_spec(entry))
from crucible_contexts import (HARDWARE_QUEUES_VAR, one_queue_fits, source_of,  # noqa: E402
                               use_one_queue)

PLAIN = """
import torch
from torch.utils.cpp_extension import load_inline
src = '__global__ void k(float* x) { x[threadIdx.x] *= 2; }'
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""
assert one_queue_fits(PLAIN)
for word in ("s = torch.cuda.Stream()", "with torch.cuda.stream(s):", "g = torch.cuda.CUDAGraph()",
             "cudaStream_t st; cudaStreamCreate(&st);", "at::cuda::getStreamFromPool()",
             "extra_cuda_cflags=['--default-stream', 'per-thread']", "torch.cuda.graphs",
             "c10::cuda::CUDAStream", "ExternalStream(ptr)", "cudaGraphLaunch(g, 0)"):
    assert not one_queue_fits(PLAIN + word), word
assert not one_queue_fits(None), "an unknown source keeps the default"
assert one_queue_fits("")

env = {}
assert use_one_queue(env) == "1" and env == {HARDWARE_QUEUES_VAR: "1"}
env = {HARDWARE_QUEUES_VAR: "4"}
assert use_one_queue(env) == "4" and env[HARDWARE_QUEUES_VAR] == "4", "the operator's setting"

assert source_of(os.path.join(REPO, "no-such-file.py")) is None
side_stream = os.path.join(REPO, "tests", "exploits", "matmul__side_stream.py")
assert not one_queue_fits(source_of(side_stream)), "the side-stream exploit keeps its queues"

candidates = sorted(glob.glob(os.path.join(REPO, "scripts", "bench", "candidates", "**", "*.py"),
                              recursive=True))
fits = sum(one_queue_fits(source_of(p)) for p in candidates)
assert candidates and fits, "the bench's candidates: some make their context with one queue"
print(f"check_contexts: ok; {fits} of {len(candidates)} bench candidates with one queue")
