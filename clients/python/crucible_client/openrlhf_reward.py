"""OpenRLHF's custom reward function: ``reward_func(queries, prompts, labels)``, for
``--reward.remote_url <this file>`` (OpenRLHF 0.11's spelling; older versions spelled it
``--remote_rm_url``).

How OpenRLHF 0.11.2 calls it (``openrlhf/utils/agent.py``, ``SingleTurnAgentExecutor``): a
``remote_url`` ending in ``.py`` is loaded with ``importlib.util.spec_from_file_location`` and
its ``reward_func`` kept (``__init__``, lines 191-205); after each generation, ``execute``
(lines 286-302) calls it through ``_fetch_rewards_via_func`` as
``asyncio.to_thread(reward_func, [query], [prompt], [label])`` (line 318: positional,
synchronous, one sample a call), where ``query`` is the decoded prompt and response tokens
(special tokens kept) and ``label`` the dataset's ``--data.label_key`` column. It reads the
returned dict's ``rewards`` (the reward), ``scores`` (for dynamic filtering, "binary score",
``experience.py`` line 58; ``rewards`` when absent) and ``extra_logs`` (each value logged,
``samples_generator.py`` lines 289-293), and wraps ``rewards`` and ``scores`` as
``torch.tensor([value])`` (lines 284-286). An exception ``reward_func`` raises is logged
(``agent.py`` lines 303-304) and the sample is left without a reward.

So ``reward_func`` returns ``{"rewards": tensor, "scores": tensor, "extra_logs": {name:
tensor}}``, one float per query: the Crucible reward of the completion, whether it is correct
(verdict ``ok``: the binary score), and ``outcome_metrics``' numbers. The label names the
problem as VERL's ``ground_truth`` does (``{"level", "id"}``, that as JSON, or the reference
source); the completion is the query after its prompt. A batch is one ``POST /rollouts``.

OpenRLHF passes nothing else, so ``reward_func`` is configured by the environment (the Ray
workers inherit it): ``CRUCIBLE_URL``, ``CRUCIBLE_TOKEN``, ``CRUCIBLE_PROFILE`` (kernel_rl),
``CRUCIBLE_BACKEND`` (triton), ``CRUCIBLE_EVAL`` (the evaluation settings as JSON),
``CRUCIBLE_TIMEOUT`` (seconds) and ``CRUCIBLE_ON_FAILURE`` (``raise``, ``nan`` or ``zero``;
see ``scoring``). For settings in code, write a file with
``reward_func = make_reward_func(profile="kevin", ...)``. OpenRLHF loads the file by path,
outside its package, so the imports here are absolute and need the package installed.

Tested through OpenRLHF's own loader and ``SingleTurnAgentExecutor.execute`` (openrlhf 0.11.2
installed without its GPU-only dependencies): ``tests/test_openrlhf.py``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from crucible_client.client import Client
from crucible_client.scoring import (
    SCORING_ERRORS,
    check_on_failure,
    check_verdicts,
    completion_rollouts,
    outcome_metrics,
    plain,
    reraise_unless_tolerated,
    reward_or_failure,
    score,
    sync_client,
)
from crucible_client.types import Backend, EvalSettings, Profile, RolloutResult

#: How much of a prompt's end finds the completion in a query that does not start with the
#: prompt (OpenRLHF cuts over-long prompts on the left; decoding may respace the start).
PROMPT_TAIL_CHARS = 200

RewardFunc = Callable[[Sequence[str], Sequence[str], Sequence[Any]], dict[str, Any]]


def completion_of(query: str, prompt: str) -> str:
    """The completion in ``query`` (the prompt, then the response): what follows the prompt,
    or, when the query does not start with it, the first occurrence of its last
    ``PROMPT_TAIL_CHARS`` characters. ValueError when neither is there."""
    if query.startswith(prompt):
        return query[len(prompt):]
    tail = prompt[-PROMPT_TAIL_CHARS:]
    at = query.find(tail) if tail else -1
    if at < 0:
        raise ValueError(
            f"the query does not hold the end of its prompt ({tail[-60:]!r}): "
            "pass reward_func OpenRLHF's (queries, prompts, labels)"
        )
    return query[at + len(tail):]


def _tensor(values: list[float]) -> Any:
    # OpenRLHF always has torch; importing it here keeps the module importable without it.
    import torch

    return torch.tensor(values, dtype=torch.float32)


def _answer(results: list[RolloutResult | None], on_failure: str) -> dict[str, Any]:
    rewards = [reward_or_failure(r, on_failure) for r in results]
    # None only under TRL's "none", which check_on_failure refused.
    assert all(r is not None for r in rewards)
    rows = [outcome_metrics(r) for r in results]
    extra = {f"crucible/{key}": _tensor([row[key] for row in rows]) for key in rows[0]}
    return {
        "rewards": _tensor([float(r) for r in rewards]),  # type: ignore[arg-type]
        "scores": _tensor([row["correct"] for row in rows]),
        "extra_logs": extra,
    }


def make_reward_func(
    *,
    url: str | None = None,
    client: Client | None = None,
    profile: Profile = "kernel_rl",
    backend: Backend = "triton",
    eval: EvalSettings | None = None,
    timeout: float | None = None,
    on_failure: str = "raise",
) -> RewardFunc:
    """A ``reward_func(queries, prompts, labels)`` with these settings: ``url`` (else
    ``$CRUCIBLE_URL``) or ``client``, the reward ``profile``, ``eval`` (the evaluation
    settings), ``timeout`` (the batch's wait, then it is cancelled) and ``on_failure`` (what a
    completion the service could not evaluate scores: ``raise``, ``nan`` or ``zero``)."""
    policy = check_on_failure(on_failure)
    settings = plain(eval)

    def reward_func(
        queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any
    ) -> dict[str, Any]:
        if not len(queries) == len(prompts) == len(labels):
            raise ValueError(f"{len(queries)} queries, {len(prompts)} prompts and "
                             f"{len(labels)} labels: give one of each per sample")
        if not queries:
            raise ValueError("no queries to score")
        completions = [completion_of(q, p) for q, p in zip(queries, prompts, strict=True)]
        rollouts = completion_rollouts(completions, labels, profile=profile, backend=backend)
        try:
            results: list[RolloutResult | None] = list(
                score(sync_client(url, client), rollouts, settings, timeout))
        except SCORING_ERRORS as error:
            reraise_unless_tolerated(error, policy)
            results = [None] * len(rollouts)
        check_verdicts([r for r in results if r is not None], policy)
        return _answer(results, policy)

    return reward_func


def _environment_settings() -> dict[str, Any]:
    """``make_reward_func``'s settings from the environment (see the module's documentation);
    read on each call, so a change made after import counts."""
    settings: dict[str, Any] = {
        "profile": os.environ.get("CRUCIBLE_PROFILE", "kernel_rl"),
        "backend": os.environ.get("CRUCIBLE_BACKEND", "triton"),
        "on_failure": os.environ.get("CRUCIBLE_ON_FAILURE", "raise"),
    }
    if os.environ.get("CRUCIBLE_EVAL"):
        try:
            settings["eval"] = json.loads(os.environ["CRUCIBLE_EVAL"])
        except ValueError as error:
            raise ValueError(f"CRUCIBLE_EVAL is not JSON: {error}") from None
    if os.environ.get("CRUCIBLE_TIMEOUT"):
        settings["timeout"] = float(os.environ["CRUCIBLE_TIMEOUT"])
    return settings


def reward_func(
    queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any
) -> dict[str, Any]:
    """What OpenRLHF calls: the rewards of ``queries`` (each its prompt and completion) under
    the settings of the environment (``CRUCIBLE_*``, see the module's documentation)."""
    return make_reward_func(**_environment_settings())(queries, prompts, labels)
