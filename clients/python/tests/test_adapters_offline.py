"""The trainer adapters and the cancel calls without a server (``httpx.MockTransport``): what
VERL's and TRL's reward functions return, ``on_failure`` for rollouts without a verdict and for
a service that does not answer, the cancel of a batch whose wait timed out, and the requests
the cancel methods send. What a live server makes of them is test_adapters.py's."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx
import pytest

from crucible_client import (
    AsyncClient,
    Client,
    CrucibleError,
    KernelEnv,
    NotEvaluated,
    RetryPolicy,
    compute_score,
    compute_score_async,
    compute_scores,
    compute_scores_async,
    make_async_trl_reward,
    make_trl_reward,
    problem_target,
)
from crucible_client.tinker_env import without_thinking
from crucible_client.trl_reward import batch_metrics, log_to_trl

FAST = RetryPolicy(max_attempts=3, base_delay_s=0.001, max_delay_s=0.01, deadline_s=5.0)
Handler = Callable[[httpx.Request], httpx.Response]


class Server:
    """A fake Crucible: each batch's rollouts scored at once with ``reward`` (None: the
    service produced no verdict, ``failed``), or never finished (``finish`` false); every
    request it saw, in ``seen``."""

    def __init__(self, reward: float | None = 1.35, finish: bool = True) -> None:
        self.reward, self.finish = reward, finish
        self.batches: dict[str, list[dict[str, Any]]] = {}
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.posted: list[dict[str, Any]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.seen.append((request.method, path, dict(request.url.params)))
        if request.method == "POST":
            body = json.loads(request.content)
            self.posted.append(body)
            batch_id = f"b{len(self.batches)}"
            self.batches[batch_id] = body["rollouts"]
            n = len(body["rollouts"])
            return httpx.Response(202, json={"batch_id": batch_id, "rollouts": n, "evaluated": n})
        batch_id = path.split("/")[2]
        if request.method == "DELETE":
            n = len(self.batches[batch_id])
            return httpx.Response(
                200,
                json={
                    "batch_id": batch_id,
                    "cancelled_queued": n,
                    "cancelled_running": 0,
                    "already_finished": 0,
                },
            )
        if not self.finish:
            return httpx.Response(
                200,
                json={"batch_id": batch_id, "results": [], "cursor": 0, "done": False, "total": 1},
            )
        results = [self.result(r) for r in self.batches[batch_id]]
        return httpx.Response(
            200,
            json={
                "batch_id": batch_id,
                "results": results,
                "cursor": 1,
                "done": True,
                "total": len(results),
            },
        )

    def result(self, rollout: dict[str, Any]) -> dict[str, Any]:
        scored = self.reward is not None
        return {
            "id": rollout["id"],
            "task_id": "t_1",
            "status": "done" if scored else "failed",
            "turn": rollout.get("turn", 0),
            "problem_hash": "sha256:0",
            "profile": rollout.get("profile", "kernel_rl"),
            "reward": self.reward,
            "components": None,
            "format_ok": True,
            "result": {"verdict": "ok", "compiled": True, "speedup": 2.0} if scored else None,
            "feedback": "correct and 2.00x faster",
            **({} if scored else {"error": "lease expired on attempt 3 of 3"}),
        }

    def cancelled(self) -> list[str]:
        return [path.split("/")[2] for method, path, _ in self.seen if method == "DELETE"]


def unavailable(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, json={"code": "BROKER_UNAVAILABLE", "message": "redis is down"})


def refused(request: httpx.Request) -> httpx.Response:
    return httpx.Response(
        422, json={"code": "VALIDATION", "message": "unknown problem", "field": "rollouts[0]"}
    )


def sync(handler: Handler) -> Client:
    return Client("http://crucible.test", retry=FAST, transport=httpx.MockTransport(handler))


def aio(handler: Handler) -> AsyncClient:
    return AsyncClient("http://crucible.test", retry=FAST, transport=httpx.MockTransport(handler))


DETAILS = {
    "score": 1.35,
    "evaluated": 1.0,
    "format_ok": 1.0,
    "compiled": 1.0,
    "correct": 1.0,
    "speedup": 2.0,
}


class Config(Mapping[str, Any]):
    """Stands in for VERL's DictConfig: a mapping JSON cannot encode as it is."""

    def __init__(self, **items: Any) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def test_ground_truth_names_a_registry_problem_or_a_source():
    assert problem_target({"level": 1, "id": 19}) == {"problem": {"level": 1, "id": 19}}
    assert problem_target('{"level": 2, "id": "3"}') == {"problem": {"level": 2, "id": 3}}
    assert problem_target("import torch\n") == {"reference_code": "import torch\n"}
    assert problem_target({"reference_code": "x"}) == {"reference_code": "x"}
    with pytest.raises(ValueError):
        problem_target({"name": "ReLU"})


