"""Crucible evaluation harness: one KernelBench-style evaluation in a fresh child process.

Run by the worker as ``python -I -B harness.py <taskdir>`` with file descriptor 3 open for the
protocol (docs/harness-protocol.md). ``<taskdir>`` holds reference.py, candidate.py and
spec.json. stdout/stderr belong to the candidate; everything the worker needs comes through
fd 3 as JSON lines: stage events, then exactly one result.

Exit status: 0 after a result was written (whatever the verdict); 2 when fd 3 is not open;
3 when the evaluation could not even be set up (unreadable spec, torch missing, no CUDA on a
CUDA worker) -- an infrastructure failure that says nothing about the candidate, so no verdict
is written for it.

Only the standard library and torch are needed; triton is imported by the candidate, and the
harness only looks it up in sys.modules to recognise its exception types.

This file is the entry point only. The harness is the modules next to it, loaded here from
this file's directory (``-I`` puts no directory on sys.path, and the task directory must not
be one: the candidate's imports would find our files) in MODULES order, the layer order of
tests/harness/check_layers.py: a module is loaded after everything it imports. Each is
registered as ``crucible_<name>``, which is how the modules import each other. trusted.py comes
first, so its captured functions predate any reference or candidate code, in the template too.
"""
import importlib.util
import os
import sys

MODULES = (
    "trusted", "errors", "contexts", "nvcc_overlap", "channel", "spec", "tensors", "transport", "sandbox",
    "screen", "selftest", "builds", "integrity", "triton_aot", "memory", "timing_check",
    "judge_setup", "judge_load", "judge_correctness", "judge_verify", "judge_performance",
    "runner_checks", "runner_profile", "runner", "judge",
)


def _load(name):
    """A module of ours from this file's directory (the worker writes them next to
    harness.py); loaded at import so the template has it before any candidate exists."""
    module_name = "crucible_" + name
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)


try:
    for _name in MODULES:
        _load(_name)
except Exception as e:   # a file the worker did not write: a fault of this node
    sys.stderr.write(f"crucible harness: setup failed: cannot load {_name}.py next to "
                     f"harness.py: {type(e).__name__}: {e}\n")
    sys.stderr.flush()
    os._exit(3)

import crucible_judge as judge  # noqa: E402
import crucible_runner as runner  # noqa: E402
from crucible_runner_profile import warm_dispatch_mode  # noqa: E402,F401  (template.py)
from crucible_tensors import triton_version  # noqa: E402,F401  (template.py)
from crucible_trusted import os_exit  # noqa: E402


def main(taskdir=None):
    """One evaluation of `taskdir` (from argv when run as a script); never returns."""
    if taskdir is None:
        if len(sys.argv) != 2:
            sys.stderr.write("usage: python -I -B harness.py <taskdir>\n")
            os_exit(3)
        taskdir = sys.argv[1]
    judge.main(taskdir, runner.runner_main)


if __name__ == "__main__":
    main()
