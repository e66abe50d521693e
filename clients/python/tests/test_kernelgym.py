"""KernelGYM's evaluation API (the `/kernelgym` routes) against a live Crucible (conftest.py's
server), called exactly as Dr.Kernel's reward client calls KernelGYM (hkust-nlp/KernelGYM
`drkernel/kernel/rewards/reward_client.py`, `_HybridHttpWorker.submit_and_poll` and
`compute_batch_rewards`' payload): `POST /evaluate` with its payload, then `GET /status/{id}`
until terminal and `GET /results/{id}`; the result fields its reward functions read
(`status`, `compiled`, `correctness`, `decoy_kernel`, `speedup`, `metadata.num_custom_kernels`,
`metadata.num_total_kernels`), its task-id semantics, and the fields Crucible refuses. The
upstream client itself needs ray and verl, so this is the call shape, not its code."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from conftest import Server
from test_adapters import CORRECT, RELU, WRONG

POLL_DEADLINE_S = 300.0


def drkernel_payload(task_id: str, kernel_code: str, **extra) -> dict:
    """The payload of `compute_batch_rewards`, as it builds it."""
    return {
        "task_id": task_id,
        "reference_code": RELU,
        "kernel_code": kernel_code,
        "backend": "triton",
        "num_correct_trials": 2,
        "num_perf_trials": 5,
        "timeout": 300,
        "priority": "normal",
        "entry_point": "Model",
        "is_valid": False,
        "verbose_errors": True,
        "enable_profiling": True,
        "detect_decoy_kernel": True,
        "reference_backend": None,
        **extra,
    }


def submit_and_poll(url: str, payload: dict) -> dict:
    """`_HybridHttpWorker.submit_and_poll`: 200 from /evaluate, /status until terminal, then
    /results for a completed task."""
    with httpx.Client(base_url=url, timeout=120.0) as http:
        answer = http.post("/evaluate", json=payload)
        assert answer.status_code == 200, answer.text
        deadline = time.monotonic() + POLL_DEADLINE_S
        while time.monotonic() < deadline:
            status = http.get(f"/status/{payload['task_id']}")
            assert status.status_code == 200, status.text
            data = status.json()
            if data["status"] in ("completed", "failed", "timeout", "cancelled"):
                if data["status"] == "completed":
                    result = http.get(f"/results/{payload['task_id']}")
                    assert result.status_code == 200, result.text
                    return {**result.json(), "status": "completed"}
                return {"status": data["status"], "error_message": data.get("error_message")}
            time.sleep(0.2)  # the upstream client polls every second; a short poll keeps this fast
    pytest.fail(f"{payload['task_id']} not terminal after {POLL_DEADLINE_S} s")


def new_id() -> str:
    return f"parallel_task_{uuid.uuid4().hex[:8]}"


def test_drkernels_client_flow_scores_a_correct_and_a_wrong_kernel(server: Server):
    url = f"{server.url}/kernelgym"
    right = submit_and_poll(url, drkernel_payload(new_id(), CORRECT))
    assert right["status"] == "completed"
    assert right["compiled"] is True and right["correctness"] is True
    assert right["decoy_kernel"] is False
    assert right["speedup"] > 0 and right["kernel_runtime"] > 0 and right["reference_runtime"] > 0
    assert right["metadata"]["verdict"] == "ok"
    assert right["metadata"]["num_custom_kernels"] >= 1
    assert right["metadata"]["num_total_kernels"] >= right["metadata"]["num_custom_kernels"]
    # The same verdict as the native API gives the task behind it.
    native = httpx.get(f"{server.url}/tasks/{right['metadata']['crucible_task_id']}").json()
    assert native["result"]["speedup"] == right["speedup"]

    wrong = submit_and_poll(url, drkernel_payload(new_id(), WRONG))
    assert wrong["status"] == "completed"
    assert wrong["compiled"] is True and wrong["correctness"] is False
    assert wrong["error_code"] == "CORRECTNESS_ERROR" and wrong["error_message"]


def test_evaluate_answers_the_result_when_it_finishes_in_time(server: Server):
    task_id = new_id()
    answer = httpx.post(f"{server.url}/kernelgym/evaluate",
                        json=drkernel_payload(task_id, CORRECT), timeout=120.0)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["task_id"] == task_id and body["status"] == "completed"
    assert body["submitted_at"] and body["completed_at"] and body["processing_time"] >= 0


def test_a_task_id_names_one_request(server: Server):
    task_id = new_id()
    payload = drkernel_payload(task_id, CORRECT)
    first = httpx.post(f"{server.url}/kernelgym/evaluate", json=payload, timeout=120.0).json()
    again = httpx.post(f"{server.url}/kernelgym/evaluate", json=payload, timeout=120.0).json()
    assert again["metadata"]["crucible_task_id"] == first["metadata"]["crucible_task_id"]
    other = httpx.post(f"{server.url}/kernelgym/evaluate",
                       json=drkernel_payload(task_id, WRONG), timeout=120.0)
    assert other.status_code == 409 and other.json()["code"] == "CONFLICT"
    fresh = httpx.post(f"{server.url}/kernelgym/evaluate",
                       json={**payload, "force_refresh": True}, timeout=120.0).json()
    assert fresh["metadata"]["crucible_task_id"] != first["metadata"]["crucible_task_id"]
    # The name now points at the fresh evaluation.
    results = httpx.get(f"{server.url}/kernelgym/results/{task_id}").json()
    assert results["metadata"]["crucible_task_id"] == fresh["metadata"]["crucible_task_id"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"backend": "tilelang"}, "backend"),
        ({"workflow": "kernel_simple"}, "workflow"),
        ({"num_warmup": 10}, "num_warmup"),
        ({"run_correctness": False}, "run_correctness"),
        ({"entry_point": "Net"}, "entry_point"),
        ({"num_perf_trials": 5000}, "num_perf_trials"),
        ({"reference_code": None}, "reference_code"),
    ],
)
def test_what_crucible_cannot_honour_is_422_naming_the_field(server: Server, extra, field):
    answer = httpx.post(f"{server.url}/kernelgym/evaluate",
                        json=drkernel_payload(new_id(), CORRECT, **extra), timeout=30.0)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == field


def test_unknown_ids_and_fields(server: Server):
    for route in ("status", "results"):
        answer = httpx.get(f"{server.url}/kernelgym/{route}/never-submitted")
        assert answer.status_code == 404 and answer.json()["code"] == "NOT_FOUND"
    unknown = httpx.post(f"{server.url}/kernelgym/evaluate",
                         json=drkernel_payload(new_id(), CORRECT, temperature=1.0))
    assert unknown.status_code == 422 and "temperature" in unknown.json()["message"]
