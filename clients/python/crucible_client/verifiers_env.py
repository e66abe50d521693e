"""A verifiers environment over Crucible's multi-turn episodes, on verifiers' own types
(``pip install 'crucible-client[verifiers]'``; written against verifiers 0.4.0, whose stack is
``verifiers.v1``).

verifiers 0.4.0 has no ``MultiTurnEnv`` or ``Rubric`` any more: an environment is a
``vf.Taskset`` (the rows: here Crucible problems) and a ``vf.Env`` whose ``run(task, agents)``
drives the model through ``agents.<role>.interaction(task)``, one ``interaction.turn(message)``
per user turn (the pattern of its own OpenEnv and TextArena tasksets); rewards and metrics are
the task's ``@vf.reward`` / ``@vf.metric`` methods, scored on the finished trace. So here:

- ``CrucibleTaskset`` yields one ``CrucibleTask`` per problem: the ones ``problems`` names
  (``{"level", "id"}``, that as JSON, or a reference source), else the server's problem set
  (``GET /problem-sets``: ``level``, ``start``, ``end``, ``test_fraction``, ``seed``, ``split``).
- ``CrucibleEnv.run`` starts a server episode per rollout (``POST /episodes``, through
  ``AsyncEpisode``), sends its first prompt as the user's opening message, posts each
  assistant reply as the episode's next turn and answers with the server's feedback (the
  server's next prompt without the first prompt the conversation already holds) until the
  server says the episode is done, or the agent's own limits end the exchange.
- ``CrucibleTask``'s reward ``crucible`` is the server's discounted return of the first turn
  (``reward="return"``, the default: R_0 = sum of gamma^t * reward_t) or the last turn's
  reward (``reward="last"``); its metrics are the last turn's ``evaluated``, ``format_ok``,
  ``compiled``, ``correct`` and ``speedup``, and the episode's ``turns``, ``solved``,
  ``best_reward``. ``trace.info["crucible"]`` keeps the episode id and every turn (reward,
  verdict, feedback) for reading back.

verifiers finds a taskset by importing its id as a top-level module, so the id is
``crucible-kernels`` (the ``crucible_kernels`` module re-exports this one); ``load_environment``
builds the config and calls verifiers' own ``load_environment``. Settings are the taskset's
(``--env.taskset.url``, ``.profile``, ``.max_turns``, ...); the model plays the ``solver``
role, on verifiers' tool-less ``null`` chat harness in a local subprocess runtime by default.
A turn the service could not evaluate is posted again (``retries``), then the rollout fails
(verifiers records the error; a kernel that fails is a real, scored turn).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field, model_validator

try:
    import verifiers.v1 as vf
    from pydantic_config import BaseConfig  # verifiers' own config base
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "crucible_client.verifiers_env needs verifiers>=0.4: "
        "pip install 'crucible-client[verifiers]'"
    ) from error

from crucible_client.aio import AsyncClient
from crucible_client.client import Client
from crucible_client.episodes import (
    DEFAULT_RETRIES,
    DEFAULT_TURN_TIMEOUT_S,
    AsyncEpisode,
    feedback_message,
)
from crucible_client.returns import discounted_returns
from crucible_client.scoring import outcome_metrics, plain, problem_target, server_url

#: The taskset id verifiers imports (``crucible_kernels``, a top-level module: verifiers'
#: loader cannot import a dotted id).
ENV_ID = "crucible-kernels"
#: ``POST /episodes`` settings the taskset config passes on as they are.
EPISODE_SETTINGS = ("profile", "backend", "prompt_option", "thinking", "max_turns", "gamma",
                    "early_stop_on_correct", "speedup_threshold", "eval")
#: Where ``trace.info`` keeps the episode.
INFO_KEY = "crucible"


class ProblemSetConfig(BaseConfig):
    """Which of the server's problem set the rows are (``GET /problem-sets``); None takes
    the server's default."""

    level: int | None = None
    start: int | None = None
    end: int | None = None
    test_fraction: float | None = None
    seed: int | None = None
    split: Literal["train", "test"] = "train"