def test_verl_scores_come_with_numeric_details_and_ignore_verls_extras():
    server = Server()
    with sync(server) as c:
        got = compute_score("kb", "<KERNEL>...", {"level": 1, "id": 19}, {}, client=c)
        assert got == DETAILS
        assert compute_score("kb", "x", "src", client=c, details=False) == 1.35
        # The batch manager's call, with what VERL's reward loop adds and a config object.
        scores = compute_scores(
            data_sources=["kb", "kb"],
            solution_strs=["a", "b"],
            ground_truths=["src", '{"level": 1, "id": 2}'],
            extra_infos=[{}, {}],
            client=c,
            eval=Config(num_correct_trials=2, timing=Config(mode="adaptive")),
            reward_router_address="127.0.0.1:1",
        )
    assert scores == [DETAILS, DETAILS]
    body = server.posted[-1]
    assert body["eval"] == {"num_correct_trials": 2, "timing": {"mode": "adaptive"}}
    assert [r.get("problem") for r in body["rollouts"]] == [None, {"level": 1, "id": 2}]


def test_verl_async_forms_score_the_same():
    async def main() -> tuple[Any, Any]:
        async with aio(Server()) as c:
            one = await compute_score_async(
                data_source="kb",
                solution_str="x",
                ground_truth="src",
                extra_info=None,
                client=c,
                reward_model_tokenizer=None,
            )
            many = await compute_scores_async(["kb"] * 3, ["x", "y", "z"], ["src"] * 3, client=c)
            return one, many

    one, many = asyncio.run(main())
    assert one == DETAILS and many == [DETAILS] * 3


def test_verl_async_scores_at_most_max_concurrency_at_once(monkeypatch: pytest.MonkeyPatch):
    import crucible_client.verl_reward as verl

    in_flight, most = 0, 0

    async def scores(*args: Any, **kwargs: Any) -> list[float]:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return [1.0]

    monkeypatch.setattr(verl, "compute_scores_async", scores)

    async def step(bound: int) -> list[Any]:
        return await asyncio.gather(*[
            verl.compute_score_async("d", "x", "src", max_concurrency=bound) for _ in range(20)])

    assert asyncio.run(step(3)) == [1.0] * 20 and most == 3
    most = 0
    assert asyncio.run(step(verl.DEFAULT_MAX_CONCURRENCY)) == [1.0] * 20 and most == 20
    with pytest.raises(ValueError, match="max_concurrency"):
        asyncio.run(verl.compute_score_async("d", "x", "src", max_concurrency=0))


def test_a_rollout_without_a_verdict_raises_or_scores_nan_or_zero():
    with sync(Server(reward=None)) as c:
        with pytest.raises(NotEvaluated) as e:
            compute_scores(["kb"] * 2, ["x", "y"], ["src"] * 2, client=c)
        assert e.value.rollouts == {
            "0": "lease expired on attempt 3 of 3",
            "1": "lease expired on attempt 3 of 3",
        }
        [nan] = compute_scores(["kb"], ["x"], ["src"], client=c, on_failure="nan")
        assert math.isnan(nan["score"]) and nan["evaluated"] == 0.0 and nan["correct"] == 0.0
        assert compute_score("kb", "x", "src", client=c, on_failure="zero", details=False) == 0.0


def test_a_service_that_does_not_answer_is_a_failure_a_refusal_is_a_bug():
    with sync(unavailable) as c:
        with pytest.raises(CrucibleError) as e:
            compute_scores(["kb"], ["x"], ["src"], client=c)
        assert e.value.status == 503 and e.value.attempts == FAST.max_attempts
        got = compute_scores(["kb"] * 2, ["x", "y"], ["src"] * 2, client=c, on_failure="zero")
        assert [g["score"] for g in got] == [0.0, 0.0]
        assert all(g["evaluated"] == 0.0 for g in got)
    with sync(refused) as c, pytest.raises(CrucibleError) as e:
        compute_scores(["kb"], ["x"], ["src"], client=c, on_failure="zero")
    assert e.value.status == 422


def test_a_wait_that_times_out_cancels_the_batch():
    server = Server(finish=False)
    with sync(server) as c:
        with pytest.raises(TimeoutError):
            compute_scores(["kb"], ["x"], ["src"], client=c, timeout=0.2)
        assert server.cancelled() == ["b0"]
        got = compute_scores(["kb"], ["x"], ["src"], client=c, timeout=0.2, on_failure="nan")
        assert math.isnan(got[0]["score"])
        assert server.cancelled() == ["b0", "b1"]

    async def main() -> None:
        async with aio(server) as c:
            with pytest.raises(TimeoutError):
                await compute_scores_async(["kb"], ["x"], ["src"], client=c, timeout=0.2)

    asyncio.run(main())
    assert server.cancelled() == ["b0", "b1", "b2"]


