"""Tensors on the device: inputs, comparison, timing, and what the device and its software are.
Used alike by the judge and the runner.

Owns: seeding and moving inputs, deep copies, the cast to the request's precision
(to_precision, model_to_precision), the output comparison (compare, outputs_match, DiffStats),
timed_call (one timed forward, by the request's timing method), runtime statistics, the CPU thread count, and the
names of the CPU and of the installed Triton.

May import: trusted, errors.
"""
import copy
import math
import os
import platform
import statistics

from crucible_errors import SetupError
from crucible_trusted import Trusted, perf_counter_ns

FLUSH_BYTES = 256 << 20   # L2 flush buffer on CUDA, as KernelBench / do_bench
# Distributions that may provide the `triton` package (upstream, and PyTorch's own builds).
TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm")


def seed_all(seed, device):
    """Seed torch's CPU generator (and every CUDA generator on a CUDA device)."""
    Trusted.manual_seed(seed)
    if device == "cuda":
        Trusted.cuda_manual_seed_all(seed)


def to_device(obj, device):
    """Move tensors (also inside lists/tuples/dicts) to the device; pass anything else through."""
    torch = Trusted.torch
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


# spec.precision (its names: spec.PRECISIONS) -> the torch dtype floating tensors are cast
# to; fp32 is absent: it leaves a problem as written (its float64 tensors too), as
# KernelBench's default does.
PRECISION_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


def precision_dtype(precision):
    """The dtype of `precision`, or None when tensors stay as the problem makes them."""
    name = PRECISION_DTYPES.get(precision)
    return None if name is None else getattr(Trusted.torch, name)


def to_precision(obj, precision):
    """Floating-point tensors (also inside lists/tuples/dicts) cast to `precision`; integer
    and boolean tensors and anything else passed through."""
    dtype = precision_dtype(precision)
    if dtype is None:
        return obj
    torch = Trusted.torch
    if isinstance(obj, torch.Tensor):
        return obj.to(dtype) if obj.is_floating_point() else obj
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_precision(x, precision) for x in obj)
    if isinstance(obj, dict):
        return {k: to_precision(v, precision) for k, v in obj.items()}
    return obj


def model_to_precision(model, precision):
    """A module's floating parameters and buffers cast to `precision` (Module.to(dtype));
    anything that is not a module is left as it is."""
    dtype = precision_dtype(precision)
    if dtype is None or not isinstance(model, Trusted.torch.nn.Module):
        return model
    return model.to(dtype)


def deep_clone(obj):
    """A private copy per model, so one model mutating its inputs cannot affect the other."""
    torch = Trusted.torch
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(deep_clone(x) for x in obj)
    if isinstance(obj, dict):
        return {k: deep_clone(v) for k, v in obj.items()}
    try:
        return copy.deepcopy(obj)
    except Exception:
        return obj


def as_call_args(inputs):
    """get_inputs() returns a list (KernelBench); tolerate a single tensor or a tuple."""
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


class DiffStats:
    """Absolute differences over all compared elements of all trials (in float64)."""

    def __init__(self):
        self.max = 0.0
        self.sum = 0.0
        self.count = 0
        self.nonfinite = 0   # mismatches whose difference is NaN/Inf (e.g. NaN vs finite)

    def result(self):
        """(max, mean), or (None, None) when nothing was compared or a difference was NaN/Inf
        (JSON cannot carry it; the error message says how many)."""
        if self.count == 0 or self.nonfinite:
            return None, None
        return self.max, self.sum / self.count


