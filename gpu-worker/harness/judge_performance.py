"""The judge's `performance` stage: timed calls of the candidate in the runner on inputs the
judge rotates, every output checked; the reference timed here with the rest of the task
stopped; then the judge's own check of the candidate's claimed times (judge_verify.py, on
timing_check.py's floor); the plausibility checks.

Owns: PerformanceStage, a part of Evaluation, the timing pool's limits, how adaptive timing
(spec.timing) or do_bench's budget (spec.timing_method) stops both models' timed calls, and the
compiled reference of reference_backend `compile` (the pool's size is memory.py's: the worker
admits children by it; the verification batches that give the judge's floor are
judge_verify.py's).

May import: trusted, errors, tensors, transport, integrity, memory, timing_check.
"""
import math
import os
import random
import statistics

import crucible_transport as transport
from crucible_errors import CAUGHT, MAX_ERROR_CHARS, Verdict
from crucible_integrity import peak_memory_bandwidth
from crucible_memory import TIMING_POOL_MAX, pool_sets
from crucible_tensors import (DiffStats, adaptive_should_stop, compare, deep_clone,
                              outputs_match, runtime_stats, tensor_nbytes, timed_call)
from crucible_timing_check import DeviceProbe, Lap, output_tensors
from crucible_trusted import Trusted, perf_counter_ns

LARGE_SET_BYTES = 1 << 30    # inputs + outputs above this: release cached memory before timing
DO_BENCH_REP_MS = 100.0      # triton.testing.do_bench's measurement budget (its `rep`)
TIMING_FULL_CHECKS = 8       # calls (drawn in secret) compared in full; every call is sampled
# Threads the runner may have beyond its count before the candidate ran (torch's and the
# driver's pools start lazily) before the judge's own count says the candidate started some.
THREAD_ALLOWANCE = 64


def adaptive_limits(spec):
    """The stopping rule's arguments: adaptive timing's from spec.timing; do_bench's budget
    (spec.timing_method: the timed calls stop once their times add up to DO_BENCH_REP_MS, as
    do_bench sizes its repeat count, and after at least min_trials); None when every
    num_perf_trials call is made."""
    t = spec.timing
    if spec.timing_method == "do_bench":
        return {"do_bench_ms": DO_BENCH_REP_MS, "min_trials": t["min_trials"]}
    if t["mode"] != "adaptive":
        return None
    return {"target_rel_error": t["target_rel_error"], "budget_ms": t["max_time_ms"],
            "max_trials": spec.num_perf_trials, "min_trials": t["min_trials"]}


def enough(adaptive, times, started_ns):
    """Whether the timed calls may stop after `times` (fixed timing: never early)."""
    if adaptive is None:
        return False
    if "do_bench_ms" in adaptive:
        return len(times) >= adaptive["min_trials"] and math.fsum(times) >= adaptive[
            "do_bench_ms"]
    return adaptive_should_stop(
        times, adaptive["target_rel_error"], (perf_counter_ns() - started_ns) / 1e6,
        adaptive["budget_ms"], adaptive["max_trials"], adaptive["min_trials"])


def poison_slots(slots, expected):
    """Makes every output slot differ from its expected output everywhere before a call (NaN,
    or the expected value plus one, or its negation for bool), so that a runner that claims to
    have written its output there and did not gives a wrong output, never a right one."""
    torch = Trusted.torch
    for slot, want in zip(slots, expected):
        if slot.is_floating_point() or slot.is_complex():
            slot.fill_(float("nan"))
        elif slot.dtype == torch.bool:
            torch.logical_not(want, out=slot)
        else:
            torch.add(want, 1, out=slot)


