"""``crucible_client.kernelbench`` without a server: its signature is KernelBench's, its
request carries KernelBench's arguments as ``POST /evaluate`` fields, and each kind of Crucible
result reads back under KernelBench's ``KernelExecResult`` names (docs/MIGRATION-KERNELBENCH.md).
The network is an ``httpx.MockTransport`` answering with a finished task."""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any

import httpx
import pytest

from crucible_client import Client
from crucible_client.kernelbench import KernelExecResult, eval_kernel_against_ref
from crucible_client.types import EvalResult

# Written by hand from KernelBench's src/kernelbench/eval.py (the commit the migration page
# names): every parameter of eval_kernel_against_ref, in order, with its default, and every
# field of KernelExecResult with its default. torch's defaults (``device``: the current CUDA
# device; ``precision``: torch.float32) are the two whose values differ here, by design.
UPSTREAM_PARAMETERS: list[tuple[str, Any]] = [
    ("original_model_src", inspect.Parameter.empty),
    ("custom_model_src", inspect.Parameter.empty),
    ("seed_num", 42),
    ("num_correct_trials", 1),
    ("num_perf_trials", 10),
    ("measure_performance", False),
    ("timing_method", "cuda_event"),
    ("verbose", False),
    ("build_dir", None),
    ("device", "torch.cuda.current_device()"),
    ("backend", "cuda"),
    ("precision", "torch.float32"),
    ("check_for_excessive_speedup", True),
    ("excessive_speedup_threshold", 10),
]
UPSTREAM_RESULT_FIELDS: list[tuple[str, Any]] = [
    ("compiled", False),
    ("correctness", False),
    ("metadata", {}),
    ("runtime", -1.0),
    ("runtime_stats", {}),
    ("ref_runtime", -1.0),
    ("ref_runtime_stats", {}),
]
TORCH_DEFAULTS = {"device": None, "precision": "fp32"}

STATS = {"median": 0.5, "mean": 0.52, "std": 0.01, "min": 0.49, "max": 0.6, "trials": 10}
REF_STATS = {"median": 1.0, "mean": 1.1, "std": 0.02, "min": 0.98, "max": 1.2, "trials": 10}
DEVICE = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "class": "h100"}


def crucible_result(**fields: Any) -> EvalResult:
    base: dict[str, Any] = {
        "compiled": True,
        "correct": True,
        "trials_passed": 1,
        "trials_total": 1,
        "device": DEVICE,
        "verdict": "ok",
        "error_code": None,
        "error_message": None,
    }
    return {**base, **fields}  # type: ignore[return-value]


CORRECT = crucible_result(runtime_ms=STATS, ref_runtime_ms=REF_STATS, speedup=2.2)
INCORRECT = crucible_result(
    correct=False,
    trials_passed=0,
    verdict="incorrect",
    max_abs_diff=0.25,
    mean_abs_diff=0.0312345,
    error_code="CORRECTNESS",
    error_message="output: 10 of 1024 elements differ beyond atol=0.01, rtol=0.01",
)
COMPILE_FAILURE = crucible_result(
    compiled=False,
    correct=False,
    trials_passed=0,
    verdict="error",
    error_code="COMPILATION",
    error_message="nvcc: error: identifier 'foo' is undefined",
)
RUNTIME_ERROR = crucible_result(
    correct=False,
    trials_passed=0,
    verdict="error",
    error_code="CUDA_FAULT",
    error_message="CUDA error: an illegal memory access was encountered",
    output_tail="Traceback (most recent call last): ...",
)


def serve(result: EvalResult | None, status: str = "done", seen: list | None = None):
    """A client whose ``POST /evaluate`` answers with a finished task holding ``result``;
    each request body goes into ``seen``."""

    def handler(request: httpx.Request) -> httpx.Response:
        assert (request.method, request.url.path) == ("POST", "/evaluate")
        if seen is not None:
            seen.append(json.loads(request.content))
        view = {
            "task_id": "t_1",
            "status": status,
            "attempts": 1,
            "priority": "normal",
            "submitted_at": "2026-01-01T00:00:00Z",
            "result": result,
        }
        return httpx.Response(200, json=view)

    return Client("http://crucible.test", transport=httpx.MockTransport(handler))


def evaluate(result: EvalResult | None, status: str = "done", **kwargs: Any):
    seen: list = []
    with serve(result, status, seen) as c:
        got = eval_kernel_against_ref("REF", "NEW", client=c, **kwargs)
    return got, seen[0]


def test_the_arguments_are_kernelbenchs_in_order_with_its_defaults():
    params = list(inspect.signature(eval_kernel_against_ref).parameters.values())
    upstream = params[: len(UPSTREAM_PARAMETERS)]
    assert [p.name for p in upstream] == [name for name, _ in UPSTREAM_PARAMETERS]
    assert all(p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD for p in upstream)
    for p, (name, default) in zip(upstream, UPSTREAM_PARAMETERS):
        assert p.default == TORCH_DEFAULTS.get(name, default), name
    # Crucible's own arguments come after, keyword-only, so no KernelBench call can hit them.
    rest = params[len(UPSTREAM_PARAMETERS) :]
    assert all(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in rest)


