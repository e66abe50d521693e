"""Cancelling through the client against a live Crucible (conftest.py's server, one CPU
worker): a rollout batch whose first kernel sleeps in its forward is cancelled while that kernel
runs (its queued rollout never runs, both read back ``cancelled`` without a reward), a queued
task is cancelled with the async client, a finished one cannot be, and VERL's reward function
cancels the batch it stops waiting for."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from conftest import REPO, Server

from crucible_client import AsyncClient, Client, CrucibleError, compute_scores, make_rollout
from crucible_client.types import CancelResponse, EvalSettings

RELU = (REPO / "tests" / "problems" / "elementwise_relu.py").read_text()
SLEEPS = (REPO / "tests" / "candidates" / "elementwise_relu__sleeps.py").read_text()
CORRECT = (REPO / "tests" / "candidates" / "elementwise_relu__correct.py").read_text()
#: Long enough that only a cancel ends the sleeping kernel within the test.
SLEEPER_EVAL: EvalSettings = {"num_correct_trials": 1, "num_perf_trials": 1, "timeout_s": 900}
#: A cancelled running child is killed at its worker's next lease renewal (a third of the 30 s
#: lease), then the worker takes its next task.
DEADLINE_S = 180.0


def tagged(code: str) -> str:
    return f"<KERNEL>\n```python\n{code}```\n"


def wait_for(what: str, check, timeout: float = DEADLINE_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def running_task(client: Client, batch_id: str) -> str | None:
    view = client.batch(batch_id, include_tasks=True)
    running = [t["task_id"] for t in view.get("tasks") or [] if t["status"] == "running"]
    return running[0] if running else None


def idle(client: Client) -> bool:
    queue = client.queue_status()
    queued = queue["queued_high"] + queue["queued_normal"] + queue["queued_low"]
    return queue["running"] == 0 and queued == 0


def assert_worker_freed(client: Client) -> None:
    """The one worker evaluates a new kernel within DEADLINE_S: the sleeping one, with 900 s
    of deadline, was killed (the broker forgets a cancelled task at once, the worker's child
    goes at its next renewal)."""
    view = client.evaluate(
        RELU,
        kernel_code=CORRECT,
        force_refresh=True,
        timeout=DEADLINE_S,
        num_correct_trials=1,
        measure_performance=False,
    )
    result = view.get("result")
    assert view["status"] == "done" and result and result["correct"], view


def test_a_rollout_batch_is_cancelled_while_its_kernel_runs(server: Server):
    rollouts = [
        make_rollout("sleeps", tagged(SLEEPS), reference_code=RELU),
        make_rollout("correct", tagged(CORRECT), reference_code=RELU),
    ]
    with Client(server.url) as client:
        wait_for("the worker to be free", lambda: idle(client))
        settings: EvalSettings = {**SLEEPER_EVAL, "priority": "high"}
        submission = client.submit_rollouts(rollouts, settings)
        [batch_id] = submission.batch_ids
        sleeper = wait_for("the sleeping kernel to run", lambda: running_task(client, batch_id))

        async def queue_and_cancel_one() -> CancelResponse:
            # Behind the sleeper (one worker, one task at a time): still queued.
            async with AsyncClient(server.url) as aclient:
                queued = await aclient.submit(RELU, kernel_code=CORRECT, seed=7, priority="low")
                assert queued["status"] == "queued", queued
                return await aclient.cancel_task(queued["task_id"])

        cancelled = asyncio.run(queue_and_cancel_one())
        assert (cancelled["status"], cancelled["was"]) == ("cancelled", "queued")

        counts = client.cancel_batch(batch_id)
        assert counts == {
            "batch_id": batch_id,
            "cancelled_queued": 1,
            "cancelled_running": 1,
            "already_finished": 0,
        }
        results = client.wait_results(submission, timeout=60)
        for id in ("sleeps", "correct"):
            assert results[id]["status"] == "cancelled", results[id]
            assert results[id]["reward"] is None
            assert batch_id in (results[id].get("error") or ""), results[id]
        with pytest.raises(CrucibleError) as e:
            client.cancel_task(sleeper)
        assert (e.value.status, e.value.code) == (409, "CONFLICT")
        assert client.cancel_batch(batch_id)["already_finished"] == 2
        assert_worker_freed(client)


def test_verl_cancels_the_batch_it_stops_waiting_for(server: Server):
    with Client(server.url) as client:
        wait_for("the worker to be free", lambda: idle(client))
        before = client.queue_status()["cancelled_total"]
        [score] = compute_scores(
            ["kernelbench"],
            [tagged(SLEEPS)],
            [RELU],
            client=client,
            eval=SLEEPER_EVAL,
            timeout=3.0,
            on_failure="nan",
        )
        assert isinstance(score, dict)
        assert math.isnan(score["score"]) and score["evaluated"] == 0.0
        assert client.queue_status()["cancelled_total"] == before + 1
        assert_worker_freed(client)
