"""What the synchronous and asynchronous clients share: defaults, request bodies, the batching
of rollouts, the decoding of answers and errors, and ``_Base`` (the retry policy). Each class
only sends, sleeps and waits in its own way (``client.Client``, ``aio.AsyncClient``).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import httpx

from .errors import CrucibleError, TaskTimeout
from .retry import R, RetryPolicy, retrying
from .types import (
    Backend,
    EvalSettings,
    ProblemRef,
    Profile,
    Rollout,
    RolloutBatchResponse,
    Timing,
    TimingMode,
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


def timing_body(timing: Timing | str | None) -> Timing | None:
    """A request's ``timing`` from ``"fixed"`` / ``"adaptive"`` (the server's defaults for the
    rest) or a ``Timing`` mapping, passed on as it is; None leaves the field out (fixed)."""
    if timing is None:
        return None
    if isinstance(timing, str):
        return {"mode": cast(TimingMode, timing)}
    return dict(timing)  # type: ignore[return-value]


def _evaluate_body(
    reference_code: str | None,
    kernel_code: str,
    problem: ProblemLike | None,
    backend: Backend,
    opts: Mapping[str, Any],
    timing: Timing | str | None = None,
) -> dict[str, Any]:
    if (problem is None) == (reference_code is None):
        raise ValueError("give exactly one of reference_code and problem")
    body: dict[str, Any] = {"kernel_code": kernel_code, "backend": backend, **opts}
    if timing is not None:
        body["timing"] = timing_body(timing)
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


def _submission(key: str, answers: Sequence[RolloutBatchResponse]) -> Submission:
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


def _problem_set_selection(
    level: int | None,
    start: int | None,
    end: int | None,
    backend: Backend | None,
    test_fraction: float | None,
    seed: int | None,
) -> dict[str, Any]:
    """A problem set's selection with the keys given: the server fills in its defaults (they
    are written once, there)."""
    given = {
        "level": level,
        "start": start,
        "end": end,
        "backend": backend,
        "test_fraction": test_fraction,
        "seed": seed,
    }
    return {k: v for k, v in given.items() if v is not None}


def _problem_batch_body(
    epoch: int,
    step: int,
    selection: Mapping[str, Any],
    split: str | None,
    batch_size: int | None,
    group_size: int | None,
    shuffle: bool | None,
) -> dict[str, Any]:
    optional = {
        "split": split,
        "batch_size": batch_size,
        "group_size": group_size,
        "shuffle": shuffle,
    }
    body: dict[str, Any] = {"set": dict(selection), "epoch": epoch, "step": step}
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def _batch_params(include_tasks: bool) -> dict[str, str]:
    return {"include": "tasks"} if include_tasks else {}


def _check_wait(wait: float) -> float:
    if not 0 <= wait <= MAX_WAIT_S:
        raise ValueError(f"wait must be within 0-{MAX_WAIT_S:g} s, not {wait}")
    return wait


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _poll_wait(
    wait: float, deadline: float | None, what: str = "", *, task_id: str | None = None
) -> float:
    """How long the next long-poll may wait: ``wait``, cut to the time left before
    ``deadline``; TimeoutError once there is none, saying ``what`` did not finish: for
    ``evaluate``'s task ``task_id``, a TaskTimeout naming it."""
    if deadline is None:
        return wait
    left = deadline - time.monotonic()
    if left <= 0:
        if task_id is not None:
            raise TaskTimeout(task_id)
        raise TimeoutError(f"{what} did not finish in time")
    return min(wait, left)


def _submit_wait(wait: float, deadline: float | None) -> float:
    """How long ``evaluate``'s submission may wait for the verdict: ``wait`` cut to the time
    left, never below 0, so that the task is submitted whatever the ``timeout`` and a timeout
    always has a task id to give (TaskTimeout)."""
    _check_wait(wait)
    return wait if deadline is None else max(0.0, min(wait, deadline - time.monotonic()))


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

    def _retrying(self, answers: frozenset[int], kind: type[R]) -> R:
        """The retries of one request whose answers are ``answers`` (``retry.retrying``)."""
        return retrying(self._retry, answers, _exhausted, kind)


def _episode_body(
    *,
    problem: ProblemLike | None,
    reference_code: str | None,
    profile: Profile,
    backend: Backend,
    weights: Weights | None,
    prompt_option: str,
    thinking: bool | None,
    max_turns: int | None,
    gamma: float | None,
    early_stop_on_correct: bool,
    speedup_threshold: float | None,
    eval: EvalSettings | None,
    group_size: int | None,
) -> dict[str, Any]:
    """The body of ``POST /episodes``; the server's defaults fill what is left out (max_turns
    4, gamma 0.4)."""
    if (problem is None) == (reference_code is None):
        raise ValueError("give exactly one of problem and reference_code")
    body: dict[str, Any] = {
        "profile": profile,
        "backend": backend,
        "prompt_option": prompt_option,
        "early_stop_on_correct": early_stop_on_correct,
    }
    if problem is not None:
        body["problem"] = problem_ref(problem)
    else:
        body["reference_code"] = reference_code
    optional = {
        "weights": weights,
        "thinking": thinking,
        "max_turns": max_turns,
        "gamma": gamma,
        "speedup_threshold": speedup_threshold,
        "eval": eval,
        "group_size": group_size,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def _turn_body(completion: str, turn: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {"completion": completion}
    if turn is not None:
        body["turn"] = turn
    return body


def _prompt_body(
    problem: ProblemLike | None,
    reference_code: str | None,
    option: str,
    backend: str,
    thinking: bool,
    k: int | None,
) -> dict[str, Any]:
    """The ``POST /prompts`` body: exactly one of ``problem`` and ``reference_code``."""
    if (problem is None) == (reference_code is None):
        raise ValueError("give exactly one of problem and reference_code")
    settings: dict[str, Any] = {"option": option, "backend": backend, "thinking": thinking}
    if k is not None:
        settings["k"] = k
    body: dict[str, Any] = {"settings": settings}
    if problem is not None:
        body["problem"] = problem_ref(problem)
    else:
        body["reference_code"] = reference_code
    return body
