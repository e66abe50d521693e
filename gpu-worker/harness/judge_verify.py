"""The performance stage's check of the candidate's claimed times by the judge's own clock
(timing_check.py's floor and probe): batches of fresh input sets, written into slots the
runner mapped empty while the task is stopped, run in one request the judge times, every output
compared; and the sampled output check of every timed call.

Owns: TimingVerification, a part of Evaluation (verify_timing and its batches, the output
slots the runner writes into, the calibration of the per-call copy), the rounds of batches
while a claim looks forged, and which input sets fit slots shared for another (set_signature).

May import: trusted, errors, transport, tensors, memory, timing_check.
"""
import random

import crucible_transport as transport

from crucible_errors import MAX_ERROR_CHARS, Verdict
from crucible_memory import verify_sets
from crucible_tensors import DiffStats, compare, deep_clone, outputs_match, tensor_nbytes
from crucible_timing_check import (INFLIGHT_ALLOWANCE_MS, VERIFY_BATCHES, Lap, output_tensors,
                                   sample_matches, sets_match, timing_floor, timing_mismatch,
                                   verify_plan)
from crucible_trusted import Trusted, perf_counter_ns

CALIBRATION_CALLS = 10       # the judge's own per-call copies, timed to subtract ...
CALIBRATION_ROUNDS = 5       # ... as the median of this many runs
# Rounds of timing-check batches while the claim looks forged: on a GPU a busy host slows
# every batch of a round now and then; the CPU's wide tolerance already covers its load.
VERIFY_ROUNDS = {"cuda": 3, "cpu": 1}


def set_signature(input_set):
    """Pure: what decides whether an input set fits slots shared for another: each input's
    shape and dtype (a tensor) or value (anything else, sent by value), and each expected
    output's shape and dtype."""
    inputs, expected = input_set
    sig = []
    for x in inputs:
        if hasattr(x, "shape") and hasattr(x, "dtype"):
            sig.append(("tensor", tuple(x.shape), str(x.dtype)))
        else:
            sig.append(("value", repr(x)))
    sig += [("out", tuple(t.shape), str(t.dtype)) for t in expected]
    return tuple(sig)