class CrucibleTasksetConfig(vf.TasksetConfig):
    """The rows and the server's episode settings (``--env.taskset.*``)."""

    url: str | None = None
    """The Crucible server; None: ``$CRUCIBLE_URL``, else ``http://127.0.0.1:10907``."""
    token: str | None = None
    """A tenant's bearer token; None: ``$CRUCIBLE_TOKEN``."""
    problems: list[Any] = Field(default_factory=list)
    """The problems, each as ``scoring.problem_target`` reads a ground truth; empty: the
    server's problem set (``problem_set``)."""
    problem_set: ProblemSetConfig = ProblemSetConfig()
    profile: str = "kernel_rl"
    backend: str = "triton"
    prompt_option: str = "zero_shot"
    thinking: bool | None = None
    max_turns: int = Field(4, ge=1, le=16)
    gamma: float = Field(0.4, ge=0.0, le=1.0)
    early_stop_on_correct: bool = True
    speedup_threshold: float | None = None
    eval: dict[str, Any] | None = None
    """``/rollouts``' evaluation settings for every turn (``num_correct_trials``, ...)."""
    turn_timeout: float = Field(DEFAULT_TURN_TIMEOUT_S, gt=0)
    """How long one turn's evaluation may take, in seconds."""
    retries: int = Field(DEFAULT_RETRIES, ge=0)
    """How many times a turn the service could not evaluate is posted again."""
    reward: Literal["return", "last"] = "return"
    """The trace's reward: the first turn's discounted return, or the last turn's reward."""

    @model_validator(mode="after")
    def _check_problems(self) -> CrucibleTasksetConfig:
        # A problem that names nothing is refused here, before any rollout starts.
        for problem in self.problems:
            problem_target(problem)
        return self


class CrucibleData(vf.TaskData):
    """One problem: ``problem`` (``{"level", "id"}``) or ``reference_code``. No prompt: the
    server's episode gives the first one."""

    problem: dict[str, int] | None = None
    reference_code: str | None = None


class CrucibleTask(vf.Task[CrucibleData]):
    """One problem's episode; scored from what ``CrucibleEnv.run`` kept in ``trace.info``."""

    # verifiers gathers its scoring hooks (asyncio.gather): they must be coroutines.
    @vf.reward
    async def crucible(self, trace: vf.Trace) -> float:
        return _reward(_episode_info(trace))

    @vf.metric
    async def crucible_outcome(self, trace: vf.Trace) -> dict[str, float]:
        return _metrics(_episode_info(trace))


def _episode_info(trace: vf.Trace) -> dict[str, Any]:
    return trace.info.get(INFO_KEY) or {"turns": [], "returns": [], "reward": "return"}


def _reward(info: dict[str, Any]) -> float:
    """No scored turn (the exchange ended first) rewards 0.0."""
    if not info["turns"]:
        return 0.0
    if info["reward"] == "last":
        return float(info["turns"][-1]["reward"])
    return float(info["returns"][0])


def _metrics(info: dict[str, Any]) -> dict[str, float]:
    turns = info["turns"]
    last = turns[-1]["outcome"] if turns else outcome_metrics(None)
    rewards = [t["reward"] for t in turns]
    return {**last, "turns": float(len(turns)),
            "solved": float(any(t["outcome"]["correct"] for t in turns)),
            "best_reward": max(rewards, default=0.0)}


def _turn_record(view: dict[str, Any]) -> dict[str, Any]:
    rollout = view.get("rollout") or {}
    evaluation = rollout.get("result") or {}
    return {"turn": view["turn"], "reward": float(view["reward"]),
            "verdict": evaluation.get("verdict") or rollout.get("status"),
            "feedback": view.get("feedback"), "outcome": outcome_metrics(rollout or None)}


