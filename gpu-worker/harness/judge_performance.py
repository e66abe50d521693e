"""The judge's `performance` stage: timed calls of the candidate in the runner on inputs the
judge rotates, checked at random; the reference timed here; the plausibility checks.

Owns: PerformanceStage, a part of Evaluation, the timing pool's limits, which calls are
checked, how adaptive timing (spec.timing) or do_bench's budget (spec.timing_method) stops both
models' timed calls, and the compiled reference of reference_backend `compile` (the pool's
size is memory.py's: the worker admits children by it).

May import: trusted, errors, tensors, transport, integrity, memory.
"""
import math
import os
import random

import crucible_transport as transport
from crucible_errors import CAUGHT, MAX_ERROR_CHARS, Verdict
from crucible_integrity import peak_memory_bandwidth
from crucible_memory import TIMING_POOL_MAX, pool_sets
from crucible_tensors import (DiffStats, adaptive_should_stop, compare, deep_clone,
                              outputs_match, runtime_stats, tensor_nbytes, timed_call)
from crucible_trusted import Trusted, perf_counter_ns

LARGE_SET_BYTES = 1 << 30    # inputs + outputs above this: release cached memory before timing
TIMING_CHECKS = 8            # warm-up and timed calls whose outputs are compared
TIMING_ROTATE_SHARE = 0.1    # share of the other calls before which the inputs change too
DO_BENCH_REP_MS = 100.0      # triton.testing.do_bench's measurement budget (its `rep`)


def checked_calls(rng, total, guaranteed):
    """The warm-up and timed calls (indices among `total`) whose outputs are checked, drawn
    with the judge's rng, unknown to the runner. All `total` calls are made in fixed timing
    (`guaranteed == total`): TIMING_CHECKS drawn over them, as always. Adaptive timing may stop
    after the first `guaranteed` calls (warm-up + its minimum): half the checks are drawn
    among those, so every run checks some of the calls it makes, the rest over the calls it
    may make."""
    if guaranteed >= total:
        return set(rng.sample(range(total), min(total, TIMING_CHECKS)))
    early = set(rng.sample(range(guaranteed), min(guaranteed, TIMING_CHECKS // 2)))
    late = rng.sample(range(guaranteed, total),
                      min(total - guaranteed, TIMING_CHECKS - len(early)))
    return early | set(late)


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
        contents the judge rewrites from another set of the pool before every checked call and
        a random share of the others (so a result kept from an earlier call, keyed on pointer,
        shape or call count, is stale there). A few warm-up and timed calls, chosen at random
        and unknown to the runner, have their outputs compared with the reference's and their
        inputs checked unchanged. The reference is timed here in the judge the same way (unless
        the worker passed its cached timing): L2 flush, sync, start event, forward, device-wide
        sync (work on side streams counts), end event. In adaptive timing (spec.timing) both
        models' timed calls stop once adaptive_should_stop says so; the checked calls are then
        drawn so that some fall among the calls every run makes (checked_calls)."""
        spec = self.spec
        torch = Trusted.torch
        large = self.device == "cuda" and self.set_bytes > LARGE_SET_BYTES
        if large:   # what correctness left cached in both processes, before the pool
            torch.cuda.empty_cache()
            self.ask("release", trim=True)
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
        cached_ref = spec.reference_timing
        if cached_ref is None:
            ref = runtime_stats(self.time_reference(pool))
            if large:   # its temporaries, before the runner's turn
                torch.cuda.empty_cache()
        else:
            ref = dict(cached_ref)
        descs, views = self.share_inputs(pool[0][0])
        self.ask("slot", slot=0, inputs=descs)
        content = 0
        total = spec.num_warmup + spec.num_perf_trials
        adaptive = adaptive_limits(spec)
        guaranteed = total if adaptive is None else \
            spec.num_warmup + min(adaptive["min_trials"], spec.num_perf_trials)
        checked = checked_calls(self.rng, total, guaranteed) if self.checks else set()
        cand_times, wrong_calls = [], []
        started = None   # the first timed call's start: adaptive timing's budget runs from it
        for k in range(total):
            timed = k >= spec.num_warmup
            call = f"timed call {k - spec.num_warmup}" if timed else f"warm-up call {k}"
            if len(pool) > 1 and (k in checked or self.rng.random() < TIMING_ROTATE_SHARE):
                content = self.rng.choice([c for c in range(len(pool)) if c != content])
                for view, src in zip(views, pool[content][0]):
                    if isinstance(src, torch.Tensor):
                        view.copy_(src)
                self.sync()
            t0 = perf_counter_ns()
            if timed and started is None:
                started = t0
            reply = self.ask("time", slot=0, timed=timed, method=spec.timing_method)
            wall_ms = (perf_counter_ns() - t0) / 1e6
            ms = reply.get("ms")
            if type(ms) not in (int, float) or not 0 <= ms < math.inf:
                raise Verdict("RUNTIME", "the runner reported no usable time")
            try:
                out = self.import_outputs(reply.get("outputs"))
            except transport.TransportError as e:
                raise Verdict("RUNTIME", f"{call}: unusable output: {e}")
            if timed:
                cand_times.append(float(ms))
                if ms > wall_ms:
                    self.add_finding("timing-inconsistent", f"{call} reported {ms:.3f} ms; the "
                                     f"judge's clock saw the whole request take {wall_ms:.3f} ms")
            if k in checked and not outputs_match(pool[content][1], out, spec):
                problems = compare(pool[content][1], out, spec.atol, spec.rtol,
                                   DiffStats()) or ["output differs"]
                if self.matches_other_input(pool, content, out):
                    self.add_finding("stale-output", f"{call} returned the result for an "
                                     f"earlier input: {problems[0]}")
                elif not wrong_calls:
                    wrong_calls.append(f"{call}: {problems[0]}")
            if k in checked:
                changed = self.inputs_changed(views, pool[content][0])
                if changed is not None:
                    self.add_finding("input-mutated", f"{call}: input {changed} was changed")
            del out
            if timed and enough(adaptive, cand_times, started):
                break
        self.ask("release")
        if wrong_calls and not self.hacks():
            raise Verdict("CORRECTNESS", "after passing all correctness trials, an output of "
                          f"a warm-up or timed call was wrong: {wrong_calls[0]}"[:MAX_ERROR_CHARS],
                          compiled=True)
        cand = runtime_stats(cand_times)
        self.result["ref_runtime_ms"] = ref
        self.result["ref_timing_cached"] = cached_ref is not None
        self.result["runtime_ms"] = cand
        self.result["speedup"] = ref["median"] / cand["median"] if cand["median"] > 0 else None
        self.check_plausibility(pool[0][0], cand)

    def matches_other_input(self, pool, j, out):
        """Whether a wrong output is right for another input of the pool: a kept result."""
        return any(outputs_match(pool[c][1], out, self.spec) for c in range(len(pool)) if c != j)

    def check_plausibility(self, inputs, cand):
        speedup = self.result["speedup"]
        if speedup is not None and speedup > self.spec.max_speedup:
            self.add_finding("implausible-speedup", f"speedup {speedup:.1f}x is over the "
                             f"plausibility threshold {self.spec.max_speedup:g}x")
        if self.device == "cuda":
            bandwidth = peak_memory_bandwidth(Trusted.torch)
            floor_ms = tensor_nbytes(inputs) / bandwidth * 1e3 if bandwidth else 0.0
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
