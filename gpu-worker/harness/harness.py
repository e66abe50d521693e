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


import copy  # noqa: E402
import errno  # noqa: E402
import hashlib  # noqa: E402
import importlib.machinery  # noqa: E402
import importlib.util  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
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

def _load_screen():
    """screen.py, the static screening, from this file's directory (the worker writes it next
    to harness.py); loaded at import so the template has it before any candidate exists."""
    path = os.path.join(os.path.dirname(_HARNESS_FILE), "screen.py")
    try:
        spec = importlib.util.spec_from_file_location("crucible_screen", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except Exception:
        return None


_screen = _load_screen()
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
    "prebuilt": [],
}
STAGES = ("evaluate", "prepare")
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
            return load_extension_file(name, os.path.join(self.taskdir, entry["file"]),
                                       python_module)
        if not self.building or len(self.builds) >= MAX_BUILDS:
            return real(**arguments)
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
# The evaluation, one method per protocol stage
# ---------------------------------------------------------------------------------------------

class Evaluation:
    """Runs the stages in order; any stage may end the evaluation by raising Verdict."""

    def __init__(self, taskdir):
        self.taskdir = os.path.abspath(taskdir)
        self.ref_path = os.path.join(self.taskdir, "reference.py")
        self.cand_path = os.path.join(self.taskdir, "candidate.py")
        self.spec = None
        self.device = None
        self.stage_ms = {}
        self._stage = None
        self._stage_t0 = 0
        self.candidate_loaded = False   # candidate code has run: later harness faults are its
        self.compiled = False
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

    def finish(self, verdict=None):
        """Fill in the verdict (if any) and write the single result line."""
        self._end_stage()
        if verdict is not None:
            self.result["error_code"] = verdict.code
            self.result["error_message"] = verdict.message
            if verdict.compiled is not None:
                self.compiled = verdict.compiled
            if not verdict.keep_correct:
                self.result["correct"] = False
        self.result["compiled"] = bool(self.compiled)
        emit(dict({"event": "result"}, **self.result))

    def fail(self, exc, default, context="", compiled=None):
        """Classify a candidate exception and raise the Verdict for it."""
        code = classify(exc, default)
        if code == "COMPILATION":
            compiled = False
        message = format_error(exc, self.cand_path, self.taskdir, context)
        for e in _chain(exc):
            # Free the candidate's locals (e.g. the memory it hoarded) before we go on.
            traceback.clear_frames(e.__traceback__)
        raise Verdict(code, message, compiled)

    def reference_failed(self, exc, context):
        """The problem itself is broken: REFERENCE, whatever the exception."""
        raise Verdict("REFERENCE", format_error(exc, self.ref_path, self.taskdir, context))

    def sync(self):
        """Wait for queued GPU work so asynchronous faults surface where they belong."""
        if self.device == "cuda":
            Trusted.synchronize()

    # -- stages --------------------------------------------------------------------------------

    def run(self):
        self.begin("setup")
        self.setup()
        if self.spec["stage"] == "prepare":
            self.prepare()
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
            if self.result["correct"] and self.spec["measure_performance"]:
                self._end_stage()
                wait_at_gate("timing_gate")
                self.begin("performance")
                self.performance()
        self.finish()

    def setup(self):
        """Read the spec, import torch, capture trusted functions, describe the device.

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
        spec["measure_performance"] = bool(spec["measure_performance"])
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
        if _screen is None:
            raise SetupError("screen.py (static screening) is missing next to harness.py")
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
        Trusted.torch = torch
        # Read before the candidate runs; the worker keys its reference timing cache on these.
        self.result["software"] = {
            "torch": str(torch.__version__), "triton": triton_version(),
            "cuda": torch.version.cuda, "python": platform.python_version(),
        }
        Trusted.allclose = torch.allclose
        Trusted.isclose = torch.isclose
        Trusted.manual_seed = torch.manual_seed
        Trusted.cuda_manual_seed_all = torch.cuda.manual_seed_all
        Trusted.Event = torch.cuda.Event
        Trusted.event_record = torch.cuda.Event.record
        Trusted.event_elapsed = torch.cuda.Event.elapsed_time
        Trusted.synchronize = torch.cuda.synchronize

        if spec["stage"] == "prepare":
            # No device: the worker hides the GPU from this stage.
            self.result["device"] = {"kind": "cpu", "name": cpu_model_name()}
            self.builds = ExtensionBuilds(self.taskdir, str(torch.__version__),
                                          spec["cuda_arch"], [], building=True)
            return
        if self.device == "cuda":
            if not torch.cuda.is_available():
                raise SetupError("spec asks for device 'cuda' but torch sees no CUDA device")
            self.result["device"] = {"kind": "cuda", "name": torch.cuda.get_device_name()}
            # Allocated once, before the candidate can take the memory; zeroed before every
            # timed call to flush L2.
            self.flush_buffer = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
            self.start_event = torch.cuda.Event(enable_timing=True)
            self.end_event = torch.cuda.Event(enable_timing=True)
        else:
            self.result["device"] = {"kind": "cpu", "name": cpu_model_name()}
            threads = os.environ.get("CRUCIBLE_CPU_THREADS")
            if threads:
                try:
                    torch.set_num_threads(max(1, int(threads)))
                except ValueError:
                    raise SetupError(f"CRUCIBLE_CPU_THREADS is not an integer: {threads!r}")

        self.builds = ExtensionBuilds(self.taskdir, str(torch.__version__), spec["cuda_arch"],
                                      spec["prebuilt"], building=False)
        if spec["backend"] == "cuda" and self.device == "cpu":
            raise Verdict("UNSUPPORTED", "backend 'cuda' (nvcc / load_inline) needs a CUDA "
                          "device; this worker evaluates on CPU (Triton interpreter only)",
                          compiled=False)

    def _import_file(self, name, path):
        """Import a file as its own module, registered in sys.modules before it executes so
        that inspect/linecache (and so @triton.jit) can find its source."""
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

    def load_reference(self):
        """Import reference.py; any failure is the problem's fault: REFERENCE."""
        try:
            self.ref = self._import_file(REFERENCE_MODULE, self.ref_path)
        except CAUGHT as e:
            self.reference_failed(e, "reference.py failed to import")
        missing = [n for n in ("Model", "get_inputs", "get_init_inputs")
                   if not callable(getattr(self.ref, n, None))]
        if missing:
            raise Verdict("REFERENCE", f"reference.py does not define {', '.join(missing)}")
        self.Model = self.ref.Model
        self.get_inputs = self.ref.get_inputs
        self.get_init_inputs = self.ref.get_init_inputs

    def load_candidate(self):
        """compile() first, so invalid Python is SYNTAX and never runs; then import it.

        Exceptions at import are IMPORT, unless they are build failures (load_inline at module
        level is the usual CUDA pattern): COMPILATION.
        """
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
        self.screen(source)
        self.candidate_loaded = True
        self.builds.install()
        try:
            self.cand = self._import_file(CANDIDATE_MODULE, self.cand_path)
        except CAUGHT as e:
            self.fail(e, "IMPORT", compiled=False)
        if self.builds.reused:
            self.result["builds_reused"] = self.builds.reused

    def prepare(self):
        """The CPU stage the worker runs before the task takes the GPU: the syntax check,
        screening and the import of the candidate with no GPU visible, building its
        load_inline extensions. Final here: SYNTAX, SCREENED and a compiler failure
        (COMPILATION); the builds are reported in a `prepared` line. Anything else the import
        raised is left for the GPU stage to judge (module-level code may need the GPU)."""
        self.begin("load_candidate")
        import_error = None
        try:
            self.load_candidate()
        except Verdict as v:
            if self.builds.failure is not None:
                self._end_stage()
                raise Verdict("COMPILATION", format_error(
                    self.builds.failure, self.cand_path, self.taskdir,
                    "load_inline failed to build"), compiled=False)
            if v.code in ("SYNTAX", "SCREENED"):
                raise
            import_error = v.message[:MAX_ERROR_CHARS]
        self._end_stage()
        emit({"event": "prepared", "builds": self.builds.builds, "import_error": import_error,
              "stage_ms": self.stage_ms, "software": self.result["software"],
              "flags": self.result["flags"]})

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
        """Seed, get_init_inputs(), seed, Model(...), seed, ModelNew(...): same parameters
        when ModelNew creates them in the same order. Both go to the device in eval mode."""
        dev = self.device
        seed = self.spec["seed"]
        try:
            seed_all(seed, dev)
            init_inputs = to_device(as_call_args(self.get_init_inputs()), dev)
            seed_all(seed, dev)
            ref_model = self.Model(*deep_clone(init_inputs))
            ref_model = ref_model.to(dev).eval()
            self.sync()
        except CAUGHT as e:
            self.reference_failed(e, "reference model failed to build")
        self.ref_model = ref_model

        model_new = getattr(self.cand, "ModelNew", None)
        if model_new is None:
            raise Verdict("INSTANTIATION", "candidate.py defines no `ModelNew`", compiled=False)
        if not callable(model_new):
            raise Verdict("INSTANTIATION", f"`ModelNew` is not callable "
                          f"({type(model_new).__name__})", compiled=False)
        try:
            seed_all(seed, dev)
            cand_model = model_new(*deep_clone(init_inputs))
            if isinstance(cand_model, Trusted.torch.nn.Module):
                cand_model = cand_model.to(dev).eval()
            elif not callable(cand_model):
                raise TypeError(f"ModelNew(...) returned a non-callable "
                                f"{type(cand_model).__name__}")
            self.sync()
        except CAUGHT as e:
            self.fail(e, "INSTANTIATION", compiled=False)
        self.cand_model = cand_model
        # Imported and instantiated; for Triton the kernels still have to compile at the first
        # call (a compile error there turns this back to False).
        self.compiled = True

    def _run_candidate(self, args, context):
        try:
            out = self.cand_model(*args)
            self.sync()
            return out
        except CAUGHT as e:
            self.fail(e, "RUNTIME", context=context)

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

    def correctness(self):
        """num_correct_trials trials with seeds from random.Random(seed); every trial runs even
        after a mismatch, so trials_passed is a real count (partial credit). An exception in
        forward ends the evaluation (RUNTIME etc.): the process state can't be trusted after."""
        spec = self.spec
        rng = random.Random(spec["seed"])
        trial_seeds = [rng.randint(0, 2 ** 32 - 1) for _ in range(spec["num_correct_trials"])]
        stats = DiffStats()
        passed = 0
        failures = []
        for i, trial_seed in enumerate(trial_seeds):
            inputs = self._fresh_inputs(trial_seed, f"get_inputs() failed (trial {i})")
            ref_args, cand_args = deep_clone(inputs), deep_clone(inputs)
            ref_out = self._run_reference(ref_args, f"reference forward failed (trial {i})")
            # ref_out stays alive while the candidate runs: its memory cannot be recycled
            # into a candidate output that "already holds" the answer.
            cand_out = self._run_candidate(cand_args, f"candidate forward raised (trial {i})")
            try:
                problems = compare(ref_out, cand_out, spec["atol"], spec["rtol"], stats)
            except Exception as e:
                problems = [f"output could not be compared: {type(e).__name__}: {e}"]
            if problems:
                failures.append((i, problems))
            else:
                passed += 1
            del ref_out, cand_out, ref_args, cand_args
        self.result["trials_passed"] = passed
        mx, mean = stats.result()
        self.result["max_abs_diff"] = mx
        self.result["mean_abs_diff"] = mean
        if failures:
            first_trial, problems = failures[0]
            lines = [f"{len(failures)} of {len(trial_seeds)} trials failed; "
                     f"first failing trial {first_trial}:"] + problems[:10]
            raise Verdict("CORRECTNESS", "\n".join(lines)[:MAX_ERROR_CHARS], compiled=True)
        self.result["correct"] = True

    def performance(self):
        """Warm-up, then timed calls alternating reference and candidate in blocks, on one
        fixed input set drawn from the master seed (a private clone per model).

        With spec.reference_timing (the worker's cached statistics of this reference, taken
        the same way on the same device and software) the reference is neither warmed up nor
        timed: only the candidate is, and the cached statistics are reported as
        ref_runtime_ms with ref_timing_cached true.

        CUDA: 256 MiB flush buffer zeroed before each call, synchronize, event pair around the
        forward, synchronize. CPU: perf_counter_ns around the call. All with the harness's
        own captured timers."""
        spec = self.spec
        cached_ref = spec["reference_timing"]
        time_reference = cached_ref is None
        inputs = self._fresh_inputs(spec["seed"], "get_inputs() failed (performance)")
        ref_args = deep_clone(inputs) if time_reference else None
        cand_args = deep_clone(inputs)
        ref_times, cand_times = [], []
        timer = self._cuda_timer if self.device == "cuda" else self._cpu_timer
        try:
            if time_reference:
                for _ in range(spec["num_warmup"]):
                    self._run_reference(ref_args, "reference forward failed (warm-up)")
            for _ in range(spec["num_warmup"]):
                self._run_candidate(cand_args, "candidate forward raised (warm-up)")
            n = spec["num_perf_trials"]
            for start in range(0, n, PERF_BLOCK):
                k = min(PERF_BLOCK, n - start)
                for _ in range(k if time_reference else 0):
                    ref_times.append(self._timed(timer, self.ref_model, ref_args, True))
                for _ in range(k):
                    cand_times.append(self._timed(timer, self.cand_model, cand_args, False))
        except Verdict as v:
            if v.code != "REFERENCE":
                self.result["correct"] = False
                v.message = ("after passing all correctness trials, during performance: "
                             + v.message)[:MAX_ERROR_CHARS]
            else:
                # The candidate was judged correct; keep that, only timings are missing.
                v.message = "reference failed during performance: " + v.message
                v.keep_correct = True
            raise
        ref = runtime_stats(ref_times) if time_reference else dict(cached_ref)
        cand = runtime_stats(cand_times)
        self.result["ref_runtime_ms"] = ref
        self.result["ref_timing_cached"] = not time_reference
        self.result["runtime_ms"] = cand
        self.result["speedup"] = ref["median"] / cand["median"] if cand["median"] > 0 else None

    def _timed(self, timer, model, args, is_reference):
        try:
            return timer(model, args)
        except CAUGHT as e:
            if is_reference:
                self.reference_failed(e, "reference forward failed (timed)")
            self.fail(e, "RUNTIME", context="candidate forward raised (timed)")

    @staticmethod
    def _cpu_timer(model, args):
        t0 = _perf_counter_ns()
        model(*args)
        t1 = _perf_counter_ns()
        return (t1 - t0) / 1e6

    def _cuda_timer(self, model, args):
        """One timed call: flush L2, sync, event, forward, event, sync (KernelBench's order)."""
        self.flush_buffer.zero_()
        Trusted.synchronize()
        Trusted.event_record(self.start_event)
        model(*args)
        Trusted.event_record(self.end_event)
        Trusted.synchronize()
        return Trusted.event_elapsed(self.start_event, self.end_event)


def main(taskdir=None):
    """One evaluation of `taskdir` (from argv when run as a script); never returns."""
    if taskdir is None:
        if len(sys.argv) != 2:
            sys.stderr.write("usage: python -I -B harness.py <taskdir>\n")
            _os_exit(3)
        taskdir = sys.argv[1]
    _bind_channel()
    _bind_gate()
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


def _flush_std():
    """The candidate's output is the worker's to capture: flush what Python still buffers."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


if __name__ == "__main__":
    main()
