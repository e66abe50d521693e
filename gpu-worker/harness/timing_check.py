"""The judge's own view of a timing: figures the candidate's process cannot write.

Every time the runner reports is a claim: the candidate owns its whole process, so its events,
its clock, the harness's timed call and the transport can all be rewritten there. The judge
checks the claim with what it measures itself:

* **A floor from the judge's clock.** After the timed calls the runner is handed batches of
  input sets it has never seen (drawn from the judge's secret seed, written while the task is
  stopped, after the runner mapped the empty slots) and asked to run the model on each, writing
  every output into a slot of the judge's; the judge times each whole batch with its own clock
  and compares every output with the reference's. Work cannot be skipped (every output is
  checked), done ahead (the content did not exist) or cached (never seen before), so the
  batch's wall time, less a generous bound on one request's overhead and the judge's own
  measurement of the per-call copy (the calls are queued back to back, one sync at the end),
  divided by the calls, is a floor under the candidate's real per-call time. A claimed median below the floor by more than the
  tolerance is the hack `timing-mismatch`. How far a forger can move the number without being
  caught is (OVERHEAD_MAX_MS less the real overhead) / calls + the tolerance: docs/INTEGRITY.md.
* **A quiet device.** A probe (one tiny kernel, the judge's clock around it and a sync) takes
  ~15 us on an idle GPU and a scheduler timeslice (~1.6 ms measured) when another context has
  work queued: the judge times nothing until its probes are quiet (work a parked neighbour left
  queued drains meanwhile), and once the device was quiet and every neighbour is parked, a busy
  probe can only be its own runner's leftover work: the hack `work-in-flight`.

Owns: the probe and its thresholds, the batch sizing (verify_plan), the floor and the check
(timing_floor, timing_mismatch), and their constants; the sampled output check of a call
(sample_matches) and of a whole batch (sets_match); Lap, the judge's clock split into the
named laps of a stage's wall time (stage_ms's timing_* and verify_* keys).

May import: trusted, errors, tensors.
"""
import math
import time

from crucible_tensors import COMPARE_CHUNK, flatten
from crucible_trusted import Trusted, perf_counter_ns

# One request's overhead outside the calls (transport both ways, the runner's dispatch, the
# final sync), at most: a timed request's whole overhead, with three syncs and an IPC export,
# measured 0.29-0.79 ms on the H100/H200 machines (median ~0.35); a batch has none of those
# but its one sync. A batch's floor gives away at most this much per batch.
OVERHEAD_MAX_MS = {"cuda": 0.5, "cpu": 5.0}
# What the batches aim at: enough work that OVERHEAD_MAX_MS is a small share of it.
VERIFY_TARGET_MS = {"cuda": 20.0, "cpu": 40.0}
# What one batch may cost at most, at the judge's own wall time per timed call.
VERIFY_BUDGET_MS = {"cuda": 250.0, "cpu": 500.0}
# The floor comes from the fastest batch: a hiccup of the host only slows one.
VERIFY_BATCHES = {"cuda": 3, "cpu": 2}
# A claimed median may sit this far under the floor before it is a forgery: honest per-call
# times (L2 flushed, one call at a time) sit above the floor, so this covers noise, not them.
# CPU times move with the machine's load between the timed calls and the batches (an honest
# claim was seen at 0.51 of its floor on two loaded cores): there only a gross forgery shows.
MISMATCH_REL_TOL = {"cuda": 0.15, "cpu": 0.7}
MISMATCH_ABS_TOL_MS = 0.01
# A probe slower than this waited for another context's timeslice. A lone probe takes ~15 us; one
# beside queued work anywhere from a few us (the scheduler happened to switch) to ~1.7 ms, so one
# fast probe proves nothing: quiet is QUIET_PROBES fast probes in a row over at least
# QUIET_SPAN_MS (no busy context stays hidden that long), busy is a majority of BUSY_PROBES slow
# ones (one hiccup of the host is not someone's work).
PROBE_BUSY_MS = 0.3
QUIET_PROBES = 30
QUIET_SPAN_MS = 15.0
BUSY_PROBES = 9
QUIET_WAIT_MS = 30000.0         # how long the judge waits for a quiet device before it gives up
# Busy probes after a request that turn quiet within this were a blip (seen once in 48 honest
# tasks on the H100: a legit Triton reduction's verification batch), not work a candidate left
# behind to run beside a neighbour: that is hundreds of ms (measured: 0.5-1 s of side-stream
# matmuls). It bounds what a candidate can leave running unflagged; the next timer's quiet wait
# drains it before anything is timed.
INFLIGHT_ALLOWANCE_MS = 50.0
INFLIGHT_WAIT_MS = 2000.0       # how long the judge watches such work drain (past it: "at least")
PROBE_GAP_S = 0.0005