def test_on_failure_is_checked_before_anything_is_sent():
    server = Server()
    with sync(server) as c:
        with pytest.raises(ValueError, match="on_failure"):
            compute_scores(["kb"], ["x"], ["src"], client=c, on_failure="none")
        with pytest.raises(ValueError, match="on_failure"):
            make_trl_reward(client=c, on_failure="skip")
        with pytest.raises(ValueError, match="max_turns"):
            KernelEnv(reference_code="src", client=None, max_turns=0)
        with pytest.raises(ValueError, match="exactly one"):
            KernelEnv((1, 2), reference_code="src")
    assert server.seen == []


def test_trl_rewards_read_the_column_and_give_none_without_a_verdict():
    conversational = [
        [{"role": "assistant", "content": "x"}],
        [{"role": "assistant", "content": "y"}],
    ]
    with sync(Server()) as c:
        trl = make_trl_reward(client=c, profile="kevin")
        assert trl.__name__ == "crucible_kevin"
        assert trl(["p", "p"], conversational, ground_truth=["src", "src"]) == [1.35, 1.35]
        with pytest.raises(KeyError, match="ground_truth"):
            trl(["p"], ["x"], answer=["src"])
    with sync(Server(reward=None)) as c:
        assert make_trl_reward(client=c)(["p"], ["x"], ground_truth=["src"]) == [None]
        with pytest.raises(NotEvaluated):
            make_trl_reward(client=c, on_failure="raise")(["p"], ["x"], ground_truth=["src"])
    with sync(unavailable) as c:
        assert make_trl_reward(client=c, on_failure="zero")(["p"], ["x"], ground_truth=["s"]) == [
            0.0
        ]

    async def main() -> list[float | None]:
        async with aio(Server()) as c:
            reward = make_async_trl_reward(client=c, ground_truth_column="problem")
            assert asyncio.iscoroutinefunction(reward)
            # As TRL calls it: keywords, with TRL's extras beside the dataset's columns.
            return await reward(
                prompts=["p"],
                completions=["x"],
                completion_ids=[[1]],
                problem=["src"],
                trainer_state=None,
            )

    assert asyncio.run(main()) == [1.35]


def test_trl_batch_metrics_average_outcomes_and_speedup_over_the_correct():
    def rollout(verdict, speedup=None, compiled=True):
        return {"reward": 1.0, "format_ok": True, "status": "done",
                "result": {"verdict": verdict, "compiled": compiled, "speedup": speedup}}

    results = [rollout("ok", 2.0), rollout("ok", 4.0), rollout("incorrect"), None]
    assert batch_metrics(results) == {
        "crucible/evaluated": 0.75, "crucible/format_ok": 0.75, "crucible/compiled": 0.75,
        "crucible/correct": 0.5, "crucible/speedup": 3.0}
    assert batch_metrics([rollout("incorrect")])["crucible/speedup"] == 0.0
    assert batch_metrics([]) == {}
    logged: dict[str, Any] = {}
    log_to_trl(results, {"log_metric": lambda n, v: logged.setdefault(n, v),
                         "log_extra": lambda c, vs: logged.setdefault(c, vs)})
    assert logged["crucible/correct"] == 0.5
    assert logged["crucible_verdict"] == ["ok", "ok", "incorrect", "failed"]
    assert logged["crucible_speedup"] == [2.0, 4.0, None, None]
    log_to_trl(results, {"trainer_state": None})  # an older TRL passes no loggers


def test_thinking_sections_are_dropped_from_the_next_prompt():
    text = "<think>draft\nmore</think>\n<KERNEL>\n```python\nA\n```\n<thinking>x</thinking>tail"
    assert without_thinking(text) == "<KERNEL>\n```python\nA\n```\ntail"


def test_the_cancel_calls_send_what_the_api_takes():
    seen: list[tuple[str, str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, request.url.query.decode()))
        if request.url.path.startswith("/tasks/"):
            return httpx.Response(
                409, json={"code": "CONFLICT", "message": "task t_1 already finished as done"}
            )
        return httpx.Response(200, json={"batch_id": "b_1"})

    with sync(handler) as c:
        assert c.cancel_batch("b_1") == {"batch_id": "b_1"}
        assert c.batch("b_1")["batch_id"] == "b_1"
        assert c.batch("b_1", include_tasks=True)["batch_id"] == "b_1"
        with pytest.raises(CrucibleError) as e:
            c.cancel_task("t_1")
    assert (e.value.status, e.value.code, e.value.attempts) == (409, "CONFLICT", 1)
    assert seen == [
        ("DELETE", "/batches/b_1", ""),
        ("GET", "/batches/b_1", ""),
        ("GET", "/batches/b_1", "include=tasks"),
        ("DELETE", "/tasks/t_1", ""),
    ]