class PerformanceStage:
    """Evaluation's performance stage."""

    def timing_pool_size(self, inputs, ref_out):
        """Input sets the timed calls rotate through (memory.pool_sets)."""
        if self.device != "cuda":
            return TIMING_POOL_MAX
        torch = Trusted.torch
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        return pool_sets(tensor_nbytes(inputs) + tensor_nbytes(ref_out), total)

    def performance(self):
        """Timed calls on inputs the judge rotates: a pool of input sets (seeds drawn from the
        secret seed) with their reference outputs; the runner sees one input slot whose
        contents the judge rewrites from another set of the pool before every call, and every
        warm-up and timed call has its output compared with the reference's and its inputs
        checked unchanged. Nothing is timed until the device is quiet (timing_check: work a
        parked neighbour left queued drains first). The reference is timed here in the judge
        the same way (unless the worker passed its cached timing), with the runner and every
        other process of the task stopped: L2 flush, sync, start event, forward, device-wide
        sync (work on side streams counts), end event. The candidate's calls run with the
        task's other processes stopped. In adaptive timing (spec.timing) both models' timed
        calls stop once adaptive_should_stop says so. The candidate's times are its process's
        claim: verify_timing checks them with the judge's own clock."""
        spec = self.spec
        torch = Trusted.torch
        large = self.device == "cuda" and self.set_bytes > LARGE_SET_BYTES
        if large:   # what correctness left cached in both processes, before the pool
            torch.cuda.empty_cache()
            self.ask("release", trim=True)
        self.probe = DeviceProbe() if self.device == "cuda" else None
        # Where the stage's time goes, for stage_ms (timing_* keys, docs/BENCHMARKS.md).
        spent = {"timing_calls": 0.0, "timing_imports": 0.0}
        lap = Lap(spent)
        # With this task stopped too: what keeps the device busy then is work already queued
        # (a parked neighbour's, or this candidate's own), which drains.
        with self.runner.stopped(everything=True):
            waited = self.probe.wait_quiet() if self.probe else 0.0
        check = {"quiet_wait_ms": waited, "device_quiet": True}
        self.result["timing_check"] = check
        self.observe_task("when timing began")
        lap("timing_quiet")
        pool = self.timing_pool()
        lap("timing_pool")
        cached_ref = spec.reference_timing
        if cached_ref is None:
            with self.runner.stopped(everything=True):
                ref = runtime_stats(self.time_reference(pool))
            lap("timing_reference")
            # Only a timing taken on a quiet device with the task stopped may be cached.
            check["device_quiet"] = not (self.probe and self.probe.busy())
            if large:   # its temporaries, before the runner's turn
                torch.cuda.empty_cache()
        else:
            ref = dict(cached_ref)
        descs, views = self.share_inputs(pool[0][0])
        # Where the runner copies each call's output once its timing has ended, when it has
        # the reference's shapes (transport.copy_into_slots): the judge's memory, shared once,
        # so that no IPC handle or event is made inside a timed call.
        out_descs, out_views = self.share_slots(output_tensors(pool[0][1]))
        self.ask("slot", slot=0, inputs=descs, outputs=out_descs)
        content = 0
        total = spec.num_warmup + spec.num_perf_trials
        adaptive = adaptive_limits(spec)
        cand_times, walls, wrong_calls = [], [], []
        started = None   # the first timed call's start: adaptive timing's budget runs from it
        # Every call's output is checked against the reference's for the content the call got
        # on elements drawn in secret (timing_check.sample_matches); a few calls, drawn in
        # secret too, are compared in full with their inputs checked.
        full = set(self.rng.sample(range(total), min(total, TIMING_FULL_CHECKS)))
        # The calls' requests (the runner's call and its export of the outputs) and the
        # judge's mapping of those outputs are summed as timing_calls and timing_imports.
        with self.runner.stopped(everything=False):
            for k in range(total):
                timed = k >= spec.num_warmup
                call = f"timed call {k - spec.num_warmup}" if timed else f"warm-up call {k}"
                if len(pool) > 1:
                    content = self.rng.choice([c for c in range(len(pool)) if c != content])
                poison_slots(out_views, output_tensors(pool[content][1]))
                if len(pool) > 1:
                    self.write_content(views, pool[content][0])   # (waits for the poison too)
                else:
                    self.sync()
                t0 = perf_counter_ns()
                if timed and started is None:
                    started = t0
                reply = self.ask("time", slot=0, timed=timed, method=spec.timing_method)
                t1 = perf_counter_ns()
                wall_ms = (t1 - t0) / 1e6
                ms = reply.get("ms")
                if type(ms) not in (int, float) or not 0 <= ms < math.inf:
                    raise Verdict("RUNTIME", "the runner reported no usable time")
                try:
                    out = transport.from_slots(reply["slots"], out_views) if "slots" in reply \
                        else self.import_outputs(reply.get("outputs"))
                except transport.TransportError as e:
                    raise Verdict("RUNTIME", f"{call}: unusable output: {e}")
                spent["timing_calls"] += wall_ms
                spent["timing_imports"] += (perf_counter_ns() - t1) / 1e6
                if timed:
                    cand_times.append(float(ms))
                    walls.append(wall_ms)
                    if ms > wall_ms:
                        self.add_finding("timing-inconsistent", f"{call} reported {ms:.3f} ms; "
                                         "the judge's clock saw the whole request take "
                                         f"{wall_ms:.3f} ms")
                if self.checks and not self.call_output_right(pool[content][1], out, k in full):
                    problems = compare(pool[content][1], out, spec.atol, spec.rtol,
                                       DiffStats()) or ["output differs"]
                    if self.matches_other_input(pool, content, out):
                        self.add_finding("stale-output", f"{call} returned the result for an "
                                         f"earlier input: {problems[0]}")
                    elif not wrong_calls:
                        wrong_calls.append(f"{call}: {problems[0]}")
                if self.checks and k in full:
                    changed = self.inputs_changed(views, pool[content][0])
                    if changed is not None:
                        self.add_finding("input-mutated", f"{call}: input {changed} was changed")
                del out
                if timed and enough(adaptive, cand_times, started):
                    break
        self.ask("release")
        lap("timing_loop")
        if wrong_calls and not self.hacks():
            raise Verdict("CORRECTNESS", "after passing all correctness trials, an output of "
                          f"a warm-up or timed call was wrong: {wrong_calls[0]}"[:MAX_ERROR_CHARS],
                          compiled=True)
        cand = runtime_stats(cand_times)
        self.result["ref_runtime_ms"] = ref
        self.result["ref_timing_cached"] = cached_ref is not None
        self.result["runtime_ms"] = cand
        self.result["speedup"] = ref["median"] / cand["median"] if cand["median"] > 0 else None
        input_bytes = tensor_nbytes(pool[0][0])
        del pool, views, descs, out_views, out_descs
        if self.checks:
            if large:   # the pool's memory, before the timing check's sets
                torch.cuda.empty_cache()
                self.ask("release", trim=True)
            self.verify_timing(cand["median"], statistics.median(walls) if walls else math.inf)
            lap("timing_verify")
        self.check_plausibility(input_bytes, cand)
        self.stage_ms.update(spent)

    def timing_pool(self):
        """The input sets the timed calls rotate through, with their reference outputs (in a
        function of its own: nothing of the pool outlives it in the caller's locals, so the
        timing check finds its memory free)."""
        seeds = random.Random(self.input_seed ^ 0x5EED)
        pool = []
        for _ in range(TIMING_POOL_MAX if self.checks else 1):
            inputs = self._fresh_inputs(seeds.randrange(2 ** 32),
                                        "get_inputs() failed (performance)")
            args = deep_clone(inputs) if self.reference_mutates else inputs
            pool.append((inputs, self._run_reference(args, "reference forward failed (timing)")))
            del args
            if len(pool) >= self.timing_pool_size(*pool[0]):
                break
        return pool

    def write_content(self, views, inputs, wait=True):
        """Writes an input set into the runner's slot views, and waits for it (unless `wait`
        is false: the caller waits once for several)."""
        torch = Trusted.torch
        for view, src in zip(views, inputs):
            if isinstance(src, torch.Tensor):
                view.copy_(src)
        if wait:
            self.sync()

    def observe_task(self, when):
        """What the judge sees of the task from outside the runner (/proc, the kernel's word,
        not the runner's): processes the candidate left alive beside its runner, and threads
        beyond what the runner had before the candidate ran."""
        left = self.runner.others(live_only=True)
        if left:
            self.add_finding("processes-left", f"{len(left)} process(es) of the candidate's "
                             f"were alive beside its runner {when}")
        threads, before = self.runner.threads(), self.runner_threads_at_setup
        if threads is not None and before is not None and threads > before + THREAD_ALLOWANCE:
            self.add_finding("threads-started", f"the runner had {threads} threads {when}, "
                             f"{before} before the candidate ran (the judge's own count)")

    def matches_other_input(self, pool, j, out):
        """Whether a wrong output is right for another input of the pool: a kept result."""
        return any(outputs_match(pool[c][1], out, self.spec) for c in range(len(pool)) if c != j)

    def check_plausibility(self, input_bytes, cand):
        speedup = self.result["speedup"]
        if speedup is not None and speedup > self.spec.max_speedup:
            self.add_finding("implausible-speedup", f"speedup {speedup:.1f}x is over the "
                             f"plausibility threshold {self.spec.max_speedup:g}x")
        if self.device == "cuda":
            bandwidth = peak_memory_bandwidth(Trusted.torch)
            floor_ms = input_bytes / bandwidth * 1e3 if bandwidth else 0.0
            # Inputs come from memory after the L2 flush; half the floor leaves room for
            # clock and measurement slack.
            if cand["median"] < 0.5 * floor_ms:
                self.add_finding("faster-than-memory-bound", f"median {cand['median']:.4f} ms "
                                 f"is under half the {floor_ms:.4f} ms needed to read the "
                                 "inputs once at peak memory bandwidth")

    compiled_ref = None   # compile_reference()'s, when reference_backend is compile

    def compile_reference(self):
        """reference_backend `compile`: torch.compile(reference), compiled and run once on an
        input set here, before the timing gate, so its seconds of compilation never hold the
        device's timing turn. Inductor's caches go to the task directory, and it compiles in
        this process (no pool of compile workers to start under the sandbox's process limit
        for one graph). Correctness stays the eager reference's; only its timing is the
        compiled one's."""
        torch = Trusted.torch
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(self.taskdir, "cache", "inductor")
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        inputs = self._fresh_inputs(self.input_seed ^ 0xC0DE, "get_inputs() failed (compile)")
        args = deep_clone(inputs) if self.reference_mutates else inputs
        try:
            import torch._inductor.config as inductor_config
            inductor_config.compile_threads = 1
            compiled = torch.compile(self.ref_model)
            compiled(*args)
            self.sync()
        except CAUGHT as e:
            self.reference_failed(e, "torch.compile of the reference failed")
        self.compiled_ref = compiled

    def time_reference(self, pool):
        spec = self.spec
        model = self.ref_model if self.compiled_ref is None else self.compiled_ref
        args = [deep_clone(inputs) if self.reference_mutates else inputs for inputs, _ in pool]
        try:
            for k in range(spec.num_warmup):
                model(*args[k % len(args)])
                self.sync()
        except CAUGHT as e:
            self.reference_failed(e, "reference forward failed (warm-up)")
        times = []
        adaptive = adaptive_limits(spec)
        started = perf_counter_ns()
        try:
            for k in range(spec.num_perf_trials):
                times.append(timed_call(self, model, args[k % len(args)],
                                        spec.timing_method)[0])
                if enough(adaptive, times, started):
                    break
        except CAUGHT as e:
            self.reference_failed(e, "reference forward failed (timed)")
        return times
