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
"""
import os
import sys


def _open_channel():
    """Open fd 3 before anything else, so a missing channel fails fast and loudly.

    The fd is marked close-on-exec: programs the candidate may exec must not inherit it.
    """
    try:
        os.fstat(3)
    except OSError:
        sys.stderr.write("crucible harness: file descriptor 3 (protocol channel) is not open\n")
        sys.stderr.flush()
        sys.exit(2)
    channel = os.fdopen(3, "w", buffering=1, encoding="utf-8")
    os.set_inheritable(3, False)
    return channel


import base64  # noqa: E402
import copy  # noqa: E402
import errno  # noqa: E402
import hashlib  # noqa: E402
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import pickle  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

# Our own references to what must not be swapped out by the candidate (integrity hardening
# builds on these; the torch ones are captured in setup, still before the candidate runs).
_HARNESS_FILE = os.path.abspath(__file__)
_perf_counter_ns = time.perf_counter_ns
_json_dumps = json.dumps
_os_exit = os._exit
# Bound in main(): in template mode (template.py) this module is imported long before the
# task child that owns fd 3 exists.
_channel_write = None
_channel_flush = None


def _bind_channel():
    global _channel_write, _channel_flush
    channel = _open_channel()
    _channel_write = channel.write
    _channel_flush = channel.flush


GATE_FD = 4
_gate_read = None   # bound in main() when the worker passed a gate


def _bind_gate():
    """fd 4, when open, is the worker's gate: one byte lets the child go on at each of two
    points (see wait_at_gate). Marked close-on-exec like fd 3."""
    global _gate_read
    try:
        os.fstat(GATE_FD)
    except OSError:
        return
    os.set_inheritable(GATE_FD, False)
    _gate_read = os.read


MAX_GATE_LINE = 64 * 1024


def wait_at_gate(point):
    """Blocks until the worker opens the gate with one line (a JSON object, or empty), if
    there is a gate, and returns what the line says. Points: `standby` after setup and the
    reference's import (trusted code only: CUDA is initialised while another task has the
    device, and nothing of the candidate has run yet; the line may carry the worker's cached
    `reference_timing`, decided only now), and `timing_gate` before timing (the worker lets a
    task time only when no other child on the device is doing anything). End of file: the
    worker no longer wants this task."""
    if _gate_read is None:
        return {}
    emit({"event": "stage", "stage": point})
    line = b""
    while not line.endswith(b"\n"):
        byte = _gate_read(GATE_FD, 1)
        if not byte:
            _os_exit(0)
        line += byte
        if len(line) > MAX_GATE_LINE:
            raise SetupError("gate line too long")
    try:
        message = json.loads(line) if line.strip() else {}
    except ValueError:
        raise SetupError("unreadable gate line")
    if not isinstance(message, dict):
        raise SetupError("gate line is not an object")
    return message

def _load_sibling(file_name, module_name):
    """A module of ours from this file's directory (the worker writes them next to
    harness.py); loaded at import so the template has it before any candidate exists."""
    path = os.path.join(os.path.dirname(_HARNESS_FILE), file_name)
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except Exception:
        return None


_screen = _load_sibling("screen.py", "crucible_screen")
_transport = _load_sibling("transport.py", "crucible_transport")
_sandbox = _load_sibling("sandbox.py", "crucible_sandbox")
_selftest = _load_sibling("selftest.py", "crucible_selftest")
SCREENING_ACTIONS = ("reject", "flag", "off")
MAX_FLAGS = 64
MAX_FLAG_CHARS = 256

REFERENCE_MODULE = "crucible_reference"
CANDIDATE_MODULE = "crucible_candidate"
MAX_ERROR_CHARS = 4000
MAX_HEADLINE_CHARS = 2500
TRACEBACK_LINES = 15
FLUSH_BYTES = 256 << 20   # L2 flush buffer on CUDA, as KernelBench / do_bench
PERF_BLOCK = 10           # timed calls per model before switching to the other one
SPEC_DEFAULTS = {
    "backend": "triton", "device": "cuda", "num_correct_trials": 5, "num_perf_trials": 100,
    "num_warmup": 3, "measure_performance": True, "atol": 0.01, "rtol": 0.01, "seed": 42,
    "reference_timing": None, "screening": {}, "stage": "evaluate", "cuda_arch": None,
    "prebuilt": [], "max_speedup": 10.0, "integrity_checks": True, "sandbox": None,
    "selftest": None,
}
# evaluate: the device stage; prepare: the CPU stage (import and builds, no device);
# selftest: the worker's start-up proof that the sandbox holds on this host.
STAGES = ("evaluate", "prepare", "selftest")
# Bump when what decides a load_inline build changes: the worker keys its build cache on it too.
BUILD_PROTOCOL = "build-v1"
MAX_BUILDS = 16
# load_inline arguments that do not change what is built.
BUILD_ARGS_IGNORED = ("build_directory", "verbose", "keep_intermediates")
RUNTIME_STATS_KEYS = ("median", "mean", "std", "min", "max")
# Distributions that may provide the `triton` package (upstream, and PyTorch's own builds).
TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm")


# What the candidate (or reference) may raise that we turn into a verdict: everything except
# KeyboardInterrupt. SystemExit counts: sys.exit() in forward is a failing forward.
CAUGHT = (Exception, SystemExit)


class SetupError(Exception):
    """The evaluation cannot start for reasons that are not the candidate's (exit 3)."""


RUNNER_KILLED_EXIT = 4


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


class Trusted:
    """Functions the harness relies on, captured before any candidate code is imported."""
    torch = None
    allclose = None
    isclose = None
    manual_seed = None
    cuda_manual_seed_all = None
    Event = None
    event_record = None
    event_elapsed = None
    synchronize = None


# ---------------------------------------------------------------------------------------------
# Protocol output
# ---------------------------------------------------------------------------------------------

