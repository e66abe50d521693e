"""The judge's `correctness` and `profile` stages: the trials that compare the candidate's
outputs with the reference's on secret inputs, then one forward with its kernels counted.

Owns: CorrectnessStage, a part of Evaluation, and the reference's runs on fresh inputs that
the performance stage uses too.

May import: trusted, errors, tensors, integrity.
"""
import math
import random

from crucible_errors import CAUGHT, MAX_CAUGHT_CHARS, MAX_ERROR_CHARS, Verdict
from crucible_integrity import (REDUCED_PRECISION_REL_ERROR, overlaps, own_kernel_evidence,
                                relative_error, storage_span)
from crucible_tensors import (DiffStats, as_call_args, compare, deep_clone, flatten,
                              outputs_match, seed_all, tensor_nbytes, to_device,
                              to_precision)
from crucible_trusted import Trusted


class CorrectnessStage:
    """Evaluation's correctness and profile stages."""

    def _run_reference(self, args, context, sync=True):
        """The reference's output for `args`; without `sync` its kernels may still be queued
        (the caller syncs once for several, through reference_synced)."""
        try:
            out = self.ref_model(*args)
            if sync:
                self.sync()
            return out
        except CAUGHT as e:
            self.reference_failed(e, context)

    def reference_synced(self, context):
        """Waits for the reference's queued kernels: a fault among them is the problem's."""
        try:
            self.sync()
        except CAUGHT as e:
            self.reference_failed(e, context)

    def _fresh_inputs(self, seed, context):
        """get_inputs() under `seed`, on the device, cast to the request's precision.

        On CUDA, get_inputs() runs with CUDA as the default device, so its random tensors are
        drawn by the seeded CUDA generator in place: KernelBench level-1 inputs reach 6.4 GB,
        and drawing them on the CPU and copying them over costs ~8 s per trial while the GPU
        waits. Tensors a problem pins to the CPU explicitly are still moved. If a problem's
        get_inputs() cannot run that way, it runs on the CPU as KernelBench does. With `seed`
        None the generators are not seeded again: they go on from the previous draw."""
        torch = Trusted.torch

        def seeded():
            if seed is not None:
                seed_all(seed, self.device)
        try:
            if self.device == "cuda":
                try:
                    seeded()
                    with torch.device("cuda"):
                        return to_precision(to_device(as_call_args(self.get_inputs()),
                                                      self.device), self.spec.precision)
                except CAUGHT:
                    pass
            seeded()
            return to_precision(to_device(as_call_args(self.get_inputs()), self.device),
                                self.spec.precision)
        except CAUGHT as e:
            self.reference_failed(e, context)

    def _reference_aliases(self, args, out):
        torch = Trusted.torch
        spans = [storage_span(a) for a in args if isinstance(a, torch.Tensor)]
        return any(overlaps(storage_span(o), s) for o in flatten(out)
                   if isinstance(o, torch.Tensor) for s in spans)

    def correctness(self):
        """num_correct_trials trials with seeds drawn from the judge's secret seed; every trial
        runs even after a mismatch, so trials_passed is a real count (partial credit). The
        reference runs here on its own copy; the candidate runs in the runner on another copy,
        checked afterwards for changes; trial 0 runs the candidate twice (run-twice check for
        uninitialised reads). Freed memory is poisoned in the runner before every call."""
        spec = self.spec
        seeds = random.Random(self.input_seed)
        trial_seeds = [seeds.randrange(2 ** 32) for _ in range(spec.num_correct_trials)]
        stats = DiffStats()
        passed = 0
        failures = []
        # Inputs of its own, seen by no trial: a forward that only replays outputs it has seen
        # launches nothing there and is a decoy, not a correct kernel.
        self.profile_seed = seeds.randrange(2 ** 32)
        for i, trial_seed in enumerate(trial_seeds):
            if i:
                self.park()
            inputs = self._fresh_inputs(trial_seed, f"get_inputs() failed (trial {i})")
            ref_args = deep_clone(inputs)
            ref_out = self._run_reference(ref_args, f"reference forward failed (trial {i})")
            if i == 0:
                self.allow_alias = self._reference_aliases(ref_args, ref_out)
                self.ref_out_example = ref_out
                self.reference_mutates = self.inputs_changed(ref_args, inputs) is not None
                self.set_bytes = tensor_nbytes(inputs) + tensor_nbytes(ref_out)
            del ref_args
            descs, views = self.share_inputs(inputs)
            runs = 2 if i == 0 and self.checks else 1
            outcomes = []
            for run in range(runs):
                out = self.run_candidate(descs, f"candidate forward raised (trial {i})",
                                         poison=self.checks, allow_alias=self.allow_alias)
                try:
                    if run == 0:
                        problems = compare(ref_out, out, spec.atol, spec.rtol, stats)
                    else:   # the second run: only whether it passes
                        problems = [] if outputs_match(ref_out, out, spec) else compare(
                            ref_out, out, spec.atol, spec.rtol, DiffStats())
                except Exception as e:
                    problems = [f"output could not be compared: {type(e).__name__}: {e}"]
                changed = self.inputs_changed(views, inputs) if self.checks else None
                if changed is not None:
                    self.add_finding("input-mutated", f"trial {i}: input {changed} was "
                                     "changed by the candidate's forward")
                    self.restore_inputs(views, inputs)
                outcomes.append(problems)
                del out
                self.ask("release")
            if runs == 2 and bool(outcomes[0]) != bool(outcomes[1]):
                self.add_finding("second-run-disagrees", "trial 0: a second run on the same "
                                 "inputs " + ("passed" if outcomes[0] else "failed")
                                 + " where the first " + ("failed" if outcomes[0] else "passed"))
            problems = outcomes[0] or outcomes[-1]
            if problems:
                failures.append((i, problems))
            else:
                passed += 1
            del ref_out, views, descs, inputs
        self.result["trials_passed"] = passed
        mx, mean = stats.result()
        self.result["max_abs_diff"] = mx
        self.result["mean_abs_diff"] = mean
        if failures:
            first_trial, problems = failures[0]
            lines = [f"{len(failures)} of {len(trial_seeds)} trials failed; "
                     f"first failing trial {first_trial}:"] + problems[:10]
            raise Verdict("CORRECTNESS", "\n".join(lines)[:MAX_ERROR_CHARS], compiled=True)
        rel = relative_error(stats, self.ref_out_example)
        if rel is not None and rel > REDUCED_PRECISION_REL_ERROR:
            self.add_finding("reduced-precision", f"mean abs error is {rel:.2g} of the mean "
                             "output magnitude, more than float32 (or TF32) arithmetic gives")
        self.ref_out_example = None
        self.result["correct"] = True

    def profile(self):
        """Proof of work: one forward in the runner with its kernels counted (docs/INTEGRITY.md):
        launches of the candidate's own Triton kernels and calls into its own CUDA
        extensions, and every other device operation; no kernel of its own at all is the
        verdict `decoy`."""
        inputs = self._fresh_inputs(self.profile_seed, "get_inputs() failed (profile)")
        descs, _views = self.share_inputs(inputs)
        reply = self.ask("profile", inputs=descs)
        self.ask("release")
        custom = reply.get("custom_kernel_count")
        total = reply.get("total_kernel_count")
        coverage = reply.get("custom_time_coverage")
        if type(custom) is not int or type(total) is not int or custom < 0 or total < custom:
            raise Verdict("RUNTIME", "the profiled forward reported no usable kernel counts")
        if custom > 0 and not own_kernel_evidence(self.device, self.spec.backend,
                                                  self.spec.prebuilt, self.taskdir):
            self.add_finding("kernel-count-unverified", f"the runner counted {custom} launches "
                             "of the candidate's own kernels, but nothing of its own was built "
                             "or loaded as far as the judge can see from outside its process")
        self.result["custom_kernel_count"] = custom
        self.result["total_kernel_count"] = total
        if type(coverage) in (int, float) and math.isfinite(coverage):
            self.result["custom_time_coverage"] = min(max(float(coverage), 0.0), 1.0)
        if custom == 0:
            # What the runner says its kernels raised is the candidate's own text: only a
            # string, capped, and only ever a finding's detail (the first says why).
            caught = reply.get("caught")
            first = caught[0] if isinstance(caught, list) and caught else None
            if isinstance(first, str) and first:
                self.add_finding("no-custom-kernel", f"{first[:MAX_CAUGHT_CHARS]}; the "
                                 "candidate caught it and its fallback ran instead")
            self.add_finding("no-custom-kernel", f"none of the {total} device operations of a "
                             "forward was a kernel defined in the candidate")
