"""The typed spec: spec.json, as the worker writes it, parsed and checked in one place.

Owns: Spec (the dataclass every stage reads), parse_spec() with its defaults and its checks
(each failure a SetupError, exit 3), the checks of the fields the worker may also send later
(reference_timing at the gate), and sandbox_plan(), the one field read before the sandbox is
entered.

May import: trusted, errors.
"""
import dataclasses
import json
import math
import os
import sys
from typing import Optional

from crucible_errors import SetupError
from crucible_trusted import flush_std, os_exit

SCREENING_ACTIONS = ("reject", "flag", "off")
# What a task's stages take from its request: the worker always writes them (spec.rs's
# HarnessSpec), so the request's defaults live in one place, the worker's; a spec without one
# is refused rather than run on a number written twice.
TASK_FIELDS = ("backend", "device", "num_correct_trials", "num_perf_trials", "num_warmup",
               "measure_performance", "atol", "rtol", "seed", "max_speedup", "timing",
               "precision", "timing_method", "reference_backend")
# The worker's own fields, absent when they do not apply.
SPEC_DEFAULTS = {
    "reference_timing": None, "screening": {}, "stage": "evaluate", "cuda_arch": None,
    "prebuilt": [], "integrity_checks": True, "sandbox": None, "selftest": None,
    "triton_precompile": None, "pch_dir": None,
}
# The self-test runs no task: its spec names only the device and backend, and the task's
# numbers are placeholders no stage of it reads.
SELFTEST_PLACEHOLDERS = {
    "num_correct_trials": 1, "num_perf_trials": 1, "num_warmup": 0,
    "measure_performance": False, "atol": 0.0, "rtol": 0.0, "seed": 0, "max_speedup": 1.0,
    "timing": {"mode": "fixed", "target_rel_error": 0.001, "max_time_ms": 1, "min_trials": 1},
    "precision": "fp32", "timing_method": "cuda_event", "reference_backend": "eager",
}
# evaluate: the device stage; prepare: the CPU stage (import and builds, no device);
# selftest: the worker's start-up proof that the sandbox holds on this host.
STAGES = ("evaluate", "prepare", "selftest")
MAX_BUILDS = 16
RUNTIME_STATS_KEYS = ("median", "mean", "std", "min", "max")
# What a timing may also carry (absent in timings cached before they were reported).
RUNTIME_STATS_OPTIONAL = ("trials", "median_ci")
TIMING_MODES = ("fixed", "adaptive")
TIMING_KEYS = ("mode", "target_rel_error", "max_time_ms", "min_trials")
# The measurement options' names (shared/src/parity.rs): what each does is tensors.py's
# (to_precision, timed_call) and judge_performance.py's (do_bench's budget, the compiled
# reference).
PRECISIONS = ("fp32", "fp16", "bf16")
TIMING_METHODS = ("cuda_event", "do_bench", "host_time")
REFERENCE_BACKENDS = ("eager", "compile")


@dataclasses.dataclass
class Spec:
    """spec.json after parse_spec(): every field present (defaults filled in) and checked.
    `sandbox` and `selftest` are the worker's, passed on as they are."""
    backend: str
    device: str
    num_correct_trials: int
    num_perf_trials: int
    num_warmup: int
    measure_performance: bool
    atol: float
    rtol: float
    seed: int
    reference_timing: Optional[dict]
    screening: dict
    stage: str
    cuda_arch: Optional[str]
    prebuilt: list
    max_speedup: float
    timing: dict
    precision: str
    timing_method: str
    reference_backend: str
    integrity_checks: bool
    triton_precompile: Optional[int]
    pch_dir: Optional[str]
    sandbox: Optional[dict]
    selftest: Optional[dict]


