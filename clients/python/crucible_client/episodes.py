"""Kevin-style multi-turn episodes on the server (``POST /episodes``, docs/ENVIRONMENT.md
"Episodes"): ``Episode`` holds one, ``EpisodeGroup`` the ``group_size`` episodes of one problem
a GRPO step samples; ``AsyncEpisode`` / ``AsyncEpisodeGroup`` are the asyncio twins.

The server keeps the episode: each ``step(completion)`` posts the turn, waits for its score and
returns the turn (``reward``, ``feedback``, ``done``, ``next_prompt``, and once done the
discounted ``returns`` of every turn); ``prompt`` is then the next turn's prompt. A turn the
service could not evaluate (``status`` ``failed``: a lost worker, not the model's fault) is
posted again with the same completion, up to ``retries`` times, then ``NotEvaluated`` is
raised. Posting the same completion twice is safe: the server answers the same turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from .env_types import EpisodesStarted, TurnView
from .aio import AsyncClient
from .base import MAX_WAIT_S
from .client import Client
from .errors import NotEvaluated

#: How long ``step`` waits for a turn's evaluation by default, in seconds.
DEFAULT_TURN_TIMEOUT_S = 900.0
#: How many times ``step`` posts a turn again after a service failure.
DEFAULT_RETRIES = 2


class _State:
    """What both flavours track of one episode."""

    def __init__(self, episode_id: str, prompt: str, group_id: str | None) -> None:
        self.id = episode_id
        #: The prompt the model answers next (the first, then each turn's ``next_prompt``).
        self.prompt = prompt
        self.group_id = group_id
        self.turns: list[TurnView] = []
        self.done = False
        #: Once ``done``: the discounted return of every turn.
        self.returns: list[float] | None = None

    @property
    def rewards(self) -> list[float | None]:
        return [t.get("reward") for t in self.turns]

    def _record(self, view: TurnView) -> TurnView:
        self.turns.append(view)
        self.done = view["done"]
        if view.get("next_prompt"):
            self.prompt = view["next_prompt"]["text"]  # type: ignore[index]
        if view.get("returns") is not None:
            self.returns = view["returns"]
        return view

    def _check_open(self) -> None:
        if self.done:
            raise ValueError(f"episode {self.id} is done")


def _not_evaluated(view: TurnView) -> NotEvaluated:
    rollout: Any = view.get("rollout") or {}
    return NotEvaluated(
        f"turn {view['turn']} of episode {view['episode_id']} was not evaluated: "
        f"{rollout.get('error') or rollout.get('status')}"
    )


def feedback_message(first_prompt: str, view: TurnView | dict[str, Any]) -> str:
    """What to tell a model that keeps the conversation after a scored turn: the server's next
    prompt without the first prompt it starts with (the conversation holds that already), else
    the turn's feedback. Shared by the chat adapters (verifiers, OpenRLHF's agent)."""
    next_prompt = (view.get("next_prompt") or {}).get("text")
    if not next_prompt:
        return str(view.get("feedback") or "")
    head = first_prompt.rstrip()
    return next_prompt[len(head):].strip() if next_prompt.startswith(head) else next_prompt


class Episode(_State):
    """One episode, driven with a ``Client``."""

    def __init__(self, client: Client, started: EpisodesStarted, episode_id: str) -> None:
        super().__init__(episode_id, started["prompt"]["text"], started.get("group_id"))
        self.client = client

    @classmethod
    def start(cls, client: Client, **settings: Any) -> Episode:
        """Starts an episode (``Client.start_episode``'s keywords: ``problem`` or
        ``reference_code``, ``profile``, ``max_turns``, ``gamma``, ``eval``, ...)."""
        started = client.start_episode(**settings)
        return cls(client, started, started["episode_id"])

    def step(
        self,
        completion: str,
        *,
        timeout: float = DEFAULT_TURN_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
    ) -> TurnView:
        """Posts the next turn's completion and returns the scored turn."""
        self._check_open()
        turn = len(self.turns)
        deadline = time.monotonic() + timeout
        for _ in range(retries + 1):
            view = self.client.post_turn(
                self.id, completion, turn=turn, wait=min(MAX_WAIT_S, timeout)
            )
            while view["status"] == "pending":
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"turn {turn} of episode {self.id} not scored in time")
                view = self.client.turn(self.id, turn, wait=min(MAX_WAIT_S, left))
            if view["status"] == "scored":
                return self._record(view)
        raise _not_evaluated(view)


