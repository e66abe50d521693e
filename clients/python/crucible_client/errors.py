"""The exceptions the client raises: the service's error answers, rollouts without a verdict,
and an evaluation that outlasted the caller's ``timeout``."""

from __future__ import annotations


class CrucibleError(Exception):
    """An error answer of the service, or no usable answer after every retry.

    The service answers errors as ``{code, message, field}`` (``code`` e.g. ``VALIDATION``,
    ``NOT_FOUND``, ``QUEUE_FULL``, ``QUOTA_EXCEEDED``, ``UNAUTHORIZED`` for a missing or bad
    token); they are kept here so a trainer can tell a request it must fix (``status`` 4xx
    other than 429) from an outage it outlived its retries on (429, 5xx, or ``status`` None
    when the server could not be reached at all: ``code`` ``UNREACHABLE``).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str | None = None,
        field: str | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.field = field
        self.attempts = attempts

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        status = f"HTTP {self.status}" if self.status is not None else "no answer"
        tries = f" after {self.attempts} attempts" if self.attempts > 1 else ""
        return f"{status} {self.code or 'ERROR'}: {self.message}{where}{tries}"


class NotEvaluated(CrucibleError):
    """The service could not produce a verdict for some rollouts (status ``failed``,
    ``cancelled`` or ``expired``: a lost worker, a sick GPU, a cancel), so they have no reward.
    Raised by the trainer adapters under ``on_failure="raise"``; ``rollouts`` maps each such
    rollout's id to the service's reason."""

    def __init__(self, rollouts: dict[str, str]) -> None:
        shown = "; ".join(f"{id}: {why}" for id, why in list(rollouts.items())[:5])
        more = f" (and {len(rollouts) - 5} more)" if len(rollouts) > 5 else ""
        super().__init__(
            f"{len(rollouts)} rollout(s) got no verdict: {shown}{more}", code="NOT_EVALUATED"
        )
        self.rollouts = rollouts

    def __str__(self) -> str:
        return f"NOT_EVALUATED: {self.message}"


class TaskTimeout(TimeoutError):
    """``evaluate``'s ``timeout`` ran out before its task finished. The task goes on on the
    server, so ``task_id`` names it: read it later (``task(task_id, wait=...)``) or stop it
    (``cancel_task(task_id)``). A ``TimeoutError``, so code that catches those still does."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"task {task_id} did not finish in time; it goes on on the server")
        self.task_id = task_id

    def __reduce__(self) -> tuple[type[TaskTimeout], tuple[str]]:
        # Rebuilt from the id (a trainer's worker processes pickle what they raise), not from
        # the message that ``args`` holds.
        return (type(self), (self.task_id,))
