"""OpenRLHF's multi-turn agent over Crucible episodes, for ``--train.agent_func_path <this
file>`` (OpenRLHF 0.11).

How OpenRLHF 0.11.2 uses the file: ``_load_agent_executor`` (``openrlhf/trainer/ray/
vllm_engine.py``, lines 19-30) loads it with ``importlib.util.spec_from_file_location``, takes
its ``AgentExecutor``, checks that it subclasses ``AgentExecutorBase`` and calls it with no
arguments; every rollout actor then runs ``execute`` for each sample. ``MultiTurnAgentExecutor``
(``openrlhf/utils/agent.py``, lines 32-185) makes one ``agent_instance_cls()`` per sample (no
arguments), awaits ``reset({"observation": prompt, "label": label})`` and reads its
``observation``; then, until ``done`` or the token budget (``max_length``) is spent, it
generates, awaits ``step({"observation_text", "action_text", "label", "sampling_params"})``
and reads ``rewards`` (``.item()``: a tensor; the sample's reward is the sum over steps),
``scores`` (the last step's: the dynamic-filtering score), ``environment_feedback`` (text
appended to the context after the response, tokenized without special tokens; appended on
the last step too), ``done`` and ``extra_logs`` (the last step's, each value logged as
``samples_generator.py`` lines 289-293 do).

Here, per sample:

- ``reset`` starts one Crucible episode (``POST /episodes``) of the problem the label names
  (``{"level", "id"}``, that as JSON, or the reference source, as in ``openrlhf_reward.py``)
  and keeps the dataset's prompt (chat-templated by OpenRLHF), or, with a prompt template,
  shows the server's first prompt in it.
- ``step`` posts the response as the episode's next turn, waits for its score (a turn the
  service failed to evaluate is posted again, ``retries``) and answers: ``rewards``
  ``gamma**t * reward_t`` (so the sample's reward, their sum, is the server's discounted
  return R_0; ``reward="last"``: the change since the previous turn, so the sum is the last
  turn's reward), ``scores`` 1.0 once a turn was correct, ``environment_feedback`` the
  server's next prompt without its first prompt (the context holds that already) in the
  feedback template, nothing once done, ``done`` the server's, and ``extra_logs`` the turn's
  outcome numbers and the episode's turns and ``solved``.
- When OpenRLHF's budget runs out before the server's ``max_turns``, the episode is left open
  on the server (it expires there); the reward is the return of the turns played.

OpenRLHF passes no settings, so they come from the environment (the Ray workers inherit it),
read when each sample's instance is made: ``CRUCIBLE_URL``, ``CRUCIBLE_TOKEN``,
``CRUCIBLE_PROFILE`` (kernel_rl), ``CRUCIBLE_BACKEND`` (triton), ``CRUCIBLE_EVAL`` (JSON),
``CRUCIBLE_EPISODE`` (JSON: ``POST /episodes`` settings such as ``max_turns``, ``gamma``,
``prompt_option``, ``early_stop_on_correct``), ``CRUCIBLE_TIMEOUT`` (seconds a turn may take),
``CRUCIBLE_ON_FAILURE`` (``raise``; ``nan`` or ``zero``: a turn still not evaluated ends the
sample with that reward), ``CRUCIBLE_AGENT_REWARD`` (``return`` or ``last``),
``CRUCIBLE_FEEDBACK_TEMPLATE`` (holds ``{feedback}``) and ``CRUCIBLE_PROMPT_TEMPLATE`` (holds
``{prompt}``). The feedback comes after the model's end-of-turn token, so set its template to
your chat format's user turn and assistant header, e.g. for ChatML
``<|im_start|>user\\n{feedback}<|im_end|>\\n<|im_start|>assistant\\n``. For settings in code,
write a file with ``AgentExecutor = make_agent_executor(profile="kevin", ...)``. The file is
loaded by path, so the imports are absolute and need crucible-client and openrlhf installed.

Tested through ``MultiTurnAgentExecutor.execute`` with a scripted engine and a real offline
tokenizer (openrlhf 0.11.2 installed without its GPU-only dependencies):
``tests/test_openrlhf_agent.py``.
"""

# No ``from __future__ import annotations``: OpenRLHF executes this file as a module it does not
# put in sys.modules, and dataclasses resolve string annotations through sys.modules.
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from openrlhf.utils.agent import AgentInstanceBase, MultiTurnAgentExecutor

