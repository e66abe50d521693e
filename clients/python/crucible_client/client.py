# GENERATED from aio.py by scripts/gen_sync_client.py (unasync): do not edit.
"""The client of the Crucible HTTP API, written once: ``aio.py`` is ``AsyncClient`` (asyncio)
and ``client.py``, its blocking twin ``Client``, is generated from it by unasync
(``scripts/gen_sync_client.py``; tests/test_sync_client.py fails when it is stale). What is not
the same code in both is how several batches are read (``_polls``); what both share besides is
in ``base``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Iterable, Mapping, Sequence
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
from ._polls import SyncPolls
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


class Client(SyncPolls, _Base):
    """``AsyncClient`` for asyncio; ``Client``, blocking, one per thread or shared
    (``httpx.Client`` is thread-safe).

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
        response = self._retrying(answers, tenacity.Retrying)(
            self._http.request,
            method,
            path,
            params=params,
            json=json,
            timeout=_read_timeout(self._timeout, wait_s),
        )
        return _decode(response, answers)

    def health(self) -> HealthStatus:
        """``GET /health``: ``status`` ``ok``, ``degraded`` (no worker ready) or
        ``unavailable`` (broker down, HTTP 503: returned, not raised, since it is the
        answer a probe asks for)."""
        return self._request("GET", "/health", answers=frozenset({200, 503}))

    def queue_status(self) -> QueueStatus:
        """``GET /queue/status``: depth by priority, running, cap and lifetime counters."""
        return self._request("GET", "/queue/status")

    def problems(self) -> list[ProblemInfo]:
        """Every problem of the server's registry, without sources."""
        return (self._request("GET", "/problems"))["problems"]

    def problem(self, level: int, id: int) -> Problem:
        """One problem with its reference source; CrucibleError (404) when unknown."""
        return self._request("GET", f"/problems/{level}/{id}")

    def task(self, task_id: str, *, wait: float = 0.0) -> TaskView:
        """``GET /tasks/{id}``, long-polling up to ``wait`` seconds for it to finish."""
        return self._request(
            "GET", f"/tasks/{task_id}", params={"wait": _check_wait(wait)}, wait_s=wait
        )

    def batch(self, batch_id: str, *, include_tasks: bool = False) -> BatchStatus:
        """``GET /batches/{id}``: the batch's counts by status and its task ids, with every
        task's view when ``include_tasks``."""
        return self._request(
            "GET", f"/batches/{batch_id}", params=_batch_params(include_tasks)
        )

    def cancel_task(self, task_id: str) -> CancelResponse:
        """``DELETE /tasks/{id}``: a queued task never runs, a running one has its child
        killed (at its worker's next lease renewal). A task that already finished raises
        ``CrucibleError`` 409 (``CONFLICT``); an unknown one, or another tenant's, 404."""
        return self._request("DELETE", f"/tasks/{task_id}")

    def cancel_batch(self, batch_id: str) -> BatchCancelResponse:
        """``DELETE /batches/{id}``: cancels every open task of a batch (a rollout batch's
        too: its cancelled rollouts read back as ``cancelled``, without a reward) and returns
        what became of each distinct task (``cancelled_queued``, ``cancelled_running``,
        ``already_finished``). Cancelling a finished batch is not an error. A ``Submission``
        of several batches: cancel each of its ``batch_ids``."""
        return self._request("DELETE", f"/batches/{batch_id}")

    def submit(
        self,
        reference_code: str | None = None,
        *,
        kernel_code: str,
        problem: ProblemLike | None = None,
        backend: Backend = "triton",
        timing: Timing | str | None = None,
        **opts: Any,
    ) -> SubmitResponse:
        """``POST /evaluate`` without waiting: the new task (``status`` ``queued``), or the
        earlier one that answers it (``cached``, ``coalesced``, ``deduplicated``). Follow it
        with ``task(task_id, wait=...)``, stop it with ``cancel_task``. Arguments as
        ``evaluate``."""
        body = _evaluate_body(reference_code, kernel_code, problem, backend, opts, timing)
        return self._request("POST", "/evaluate", json=body)

    def evaluate(
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
        """Evaluates one kernel against ``reference_code`` or a registry ``problem`` and
        returns the finished task (``status`` ``done`` with its ``result``, or ``failed`` /
        ``cancelled`` with an ``error``).

        ``opts`` are the other ``POST /evaluate`` fields (``num_correct_trials``,
        ``num_perf_trials``, ``timeout_s``, ``priority``, ``seed``, ``precision``,
        ``timing_method``, ``reference_backend``, ...). Each long-poll
        waits up to ``wait`` seconds; ``timeout`` bounds the whole call and None leaves it to
        the server's own task timeouts. Past it, ``TaskTimeout`` (a ``TimeoutError``) carries
        the ``task_id``: the task goes on on the server, to read later or cancel. ``timing`` is
        ``"adaptive"`` (stop timing once the median is known to 0.1 %, at most 2 s of timed
        calls per model), a ``Timing`` mapping with its own ``target_rel_error`` and
        ``max_time_ms``, or None: the fixed ``num_perf_trials`` calls (KernelBench's protocol).
        """
        body = _evaluate_body(reference_code, kernel_code, problem, backend, opts, timing)
        deadline = _deadline(timeout)
        first = _submit_wait(wait, deadline)
        view = self._request(
            "POST", "/evaluate", params={"wait": first}, json=body, wait_s=first
        )
        while not _finished_view(view):
            poll = _poll_wait(wait, deadline, task_id=view["task_id"])
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

    def _results_page(
        self, batch_id: str, after: int, wait: float, limit: int
    ) -> RolloutResultsPage:
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
        With several batches open, ``AsyncClient`` long-polls them all at once (results in
        completion order across batches too); ``Client`` polls each for at most a second in
        turn.
        """
        _check_wait(wait)
        deadline = _deadline(timeout)
        cursors = dict.fromkeys(_batch_ids(batches), 0)
        for result in self._poll_batches(cursors, wait, deadline, limit):
            yield result

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

    def problem_set(
        self,
        *,
        level: int | None = None,
        start: int | None = None,
        end: int | None = None,
        backend: Backend | None = None,
        test_fraction: float | None = None,
        seed: int | None = None,
    ) -> ProblemSet:
        """``GET /problem-sets``: the train and test problems of ``level`` with
        ``start <= id <= end``, split by seed and content hash (every replica and run agrees).
        A parameter left None takes the server's default."""
        params = _problem_set_selection(level, start, end, backend, test_fraction, seed)
        return self._request("GET", "/problem-sets", params=params)

    def problem_batch(
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
        """``POST /problem-sets/batches``: the problems of step ``step`` of epoch ``epoch``
        (``steps_per_epoch`` and ``last_step`` say where the epoch ends), each with its
        ``group_size``. Parameters left None take the server's defaults (kernel_rl's: train
        split, batch_size 4, group_size 4, shuffled)."""
        selection = _problem_set_selection(level, start, end, backend, test_fraction, seed)
        body = _problem_batch_body(epoch, step, selection, split, batch_size, group_size, shuffle)
        return self._request("POST", "/problem-sets/batches", json=body)

    def report(self, batch_id: str) -> BatchReport:
        """``GET /batches/{id}/report``: correct rate, fast_p (p = 0, 1, 1.2, 1.5, 2),
        mean and geometric-mean speedup, hacks and decoys, per level and overall, of a
        ``/rollouts`` or ``/evaluate/batch`` batch."""
        return self._request("GET", f"/batches/{batch_id}/report")

    def start_episode(
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
        """``POST /episodes``: start an episode of a problem (or ``group_size`` of them, a GRPO
        group) and get its first prompt; ``episodes.Episode`` / ``EpisodeGroup`` drive it."""
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
        return self._request("POST", "/episodes", json=body, answers=frozenset({201}))

    def post_turn(
        self, episode_id: str, completion: str, *, turn: int | None = None, wait: float = 0.0
    ) -> TurnView:
        """``POST /episodes/{id}/turns``: the completion of a turn, waiting up to ``wait``
        seconds for its reward (``status`` ``pending`` if it is not scored by then). Posting the
        same completion again is safe: the same turn comes back (a ``failed`` one is evaluated
        again); another completion for a taken turn is a CrucibleError (409)."""
        return self._request(
            "POST",
            f"/episodes/{episode_id}/turns",
            params={"wait": _check_wait(wait)},
            json=_turn_body(completion, turn),
            wait_s=wait,
        )

    def episode(self, episode_id: str, *, wait: float = 0.0) -> EpisodeView:
        """``GET /episodes/{id}``: every turn so far, long-polling up to ``wait`` seconds for
        the last one."""
        return self._request(
            "GET", f"/episodes/{episode_id}", params={"wait": _check_wait(wait)}, wait_s=wait
        )

    def turn(self, episode_id: str, turn: int, *, wait: float = 0.0) -> TurnView:
        """``GET /episodes/{id}/turns/{turn}``, long-polling up to ``wait`` seconds while it
        is evaluated."""
        return self._request(
            "GET",
            f"/episodes/{episode_id}/turns/{turn}",
            params={"wait": _check_wait(wait)},
            wait_s=wait,
        )
    def prompt(
        self,
        problem: ProblemLike | None = None,
        *,
        reference_code: str | None = None,
        option: PromptOption = "zero_shot",
        backend: Backend = "triton",
        thinking: bool = False,
        k: int | None = None,
    ) -> Prompt:
        """``POST /prompts``: the first-turn prompt of a registered ``problem`` (``(level,
        id)`` or a problem dict) or of ``reference_code``: the text, its settings, the ids of
        its examples and the response format. ``option`` ``raicl`` retrieves ``k`` examples
        from the server's corpus (CrucibleError 409 when it has none)."""
        body = _prompt_body(problem, reference_code, option, backend, thinking, k)
        return self._request("POST", "/prompts", json=body)