class CrucibleTaskset(vf.Taskset[CrucibleTask, CrucibleTasksetConfig]):
    """Crucible problems as verifiers tasks."""

    def load(self) -> Iterator[CrucibleTask]:
        config = self.config
        targets = [problem_target(p) for p in config.problems] or self._problem_set()
        for target in targets:
            problem = target.get("problem")
            name = f"L{problem['level']}/{problem['id']}" if problem else "reference"
            yield CrucibleTask(CrucibleData(name=name, **target), config.task)

    def _problem_set(self) -> list[dict[str, Any]]:
        selection = self.config.problem_set
        with Client(server_url(self.config.url), token=self.config.token) as client:
            found = client.problem_set(
                level=selection.level, start=selection.start, end=selection.end,
                backend=self.config.backend,  # type: ignore[arg-type]
                test_fraction=selection.test_fraction, seed=selection.seed,
            )
        rows = found[selection.split]
        if not rows:
            raise ValueError(f"the server's problem set has no {selection.split} problems: "
                             f"{found['selection']}")
        return [{"problem": {"level": p["level"], "id": p["id"]}} for p in rows]


class CrucibleEnvConfig(vf.EnvConfig):
    solver: vf.AgentConfig = vf.AgentConfig(harness={"id": "null"}, runtime={"type": "subprocess"})
    """The model writing kernels: verifiers' tool-less chat harness (the server evaluates
    the code; the model runs nothing), in a local subprocess (``--env.solver.runtime.*``)."""


class CrucibleEnv(vf.Env[CrucibleEnvConfig]):
    """One server episode per rollout, relayed turn by turn to the ``solver``."""

    async def run(self, task: CrucibleTask, agents: vf.Agents) -> None:
        config: CrucibleTasksetConfig = self.taskset.config
        settings = {k: plain(getattr(config, k)) for k in EPISODE_SETTINGS}
        target = {"problem": task.data.problem, "reference_code": task.data.reference_code}
        async with AsyncClient(server_url(config.url), token=config.token) as client:
            episode = await AsyncEpisode.start(client, **target, **settings)
            first_prompt = episode.prompt
            info: dict[str, Any] = {"episode_id": episode.id, "reward": config.reward,
                                    "turns": [], "returns": [], "done": False}
            async with agents.solver.interaction(task) as interaction:
                # Kept before the interaction closes: the task is scored as it closes.
                interaction.trace.info[INFO_KEY] = info
                segment = await interaction.turn(first_prompt)
                while not segment.terminated:
                    view = await episode.step(segment.last_reply, timeout=config.turn_timeout,
                                              retries=config.retries)
                    info["turns"].append(_turn_record(dict(view)))
                    info["done"] = bool(view["done"])
                    # The server's returns once done; until then (the agent's limits ended
                    # the exchange) the same definition over the turns so far.
                    info["returns"] = list(view.get("returns") or discounted_returns(
                        [t["reward"] for t in info["turns"]], config.gamma))
                    if info["done"]:
                        break
                    segment = await interaction.turn(feedback_message(first_prompt, dict(view)))


__all__ = ["CrucibleEnv", "CrucibleTask", "CrucibleTaskset", "load_environment"]


def load_environment(
    *,
    url: str | None = None,
    problems: list[Any] | None = None,
    solver: dict[str, Any] | None = None,
    **taskset: Any,
) -> CrucibleEnv:
    """The environment, made by verifiers' own ``load_environment`` from a config whose
    taskset is ``crucible-kernels`` with these settings (``CrucibleTasksetConfig``'s fields:
    ``token``, ``problem_set``, ``profile``, ``max_turns``, ``eval``, ...); ``solver``
    overrides the role's ``AgentConfig`` fields (``max_turns``, ``runtime``, ...)."""
    data: dict[str, Any] = {"id": ENV_ID, **taskset}
    if url is not None:
        data["url"] = url
    if problems is not None:
        # Mappings, JSON strings or sources; the config refuses one that names nothing.
        data["problems"] = [plain(p) for p in problems]
    raw: dict[str, Any] = {"taskset": data}
    if solver:
        raw["solver"] = solver
    env = vf.load_environment(vf.resolve_env_config(raw))
    if not isinstance(env, CrucibleEnv):
        raise TypeError(f"verifiers loaded {type(env).__name__} for {ENV_ID}, not CrucibleEnv")
    return env

