"""When and how long to wait before trying a request again.

A trainer must ride out a full queue (429), a restarting API or broker (502-504) and dropped
connections without mistaking them for a kernel's failure, and without hammering a service
that is already overloaded: exponential backoff with full jitter, bounded both in attempts
and in total time. Retrying is safe because every ``POST`` the client sends carries an
idempotency key, so a request that did arrive before its answer was lost is not run twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import tenacity
from tenacity import RetryCallState

#: Statuses that say "not now" rather than "not this request". 429: the queue is at its cap;
#: 503: the broker is unreachable; 502/504: a proxy in front of the API lost it.
RETRYABLE_STATUS = frozenset({429, 502, 503, 504})

#: Failures of the connection itself, where the request may or may not have arrived. An
#: invalid URL or an unsupported scheme is not among them: no retry would fix it.
RETRYABLE_ERRORS = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds of the retries of one request.

    ``max_attempts`` counts the first try; ``deadline_s`` bounds the time from the first try
    to the start of the last one (None: attempts alone bound it). The delay before attempt
    ``n + 1`` is drawn uniformly from ``[0, min(max_delay_s, base_delay_s * 2**(n - 1))]``
    ("full jitter"), so many trainers backing off from the same full queue do not come back
    in step.
    """

    max_attempts: int = 8
    base_delay_s: float = 0.5
    max_delay_s: float = 20.0
    deadline_s: float | None = 300.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise ValueError("delays must not be negative")

    def backoff_cap(self, attempt: int) -> float:
        """The longest delay after failed attempt number ``attempt`` (1-based)."""
        return tenacity.wait_exponential(multiplier=self.base_delay_s, max=self.max_delay_s)(
            _probe(attempt, 0.0)
        )

    def next_delay(
        self, attempt: int, elapsed_s: float, retry_after_s: float | None = None
    ) -> float | None:
        """Seconds to wait after failed attempt ``attempt``, ``elapsed_s`` after the first
        began, never less than the server's ``Retry-After`` (``retry_after_s``); None when the
        policy gives up. The same strategies as the clients' retries (``retrying``)."""
        state = _probe(attempt, elapsed_s)
        state.upcoming_sleep = max(self._jittered(state), retry_after_s or 0.0)
        return None if self._stop()(state) else state.upcoming_sleep

    def _jittered(self, state: RetryCallState) -> float:
        return tenacity.wait_random_exponential(
            multiplier=self.base_delay_s, max=self.max_delay_s
        )(state)

    def _wait(self, state: RetryCallState) -> float:
        """The full-jitter backoff, never less than the last refusal's ``Retry-After``."""
        outcome = state.outcome
        last = None if outcome is None or outcome.failed else outcome.result()
        asked = retry_after_seconds(last) if isinstance(last, httpx.Response) else None
        return max(self._jittered(state), asked or 0.0)

    def _stop(self) -> tenacity.stop.stop_base:
        stop = tenacity.stop_after_attempt(self.max_attempts)
        if self.deadline_s is not None:
            stop = stop | tenacity.stop_before_delay(self.deadline_s)
        return stop


def _probe(attempt: int, elapsed_s: float) -> RetryCallState:
    """A tenacity state as it stands after failed attempt ``attempt``, ``elapsed_s`` after the
    first began: what ``RetryPolicy``'s questions are asked of."""
    state = RetryCallState(tenacity.Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    state.outcome_timestamp = state.start_time + elapsed_s
    return state


R = TypeVar("R", bound=tenacity.BaseRetrying)


def retrying(
    policy: RetryPolicy,
    answers: frozenset[int],
    give_up: Callable[[httpx.Response | BaseException, int], Exception],
    kind: type[R],
) -> R:
    """The retries of one request under ``policy`` (``kind``: ``tenacity.Retrying`` or
    ``tenacity.AsyncRetrying``): again on a retryable status that is not among ``answers`` or a
    connection failure; once the policy gives up, ``give_up(last outcome, attempts)`` is
    raised. Any other outcome is returned (or raised) as it is."""

    def refused(response: Any) -> bool:
        return (
            isinstance(response, httpx.Response)
            and response.status_code not in answers
            and response.status_code in RETRYABLE_STATUS
        )

    def exhausted(state: RetryCallState) -> Any:
        outcome = state.outcome
        assert outcome is not None  # tenacity gives up only after an attempt
        last = outcome.exception() if outcome.failed else outcome.result()
        raise give_up(last, state.attempt_number)

    return kind(
        stop=policy._stop(),
        wait=policy._wait,
        retry=tenacity.retry_if_exception_type(RETRYABLE_ERRORS) | tenacity.retry_if_result(refused),
        retry_error_callback=exhausted,
    )


#: Most a ``Retry-After`` may make a client wait: a header asking for more is capped here.
MAX_RETRY_AFTER_S = 60.0


def retry_after_seconds(response: httpx.Response) -> float | None:
    """The seconds a response's ``Retry-After`` asks for, when it is a number of seconds (the
    form the API sends; an HTTP date is left to the backoff), capped at MAX_RETRY_AFTER_S."""
    value = response.headers.get("retry-after", "").strip()
    if not value.isdigit():
        return None
    return min(float(value), MAX_RETRY_AFTER_S)


#: What the clients use unless told otherwise.
DEFAULT_RETRY = RetryPolicy()
