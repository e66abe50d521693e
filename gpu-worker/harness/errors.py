"""Errors: the exceptions that end an evaluation, and how a failure becomes a verdict code and
a message a model can act on.

Owns: SetupError (exit 3, not the candidate's fault), RunnerKilled (exit 4), the exit of a device
that never became quiet (5), Verdict, CAUGHT
(what candidate or reference code may raise that becomes a verdict), classify() and
format_error() with their limits.

May import: trusted.
"""
import errno
import os
import re
import sys
import traceback

from crucible_trusted import Trusted

MAX_ERROR_CHARS = 4000
MAX_HEADLINE_CHARS = 2500
TRACEBACK_LINES = 15
# A failed build's message leads with the compiler's own diagnostics, before the command lines
# ninja prints first (which used to fill the message before the compiler spoke): at most this
# many, each cut to MAX_DIAGNOSTIC_CHARS.
MAX_DIAGNOSTICS = 6
MAX_DIAGNOSTIC_CHARS = 400
# A compiler's error line: gcc/clang `file:line[:col]: [fatal ]error: ...`, nvcc
# `file(line): [catastrophic ]error: ...`, ptxas and the linker (`ptxas fatal`, `ld: ... error`,
# `undefined reference`), without the ninja command lines that come before them.
_DIAGNOSTIC = re.compile(
    r"^(?:[^\s:()][^:()]*(?::\d+(?::\d+)?:|\(\d+\):)\s*(?:fatal |catastrophic )?error\b.*"
    r"|ptxas (?:fatal|error)\b.*|.*\bundefined reference to\b.*|.*\berror: ld returned.*)$",
    re.IGNORECASE)
# The harness's own files (what harness.py was before it was split into modules): their frames
# help nobody and are dropped from the tracebacks we report. screen.py, transport.py, sandbox.py
# and selftest.py were always files of their own and stay in them, as before.
HARNESS_FILES = tuple(os.path.join(os.path.dirname(os.path.abspath(__file__)), name) for name in (
    "harness.py", "trusted.py", "errors.py", "channel.py", "spec.py", "tensors.py", "builds.py",
    "integrity.py", "judge.py", "judge_setup.py", "judge_load.py", "judge_correctness.py",
    "judge_performance.py", "judge_verify.py", "timing_check.py", "runner.py", "runner_checks.py",
    "runner_profile.py"))


# What the candidate (or reference) may raise that we turn into a verdict: everything except
# KeyboardInterrupt. SystemExit counts: sys.exit() in forward is a failing forward.
CAUGHT = (Exception, SystemExit)


class SetupError(Exception):
    """The evaluation cannot start for reasons that are not the candidate's (exit 3)."""


RUNNER_KILLED_EXIT = 4
# The device never became quiet for timing (timing_check.DeviceBusy): retried by the worker.
DEVICE_BUSY_EXIT = 5


class RunnerKilled(BaseException):
    """The runner was killed by SIGKILL from outside it (exit 4, no result): out of memory
    when the task's cgroup says so, else a fault of this node. A BaseException, so that no
    `except Exception` on the way swallows it."""


class Verdict(Exception):
    """A final verdict: carries the error code, the message and the `compiled` flag."""

    def __init__(self, code, message, compiled=None):
        super().__init__(code)
        self.code = code
        self.message = message
        self.compiled = compiled
        self.keep_correct = False   # only for a reference failure after the candidate passed


# ---------------------------------------------------------------------------------------------
# Error classification and messages
# ---------------------------------------------------------------------------------------------

_CUDA_FAULT_TEXT = (
    "illegal memory access", "misaligned address", "unspecified launch failure", "cuda error",
    "device-side assert", "illegal instruction", "triton error [cuda]", "cuda_error_",
    "cudaerrorillegaladdress", "hardware stack error", "launch timed out",
)
_RESOURCE_ERRNOS = {errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE, errno.ENOSPC,
                    errno.EDQUOT, errno.EFBIG}
_TRITON_COMPILER_DIR = os.sep + os.path.join("triton", "compiler") + os.sep
_CPP_EXTENSION_FILE = os.path.join("torch", "utils", "cpp_extension.py")


def _chain(exc):
    """The exception and its causes/contexts, outermost first (cycles cut)."""
    out, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(exc)
        exc = exc.__cause__ if exc.__cause__ is not None else (
            None if exc.__suppress_context__ else exc.__context__)
    return out


def _triton_types(*names):
    """Triton exception classes by 'module.Class', only if triton is already imported."""
    found = []
    for name in names:
        module_name, _, cls = name.rpartition(".")
        module = sys.modules.get(module_name)
        typ = getattr(module, cls, None) if module is not None else None
        if isinstance(typ, type):
            found.append(typ)
    return tuple(found)


def _frames(exc):
    return [f.filename for e in _chain(exc) for f in traceback.extract_tb(e.__traceback__)]


