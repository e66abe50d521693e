"""The runner's kernel counting: one profiled forward of the candidate, with the launches of
its own Triton kernels and calls of its own load_inline extensions counted and timed, and every
other device operation dispatched through torch counted beside them (the `profile` request).
Runs in the candidate's process, so what it reports only counts against the candidate.

Owns: KernelCounting (Runner's op_profile, the instrumentation of one forward, and which
Triton kernels are the candidate's own), KernelCounter, the device operations that launch no
kernel, and warm_dispatch_mode (the template warms the dispatch mode with it).

May import: trusted, errors, builds. Never a judge module.
"""
import sys

from crucible_builds import ExtensionCalls
from crucible_errors import CAUGHT, MAX_CAUGHT_NOTES, note_caught, same_file
from crucible_trusted import Trusted, perf_counter_ns


# Device operations that launch no kernel: views, metadata, allocation without a fill.
_NO_KERNEL_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                  "detach", "lift_fresh", "_reshape_alias", "set_", "resize_", "_unsafe_view",
                  "alias", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
                  "is_same_size", "_local_scalar_dense"}


class KernelCounter:
    """A forward's work by who launched it: launches of the candidate's own Triton kernels
    (by identity of the kernel objects its module defined) and calls into its own load_inline
    extensions that define a __global__ kernel, each timed; every other device operation
    dispatched through torch. CUPTI (torch.profiler) would name every kernel, but its
    initialisation took 6.7 s per process on the H100 and slowed later event timings."""

    def __init__(self, runner):
        self.runner = runner
        self.custom = 0
        self.ops = 0
        self.custom_names = set()
        self.spans = []   # (start, end) events or perf_counter_ns pairs
        self.inside_custom = 0
        self.raised = []  # note_caught lines of the candidate's kernels that raised

    def clock(self):
        r = self.runner
        if r.device == "cuda":
            e = Trusted.Event(enable_timing=True)
            Trusted.event_record(e)
            return e
        return perf_counter_ns()

    def elapsed(self, a, b):
        if self.runner.device == "cuda":
            return Trusted.event_elapsed(a, b)
        return (b - a) / 1e6

    def custom_call(self, name, fn, args, kwargs):
        """A call of the candidate's own kernel. One that raises ran no kernel: it is not
        counted (a candidate that catches it and falls back to PyTorch is a decoy), and why
        it raised is noted for the decoy's feedback."""
        start = self.clock()
        self.inside_custom += 1
        try:
            out = fn(*args, **kwargs)
        except CAUGHT as e:
            note_caught(self.raised, f"its kernel `{name}`", e)
            raise
        finally:
            self.inside_custom -= 1
        self.spans.append((start, self.clock()))
        self.custom += 1
        self.custom_names.add(name)
        return out

    def covered_ms(self):
        if self.runner.device == "cuda":
            Trusted.synchronize()
        return sum(self.elapsed(a, b) for a, b in self.spans)


def warm_dispatch_mode(torch):
    """The first TorchDispatchMode entered in a process imports what it needs (~1 s); the
    template does it once for every child, the runner before a profiled forward."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Passthrough():
        torch.ones(2).add(1)


def _dispatch_counter(counter):
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpCounter(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if not counter.inside_custom and name not in _NO_KERNEL_OPS \
                    and not getattr(func, "is_view", False):
                counter.ops += 1
            return func(*args, **(kwargs or {}))

    return OpCounter()


def _triton_kernel_classes():
    classes = []
    for module, names in (("triton.runtime.jit", ("JITFunction",)),
                          ("triton.runtime.interpreter", ("InterpretedFunction",))):
        m = sys.modules.get(module)
        for n in names:
            c = getattr(m, n, None) if m is not None else None
            if isinstance(c, type):
                classes.append(c)
    return classes

class KernelCounting:
    """Runner's profiled forward and the candidate's own kernels it counts (a part of Runner:
    it uses the runner's device, model inputs and builds)."""

    def find_kernels(self):
        """The Triton kernels the candidate's file defines (unwrapping autotune/heuristics),
        by object identity: a kernel counts when its code comes from candidate.py."""
        found = set()
        classes = tuple(_triton_kernel_classes())
        if not classes:
            return found
        for value in list(vars(self.cand).values()):
            for _ in range(8):
                if isinstance(value, classes):
                    fn = getattr(value, "fn", None)
                    code = getattr(fn, "__code__", None)
                    if code is not None and same_file(code.co_filename, self.cand_path):
                        found.add(id(value))
                    break
                value = getattr(value, "fn", None)
                if value is None:
                    break
        return found

    def op_profile(self, msg):
        args = self.import_inputs(msg["inputs"])
        warm_dispatch_mode(Trusted.torch)
        counter = KernelCounter(self)
        restore = self.instrument(counter)
        try:
            start = counter.clock()
            with _dispatch_counter(counter):
                out = self.call_model(args, "candidate forward raised (profiled)")
            end = counter.clock()
        finally:
            restore()
        self.sync()
        forward_ms = counter.elapsed(start, end)
        custom_ms = counter.covered_ms()
        del out
        return {"custom_kernel_count": counter.custom,
                "total_kernel_count": counter.custom + counter.ops,
                "custom_time_coverage": (min(custom_ms / forward_ms, 1.0)
                                         if forward_ms > 0 else None),
                "custom_kernels": sorted(counter.custom_names)[:32],
                "caught": (counter.raised + self.builds.raised)[:MAX_CAUGHT_NOTES]}

    def instrument(self, counter):
        """Wraps Triton's launch path and the candidate's extension functions for one
        forward; returns the function that undoes it."""
        undo = []
        kernels = self.kernels
        for cls in _triton_kernel_classes():
            original = cls.run

            def run(self_, *args, _original=original, **kwargs):
                if id(self_) in kernels:
                    name = getattr(getattr(self_, "fn", None), "__name__", "kernel")
                    return counter.custom_call(name, _original, (self_,) + args, kwargs)
                return _original(self_, *args, **kwargs)

            cls.run = run
            undo.append((cls, "run", original))
        ExtensionCalls.counter = counter

        def restore():
            ExtensionCalls.counter = None
            for owner, attr, value in reversed(undo):
                setattr(owner, attr, value)
        return restore
