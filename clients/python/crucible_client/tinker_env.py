"""A multi-turn kernel-writing environment in the shape of tinker_cookbook's RL protocol, as
kernel_rl uses it, without depending on tinker (on the cookbook's own types, with its
renderers and rollout code: ``crucible_client.cookbook``): ``KernelEnv`` is an ``Env`` (``await initial_observation()`` → the
observation and stop condition; ``await step(action)`` → a ``StepResult`` with ``reward``,
``episode_done``, ``next_observation``, ``next_stop_condition`` and ``metrics``), and
``KernelEnvGroupBuilder`` an ``EnvGroupBuilder`` (``await make_envs()`` → one env per rollout
of a group on the same problem; ``compute_group_rewards``; ``logging_tags``). It depends on
this client only, not on tinker: the names and shapes are the protocol's, so a tinker training
loop can drive these objects, and a thin subclass or the ``render``/``parse`` hooks turn
messages into a renderer's tokens.

An episode is up to ``max_turns`` attempts at one problem. Each step's action (a completion)
is scored by Crucible as one rollout (its ``turn`` carried through); the step's reward is the
rollout's reward under ``profile``. A correct kernel (``stop_on_correct``, with ``min_speedup``
when given) ends the episode early; otherwise the next observation is the problem, the last
attempt (thinking sections removed) and the server's feedback on it. Per-turn returns are
discounted, ``R_t = s_t + γ·R_{t+1}`` (γ 0.4 by default, kernel_rl's and Kevin's), by
``KernelEnv.returns()``: tinker_cookbook sums a trajectory's step rewards itself, so a loop
that trains on discounted returns assigns them per turn, as kernel_rl's does.

By default observations are chat messages (``[{"role", "content"}, ...]``) and actions text.
``render`` maps the messages to the policy's observation (tinker: a renderer's
``build_generation_prompt``) and ``parse`` an action back to text (tinker: the content of
``renderer.parse_response(tokens)``'s message); ``stop_condition`` and ``empty_observation``
are what the episode reports alongside (tinker: ``renderer.get_stop_sequences()`` and
``ModelInput.empty()``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from crucible_client.aio import AsyncClient
from crucible_client.base import ProblemLike, make_rollout, problem_ref
from crucible_client.errors import NotEvaluated
from crucible_client.returns import DEFAULT_GAMMA, discounted_returns, stops_early
from crucible_client.scoring import (
    ON_FAILURE,
    SCORING_ERRORS,
    async_client,
    check_on_failure,
    failure_value,
    outcome_metrics,
    plain,
    reraise_unless_tolerated,
    score_async,
)
from crucible_client.types import Backend, EvalSettings, Profile, RolloutResult

Message = dict[str, str]
Metrics = dict[str, float | int]

#: The first prompt; ``{backend}`` and ``{reference}`` (the PyTorch source) are filled in.
DEFAULT_PROMPT = """\
Write a faster implementation of the PyTorch model below with your own custom {backend} \
kernels: a class ModelNew with the same constructor and forward signature that computes the \
same outputs.

```python
{reference}
```

