"""A Crucible episode as a TRL environment (``GRPOTrainer(environment_factory=...)``, TRL 1.16;
needs transformers 5.2 or later and a chat template that can call tools).

TRL makes one environment per rollout (pooled, ``reset`` between rollouts) and offers its
public methods to the model as tools. ``KernelEnvironment``:

- ``reset(**row)`` gets the dataset row: its ``ground_truth`` column (``ground_truth_column``)
  names the problem (``{"level", "id"}``, that as JSON, or the reference source), and a
  Crucible episode is started on it. It returns nothing (the row's prompt is the task), or,
  with ``prompt="server"``, the episode's first prompt, which TRL appends to the row's last
  user message.
- ``submit_kernel(code)`` is the tool: it posts the code as the episode's next turn (in the
  answer format the server reads: ``<KERNEL>`` and a fenced block), waits for its score and
  returns the server's feedback, which TRL gives back to the model as the tool's answer. Once
  the episode is done (max turns, or the first correct kernel) a further call is not posted.
- ``get_reward()`` is the rollout's reward: the episode's discounted return from the first
  turn, ``R_0 = s_0 + γ·s_1 + ...`` (``reward="return"``, the default, as the VERL agent loop:
  solving sooner scores more), or the last turn's reward (``reward="final"``); 0.0 when the
  model never submitted a kernel (the server scores an answer without one 0.0 too). TRL logs
  it under ``rewards/KernelEnvironment`` and adds it to ``reward_funcs``' (which may be empty).

A turn the service could not evaluate (lost workers, an outage: not the model's fault) makes
``get_reward`` answer ``None`` by default (``on_failure="none"``): TRL leaves the rollout out
of its group's baseline, as with ``make_trl_reward``; ``"raise"`` stops the step. The tool
tells the model the turn was not evaluated.

TRL calls the tool and ``reset`` from its training loop's thread, so this environment is
synchronous (a ``Client``); TRL runs one rollout's tool calls after another's anyway.
``KernelEnvironment.factory(url=..., ...)`` is the zero-argument callable TRL wants.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from crucible_client.client import Client
from crucible_client.episodes import DEFAULT_RETRIES, DEFAULT_TURN_TIMEOUT_S, Episode
from crucible_client.returns import discounted_returns
from crucible_client.scoring import (
    SCORING_ERRORS,
    check_on_failure,
    is_service_failure,
    plain,
    problem_target,
    server_url,
    sync_client,
)
from crucible_client.types import Backend, EvalSettings, Profile

REWARDS = ("return", "final")
PROMPTS = ("dataset", "server")
#: What ``get_reward`` does after a turn the service could not evaluate.
ENV_ON_FAILURE = ("none", "raise")


def kernel_answer(code: str) -> str:
    """``code`` in the answer format the server's reward parser reads."""
    return f"<KERNEL>\n```python\n{code.rstrip()}\n```\n"


class KernelEnvironment:
    """One Crucible episode per rollout, for TRL's ``environment_factory`` (see the module's
    documentation). Only ``reset``, ``get_reward`` and the tool ``submit_kernel`` are
    public: TRL offers every other public method to the model as a tool."""

    def __init__(
        self,
        *,
        url: str | None = None,
        token: str | None = None,
        client: Client | None = None,
        profile: Profile = "kernel_rl",
        backend: Backend = "triton",
        eval: EvalSettings | None = None,
        prompt_option: str = "zero_shot",
        max_turns: int | None = None,
        gamma: float | None = None,
        early_stop_on_correct: bool = True,
        ground_truth_column: str = "ground_truth",
        prompt: str = "dataset",
        reward: str = "return",
        turn_timeout: float = DEFAULT_TURN_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        on_failure: str = "none",
    ) -> None:
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, not {reward!r}")
        if prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {', '.join(PROMPTS)}, not {prompt!r}")
        self._on_failure = check_on_failure(on_failure, ENV_ON_FAILURE)
        # TRL pools many environments: they share the process's client of the server unless
        # a token (or a client) of their own is given.
        if client is None and token is not None:
            client = Client(server_url(url), token=token)
        self._client = sync_client(url, client)
        self._settings: dict[str, Any] = {
            "profile": profile,
            "backend": backend,
            "eval": plain(eval),
            "prompt_option": prompt_option,
            "max_turns": max_turns,
            "gamma": gamma,
            "early_stop_on_correct": early_stop_on_correct,
        }
        self._column, self._prompt, self._reward = ground_truth_column, prompt, reward
        self._turn_timeout, self._retries = turn_timeout, retries
        self._episode: Episode | None = None
        self._gamma = 0.0
        self._failed = False

    @classmethod
    def factory(cls, **settings: Any) -> Callable[[], KernelEnvironment]:
        """The zero-argument callable TRL's ``environment_factory`` takes (``settings`` are the
        constructor's); checked once here, so a wrong setting fails before training."""
        cls(**settings)
        return functools.partial(cls, **settings)

    @property
    def episode_id(self) -> str | None:
        """The current rollout's episode (``GET /episodes/{id}`` reads it)."""
        return self._episode.id if self._episode is not None else None

    def reset(self, **row: Any) -> str | None:
        """Starts the rollout's episode on the problem the row names."""
        if self._column not in row:
            raise KeyError(
                f"no dataset column {self._column!r} names the problem (columns: {sorted(row)}); "
                "set ground_truth_column"
            )
        target = problem_target(row[self._column])
        started = self._client.start_episode(**target, **self._settings)
        self._episode = Episode(self._client, started, started["episode_id"])
        self._gamma, self._failed = float(started["gamma"]), False
        return self._episode.prompt if self._prompt == "server" else None

    def submit_kernel(self, code: str) -> str:
        """Evaluates a kernel for the problem: builds it, checks its outputs against the
        reference model and times it.

        Args:
            code: The complete Python source of the implementation: a class ModelNew with the
                same constructor and forward signature as the reference Model.

        Returns:
            The evaluation's feedback, and whether the episode is over.
        """
        episode = self._episode
        if episode is None:
            raise RuntimeError("reset() first")
        if episode.done:
            return "The episode is over: no further kernel is evaluated."
        try:
            view = episode.step(
                kernel_answer(code), timeout=self._turn_timeout, retries=self._retries
            )
        except SCORING_ERRORS as error:
            if not is_service_failure(error):
                raise  # a request the server refused as wrong is a bug, not the model's turn
            self._failed = True
            return f"The kernel could not be evaluated (a service failure): {error}"
        state = "The episode is over." if view["done"] else "You may submit an improved kernel."
        return f"Turn {view['turn']} scored {view['reward']:.3f}.\n{view['feedback']}\n{state}"

    def get_reward(self) -> float | None:
        """The rollout's reward (see the module's documentation)."""
        if self._failed:
            if self._on_failure == "raise":
                raise RuntimeError(f"episode {self.episode_id}: a turn was not evaluated")
            return None
        if self._episode is None or not self._episode.turns:
            return 0.0
        rewards = [float(r) for r in self._episode.rewards if r is not None]
        if self._reward == "final":
            return rewards[-1]
        returns: Any = self._episode.returns
        if isinstance(returns, list) and len(returns) == len(rewards):
            return float(returns[0])
        # The episode is still open (the model stopped calling the tool): the same discounting.
        return discounted_returns(rewards, self._gamma)[0]