def classify(exc, default):
    """Map an exception to a verdict code; `default` is the stage's own code.

    Order matters: a Triton CompilationError is COMPILATION whatever its text says; then out of
    memory (RESOURCE), then CUDA faults (their text is the only reliable signal), then build
    failures recognised by type, text or by being raised inside torch.utils.cpp_extension or
    triton/compiler. Under TRITON_INTERPRET=1 an error inside a kernel body comes back as
    triton's InterpreterError: on a GPU the same mistake is a compile error, so it is
    COMPILATION too (device_assert does not fire in the interpreter, so no runtime fault hides
    behind it).
    """
    torch = Trusted.torch
    chain = _chain(exc)
    texts = " | ".join(f"{type(e).__name__}: {e}" for e in chain).lower()

    if any(isinstance(e, _triton_types("triton.compiler.errors.CompilationError")) for e in chain):
        return "COMPILATION"

    oom_types = (MemoryError,) + ((torch.OutOfMemoryError,) if torch is not None else ())
    for e in chain:
        if isinstance(e, oom_types):
            return "RESOURCE"
        if isinstance(e, OSError) and e.errno in _RESOURCE_ERRNOS:
            return "RESOURCE"   # fork() under RLIMIT_NPROC, too many open files, disk quota
    if "out of memory" in texts:
        return "RESOURCE"

    accel = getattr(torch, "AcceleratorError", None) if torch is not None else None
    if (accel is not None and any(isinstance(e, accel) for e in chain)) or \
            any(t in texts for t in _CUDA_FAULT_TEXT):
        return "CUDA_FAULT"

    build_types = _triton_types("triton.runtime.errors.InterpreterError",
                                "triton.runtime.errors.OutOfResources",
                                "triton.runtime.errors.PTXASError")
    if build_types and any(isinstance(e, build_types) for e in chain):
        return "COMPILATION"
    if "error building extension" in texts or "passmanager::run failed" in texts:
        return "COMPILATION"
    if any(_CPP_EXTENSION_FILE in f or _TRITON_COMPILER_DIR in f for f in _frames(exc)):
        return "COMPILATION"
    return default


def compiler_diagnostics(chain):
    """The first MAX_DIAGNOSTICS error lines a compiler printed into the messages of `chain`
    (a failed `load_inline`/`load` carries ninja's whole output), each cut to
    MAX_DIAGNOSTIC_CHARS, without repeats: what a model writing the extension must read first."""
    found = []
    for e in chain:
        for line in str(e).splitlines():
            line = line.strip()
            if line and line not in found and _DIAGNOSTIC.match(line):
                found.append(line[:MAX_DIAGNOSTIC_CHARS])
                if len(found) == MAX_DIAGNOSTICS:
                    return found
    return found


def format_error(exc, focus_file, taskdir, context=""):
    """Type + message, then the last traceback lines, restricted to `focus_file` frames; a
    failed build's compiler errors first (compiler_diagnostics).

    The restriction keeps the part a model can act on (its own code) and drops torch/triton
    internals; when no frame is in the focus file, the innermost frames are kept instead
    (never the harness's own: an asynchronous CUDA fault surfaces in our synchronize()).
    Causes are included (Triton's interpreter wraps the real error). Capped at 4000 chars.
    """
    headline = f"{type(exc).__name__}: {exc}"
    diagnostics = compiler_diagnostics(_chain(exc))
    if diagnostics:
        headline = "compiler errors:\n" + "\n".join(diagnostics) + "\n" + headline
    if len(headline) > MAX_HEADLINE_CHARS:
        headline = headline[:MAX_HEADLINE_CHARS] + " ...[truncated]"
    if context:
        headline = f"{context}: {headline}"
    lines = []
    chain = _chain(exc)
    for e in reversed(chain):   # root cause first, like Python prints it
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if not _own_frame(f.filename)]   # our frames help nobody
        mine = [f for f in frames if same_file(f.filename, focus_file)]
        for entry in traceback.format_list(mine or frames[-3:]):
            lines.extend(entry.rstrip("\n").split("\n"))
        if e is not exc:
            lines.append(traceback.format_exception_only(type(e), e)[-1].rstrip("\n")[:500])
            lines.append("which led to:")
    tail = lines[-TRACEBACK_LINES:]
    message = headline + ("\nTraceback (most recent call last, filtered):\n" + "\n".join(tail)
                          if tail else "")
    message = message.replace(taskdir.rstrip(os.sep) + os.sep, "")
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS - 15] + "\n...[truncated]"
    return message


MAX_CAUGHT_NOTES = 3     # exceptions a candidate caught, kept to explain a decoy
MAX_CAUGHT_CHARS = 160   # of each


def note_caught(notes, what, exc):
    """Adds to `notes` (up to MAX_CAUGHT_NOTES) one line saying that `what` raised `exc`:
    when the candidate catches it and falls back to PyTorch, that line is why it is a decoy."""
    if len(notes) < MAX_CAUGHT_NOTES:
        first = (str(exc).strip().splitlines() or [""])[0]
        notes.append(f"{what} raised {type(exc).__name__}: {first}"[:MAX_CAUGHT_CHARS])


def same_file(a, b):
    if a == b:
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def _own_frame(filename):
    return any(same_file(filename, own) for own in HARNESS_FILES)
