"""Adaptive timing's pure parts, fed synthetic times (no device, no torch call): the median's
interval and its relative standard error, the stopping rule (constant times stop at the
minimum, noisy ones run to the cap, the budget stops early, never before the minimum), and
the judge's own check of the claimed times (timing_check.py: how many fresh calls a batch
gets, the floor, when a claim is under it). Run by scripts/test.sh; exit 1 on the first
failure."""
import importlib.util
import math
import os
import random
import statistics

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")

# Loading the entry point registers every harness module as crucible_<name>.
entry = importlib.util.spec_from_file_location("crucible_harness_entry", HARNESS)
entry.loader.exec_module(importlib.util.module_from_spec(entry))
from crucible_judge_performance import DO_BENCH_REP_MS, adaptive_limits, enough  # noqa: E402
from crucible_tensors import (adaptive_should_stop, median_ci_rank, median_interval,  # noqa: E402
                              median_rel_error, runtime_stats)
from crucible_timing_check import (MISMATCH_REL_TOL, OVERHEAD_MAX_MS, VERIFY_BUDGET_MS,  # noqa: E402
                                   VERIFY_TARGET_MS, sample_matches, sets_match,
                                   timing_floor, timing_mismatch, verify_plan)

MIN, CAP, TARGET, BUDGET = 3, 100, 1e-3, 2000.0
checks = 0


def check(cond, what):
    global checks
    assert cond, what
    checks += 1


def run(times, target=TARGET, budget_ms=BUDGET, per_call_ms=0.0, cap=CAP, min_trials=MIN):
    """How many of `times` the rule lets run, each call taking `per_call_ms` of wall time."""
    made = []
    for t in times[:cap]:
        made.append(t)
        if adaptive_should_stop(made, target, per_call_ms * len(made), budget_ms, cap,
                                min_trials):
            break
    return len(made)


# The interval's ranks: the exact binomial ones (known values of the sign-test table).
check([median_ci_rank(n) for n in (1, 2, 5)] == [1, 1, 1], "below 6 times: [min, max]")
check(median_ci_rank(6) == 1 and median_ci_rank(9) == 2 and median_ci_rank(10) == 2,
      "ranks for 6, 9, 10")
check(median_ci_rank(20) == 6 and median_ci_rank(100) == 40, "ranks for 20, 100")
for n in (6, 17, 50, 333, 1000):   # coverage >= 95 %, and the next rank would not be
    k = median_ci_rank(n)
    tail = sum(math.comb(n, j) for j in range(k)) / 2 ** n
    worse = sum(math.comb(n, j) for j in range(k + 1)) / 2 ** n
    check(tail <= 0.025 < worse, f"rank {k} of {n} is the widest 95 % one")
check(median_interval([5.0, 1.0, 3.0]) == (1.0, 5.0), "3 times: the whole range")

# Constant times stop at the minimum; one call alone never does.
check(run([1.0] * CAP) == MIN, "constant times stop at the minimum")
check(not adaptive_should_stop([1.0, 1.0], TARGET, 0.0, BUDGET, CAP, MIN), "2 < minimum")
check(median_rel_error([1.0] * 5) == 0.0, "no spread, no error")

# Noisy times (5 % spread) never reach 0.1 %: they run to the cap.
rng = random.Random(1)
noisy = [1.0 + rng.gauss(0, 0.05) for _ in range(CAP)]
check(run(noisy) == CAP, "noisy times run to the cap")
check(median_rel_error(noisy) > TARGET, "their median is not known to 0.1 %")

# The budget stops early, but never before the minimum.
check(run(noisy, per_call_ms=100.0, budget_ms=1000.0) == 10, "the budget stops at 10 calls")
check(run(noisy, per_call_ms=5000.0, budget_ms=1.0) == MIN, "not before the minimum")

# A steady kernel with a few slow outliers stops early: the median's error ignores the tail
# that would keep the mean's (or 1.2533 sigma / sqrt(n)) running.
steady = [1.0 + rng.gauss(0, 0.0005) for _ in range(CAP)]
for i in (3, 11, 29):
    steady[i] = 3.0
