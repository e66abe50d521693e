"""Tests that need no server: the returns helpers, request building, batching, the cursor
walk of result streams and the retry policy, the network replaced by ``httpx.MockTransport``.
What the server does with the requests is for test_client.py, against the real one."""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import Callable

import httpx
import pytest

from crucible_client import (
    AsyncClient,
    Client,
    CrucibleError,
    RetryPolicy,
    TaskTimeout,
    discounted_returns,
    make_rollout,
    stops_early,
)

FAST = RetryPolicy(max_attempts=4, base_delay_s=0.001, max_delay_s=0.01, deadline_s=5.0)
Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler, retry: RetryPolicy = FAST) -> Client:
    return Client("http://crucible.test", retry=retry, transport=httpx.MockTransport(handler))


def async_client(handler: Handler, retry: RetryPolicy = FAST) -> AsyncClient:
    return AsyncClient("http://crucible.test", retry=retry, transport=httpx.MockTransport(handler))


def error(status: int, code: str, message: str, field: str | None = None) -> httpx.Response:
    return httpx.Response(status, json={"code": code, "message": message, "field": field})


def accepted(request: httpx.Request) -> httpx.Response:
    body = json.loads(request.content)
    n = len(body["rollouts"])
    return httpx.Response(
        202,
        json={"batch_id": f"b_{body['idempotency_key']}", "rollouts": n, "evaluated": n},
    )


# --- returns ---------------------------------------------------------------------------


def test_discounted_returns_run_backwards_from_the_last_turn():
    assert discounted_returns([1, 0, 2], gamma=0.5) == [1.5, 1.0, 2.0]
    got = discounted_returns([0.1, 0.3, 1.3])  # γ 0.4, the recipes' default
    want = [0.1 + 0.4 * (0.3 + 0.4 * 1.3), 0.3 + 0.4 * 1.3, 1.3]
    assert got == pytest.approx(want)
    assert discounted_returns([]) == []


def test_only_a_correct_kernel_fast_enough_ends_a_trajectory():
    ok = {"verdict": "ok", "speedup": 1.2}
    assert stops_early(ok)
    assert stops_early(ok, min_speedup=1.0)
    assert not stops_early(ok, min_speedup=1.5)
    assert not stops_early({"verdict": "ok", "speedup": None}, min_speedup=1.0)
    for verdict in ["incorrect", "decoy", "hack", "error"]:
        assert not stops_early({"verdict": verdict, "speedup": 5.0})
    # A rollout result as stream_results yields it, with or without an evaluation.
    assert stops_early({"id": "a", "status": "done", "result": ok}, min_speedup=1.1)
    assert not stops_early({"id": "a", "status": "no_kernel", "result": None})
    assert not stops_early(None)


# --- building requests -----------------------------------------------------------------


def test_a_rollout_names_exactly_one_problem():
    r = make_rollout("a", "text", problem={"level": 1, "id": 19, "name": "ReLU"}, turn=2)
    assert r == {
        "id": "a",
        "completion": "text",
        "backend": "triton",
        "turn": 2,
        "profile": "kernel_rl",
        "problem": {"level": 1, "id": 19},
    }
    assert make_rollout("b", "t", reference_code="src", profile="kevin")["reference_code"] == "src"
    with pytest.raises(ValueError):
        make_rollout("c", "t")
    with pytest.raises(ValueError):
        make_rollout("c", "t", problem=(1, 1), reference_code="src")


def test_long_submissions_split_into_batches_of_a_thousand_each_with_its_own_key():
    bodies = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return accepted(request)

    rollouts = [make_rollout(f"r{i}", "x", problem=(1, 1)) for i in range(2500)]
    with client(handler) as c:
        sub = c.submit_rollouts(rollouts, eval={"num_correct_trials": 2}, idempotency_key="k")
    assert [len(b["rollouts"]) for b in bodies] == [1000, 1000, 500]
    assert [b["idempotency_key"] for b in bodies] == ["k#0", "k#1", "k#2"]
    assert all(b["eval"] == {"num_correct_trials": 2} for b in bodies)
    assert sub.batch_ids == ("b_k#0", "b_k#1", "b_k#2")
    assert (sub.rollouts, sub.evaluated, sub.idempotency_key) == (2500, 2500, "k")


