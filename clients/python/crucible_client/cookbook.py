"""Kernel-writing environments for tinker_cookbook's RL loop, on the cookbook's own types
(``pip install 'crucible-client[tinker]'``): drift in its interface fails here, at import or in
tests/test_cookbook.py, not in a training run.

``KernelMessageEnv`` is a cookbook ``MessageEnv`` over one ``KernelEnv`` episode (messages in,
the model's assistant message out), and ``KernelEnvGroupBuilder`` an ``EnvGroupBuilder`` whose
``make_envs`` gives one ``EnvFromMessageEnv(renderer, KernelMessageEnv(...))`` per rollout of a
group: the cookbook's own adapter renders the conversation into the renderer's tokens, parses
sampled tokens back, and handles truncated responses, parse errors and context overflow, so
``do_single_rollout`` / ``do_group_rollout`` and the training loop drive it as they drive the
cookbook's environments. Each step is scored by Crucible as one rollout (crucible_client's
``KernelEnv``: the reward under ``profile``, the server's feedback in the next user turn, an
early end at a correct kernel); a step's ``metrics`` (compiled, correct, speedup, verdict
flags, ...) go to the trainer's logs and its ``logs`` carry the verdict and feedback text.

The builder pickles (the cookbook sends builders to rollout workers): it holds the server's
URL, a token, the problem, the settings and the renderer (made by the cookbook's
``get_renderer``, which pickles), never a connection; its client is made in ``make_envs`` and
closed by ``cleanup``, which the cookbook calls after every group.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

try:
    from tinker_cookbook.rl.message_env import EnvFromMessageEnv, MessageEnv, MessageStepResult
    from tinker_cookbook.rl.types import STOP_METRIC_PREFIX, EnvGroupBuilder, StopReason
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "crucible_client.cookbook needs tinker-cookbook: pip install 'crucible-client[tinker]'"
    ) from error

from crucible_client.aio import AsyncClient
from crucible_client.base import ProblemLike
from crucible_client.tinker_env import KernelEnv, group_episodes, group_tags

logger = logging.getLogger(__name__)

#: How much of the server's feedback a step's ``logs`` carry (logs are for display).
FEEDBACK_LOG_CHARS = 2000


def message_text(message: Any) -> str:
    """The text of a renderer's message: its ``content`` as a string, or the text parts of a
    list of content parts (a thinking part included: KernelEnv drops ``<think>`` itself)."""
    content = message.get("content", "") if isinstance(message, dict) else ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content or []:
        if isinstance(part, dict):
            text = part.get("text", part.get("thinking"))
            if isinstance(text, str):
                parts.append(text)
    return "".join(parts)


class KernelMessageEnv(MessageEnv):
    """One episode of a ``KernelEnv`` (chat messages, text actions) as a cookbook
    ``MessageEnv``; single use, like every cookbook environment."""

    def __init__(self, episode: KernelEnv) -> None:
        self.episode = episode
        self.example_id = episode.episode_id
        self.history: list[dict[str, Any]] = []

    async def initial_observation(self) -> list[dict[str, Any]]:
        messages, _ = await self.episode.initial_observation()
        self.history = list(messages)
        return messages

    async def step(self, message: Any) -> MessageStepResult:
        result = await self.episode.step(message_text(message))
        self.history.append({"role": "assistant", "content": message_text(message)})
        if result.episode_done:
            next_messages = list(self.history)
        else:
            next_messages = result.next_observation
            self.history = list(next_messages)
        metrics = {k: float(v) for k, v in result.metrics.items()}
        if result.episode_done:
            reason = StopReason.COMPLETED if metrics.get("solved") else StopReason.MAX_TURNS
            metrics[f"{STOP_METRIC_PREFIX}{reason}"] = 1.0
        turn = self.episode.turns[-1]
        logs: dict[str, str | int | float] = {"turn": len(self.episode.turns) - 1}
        if turn.result is not None:
            logs["feedback"] = str(turn.result.get("feedback") or "")[:FEEDBACK_LOG_CHARS]
            logs["status"] = str(turn.result.get("status") or "")
        return MessageStepResult(
            reward=result.reward,
            episode_done=result.episode_done,
            next_messages=next_messages,
            metrics=metrics,
            logs=logs,
        )


class KernelEnvGroupBuilder(EnvGroupBuilder):
    """``group_size`` episodes on one problem (GRPO centres rewards across the group), each an
    ``EnvFromMessageEnv`` with ``renderer`` (and ``message_env_options``, that class's keyword
    arguments). ``env_options`` are ``KernelEnv``'s (profile, backend, eval, max_turns,
    stop_on_correct, min_speedup, system_prompt, timeout, on_failure, ...); the server is
    ``url`` with ``token``. The first prompt is built (the reference fetched) once a group."""

    def __init__(
        self,
        problem: ProblemLike | None = None,
        *,
        group_size: int,
        renderer: Any,
        url: str,
        token: str | None = None,
        reference_code: str | None = None,
        message_env_options: dict[str, Any] | None = None,
        **env_options: Any,
    ) -> None:
        if group_size < 1:
            raise ValueError("group_size must be at least 1")
        if "client" in env_options:
            raise ValueError("give url (and token), not a client: the builder must pickle")
        self.problem, self.reference_code = problem, reference_code
        self.group_size, self.renderer = group_size, renderer
        self.url, self.token = url, token
        self.message_env_options = dict(message_env_options or {})
        self.env_options = env_options
        self._client: AsyncClient | None = None

    def __getstate__(self) -> dict[str, Any]:
        # A builder sent to a rollout worker makes its own client there.
        return {**self.__dict__, "_client": None}

    async def make_envs(self) -> Sequence[EnvFromMessageEnv]:
        if self._client is None:
            self._client = AsyncClient(self.url, token=self.token)
        episodes = await group_episodes(
            self.problem,
            self.reference_code,
            self.group_size,
            **self.env_options,
            client=self._client,
        )
        return [
            EnvFromMessageEnv(self.renderer, KernelMessageEnv(e), **self.message_env_options)
            for e in episodes
        ]

    async def cleanup(self) -> None:
        """Closes the group's client; safe to call twice, and never raises (the cookbook calls
        it in a ``finally``, where an exception would hide the rollout's own)."""
        client, self._client = self._client, None
        if client is None:
            return
        try:
            await client.aclose()
        except Exception as error:  # noqa: BLE001 - reported, not raised (see above)
            logger.warning("closing the group's Crucible client failed: %s", error)

    def logging_tags(self) -> list[str]:
        return group_tags(self.problem)