from crucible_client.episodes import (
    DEFAULT_RETRIES,
    DEFAULT_TURN_TIMEOUT_S,
    AsyncEpisode,
    feedback_message,
)
from crucible_client.scoring import (
    SCORING_ERRORS,
    async_client,
    check_on_failure,
    failure_value,
    is_service_failure,
    outcome_metrics,
    plain,
    problem_target,
)

#: ``POST /episodes`` settings ``CRUCIBLE_EPISODE`` may hold (the problem is the label's).
EPISODE_SETTINGS = ("weights", "prompt_option", "thinking", "max_turns", "gamma",
                    "early_stop_on_correct", "speedup_threshold")
REWARDS = ("return", "last")
#: Two blank lines, then the feedback: readable for a base model; chat models need their own
#: user-turn markup (see the module's documentation).
DEFAULT_FEEDBACK_TEMPLATE = "\n\n{feedback}\n\n"


@dataclass(frozen=True)
class AgentSettings:
    """What one sample's agent does; checked when made, before any episode starts."""

    url: str | None = None
    profile: str = "kernel_rl"
    backend: str = "triton"
    eval: Mapping[str, Any] | None = None
    episode: Mapping[str, Any] = field(default_factory=dict)
    timeout: float = DEFAULT_TURN_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    on_failure: str = "raise"
    reward: str = "return"
    feedback_template: str = DEFAULT_FEEDBACK_TEMPLATE
    prompt_template: str | None = None

    def __post_init__(self) -> None:
        check_on_failure(self.on_failure)
        if self.reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, not {self.reward!r}")
        unknown = sorted(set(self.episode) - set(EPISODE_SETTINGS))
        if unknown:
            raise ValueError(f"episode settings {unknown} are not POST /episodes settings the "
                             f"agent passes on ({', '.join(EPISODE_SETTINGS)}; the problem is "
                             "the label's)")
        if "{feedback}" not in self.feedback_template:
            raise ValueError("feedback_template must hold {feedback}")
        if self.prompt_template is not None and "{prompt}" not in self.prompt_template:
            raise ValueError("prompt_template must hold {prompt}")
        if not self.timeout > 0 or self.retries < 0:
            raise ValueError(f"timeout must be above 0 and retries at least 0, not "
                             f"{self.timeout} and {self.retries}")


def _json_env(name: str) -> Any:
    try:
        return json.loads(os.environ[name])
    except ValueError as error:
        raise ValueError(f"{name} is not JSON: {error}") from None


def environment_settings() -> AgentSettings:
    """The settings ``CRUCIBLE_*`` give (see the module's documentation)."""
    env = os.environ
    settings: dict[str, Any] = {
        "url": env.get("CRUCIBLE_URL"),
        "profile": env.get("CRUCIBLE_PROFILE", "kernel_rl"),
        "backend": env.get("CRUCIBLE_BACKEND", "triton"),
        "on_failure": env.get("CRUCIBLE_ON_FAILURE", "raise"),
        "reward": env.get("CRUCIBLE_AGENT_REWARD", "return"),
        "feedback_template": env.get("CRUCIBLE_FEEDBACK_TEMPLATE", DEFAULT_FEEDBACK_TEMPLATE),
        "prompt_template": env.get("CRUCIBLE_PROMPT_TEMPLATE") or None,
    }
    if env.get("CRUCIBLE_EVAL"):
        settings["eval"] = _json_env("CRUCIBLE_EVAL")
    if env.get("CRUCIBLE_EPISODE"):
        episode = _json_env("CRUCIBLE_EPISODE")
        if not isinstance(episode, dict):
            raise ValueError("CRUCIBLE_EPISODE must be a JSON object")
        settings["episode"] = episode
    if env.get("CRUCIBLE_TIMEOUT"):
        settings["timeout"] = float(env["CRUCIBLE_TIMEOUT"])
    return AgentSettings(**settings)


def _tensor(value: float) -> Any:
    # float64: OpenRLHF sums the steps' .item()s, and the sum is to be the server's return.
    import torch

    return torch.tensor([value], dtype=torch.float64)


