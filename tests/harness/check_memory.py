"""The footprint a device child reports before it is let go (gpu-worker/harness/memory.py),
without a GPU: the timing pool's size, the estimate's arithmetic, and its measurement on the
meta device for references whose output is smaller than, as large as, or unknown beside
their inputs (a forward with no meta kernel, a get_inputs() that names its device), and one
whose get_inputs() fails. Nothing may be allocated for real by the measurement of a large
problem. Run by scripts/test.sh; exit 1 on the first failure."""
import importlib.util
import os
import types

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")

# Loading the entry point registers every harness module as crucible_<name>.
entry = importlib.util.spec_from_file_location("crucible_harness_entry", HARNESS)
entry.loader.exec_module(importlib.util.module_from_spec(entry))
import torch  # noqa: E402

from crucible_memory import footprint_bytes, measure, pool_sets, verify_sets  # noqa: E402
from crucible_trusted import capture_trusted  # noqa: E402

capture_trusted(torch)

GIB = 1 << 30
H100 = 80 * GIB
checks = 0


def check(cond, what):
    global checks
    assert cond, what
    checks += 1


# The pool: 3 sets while they fit 35 % of the device, never fewer than 2.
check(pool_sets(1 << 20, H100) == 3, "small sets: the most")
check(pool_sets(12 * GIB, H100) == 2, "12 GiB sets on 80 GiB: two fit 28 GiB")
check(pool_sets(40 * GIB, H100) == 2, "never fewer than two")
check(pool_sets(0, H100) == 3, "no tensors: the most, no division by zero")

# The estimate: KernelBench's 19_ReLU (6 GiB in, 6 GiB out): timing's 2 sets + the runner's
# slot and output + the judge's output slot, 42 GiB (a correctness trial's 3 inputs + 2
# outputs, 30 GiB, is less).
check(footprint_bytes(6 * GIB, 6 * GIB, 0, H100) == 42 * GIB, "relu-sized elementwise")
# A reduction (8 GiB in, small out): three sets fit 28 GiB, so four copies and the output slot.
check(footprint_bytes(8 * GIB, 1 << 20, 0, H100) == 4 * (8 * GIB + (1 << 20)) + (1 << 20),
      "a reduction")
# Small sets: the timing check's fresh sets (up to 256, each twice with its output twice)
# hold more than the timing pool.
check(footprint_bytes(1 << 20, 1 << 20, GIB, H100) == 2 * GIB + 256 * 4 * (1 << 20),
      "parameters count twice (judge and runner); the check's sets")
check(verify_sets(1 << 20, 1 << 20, H100) == 256, "small sets: the most")
check(verify_sets(GIB, GIB, H100) == 3, "4 GiB a set: three fit 15 % of 80 GiB")
check(verify_sets(100 << 20, 100 << 20, H100) == 30, "in between")
check(verify_sets(1 << 20, 1 << 20, None) == 64, "the CPU's 256 MiB")


def reference(model_cls, get_inputs, init=()):
    return types.SimpleNamespace(Model=model_cls, get_inputs=get_inputs,
                                 get_init_inputs=lambda: list(init))


class Sum(torch.nn.Module):
    def forward(self, x):
        return x.sum(dim=1)


class Linear(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.fc = torch.nn.Linear(n, n)

    def forward(self, x):
        return self.fc(x)


class NoMeta(torch.nn.Module):
    def forward(self, x):
        return torch.from_numpy(x.numpy())   # no meta tensor has data to read


# A 64 GiB input would take minutes and the machine's memory if it were made for real: on
# meta it is shapes alone.
huge = reference(Sum, lambda: [torch.randn(4096, 4 * 1024 * 1024)])
nbytes, how = measure(huge, [], Sum(), 0, "fp32", H100)
in_bytes = 4096 * 4 * 1024 * 1024 * 4
check(how is None, f"sum runs on meta: {how}")
check(nbytes == 3 * (in_bytes + 4096 * 4) + 4096 * 4,
      f"sum's footprint: two sets + the slot + the output slot: {nbytes}")

lin = reference(Linear, lambda: [torch.randn(128, 256)], init=[256])
model = Linear(256)
nbytes, how = measure(lin, [256], model, 0, "fp32", H100)
params = (256 * 256 + 256) * 4
check(how is None and nbytes == 2 * params + footprint_bytes(128 * 256 * 4, 128 * 256 * 4, 0,
                                                             H100), "linear with parameters")

nbytes, how = measure(reference(NoMeta, lambda: [torch.randn(64, 64)]), [], NoMeta(), 0, "fp32", H100)
check(how is not None and "sized as the inputs" in how, f"no meta kernel: {how}")
check(nbytes == footprint_bytes(64 * 64 * 4, 64 * 64 * 4, 0, H100), "guessed as the inputs")

named = reference(Sum, lambda: [torch.randn(64, 64, device="cpu")])
nbytes, how = measure(named, [], Sum(), 0, "fp32", H100)
check(how is not None and "names a device" in how, f"get_inputs names its device: {how}")
check(nbytes == footprint_bytes(64 * 64 * 4, 64 * 64 * 4, 0, H100), "sized from real tensors")


def broken():
    raise ValueError("no inputs today")


nbytes, how = measure(reference(Sum, broken), [], Sum(), 0, "fp32", H100)
check(nbytes is None and "ValueError" in how, f"get_inputs() fails: {how}")

# bf16: the inputs and the output are sized in the precision they are cast to; integer
# inputs are not cast.
lin16 = reference(Linear, lambda: [torch.randn(128, 256)], init=[256])
nbytes, how = measure(lin16, [256], Linear(256).to(torch.bfloat16), 0, "bf16", H100)
params16 = (256 * 256 + 256) * 2
# ... plus the float32 inputs while a set is cast.
check(how is None and nbytes == 2 * params16 + footprint_bytes(128 * 256 * 2, 128 * 256 * 2, 0,
                                                               H100) + 128 * 256 * 4,
      f"bf16 linear: {nbytes}")
ints = reference(Sum, lambda: [torch.ones(64, 64, dtype=torch.int32)])
nbytes, how = measure(ints, [], Sum(), 0, "fp16", H100)
check(how is None and nbytes == footprint_bytes(64 * 64 * 4, 64 * 8, 0, H100),
      f"integer inputs keep their dtype: {nbytes} {how}")

print(f"memory: {checks} checks passed")