class AsyncEpisode(_State):
    """One episode, driven with an ``AsyncClient``."""

    def __init__(self, client: AsyncClient, started: EpisodesStarted, episode_id: str) -> None:
        super().__init__(episode_id, started["prompt"]["text"], started.get("group_id"))
        self.client = client

    @classmethod
    async def start(cls, client: AsyncClient, **settings: Any) -> AsyncEpisode:
        """See ``Episode.start``."""
        started = await client.start_episode(**settings)
        return cls(client, started, started["episode_id"])

    async def step(
        self,
        completion: str,
        *,
        timeout: float = DEFAULT_TURN_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
    ) -> TurnView:
        """See ``Episode.step``."""
        self._check_open()
        turn = len(self.turns)
        deadline = time.monotonic() + timeout
        for _ in range(retries + 1):
            view = await self.client.post_turn(
                self.id, completion, turn=turn, wait=min(MAX_WAIT_S, timeout)
            )
            while view["status"] == "pending":
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"turn {turn} of episode {self.id} not scored in time")
                view = await self.client.turn(self.id, turn, wait=min(MAX_WAIT_S, left))
            if view["status"] == "scored":
                return self._record(view)
        raise _not_evaluated(view)


class _GroupState:
    """What both flavours of group derive from their episodes."""

    episodes: Sequence[_State]

    @property
    def prompts(self) -> list[str | None]:
        """The next prompt of each episode; None for a done one."""
        return [None if e.done else e.prompt for e in self.episodes]

    @property
    def done(self) -> bool:
        return all(e.done for e in self.episodes)

    @property
    def returns(self) -> list[list[float] | None]:
        return [e.returns for e in self.episodes]

    def _check_completions(self, completions: Sequence[str | None]) -> None:
        if len(completions) != len(self.episodes):
            raise ValueError(f"{len(completions)} completions for {len(self.episodes)} episodes")
        for e, c in zip(self.episodes, completions, strict=True):
            if (c is None) != e.done:
                raise ValueError(
                    f"episode {e.id}: give a completion exactly for the episodes not done (None "
                    "for a done one)"
                )


class EpisodeGroup(_GroupState):
    """The ``group_size`` episodes of one problem (a GRPO group), started in one call; they
    share the first prompt. ``step`` takes one completion per episode (None for a done one)."""

    def __init__(self, client: Client, started: EpisodesStarted) -> None:
        self.group_id = started.get("group_id")
        self.episodes: list[Episode] = [Episode(client, started, i) for i in started["episode_ids"]]

    @classmethod
    def start(cls, client: Client, group_size: int, **settings: Any) -> EpisodeGroup:
        """Starts ``group_size`` episodes (``Episode.start``'s keywords)."""
        return cls(client, client.start_episode(group_size=group_size, **settings))

    def step(self, completions: Sequence[str | None], **kwargs: Any) -> list[TurnView | None]:
        """One turn of every open episode (posted one after the other; each evaluates while
        the next is posted only with ``AsyncEpisodeGroup``)."""
        self._check_completions(completions)
        return [
            None if c is None else e.step(c, **kwargs)
            for e, c in zip(self.episodes, completions, strict=True)
        ]


class AsyncEpisodeGroup(_GroupState):
    """See ``EpisodeGroup``; ``step`` runs the group's turns concurrently."""

    def __init__(self, client: AsyncClient, started: EpisodesStarted) -> None:
        self.group_id = started.get("group_id")
        self.episodes: list[AsyncEpisode] = [
            AsyncEpisode(client, started, i) for i in started["episode_ids"]
        ]

    @classmethod
    async def start(
        cls, client: AsyncClient, group_size: int, **settings: Any
    ) -> AsyncEpisodeGroup:
        """See ``EpisodeGroup.start``."""
        return cls(client, await client.start_episode(group_size=group_size, **settings))

    async def step(
        self, completions: Sequence[str | None], **kwargs: Any
    ) -> list[TurnView | None]:
        """See ``EpisodeGroup.step``."""
        self._check_completions(completions)

        async def one(e: AsyncEpisode, c: str | None) -> TurnView | None:
            return None if c is None else await e.step(c, **kwargs)

        return list(
            await asyncio.gather(
                *(one(e, c) for e, c in zip(self.episodes, completions, strict=True))
            )
        )
