"""The asyncio client of the Crucible HTTP API: the same API as ``client.Client``; several
batches are long-polled at once."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any

import httpx
import tenacity

from .base import (
    _OK,
    DEFAULT_TIMEOUT,
    DEFAULT_URL,
    MAX_RESULTS_PAGE,
    ProblemLike,
    Submission,
    _Base,
    _batch_ids,
    _batch_params,
    _check_wait,
    _decode,
    _deadline,
    _episode_body,
    _evaluate_body,
    _finished_view,
    _headers,
    _poll_wait,
    _problem_batch_body,
    _problem_set_selection,
    _prompt_body,
    _read_timeout,
    _rollout_batches,
    _submission,
    _submit_wait,
    _turn_body,
)
from .env_types import (
    BatchReport,
    EpisodeView,
    EpisodesStarted,
    ProblemBatch,
    ProblemSet,
    Prompt,
    PromptOption,
    Split,
    TurnView,
)
from .retry import DEFAULT_RETRY, RetryPolicy
from .types import (
    Backend,
    BatchCancelResponse,
    BatchStatus,
    CancelResponse,
    EvalSettings,
    HealthStatus,
    Problem,
    ProblemInfo,
    Profile,
    QueueStatus,
    Rollout,
    RolloutResult,
    RolloutResultsPage,
    SubmitResponse,
    TaskView,
    Timing,
    Weights,
)


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
        response = await self._retrying(answers, tenacity.AsyncRetrying)(
            self._http.request,
            method,
            path,
            params=params,
            json=json,
            timeout=_read_timeout(self._timeout, wait_s),
        )
        return _decode(response, answers)

    async def health(self) -> HealthStatus:
        """See ``Client.health``."""
        return await self._request("GET", "/health", answers=frozenset({200, 503}))

    async def queue_status(self) -> QueueStatus:
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

    async def batch(self, batch_id: str, *, include_tasks: bool = False) -> BatchStatus:
        """See ``Client.batch``."""
        return await self._request(
            "GET", f"/batches/{batch_id}", params=_batch_params(include_tasks)
        )

    async def cancel_task(self, task_id: str) -> CancelResponse:
        """See ``Client.cancel_task``."""
        return await self._request("DELETE", f"/tasks/{task_id}")

    async def cancel_batch(self, batch_id: str) -> BatchCancelResponse:
        """See ``Client.cancel_batch``."""
        return await self._request("DELETE", f"/batches/{batch_id}")

    async def submit(
        self,
        reference_code: str | None = None,
        *,
        kernel_code: str,
        problem: ProblemLike | None = None,
        backend: Backend = "triton",
        timing: Timing | str | None = None,
        **opts: Any,
    ) -> SubmitResponse:
        """See ``Client.submit``."""
        body = _evaluate_body(reference_code, kernel_code, problem, backend, opts, timing)
        return await self._request("POST", "/evaluate", json=body)

    async def evaluate(
        self,
        reference_code: str | None = None,
        *,
        kernel_code: str,
        problem: ProblemLike | None = None,
        backend: Backend = "triton",
        wait: float = 30.0,
        timeout: float | None = None,
        timing: Timing | str | None = None,
        **opts: Any,
    ) -> TaskView:
        """See ``Client.evaluate``."""
        body = _evaluate_body(reference_code, kernel_code, problem, backend, opts, timing)
        deadline = _deadline(timeout)
        first = _submit_wait(wait, deadline)
        view = await self._request(
            "POST", "/evaluate", params={"wait": first}, json=body, wait_s=first
        )
        while not _finished_view(view):
            poll = _poll_wait(wait, deadline, task_id=view["task_id"])
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
    ) -> RolloutResultsPage:
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
        polls: dict[asyncio.Task[RolloutResultsPage], str] = {}

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

    async def problem_set(
        self,
        *,
        level: int | None = None,
        start: int | None = None,
        end: int | None = None,
        backend: Backend | None = None,
        test_fraction: float | None = None,
        seed: int | None = None,
    ) -> ProblemSet:
        """See ``Client.problem_set``."""
        params = _problem_set_selection(level, start, end, backend, test_fraction, seed)
        return await self._request("GET", "/problem-sets", params=params)

    async def problem_batch(
        self,
        epoch: int,
        step: int,
        *,
        split: Split | None = None,
        batch_size: int | None = None,
        group_size: int | None = None,
        shuffle: bool | None = None,
        level: int | None = None,
        start: int | None = None,
        end: int | None = None,
        backend: Backend | None = None,
        test_fraction: float | None = None,
        seed: int | None = None,
    ) -> ProblemBatch:
        """See ``Client.problem_batch``."""
        selection = _problem_set_selection(level, start, end, backend, test_fraction, seed)
        body = _problem_batch_body(epoch, step, selection, split, batch_size, group_size, shuffle)
        return await self._request("POST", "/problem-sets/batches", json=body)

    async def report(self, batch_id: str) -> BatchReport:
        """See ``Client.report``."""
        return await self._request("GET", f"/batches/{batch_id}/report")

    async def start_episode(
        self,
        *,
        problem: ProblemLike | None = None,
        reference_code: str | None = None,
        profile: Profile = "kernel_rl",
        backend: Backend = "triton",
        weights: Weights | None = None,
        prompt_option: str = "zero_shot",
        thinking: bool | None = None,
        max_turns: int | None = None,
        gamma: float | None = None,
        early_stop_on_correct: bool = True,
        speedup_threshold: float | None = None,
        eval: EvalSettings | None = None,
        group_size: int | None = None,
    ) -> EpisodesStarted:
        """See ``Client.start_episode``."""
        body = _episode_body(
            problem=problem,
            reference_code=reference_code,
            profile=profile,
            backend=backend,
            weights=weights,
            prompt_option=prompt_option,
            thinking=thinking,
            max_turns=max_turns,
            gamma=gamma,
            early_stop_on_correct=early_stop_on_correct,
            speedup_threshold=speedup_threshold,
            eval=eval,
            group_size=group_size,
        )
        return await self._request("POST", "/episodes", json=body, answers=frozenset({201}))

    async def post_turn(
        self, episode_id: str, completion: str, *, turn: int | None = None, wait: float = 0.0
    ) -> TurnView:
        """See ``Client.post_turn``."""
        return await self._request(
            "POST",
            f"/episodes/{episode_id}/turns",
            params={"wait": _check_wait(wait)},
            json=_turn_body(completion, turn),
            wait_s=wait,
        )

    async def episode(self, episode_id: str, *, wait: float = 0.0) -> EpisodeView:
        """See ``Client.episode``."""
        return await self._request(
            "GET", f"/episodes/{episode_id}", params={"wait": _check_wait(wait)}, wait_s=wait
        )

    async def turn(self, episode_id: str, turn: int, *, wait: float = 0.0) -> TurnView:
        """See ``Client.turn``."""
        return await self._request(
            "GET",
            f"/episodes/{episode_id}/turns/{turn}",
            params={"wait": _check_wait(wait)},
            wait_s=wait,
        )
    async def prompt(
        self,
        problem: ProblemLike | None = None,
        *,
        reference_code: str | None = None,
        option: PromptOption = "zero_shot",
        backend: Backend = "triton",
        thinking: bool = False,
        k: int | None = None,
    ) -> Prompt:
        """See ``Client.prompt``."""
        body = _prompt_body(problem, reference_code, option, backend, thinking, k)
        return await self._request("POST", "/prompts", json=body)