def _finite_or_none(value):
    """JSON has no NaN/Infinity (and the worker's parser rejects them): map them to null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def emit(obj):
    """Write one JSON line on fd 3 with the captured writer; ASCII only, no NaN."""
    line = _json_dumps(_finite_or_none(obj), allow_nan=False, separators=(",", ":"))
    _channel_write(line + "\n")
    _channel_flush()


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


def format_error(exc, focus_file, taskdir, context=""):
    """Type + message, then the last traceback lines, restricted to `focus_file` frames.

    The restriction keeps the part a model can act on (its own code) and drops torch/triton
    internals; when no frame is in the focus file, the innermost frames are kept instead
    (never the harness's own: an asynchronous CUDA fault surfaces in our synchronize()).
    Causes are included (Triton's interpreter wraps the real error). Capped at 4000 chars.
    """
    headline = f"{type(exc).__name__}: {exc}"
    if len(headline) > MAX_HEADLINE_CHARS:
        headline = headline[:MAX_HEADLINE_CHARS] + " ...[truncated]"
    if context:
        headline = f"{context}: {headline}"
    lines = []
    chain = _chain(exc)
    for e in reversed(chain):   # root cause first, like Python prints it
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if not _same_file(f.filename, _HARNESS_FILE)]   # our frames help nobody
        mine = [f for f in frames if _same_file(f.filename, focus_file)]
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


def _same_file(a, b):
    if a == b:
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


# ---------------------------------------------------------------------------------------------
# Helpers on inputs and outputs
# ---------------------------------------------------------------------------------------------

def seed_all(seed, device):
    """Seed torch's CPU generator (and every CUDA generator on a CUDA device)."""
    Trusted.manual_seed(seed)
    if device == "cuda":
        Trusted.cuda_manual_seed_all(seed)


def to_device(obj, device):
    """Move tensors (also inside lists/tuples/dicts) to the device; pass anything else through."""
    torch = Trusted.torch
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def deep_clone(obj):
    """A private copy per model, so one model mutating its inputs cannot affect the other."""
    torch = Trusted.torch
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if isinstance(obj, (list, tuple)):
        return type(obj)(deep_clone(x) for x in obj)
    if isinstance(obj, dict):
        return {k: deep_clone(v) for k, v in obj.items()}
    try:
        return copy.deepcopy(obj)
    except Exception:
        return obj


def as_call_args(inputs):
    """get_inputs() returns a list (KernelBench); tolerate a single tensor or a tuple."""
    return list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]


class DiffStats:
    """Absolute differences over all compared elements of all trials (in float64)."""

    def __init__(self):
        self.max = 0.0
        self.sum = 0.0
        self.count = 0
        self.nonfinite = 0   # mismatches whose difference is NaN/Inf (e.g. NaN vs finite)

    def result(self):
        """(max, mean), or (None, None) when nothing was compared or a difference was NaN/Inf
        (JSON cannot carry it; the error message says how many)."""
        if self.count == 0 or self.nonfinite:
            return None, None
        return self.max, self.sum / self.count


def compare(ref, out, atol, rtol, stats, path="output"):
    """Compare one output against the reference; returns a list of problems (empty = pass).

    Structure (tensor vs tuple/list, length), shape, dtype and device must match; then values
    with torch.allclose(atol, rtol, equal_nan=True): NaN where the reference has NaN is fine,
    NaN (or Inf) where the reference is finite is a mismatch.
    """
    torch = Trusted.torch
    if isinstance(ref, torch.Tensor):
        if not isinstance(out, torch.Tensor):
            return [f"{path}: expected a tensor, got {type(out).__name__}"]
        if tuple(out.shape) != tuple(ref.shape):
            return [f"{path}: shape {tuple(out.shape)} != expected {tuple(ref.shape)}"]
        if out.dtype != ref.dtype:
            return [f"{path}: dtype {out.dtype} != expected {ref.dtype}"]
        if out.device != ref.device:
            return [f"{path}: device {out.device} != expected {ref.device}"]
        return _compare_values(ref, out, atol, rtol, stats, path)
    if isinstance(ref, (list, tuple)):
        if not isinstance(out, (list, tuple)):
            return [f"{path}: expected a {type(ref).__name__} of {len(ref)}, "
                    f"got {type(out).__name__}"]
        if len(out) != len(ref):
            return [f"{path}: {len(out)} outputs, expected {len(ref)}"]
        problems = []
        for i, (r, o) in enumerate(zip(ref, out)):
            problems += compare(r, o, atol, rtol, stats, f"{path}[{i}]")
        return problems
    numbers = (int, float)
    if isinstance(ref, numbers) and isinstance(out, numbers) and not isinstance(ref, bool):
        if math.isclose(out, ref, rel_tol=rtol, abs_tol=atol) or (ref != ref and out != out):
            return []
        return [f"{path}: {out!r} != expected {ref!r}"]
    return [] if out == ref else [f"{path}: {out!r} != expected {ref!r}"]


# Elements compared per step: the widened copies of a whole 1.6e9-element output (KernelBench
# level 1) would need ~80 GB; in chunks the comparison needs a few hundred MB.
COMPARE_CHUNK = 1 << 25


def _compare_values(ref, out, atol, rtol, stats, path):
    """Every reduction stays on the device and is read back once per output: a sync per chunk
    (and boolean-mask indexing, which syncs too) made comparing a 6.4 GB output take ~0.2 s."""
    torch = Trusted.torch
    wide = torch.complex128 if (ref.is_complex() or out.is_complex()) else torch.float64
    ref_flat = ref.detach().reshape(-1)
    out_flat = out.detach().reshape(-1)
    parts = []   # per chunk: [bad, nonfinite, finite count, sum, max] as 0-d device tensors
    for start in range(0, ref_flat.numel(), COMPARE_CHUNK):
        r_part = ref_flat[start:start + COMPARE_CHUNK]
        o_part = out_flat[start:start + COMPARE_CHUNK]
        r = r_part.to(wide)
        o = o_part.to(wide)
        diff = (o - r).abs()
        same = (o == r) | (torch.isnan(o) & torch.isnan(r))   # equal infinities, shared NaNs
        diff = diff.masked_fill(same, 0)
        finite = torch.isfinite(diff)
        finite_diff = diff.masked_fill(~finite, 0)
        if ref.dtype == torch.bool:
            bad = (o_part != r_part).sum()
        else:
            bad = (~Trusted.isclose(o_part, r_part, rtol=rtol, atol=atol, equal_nan=True)).sum()
        parts.append(torch.stack([bad.to(torch.float64), (~finite).sum().to(torch.float64),
                                  finite.sum().to(torch.float64), finite_diff.sum(),
                                  finite_diff.max()]))
        del r, o, diff, same, finite, finite_diff
    if not parts:
        return []
    rows = torch.stack(parts).tolist()
    bad = int(sum(row[0] for row in rows))
    n_nonfinite = int(sum(row[1] for row in rows))
    chunk_max = max(row[4] for row in rows)
    stats.max = max(stats.max, chunk_max)
    stats.sum += sum(row[3] for row in rows)
    stats.count += int(sum(row[2] for row in rows))
    stats.nonfinite += n_nonfinite
    if bad == 0:
        return []
    msg = f"{path}: {bad} of {ref.numel()} elements differ beyond atol={atol}, rtol={rtol}"
    if n_nonfinite:
        msg += f" ({n_nonfinite} of them NaN/Inf where the reference has another value)"
    else:
        msg += f" (max abs diff {chunk_max:.6g})"
    return [msg]


def runtime_stats(times_ms):
    """median/mean/std/min/max in ms; std is the population std (ddof=0), as numpy's default
    that KernelBench reports."""
    return {
        "median": statistics.median(times_ms),
        "mean": statistics.fmean(times_ms),
        "std": statistics.pstdev(times_ms) if len(times_ms) > 1 else 0.0,
        "min": min(times_ms),
        "max": max(times_ms),
    }


def triton_version():
    """The installed Triton's version from its distribution metadata (without importing it),
    or None when none is installed."""
    try:
        import importlib.metadata as metadata
    except ImportError:
        return None
    for name in TRITON_DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except Exception:
            continue
    return None


def reference_timing_from_spec(value):
    """spec.reference_timing: null, or cached reference statistics {median, mean, std, min,
    max} in ms (finite, >= 0, min <= max), returned as floats."""
    if value is None:
        return None
    if not isinstance(value, dict) or sorted(value) != sorted(RUNTIME_STATS_KEYS):
        raise SetupError("spec.reference_timing must be null or an object with exactly "
                         + ", ".join(RUNTIME_STATS_KEYS))
    stats = {}
    for key in RUNTIME_STATS_KEYS:
        v = value[key]
        if type(v) not in (int, float) or not 0 <= v < math.inf:
            raise SetupError(f"spec.reference_timing.{key} must be a finite number >= 0")
        stats[key] = float(v)
    if stats["min"] > stats["max"]:
        raise SetupError("spec.reference_timing.min exceeds its max")
    return stats


def prebuilt_from_spec(value):
    """spec.prebuilt: [{name, key, file, python_module}], files inside the task dir."""
    if not isinstance(value, list) or len(value) > MAX_BUILDS:
        raise SetupError("spec.prebuilt must be a list of at most %d entries" % MAX_BUILDS)
    entries = []
    for e in value:
        if (not isinstance(e, dict) or not isinstance(e.get("name"), str)
                or not isinstance(e.get("key"), str) or not isinstance(e.get("file"), str)
                or os.path.isabs(e["file"]) or ".." in e["file"].split("/")):
            raise SetupError(f"bad spec.prebuilt entry: {e!r}"[:300])
        entries.append({"name": e["name"], "key": e["key"], "file": e["file"],
                        "python_module": bool(e.get("python_module", True))})
    return entries


def cpu_model_name():
    """The CPU model from /proc/cpuinfo, so CPU timings say where they were taken."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


# ---------------------------------------------------------------------------------------------
# CUDA extension builds (load_inline), off the GPU
# ---------------------------------------------------------------------------------------------

def build_key(arguments, torch_version, cuda_arch):
    """What decides a load_inline build: its arguments (not where it builds or how loudly),
    the torch it builds against and the target architecture."""
    material = {k: v for k, v in arguments.items() if k not in BUILD_ARGS_IGNORED}
    blob = _json_dumps({"protocol": BUILD_PROTOCOL, "torch": torch_version, "arch": cuda_arch,
                        "args": material}, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def load_extension_file(name, path, python_module):
    """Load a built extension the way load_inline would have after building it."""
    if not python_module:
        Trusted.torch.ops.load_library(path)
        return path
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


class BuildFailed(Exception):
    """Marks a load_inline whose compiler failed in the prepare stage."""


class ExtensionCalls:
    """The functions of a candidate's extension whose CUDA source defines a __global__ kernel
    are wrapped where load_inline hands them out, so a profiled forward (KernelCounter) sees
    every call however the candidate keeps a reference to them; outside a profiled forward
    the wrapper only passes the call on."""
    counter = None

    @classmethod
    def wrap(cls, module, arguments):
        sources = arguments.get("cuda_sources")
        text = "\n".join(sources) if isinstance(sources, (list, tuple)) else str(sources or "")
        if "__global__" not in text or not hasattr(module, "__dict__"):
            return module
        for attr, value in list(vars(module).items()):
            if attr.startswith("_") or not callable(value) or isinstance(value, type):
                continue

            def call(*args, _fn=value, _name=attr, **kwargs):
                counter = cls.counter
                if counter is None:
                    return _fn(*args, **kwargs)
                return counter.custom_call(_name, _fn, args, kwargs)

            call.__name__ = attr
            call.__doc__ = getattr(value, "__doc__", None)
            try:
                setattr(module, attr, call)
            except (AttributeError, TypeError):
                pass
        return module


class ExtensionBuilds:
    """Stands in for torch.utils.cpp_extension.load_inline while the candidate runs.

    prepare stage (on the CPU, no GPU visible): each call is built in a directory of its own
    under <taskdir>/build (distinct sources never share a build directory or its lock file)
    and recorded as (name, key, file) for the worker, which caches the file node-wide.
    evaluate stage: a call whose key the worker prebuilt loads that file and skips the
    compiler; any other call builds as load_inline always does."""

    def __init__(self, taskdir, torch_version, cuda_arch, prebuilt, building):
        self.taskdir = taskdir
        self.torch_version = torch_version
        self.cuda_arch = cuda_arch
        self.building = building
        self.prebuilt = {}
        for entry in prebuilt:
            self.prebuilt[entry["key"]] = entry
        self.builds = []
        self.failure = None
        self.reused = 0

    def install(self):
        try:
            import torch.utils.cpp_extension as cpp
        except Exception:
            return
        real = cpp.load_inline
        signature = inspect.signature(real)
        builds = self

        def load_inline(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return real(*args, **kwargs)
            bound.apply_defaults()
            arguments = dict(bound.arguments)
            return builds.load(real, arguments)

        load_inline.__doc__ = real.__doc__
        cpp.load_inline = load_inline

    def load(self, real, arguments):
        name = arguments.get("name")
        standalone = bool(arguments.get("is_standalone", False))
        python_module = bool(arguments.get("is_python_module", True))
        if not isinstance(name, str) or standalone:
            return real(**arguments)
        key = build_key(arguments, self.torch_version, self.cuda_arch)
        entry = self.prebuilt.get(key)
        if entry is not None and entry.get("name") == name:
            self.reused += 1
            return ExtensionCalls.wrap(load_extension_file(
                name, os.path.join(self.taskdir, entry["file"]), python_module), arguments)
        if not self.building or len(self.builds) >= MAX_BUILDS:
            return ExtensionCalls.wrap(real(**arguments), arguments)
        build_dir = os.path.join(self.taskdir, "build", key[:32])
        os.makedirs(build_dir, exist_ok=True)
        arguments["build_directory"] = build_dir
        try:
            result = real(**arguments)
        except CAUGHT as e:
            if self.failure is None and "error building extension" in str(e).lower():
                self.failure = e
            raise
        self.builds.append({
            "name": name, "key": key, "python_module": python_module,
            "file": os.path.relpath(os.path.join(build_dir, name + ".so"), self.taskdir),
        })
        return result


# ---------------------------------------------------------------------------------------------
# Integrity: rules the judge and the runner decide at run time (docs/INTEGRITY.md)
# ---------------------------------------------------------------------------------------------

HACK, FLAG = "hack", "flag"
# Rule id -> severity. `hack` findings make the verdict `hack` (never correct); `flag` ones are
# reported for the trainer to weigh.
RUNTIME_RULES = {
    "input-mutated": HACK,            # the candidate changed its inputs
    "output-subclass": HACK,          # an output is not a plain torch.Tensor
    "output-aliases-input": HACK,     # an output shares memory with an input
    "stale-output": HACK,             # a timed call's output was wrong after correct trials
    "timing-tampered": HACK,          # timing or checking functions were replaced
    "timing-inconsistent": HACK,      # event times exceed the judge's own clock
    "threads-started": HACK,          # Python threads alive after the candidate returned
    "precision-toggle": HACK,         # TF32 / reduced-precision / default dtype changed
    "second-run-disagrees": FLAG,     # two runs on identical inputs differ
    "reduced-precision": FLAG,        # errors of a lower precision than the output dtype
    "implausible-speedup": FLAG,      # speedup over the plausibility threshold
    "faster-than-memory-bound": FLAG,  # faster than reading the inputs once at peak bandwidth
    "no-custom-kernel": FLAG,         # no kernel of the candidate's own ran: verdict decoy
    "protocol-tampered": HACK,        # something in the runner wrote into the judge's channel
    "integrity-checks-off": FLAG,     # the worker turned the runtime checks off (benchmarks)
}
RUNNER_VERDICTS = ("IMPORT", "COMPILATION", "INSTANTIATION", "RUNTIME", "CUDA_FAULT", "RESOURCE")
DEFAULT_MAX_SPEEDUP = 10.0
# Mean abs error relative to the mean magnitude above which a float32 output looks computed in
# bfloat16/fp16-with-loss: TF32 (Triton's tl.dot default) and exact fp32 stay below it.
REDUCED_PRECISION_REL_ERROR = 2e-3
TIMING_POOL_MAX = 3          # distinct input sets the timed calls rotate through
LARGE_SET_BYTES = 1 << 30    # inputs + outputs above this: release cached memory before timing
TIMING_POOL_MEMORY = 0.35    # at most this share of device memory for the timing pool
TIMING_CHECKS = 8            # warm-up and timed calls whose outputs are compared
TIMING_ROTATE_SHARE = 0.1    # share of the other calls before which the inputs change too
PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1


def runtime_finding(rule, detail):
    """A runtime finding, in the result's `flags` shape."""
    return {"rule": rule, "severity": RUNTIME_RULES[rule], "detail": str(detail)[:MAX_FLAG_CHARS]}


def tensor_nbytes(obj):
    torch = Trusted.torch
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_nbytes(x) for x in obj)
    return 0