Think inside <think>...</think> first, then give your complete implementation after <KERNEL> \
in one fenced ```python block."""

#: The user's turn after an attempt; ``{turn}`` and ``{feedback}`` (the server's) filled in.
DEFAULT_FEEDBACK = """\
Your attempt (turn {turn}) was evaluated:
{feedback}

Improve it: keep what works, fix what failed, make it faster. Answer in the same format."""

_THINKING = re.compile(r"<(think|thinking)>.*?</\1>\s*", re.DOTALL)


def without_thinking(completion: str) -> str:
    """``completion`` without its ``<think>``/``<thinking>`` sections: drafts that only
    lengthen the next prompt (kernel_rl does not feed them back either)."""
    return _THINKING.sub("", completion).strip()


def _identity(value: Any) -> Any:
    return value


@dataclass
class StepResult:
    """What ``Env.step`` returns in tinker_cookbook's protocol (``logs``: text for display,
    not aggregated). On the cookbook's own types: ``crucible_client.cookbook``."""

    reward: float
    episode_done: bool
    next_observation: Any
    next_stop_condition: Any
    metrics: Metrics = field(default_factory=dict)
    logs: dict[str, str | int | float] = field(default_factory=dict)


@dataclass(frozen=True)
class Turn:
    """One step of an episode: the completion and its scored rollout."""

    completion: str
    result: RolloutResult | None
    reward: float


class KernelEnv:
    """One episode of up to ``max_turns`` attempts at one problem; discard it afterwards.

    The problem is a registry ``problem`` (``{"level", "id"}`` or ``(level, id)``) or a
    ``reference_code``; ``prompt`` is the first user message (by default ``DEFAULT_PROMPT``
    with the reference source, fetched from the server for a registry problem). Each attempt
    is scored under ``profile`` with ``eval``'s settings, waiting at most ``timeout`` seconds.
    ``on_failure`` decides what a step the service could not evaluate does: ``raise``
    (``NotEvaluated`` or the client's error; the default), ``zero`` or ``nan`` (that reward,
    and the episode ends: there is no feedback to continue from).
    """

    def __init__(
        self,
        problem: ProblemLike | None = None,
        *,
        reference_code: str | None = None,
        prompt: str | None = None,
        client: AsyncClient | None = None,
        url: str | None = None,
        profile: Profile = "kernel_rl",
        backend: Backend = "triton",
        eval: EvalSettings | None = None,
        max_turns: int = 4,
        gamma: float = DEFAULT_GAMMA,
        stop_on_correct: bool = True,
        min_speedup: float | None = None,
        system_prompt: str | None = None,
        feedback_template: str = DEFAULT_FEEDBACK,
        render: Callable[[list[Message]], Any] = _identity,
        parse: Callable[[Any], str] = _identity,
        stop_condition: Any = None,
        empty_observation: Any = None,
        on_failure: str = "raise",
        timeout: float | None = None,
        episode_id: str | None = None,
    ) -> None:
        if (problem is None) == (reference_code is None):
            raise ValueError("give exactly one of problem and reference_code")
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        self.target: dict[str, Any] = (
            {"problem": problem_ref(problem)}
            if problem is not None
            else {"reference_code": reference_code}
        )
        self.prompt = prompt
        self._client, self._url = client, url
        self.profile, self.backend, self.eval = profile, backend, plain(eval)
        self.max_turns, self.gamma = max_turns, gamma
        self.stop_on_correct, self.min_speedup = stop_on_correct, min_speedup
        self.system_prompt, self.feedback_template = system_prompt, feedback_template
        self.render, self.parse = render, parse
        self.stop_condition, self.empty_observation = stop_condition, empty_observation
        self.on_failure = check_on_failure(on_failure, ON_FAILURE)
        self.timeout = timeout
        self.episode_id = episode_id or uuid.uuid4().hex[:12]
        #: Every step so far.
        self.turns: list[Turn] = []
        self.done = False

    @property
    def client(self) -> AsyncClient:
        return async_client(self._url, self._client)

    @property
    def step_scores(self) -> list[float]:
        """Each step's reward, in order."""
        return [t.reward for t in self.turns]

    def returns(self) -> list[float]:
        """Each step's discounted return ``R_t = s_t + γ·R_{t+1}``."""
        return discounted_returns(self.step_scores, self.gamma)

    async def first_prompt(self) -> str:
        """``prompt``, or ``DEFAULT_PROMPT`` with the reference source (fetched once)."""
        if self.prompt is None:
            reference = self.target.get("reference_code")
            if reference is None:
                ref = self.target["problem"]
                reference = (await self.client.problem(ref["level"], ref["id"]))["reference_code"]
            self.prompt = DEFAULT_PROMPT.format(backend=self.backend, reference=reference)
        return self.prompt

    def _messages(self, first: str, last: Turn | None) -> list[Message]:
        messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        messages.append({"role": "user", "content": first})
        if last is not None and last.result is not None:
            feedback = self.feedback_template.format(
                turn=len(self.turns) - 1, feedback=last.result["feedback"]
            )
            messages.append({"role": "assistant", "content": without_thinking(last.completion)})
            messages.append({"role": "user", "content": feedback})
        return messages

    async def initial_observation(self) -> tuple[Any, Any]:
        """The first observation (the problem) and the stop condition."""
        return self.render(self._messages(await self.first_prompt(), None)), self.stop_condition

    async def _score(self, completion: str) -> RolloutResult | None:
        """The completion's rollout result; None when the service could not score it and
        ``on_failure`` tolerates that."""
        rollout = make_rollout(
            f"{self.episode_id}/t{len(self.turns)}",
            completion,
            backend=self.backend,
            turn=len(self.turns),
            profile=self.profile,
            **self.target,
        )
        try:
            [result] = await score_async(self.client, [rollout], self.eval, self.timeout)
        except SCORING_ERRORS as error:
            reraise_unless_tolerated(error, self.on_failure)
            return None
        if result.get("reward") is None:
            if self.on_failure == "raise":
                raise NotEvaluated({result["id"]: result.get("error") or result["status"]})
            return None
        return result

    async def step(self, action: Any, *, extra: Any = None) -> StepResult:
        """Scores the action's completion; the reward is its rollout's. The episode ends at a
        correct kernel (``stop_on_correct``), after ``max_turns`` steps, or at a step the
        service could not evaluate (under ``on_failure`` ``zero``/``nan``). ``extra`` (the
        cookbook's sampling metadata) is accepted and not needed."""
        if self.done:
            raise RuntimeError(f"episode {self.episode_id} is over")
        completion = self.parse(action)
        result = await self._score(completion)
        reward = result["reward"] if result is not None else failure_value(self.on_failure)
        assert reward is not None
        turn = Turn(completion, result, reward)
        self.turns.append(turn)
        solved = result is not None and stops_early(result, self.min_speedup)
        self.done = (
            result is None or (self.stop_on_correct and solved) or len(self.turns) >= self.max_turns
        )
        next_observation = (
            self.empty_observation
            if self.done
            else self.render(self._messages(await self.first_prompt(), turn))
        )
        return StepResult(
            reward=reward,
            episode_done=self.done,
            next_observation=next_observation,
            next_stop_condition=self.stop_condition,
            metrics=_metrics(len(self.turns) - 1, result, solved, self.done),
            logs={"feedback": str(result.get("feedback") or "")} if result is not None else {},
        )


def _metrics(turn: int, result: RolloutResult | None, solved: bool, done: bool) -> Metrics:
    """What a step reports for logging, all numbers."""
    return {
        "turn": turn,
        **outcome_metrics(result),
        "solved": float(solved),
        "episode_done": float(done),
    }


class KernelEnvGroupBuilder:
    """Makes a group of ``group_size`` independent episodes on one problem (GRPO centres
    rewards across the group). ``env_options`` are ``KernelEnv``'s keyword arguments; the
    first prompt is built (its reference fetched) once for the whole group."""

    def __init__(
        self,
        problem: ProblemLike | None = None,
        *,
        group_size: int,
        reference_code: str | None = None,
        **env_options: Any,
    ) -> None:
        if group_size < 1:
            raise ValueError("group_size must be at least 1")
        self.problem, self.reference_code = problem, reference_code
        self.group_size = group_size
        self.env_options = env_options

    async def make_envs(self) -> Sequence[KernelEnv]:
        return await group_episodes(
            self.problem, self.reference_code, self.group_size, **self.env_options
        )

    async def compute_group_rewards(
        self, trajectory_group: list[Any], env_group: Sequence[Any] | None = None
    ) -> list[tuple[float, Metrics]]:
        """No reward on top of the steps' (tinker_cookbook adds these to each trajectory's
        sum of step rewards)."""
        return [(0.0, {}) for _ in trajectory_group]

    async def cleanup(self) -> None:
        """Nothing to release: the client is the caller's (or the event loop's shared one)."""

    def logging_tags(self) -> list[str]:
        return group_tags(self.problem)


async def group_episodes(
    problem: ProblemLike | None, reference_code: str | None, group_size: int, **options: Any
) -> list[KernelEnv]:
    """``group_size`` episodes on one problem, its first prompt built (the reference fetched)
    once for all of them; ``options`` are ``KernelEnv``'s."""
    first = KernelEnv(problem, reference_code=reference_code, **options)
    options = {**options, "prompt": await first.first_prompt()}
    return [first] + [
        KernelEnv(problem, reference_code=reference_code, **options)
        for _ in range(group_size - 1)
    ]


def group_tags(problem: ProblemLike | None) -> list[str]:
    """A group's tags for a trainer's logs: the registry problem, or ``reference``."""
    if problem is not None:
        ref = problem_ref(problem)
        return [f"level_{ref['level']}", f"problem_{ref['id']}", "crucible", "multiturn"]
    return ["reference", "crucible", "multiturn"]
