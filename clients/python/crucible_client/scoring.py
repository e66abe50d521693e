"""What the trainer adapters share (``verl_reward``, ``trl_reward``, ``tinker_env``): the problem
a dataset row names, the rollouts of a list of completions, scoring them in one batch (cancelled
when the wait runs out, so the GPUs stop on work nobody will read), and ``on_failure``: what a
rollout the service could not evaluate becomes.

A kernel that fails (does not compile, is wrong, crashes, cheats) has a verdict and a real
reward, and none of this applies to it. ``on_failure`` is for the service failing: a rollout
without a verdict (``failed``, ``cancelled``, ``expired``: lost workers, a sick GPU, a cancel),
or no answer at all after the client's retries (unreachable, overloaded, timed out). A request
the server refuses as malformed (a 4xx other than 429) is a bug, raised whatever the policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import math
import os
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from crucible_client.aio import AsyncClient
from crucible_client.base import DEFAULT_URL, make_rollout
from crucible_client.client import Client
from crucible_client.errors import CrucibleError, NotEvaluated
from crucible_client.types import Backend, EvalSettings, Profile, Rollout, RolloutResult

#: ``raise``: raise (``NotEvaluated`` for rollouts without a verdict, else the client's error);
#: ``nan``: the reward is NaN (for a trainer that masks NaNs); ``zero``: the reward is 0.0 (the
#: model is blamed for the outage: use with care). TRL's adapter also takes ``none``.
OnFailure = Literal["raise", "nan", "zero"]
ON_FAILURE: tuple[str, ...] = ("raise", "nan", "zero")

#: Where the adapters find the server when not told: trainers run reward functions in worker
#: processes that inherit the environment but not the caller's arguments.
URL_ENV = "CRUCIBLE_URL"


def server_url(url: str | None) -> str:
    """``url``, else ``$CRUCIBLE_URL``, else ``http://127.0.0.1:10907``."""
    return url or os.environ.get(URL_ENV, DEFAULT_URL)


@functools.cache
def _shared_client(url: str) -> Client:
    # One connection pool per server for the life of the trainer process: a reward
    # function is called every step, and reconnecting each time is waste.
    return Client(url)


#: An ``httpx.AsyncClient`` belongs to the event loop it first ran in, so the shared async
#: clients are kept per loop (and forgotten with it).
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncClient]] = (
    weakref.WeakKeyDictionary()
)


def sync_client(url: str | None, client: Client | None) -> Client:
    """``client``, or the process's shared client of the server ``url`` names."""
    return client if client is not None else _shared_client(server_url(url))


def async_client(url: str | None, client: AsyncClient | None) -> AsyncClient:
    """``client``, or the running event loop's shared client of the server ``url`` names."""
    if client is not None:
        return client
    per_loop = _async_clients.setdefault(asyncio.get_running_loop(), {})
    base = server_url(url)
    if base not in per_loop:
        per_loop[base] = AsyncClient(base)
    return per_loop[base]


def check_on_failure(on_failure: str, allowed: Sequence[str] = ON_FAILURE) -> str:
    """``on_failure`` if it is one of ``allowed``; ValueError (before anything is sent) if not."""
    if on_failure not in allowed:
        raise ValueError(f"on_failure must be one of {', '.join(allowed)}, not {on_failure!r}")
    return on_failure


def failure_value(on_failure: str) -> float | None:
    """The reward that stands in for a missing verdict under ``on_failure`` (not ``raise``)."""
    return {"nan": math.nan, "zero": 0.0, "none": None}[on_failure]


def is_service_failure(error: BaseException) -> bool:
    """Whether ``error`` is the service failing (no answer, 429 or 5xx after every retry, the
    wait timed out, no verdict) rather than a request it refused as wrong."""
    if isinstance(error, TimeoutError | asyncio.TimeoutError | NotEvaluated):
        return True
    if isinstance(error, CrucibleError):
        return error.status is None or error.status == 429 or error.status >= 500
    return False


#: What scoring raises when the service fails (and also, for a request it refuses, the
#: ``CrucibleError`` that ``reraise_unless_tolerated`` tells apart).
SCORING_ERRORS = (CrucibleError, TimeoutError, asyncio.TimeoutError)