class TimingVerification:
    """Evaluation's check of the claimed times, called by the performance stage."""

    def call_output_right(self, ref_out, out, in_full):
        """A timed call's output against the reference's for its content: in full on the calls
        drawn for it, else on elements drawn in secret (timing_check.sample_matches)."""
        spec = self.spec
        if in_full:
            return outputs_match(ref_out, out, spec)
        if type(out) is not type(ref_out) and not (
                isinstance(out, (list, tuple)) and isinstance(ref_out, (list, tuple))):
            return False
        return sample_matches(output_tensors(ref_out), output_tensors(out), spec.atol,
                              spec.rtol, self.rng.getrandbits(63))

    def fresh_set(self, seeds):
        """An input set never shown to the runner, and the reference's output tensors for it."""
        return self.fresh_sets(seeds, 1)[0]

    def fresh_sets(self, seeds, n):
        """`n` such sets, their references queued back to back and waited for once: a device
        sync per set was a third of a small problem's timing check (docs/BENCHMARKS.md). The
        generators are seeded once for the `n` (from the secret `seeds`) and move on from set
        to set: torch's manual_seed costs ~0.1 ms (it formats a stack for the lazy seeding of
        devices this node does not have), which was 60 % of a small problem's set."""
        context = "reference forward failed (timing check)"
        sets = []
        seed = seeds.randrange(2 ** 32)
        for i in range(n):
            inputs = self._fresh_inputs(seed if i == 0 else None,
                                        "get_inputs() failed (timing check)")
            args = deep_clone(inputs) if self.reference_mutates else inputs
            sets.append((inputs, output_tensors(self._run_reference(args, context, sync=False))))
        self.reference_synced(context)
        return sets

    def verify_timing(self, claimed_ms, wall_ms):
        """The judge's floor under the candidate's per-call time: VERIFY_BATCHES batches of
        fresh input sets, each written while the task is stopped into slots the runner mapped
        empty, run in one request the judge times, every output compared. A claimed median
        under the floor beyond the tolerance is the hack `timing-mismatch`, once up to
        VERIFY_ROUNDS rounds of batches agree (a busy host only slows a batch, so the fastest
        batch of more rounds is a floor at least as sound); work left running on the device
        after a request (the device was quiet before it) is the hack `work-in-flight`; a wrong
        output here is CORRECTNESS, as in the timed calls.

        The slots are shared once for every batch (each share is CUDA IPC, which waits on the
        driver's node-wide lock: docs/gpu-runs/2026-11-28-contention-h200/) and only shared
        again for a batch whose sets are shaped otherwise. Reuse gives nothing away: a batch's
        content does not exist until the judge writes it, the runner stopped, and its output
        slots are poisoned first."""
        seeds = random.Random(self.rng.getrandbits(63))
        first = self.fresh_set(seeds)
        fit = verify_sets(tensor_nbytes(first[0]), tensor_nbytes(first[1]), self.device_memory())
        calls = verify_plan(claimed_ms, wall_ms, fit, self.device)
        per_call_ms = self.calibrate_per_call(first[1])
        walls, arena = [], None
        for _ in range(VERIFY_ROUNDS[self.device]):
            for _ in range(VERIFY_BATCHES[self.device]):
                wall, arena = self.verify_batch(seeds, first, calls, arena, len(walls))
                walls.append(wall)
                first = None
            floor = timing_floor(walls, calls, per_call_ms, self.device)
            if not timing_mismatch(claimed_ms, floor, self.device):
                break
        self.ask("release")
        self.result["timing_check"].update({
            "floor_ms": floor, "calls": calls, "batches": len(walls),
            "batch_ms": min(walls), "call_overhead_ms": per_call_ms})
        if timing_mismatch(claimed_ms, floor, self.device):
            self.add_finding("timing-mismatch", f"the runner's median {claimed_ms:.4f} ms is "
                             f"under the judge's own floor of {floor:.4f} ms per call "
                             f"({calls} fresh calls per batch, fastest of {len(walls)} "
                             f"batches {min(walls):.3f} ms)")

    def share_verify_slots(self, sets):
        """Empty slots for a batch shaped like `sets`, mapped by the runner before their content
        exists: returns the arena (its signature and the judge's views of each set's slots)."""
        if self.device == "cuda":
            entries, fills = self.packed_verify_slots(sets)
        else:
            entries, fills = [], []
            for inputs, expected in sets:
                in_descs, in_views = self.share_inputs(inputs, content=False)
                out_descs, out_views = self.share_slots(expected)
                entries.append({"inputs": in_descs, "outputs": out_descs})
                fills.append((in_views, out_views))
        self.ask("verify_setup", sets=entries)
        return set_signature(sets[0]), fills

    def packed_verify_slots(self, sets):
        """On CUDA every slot of a batch is a view of one allocation of the share pool, shaped
        and strided as empty_like would make it and exported once
        (transport.Exporter.export_packed): slots of their own cost a batch of 256 sets 512
        exports and as many mappings, each through the driver's node-wide lock. Returns the
        runner's entries and the judge's (input views, output views) per set."""
        torch = Trusted.torch
        like = [torch.empty_like(t, device="meta") for inputs, expected in sets
                for t in [*inputs, *expected] if isinstance(t, torch.Tensor)]
        with torch.cuda.use_mem_pool(self.share_pool):
            descs, views = self.exporter.export_packed(like, torch.cuda.current_device())
        slots = iter(zip(descs, views))
        entries, fills = [], []
        for inputs, expected in sets:
            in_descs, in_views = [], []
            for x in inputs:
                if isinstance(x, torch.Tensor):
                    desc, view = next(slots)
                    in_descs.append({"tensor": desc})
                    in_views.append(view)
                else:
                    in_descs.append(transport.value_description(x))
                    in_views.append(x)
            outs = [next(slots) for _ in expected]
            entries.append({"inputs": in_descs, "outputs": [desc for desc, _ in outs]})
            fills.append((in_views, [view for _, view in outs]))
        return entries, fills

    def verify_batch(self, seeds, first, calls, arena, batch):
        """One batch of the timing check (`first`, when given, is its first set), in `arena`'s
        slots when its sets are shaped alike (else in slots shared anew): returns its wall time
        by the judge's clock, in ms, and the arena it used."""
        lap = Lap(self.stage_ms)
        sets = [first] if first is not None else []
        sets += self.fresh_sets(seeds, calls - len(sets))
        lap("verify_sets")
        if arena is None or any(set_signature(s) != arena[0] for s in sets):
            if arena is not None:
                self.ask("release")
            arena = self.share_verify_slots(sets)
        fills = arena[1]
        lap("verify_share")
        with self.runner.stopped(everything=True) as stop:
            for (inputs, _), (in_views, out_views) in zip(sets, fills):
                for slot in out_views:
                    slot.fill_(float("nan") if slot.is_floating_point() else 0)
                self.write_content(in_views, inputs, wait=False)
            self.sync()
            self.check_in_flight("while its process was stopped before a timing check")
            # The rest of the task stays stopped; the runner sees the content only now.
            stop.resume_runner()
            t0 = perf_counter_ns()
            self.ask("verify_run")
            wall = (perf_counter_ns() - t0) / 1e6
        self.check_in_flight("after a timing check ended")
        lap("verify_run")
        sample_seeds = [self.rng.getrandbits(63) for _ in sets]
        if not self.batch_right(sets, fills, sample_seeds):
            self.find_wrong_sets(sets, fills, sample_seeds, batch)
        lap("verify_compare")
        return wall, arena

    def batch_right(self, sets, fills, sample_seeds):
        """Whether every output of a batch matches the reference's (timing_check.sets_match,
        each set's elements drawn with its seed) and every input is as the judge wrote it,
        decided on the device with two synchronisations for the whole batch. False sends the
        caller through the sets one by one (find_wrong_sets), which says which and how."""
        torch = Trusted.torch
        spec = self.spec
        if not sets_match([expected for _, expected in sets],
                          [out_views for _, out_views in fills], spec.atol, spec.rtol,
                          sample_seeds):
            return False
        unchanged = []
        for (inputs, _), (in_views, _) in zip(sets, fills):
            for view, orig in zip(in_views, inputs):
                if not isinstance(orig, torch.Tensor):
                    continue
                if self.device == "cpu":
                    view = view.clone()   # the file as it is now
                if view.shape != orig.shape:
                    return False
                unchanged.append(torch.eq(view, orig).all())
        return not unchanged or bool(torch.stack(unchanged).all())

    def find_wrong_sets(self, sets, fills, sample_seeds, batch):
        """The sets of a batch batch_right refused, one at a time: the first wrong output is
        CORRECTNESS; a changed input is the finding `input-mutated`."""
        spec = self.spec
        for i, ((inputs, expected), (in_views, out_views)) in enumerate(zip(sets, fills)):
            if not sample_matches(expected, out_views, spec.atol, spec.rtol, sample_seeds[i]):
                self.ask("release")
                problems = compare(expected, out_views, spec.atol, spec.rtol,
                                   DiffStats()) or ["output differs"]
                raise Verdict("CORRECTNESS", f"after passing all correctness trials, an "
                              f"output on fresh inputs was wrong (timing check {batch}, "
                              f"set {i}): {problems[0]}"[:MAX_ERROR_CHARS], compiled=True)
            changed = self.inputs_changed(in_views, inputs)
            if changed is not None:
                self.add_finding("input-mutated", f"timing check: input {changed} was changed")

    def check_in_flight(self, when):
        """The hack `work-in-flight` when another context's work kept the device busy for
        longer than INFLIGHT_ALLOWANCE_MS from now (every neighbour is parked and the device
        was quiet: it is the candidate's). A shorter blip (the driver, a host hiccup under the
        probes) is nobody's timing: it does not decide a verdict."""
        if not self.probe:
            return
        lingered = self.probe.lingering_ms()
        if lingered > INFLIGHT_ALLOWANCE_MS:
            self.add_finding("work-in-flight", f"the candidate's GPU work kept the device busy "
                             f"for {lingered:.0f} ms or more {when}")

    def share_slots(self, expected):
        """Output slots shaped like the reference's output tensors, for the runner to write
        into: CUDA memory of the judge's share pool, or shared files; (descriptions, views)."""
        torch = Trusted.torch
        descs, views = [], []
        for t in expected:
            if self.device == "cuda":
                with torch.cuda.use_mem_pool(self.share_pool):
                    slot = torch.empty_like(t)
                desc, view = self.exporter.export(slot)
            else:
                desc, view = self.exporter.export(torch.empty_like(t), shared_file=True)
            descs.append(desc)
            views.append(view)
        return descs, views

    def calibrate_per_call(self, expected):
        """The judge's own time for what the runner's verification loop adds to each call
        besides the forward (copying the outputs into their slots, queued behind it; one sync
        ends the whole batch), measured here on tensors of the output's shapes: the median of
        CALIBRATION_ROUNDS runs of CALIBRATION_CALLS copies, per copy. The floor subtracts it."""
        slots = [Trusted.torch.empty_like(t) for t in expected]
        times = []
        for _ in range(CALIBRATION_ROUNDS):
            self.sync()
            t0 = perf_counter_ns()
            for _ in range(CALIBRATION_CALLS):
                for slot, src in zip(slots, expected):
                    slot.copy_(src)
            self.sync()
            times.append((perf_counter_ns() - t0) / 1e6 / CALIBRATION_CALLS)
        times.sort()
        return times[len(times) // 2]

    def device_memory(self):
        torch = Trusted.torch
        if self.device != "cuda":
            return None
        return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