def test_the_result_has_kernelbenchs_fields_and_defaults():
    fields = dataclasses.fields(KernelExecResult)
    assert [f.name for f in fields] == [name for name, _ in UPSTREAM_RESULT_FIELDS]
    empty = KernelExecResult()
    assert [(f.name, getattr(empty, f.name)) for f in fields] == UPSTREAM_RESULT_FIELDS
    assert empty.model_dump() == dict(UPSTREAM_RESULT_FIELDS)


def test_the_request_carries_kernelbenchs_settings():
    _, body = evaluate(CORRECT, measure_performance=True, precision="torch.bfloat16")
    assert body["reference_code"] == "REF" and body["kernel_code"] == "NEW"
    expected = {
        "backend": "cuda",
        "num_correct_trials": 1,
        "num_perf_trials": 10,
        "measure_performance": True,
        "seed": 42,
        "timing_method": "cuda_event",
        "precision": "bf16",
        "max_speedup": 10,
    }
    assert {k: body[k] for k in expected} == expected


def test_arguments_the_service_decides_are_accepted_and_ignored():
    class FakeDevice:  # a torch.device's stand-in: never sent, so never serialised
        pass

    got, body = evaluate(
        CORRECT,
        build_dir="/tmp/kb_build",
        device=FakeDevice(),
        verbose=False,
        backend="TRITON",
        check_for_excessive_speedup=False,
        device_class="h100",
    )
    assert got is not None and got.correctness
    assert "build_dir" not in body and "device" not in body and "max_speedup" not in body
    assert (body["backend"], body["device_class"]) == ("triton", "h100")


def test_a_precision_the_service_does_not_run_is_refused_here():
    with pytest.raises(ValueError, match="precision"):
        evaluate(CORRECT, precision="torch.float64")


def test_a_correct_kernel_maps_its_timings():
    got, _ = evaluate(CORRECT, measure_performance=True)
    assert (got.compiled, got.correctness) == (True, True)
    assert (got.runtime, got.ref_runtime) == (0.52, 1.1)
    hardware = {"hardware": DEVICE["name"], "device": "h100"}
    assert got.runtime_stats == {
        "mean": 0.52,
        "std": 0.01,
        "min": 0.49,
        "max": 0.6,
        "num_trials": 10,
        "median": 0.5,
        **hardware,
    }
    assert got.ref_runtime_stats["mean"] == 1.1
    assert got.metadata == {
        **hardware,
        "correctness_trials": "(1 / 1)",
        "crucible": {"task_id": "t_1", "result": CORRECT},
    }


def test_an_incorrect_kernel_reports_its_difference():
    got, _ = evaluate(INCORRECT)
    assert (got.compiled, got.correctness) == (True, False)
    assert (got.runtime, got.runtime_stats) == (-1.0, {})
    md = got.metadata
    assert md["correctness_trials"] == "(0 / 1)"
    assert md["correctness_issue_name"] == "correctness_issue"
    assert md["correctness_issue"] == INCORRECT["error_message"]
    assert (md["max_difference"], md["avg_difference"]) == (["0.250000"], ["0.031234"])


def test_a_compile_failure_is_a_compilation_error():
    got, _ = evaluate(COMPILE_FAILURE)
    assert (got.compiled, got.correctness, got.runtime) == (False, False, -1.0)
    assert got.metadata["compilation_error_name"] == "COMPILATION"
    assert got.metadata["compilation_error"] == COMPILE_FAILURE["error_message"]
    assert "correctness_trials" not in got.metadata


def test_a_runtime_error_is_a_runtime_error():
    got, _ = evaluate(RUNTIME_ERROR)
    assert (got.compiled, got.correctness) == (True, False)
    assert got.metadata["runtime_error_name"] == "CUDA_FAULT"
    assert got.metadata["runtime_error"] == RUNTIME_ERROR["error_message"]
    assert got.metadata["runtime_error_traceback"] == RUNTIME_ERROR["output_tail"]


def test_a_hack_is_not_correct_and_says_why():
    hack = crucible_result(
        correct=False,
        verdict="hack",
        error_code="INTEGRITY",
        error_message="integrity checks failed: stale-output",
        flags=[
            {"rule": "stale-output", "severity": "hack", "detail": "..."},
            {"rule": "implausible-speedup", "severity": "flag", "detail": "82x"},
        ],
    )
    got, _ = evaluate(hack)
    assert got.correctness is False
    assert got.metadata["correctness_issue_name"] == "INTEGRITY"
    assert got.metadata["excessive_speedup"] is True
    off, _ = evaluate(hack, check_for_excessive_speedup=False)
    assert "excessive_speedup" not in off.metadata


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_no_verdict_is_none_as_upstream_returns_for_a_retry(status):
    got, _ = evaluate(None, status=status)
    assert got is None


def test_verbose_prints_the_task_and_its_verdict(capsys):
    evaluate(INCORRECT, verbose=True)
    assert "t_1: incorrect" in capsys.readouterr().out


def test_a_torch_dtype_is_a_precision():
    torch = pytest.importorskip("torch")
    for dtype, wire in [(torch.float32, "fp32"), (torch.half, "fp16"), (torch.bfloat16, "bf16")]:
        _, body = evaluate(CORRECT, precision=dtype)
        assert body["precision"] == wire