def compare(ref, out, atol, rtol, stats, path="output"):
    """Compare one output against the reference; returns a list of problems (empty = pass).

    Structure (tensor vs tuple/list, length), shape, dtype and device must match; then values
    with torch.allclose(atol, rtol, equal_nan=True): NaN where the reference has NaN is fine,
    NaN (or Inf) where the reference is finite is a mismatch.
    """
    torch = Trusted.torch
    if isinstance(ref, torch.Tensor):
        if not isinstance(out, torch.Tensor):
            return [f"{path}: expected a tensor, got {type(out).__name__}"]
        if tuple(out.shape) != tuple(ref.shape):
            return [f"{path}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}"]
        if out.dtype != ref.dtype:
            return [f"{path}: dtype {out.dtype} != expected {ref.dtype}"]
        if out.device != ref.device:
            return [f"{path}: device {out.device} != expected {ref.device}"]
        return _compare_values(ref, out, atol, rtol, stats, path)
    if isinstance(ref, (list, tuple)):
        if not isinstance(out, (list, tuple)):
            return [f"{path}: expected a {type(ref).__name__} of {len(ref)}, "
                    f"got {type(out).__name__}"]
        if len(out) != len(ref):
            return [f"{path}: {len(out)} outputs, expected {len(ref)}"]
        problems = []
        for i, (r, o) in enumerate(zip(ref, out)):
            problems += compare(r, o, atol, rtol, stats, f"{path}[{i}]")
        return problems
    numbers = (int, float)
    if isinstance(ref, numbers) and isinstance(out, numbers) and not isinstance(ref, bool):
        if math.isclose(out, ref, rel_tol=rtol, abs_tol=atol) or (ref != ref and out != out):
            return []
        return [f"{path}: {out!r} != expected {ref!r}"]
    return [] if out == ref else [f"{path}: {out!r} != expected {ref!r}"]


# Elements compared per step: the widened copies of a whole 1.6e9-element output (KernelBench
# level 1) would need ~80 GB; in chunks the comparison needs a few hundred MB.
COMPARE_CHUNK = 1 << 25


def _exact_chunk(r_part, o_part, atol, rtol):
    """One chunk compared in float64 (complex128), NaNs and infinities as isclose with
    equal_nan treats them: [bad, nonfinite, finite count, sum, max] of the differences."""
    torch = Trusted.torch
    wide = torch.complex128 if (r_part.is_complex() or o_part.is_complex()) else torch.float64
    r = r_part.to(wide)
    o = o_part.to(wide)
    diff = (o - r).abs()
    same = (o == r) | (torch.isnan(o) & torch.isnan(r))   # equal infinities, shared NaNs
    diff = diff.masked_fill(same, 0)
    finite = torch.isfinite(diff)
    finite_diff = diff.masked_fill(~finite, 0)
    if r_part.dtype == torch.bool:
        bad = (o_part != r_part).sum()
    else:
        bad = (~Trusted.isclose(o_part, r_part, rtol=rtol, atol=atol, equal_nan=True)).sum()
    return torch.stack([bad.to(torch.float64), (~finite).sum().to(torch.float64),
                        finite.sum().to(torch.float64), finite_diff.sum(), finite_diff.max()])


def _fast_chunk(r_part, o_part, atol, rtol):
    """One float32/float64 chunk in its own dtype (see _compare_values); right only when its
    difference is finite everywhere, which its sum (the fourth entry) tells."""
    torch = Trusted.torch
    diff = (o_part - r_part).abs_()
    allowed = r_part.abs().mul_(rtol).add_(atol)   # isclose's atol + rtol * |other|
    bad = (diff > allowed).sum()
    return torch.stack([bad.to(torch.float64), torch.zeros((), dtype=torch.float64, device=diff.device),
                        torch.full((), diff.numel(), dtype=torch.float64, device=diff.device),
                        diff.sum(dtype=torch.float64), diff.max().to(torch.float64)])