class DeviceBusy(Exception):
    """The device never became quiet for timing: GPU work of another process kept running. Not
    the candidate's doing as far as the judge can tell: the worker retries the task."""


def verify_plan(claimed_median_ms, wall_median_ms, fit, device):
    """Pure: how many fresh input sets one verification batch runs: enough for
    VERIFY_TARGET_MS of work at the claimed per-call time (a forger that claims less gets a
    longer batch), within the `fit` that memory allows (memory.verify_sets) and within
    VERIFY_BUDGET_MS at the judge's own median wall time of a timed call (which holds the real
    work whatever is claimed, so a false claim cannot make the check run long); at least 1."""
    per_call = max(float(claimed_median_ms), 0.002) if math.isfinite(claimed_median_ms) else 1.0
    wanted = math.ceil(VERIFY_TARGET_MS[device] / per_call)
    affordable = int(VERIFY_BUDGET_MS[device] // max(float(wall_median_ms), 1e-3))
    return max(1, min(wanted, fit, affordable))


def timing_floor(batch_walls_ms, calls, per_call_overhead_ms, device):
    """Pure: the judge's floor under the candidate's per-call time from the wall times of its
    verification batches of `calls` calls each, less one request's overhead bound and the
    judge's own per-call copy time; never below 0."""
    fastest = min(batch_walls_ms)
    return max(0.0, (fastest - OVERHEAD_MAX_MS[device]) / calls - per_call_overhead_ms)


def timing_mismatch(claimed_median_ms, floor_ms, device):
    """Pure: whether a claimed median is under the judge's floor by more than the tolerance."""
    return claimed_median_ms < floor_ms * (1 - MISMATCH_REL_TOL[device]) - MISMATCH_ABS_TOL_MS


class DeviceProbe:
    """The judge's probe of the GPU: a one-element add and a sync, timed by the judge's clock."""

    def __init__(self):
        self.cell = Trusted.torch.zeros(1, device="cuda")

    def once_ms(self):
        Trusted.synchronize()   # the judge's own queued work first
        t0 = perf_counter_ns()
        self.cell.add_(1)
        Trusted.synchronize()
        return (perf_counter_ns() - t0) / 1e6

    def busy(self):
        """Whether another context has work queued: most of BUSY_PROBES probes waited."""
        slow = 0
        for _ in range(BUSY_PROBES):
            slow += self.once_ms() > PROBE_BUSY_MS
            time.sleep(PROBE_GAP_S)
        return slow * 2 > BUSY_PROBES

    def lingering_ms(self, budget_ms=INFLIGHT_WAIT_MS):
        """How long another context's work keeps the device busy from now: 0 when most probes
        are fast, else the wait until quiet, `budget_ms` when it does not get quiet within it."""
        if not self.busy():
            return 0.0
        try:
            return self.wait_quiet(budget_ms)
        except DeviceBusy:
            return budget_ms

    def wait_quiet(self, budget_ms=QUIET_WAIT_MS):
        """Milliseconds waited until the device is quiet (QUIET_PROBES fast probes in a row over
        QUIET_SPAN_MS); DeviceBusy past `budget_ms`."""
        t0 = perf_counter_ns()
        run, run_start = 0, perf_counter_ns()
        while True:
            now = perf_counter_ns()
            if run >= QUIET_PROBES and (now - run_start) / 1e6 >= QUIET_SPAN_MS:
                return (run_start - t0) / 1e6
            if (now - t0) / 1e6 > budget_ms:
                raise DeviceBusy(f"the GPU stayed busy with another process's work for "
                                 f"{(now - t0) / 1e6:.0f} ms")
            if self.once_ms() > PROBE_BUSY_MS:
                run, run_start = 0, perf_counter_ns()
            else:
                run += 1
            time.sleep(PROBE_GAP_S)


# Elements of each output tensor a timed call's check compares (drawn in secret per call).
SAMPLE_ELEMENTS = 1 << 16


def sample_matches(ref_tensors, out_tensors, atol, rtol, seed):
    """Whether a timed call's output tensors match the reference's on SAMPLE_ELEMENTS elements
    of each (all of a smaller tensor), drawn with `seed`, which the runner never sees: an output
    that is wrong in more than a sliver of its elements (kept from another input, skipped work,
    garbage) fails with near certainty, for the cost of a gather, not of a pass over gigabytes.
    Shapes and dtypes must match exactly."""
    return sets_match([ref_tensors], [out_tensors], atol, rtol, [seed])


def sets_match(ref_sets, out_sets, atol, rtol, seeds):
    """Whether every set's output tensors match the reference's as sample_matches decides with
    that set's seed, with one synchronisation for all of them: the samples of each output
    position are stacked across the sets and compared in one pass. A timing-check batch runs
    up to memory.VERIFY_MAX_SETS sets; a comparison and a sync per set were a fifth of a small
    problem's exclusive timing turn (docs/BENCHMARKS.md)."""
    torch = Trusted.torch
    positions = None
    for refs, outs, seed in zip(ref_sets, out_sets, seeds):
        picked = _samples(refs, outs, seed)
        if picked is None:
            return False
        if positions is None:
            positions = [([], []) for _ in picked]
        if len(picked) != len(positions):
            return False
        for (rs, os_), (r_all, o_all) in zip(picked, positions):
            r_all.append(rs)
            o_all.append(os_)
    verdicts = []
    for r_all, o_all in positions or []:
        if len(r_all) == 1 or any(r.shape != r_all[0].shape or r.dtype != r_all[0].dtype
                                  for r in r_all):
            # One call's, or sets shaped otherwise (no arena shares their slots): one by one.
            pairs = zip(r_all, o_all)
        else:
            pairs = [(torch.stack(r_all), torch.stack(o_all))]
        for rs, os_ in pairs:
            if rs.dtype == torch.bool:
                verdicts.append(torch.eq(rs, os_).all())
            else:
                verdicts.append(Trusted.isclose(os_, rs, rtol=rtol, atol=atol,
                                                equal_nan=True).all())
    return not verdicts or bool(torch.stack(verdicts).all())


def _samples(ref_tensors, out_tensors, seed):
    """The elements sample_matches compares, as (reference, output) flat tensors per output
    tensor (empty tensors left out), or None when the outputs are not shaped like the
    reference's: no kernel waits on anything here."""
    torch = Trusted.torch
    if len(ref_tensors) != len(out_tensors):
        return None
    gen = None
    picked = []
    for r, o in zip(ref_tensors, out_tensors):
        if o.shape != r.shape or o.dtype != r.dtype or o.device != r.device:
            return None
        n = r.numel()
        if n == 0:
            continue
        if n <= SAMPLE_ELEMENTS:
            picked.append((r.reshape(-1), o.reshape(-1)))
            continue
        if gen is None:
            gen = torch.Generator(device=r.device)
            gen.manual_seed(seed)
        flat = torch.randint(0, n, (SAMPLE_ELEMENTS,), generator=gen, device=r.device)
        index = torch.unravel_index(flat, r.shape) if r.dim() > 1 else (flat,)
        picked.append((r[index], o[index]))
    return picked


def output_tensors(out):
    """The tensors of an output, flattened in order (what the verification slots hold)."""
    torch = Trusted.torch
    return [t for t in flatten(out) if isinstance(t, torch.Tensor)]


class Lap:
    """Splits a stage's wall time into named laps summed into `into` (milliseconds)."""

    def __init__(self, into):
        self.into = into
        self.t = perf_counter_ns()

    def __call__(self, name):
        now = perf_counter_ns()
        self.into[name] = self.into.get(name, 0.0) + (now - self.t) / 1e6
        self.t = now
