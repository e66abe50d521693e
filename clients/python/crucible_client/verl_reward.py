"""VERL's custom reward function, in each shape VERL calls one: per sample
(``compute_score``, ``compute_score_async``) and per batch for the ``batch`` reward manager
(``compute_scores``, ``compute_scores_async``). The batch forms score the whole batch in one
``POST /rollouts``; prefer them.

VERL calls the function by keyword: ``compute_score(data_source=, solution_str=,
ground_truth=, extra_info=, **reward_kwargs)`` per sample, ``compute_scores(data_sources=,
solution_strs=, ground_truths=, extra_infos=, **reward_kwargs)`` per batch, and awaits it when
it is a coroutine function (its reward loop). Anything else it passes (its reward router's
address, a tokenizer) lands in ``**kwargs`` and is ignored. The dataset's
``reward_model.ground_truth`` names the problem (``scoring.problem_target``); ``data_source``
and ``extra_info`` are not used.

Current VERL's reward loop (0.9: its managers are naive, dapo, gdpo, rate_limited, remote; none
takes a batch function) awaits one ``compute_score_async`` per sample, all of a step at once;
at most ``max_concurrency`` (64) of one event loop's are being scored together, the rest
wait their turn here::

    reward.reward_manager.name=naive
    reward.custom_reward_function.path=<this file>
    reward.custom_reward_function.name=compute_score_async
    +reward.custom_reward_function.reward_kwargs.profile=kernel_rl

Older VERL (no reward loop): ``reward_model.reward_manager=batch`` with ``compute_scores``,
``custom_reward_function.path`` and ``.name``, ``+custom_reward_function.reward_kwargs.*``.
VERL loads this file by path, outside its package, so the imports here are absolute and need
the package installed.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any

from crucible_client.aio import AsyncClient
from crucible_client.client import Client
from crucible_client.scoring import (
    SCORING_ERRORS,
    async_client,
    check_on_failure,
    check_verdicts,
    completion_rollouts,
    outcome_metrics,
    plain,
    reraise_unless_tolerated,
    reward_or_failure,
    score,
    score_async,
    sync_client,
)
from crucible_client.types import Backend, EvalSettings, Profile, RolloutResult

#: A sample's score: the reward, or ``{"score": reward, ...}`` with numeric details that VERL
#: collects per key into its ``reward_extra_info``.
Score = float | dict[str, float]


def _score(result: RolloutResult | None, details: bool, on_failure: str) -> Score:
    """One sample's score; ``result`` None when the whole batch failed to be scored. Every
    detail is a number and every sample has the same keys: VERL collects them per key."""
    value = reward_or_failure(result, on_failure)
    assert value is not None, "on_failure 'none' is TRL's alone, refused by check_on_failure"
    if not details:
        return value
    return {"score": value, **outcome_metrics(result)}


def _scores(results: list[RolloutResult], details: bool, on_failure: str) -> list[Score]:
    check_verdicts(results, on_failure)
    return [_score(r, details, on_failure) for r in results]


def compute_scores(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any] | None = None,
    *,
    url: str | None = None,
    client: Client | None = None,
    profile: Profile = "kernel_rl",
    backend: Backend = "triton",
    eval: EvalSettings | None = None,
    details: bool = True,
    on_failure: str = "raise",
    timeout: float | None = None,
    **kwargs: Any,
) -> list[Score]:
    """Scores a batch of raw completions in one request; the list VERL's ``batch`` reward
    manager expects, in order.

    ``ground_truths[i]`` names sample ``i``'s problem: ``{"level": 1, "id": 19}`` (or that as
    a JSON string) for a registry problem, else the reference source. The server extracts
    each kernel and scores it under ``profile``. With ``details`` each score is ``{"score",
    "evaluated", "format_ok", "compiled", "correct", "speedup"}``, else the bare reward.
    ``eval`` holds the batch's evaluation settings (``num_correct_trials``, ``timeout_s``,
    ...); ``timeout`` bounds the wait (then the batch is cancelled).

    ``on_failure`` decides what a sample the service could not evaluate scores (no verdict:
    lost workers, a cancel; or no answer at all after the retries): ``raise`` (the default:
    ``NotEvaluated``, or the client's error), ``nan`` or ``zero`` (``evaluated`` 0.0 in the
    details says which samples). A failed kernel is not a failure of the service: it has a
    verdict and a real score.
    """
    policy = check_on_failure(on_failure)
    rollouts = completion_rollouts(solution_strs, ground_truths, profile=profile, backend=backend)
    try:
        results = score(sync_client(url, client), rollouts, plain(eval), timeout)
    except SCORING_ERRORS as error:
        reraise_unless_tolerated(error, policy)
        return [_score(None, details, policy) for _ in rollouts]
    return _scores(results, details, policy)


async def compute_scores_async(
    data_sources: Sequence[str],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any] | None = None,
    *,
    url: str | None = None,
    client: AsyncClient | None = None,
    profile: Profile = "kernel_rl",
    backend: Backend = "triton",
    eval: EvalSettings | None = None,
    details: bool = True,
    on_failure: str = "raise",
    timeout: float | None = None,
    **kwargs: Any,
) -> list[Score]:
    """``compute_scores`` as a coroutine, for VERL's reward loop (which awaits it)."""
    policy = check_on_failure(on_failure)
    rollouts = completion_rollouts(solution_strs, ground_truths, profile=profile, backend=backend)
    try:
        results = await score_async(async_client(url, client), rollouts, plain(eval), timeout)
    except SCORING_ERRORS as error:
        reraise_unless_tolerated(error, policy)
        return [_score(None, details, policy) for _ in rollouts]
    return _scores(results, details, policy)


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    url: str | None = None,
    client: Client | None = None,
    profile: Profile = "kernel_rl",
    backend: Backend = "triton",
    eval: EvalSettings | None = None,
    details: bool = True,
    on_failure: str = "raise",
    timeout: float | None = None,
    **kwargs: Any,
) -> Score:
    """The score of one raw completion: what VERL's per-sample reward managers call. Each
    call waits for its own evaluation, so prefer ``compute_scores`` with the ``batch``
    manager, or ``compute_score_async`` under the reward loop. Arguments as
    ``compute_scores``."""
    return compute_scores(
        [data_source],
        [solution_str],
        [ground_truth],
        [extra_info],
        url=url,
        client=client,
        profile=profile,
        backend=backend,
        eval=eval,
        details=details,
        on_failure=on_failure,
        timeout=timeout,
    )[0]