def _compare_values(ref, out, atol, rtol, stats, path):
    """Every reduction stays on the device and is read back once per output: a sync per chunk
    (and boolean-mask indexing, which syncs too) made comparing a 6.4 GB output take ~0.2 s.

    float32 and float64 outputs (nearly all of KernelBench) take a fast path: the difference
    in their own dtype, as isclose computes it, and the same test (|out - ref| > atol +
    rtol * |ref| is a mismatch; for finite values exactly isclose's answer), its sum
    accumulated in float64. That is about half the kernels over half the bytes of the exact
    path, which widens to float64 first: on the H100 the exact path spent ~0.25 s on each
    6 GiB output, the largest part of a KernelBench level-1 correctness stage. A chunk whose
    difference is not finite somewhere (a NaN or an infinity on either side, or an overflow:
    its sum is then not finite) is compared again the exact way."""
    torch = Trusted.torch
    fast = ref.dtype in (torch.float32, torch.float64)   # compare() checked out's dtype
    ref_flat = ref.detach().reshape(-1)
    out_flat = out.detach().reshape(-1)
    parts = []   # per chunk: [bad, nonfinite, finite count, sum, max] as 0-d device tensors
    for start in range(0, ref_flat.numel(), COMPARE_CHUNK):
        r_part = ref_flat[start:start + COMPARE_CHUNK]
        o_part = out_flat[start:start + COMPARE_CHUNK]
        compare_chunk = _fast_chunk if fast else _exact_chunk
        parts.append(compare_chunk(r_part, o_part, atol, rtol))
    if not parts:
        return []
    rows = torch.stack(parts).tolist()
    if fast:
        for i, row in enumerate(rows):
            if not math.isfinite(row[3]):
                begin = i * COMPARE_CHUNK
                rows[i] = _exact_chunk(ref_flat[begin:begin + COMPARE_CHUNK],
                                       out_flat[begin:begin + COMPARE_CHUNK], atol, rtol).tolist()
    bad = int(sum(row[0] for row in rows))
    n_nonfinite = int(sum(row[1] for row in rows))
    chunk_max = max(row[4] for row in rows)
    stats.max = max(stats.max, chunk_max)
    stats.sum += sum(row[3] for row in rows)
    stats.count += int(sum(row[2] for row in rows))
    stats.nonfinite += n_nonfinite
    if bad == 0:
        return []
    msg = f"{path}: {bad} of {ref.numel()} elements differ beyond atol={atol}, rtol={rtol}"
    if n_nonfinite:
        msg += f" ({n_nonfinite} of them NaN/Inf where the reference has another value)"
    else:
        msg += f" (max abs diff {chunk_max:.6g})"
    return [msg]


def runtime_stats(times_ms):
    """median/mean/std/min/max in ms; std is the population std (ddof=0), as numpy's default
    that KernelBench reports; `trials`, the number of times, and `median_ci`, the median's 95 %
    interval (median_interval)."""
    lo, hi = median_interval(times_ms)
    return {
        "median": statistics.median(times_ms),
        "mean": statistics.fmean(times_ms),
        "std": statistics.pstdev(times_ms) if len(times_ms) > 1 else 0.0,
        "min": min(times_ms),
        "max": max(times_ms),
        "trials": len(times_ms),
        "median_ci": [lo, hi],
    }


# Adaptive timing's estimate of how well the median is known. The median is the figure the
# speedup is computed from, so its own error is what decides when to stop, not the mean's
# (kernelbot's std/sqrt(n)/mean). The asymptotic 1.2533·σ/√n holds only for normal data:
# timings are skewed, with rare slow calls (clock ramps, preemption) that inflate σ and would
# keep a stable median running to the cap. The distribution-free interval of the median, two
# order statistics whose ranks come from the binomial distribution, does not care about the
# tails; its width over 2·z is McKean and Schrader's (1984) standard error of the median, and the
# same interval is what the result reports as `median_ci`.
MEDIAN_CI_Z = 1.959964            # the normal quantile of a two-sided 95 % interval
MEDIAN_CI_TAIL_DENOMINATOR = 40   # each tail's probability at most 1/40 = 2.5 %


def median_ci_rank(n):
    """The 1-based rank k of the median's 95 % interval [x_(k), x_(n+1-k)] of n sorted times:
    the largest k with P(Binomial(n, 1/2) <= k - 1) <= 2.5 %, so that the interval covers the
    true median with probability >= 95 % whatever the distribution. Below 6 times no k
    reaches it (2^-5 > 2.5 %): then 1, the whole range [min, max]. Exact integer arithmetic,
    O(n)."""
    total = 1 << n
    k, term, below = 0, 1, 0   # term = C(n, k); below = sum of C(n, j) for j < k
    while 2 * k < n and MEDIAN_CI_TAIL_DENOMINATOR * (below + term) <= total:
        below += term
        k += 1
        term = term * (n - k + 1) // k
    return max(k, 1)


def median_interval(times_ms):
    """The median's distribution-free 95 % interval [lo, hi] (median_ci_rank)."""
    ordered = sorted(times_ms)
    k = median_ci_rank(len(ordered))
    return ordered[k - 1], ordered[len(ordered) - k]


