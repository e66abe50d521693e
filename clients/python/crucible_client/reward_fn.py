"""Reward functions in the shapes trainers call: VERL's custom reward function
(``compute_score`` per sample, ``compute_scores`` for VERL's ``batch`` reward manager) and
TRL's ``reward_funcs`` (``make_trl_reward``). Each posts the completions as one
``POST /rollouts`` batch and waits for its results.

The server is ``url``, else ``$CRUCIBLE_URL``, else ``http://127.0.0.1:10907``, and its
bearer token ``$CRUCIBLE_TOKEN`` (when it requires one): trainers run reward functions in
worker processes that inherit the environment but not the caller's arguments. VERL loads this file by path, outside its package, so imports here are absolute
and need the package installed (``pip install ./clients/python``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from crucible_client.base import DEFAULT_URL, make_rollout
from crucible_client.client import Client
from crucible_client.types import Backend, EvalSettings, Profile, RolloutResult

Score = float | dict[str, float]


@functools.cache
def _shared_client(url: str) -> Client:
    # One connection pool per server for the life of the trainer process: a reward
    # function is called every step, and reconnecting each time is waste.
    return Client(url)


def _client(url: str | None, client: Client | None) -> Client:
    if client is not None:
        return client
    return _shared_client(url or os.environ.get("CRUCIBLE_URL", DEFAULT_URL))


def problem_target(ground_truth: Any) -> dict[str, Any]:
    """What a dataset's ``ground_truth`` names: ``{"problem": {...}}`` for a registry
    problem (a ``{"level", "id"}`` mapping, or that as a JSON string), or
    ``{"reference_code": ...}`` for a reference source (a string, or a mapping holding
    ``reference_code``)."""
    if isinstance(ground_truth, str) and ground_truth.lstrip().startswith("{"):
        # Else a source that happens to start with a brace.
        with contextlib.suppress(ValueError):
            ground_truth = json.loads(ground_truth)
    if isinstance(ground_truth, Mapping):
        if "reference_code" in ground_truth:
            return {"reference_code": str(ground_truth["reference_code"])}
        if "level" in ground_truth and "id" in ground_truth:
            level, pid = int(ground_truth["level"]), int(ground_truth["id"])
            return {"problem": {"level": level, "id": pid}}
        raise ValueError(f"ground truth names no problem: {dict(ground_truth)!r}")
    if isinstance(ground_truth, str):
        return {"reference_code": ground_truth}
    raise TypeError(f"ground truth must be a string or a mapping, not {type(ground_truth)}")


def _score(result: RolloutResult, details: bool, failure_score: float) -> Score:
    """The trainer's number for one result. A rollout the service could not evaluate (no
    reward) gets ``failure_score``; ``details`` marks it with ``evaluated`` 0 so it can be
    told apart from a kernel that earned that score. Every detail is a number, and every
    result has the same keys: VERL collects them per key into arrays."""
    reward = result["reward"]
    score = failure_score if reward is None else reward
    if not details:
        return score
    evaluation = result.get("result") or {}
    return {
        "score": score,
        "evaluated": float(reward is not None),
        "format_ok": float(result["format_ok"]),
        "compiled": float(bool(evaluation.get("compiled"))),
        "correct": float(evaluation.get("verdict") == "ok"),
        "speedup": float(evaluation.get("speedup") or 0.0),
    }


def _score_completions(
    completions: Iterable[str],
    ground_truths: Iterable[Any],
    *,
    url: str | None,
    client: Client | None,
    profile: Profile,
    backend: Backend,
    eval: EvalSettings | None,
    timeout: float | None,
) -> list[RolloutResult]:
    rollouts = [
        make_rollout(
            str(i),
            completion,
            backend=backend,
            profile=profile,
            **problem_target(truth),
        )
        for i, (completion, truth) in enumerate(zip(completions, ground_truths, strict=True))
    ]
    if not rollouts:
        return []
    return _client(url, client).score_rollouts(rollouts, eval, timeout=timeout)


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
    failure_score: float = 0.0,
    timeout: float | None = None,
) -> list[Score]:
    """Scores a whole batch in one request: VERL's ``batch`` reward manager calls this
    with its lists. ``data_sources`` and ``extra_infos`` are part of that signature and
    unused. See ``compute_score`` for the rest."""
    results = _score_completions(
        solution_strs,
        ground_truths,
        url=url,
        client=client,
        profile=profile,
        backend=backend,
        eval=eval,
        timeout=timeout,
    )
    return [_score(r, details, failure_score) for r in results]


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
    failure_score: float = 0.0,
    timeout: float | None = None,
) -> Score:
    """VERL's custom reward function: the reward of one raw completion.

    ``ground_truth`` names the problem (``problem_target``); the server extracts the kernel
    from ``solution_str`` and scores it under ``profile``. Returns ``{"score", ...}`` with
    ``evaluated``, ``format_ok``, ``compiled``, ``correct`` and ``speedup`` beside it, or
    the bare score when ``details`` is false. ``eval`` holds batch evaluation settings
    (``num_correct_trials``, ``timeout_s``, ...); ``timeout`` bounds the wait (TimeoutError).

    Each call waits for its own evaluation, so per-sample reward managers score one kernel
    at a time; prefer ``compute_scores`` with VERL's ``batch`` manager.
    """
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
        failure_score=failure_score,
        timeout=timeout,
    )[0]


def _completion_text(completion: Any) -> str:
    # TRL passes conversational completions as a list of messages; the answer is the last.
    if isinstance(completion, str):
        return completion
    return str(completion[-1]["content"])


def make_trl_reward(
    *,
    url: str | None = None,
    client: Client | None = None,
    profile: Profile = "kernel_rl",
    backend: Backend = "triton",
    eval: EvalSettings | None = None,
    ground_truth_column: str = "ground_truth",
    timeout: float | None = None,
) -> Callable[..., list[float | None]]:
    """A TRL reward function (``GRPOTrainer(reward_funcs=[...])``): TRL calls it with the
    ``prompts``, the ``completions`` and every dataset column as keyword arguments, one of
    which (``ground_truth_column``) names each row's problem as ``compute_score``'s
    ``ground_truth`` does. A rollout the service could not evaluate scores None, which TRL
    leaves out of the reward instead of counting it as a failure of the model."""

    def reward(
        prompts: Sequence[Any], completions: Sequence[Any], **columns: Any
    ) -> list[float | None]:
        results = _score_completions(
            [_completion_text(c) for c in completions],
            columns[ground_truth_column],
            url=url,
            client=client,
            profile=profile,
            backend=backend,
            eval=eval,
            timeout=timeout,
        )
        return [r["reward"] for r in results]

    # TRL logs each reward function under its name.
    reward.__name__ = f"crucible_{profile}"
    return reward
