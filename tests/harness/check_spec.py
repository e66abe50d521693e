"""The harness's spec parsing: a task's fields are required (their defaults are the worker's
alone), a field the harness does not know is refused by name, the self-test's spec needs none
of a task's numbers. Run by scripts/test.sh; exit 1 on the first failure."""
import importlib.util
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")

# Loading the entry point registers every harness module as crucible_<name>.
entry = importlib.util.spec_from_file_location("crucible_harness_entry", HARNESS)
entry.loader.exec_module(importlib.util.module_from_spec(entry))
from crucible_errors import SetupError  # noqa: E402
from crucible_spec import parse_spec  # noqa: E402

TASK = {"backend": "triton", "device": "cpu", "num_correct_trials": 5, "num_perf_trials": 100,
        "num_warmup": 3, "measure_performance": True, "atol": 0.01, "rtol": 0.01, "seed": 42,
        "max_speedup": 10.0, "stage": "prepare",
        "timing": {"mode": "fixed", "target_rel_error": 0.001, "max_time_ms": 2000,
                   "min_trials": 3},
        "precision": "fp32", "timing_method": "cuda_event", "reference_backend": "eager"}


def refused(raw, words):
    try:
        parse_spec(raw)
    except SetupError as e:
        missing = [w for w in words if w not in str(e)]
        assert not missing, f"{raw}: message {e!s} lacks {missing}"
        return
    raise AssertionError(f"{raw} was accepted")


spec = parse_spec(dict(TASK))
assert (spec.num_perf_trials, spec.stage, spec.screening, spec.prebuilt) == (100, "prepare", {}, [])
refused({k: v for k, v in TASK.items() if k != "num_perf_trials"}, ["lacks", "num_perf_trials"])
refused(dict(TASK, num_perf_trial=7), ["unknown", "num_perf_trial"])
# timing: every key required, the mode one of two, the numbers in range.
assert parse_spec(dict(TASK)).timing["mode"] == "fixed"
adaptive = dict(TASK["timing"], mode="adaptive", target_rel_error=1)
assert parse_spec(dict(TASK, timing=adaptive)).timing["target_rel_error"] == 1.0
refused({k: v for k, v in TASK.items() if k != "timing"}, ["lacks", "timing"])
refused(dict(TASK, timing=dict(TASK["timing"], mode="auto")), ["timing.mode"])
refused(dict(TASK, timing=dict(TASK["timing"], target_rel_error=0)), ["target_rel_error"])
refused(dict(TASK, timing=dict(TASK["timing"], min_trials=0)), ["min_trials"])
refused(dict(TASK, timing={"mode": "fixed"}), ["timing", "min_trials"])
# the measurement options: each required, one of its names; do_bench only with fixed timing.
for key, good, bad in (("precision", "bf16", "fp8"), ("timing_method", "host_time", "wall"),
                       ("reference_backend", "compile", "inductor")):
    assert getattr(parse_spec(dict(TASK, **{key: good})), key) == good
    refused(dict(TASK, **{key: bad}), [key])
    refused({k: v for k, v in TASK.items() if k != key}, ["lacks", key])
refused(dict(TASK, timing_method="do_bench", timing=adaptive), ["do_bench", "fixed"])
assert parse_spec(dict(TASK, timing_method="do_bench")).timing_method == "do_bench"
# The cross-field rules, on the cases the Rust validation is tested on too: the rule is
# Rust's (EvaluateRequest::validate); the harness keeps it only so it never runs a spec
# against it, and must agree case for case.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cross_field_cases.json"),
          encoding="utf-8") as f:
    CROSS_FIELD = json.load(f)["cases"]
assert CROSS_FIELD
for case in CROSS_FIELD:
    raw = dict(TASK, timing_method=case["timing_method"],
               timing=dict(TASK["timing"], mode=case["timing_mode"]))
    if case["accepted"]:
        assert parse_spec(raw).timing_method == case["timing_method"], case
    else:
        refused(raw, [case["timing_method"]])
# reference_timing: the five figures, optionally the trial count and the median's interval.
FIVE = {"median": 1.0, "mean": 1.1, "std": 0.1, "min": 0.9, "max": 1.5}
assert parse_spec(dict(TASK, reference_timing=FIVE)).reference_timing == FIVE
full = dict(FIVE, trials=7, median_ci=[0.95, 1.2])
assert parse_spec(dict(TASK, reference_timing=full)).reference_timing == full
refused(dict(TASK, reference_timing=dict(FIVE, trials=0)), ["trials"])
refused(dict(TASK, reference_timing=dict(FIVE, median_ci=[2, 1])), ["median_ci"])
refused(dict(TASK, reference_timing=dict(FIVE, p99=3)), ["reference_timing"])
assert parse_spec(dict(TASK, triton_precompile=30)).triton_precompile == 30
assert parse_spec(dict(TASK)).triton_precompile is None
refused(dict(TASK, triton_precompile=True), ["triton_precompile"])
selftest = parse_spec({"stage": "selftest", "device": "cpu", "backend": "triton",
                       "selftest": {"tcp": ["127.0.0.1", 1]}})
assert selftest.stage == "selftest"
print("spec: 20 checks passed")