def test_a_single_batch_carries_the_callers_key_or_a_fresh_one():
    keys = []

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(json.loads(request.content)["idempotency_key"])
        return accepted(request)

    one = [make_rollout("a", "x", problem=(1, 1))]
    with client(handler) as c:
        assert c.submit_rollouts(one, idempotency_key="mine").batch_ids == ("b_mine",)
        c.submit_rollouts(one)
        c.submit_rollouts(one)
    assert keys[0] == "mine" and len(set(keys)) == 3


def test_rollout_ids_must_be_unique_across_the_whole_submission():
    rollouts = [make_rollout(f"r{i % 1001}", "x", problem=(1, 1)) for i in range(1002)]
    with client(accepted) as c:
        with pytest.raises(ValueError, match="r0"):
            c.submit_rollouts(rollouts)
        with pytest.raises(ValueError):
            c.submit_rollouts([])


# --- reading results -------------------------------------------------------------------


class Batches:
    """Serves ``GET /batches/{id}/results`` from fixed lists, two results a page, and
    records every ``after`` it was asked for."""

    def __init__(self, results: dict[str, list[str]]) -> None:
        self.results = results
        self.asked: list[tuple[str, int, float]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        batch_id = request.url.path.split("/")[2]
        if batch_id not in self.results:
            return error(404, "NOT_FOUND", f"no batch {batch_id}")
        after = int(request.url.params["after"])
        self.asked.append((batch_id, after, float(request.url.params["wait"])))
        ids = self.results[batch_id]
        page = ids[after : after + 2]
        return httpx.Response(
            200,
            json={
                "batch_id": batch_id,
                "results": [{"id": i, "reward": 1.0} for i in page],
                "cursor": after + len(page),
                "done": after + len(page) == len(ids),
                "total": len(ids),
            },
        )


def test_a_stream_follows_the_cursor_of_every_batch_until_each_is_done():
    server = Batches({"b1": ["a", "b", "c"], "b2": ["d"]})
    with client(server) as c:
        got = [r["id"] for r in c.stream_results(["b1", "b2"], wait=5)]
    assert sorted(got) == ["a", "b", "c", "d"]
    assert [(b, after) for b, after, _ in server.asked] == [("b1", 0), ("b2", 0), ("b1", 2)]
    # With two batches open neither may hold up the other for the whole wait.
    assert all(w <= 1.0 for b, _, w in server.asked[:2])
    assert server.asked[-1][2] == 5.0


def test_the_async_stream_reads_every_batch_to_its_end():
    server = Batches({"b1": ["a", "b", "c"], "b2": ["d", "e"]})

    async def main() -> dict:
        async with async_client(server) as c:
            return await c.wait_results(["b1", "b2"], wait=5)

    assert sorted(asyncio.run(main())) == ["a", "b", "c", "d", "e"]
    assert sorted((b, a) for b, a, _ in server.asked) == [("b1", 0), ("b1", 2), ("b2", 0)]


def test_an_unknown_batch_is_an_error_not_an_empty_stream():
    with client(Batches({})) as c, pytest.raises(CrucibleError) as e:
        list(c.stream_results("b_nope"))
    assert (e.value.status, e.value.code) == (404, "NOT_FOUND")


def test_evaluate_polls_the_task_until_it_finishes():
    answers = iter(
        [
            httpx.Response(202, json={"task_id": "t1", "status": "queued"}),
            httpx.Response(200, json={"task_id": "t1", "status": "running", "result": None}),
            httpx.Response(
                200, json={"task_id": "t1", "status": "done", "result": {"verdict": "ok"}}
            ),
        ]
    )
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.path, request.url.params.get("wait")))
        if request.method == "POST":
            body = json.loads(request.content)
            assert body["reference_code"] == "ref" and body["num_perf_trials"] == 5
            assert body["idempotency_key"]
        return next(answers)

    with client(handler) as c:
        view = c.evaluate("ref", kernel_code="ker", num_perf_trials=5, wait=20)
    assert view["result"] == {"verdict": "ok"}
    assert seen == [
        ("POST", "/evaluate", "20"),
        ("GET", "/tasks/t1", "20"),
        ("GET", "/tasks/t1", "20"),
    ]