#: How many of one event loop's ``compute_score_async`` calls are scored at once by default:
#: a step's thousands of samples wait here instead of opening as many requests.
DEFAULT_MAX_CONCURRENCY = 64
_limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _concurrency_limit(bound: int) -> asyncio.Semaphore:
    """The running event loop's semaphore of ``bound`` (one per loop and bound)."""
    if bound < 1:
        raise ValueError("max_concurrency must be at least 1")
    per_loop = _limits.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault(bound, asyncio.Semaphore(bound))


async def compute_score_async(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    *,
    url: str | None = None,
    client: AsyncClient | None = None,
    profile: Profile = "kernel_rl",
    backend: Backend = "triton",
    eval: EvalSettings | None = None,
    details: bool = True,
    on_failure: str = "raise",
    timeout: float | None = None,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    **kwargs: Any,
) -> Score:
    """``compute_score`` as a coroutine: VERL's reward loop runs many at once, each its own
    ``POST /rollouts`` of one (the server evaluates identical kernels of a group once), at
    most ``max_concurrency`` of this event loop's at a time."""
    async with _concurrency_limit(max_concurrency):
        scores = await compute_scores_async(
            [data_source],
            [solution_str],
            [ground_truth],
            [extra_info],
            url=url,
            client=client,
            profile=profile,
            backend=backend,
            eval=eval,
            details=details,
            on_failure=on_failure,
            timeout=timeout,
        )
    return scores[0]