def storage_span(t):
    """(start, end) bytes of the memory a tensor's storage covers (for alias checks)."""
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


def overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1] and a[0] != a[1] and b[0] != b[1]


def peak_memory_bandwidth(torch):
    """Bytes/s from the device's memory bus width and clock (DDR: two transfers per clock),
    or None when torch does not say."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    width = getattr(props, "memory_bus_width", 0) or 0
    clock_khz = getattr(props, "memory_clock_rate", 0) or 0
    if width <= 0 or clock_khz <= 0:
        return None
    return width / 8 * clock_khz * 1e3 * 2


def relative_error(stats, ref_outputs):
    """Mean abs difference over the mean magnitude of the reference's float32 outputs."""
    torch = Trusted.torch
    tensors = [t for t in flatten(ref_outputs) if isinstance(t, torch.Tensor)
               and t.dtype == torch.float32 and t.numel()]
    if not tensors or stats.count == 0 or stats.nonfinite:
        return None
    total = sum(float(t.reshape(-1)[i:i + COMPARE_CHUNK].abs().sum(dtype=torch.float64))
                for t in tensors for i in range(0, t.numel(), COMPARE_CHUNK))
    magnitude = total / sum(t.numel() for t in tensors)
    if not math.isfinite(magnitude) or magnitude <= 0:
        return None
    return (stats.sum / stats.count) / magnitude


def outputs_match(ref, out, spec):
    """A quick pass/fail of `compare` (one isclose pass per tensor, no statistics): the
    timed calls' checks, where only the answer matters."""
    torch = Trusted.torch
    if isinstance(ref, torch.Tensor):
        if not isinstance(out, torch.Tensor) or out.shape != ref.shape or \
                out.dtype != ref.dtype or out.device != ref.device:
            return False
        if ref.dtype == torch.bool:
            return bool(torch.equal(out, ref))
        # In chunks, as _compare_values: isclose's temporaries for a 8.6 GB output are ~20 GB.
        r, o = ref.reshape(-1), out.reshape(-1)
        verdicts = [Trusted.isclose(o[i:i + COMPARE_CHUNK], r[i:i + COMPARE_CHUNK],
                                    rtol=spec["rtol"], atol=spec["atol"], equal_nan=True).all()
                    for i in range(0, r.numel(), COMPARE_CHUNK)]
        return not verdicts or bool(torch.stack(verdicts).all())
    if isinstance(ref, (list, tuple)):
        return isinstance(out, (list, tuple)) and len(out) == len(ref) and all(
            outputs_match(r, o, spec) for r, o in zip(ref, out))
    return not compare(ref, out, spec["atol"], spec["rtol"], DiffStats())


def flatten(obj):
    if isinstance(obj, (list, tuple)):
        out = []
        for x in obj:
            out.extend(flatten(x))
        return out
    return [obj]


# ---------------------------------------------------------------------------------------------
# The judge: one method per protocol stage; the candidate runs in the runner process
# ---------------------------------------------------------------------------------------------

class RunnerGone(Exception):
    """The runner process ended (crash, exit) while the judge waited on it."""


class RunnerLink:
    """The judge's end of the runner: forked before CUDA is initialised and before any secret
    exists, so the candidate's process never holds the input seeds, the reference outputs or
    the comparison, nor the protocol channel (fd 3) and the gate (fd 4)."""

    def __init__(self, taskdir, plan):
        import socket
        judge_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        _flush_std()
        pid = os.fork()
        if pid == 0:
            judge_end.close()
            runner_main(runner_end, taskdir, plan)   # never returns
        runner_end.close()
        if plan is not None:
            _sandbox.close_ruleset(plan)   # the runner was the last process to need it
        self.sock = judge_end
        self.pid = pid
        self.status = None

    def call(self, op, **fields):
        """Sends one request and returns the reply; RunnerGone when the runner died."""
        try:
            _transport.send(self.sock, dict(fields, op=op))
            return _transport.recv(self.sock)
        except (_transport.PeerGone, BrokenPipeError, ConnectionResetError):
            raise RunnerGone()

    def reap(self):
        """The runner's wait status once it has exited (waits for it)."""
        if self.status is None:
            try:
                _, self.status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.status = 0
        return self.status

    def stop(self):
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.kill(self.pid, 9)
        except OSError:
            pass
        self.reap()