def reraise_unless_tolerated(error: BaseException, on_failure: str) -> None:
    """Raises ``error`` again unless ``on_failure`` tolerates it: a service failure under any
    policy but ``raise``. A tolerated error scores every rollout of the batch as a failure."""
    if on_failure == "raise" or not is_service_failure(error):
        raise error


def plain(value: Any) -> Any:
    """``value`` with every mapping a ``dict`` and every sequence a ``list``, all the way down:
    trainers hand settings over as their own config objects (VERL's ``DictConfig``), which
    JSON does not encode."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [plain(v) for v in value]
    return value


def unevaluated(results: Iterable[RolloutResult]) -> dict[str, str]:
    """Each rollout without a reward (no verdict), by id, with the service's reason."""
    return {r["id"]: r.get("error") or r["status"] for r in results if r.get("reward") is None}


def check_verdicts(results: Iterable[RolloutResult], on_failure: str) -> None:
    """Under ``raise``, NotEvaluated when any of ``results`` has no verdict."""
    missing = unevaluated(results) if on_failure == "raise" else {}
    if missing:
        raise NotEvaluated(missing)


def reward_or_failure(result: RolloutResult | None, on_failure: str) -> float | None:
    """The rollout's reward, or ``on_failure``'s stand-in when it has none (``result`` None:
    the whole batch could not be scored)."""
    reward = result.get("reward") if result is not None else None
    return reward if reward is not None else failure_value(on_failure)


def outcome_metrics(result: RolloutResult | None) -> dict[str, float]:
    """A scored rollout in numbers for a trainer's logs, the same keys whatever happened
    (trainers collect them per key): ``evaluated`` (it has a verdict), ``format_ok``,
    ``compiled``, ``correct`` (verdict ``ok``) and ``speedup`` (0 without one). ``result``
    None: the service could not score it at all."""
    evaluation: Mapping[str, Any] = (result.get("result") if result else None) or {}
    return {
        "evaluated": float(result is not None and result.get("reward") is not None),
        "format_ok": float(bool(result and result["format_ok"])),
        "compiled": float(bool(evaluation.get("compiled"))),
        "correct": float(evaluation.get("verdict") == "ok"),
        "speedup": float(evaluation.get("speedup") or 0.0),
    }


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


def completion_rollouts(
    completions: Iterable[str],
    ground_truths: Iterable[Any],
    *,
    profile: Profile,
    backend: Backend,
) -> list[Rollout]:
    """One rollout per completion, its problem named by the matching ground truth; ids are
    the positions (``"0"``, ``"1"``, ...)."""
    return [
        make_rollout(str(i), text, backend=backend, profile=profile, **problem_target(truth))
        for i, (text, truth) in enumerate(zip(completions, ground_truths, strict=True))
    ]


#: How long a cancel after a timed-out wait may take before it is given up on.
CANCEL_WAIT_S = 10.0


def score(
    client: Client,
    rollouts: Sequence[Rollout],
    eval: EvalSettings | None,
    timeout: float | None,
) -> list[RolloutResult]:
    """Scores ``rollouts`` in one submission and returns their results in order. When the
    wait runs out (TimeoutError) the submission's batches are cancelled first: nobody will
    read their results."""
    if not rollouts:
        return []
    submission = client.submit_rollouts(rollouts, eval)
    try:
        results = client.wait_results(submission, timeout=timeout)
    except TimeoutError:
        for batch_id in submission.batch_ids:
            # The wait's error is the one to report; the server answered it a moment ago.
            with contextlib.suppress(CrucibleError):
                client.cancel_batch(batch_id)
        raise
    return [results[r["id"]] for r in rollouts]


async def score_async(
    client: AsyncClient,
    rollouts: Sequence[Rollout],
    eval: EvalSettings | None,
    timeout: float | None,
) -> list[RolloutResult]:
    """``score`` for asyncio."""
    if not rollouts:
        return []
    submission = await client.submit_rollouts(rollouts, eval)
    try:
        results = await client.wait_results(submission, timeout=timeout)
    except TimeoutError:
        for batch_id in submission.batch_ids:
            # asyncio's TimeoutError is not the builtin one before Python 3.11.
            with contextlib.suppress(CrucibleError, TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(client.cancel_batch(batch_id), CANCEL_WAIT_S)
        raise
    return [results[r["id"]] for r in rollouts]
