"""The output comparison's fast path (gpu-worker/harness/tensors.py: float32/float64 compared
in their own dtype) against the exact one and against torch.isclose, on the CPU: the same
verdict and mismatch count as isclose(equal_nan=True) for every case, the same statistics as
the exact float64 path (to float32 rounding), and chunks holding a NaN, an infinity or an
overflowing difference handed to the exact path, beside chunks that are not. Run by
scripts/test.sh; exit 1 on the first failure."""
import importlib.util
import math
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")

# Loading the entry point registers every harness module as crucible_<name>.
entry = importlib.util.spec_from_file_location("crucible_harness_entry", HARNESS)
entry.loader.exec_module(importlib.util.module_from_spec(entry))
import torch  # noqa: E402

import crucible_tensors as tensors  # noqa: E402
from crucible_tensors import DiffStats, compare  # noqa: E402
from crucible_trusted import capture_trusted  # noqa: E402

capture_trusted(torch)
tensors.COMPARE_CHUNK = 1000   # several chunks per case, so fast and exact chunks mix
checks = 0
calls = {"fast": 0, "exact": 0}


def counted(kind, fn):
    def chunk(*args):
        calls[kind] += 1
        return fn(*args)
    return chunk


tensors._fast_chunk = counted("fast", tensors._fast_chunk)
tensors._exact_chunk = counted("exact", tensors._exact_chunk)


def check(cond, what):
    global checks
    assert cond, what
    checks += 1


def exact(ref, out, atol, rtol):
    """The exact path alone, as every chunk took it before the fast path."""
    stats = DiffStats()
    fast = tensors._fast_chunk
    tensors._fast_chunk = tensors._exact_chunk
    try:
        problems = compare(ref, out, atol, rtol, stats)
    finally:
        tensors._fast_chunk = fast
    return problems, stats


def case(name, ref, out, atol=1e-2, rtol=1e-2):
    stats = DiffStats()
    problems = compare(ref, out, atol, rtol, stats)
    want_problems, want = exact(ref, out, atol, rtol)
    mismatches = int((~torch.isclose(out, ref, rtol=rtol, atol=atol, equal_nan=True)).sum())
    check(bool(problems) == (mismatches > 0), f"{name}: verdict differs from isclose")
    check(problems == want_problems or (
        problems and want_problems and problems[0].split(" (")[0] == want_problems[0].split(" (")[0]),
        f"{name}: {problems} != {want_problems}")
    if mismatches:
        check(f" {mismatches} of {ref.numel()} elements" in problems[0], f"{name}: count {problems}")
    check((stats.count, stats.nonfinite) == (want.count, want.nonfinite), f"{name}: counts")
    if want.count and not want.nonfinite:
        check(math.isclose(stats.max, want.max, rel_tol=1e-6, abs_tol=1e-30), f"{name}: max")
        check(math.isclose(stats.sum, want.sum, rel_tol=1e-6, abs_tol=1e-30), f"{name}: sum")


gen = torch.Generator().manual_seed(7)
for dtype in (torch.float32, torch.float64):
    ref = torch.randn(5500, generator=gen, dtype=dtype)
    noise = torch.randn(5500, generator=gen, dtype=dtype)
    case(f"{dtype} equal", ref, ref.clone())
    case(f"{dtype} within tolerance", ref, ref + 1e-4 * noise)
    case(f"{dtype} a few beyond", ref, torch.where(noise > 2.5, ref + 1.0, ref))
    case(f"{dtype} all wrong", ref, ref + 1.0)
    case(f"{dtype} at the edge", ref, ref + (1e-2 + 1e-2 * ref.abs()) * 0.999)
    case(f"{dtype} zero tolerances", ref, ref + 1e-4 * noise, atol=0.0, rtol=0.0)
    # NaN and infinity in one chunk only: that chunk is compared exactly, the others fast.
    special = ref.clone()
    special[1200] = float("nan")
    special[1300] = float("inf")
    special[1400] = -float("inf")
    out = special.clone()
    case(f"{dtype} shared NaN and infinities", special, out)
    out[1300] = float("-inf")
    case(f"{dtype} an infinity of the other sign", special, out)
    out = special.clone()
    out[1200] = 0.0
    case(f"{dtype} a number where the reference has NaN", special, out)
    out = ref.clone()
    out[4000] = float("nan")
    case(f"{dtype} NaN where the reference is finite", ref, out)
    big = torch.finfo(dtype).max
    overflow_ref = ref.clone()
    overflow_ref[2500] = big
    out = overflow_ref.clone()
    out[2500] = -big   # the difference overflows to infinity in the output's own dtype
    case(f"{dtype} an overflowing difference", overflow_ref, out)

check(calls["fast"] > 100, f"float32/float64 took the fast path: {calls}")

# Other dtypes keep the exact path.
calls.update(fast=0, exact=0)
half = torch.randn(3000, generator=gen).to(torch.float16)
case("float16", half, half + 1e-3)
ints = torch.randint(0, 10, (3000,), generator=gen)
check(compare(ints, ints.clone(), 0.0, 0.0, DiffStats()) == [], "int64 equal")
check(compare(ints, ints + 1, 0.0, 0.0, DiffStats()) != [], "int64 differ")
check(calls["fast"] == 0 and calls["exact"] > 0, f"other dtypes: the exact path only: {calls}")

print(f"compare: {checks} checks passed")