def median_rel_error(times_ms):
    """The relative standard error of the median: the interval's width over 2·z (McKean and
    Schrader's estimator), over the median. 0 when every time is the same, inf when the
    median is 0 but the times are not."""
    lo, hi = median_interval(times_ms)
    median = statistics.median(times_ms)
    if hi == lo:
        return 0.0
    return (hi - lo) / (2 * MEDIAN_CI_Z) / median if median > 0 else math.inf


def adaptive_should_stop(times_ms, target_rel_error, elapsed_ms, budget_ms, max_trials,
                         min_trials):
    """Adaptive timing's stopping rule, pure: whether the timed calls made so far (`times_ms`,
    their wall time `elapsed_ms`) are enough. Never before `min_trials` calls (unless the cap
    `max_trials` is lower), always at `max_trials`; in between, once the time budget is used
    or the median's relative standard error is at most the target."""
    n = len(times_ms)
    if n >= max_trials:
        return True
    if n < min_trials:
        return False
    return elapsed_ms >= budget_ms or median_rel_error(times_ms) <= target_rel_error


def outputs_match(ref, out, spec):
    """A quick pass/fail of `compare` (one isclose pass per tensor, no statistics): the
    timed calls' checks, where only the answer matters."""
    torch = Trusted.torch
    if isinstance(ref, torch.Tensor):
        if not isinstance(out, torch.Tensor) or out.shape != ref.shape or \
                out.dtype != ref.dtype or out.device != ref.device:
            return False
        if ref.dtype == torch.bool:
            return bool(torch.equal(out, ref))
        # In chunks, as _compare_values: isclose's temporaries for a 8.6 GB output are ~20 GB.
        r, o = ref.reshape(-1), out.reshape(-1)
        verdicts = [Trusted.isclose(o[i:i + COMPARE_CHUNK], r[i:i + COMPARE_CHUNK],
                                    rtol=spec.rtol, atol=spec.atol, equal_nan=True).all()
                    for i in range(0, r.numel(), COMPARE_CHUNK)]
        return not verdicts or bool(torch.stack(verdicts).all())
    if isinstance(ref, (list, tuple)):
        return isinstance(out, (list, tuple)) and len(out) == len(ref) and all(
            outputs_match(r, o, spec) for r, o in zip(ref, out))
    return not compare(ref, out, spec.atol, spec.rtol, DiffStats())


def flatten(obj):
    if isinstance(obj, (list, tuple)):
        out = []
        for x in obj:
            out.extend(flatten(x))
        return out
    return [obj]


def tensor_nbytes(obj):
    torch = Trusted.torch
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_nbytes(x) for x in obj)
    return 0


def timed_call(owner, model, args, method="cuda_event"):
    """One timed call, returning (ms, output). CUDA with `cuda_event` or `do_bench` (the two
    differ in how many calls are made, not in one call): flush L2, sync, start event, forward,
    device-wide sync (so work left on side streams is inside the window), end event, sync.
    CUDA with `host_time`: flush L2, sync, then the host's clock around the forward and the
    device-wide sync (launch overhead included). CPU: perf_counter_ns around the forward,
    whatever the method. `owner` holds the flush buffer and events."""
    if owner.device != "cuda":
        t0 = perf_counter_ns()
        out = model(*args)
        return (perf_counter_ns() - t0) / 1e6, out
    owner.flush_buffer.zero_()
    Trusted.synchronize()
    if method == "host_time":
        t0 = perf_counter_ns()
        out = model(*args)
        Trusted.synchronize()
        return (perf_counter_ns() - t0) / 1e6, out
    Trusted.event_record(owner.start_event)
    out = model(*args)
    Trusted.synchronize()
    Trusted.event_record(owner.end_event)
    Trusted.synchronize()
    return Trusted.event_elapsed(owner.start_event, owner.end_event), out


def set_cpu_threads(torch):
    threads = os.environ.get("CRUCIBLE_CPU_THREADS")
    if threads:
        try:
            torch.set_num_threads(max(1, int(threads)))
        except ValueError:
            raise SetupError(f"CRUCIBLE_CPU_THREADS is not an integer: {threads!r}")


def cpu_model_name():
    """The CPU model from /proc/cpuinfo, so CPU timings say where they were taken."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def triton_version():
    """The installed Triton's version from its distribution metadata (without importing it),
    or None when none is installed."""
    try:
        import importlib.metadata as metadata
    except ImportError:
        return None
    for name in TRITON_DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except Exception:
            continue
    return None