stopped = run(steady, target=1e-4)
check(MIN < stopped < CAP, f"steady times with outliers stop early ({stopped})")
made = steady[:stopped]
sigma_se = 1.2533 * statistics.pstdev(made) / math.sqrt(len(made)) / statistics.median(made)
check(sigma_se > 100 * 1e-4, "where the normal approximation would not have stopped")

# A looser target stops sooner; a cap below the minimum is still a cap.
check(run(noisy, target=0.05) < CAP, "a 5 % target stops noisy times early")
check(run([1.0] * 10, cap=2, min_trials=3) == 2, "the cap wins over the minimum")

# The statistics reported.
stats = runtime_stats([1.0, 2.0, 3.0, 4.0, 100.0, 2.5])
check(stats["trials"] == 6 and stats["median_ci"] == [1.0, 100.0], "trials, interval of 6")
check(stats["median_ci"][0] <= stats["median"] <= stats["median_ci"][1], "median inside")

# The judge's check of the claimed times. A batch aims at VERIFY_TARGET_MS of work at the
# claimed per-call time: a forger that claims less gets more calls, within what memory fits.
check(verify_plan(0.5, 0.9, 256, "cuda") == math.ceil(VERIFY_TARGET_MS["cuda"] / 0.5), "0.5 ms: 40")
check(verify_plan(0.001, 0.35, 256, "cuda") == 256, "a tiny claim: as many as fit")
check(verify_plan(0.5, 0.9, 3, "cuda") == 3, "memory caps it")
check(verify_plan(500.0, 520.0, 256, "cpu") == 1, "a slow call: one")
check(verify_plan(float("nan"), 1.0, 256, "cuda") >= 1, "no usable claim: still a batch")
check(verify_plan(0.5, 0.9, 0, "cuda") == 1, "never none")
# A forger claiming 0.001 ms of a call the judge's clock saw take 500 ms gets what the budget
# pays for, not thousands of calls.
check(verify_plan(0.001, 500.0, 64, "cpu") == int(VERIFY_BUDGET_MS["cpu"] // 500.0),
      "the judge's own clock bounds the cost")
# The floor: the fastest batch, less one request's overhead bound and the judge's own
# per-call copy/sync time, per call; never negative.
walls = [40 * 0.5 + 0.4, 40 * 0.5 + 3.0]   # 40 calls of 0.5 ms; the second batch hiccuped
floor = timing_floor(walls, 40, 0.01, "cuda")
check(abs(floor - ((20.4 - OVERHEAD_MAX_MS["cuda"]) / 40 - 0.01)) < 1e-12, "fastest batch")
check(floor < 0.5, "the floor is under the real time")
check(timing_floor([0.1], 1, 0.5, "cuda") == 0.0, "never below zero")
# An honest median sits above the floor; a forger's claim of a quarter of it is far below.
check(not timing_mismatch(0.5, floor, "cuda"), "honest")
check(not timing_mismatch(floor * (1 - MISMATCH_REL_TOL["cuda"]) + 0.011, floor, "cuda"),
      "within the tolerance")
check(timing_mismatch(0.125, floor, "cuda"), "a 4x forgery")
check(timing_mismatch(0.35, floor, "cuda"), "a 1.4x forgery")
check(not timing_mismatch(0.0, 0.0, "cuda"), "no floor (tiny work): nothing to say")
check(timing_mismatch(10.0, 100.0, "cpu") and not timing_mismatch(60.0, 100.0, "cpu"),
      "the CPU's wider tolerance")

# A timed call's sampled check: elements drawn in secret, compared with isclose.
import torch  # noqa: E402
from crucible_trusted import capture_trusted  # noqa: E402
capture_trusted(torch)
ref_t = torch.randn(300, 1000)
check(sample_matches([ref_t], [ref_t + 1e-4], 1e-2, 1e-2, 7), "within tolerance")
check(not sample_matches([ref_t], [torch.randn(300, 1000)], 1e-2, 1e-2, 7), "another input's")
check(not sample_matches([ref_t], [ref_t.flip(0)], 1e-2, 1e-2, 7), "rows swapped")
half = ref_t.clone()
half[150:] = 0
check(not sample_matches([ref_t], [half], 1e-2, 1e-2, 7), "half of it skipped")
check(not sample_matches([ref_t], [ref_t.t().contiguous()], 1e-2, 1e-2, 7), "another shape")
check(not sample_matches([ref_t], [ref_t.double()], 1e-2, 1e-2, 7), "another dtype")
check(not sample_matches([ref_t], [], 1e-2, 1e-2, 7), "a tensor missing")
small = torch.randn(10)
check(sample_matches([small], [small.clone()], 1e-2, 1e-2, 7), "a small tensor in full")
check(sample_matches([ref_t.t()], [ref_t.t().clone()], 1e-2, 1e-2, 7), "a strided output")

# A timing-check batch: every set decided at once, as the sets one by one would be.
refs = [[torch.randn(64, 32), torch.randn(300, 1000)] for _ in range(12)]
outs = [[t + 1e-4 for t in r] for r in refs]
seeds = list(range(12))
check(sets_match(refs, outs, 1e-2, 1e-2, seeds), "a right batch")
check(sets_match([], [], 1e-2, 1e-2, []), "an empty batch")
for wrong_set, wrong_tensor in ((0, 0), (11, 1), (5, 0)):
    bad = [list(o) for o in outs]
    bad[wrong_set][wrong_tensor] = torch.randn_like(bad[wrong_set][wrong_tensor])
    check(not sets_match(refs, bad, 1e-2, 1e-2, seeds),
          f"set {wrong_set}'s output {wrong_tensor} wrong")
    check(all(sample_matches(r, o, 1e-2, 1e-2, s) for r, o, s in zip(refs, bad, seeds)) is False,
          "the sets one by one agree")
half_set = [list(o) for o in outs]
half_set[3][1] = half_set[3][1].clone()
half_set[3][1][150:] = 0
check(not sets_match(refs, half_set, 1e-2, 1e-2, seeds), "half of one set's large output skipped")
shape = [list(o) for o in outs]
shape[7][0] = shape[7][0].t().contiguous()
check(not sets_match(refs, shape, 1e-2, 1e-2, seeds), "one set's output of another shape")
check(not sets_match(refs, [o[:1] for o in outs], 1e-2, 1e-2, seeds), "a tensor missing")
mixed_refs = [[torch.randn(8)], [torch.randn(9)]]
check(sets_match(mixed_refs, [[r[0].clone()] for r in mixed_refs], 1e-2, 1e-2, [1, 2]),
      "sets shaped otherwise, compared one by one")
check(not sets_match(mixed_refs, [[mixed_refs[0][0].clone()], [torch.zeros(9)]], 1e-2, 1e-2,
                     [1, 2]), "... and still refused when wrong")
flags = [[torch.rand(50) > 0.5] for _ in range(4)]
check(sets_match(flags, [[f[0].clone()] for f in flags], 0.0, 0.0, [1, 2, 3, 4]), "bool outputs")
check(not sets_match(flags, [[~f[0]] for f in flags], 0.0, 0.0, [1, 2, 3, 4]),
      "bool outputs, flipped")
nan_ref = [[torch.tensor([float("nan"), 1.0])] for _ in range(3)]
check(sets_match(nan_ref, [[r[0].clone()] for r in nan_ref], 1e-2, 1e-2, [1, 2, 3]),
      "NaN where the reference has NaN")

# What the judge sees from outside that a candidate compiled a kernel of its own.
import os  # noqa: E402
import tempfile  # noqa: E402
from crucible_integrity import own_kernel_evidence  # noqa: E402
with tempfile.TemporaryDirectory() as task:
    check(own_kernel_evidence("cpu", "triton", [], task), "the interpreter: nothing to see")
    check(not own_kernel_evidence("cuda", "triton", [], task), "no cubin: none")
    check(not own_kernel_evidence("cuda", "cuda", [], task), "no extension: none")
    check(own_kernel_evidence("cuda", "cuda", [{"name": "ext", "file": "prebuilt/0.so"}], task),
          "built by the compile pool")
    os.makedirs(os.path.join(task, "build", "k1"))
    open(os.path.join(task, "build", "k1", "ext.so"), "wb").close()
    check(own_kernel_evidence("cuda", "cuda", [], task), "built in the task")
    os.makedirs(os.path.join(task, "cache", "triton", "abc"))
    open(os.path.join(task, "cache", "triton", "abc", "k.cubin"), "wb").close()
    check(own_kernel_evidence("cuda", "triton", [], task), "a compiled Triton kernel")

# Work left on the device: a blip that drains at once is nobody's, work that keeps the probes
# slow is measured until it drains (or up to the budget), by the probe's own clock.
from crucible_timing_check import DeviceProbe, INFLIGHT_ALLOWANCE_MS  # noqa: E402
import crucible_timing_check  # noqa: E402


class ScriptedProbe(DeviceProbe):
    """A probe whose latencies are scripted (ms), on a clock that advances by them."""

    def __init__(self, latencies):
        self.latencies = list(latencies)
        self.now_ns = 0

    def once_ms(self):
        ms = self.latencies.pop(0) if self.latencies else 0.01
        self.now_ns += int(ms * 1e6)
        return ms


def lingering(latencies, budget_ms=2000.0):
    probe = ScriptedProbe(latencies)
    real = (crucible_timing_check.perf_counter_ns, crucible_timing_check.time.sleep)
    crucible_timing_check.perf_counter_ns = lambda: probe.now_ns
    crucible_timing_check.time.sleep = lambda s: setattr(probe, "now_ns",
                                                         probe.now_ns + int(s * 1e9))
    try:
        return probe.lingering_ms(budget_ms)
    finally:
        crucible_timing_check.perf_counter_ns, crucible_timing_check.time.sleep = real


check(lingering([0.01] * 9) == 0.0, "quiet probes: nothing lingers")
check(lingering([2.0] + [0.01] * 8) == 0.0, "one slow probe is a hiccup, not work")
blip = lingering([1.6] * 9 + [1.6] * 3)
check(0 < blip < INFLIGHT_ALLOWANCE_MS, f"a blip drains within the allowance: {blip:.1f} ms")
long_work = lingering([1.6] * 400)
check(long_work > INFLIGHT_ALLOWANCE_MS, f"sustained work is measured: {long_work:.1f} ms")
check(lingering([1.6] * 100000, budget_ms=100.0) == 100.0, "work past the budget: the budget")


# The stopping rule of each timing: fixed never stops early; do_bench once the timed calls
# add up to its 100 ms budget, after at least min_trials; adaptive by its own rule.
def spec_of(method, mode="fixed"):
    import types
    return types.SimpleNamespace(timing_method=method, num_perf_trials=100, timing={
        "mode": mode, "target_rel_error": 0.01, "max_time_ms": 1000, "min_trials": 3})


check(adaptive_limits(spec_of("cuda_event")) is None, "fixed cuda_event: every call")
check(adaptive_limits(spec_of("host_time")) is None, "fixed host_time: every call")
check(adaptive_limits(spec_of("cuda_event", "adaptive"))["budget_ms"] == 1000, "adaptive")
bench = adaptive_limits(spec_of("do_bench"))
check(bench == {"do_bench_ms": DO_BENCH_REP_MS, "min_trials": 3}, f"do_bench: {bench}")
check(not enough(bench, [60.0, 60.0], 0), "do_bench: 120 ms but fewer than 3 calls")
check(enough(bench, [50.0, 30.0, 30.0], 0), "do_bench: 110 ms over 3 calls")
check(not enough(bench, [0.01] * 9999, 0), "do_bench: 99.99 ms is under the budget")
check(enough(bench, [0.01] * 10000, 0), "do_bench: 100 ms reached")
check(not enough(None, [1e9] * 1000, 0), "fixed: never early")

print(f"timing: {checks} checks passed")
