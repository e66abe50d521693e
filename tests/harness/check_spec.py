"""The harness's spec parsing: a task's fields are required (their defaults are the worker's
alone), a field the harness does not know is refused by name, the self-test's spec needs none
of a task's numbers. Run by scripts/test.sh; exit 1 on the first failure."""
import importlib.util
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
        "max_speedup": 10.0, "stage": "prepare"}


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
assert parse_spec(dict(TASK, triton_precompile=30)).triton_precompile == 30
assert parse_spec(dict(TASK)).triton_precompile is None
refused(dict(TASK, triton_precompile=True), ["triton_precompile"])
selftest = parse_spec({"stage": "selftest", "device": "cpu", "backend": "triton",
                       "selftest": {"tcp": ["127.0.0.1", 1]}})
assert selftest.stage == "selftest"
print("spec: 7 checks passed")