def _prctl(option, value):
    """prctl(2), best effort (a kernel without it leaves the defaults)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except Exception:
        pass


class Evaluation:
    """The judge. Runs the stages in order; any stage may end the evaluation by raising
    Verdict."""

    def __init__(self, taskdir):
        self.taskdir = os.path.abspath(taskdir)
        self.ref_path = os.path.join(self.taskdir, "reference.py")
        self.cand_path = os.path.join(self.taskdir, "candidate.py")
        self.xfer_dir = os.path.join(self.taskdir, "xfer")
        self.spec = None
        self.device = None
        self.stage_ms = {}
        self._stage = None
        self._stage_t0 = 0
        self.candidate_loaded = False   # candidate code has run: later harness faults are its
        self.compiled = False
        self.runner = None
        self.findings = []
        self.result = {
            "compiled": False, "correct": False, "trials_passed": 0, "trials_total": 0,
            "max_abs_diff": None, "mean_abs_diff": None, "runtime_ms": None,
            "ref_runtime_ms": None, "speedup": None, "error_code": None, "error_message": None,
            "device": {"kind": "cpu", "name": "unknown"}, "stage_ms": self.stage_ms,
            "ref_timing_cached": False,
            "software": {"torch": None, "triton": None, "cuda": None,
                         "python": platform.python_version()},
            "flags": [],
        }

    # -- bookkeeping ---------------------------------------------------------------------------

    def begin(self, stage):
        """Close the running stage's clock and announce the next stage on fd 3."""
        self._end_stage()
        self._stage = stage
        self._stage_t0 = _perf_counter_ns()
        emit({"event": "stage", "stage": stage})

    def _end_stage(self):
        if self._stage is not None:
            self.stage_ms[self._stage] = (_perf_counter_ns() - self._stage_t0) / 1e6
            self._stage = None

    def add_finding(self, rule, detail):
        """Keeps the first finding of each rule."""
        if rule in RUNTIME_RULES and all(f["rule"] != rule for f in self.findings):
            self.findings.append(runtime_finding(rule, detail))

    def hacks(self):
        return [f for f in self.findings if f["severity"] == HACK]

    def finish(self, verdict=None):
        """Fill in the verdict (if any) and write the single result line. A `hack` finding
        is never reported as correct: it becomes the verdict INTEGRITY unless the
        evaluation already ended with another error."""
        self._end_stage()
        if self.runner is not None:
            self.runner.stop()
        if verdict is not None:
            self.result["error_code"] = verdict.code
            self.result["error_message"] = verdict.message
            if verdict.compiled is not None:
                self.compiled = verdict.compiled
            if not verdict.keep_correct:
                self.result["correct"] = False
        hacks = self.hacks()
        if hacks:
            self.result["correct"] = False
            self.result["speedup"] = None   # timings stay for the record; no reward from them
            if self.result["error_code"] in (None, "CORRECTNESS"):
                self.result["error_code"] = "INTEGRITY"
                self.result["error_message"] = "integrity checks failed: " + "; ".join(
                    f"{f['rule']}: {f['detail']}" for f in hacks)[:MAX_ERROR_CHARS]
        room = MAX_FLAGS - len(self.result["flags"])
        self.result["flags"] = self.result["flags"] + self.findings[:max(room, 0)]
        self.result["compiled"] = bool(self.compiled)
        emit(dict({"event": "result"}, **self.result))

    def reference_failed(self, exc, context):
        """The problem itself is broken: REFERENCE, whatever the exception."""
        raise Verdict("REFERENCE", format_error(exc, self.ref_path, self.taskdir, context))

    def sync(self):
        sync_device(self.device)

    # -- the runner ----------------------------------------------------------------------------

    def ask(self, op, **fields):
        """One request to the runner. A failure verdict it reports ends the evaluation; its
        death is judged from its exit status; its findings are kept (they can only count
        against the candidate)."""
        try:
            reply = self.runner.call(op, **fields)
        except RunnerGone:
            if not self.candidate_loaded:
                # Nothing of the candidate has run in it: the runner failed to start (its
                # sandbox, its imports), a fault of this node.
                raise SetupError(f"the runner ended during {op} before the candidate was "
                                 f"loaded (wait status {self.runner.reap()})")
            raise self.runner_died()
        except _transport.TransportError as e:
            # Only the candidate can have written that: the runner's harness code sends whole
            # frames. The channel is lost, and so is the evaluation.
            self.add_finding("protocol-tampered", f"during {op}: {e}")
            raise Verdict("RUNTIME", f"the candidate's process broke its channel to the judge "
                          f"during {op}: {e}")
        failed = reply.get("sandbox_failed")
        if isinstance(failed, dict) and not self.candidate_loaded:
            raise _sandbox.SandboxError(str(failed.get("layer")), str(failed.get("error")))
        for f in reply.get("findings") or []:
            if isinstance(f, dict) and f.get("rule") in RUNTIME_RULES:
                self.add_finding(f["rule"], f.get("detail", ""))
        v = reply.get("verdict")
        if isinstance(v, dict):
            code = v.get("code") if v.get("code") in RUNNER_VERDICTS else "RUNTIME"
            message = str(v.get("message") or "")[:MAX_ERROR_CHARS]
            raise Verdict(code, message, False if code == "COMPILATION" or v.get(
                "compiled") is False else None)
        if reply.get("error"):
            raise Verdict("RUNTIME", f"evaluation failed in the candidate's process: "
                          f"{str(reply['error'])[:MAX_ERROR_CHARS - 60]}")
        return reply

    def runner_died(self):
        import signal
        status = self.runner.reap()
        stage = self._stage or "unknown"
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL and \
                self.spec.get("sandbox") and self.spec["sandbox"].get("seccomp"):
            # Its seccomp filter refuses sending SIGKILL, and the judge sends it only at the
            # end: the kernel (out of memory) or the worker killed it. Not a verdict the judge
            # can give: the worker decides from the task's cgroup (RunnerKilled).
            return RunnerKilled(stage)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            try:
                name = signal.Signals(sig).name
            except ValueError:
                name = str(sig)
            return Verdict("CRASH", f"the candidate's process was killed by {name} "
                           f"(stage {stage})")
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else status
        return Verdict("RUNTIME", f"the candidate's process exited with status {code} "
                       f"(stage {stage})")

    def share_inputs(self, inputs):
        """Copies of `inputs` for the runner, in memory of their own (a CUDA pool the runner
        maps nothing else of; files on CPU): returns (descriptions, the judge's view)."""
        torch = Trusted.torch
        descs, views = [], []
        for x in inputs:
            if isinstance(x, torch.Tensor):
                if self.device == "cuda":
                    with torch.cuda.use_mem_pool(self.share_pool):
                        copy_ = x.detach().clone()
                    desc, view = self.exporter.export(copy_)
                else:
                    desc, view = self.exporter.export(x.detach(), shared_file=True)
                descs.append({"tensor": desc})
                views.append(view)
            else:
                descs.append({"value": base64.b64encode(pickle.dumps(x)).decode("ascii")})
                views.append(x)
        return descs, views

    def import_outputs(self, node, depth=0):
        """The runner's outputs as tensors the judge can compare (checked descriptions)."""
        torch = Trusted.torch
        if not isinstance(node, dict) or depth > 8:
            raise _transport.TransportError("malformed output description")
        if "tensor" in node:
            index = torch.cuda.current_device() if self.device == "cuda" else None
            return _transport.import_tensor(torch, node["tensor"], self.xfer_dir, index)
        if "items" in node and isinstance(node["items"], list) and len(node["items"]) <= 4096:
            items = [self.import_outputs(x, depth + 1) for x in node["items"]]
            return tuple(items) if node.get("seq") == "tuple" else items
        if "value" in node and (node["value"] is None or type(node["value"]) in (
                int, float, bool, str)):
            return node["value"]
        raise _transport.TransportError("malformed output description")

    def run_candidate(self, descs, context, poison=True, allow_alias=False):
        """One forward of the candidate in the runner on shared inputs; its outputs."""
        reply = self.ask("forward", inputs=descs, poison=poison, allow_alias=allow_alias,
                         context=context)
        try:
            return self.import_outputs(reply.get("outputs"))
        except _transport.TransportError as e:
            raise Verdict("RUNTIME", f"{context}: unusable output: {e}")

    def inputs_changed(self, views, pristine):
        torch = Trusted.torch
        for i, (view, orig) in enumerate(zip(views, pristine)):
            if isinstance(orig, torch.Tensor):
                if self.device == "cpu":
                    view = view.clone()   # the file as it is now
                if view.shape != orig.shape or not torch.equal(view, orig):
                    return i
        return None

    # -- stages --------------------------------------------------------------------------------

    def run(self):
        self.begin("setup")
        self.setup()
        if self.spec["stage"] == "prepare":
            self.prepare()
            return
        if self.spec["stage"] == "selftest":
            self.selftest()
            return
        self.begin("load_reference")
        self.load_reference()
        self._end_stage()
        message = wait_at_gate("standby")
        if "reference_timing" in message:
            self.spec["reference_timing"] = reference_timing_from_spec(message["reference_timing"])
        self.begin("load_candidate")
        self.load_candidate()
        torch = Trusted.torch
        with torch.no_grad():
            self.begin("instantiate")
            self.instantiate()
            self.begin("correctness")
            self.correctness()
            if self.result["correct"] and self.checks:
                self.begin("profile")
                self.profile()
            if self.result["correct"] and self.spec["measure_performance"] \
                    and not self.hacks() and self.result.get("custom_kernel_count") != 0:
                self._end_stage()
                wait_at_gate("timing_gate")
                self.begin("performance")
                self.performance()
            self.begin("integrity")
            self.ask("finish")
        self.finish()

    def setup(self):
        """Read the spec, import torch, capture trusted functions, describe the device; in the
        evaluate stage, fork the runner first (nothing secret exists yet) and set it up.

        A cuda-backend candidate on a CPU worker is answered here (UNSUPPORTED) without ever
        being imported: load_inline would try to build CUDA code.
        """
        try:
            with open(os.path.join(self.taskdir, "spec.json"), encoding="utf-8") as f:
                raw = json.load(f)
        except (OSError, ValueError) as e:
            raise SetupError(f"cannot read spec.json: {e}")
        if not isinstance(raw, dict):
            raise SetupError("spec.json is not an object")
        spec = dict(SPEC_DEFAULTS, **raw)
        if spec["backend"] not in ("triton", "cuda") or spec["device"] not in ("cuda", "cpu"):
            raise SetupError(f"bad backend/device in spec: {spec['backend']!r}/{spec['device']!r}")
        ints = {"num_correct_trials": 1, "num_perf_trials": 1, "num_warmup": 0, "seed": 0}
        for key, low in ints.items():
            if type(spec[key]) is not int or spec[key] < low:
                raise SetupError(f"spec.{key} must be an integer >= {low}")
        for key in ("atol", "rtol"):
            if type(spec[key]) not in (int, float) or not 0 <= spec[key] < math.inf:
                raise SetupError(f"spec.{key} must be a finite number >= 0")
            spec[key] = float(spec[key])
        if type(spec["max_speedup"]) not in (int, float) or not 1 <= spec["max_speedup"]:
            raise SetupError("spec.max_speedup must be a number >= 1")
        spec["measure_performance"] = bool(spec["measure_performance"])
        spec["integrity_checks"] = bool(spec["integrity_checks"])
        spec["reference_timing"] = reference_timing_from_spec(spec["reference_timing"])
        screening = spec["screening"] if spec["screening"] is not None else {}
        if not isinstance(screening, dict) or any(
                not isinstance(k, str) or v not in SCREENING_ACTIONS
                for k, v in screening.items()):
            raise SetupError("spec.screening must map rule ids to reject/flag/off")
        spec["screening"] = screening
        if spec["stage"] not in STAGES:
            raise SetupError(f"spec.stage must be one of {', '.join(STAGES)}")
        if spec["cuda_arch"] is not None and not isinstance(spec["cuda_arch"], str):
            raise SetupError("spec.cuda_arch must be a string or null")
        spec["prebuilt"] = prebuilt_from_spec(spec["prebuilt"])
        if _screen is None or _transport is None:
            raise SetupError("screen.py or transport.py is missing next to harness.py")
        self.spec = spec
        self.device = spec["device"]
        self.result["trials_total"] = spec["num_correct_trials"]

        if self.device == "cpu" and spec["backend"] == "triton":
            # The worker sets it; make sure, before triton is first imported by the candidate.
            os.environ.setdefault("TRITON_INTERPRET", "1")
        try:
            import torch
        except Exception as e:
            raise SetupError(f"cannot import torch: {type(e).__name__}: {e}")
        capture_trusted(torch)
        # Read before the candidate runs; the worker keys its reference timing cache on these.
        self.result["software"] = {
            "torch": str(torch.__version__), "triton": triton_version(),
            "cuda": torch.version.cuda, "python": platform.python_version(),
        }

        if spec["stage"] == "prepare":
            # No device: the worker hides the GPU from this stage. The candidate is imported
            # (and its extensions built) in a runner, like everywhere else.
            self.result["device"] = {"kind": "cpu", "name": cpu_model_name()}
            self.start_runner()
            self.ask("setup", device="cpu", backend=spec["backend"], cuda_arch=spec["cuda_arch"],
                     prebuilt=[], building=True)
            self.check_runner()
            return
        if spec["backend"] == "cuda" and self.device == "cpu":
            self.result["device"] = {"kind": "cpu", "name": cpu_model_name()}
            raise Verdict("UNSUPPORTED", "backend 'cuda' (nvcc / load_inline) needs a CUDA "
                          "device; this worker evaluates on CPU (Triton interpreter only)",
                          compiled=False)
        self.start_runner()
        self.exporter = _transport.Exporter(torch, self.xfer_dir, "in")
        # The input seeds: drawn here, after the fork, never sent to the runner.
        import secrets
        self.input_seed = secrets.randbits(63)
        self.rng = random.Random(secrets.randbits(63))
        if self.device == "cuda":
            if not torch.cuda.is_available():
                raise SetupError("spec asks for device 'cuda' but torch sees no CUDA device")
            self.result["device"] = {"kind": "cuda", "name": torch.cuda.get_device_name()}
            self.flush_buffer = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
            self.start_event = torch.cuda.Event(enable_timing=True)
            self.end_event = torch.cuda.Event(enable_timing=True)
            self.share_pool = torch.cuda.MemPool()
        else:
            self.result["device"] = {"kind": "cpu", "name": cpu_model_name()}
            set_cpu_threads(torch)
        self.checks = spec["integrity_checks"]
        if not self.checks:
            self.add_finding("integrity-checks-off", "this worker ran without the runtime "
                             "integrity checks (a benchmark setting)")
        self.ask("setup", device=self.device, backend=spec["backend"],
                 cuda_arch=spec["cuda_arch"], prebuilt=spec["prebuilt"])
        self.check_runner()

    def start_runner(self):
        """Forks the runner: before CUDA exists here (a forked child cannot use it) and before
        any secret does."""
        os.makedirs(self.xfer_dir, mode=0o700, exist_ok=True)
        self.runner = RunnerLink(self.taskdir, self.spec["sandbox"])
        # No process of our uid (the runner included) may ptrace us or read our memory.
        _prctl(PR_SET_DUMPABLE, 0)

    def check_runner(self):
        """The runner's sandbox as the kernel shows it, before any candidate code runs in it."""
        if self.spec["sandbox"] is not None:
            try:
                _sandbox.check_runner(self.runner.pid, self.spec["sandbox"])
            except (_sandbox.SandboxError, OSError, KeyError, ValueError) as e:
                raise SetupError(str(e))

    def load_reference(self):
        """Import reference.py, then remove the file: the candidate's process never finds the
        reference on disk. Any failure is the problem's fault: REFERENCE."""
        try:
            self.ref = import_file(REFERENCE_MODULE, self.ref_path)
        except CAUGHT as e:
            self.reference_failed(e, "reference.py failed to import")
        missing = [n for n in ("Model", "get_inputs", "get_init_inputs")
                   if not callable(getattr(self.ref, n, None))]
        if missing:
            raise Verdict("REFERENCE", f"reference.py does not define {', '.join(missing)}")
        self.Model = self.ref.Model
        self.get_inputs = self.ref.get_inputs
        self.get_init_inputs = self.ref.get_init_inputs
        if self.runner is not None:
            try:
                os.unlink(self.ref_path)
            except OSError:
                pass
        dev = self.device
        seed = self.spec["seed"]
        try:
            seed_all(seed, dev)
            self.init_inputs = as_call_args(self.get_init_inputs())
            seed_all(seed, dev)
            ref_model = self.Model(*deep_clone(to_device(self.init_inputs, dev)))
            self.ref_model = ref_model.to(dev).eval()
            self.sync()
        except CAUGHT as e:
            self.reference_failed(e, "reference model failed to build")

    def load_candidate(self):
        """compile() first, so invalid Python is SYNTAX and never runs; screening; then the
        runner imports it. Exceptions at import are IMPORT, unless they are build failures
        (load_inline at module level is the usual CUDA pattern): COMPILATION."""
        source = self.check_source()
        self.screen(source)
        self.candidate_loaded = True
        reply = self.ask("import")
        if reply.get("builds_reused"):
            self.result["builds_reused"] = int(reply["builds_reused"])

    def check_source(self):
        try:
            with open(self.cand_path, "rb") as f:
                source = f.read()
            compile(source, self.cand_path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:   # ValueError: null bytes in the source
            text = "".join(traceback.format_exception_only(type(e), e))
            text = text.replace(self.taskdir.rstrip(os.sep) + os.sep, "")
            raise Verdict("SYNTAX", text[:MAX_ERROR_CHARS].rstrip("\n"), compiled=False)
        except OSError as e:
            raise SetupError(f"cannot read candidate.py: {e}")
        return source

    def prepare(self):
        """The CPU stage the worker runs before the task takes the GPU: the syntax check,
        screening, then the runner imports the candidate with no GPU visible, building its
        load_inline extensions. Final here: SYNTAX, SCREENED and a compiler failure
        (COMPILATION); the builds are reported in a `prepared` line. Anything else the import
        raised is left for the GPU stage to judge (module-level code may need the GPU).
        Nothing secret exists in this process: it only builds."""
        self.begin("load_candidate")
        source = self.check_source()
        self.screen(source)
        self.candidate_loaded = True
        reply = self.ask("prepare")
        self._end_stage()
        self.runner.stop()
        if reply.get("build_failure"):
            raise Verdict("COMPILATION", str(reply["build_failure"])[:MAX_ERROR_CHARS],
                          compiled=False)
        builds = reply.get("builds")
        import_error = reply.get("import_error")
        # The worker checks every field again (protocol.rs); here only the shape.
        if not isinstance(builds, list) or len(builds) > MAX_BUILDS or not all(
                isinstance(b, dict) for b in builds):
            raise Verdict("RUNTIME", "the candidate's process answered the prepare request "
                          "with a malformed build list")
        emit({"event": "prepared", "builds": builds,
              "import_error": None if import_error is None else str(import_error)[
                  :MAX_ERROR_CHARS],
              "stage_ms": self.stage_ms, "software": self.result["software"],
              "flags": self.result["flags"]})

    def selftest(self):
        """The worker's start-up proof (no reference, no candidate): the runner tries what its
        sandbox must refuse and, on a GPU, maps a tensor shared from here (CUDA IPC)."""
        self.candidate_loaded = True   # the runner runs probe code from here on
        tensor = None
        if self.device == "cuda":
            torch = Trusted.torch
            descs, self.selftest_inputs = self.share_inputs([torch.ones(1024, device="cuda")])
            tensor = descs[0]["tensor"]
        reply = self.ask("selftest", targets=self.spec["selftest"], tensor=tensor)
        self.runner.stop()
        emit({"event": "selftest", "runner": reply.get("report"),
              "judge": _selftest.identity()})

    def screen(self, source):
        """Static screening (screen.py) before the candidate is imported: every finding goes
        into `flags`; any finding whose rule the policy rejects is the verdict SCREENED."""
        try:
            text = source.decode("utf-8")
        except UnicodeDecodeError:
            text = source.decode("utf-8", "replace")
        findings = _screen.apply_policy(_screen.screen(text, self.spec["backend"]),
                                        self.spec["screening"])
        flags = [{k: str(f[k])[:MAX_FLAG_CHARS] for k in ("rule", "severity", "detail")}
                 for f in findings[:MAX_FLAGS]]
        self.result["flags"] = flags
        rejects = [f for f in flags if f["severity"] == "reject"]
        if rejects:
            lines = [f"{f['rule']}: {f['detail']}" for f in rejects]
            raise Verdict("SCREENED", "rejected by static screening: " + "; ".join(lines)[
                :MAX_ERROR_CHARS], compiled=False)

    def instantiate(self):
        """The runner seeds, builds ModelNew(*init inputs) the way the judge built Model (same
        parameters when ModelNew creates them in the same order), on the device, eval mode."""
        self.ask("instantiate", seed=self.spec["seed"],
                 init=base64.b64encode(pickle.dumps(self.init_inputs)).decode("ascii"))
        # Imported and instantiated; for Triton the kernels still have to compile at the first
        # call (a compile error there turns this back to False).
        self.compiled = True

    def _run_reference(self, args, context):
        try:
            out = self.ref_model(*args)
            self.sync()
            return out
        except CAUGHT as e:
            self.reference_failed(e, context)

    def _fresh_inputs(self, seed, context):
        """get_inputs() under `seed`, on the device.

        On CUDA, get_inputs() runs with CUDA as the default device, so its random tensors are
        drawn by the seeded CUDA generator in place: KernelBench level-1 inputs reach 6.4 GB,
        and drawing them on the CPU and copying them over costs ~8 s per trial while the GPU
        waits. Tensors a problem pins to the CPU explicitly are still moved. If a problem's
        get_inputs() cannot run that way, it runs on the CPU as KernelBench does."""
        torch = Trusted.torch
        try:
            if self.device == "cuda":
                try:
                    seed_all(seed, self.device)
                    with torch.device("cuda"):
                        return to_device(as_call_args(self.get_inputs()), self.device)
                except CAUGHT:
                    pass
            seed_all(seed, self.device)
            return to_device(as_call_args(self.get_inputs()), self.device)
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
        trial_seeds = [seeds.randrange(2 ** 32) for _ in range(spec["num_correct_trials"])]
        stats = DiffStats()
        passed = 0
        failures = []
        self.profile_seed = trial_seeds[0]
        for i, trial_seed in enumerate(trial_seeds):
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
                        problems = compare(ref_out, out, spec["atol"], spec["rtol"], stats)
                    else:   # the second run: only whether it passes
                        problems = [] if outputs_match(ref_out, out, spec) else compare(
                            ref_out, out, spec["atol"], spec["rtol"], DiffStats())
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

    def restore_inputs(self, views, pristine):
        torch = Trusted.torch
        for view, orig in zip(views, pristine):
            if isinstance(orig, torch.Tensor) and view.shape == orig.shape:
                view.copy_(orig)
        self.sync()

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
        self.result["custom_kernel_count"] = custom
        self.result["total_kernel_count"] = total
        if type(coverage) in (int, float) and math.isfinite(coverage):
            self.result["custom_time_coverage"] = min(max(float(coverage), 0.0), 1.0)
        if custom == 0:
            self.add_finding("no-custom-kernel", f"none of the {total} device operations of a "
                             "forward was a kernel defined in the candidate")

    def timing_pool_size(self, inputs, ref_out):
        """Input sets the timed calls rotate through: as many as fit the memory budget, at
        least 2 (the inputs of a set, its reference output)."""
        if self.device != "cuda":
            return TIMING_POOL_MAX
        torch = Trusted.torch
        per_set = tensor_nbytes(inputs) + tensor_nbytes(ref_out)
        budget = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory \
            * TIMING_POOL_MEMORY
        return max(2, min(TIMING_POOL_MAX, int(budget // max(per_set, 1))))

    def performance(self):
        """Timed calls on inputs the judge rotates: a pool of input sets (seeds drawn from the
        secret seed) with their reference outputs; the runner sees one input slot whose
        contents the judge rewrites from another set of the pool before every checked call and
        a random share of the others (so a result kept from an earlier call, keyed on pointer,
        shape or call count, is stale there). A few warm-up and timed calls, chosen at random
        and unknown to the runner, have their outputs compared with the reference's and their
        inputs checked unchanged. The reference is timed here in the judge the same way (unless
        the worker passed its cached timing): L2 flush, sync, start event, forward, device-wide
        sync (work on side streams counts), end event."""
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
        cached_ref = spec["reference_timing"]
        if cached_ref is None:
            ref = runtime_stats(self.time_reference(pool))
            if large:   # its temporaries, before the runner's turn
                torch.cuda.empty_cache()
        else:
            ref = dict(cached_ref)
        descs, views = self.share_inputs(pool[0][0])
        self.ask("slot", slot=0, inputs=descs)
        content = 0
        total = spec["num_warmup"] + spec["num_perf_trials"]
        checked = set(self.rng.sample(range(total), min(total, TIMING_CHECKS))) \
            if self.checks else set()
        cand_times, wrong_calls = [], []
        for k in range(total):
            timed = k >= spec["num_warmup"]
            call = f"timed call {k - spec['num_warmup']}" if timed else f"warm-up call {k}"
            if len(pool) > 1 and (k in checked or self.rng.random() < TIMING_ROTATE_SHARE):
                content = self.rng.choice([c for c in range(len(pool)) if c != content])
                for view, src in zip(views, pool[content][0]):
                    if isinstance(src, torch.Tensor):
                        view.copy_(src)
                self.sync()
            t0 = _perf_counter_ns()
            reply = self.ask("time", slot=0, timed=timed)
            wall_ms = (_perf_counter_ns() - t0) / 1e6
            ms = reply.get("ms")
            if type(ms) not in (int, float) or not 0 <= ms < math.inf:
                raise Verdict("RUNTIME", "the runner reported no usable time")
            try:
                out = self.import_outputs(reply.get("outputs"))
            except _transport.TransportError as e:
                raise Verdict("RUNTIME", f"{call}: unusable output: {e}")
            if timed:
                cand_times.append(float(ms))
                if ms > wall_ms:
                    self.add_finding("timing-inconsistent", f"{call} reported {ms:.3f} ms; the "
                                     f"judge's clock saw the whole request take {wall_ms:.3f} ms")
            if k in checked and not outputs_match(pool[content][1], out, spec):
                problems = compare(pool[content][1], out, spec["atol"], spec["rtol"],
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
        if speedup is not None and speedup > self.spec["max_speedup"]:
            self.add_finding("implausible-speedup", f"speedup {speedup:.1f}x is over the "
                             f"plausibility threshold {self.spec['max_speedup']:g}x")
        if self.device == "cuda":
            bandwidth = peak_memory_bandwidth(Trusted.torch)
            floor_ms = tensor_nbytes(inputs) / bandwidth * 1e3 if bandwidth else 0.0
            # Inputs come from memory after the L2 flush; half the floor leaves room for
            # clock and measurement slack.
            if cand["median"] < 0.5 * floor_ms:
                self.add_finding("faster-than-memory-bound", f"median {cand['median']:.4f} ms "
                                 f"is under half the {floor_ms:.4f} ms needed to read the "
                                 "inputs once at peak memory bandwidth")

    def time_reference(self, pool):
        spec = self.spec
        args = [deep_clone(inputs) if self.reference_mutates else inputs for inputs, _ in pool]
        for k in range(spec["num_warmup"]):
            self._run_reference(args[k % len(args)], "reference forward failed (warm-up)")
        times = []
        try:
            for k in range(spec["num_perf_trials"]):
                times.append(timed_call(self, self.ref_model, args[k % len(args)])[0])
        except CAUGHT as e:
            self.reference_failed(e, "reference forward failed (timed)")
        return times



def timed_call(owner, model, args):
    """One timed call, returning (ms, output). CUDA: flush L2, sync, start event, forward,
    device-wide sync (so work left on side streams is inside the window), end event, sync.
    CPU: perf_counter_ns around the forward. `owner` holds the flush buffer and events."""
    if owner.device != "cuda":
        t0 = _perf_counter_ns()
        out = model(*args)
        return (_perf_counter_ns() - t0) / 1e6, out
    owner.flush_buffer.zero_()
    Trusted.synchronize()
    Trusted.event_record(owner.start_event)
    out = model(*args)
    Trusted.synchronize()
    Trusted.event_record(owner.end_event)
    Trusted.synchronize()
    return Trusted.event_elapsed(owner.start_event, owner.end_event), out


def sync_device(device):
    """Wait for queued GPU work so asynchronous faults surface where they belong."""
    if device == "cuda":
        Trusted.synchronize()


def capture_trusted(torch):
    Trusted.torch = torch
    Trusted.allclose = torch.allclose
    Trusted.isclose = torch.isclose
    Trusted.manual_seed = torch.manual_seed
    Trusted.cuda_manual_seed_all = torch.cuda.manual_seed_all
    Trusted.Event = torch.cuda.Event
    Trusted.event_record = torch.cuda.Event.record
    Trusted.event_elapsed = torch.cuda.Event.elapsed_time
    Trusted.synchronize = torch.cuda.synchronize


def set_cpu_threads(torch):
    threads = os.environ.get("CRUCIBLE_CPU_THREADS")
    if threads:
        try:
            torch.set_num_threads(max(1, int(threads)))
        except ValueError:
            raise SetupError(f"CRUCIBLE_CPU_THREADS is not an integer: {threads!r}")


def import_file(name, path):
    """Import a file as its own module, registered in sys.modules before it executes so that
    inspect/linecache (and so @triton.jit) can find its source."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {os.path.basename(path)}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


# ---------------------------------------------------------------------------------------------
# The runner: the candidate's process
# ---------------------------------------------------------------------------------------------

# What the candidate must not replace: timing, synchronisation, comparison and the functions
# the harness's own checks use. Looked up again after every request (module, attribute).
WATCHED = (
    ("time", "perf_counter"), ("time", "perf_counter_ns"), ("time", "time"),
    ("time", "monotonic"), ("time", "monotonic_ns"),
    ("torch", "allclose"), ("torch", "isclose"), ("torch", "equal"),
    ("torch.cuda", "synchronize"), ("torch.cuda", "Event"), ("torch.cuda", "current_stream"),
    ("torch.cuda.Event", "record"), ("torch.cuda.Event", "elapsed_time"),
    ("torch.cuda.Event", "synchronize"), ("torch.Tensor", "zero_"), ("torch.Tensor", "copy_"),
    ("torch.Tensor", "untyped_storage"), ("torch.UntypedStorage", "_share_cuda_"),
    ("torch.UntypedStorage", "data_ptr"),
) + tuple((m, n) for m in ("_thread", "threading") for n in (
    "start_new_thread", "start_joinable_thread", "start_new", "_start_new_thread",
    "_start_joinable_thread"))
THREAD_STARTERS = ("start_new_thread", "start_joinable_thread", "start_new",
                   "_start_new_thread", "_start_joinable_thread")


def _lookup(path):
    module, _, attr = path[0].partition(".")
    obj = sys.modules.get(module)
    for part in (attr.split(".") if attr else []):
        obj = getattr(obj, part, None)
    return getattr(obj, path[1], None) if obj is not None else None


def precision_state(torch):
    """Global numeric settings a candidate could lower to pass a loose tolerance faster."""
    backends = torch.backends
    return {
        "matmul.allow_tf32": backends.cuda.matmul.allow_tf32,
        "cudnn.allow_tf32": backends.cudnn.allow_tf32,
        "matmul.fp16_reduced": backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "matmul.bf16_reduced": backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "default_dtype": str(torch.get_default_dtype()),
        "autocast": torch.is_autocast_enabled(),
    }


class RunnerVerdict(Exception):
    def __init__(self, code, message, compiled=None):
        super().__init__(code)
        self.code, self.message, self.compiled = code, message, compiled


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

    def clock(self):
        r = self.runner
        if r.device == "cuda":
            e = Trusted.Event(enable_timing=True)
            Trusted.event_record(e)
            return e
        return _perf_counter_ns()

    def elapsed(self, a, b):
        if self.runner.device == "cuda":
            return Trusted.event_elapsed(a, b)
        return (b - a) / 1e6

    def custom_call(self, name, fn, args, kwargs):
        start = self.clock()
        self.inside_custom += 1
        try:
            return fn(*args, **kwargs)
        finally:
            self.inside_custom -= 1
            self.spans.append((start, self.clock()))
            self.custom += 1
            self.custom_names.add(name)

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


class Runner:
    """Serves the judge's requests in the candidate's process. Nothing here is trusted by
    the judge: outputs are checked there; what the runner reports can only count against the
    candidate (findings, failure verdicts)."""

    def __init__(self, sock, taskdir):
        self.sock = sock
        self.taskdir = taskdir
        self.cand_path = os.path.join(taskdir, "candidate.py")
        self.xfer_dir = os.path.join(taskdir, "xfer")
        self.model = None
        self.slots = {}
        self.kept = None
        self.inputs = None
        self.watched = {}
        self.precision = None
        self.loaded = False
        self.kernels = set()
        self.ext_globals = False

    def serve(self):
        while True:
            try:
                msg = _transport.recv(self.sock)
            except _transport.PeerGone:
                return
            op = msg.get("op")
            handler = getattr(self, "op_" + str(op), None)
            try:
                if handler is None:
                    raise ValueError(f"unknown request {op!r}")
                reply = handler(msg) or {}
            except RunnerVerdict as v:
                reply = {"verdict": {"code": v.code, "message": v.message,
                                     "compiled": v.compiled}}
            except CAUGHT as e:
                if self.loaded:
                    reply = {"verdict": {"code": classify(e, "RUNTIME"), "message": format_error(
                        e, self.cand_path, self.taskdir, f"during {op}")}}
                else:
                    reply = {"error": f"{type(e).__name__}: {e}"}
            reply["findings"] = reply.pop("extra", []) + self.integrity_findings()
            _transport.send(self.sock, _finite_or_none(reply))
            if op == "finish":
                return

    # -- checks that run after every request ---------------------------------------------------

    def integrity_findings(self):
        if not self.loaded:
            return []
        found = []
        changed = [".".join(p) for p in WATCHED if _lookup(p) is not self.watched.get(p)]
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

    # -- requests ------------------------------------------------------------------------------

    def op_setup(self, msg):
        import torch
        self.device = msg["device"]
        self.backend = msg["backend"]
        capture_trusted(torch)
        if self.device == "cuda":
            torch.cuda.init()
            torch.empty(1, device="cuda")
            self.flush_buffer = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
            self.start_event = torch.cuda.Event(enable_timing=True)
            self.end_event = torch.cuda.Event(enable_timing=True)
        else:
            set_cpu_threads(torch)
        self.exporter = _transport.Exporter(torch, self.xfer_dir, "out")
        self.builds = ExtensionBuilds(self.taskdir, str(torch.__version__), msg.get("cuda_arch"),
                                      msg.get("prebuilt") or [],
                                      building=bool(msg.get("building")))
        self.current_frames = sys._current_frames
        return {}

    def arm_checks(self):
        """Captured just before the candidate's code first runs."""
        self.hook_thread_starts()
        self.watched = {p: _lookup(p) for p in WATCHED}
        self.precision = precision_state(Trusted.torch)
        self.loaded = True

    def op_import(self, msg):
        self.arm_checks()
        self.builds.install()
        try:
            self.cand = import_file(CANDIDATE_MODULE, self.cand_path)
        except CAUGHT as e:
            code = classify(e, "IMPORT")
            raise RunnerVerdict(code, format_error(e, self.cand_path, self.taskdir), False)
        self.kernels = self.find_kernels()
        return {"builds_reused": self.builds.reused}

    def op_prepare(self, msg):
        """The CPU stage's import: builds load_inline extensions into the task directory and
        reports them, a compiler failure, or what else the import raised (for the device stage
        to judge)."""
        self.builds.install()
        import_error = None
        try:
            import_file(CANDIDATE_MODULE, self.cand_path)
        except CAUGHT as e:
            import_error = format_error(e, self.cand_path, self.taskdir)
        failure = None
        if self.builds.failure is not None:
            failure = format_error(self.builds.failure, self.cand_path, self.taskdir,
                                   "load_inline failed to build")
        return {"builds": self.builds.builds, "build_failure": failure,
                "import_error": import_error}

    def op_selftest(self, msg):
        """The worker's start-up check: tries what the sandbox must refuse (selftest.py)."""
        report = _selftest.probe(msg.get("targets") or {})
        desc = msg.get("tensor")
        if desc is not None:   # a CUDA tensor the judge shared: IPC through the sandbox
            torch = Trusted.torch
            t = _transport.import_tensor(torch, desc, self.xfer_dir, torch.cuda.current_device())
            report["ipc_sum"] = float(t.sum().item())
        return {"report": report}

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
                    if code is not None and _same_file(code.co_filename, self.cand_path):
                        found.add(id(value))
                    break
                value = getattr(value, "fn", None)
                if value is None:
                    break
        return found

    def op_instantiate(self, msg):
        torch = Trusted.torch
        init = pickle.loads(base64.b64decode(msg["init"]))
        model_new = getattr(self.cand, "ModelNew", None)
        if model_new is None:
            raise RunnerVerdict("INSTANTIATION", "candidate.py defines no `ModelNew`", False)
        if not callable(model_new):
            raise RunnerVerdict("INSTANTIATION", f"`ModelNew` is not callable "
                                f"({type(model_new).__name__})", False)
        try:
            seed_all(msg["seed"], self.device)
            model = model_new(*to_device(init, self.device))
            if isinstance(model, torch.nn.Module):
                model = model.to(self.device).eval()
            elif not callable(model):
                raise TypeError(f"ModelNew(...) returned a non-callable {type(model).__name__}")
            self.sync()
        except CAUGHT as e:
            code = classify(e, "INSTANTIATION")
            raise RunnerVerdict(code, format_error(e, self.cand_path, self.taskdir), False)
        self.model = model
        torch.set_grad_enabled(False)
        return {}

    def sync(self):
        sync_device(self.device)

    def import_inputs(self, descs):
        torch = Trusted.torch
        args = []
        for d in descs:
            if "tensor" in d:
                index = torch.cuda.current_device() if self.device == "cuda" else None
                args.append(_transport.import_tensor(torch, d["tensor"], self.xfer_dir, index,
                                                     shared=True))
            else:
                args.append(pickle.loads(base64.b64decode(d["value"])))
        return args

    def call_model(self, args, context):
        try:
            out = self.model(*args)
            self.sync()
            return out
        except CAUGHT as e:
            code = classify(e, "RUNTIME")
            raise RunnerVerdict(code, format_error(e, self.cand_path, self.taskdir, context))

    def op_forward(self, msg):
        args = self.import_inputs(msg["inputs"])
        if msg.get("poison"):
            self.poison_free_memory()
        out = self.call_model(args, str(msg.get("context", "candidate forward raised")))
        findings = self.check_outputs(out, args, bool(msg.get("allow_alias")))
        if findings:
            # An output on an input's memory cannot go back over CUDA IPC (torch does not
            # re-share what it received): the judge gets a copy, the finding stands.
            out = [x.clone() if isinstance(x, Trusted.torch.Tensor) else x
                   for x in flatten(out)] if isinstance(out, (list, tuple)) else (
                out.clone() if isinstance(out, Trusted.torch.Tensor) else out)
        self.kept, self.inputs = out, args
        reply = {"outputs": self.export(out)}
        if findings:
            reply["extra"] = findings
        return reply

    def op_slot(self, msg):
        self.slots[msg["slot"]] = self.import_inputs(msg["inputs"])
        return {}

    def op_time(self, msg):
        args = self.slots[msg["slot"]]
        self.kept = None
        ms, self.kept = timed_call(self, self.model, args)
        return {"ms": ms, "outputs": self.export(self.kept)}

    def op_release(self, msg):
        self.kept = None
        self.inputs = None
        self.slots = {}
        if msg.get("trim") and self.device == "cuda":
            Trusted.torch.cuda.empty_cache()
        return {}

    def op_finish(self, msg):
        return {}

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
                "custom_kernels": sorted(counter.custom_names)[:32]}

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

    # -- outputs -------------------------------------------------------------------------------

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

    def export(self, node, depth=0):
        torch = Trusted.torch
        if isinstance(node, torch.Tensor):
            t = node.detach()
            if type(t) is not torch.Tensor:
                t = t.as_subclass(torch.Tensor)   # its storage, whatever the subclass says
            desc, _ = self.exporter.export(t)
            return {"tensor": desc}
        if isinstance(node, (list, tuple)) and depth < 8:
            return {"seq": "tuple" if isinstance(node, tuple) else "list",
                    "items": [self.export(x, depth + 1) for x in node]}
        if node is None or type(node) in (int, float, bool, str):
            return {"value": node}
        return {"value": f"<{type(node).__name__}>"}

    def poison_free_memory(self):
        """Fill the memory the caching allocator holds but no tensor uses with NaN bytes, so
        an output that is never written reads garbage instead of an earlier result."""
        if self.device != "cuda":
            return
        torch = Trusted.torch
        sizes = []
        for segment in torch.cuda.memory_snapshot():
            for block in segment.get("blocks", []):
                if block.get("state") == "inactive" and block.get("size", 0) > 0:
                    sizes.append(block["size"])
        held = []
        for size in sorted(sizes, reverse=True):
            t = torch.empty(size, dtype=torch.uint8, device="cuda")
            t.fill_(0xFF)
            held.append(t)
        del held


def runner_main(sock, taskdir, plan):
    """The forked runner: drops the protocol channel and the gate, enters its own sandbox
    layer, dies with the judge, and serves requests until told to finish; never returns."""
    code = 0
    try:
        for fd in (3, GATE_FD):
            try:
                os.close(fd)
            except OSError:
                pass
        if plan is not None:
            try:
                _sandbox.enter_runner(plan)
                _sandbox.close_ruleset(plan)
            except _sandbox.SandboxError as e:
                # Told to the judge as the answer to its first request (nothing of the
                # candidate has run yet, so this is still our own code speaking).
                _transport.recv(sock)
                _transport.send(sock, {"sandbox_failed": {"layer": e.layer,
                                                          "error": str(e.message)[:2000]}})
                _os_exit(3)
        import signal
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        Runner(sock, taskdir).serve()
    except BaseException:
        try:
            sys.stderr.write("crucible runner: internal error\n" + traceback.format_exc())
        except Exception:
            pass
        code = 1
    _flush_std()
    _os_exit(code)


def main(taskdir=None):
    """One evaluation of `taskdir` (from argv when run as a script); never returns."""
    if taskdir is None:
        if len(sys.argv) != 2:
            sys.stderr.write("usage: python -I -B harness.py <taskdir>\n")
            _os_exit(3)
        taskdir = sys.argv[1]
    _bind_channel()
    _bind_gate()
    plan = _sandbox_plan(taskdir)
    if plan is not None:
        # From here on this process is the judge, inside every layer of the plan; the
        # process the worker started waits for it (sandbox.py).
        started = _perf_counter_ns()
        try:
            layers = _sandbox.enter_task(plan)
        except _sandbox.SandboxError as e:
            _sandbox_failed(e)
        emit({"event": "sandbox", "layers": layers,
              "ms": (_perf_counter_ns() - started) / 1e6})
    ev = Evaluation(taskdir)
    try:
        try:
            ev.run()
        except Verdict as v:
            ev.finish(v)
        except SetupError as e:
            sys.stderr.write(f"crucible harness: setup failed: {e}\n")
            _flush_std()
            _os_exit(3)
        except _sandbox.SandboxError as e:
            _sandbox_failed(e)
        except RunnerKilled as e:
            sys.stderr.write(f"crucible harness: the candidate's process was killed by SIGKILL "
                             f"from outside (stage {e})\n")
            _flush_std()
            _os_exit(RUNNER_KILLED_EXIT)
        except BaseException as e:   # a harness bug, or the candidate broke the harness
            detail = "".join(traceback.format_exception(type(e), e, e.__traceback__))
            sys.stderr.write("crucible harness: internal error\n" + detail)
            if not ev.candidate_loaded:
                _flush_std()
                _os_exit(3)
            ev.finish(Verdict("RUNTIME", format_error(
                e, ev.cand_path, ev.taskdir,
                f"evaluation failed after the candidate was loaded (stage {ev._stage})")))
    except BaseException as e:       # could not even write the result (fd 3 gone?)
        sys.stderr.write(f"crucible harness: cannot write the result: {type(e).__name__}: {e}\n")
        _flush_std()
        _os_exit(1)
    _flush_std()
    _os_exit(0)


def _sandbox_failed(e):
    """A layer of the plan could not be entered: say which on fd 3 (the worker's start-up
    self-test drops an optional layer that fails, and refuses to serve without a required
    one) and end as a fault of this node."""
    try:
        emit({"event": "sandbox_failed", "layer": e.layer, "error": str(e.message)[:2000]})
    finally:
        sys.stderr.write(f"crucible harness: sandbox: {e}\n")
        _flush_std()
        _os_exit(3)


def _sandbox_plan(taskdir):
    """The worker's sandbox plan from spec.json (null: the worker runs unsandboxed). Read
    before anything else, as the process the worker started; exit 3 if unusable."""
    try:
        with open(os.path.join(taskdir, "spec.json"), encoding="utf-8") as f:
            plan = json.load(f).get("sandbox")
        if plan is not None and (not isinstance(plan, dict) or _sandbox is None):
            raise ValueError("unusable sandbox plan (or sandbox.py missing)")
        return plan
    except (OSError, ValueError, AttributeError) as e:
        sys.stderr.write(f"crucible harness: cannot read the sandbox plan: {e}\n")
        _flush_std()
        _os_exit(3)


def _flush_std():
    """The candidate's output is the worker's to capture: flush what Python still buffers."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


if __name__ == "__main__":
    main()
