"""A SkyRL-Gym text environment over Crucible, on skyrl-gym's own ``BaseTextEnv``
(``pip install 'crucible-client[skyrl]'``).

``KernelTextEnv`` is made as SkyRL makes every environment, ``skyrl_gym.make(env_class,
env_config=..., extras=...)`` once ``register()`` has named it (``crucible_kernel`` by default):
``extras`` is the dataset row's (its ``reward_spec.ground_truth`` names the problem:
``{"level", "id"}``, that as JSON, or the reference source), ``env_config`` the environment's
section of SkyRL's config (``url``, ``token``, ``profile``, ``backend``, ``eval``,
``max_turns``, ``stop_on_correct``, ``min_speedup``, ``timeout``, ``on_failure``). Each
``step`` scores the completion as one Crucible rollout (the episode of crucible_client's
``KernelEnv``): its reward, ``done`` at a correct kernel or after ``max_turns``, and otherwise
one new user message with the server's feedback (SkyRL keeps the conversation itself);
``metadata`` carries the step's numbers and ``get_metrics`` the episode's.

SkyRL calls ``step`` synchronously, from its event loop's thread or a worker's: each
environment scores on an event loop of its own, in a thread, closed by ``close``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

try:
    import skyrl_gym
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "crucible_client.skyrl needs skyrl-gym: pip install 'crucible-client[skyrl]'"
    ) from error

from crucible_client.aio import AsyncClient
from crucible_client.scoring import outcome_metrics, problem_target
from crucible_client.tinker_env import KernelEnv

#: The id ``register()`` gives the environment by default.
ENV_ID = "crucible_kernel"
#: ``env_config`` keys passed on to ``KernelEnv`` as they are.
EPISODE_OPTIONS = ("profile", "backend", "eval", "max_turns", "gamma", "stop_on_correct",
                   "min_speedup", "feedback_template", "on_failure", "timeout")
T = TypeVar("T")


def register(env_id: str = ENV_ID) -> str:
    """Names ``KernelTextEnv`` in skyrl_gym's registry (``env_class`` in SkyRL's dataset)."""
    if env_id not in skyrl_gym.envs.registration.registry:
        skyrl_gym.register(id=env_id, entry_point=f"{__name__}:KernelTextEnv")
    return env_id


def _config(env_config: Any) -> dict[str, Any]:
    """SkyRL's config section (an OmegaConf node or a mapping) as a plain dict."""
    if env_config is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(env_config):
            return dict(OmegaConf.to_container(env_config, resolve=True))
    except ImportError:  # pragma: no cover - skyrl-gym depends on omegaconf
        pass
    return dict(env_config)


def _last_user_text(prompt: Any) -> str | None:
    for message in reversed(prompt or []):
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content", ""))
    return None


class KernelTextEnv(BaseTextEnv):
    """One episode of attempts at one problem, as a SkyRL-Gym text environment."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        config, extras = _config(env_config), dict(extras or {})
        spec = extras.get("reward_spec") or {}
        if "ground_truth" not in spec:
            raise ValueError("extras.reward_spec.ground_truth must name the problem")
        self.target = problem_target(spec["ground_truth"])
        if "url" not in config:
            raise ValueError("env_config.url must name the Crucible server")
        self.url, self.token = str(config["url"]), config.get("token")
        self.options = {k: config[k] for k in EPISODE_OPTIONS if k in config}
        self.max_turns = int(self.options.get("max_turns", 4))
        self.episode: KernelEnv | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="crucible-skyrl-env")
        self._thread.start()
        self._client: AsyncClient | None = None

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    async def _start(self, prompt_text: str | None) -> None:
        self._client = AsyncClient(self.url, token=self.token)
        problem = self.target.get("problem")
        self.episode = KernelEnv(
            problem,
            reference_code=self.target.get("reference_code"),
            prompt=prompt_text,
            client=self._client,
            **self.options,
        )
        await self.episode.initial_observation()

    def init(self, prompt: Any) -> tuple[Any, dict[str, Any]]:
        """The dataset's prompt, as it is (its last user message is the problem's prompt that
        the feedback turns repeat)."""
        self._run(self._start(_last_user_text(prompt)))
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        if self.episode is None:
            raise RuntimeError("init() first")
        result = self._run(self.episode.step(action))
        self.turns = len(self.episode.turns)
        observations = [] if result.episode_done else [result.next_observation[-1]]
        return BaseTextEnvStepOutput(
            observations=observations,
            reward=float(result.reward),
            done=result.episode_done,
            metadata={**result.metrics, **result.logs},
        )

    def get_metrics(self) -> dict[str, Any]:
        """The episode: turns taken, whether it was solved, its last and best rewards."""
        if self.episode is None or not self.episode.turns:
            return {}
        scores = self.episode.step_scores
        solved = any(outcome_metrics(t.result)["correct"] for t in self.episode.turns)
        return {"turns": len(scores), "solved": float(solved), "final_reward": scores[-1],
                "best_reward": max(scores)}

    def close(self) -> None:
        """Closes the client and the environment's event loop; safe to call twice."""
        if self._loop.is_closed():
            return
        client, self._client = self._client, None
        if client is not None:
            self._run(client.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()