def read_spec(taskdir):
    """spec.json from the task directory, parsed."""
    try:
        with open(os.path.join(taskdir, "spec.json"), encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise SetupError(f"cannot read spec.json: {e}")
    if not isinstance(raw, dict):
        raise SetupError("spec.json is not an object")
    return parse_spec(raw)


def parse_spec(raw):
    """The spec object, with SPEC_DEFAULTS for what it leaves out, checked field by field:
    a task's fields are required, a field the harness does not know is refused (a misspelt
    name would otherwise be ignored)."""
    known = set(TASK_FIELDS) | set(SPEC_DEFAULTS)
    unknown = sorted(k for k in raw if k not in known)
    if unknown:
        raise SetupError(f"spec has unknown field(s): {', '.join(map(str, unknown))}")
    spec = dict(SPEC_DEFAULTS, **raw)
    if spec["stage"] == "selftest":
        spec = dict(SELFTEST_PLACEHOLDERS, **spec)
    missing = [k for k in TASK_FIELDS if k not in spec]
    if missing:
        raise SetupError(f"spec lacks field(s): {', '.join(missing)}")
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
    aot = spec["triton_precompile"]
    if aot is not None and (type(aot) is not int or not 1 <= aot <= 3600):
        raise SetupError("spec.triton_precompile must be null or the dry run's seconds (1-3600)")
    spec["reference_timing"] = reference_timing_from_spec(spec["reference_timing"])
    spec["timing"] = timing_from_spec(spec["timing"])
    for key, names in (("precision", PRECISIONS), ("timing_method", TIMING_METHODS),
                       ("reference_backend", REFERENCE_BACKENDS)):
        if spec[key] not in names:
            raise SetupError(f"spec.{key} must be one of {', '.join(names)}")
    # A cross-field rule is the request validation's (EvaluateRequest::validate, in Rust); it
    # is checked again only so that no spec is ever run against it, on the same cases
    # (tests/harness/cross_field_cases.json, read by both sides' tests).
    if spec["timing_method"] == "do_bench" and spec["timing"]["mode"] != "fixed":
        raise SetupError("spec.timing_method do_bench needs fixed timing")
    screening = spec["screening"] if spec["screening"] is not None else {}
    if not isinstance(screening, dict) or any(
            not isinstance(k, str) or v not in SCREENING_ACTIONS
            for k, v in screening.items()):
        raise SetupError("spec.screening must map rule ids to reject/flag/off")
    spec["screening"] = screening
    if spec["stage"] not in STAGES:
        raise SetupError(f"spec.stage must be one of {', '.join(STAGES)}")
    for key in ("cuda_arch", "pch_dir"):
        if spec[key] is not None and not isinstance(spec[key], str):
            raise SetupError(f"spec.{key} must be a string or null")
    spec["prebuilt"] = prebuilt_from_spec(spec["prebuilt"])
    return Spec(**{field.name: spec[field.name] for field in dataclasses.fields(Spec)})


def timing_from_spec(value):
    """spec.timing: {mode: fixed | adaptive, target_rel_error (> 0), max_time_ms (int >= 1),
    min_trials (int >= 1)}, every key present (the request's defaults are the worker's)."""
    if not isinstance(value, dict) or sorted(value) != sorted(TIMING_KEYS):
        raise SetupError("spec.timing must be an object with exactly " + ", ".join(TIMING_KEYS))
    if value["mode"] not in TIMING_MODES:
        raise SetupError(f"spec.timing.mode must be one of {', '.join(TIMING_MODES)}")
    target = value["target_rel_error"]
    if type(target) not in (int, float) or not 0 < target < math.inf:
        raise SetupError("spec.timing.target_rel_error must be a finite number > 0")
    for key in ("max_time_ms", "min_trials"):
        if type(value[key]) is not int or value[key] < 1:
            raise SetupError(f"spec.timing.{key} must be an integer >= 1")
    return dict(value, target_rel_error=float(target))


def reference_timing_from_spec(value):
    """spec.reference_timing: null, or cached reference statistics {median, mean, std, min,
    max} in ms (finite, >= 0, min <= max), returned as floats, with optionally `trials` (an
    integer >= 1) and `median_ci` ([lo, hi], finite, >= 0, lo <= hi)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not set(RUNTIME_STATS_KEYS) <= set(value) or \
            not set(value) <= set(RUNTIME_STATS_KEYS + RUNTIME_STATS_OPTIONAL):
        raise SetupError("spec.reference_timing must be null or an object with exactly "
                         + ", ".join(RUNTIME_STATS_KEYS) + " (and optionally "
                         + ", ".join(RUNTIME_STATS_OPTIONAL) + ")")
    stats = {}
    for key in RUNTIME_STATS_KEYS:
        v = value[key]
        if type(v) not in (int, float) or not 0 <= v < math.inf:
            raise SetupError(f"spec.reference_timing.{key} must be a finite number >= 0")
        stats[key] = float(v)
    if stats["min"] > stats["max"]:
        raise SetupError("spec.reference_timing.min exceeds its max")
    if "trials" in value:
        if type(value["trials"]) is not int or value["trials"] < 1:
            raise SetupError("spec.reference_timing.trials must be an integer >= 1")
        stats["trials"] = value["trials"]
    if "median_ci" in value:
        ci = value["median_ci"]
        if not isinstance(ci, list) or len(ci) != 2 or any(
                type(v) not in (int, float) or not 0 <= v < math.inf for v in ci) or \
                ci[0] > ci[1]:
            raise SetupError("spec.reference_timing.median_ci must be [lo, hi], finite, "
                             ">= 0, lo <= hi")
        stats["median_ci"] = [float(ci[0]), float(ci[1])]
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


def sandbox_plan(taskdir):
    """The worker's sandbox plan from spec.json (null: the worker runs unsandboxed). Read
    before anything else, as the process the worker started; exit 3 if unusable."""
    try:
        with open(os.path.join(taskdir, "spec.json"), encoding="utf-8") as f:
            plan = json.load(f).get("sandbox")
        if plan is not None and not isinstance(plan, dict):
            raise ValueError("unusable sandbox plan (or sandbox.py missing)")
        return plan
    except (OSError, ValueError, AttributeError) as e:
        sys.stderr.write(f"crucible harness: cannot read the sandbox plan: {e}\n")
        flush_std()
        os_exit(3)