class CrucibleAgentInstance(AgentInstanceBase):
    """One sample's Crucible episode. ``settings`` None: the environment's, read when the
    instance is made (OpenRLHF makes one per sample, without arguments)."""

    settings: AgentSettings | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.config = self.settings if self.settings is not None else environment_settings()
        self.episode: AsyncEpisode | None = None
        self.first_prompt = ""
        self.gamma = 1.0
        #: What the steps have given so far (their sum is the sample's reward).
        self.given = 0.0
        self.solved = False

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        config = self.config
        target = problem_target(states["label"])
        client = async_client(config.url, None)
        started = await client.start_episode(
            **target, profile=config.profile, backend=config.backend,  # type: ignore[arg-type]
            eval=plain(config.eval), **plain(config.episode))
        self.episode = AsyncEpisode(client, started, started["episode_id"])
        self.first_prompt, self.gamma = self.episode.prompt, float(started["gamma"])
        observation = states["observation"]
        if config.prompt_template is not None:
            observation = config.prompt_template.replace("{prompt}", self.first_prompt)
        return {**states, "observation": observation, "episode_id": self.episode.id}

    def _answer(self, value: float, done: bool, feedback: str,
                logs: dict[str, float]) -> dict[str, Any]:
        self.given += value
        return {
            "rewards": _tensor(value),
            "scores": _tensor(float(self.solved)),
            "environment_feedback": feedback,
            "done": done,
            "extra_logs": {f"crucible/{k}": _tensor(v) for k, v in logs.items()},
        }

    async def step(self, states: dict, **kwargs: Any) -> dict[str, Any]:
        if self.episode is None:
            raise RuntimeError("step before reset: OpenRLHF resets each instance first")
        config, episode = self.config, self.episode
        try:
            view = await episode.step(str(states["action_text"]), timeout=config.timeout,
                                      retries=config.retries)
        except SCORING_ERRORS as error:
            if config.on_failure == "raise" or not is_service_failure(error):
                raise
            # The episode cannot go on without this turn's score: the sample ends here, the
            # turn scoring the stand-in (NaN or 0) as the reward mode counts it.
            stand_in: float = failure_value(config.on_failure)  # type: ignore[assignment]
            value = (stand_in - self.given if config.reward == "last"
                     else self.gamma ** len(episode.turns) * stand_in)
            logs = {**outcome_metrics(None), "turns": float(len(episode.turns)),
                    "solved": float(self.solved), "turn_reward": stand_in}
            return self._answer(value, True, "", logs)
        turn, reward = int(view["turn"]), float(view["reward"])  # type: ignore[arg-type]
        outcome = outcome_metrics(view.get("rollout"))
        self.solved = self.solved or outcome["correct"] == 1.0
        if config.reward == "last":
            # The steps so far summed to the previous turn's reward: the sum is now this one's.
            value = reward - self.given
        elif view.get("returns"):
            # The last turn: what is left of the server's own return, so the sum is exactly it.
            value = float(view["returns"][0]) - self.given  # type: ignore[index]
        else:
            value = self.gamma**turn * reward
        done = bool(view["done"])
        feedback = "" if done else config.feedback_template.replace(
            "{feedback}", feedback_message(self.first_prompt, view))
        logs = {**outcome, "turns": float(len(episode.turns)), "solved": float(self.solved),
                "turn_reward": reward}
        return self._answer(value, done, feedback, logs)


def make_agent_executor(**settings: Any) -> type[MultiTurnAgentExecutor]:
    """An ``AgentExecutor`` class (what ``--train.agent_func_path``'s file exports) whose
    samples use these settings (``AgentSettings``' fields) instead of the environment's."""
    bound = AgentSettings(**settings)

    class Instance(CrucibleAgentInstance):
        pass

    Instance.settings = bound

    class Executor(MultiTurnAgentExecutor):
        def __init__(self) -> None:
            super().__init__(Instance)

    return Executor


#: What OpenRLHF instantiates: one ``AgentInstance`` per sample, settings from ``CRUCIBLE_*``.
AgentInstance = CrucibleAgentInstance


class AgentExecutor(MultiTurnAgentExecutor):
    """What ``_load_agent_executor`` takes from the file and calls without arguments."""

    def __init__(self) -> None:
        super().__init__(AgentInstance)


__all__ = ["AgentExecutor", "AgentInstance", "AgentSettings", "CrucibleAgentInstance",
           "environment_settings", "make_agent_executor"]