def test_evaluate_passes_timing_and_leaves_it_out_by_default():
    bodies = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={"task_id": "t1", "status": "done", "result": {}})

    with client(handler) as c:
        c.evaluate("ref", kernel_code="ker")
        c.evaluate("ref", kernel_code="ker", timing="adaptive")
        c.evaluate(
            "ref",
            kernel_code="ker",
            timing={"mode": "adaptive", "target_rel_error": 0.01, "max_time_ms": 500},
        )

    async def main() -> None:
        async with async_client(handler) as c:
            await c.evaluate("ref", kernel_code="ker", timing="adaptive")

    asyncio.run(main())
    assert "timing" not in bodies[0]
    assert bodies[1]["timing"] == {"mode": "adaptive"}
    assert bodies[2]["timing"] == {"mode": "adaptive", "target_rel_error": 0.01, "max_time_ms": 500}
    assert bodies[3]["timing"] == {"mode": "adaptive"}


def test_evaluate_gives_up_at_its_timeout_naming_the_task():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(202, json={"task_id": "t1", "status": "queued"})

    with client(handler) as c, pytest.raises(TaskTimeout, match="t1") as sync:
        c.evaluate("ref", kernel_code="ker", wait=0, timeout=0.05)

    async def main() -> None:
        async with async_client(handler) as c:
            await c.evaluate("ref", kernel_code="ker", wait=0, timeout=0.05)

    with pytest.raises(TaskTimeout) as aio:
        asyncio.run(main())
    for raised in (sync.value, aio.value):
        # The task goes on on the server: the id is there to read or cancel it by.
        assert raised.task_id == "t1"
        assert isinstance(raised, TimeoutError)
        again = pickle.loads(pickle.dumps(raised))
        assert (type(again), again.task_id, str(again)) == (TaskTimeout, "t1", str(raised))


def test_a_spent_timeout_still_submits_so_the_timeout_names_a_task():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, request.url.params.get("wait")))
        return httpx.Response(202, json={"task_id": "t2", "status": "queued"})

    with client(handler) as c, pytest.raises(TaskTimeout) as raised:
        c.evaluate("ref", kernel_code="ker", wait=30, timeout=0)
    assert raised.value.task_id == "t2"
    assert seen == [("POST", "0.0")]


# --- retries ---------------------------------------------------------------------------


def test_a_full_queue_is_retried_with_the_same_idempotency_key():
    keys = []

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(json.loads(request.content)["idempotency_key"])
        if len(keys) < 3:
            return error(429, "QUEUE_FULL", "the queue is full")
        return accepted(request)

    with client(handler) as c:
        sub = c.submit_rollouts([make_rollout("a", "x", problem=(1, 1))])
    assert len(keys) == 3 and len(set(keys)) == 1
    assert sub.batch_ids == (f"b_{keys[0]}",)


def test_lost_connections_are_retried_too():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"status": "ok"})

    with client(handler) as c:
        assert c.health() == {"status": "ok"}
    assert len(calls) == 2


def test_the_token_is_a_bearer_header_from_the_argument_or_the_environment(monkeypatch):
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"status": "ok"})

    def health(**kwargs) -> None:
        with Client("http://crucible.test", transport=httpx.MockTransport(handler), **kwargs) as c:
            c.health()

    monkeypatch.delenv("CRUCIBLE_TOKEN", raising=False)
    health()
    monkeypatch.setenv("CRUCIBLE_TOKEN", "crt_env")
    health()
    health(token="crt_arg")
    health(token="")  # explicitly none, whatever the environment says
    health(token="crt_arg", headers={"x-trace": "1"})

    async def go() -> None:
        transport = httpx.MockTransport(handler)
        async with AsyncClient("http://crucible.test", token="crt_async", transport=transport) as c:
            await c.health()

    asyncio.run(go())
    assert seen == [
        None,
        "Bearer crt_env",
        "Bearer crt_arg",
        None,
        "Bearer crt_arg",
        "Bearer crt_async",
    ]


