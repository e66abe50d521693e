"""Synchronous and asynchronous clients of the Crucible HTTP API.

Both clients share everything but the I/O: request bodies, the batching of rollouts, the
decoding of answers and the retry policy live in module-level functions, and each class only
sends, sleeps and waits in its own way.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import CrucibleError
from .retry import DEFAULT_RETRY, RETRYABLE_ERRORS, RETRYABLE_STATUS, RetryPolicy
from .types import (
    Backend,
    EvalSettings,
    Problem,
    ProblemInfo,
    ProblemRef,
    Profile,
    Rollout,
    RolloutResult,
    TaskView,
    Weights,
)

DEFAULT_URL = "http://127.0.0.1:10907"
#: Where the clients read their bearer token from when none is given.
TOKEN_ENV = "CRUCIBLE_TOKEN"
#: Connect quickly or fail over to a retry; reads get this plus the long-poll's ``wait``.
DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=10.0)
#: The longest ``?wait=`` the server accepts.
MAX_WAIT_S = 60.0
#: Most rollouts the server takes in one ``POST /rollouts``.
MAX_ROLLOUTS_PER_BATCH = 1000
#: Most results the server returns in one page.
MAX_RESULTS_PAGE = 1000
TERMINAL_TASK_STATUSES = frozenset({"done", "failed", "cancelled"})
#: With several batches open, the sync client cannot long-poll them all at once, so it polls
#: each for this long in turn: a result of any batch is seen within (batches x this).
_SHARED_POLL_S = 1.0

#: A registry problem: ``{"level": 1, "id": 19}`` (a ``GET /problems`` entry will do) or
#: ``(1, 19)``.
ProblemLike = Mapping[str, Any] | tuple[int, int]


@dataclass(frozen=True)
class Submission:
    """What ``submit_rollouts`` made: one server batch per chunk of at most 1,000 rollouts.

    ``idempotency_key`` is the key of the whole submission; submitting the same rollouts
    again under it (after a crash, say) returns these same batches instead of new ones.
    """

    batch_ids: tuple[str, ...]
    idempotency_key: str
    rollouts: int
    #: Rollouts being evaluated; the others had no kernel and are scored on their text.
    evaluated: int
    #: Every batch was an earlier one, found by its idempotency key.
    deduplicated: bool


def make_rollout(
    id: str,
    completion: str,
    *,
    problem: ProblemLike | None = None,
    reference_code: str | None = None,
    backend: Backend = "triton",
    turn: int = 0,
    profile: Profile = "kernel_rl",
    weights: Weights | None = None,
) -> Rollout:
    """One rollout of a ``POST /rollouts`` batch, checked before it travels: the server
    would reject a batch for one rollout naming both or neither of ``problem`` and
    ``reference_code``, and every other rollout of the batch with it."""
    if (problem is None) == (reference_code is None):
        raise ValueError(f"rollout {id!r}: give exactly one of problem and reference_code")
    rollout: Rollout = {
        "id": id,
        "completion": completion,
        "backend": backend,
        "turn": turn,
        "profile": profile,
    }
    if problem is not None:
        rollout["problem"] = problem_ref(problem)
    elif reference_code is not None:
        rollout["reference_code"] = reference_code
    if weights is not None:
        rollout["weights"] = weights
    return rollout


def problem_ref(problem: ProblemLike) -> ProblemRef:
    """``{"level", "id"}`` from such a mapping (extra keys, e.g. a ``GET /problems`` entry's
    name and hash, dropped) or a ``(level, id)`` pair."""
    if isinstance(problem, Mapping):
        level, pid = problem["level"], problem["id"]
    else:
        level, pid = problem
    return {"level": int(level), "id": int(pid)}


def _evaluate_body(
    reference_code: str | None,
    kernel_code: str,
    problem: ProblemLike | None,
    backend: Backend,
    opts: Mapping[str, Any],
) -> dict[str, Any]:
    if (problem is None) == (reference_code is None):
        raise ValueError("give exactly one of reference_code and problem")
    body: dict[str, Any] = {"kernel_code": kernel_code, "backend": backend, **opts}
    if problem is not None:
        body["problem"] = problem_ref(problem)
    else:
        body["reference_code"] = reference_code
    # A key of our own makes the POST safe to retry: a submission that arrived before its
    # answer was lost is found again, not queued twice.
    body.setdefault("idempotency_key", f"eval-{uuid.uuid4()}")
    return body


def _rollout_batches(
    rollouts: Sequence[Rollout],
    eval: EvalSettings | None,
    idempotency_key: str,
) -> list[dict[str, Any]]:
    """The ``POST /rollouts`` bodies for ``rollouts``, 1,000 at most in each.

    Ids must be unique over the whole list, not just within each chunk: results are matched
    back to rollouts by id. A single batch carries the caller's key as it is; chunk ``i`` of
    several carries ``key#i``, so each is found again on a retry.
    """
    if not rollouts:
        raise ValueError("no rollouts to submit")
    seen: set[str] = set()
    for r in rollouts:
        if r["id"] in seen:
            raise ValueError(f"rollout id {r['id']!r} is used twice")
        seen.add(r["id"])
    chunks = [
        rollouts[i : i + MAX_ROLLOUTS_PER_BATCH]
        for i in range(0, len(rollouts), MAX_ROLLOUTS_PER_BATCH)
    ]
    bodies = []
    for i, chunk in enumerate(chunks):
        body: dict[str, Any] = {
            "rollouts": list(chunk),
            "idempotency_key": idempotency_key if len(chunks) == 1 else f"{idempotency_key}#{i}",
        }
        if eval:
            body["eval"] = dict(eval)
        bodies.append(body)
    return bodies


def _submission(key: str, answers: Sequence[Mapping[str, Any]]) -> Submission:
    return Submission(
        batch_ids=tuple(a["batch_id"] for a in answers),
        idempotency_key=key,
        rollouts=sum(a["rollouts"] for a in answers),
        evaluated=sum(a["evaluated"] for a in answers),
        deduplicated=all(a.get("deduplicated", False) for a in answers),
    )


def _batch_ids(batches: str | Submission | Iterable[str]) -> list[str]:
    if isinstance(batches, str):
        return [batches]
    if isinstance(batches, Submission):
        return list(batches.batch_ids)
    ids = list(batches)
    if not ids:
        raise ValueError("no batches to read")
    return ids


def _check_wait(wait: float) -> float:
    if not 0 <= wait <= MAX_WAIT_S:
        raise ValueError(f"wait must be within 0-{MAX_WAIT_S:g} s, not {wait}")
    return wait


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _poll_wait(wait: float, deadline: float | None, what: str) -> float:
    """How long the next long-poll may wait: ``wait``, cut to the time left before
    ``deadline``; TimeoutError once there is none."""
    if deadline is None:
        return wait
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"{what} did not finish in time")
    return min(wait, left)


def _finished_view(answer: Mapping[str, Any]) -> bool:
    # The 202 of a cached submission says "done" but carries no result: fetch the task.
    return answer.get("status") in TERMINAL_TASK_STATUSES and "result" in answer


def _read_timeout(base: httpx.Timeout, wait_s: float) -> httpx.Timeout:
    """``base`` with its read timeout lengthened by a long-poll's ``wait``: the server holds
    the answer back that long on purpose."""
    read = None if base.read is None else base.read + wait_s
    return httpx.Timeout(connect=base.connect, read=read, write=base.write, pool=base.pool)


def _decode(response: httpx.Response, answers: frozenset[int]) -> Any:
    """The JSON of an answer whose status is in ``answers``; otherwise the error it holds."""
    if response.status_code in answers:
        return response.json()
    raise _error(response)


def _error(response: httpx.Response, attempts: int = 1) -> CrucibleError:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and "message" in body:
        return CrucibleError(
            body["message"],
            status=response.status_code,
            code=body.get("code"),
            field=body.get("field"),
            attempts=attempts,
        )
    # Not the API's own error body: a proxy's page, say.
    return CrucibleError(
        response.text[:500] or response.reason_phrase,
        status=response.status_code,
        attempts=attempts,
    )


def _exhausted(failure: httpx.Response | Exception, attempts: int) -> CrucibleError:
    """The error to raise once the retry policy gives up on ``failure``, the last one."""
    if isinstance(failure, httpx.Response):
        return _error(failure, attempts)
    error = CrucibleError(
        f"{type(failure).__name__}: {failure}", code="UNREACHABLE", attempts=attempts
    )
    error.__cause__ = failure
    return error


_OK = frozenset({200, 202})


def _headers(headers: Mapping[str, str] | None, token: str | None) -> dict[str, str]:
    """The headers of every request: the caller's, and ``Authorization: Bearer <token>`` with
    ``token``, else ``$CRUCIBLE_TOKEN``, when there is one (an empty one sends none: a server
    with authentication off, such as ``crucible up`` on a loopback address, needs none)."""
    out = dict(headers or {})
    token = os.environ.get(TOKEN_ENV) if token is None else token
    if token:
        out["Authorization"] = f"Bearer {token}"
    return out


class _Base:
    """Settings both clients hold."""

    def __init__(self, timeout: httpx.Timeout | float, retry: RetryPolicy) -> None:
        self._timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self._retry = retry

    def _settle(
        self,
        outcome: httpx.Response | Exception,
        answers: frozenset[int],
        attempt: int,
        started: float,
    ) -> tuple[bool, Any]:
        """What one attempt comes to: ``(True, decoded answer)``, or ``(False, seconds to wait
        before the next attempt)``; raises once the retry policy gives up."""
        if isinstance(outcome, httpx.Response) and (
            outcome.status_code in answers or outcome.status_code not in RETRYABLE_STATUS
        ):
            return True, _decode(outcome, answers)
        delay = self._retry.next_delay(attempt, time.monotonic() - started)
        if delay is None:
            raise _exhausted(outcome, attempt)
        return False, delay


class Client(_Base):
    """Blocking client; one per thread or shared (``httpx.Client`` is thread-safe).

    ``token`` is the bearer token of a tenant (``$CRUCIBLE_TOKEN`` when not given); ``retry``
    bounds the retries of each request on 429, 502-504 and lost connections; ``timeout`` is
    the per-request timeout (a long-poll's read gets its ``wait`` on top). ``transport``
    replaces the network, e.g. ``httpx.MockTransport`` in tests.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy = DEFAULT_RETRY,
        headers: Mapping[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(timeout, retry)
        self._http = httpx.Client(
            base_url=base_url,
            timeout=self._timeout,
            headers=_headers(headers, token),
            transport=transport,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        wait_s: float = 0.0,
        answers: frozenset[int] = _OK,
    ) -> Any:
        started = time.monotonic()
        for attempt in itertools.count(1):
            outcome: httpx.Response | Exception
            try:
                outcome = self._http.request(
                    method,
                    path,
                    params=params,
                    json=json,
                    timeout=_read_timeout(self._timeout, wait_s),
                )
            except RETRYABLE_ERRORS as e:
                outcome = e
            done, value = self._settle(outcome, answers, attempt, started)
            if done:
                return value
            time.sleep(value)
        raise AssertionError("unreachable: itertools.count never ends")

    def health(self) -> dict[str, Any]:
        """``GET /health``: ``status`` ``ok``, ``degraded`` (no worker ready) or
        ``unavailable`` (broker down, HTTP 503: returned, not raised, since it is the
        answer a probe asks for)."""
        return self._request("GET", "/health", answers=frozenset({200, 503}))

    def queue_status(self) -> dict[str, Any]:
        """``GET /queue/status``: depth by priority, running, cap and lifetime counters."""
        return self._request("GET", "/queue/status")

    def problems(self) -> list[ProblemInfo]:
        """Every problem of the server's registry, without sources."""
        return self._request("GET", "/problems")["problems"]

    def problem(self, level: int, id: int) -> Problem:
        """One problem with its reference source; CrucibleError (404) when unknown."""
        return self._request("GET", f"/problems/{level}/{id}")

    def task(self, task_id: str, *, wait: float = 0.0) -> TaskView:
        """``GET /tasks/{id}``, long-polling up to ``wait`` seconds for it to finish."""
        return self._request(
            "GET", f"/tasks/{task_id}", params={"wait": _check_wait(wait)}, wait_s=wait
        )

    def evaluate(
        self,
        reference_code: str | None = None,
        *,
        kernel_code: str,
        problem: ProblemLike | None = None,
        backend: Backend = "triton",
        wait: float = 30.0,
        timeout: float | None = None,
        **opts: Any,
    ) -> TaskView:
        """Evaluates one kernel against ``reference_code`` or a registry ``problem`` and
        returns the finished task (``status`` ``done`` with its ``result``, or ``failed`` /
        ``cancelled`` with an ``error``).

        ``opts`` are the other ``POST /evaluate`` fields (``num_correct_trials``,
        ``num_perf_trials``, ``timeout_s``, ``priority``, ``seed``, ...). Each long-poll
        waits up to ``wait`` seconds; ``timeout`` bounds the whole call (TimeoutError; the
        task goes on) and None leaves it to the server's own task timeouts.
        """
        body = _evaluate_body(reference_code, kernel_code, problem, backend, opts)
        deadline = _deadline(timeout)
        first = _poll_wait(_check_wait(wait), deadline, "evaluation")
        view = self._request("POST", "/evaluate", params={"wait": first}, json=body, wait_s=first)
        while not _finished_view(view):
            poll = _poll_wait(wait, deadline, f"task {view['task_id']}")
            view = self.task(view["task_id"], wait=poll)
        return view

    def submit_rollouts(
        self,
        rollouts: Sequence[Rollout],
        eval: EvalSettings | None = None,
        idempotency_key: str | None = None,
    ) -> Submission:
        """Submits rollouts for scoring, in batches of at most 1,000.

        A new key is made when none is given; pass your own to make the whole submission
        safe to repeat across a crash of your process (the same key returns the same
        batches). The returned ``Submission`` is what ``stream_results`` reads.
        """
        key = idempotency_key or str(uuid.uuid4())
        answers = [
            self._request("POST", "/rollouts", json=body)
            for body in _rollout_batches(rollouts, eval, key)
        ]
        return _submission(key, answers)

    def _results_page(self, batch_id: str, after: int, wait: float, limit: int) -> dict[str, Any]:
        return self._request(
            "GET",
            f"/batches/{batch_id}/results",
            params={"after": after, "wait": wait, "limit": limit},
            wait_s=wait,
        )

    def stream_results(
        self,
        batches: str | Submission | Iterable[str],
        *,
        wait: float = 30.0,
        timeout: float | None = None,
        limit: int = MAX_RESULTS_PAGE,
    ) -> Iterator[RolloutResult]:
        """Yields every rollout result of ``batches`` as evaluations finish, until all are in.

        Each request long-polls up to ``wait`` seconds for new results; ``timeout`` bounds
        the whole stream (TimeoutError) and None waits for the server's own task timeouts.
        With several batches open each is polled for at most a second in turn.
        """
        _check_wait(wait)
        deadline = _deadline(timeout)
        cursors = dict.fromkeys(_batch_ids(batches), 0)
        open_batches = list(cursors)
        while open_batches:
            per_poll = wait if len(open_batches) == 1 else min(wait, _SHARED_POLL_S)
            for batch_id in list(open_batches):
                poll = _poll_wait(per_poll, deadline, f"batch {batch_id}")
                page = self._results_page(batch_id, cursors[batch_id], poll, limit)
                cursors[batch_id] = page["cursor"]
                yield from page["results"]
                if page["done"]:
                    open_batches.remove(batch_id)

    def wait_results(
        self,
        batches: str | Submission | Iterable[str],
        *,
        wait: float = 30.0,
        timeout: float | None = None,
    ) -> dict[str, RolloutResult]:
        """Every result of ``batches`` by rollout id, in the order they finished."""
        return {r["id"]: r for r in self.stream_results(batches, wait=wait, timeout=timeout)}

    def score_rollouts(
        self,
        rollouts: Sequence[Rollout],
        eval: EvalSettings | None = None,
        *,
        idempotency_key: str | None = None,
        wait: float = 30.0,
        timeout: float | None = None,
    ) -> list[RolloutResult]:
        """Submits ``rollouts`` and returns their results in the same order."""
        submission = self.submit_rollouts(rollouts, eval, idempotency_key)
        results = self.wait_results(submission, wait=wait, timeout=timeout)
        return [results[r["id"]] for r in rollouts]


class AsyncClient(_Base):
    """The same API as ``Client`` for asyncio; several batches are long-polled at once."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        *,
        token: str | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
        retry: RetryPolicy = DEFAULT_RETRY,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(timeout, retry)
        self._http = httpx.AsyncClient(
            base_url=base_url,
            timeout=self._timeout,
            headers=_headers(headers, token),
            transport=transport,
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        wait_s: float = 0.0,
        answers: frozenset[int] = _OK,
    ) -> Any:
        started = time.monotonic()
        for attempt in itertools.count(1):
            outcome: httpx.Response | Exception
            try:
                outcome = await self._http.request(
                    method,
                    path,
                    params=params,
                    json=json,
                    timeout=_read_timeout(self._timeout, wait_s),
                )
            except RETRYABLE_ERRORS as e:
                outcome = e
            done, value = self._settle(outcome, answers, attempt, started)
            if done:
                return value
            await asyncio.sleep(value)
        raise AssertionError("unreachable: itertools.count never ends")

    async def health(self) -> dict[str, Any]:
        """See ``Client.health``."""
        return await self._request("GET", "/health", answers=frozenset({200, 503}))

    async def queue_status(self) -> dict[str, Any]:
        """See ``Client.queue_status``."""
        return await self._request("GET", "/queue/status")

    async def problems(self) -> list[ProblemInfo]:
        """See ``Client.problems``."""
        return (await self._request("GET", "/problems"))["problems"]

    async def problem(self, level: int, id: int) -> Problem:
        """See ``Client.problem``."""
        return await self._request("GET", f"/problems/{level}/{id}")

    async def task(self, task_id: str, *, wait: float = 0.0) -> TaskView:
        """See ``Client.task``."""
        return await self._request(
            "GET", f"/tasks/{task_id}", params={"wait": _check_wait(wait)}, wait_s=wait
        )

    async def evaluate(
        self,
        reference_code: str | None = None,
        *,
        kernel_code: str,
        problem: ProblemLike | None = None,
        backend: Backend = "triton",
        wait: float = 30.0,
        timeout: float | None = None,
        **opts: Any,
    ) -> TaskView:
        """See ``Client.evaluate``."""
        body = _evaluate_body(reference_code, kernel_code, problem, backend, opts)
        deadline = _deadline(timeout)
        first = _poll_wait(_check_wait(wait), deadline, "evaluation")
        view = await self._request(
            "POST", "/evaluate", params={"wait": first}, json=body, wait_s=first
        )
        while not _finished_view(view):
            poll = _poll_wait(wait, deadline, f"task {view['task_id']}")
            view = await self.task(view["task_id"], wait=poll)
        return view

    async def submit_rollouts(
        self,
        rollouts: Sequence[Rollout],
        eval: EvalSettings | None = None,
        idempotency_key: str | None = None,
    ) -> Submission:
        """See ``Client.submit_rollouts``."""
        key = idempotency_key or str(uuid.uuid4())
        answers = [
            await self._request("POST", "/rollouts", json=body)
            for body in _rollout_batches(rollouts, eval, key)
        ]
        return _submission(key, answers)

    async def _results_page(
        self, batch_id: str, after: int, wait: float, limit: int
    ) -> dict[str, Any]:
        return await self._request(
            "GET",
            f"/batches/{batch_id}/results",
            params={"after": after, "wait": wait, "limit": limit},
            wait_s=wait,
        )

    async def stream_results(
        self,
        batches: str | Submission | Iterable[str],
        *,
        wait: float = 30.0,
        timeout: float | None = None,
        limit: int = MAX_RESULTS_PAGE,
    ) -> AsyncIterator[RolloutResult]:
        """See ``Client.stream_results``; here every open batch is long-polled at once, so
        results arrive in completion order across batches too."""
        _check_wait(wait)
        deadline = _deadline(timeout)
        cursors = dict.fromkeys(_batch_ids(batches), 0)
        polls: dict[asyncio.Task[dict[str, Any]], str] = {}

        def poll(batch_id: str) -> None:
            page = self._results_page(
                batch_id,
                cursors[batch_id],
                _poll_wait(wait, deadline, f"batch {batch_id}"),
                limit,
            )
            polls[asyncio.ensure_future(page)] = batch_id

        for batch_id in cursors:
            poll(batch_id)
        try:
            while polls:
                finished, _ = await asyncio.wait(polls, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    batch_id = polls.pop(task)
                    page = task.result()
                    cursors[batch_id] = page["cursor"]
                    for result in page["results"]:
                        yield result
                    if not page["done"]:
                        poll(batch_id)
        finally:
            # A consumer that stops early (or a failed poll) leaves the others running.
            for task in polls:
                task.cancel()

    async def wait_results(
        self,
        batches: str | Submission | Iterable[str],
        *,
        wait: float = 30.0,
        timeout: float | None = None,
    ) -> dict[str, RolloutResult]:
        """See ``Client.wait_results``."""
        return {r["id"]: r async for r in self.stream_results(batches, wait=wait, timeout=timeout)}

    async def score_rollouts(
        self,
        rollouts: Sequence[Rollout],
        eval: EvalSettings | None = None,
        *,
        idempotency_key: str | None = None,
        wait: float = 30.0,
        timeout: float | None = None,
    ) -> list[RolloutResult]:
        """See ``Client.score_rollouts``."""
        submission = await self.submit_rollouts(rollouts, eval, idempotency_key)
        results = await self.wait_results(submission, wait=wait, timeout=timeout)
        return [results[r["id"]] for r in rollouts]
