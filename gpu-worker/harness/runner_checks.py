"""The runner's integrity checks: what must be watched beside the candidate, in its own
process, after every request (timing functions replaced, precision flags toggled, threads
started) and on every forward's outputs (subclasses, memory shared with the inputs). Nothing
here is trusted by the judge: a finding can only count against the candidate.

Owns: CandidateChecks (a part of Runner): arming the checks before the candidate's code first
runs, the thread-start hooks, the findings after each request and the output checks.

May import: trusted, integrity, tensors. Never a judge module.
"""
from crucible_integrity import (THREAD_STARTERS, WATCHED, lookup, overlaps, precision_state,
                                storage_span)
from crucible_tensors import flatten
from crucible_trusted import Trusted


class CandidateChecks:
    """The checks Runner runs beside the candidate; their findings go with every reply."""

    def integrity_findings(self):
        if not self.loaded:
            return []
        found = []
        changed = [".".join(p) for p in WATCHED if lookup(p) is not self.watched.get(p)]
        if changed:
            found.append({"rule": "timing-tampered",
                          "detail": "replaced while the candidate ran: " + ", ".join(changed)})
        now = precision_state(Trusted.torch)
        diff = [f"{k} {self.precision[k]!r} -> {now[k]!r}" for k in now
                if now[k] != self.precision[k]]
        if diff:
            found.append({"rule": "precision-toggle", "detail": "; ".join(diff)})
        alive = len(self.current_frames()) - 1
        if alive > 0 or self.thread_starts:
            found.append({"rule": "threads-started", "detail": f"{self.thread_starts} "
                          f"thread(s) started by the candidate, {alive} alive besides the "
                          "main one after it returned"})
        return found

    def hook_thread_starts(self):
        """Counts every thread the candidate's Python starts: threading and _thread both
        end in these functions (the originals stay reachable only through the wrappers,
        which WATCHED checks are still in place)."""
        import _thread
        import threading
        self.thread_starts = 0
        runner = self
        for module in (_thread, threading):
            for name in THREAD_STARTERS:
                original = getattr(module, name, None)
                if original is None:
                    continue

                def start(*args, _original=original, **kwargs):
                    runner.thread_starts += 1
                    return _original(*args, **kwargs)

                setattr(module, name, start)

    def arm_checks(self):
        """Captured just before the candidate's code first runs."""
        self.hook_thread_starts()
        self.watched = {p: lookup(p) for p in WATCHED}
        self.precision = precision_state(Trusted.torch)
        self.loaded = True

    def check_outputs(self, out, args, allow_alias):
        """Plain tensors on the device, no memory shared with the inputs; reported as
        findings (the judge compares the values)."""
        torch = Trusted.torch
        spans = [storage_span(a) for a in args if isinstance(a, torch.Tensor)]
        found = []
        for t in flatten(out):
            if isinstance(t, torch.Tensor) and type(t) is not torch.Tensor:
                found.append({"rule": "output-subclass", "detail": f"an output is a "
                              f"{type(t).__name__}, not a plain torch.Tensor"})
            elif isinstance(t, torch.Tensor) and not allow_alias and \
                    any(overlaps(storage_span(t), s) for s in spans):
                found.append({"rule": "output-aliases-input",
                              "detail": "an output shares memory with an input"})
        return found