def test_a_bad_request_is_raised_at_once():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return error(422, "VALIDATION", "must be 1-256 bytes", "rollouts[0].id")

    with client(handler) as c, pytest.raises(CrucibleError) as e:
        c.submit_rollouts([make_rollout("a", "x", problem=(1, 1))])
    assert len(calls) == 1
    assert (e.value.status, e.value.code, e.value.field) == (422, "VALIDATION", "rollouts[0].id")
    assert "rollouts[0].id" in str(e.value)


def test_retries_stop_after_max_attempts_with_the_last_error():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return error(503, "BROKER_UNAVAILABLE", "broker down")

    with client(handler) as c, pytest.raises(CrucibleError) as e:
        c.queue_status()
    assert len(calls) == FAST.max_attempts
    assert (e.value.status, e.value.code, e.value.attempts) == (503, "BROKER_UNAVAILABLE", 4)


def test_the_deadline_ends_the_retries_of_both_clients_before_their_attempts_do():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        body = {"code": "QUEUE_FULL", "message": "the queue is full", "field": None}
        return httpx.Response(429, json=body, headers={"Retry-After": "30"})

    # The server asks for 30 s, past the 1 s deadline: no second attempt.
    late = RetryPolicy(max_attempts=50, base_delay_s=0.001, max_delay_s=0.01, deadline_s=1.0)
    with client(handler, late) as c, pytest.raises(CrucibleError) as e:
        c.queue_status()
    assert (len(calls), e.value.status, e.value.attempts) == (1, 429, 1)

    async def main() -> None:
        async with async_client(handler, late) as c:
            await c.queue_status()

    with pytest.raises(CrucibleError) as e:
        asyncio.run(main())
    assert (len(calls), e.value.code, e.value.attempts) == (2, "QUEUE_FULL", 1)


def test_an_unreachable_server_is_reported_as_such():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with client(handler) as c, pytest.raises(CrucibleError) as e:
        c.problems()
    assert (e.value.status, e.value.code) == (None, "UNREACHABLE")
    assert isinstance(e.value.__cause__, httpx.ConnectError)


def test_a_broker_outage_is_a_health_answer_not_an_error():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"status": "unavailable", "broker_ok": False})

    with client(handler) as c:
        assert c.health()["status"] == "unavailable"


def test_the_async_client_retries_the_same_way():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) < 2:
            return error(429, "QUEUE_FULL", "the queue is full")
        return httpx.Response(200, json={"problems": [], "total": 0})

    async def main() -> list:
        async with async_client(handler) as c:
            return await c.problems()

    assert asyncio.run(main()) == []
    assert len(calls) == 2


def test_backoff_grows_exponentially_with_jitter_within_its_bounds():
    policy = RetryPolicy(max_attempts=10, base_delay_s=0.5, max_delay_s=4.0, deadline_s=None)
    assert [policy.backoff_cap(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    delays = [policy.next_delay(3, 0.0) for _ in range(200)]
    assert all(d is not None and 0.0 <= d <= 2.0 for d in delays)
    assert len(set(delays)) > 100  # jittered, not a fixed schedule
    assert policy.next_delay(10, 0.0) is None  # out of attempts
    bounded = RetryPolicy(base_delay_s=1.0, deadline_s=10.0)
    assert bounded.next_delay(1, 10.0) is None  # out of time


def test_a_servers_retry_after_is_waited_at_least_and_capped(monkeypatch):
    from crucible_client import retry

    def seconds(value: str) -> float | None:
        return retry.retry_after_seconds(httpx.Response(429, headers={"Retry-After": value}))

    assert seconds("1") == 1.0 and seconds(" 7 ") == 7.0
    assert seconds("7200") == retry.MAX_RETRY_AFTER_S
    assert seconds("Wed, 21 Oct 2015 07:28:00 GMT") is None and seconds("-1") is None
    assert retry.retry_after_seconds(httpx.Response(429)) is None
    # The server's pause wins over a shorter backoff, and the client waits it out.
    assert FAST.next_delay(1, 0.0, 2.0) == 2.0
    waits = []
    monkeypatch.setattr("time.sleep", waits.append)
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            return httpx.Response(
                429,
                headers={"Retry-After": "3"},
                json={"code": "QUEUE_FULL", "message": "full", "field": None},
            )
        return httpx.Response(200, json={"status": "ok"})

    with client(handler) as c:
        assert c.health() == {"status": "ok"}
    assert waits == [3.0], waits
