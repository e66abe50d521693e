"""TRL reward functions (``GRPOTrainer(reward_funcs=[...])``): ``make_async_trl_reward`` and
``make_trl_reward`` each return a function TRL calls as ``reward(prompts=, completions=,
completion_ids=, **columns)`` (every dataset column, and TRL's own extras such as
``trainer_state``, as keyword arguments) and that returns one reward per completion.

TRL runs the coroutine reward functions of a step together (``asyncio.gather`` on an event loop
of its own), so the async one lets a step's other async rewards run while Crucible evaluates;
each call scores the process's whole batch (every completion of every group) in one
``POST /rollouts``.

Where TRL passes its loggers (``log_metric(name, value)`` and ``log_extra(column, values)``,
TRL 0.24 and later), a batch logs the means of its outcomes (``crucible/evaluated``,
``format_ok``, ``compiled``, ``correct``, ``speedup``: the mean over the correct ones) and adds
``crucible_verdict`` and ``crucible_speedup`` columns to TRL's completions table.

A completion the service could not evaluate gets ``None`` by default (``on_failure="none"``).
TRL turns ``None`` into NaN and sums the reward functions with ``nansum``, so the sample's
reward is that of the other reward functions alone; when Crucible's is the only one, TRL 1.x
calls the sample unscorable, leaves it out of its group's baseline and gives it no advantage
(before 1.0 the sum of nothing was 0, and counted). ``on_failure="raise"`` stops the step
instead; ``"zero"`` and ``"nan"`` return those.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from crucible_client.aio import AsyncClient
from crucible_client.client import Client
from crucible_client.scoring import (
    ON_FAILURE,
    SCORING_ERRORS,
    async_client,
    check_on_failure,
    check_verdicts,
    completion_rollouts,
    failure_value,
    outcome_metrics,
    plain,
    reraise_unless_tolerated,
    reward_or_failure,
    score,
    score_async,
    sync_client,
)
from crucible_client.types import Backend, EvalSettings, Profile, RolloutResult

#: TRL's adapter also takes ``none``: TRL's own way of saying "no reward from this function".
TRL_ON_FAILURE = (*ON_FAILURE, "none")

Rewards = list[float | None]


def _completion_text(completion: Any) -> str:
    # TRL passes conversational completions as a list of messages; the answer is the last.
    if isinstance(completion, str):
        return completion
    return str(completion[-1]["content"])


def _rewards(results: list[RolloutResult], on_failure: str) -> Rewards:
    check_verdicts(results, on_failure)
    return [reward_or_failure(r, on_failure) for r in results]


def batch_metrics(results: Sequence[RolloutResult | None]) -> dict[str, float]:
    """Pure: a batch's outcomes as TRL metrics: the mean of each of ``outcome_metrics``' keys,
    ``speedup`` over the correct ones only (0 when none is)."""
    rows = [outcome_metrics(r) for r in results]
    if not rows:
        return {}
    means = {f"crucible/{k}": sum(r[k] for r in rows) / len(rows) for k in rows[0] if k != "speedup"}
    fast = [r["speedup"] for r in rows if r["correct"]]
    means["crucible/speedup"] = sum(fast) / len(fast) if fast else 0.0
    return means


def log_to_trl(results: Sequence[RolloutResult | None], kwargs: dict[str, Any]) -> None:
    """Hands a batch's outcomes to TRL's ``log_metric`` and ``log_extra`` when it passed them
    (older TRL does not: nothing is logged)."""
    log_metric, log_extra = kwargs.get("log_metric"), kwargs.get("log_extra")
    if callable(log_metric):
        for name, value in batch_metrics(results).items():
            log_metric(name, value)
    if callable(log_extra):
        evaluations = [((r or {}).get("result") or {}) for r in results]
        log_extra("crucible_verdict", [e.get("verdict") or (r or {}).get("status", "failed")
                                       for e, r in zip(evaluations, results)])
        log_extra("crucible_speedup", [e.get("speedup") for e in evaluations])


class _Settings:
    """What both reward functions are made with."""

    def __init__(
        self,
        profile: Profile,
        backend: Backend,
        eval: EvalSettings | None,
        ground_truth_column: str,
        timeout: float | None,
        on_failure: str,
    ) -> None:
        self.profile, self.backend = profile, backend
        self.eval = plain(eval)
        self.column, self.timeout = ground_truth_column, timeout
        self.on_failure = check_on_failure(on_failure, TRL_ON_FAILURE)

    def rollouts(self, completions: Sequence[Any], columns: dict[str, Any]) -> list[Any]:
        if self.column not in columns:
            raise KeyError(
                f"no dataset column {self.column!r} names the problems "
                f"(columns: {sorted(columns)}); set ground_truth_column"
            )
        return completion_rollouts(
            [_completion_text(c) for c in completions],
            columns[self.column],
            profile=self.profile,
            backend=self.backend,
        )

    def name(self, reward: Callable[..., Any]) -> None:
        # TRL logs each reward function under its name.
        reward.__name__ = f"crucible_{self.profile}"


def make_async_trl_reward(
    *,
    url: str | None = None,
    client: AsyncClient | None = None,
    profile: Profile = "kernel_rl",
    backend: Backend = "triton",
    eval: EvalSettings | None = None,
    ground_truth_column: str = "ground_truth",
    timeout: float | None = None,
    on_failure: str = "none",
) -> Callable[..., Awaitable[Rewards]]:
    """An async TRL reward function. ``ground_truth_column`` is the dataset column that names
    each row's problem (``{"level", "id"}``, that as JSON, or the reference source);
    conversational completions are read from their last message. The server is ``url``,
    else ``$CRUCIBLE_URL``; without ``client`` each event loop gets one shared client.
    ``timeout`` bounds the wait (then the batch is cancelled); ``on_failure`` is ``none``
    (default), ``raise``, ``nan`` or ``zero`` (see the module's documentation)."""
    settings = _Settings(profile, backend, eval, ground_truth_column, timeout, on_failure)

    async def reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> Rewards:
        rollouts = settings.rollouts(completions, kwargs)
        try:
            results = await score_async(
                async_client(url, client), rollouts, settings.eval, settings.timeout
            )
        except SCORING_ERRORS as error:
            reraise_unless_tolerated(error, settings.on_failure)
            log_to_trl([None] * len(rollouts), kwargs)
            return [failure_value(settings.on_failure)] * len(rollouts)
        log_to_trl(results, kwargs)
        return _rewards(results, settings.on_failure)

    settings.name(reward)
    return reward


def make_trl_reward(
    *,
    url: str | None = None,
    client: Client | None = None,
    profile: Profile = "kernel_rl",
    backend: Backend = "triton",
    eval: EvalSettings | None = None,
    ground_truth_column: str = "ground_truth",
    timeout: float | None = None,
    on_failure: str = "none",
) -> Callable[..., Rewards]:
    """``make_async_trl_reward``'s blocking twin, for TRL versions that call reward functions
    one after the other."""
    settings = _Settings(profile, backend, eval, ground_truth_column, timeout, on_failure)

    def reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> Rewards:
        rollouts = settings.rollouts(completions, kwargs)
        try:
            results = score(sync_client(url, client), rollouts, settings.eval, settings.timeout)
        except SCORING_ERRORS as error:
            reraise_unless_tolerated(error, settings.on_failure)
            log_to_trl([None] * len(rollouts), kwargs)
            return [failure_value(settings.on_failure)] * len(rollouts)
        log_to_trl(results, kwargs)
        return _rewards(results, settings.on_failure)

    settings.name(reward)
    return reward
