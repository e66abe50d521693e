"""How each client reads several rollout batches at once: the one part of ``AsyncClient`` and
``Client`` that is not the same code (``client.py`` is generated from ``aio.py``). asyncio
long-polls every open batch at the same time; the blocking client polls them in turn, each for
at most ``_SHARED_POLL_S`` while others are open, since one thread can wait on one at a time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from .base import _SHARED_POLL_S, _poll_wait
from .types import RolloutResult, RolloutResultsPage


class AsyncPolls:
    """``AsyncClient``'s: results in completion order across batches too."""

    _results_page: Callable[[str, int, float, int], Awaitable[RolloutResultsPage]]

    async def _poll_batches(
        self, cursors: dict[str, int], wait: float, deadline: float | None, limit: int
    ) -> AsyncIterator[RolloutResult]:
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


class SyncPolls:
    """``Client``'s: one batch after another, each for at most a second while others are open."""

    _results_page: Callable[[str, int, float, int], RolloutResultsPage]

    def _poll_batches(
        self, cursors: dict[str, int], wait: float, deadline: float | None, limit: int
    ) -> Iterator[RolloutResult]:
        open_batches = list(cursors)
        while open_batches:
            per_poll = wait if len(open_batches) == 1 else min(wait, _SHARED_POLL_S)
            for batch_id in list(open_batches):
                poll = _poll_wait(per_poll, deadline, f"batch {batch_id}")
                page = self._results_page(batch_id, cursors[batch_id], poll, limit)
                cursors[batch_id] = page["cursor"]
                yield from page["results"]
                if page["done"]:
                    open_batches.remove(batch_id)
