"""A VERL agent loop over Crucible's multi-turn episodes (``POST /episodes``), on VERL's own
``AgentLoopBase`` (``pip install 'crucible-client[verl]'``; VERL 0.9).

VERL runs one agent loop per dataset row and rollout (``actor_rollout_ref.rollout.mode=async``,
``actor_rollout_ref.rollout.agent``). ``CrucibleKernelAgentLoop``, registered as
``crucible_kernel``, plays one Crucible episode per row:

1. starts an episode on the problem the row's ``reward_model.ground_truth`` names (as
   ``verl_reward.py``'s ground truth: ``{"level", "id"}``, that as JSON, or a reference
   source);
2. renders the row's ``prompt`` (or, with ``prompt: server``, the episode's own first prompt)
   and lets VERL's server manager generate the answer (``server_manager.generate``);
3. posts the decoded answer as the episode's next turn and waits for its score;
4. unless the episode is done (max turns, or the first correct kernel), appends the server's
   feedback as the next user message and generates again; VERL's own limits stop it too:
   ``rollout.response_length`` and ``rollout.multi_turn.max_assistant_turns``.

The response is VERL's multi-turn layout: the model's tokens (``response_mask`` 1) and the
feedback messages between them (``response_mask`` 0), tokenized by VERL's Continuous Token
builder exactly as its own ``tool_agent`` loop does.

**The reward** is set on the output (``reward_score``), so VERL's reward loop is not run for
these rows. VERL trains one scalar per trajectory (at its last token); by default it is the
episode's discounted return from the first turn, ``R_0 = s_0 + γ·s_1 + γ²·s_2 + ...``
(the server's ``returns[0]``; computed the same way here when VERL's limits ended the episode
before the server did). Unlike the sum of the turns' rewards it does not pay a policy for
taking more turns: a correct kernel at the first turn scores its reward alone, the same one
reached after a failed try scores less (with γ 0.4, kernel_rl's). ``reward: final`` takes
the last turn's reward instead. Every turn's reward is in ``extra_fields["turn_scores"]``,
and ``reward_extra_info`` (which VERL logs and dumps with the generations) holds ``score``,
``turns``, ``solved``, ``final_reward``, ``best_reward`` and the last turn's ``evaluated``,
``format_ok``, ``compiled``, ``correct`` and ``speedup``.

Wiring (the agent loop's settings come from VERL's agent loop config file; hydra passes each
key to the constructor)::

    # crucible_agent.yaml
    - name: crucible_kernel
      _target_: crucible_client.verl_agent_loop.CrucibleKernelAgentLoop
      url: http://127.0.0.1:10907     # else $CRUCIBLE_URL; token: else $CRUCIBLE_TOKEN
      profile: kernel_rl
      max_turns: 4                    # else multi_turn.max_assistant_turns, else the server's 4

    actor_rollout_ref.rollout.mode=async
    actor_rollout_ref.rollout.agent.agent_loop_config_path=crucible_agent.yaml
    actor_rollout_ref.rollout.agent.default_agent_loop=crucible_kernel   # or a column agent_name

Without the file, ``VERL_USE_EXTERNAL_MODULES=crucible_client.verl_agent_loop`` makes every
VERL process import this module, which registers ``crucible_kernel`` with the defaults.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
    from verl.utils.profiler import simple_timer
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "crucible_client.verl_agent_loop needs VERL: pip install 'crucible-client[verl]'"
    ) from error

from crucible_client.aio import AsyncClient
from crucible_client.episodes import DEFAULT_RETRIES, DEFAULT_TURN_TIMEOUT_S, AsyncEpisode
from crucible_client.returns import discounted_returns
from crucible_client.scoring import (
    ON_FAILURE,
    SCORING_ERRORS,
    check_on_failure,
    failure_value,
    outcome_metrics,
    plain,
    problem_target,
    reraise_unless_tolerated,
    server_url,
)
from crucible_client.tinker_env import DEFAULT_FEEDBACK

#: The name the agent loop is registered under (a row's ``agent_name``).
AGENT_NAME = "crucible_kernel"
REWARDS = ("return", "final")
PROMPTS = ("dataset", "server")
#: The server accepts 1 to 16 turns per episode.
MAX_EPISODE_TURNS = 16

_clients: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, str | None], AsyncClient]
] = weakref.WeakKeyDictionary()


def _shared_client(url: str, token: str | None) -> AsyncClient:
    """One client per event loop and server: VERL runs a worker's agent loops concurrently on
    one loop, and an ``httpx.AsyncClient`` belongs to the loop it first ran in."""
    per_loop = _clients.setdefault(asyncio.get_running_loop(), {})
    key = (url, token)
    if key not in per_loop:
        per_loop[key] = AsyncClient(url, token=token)
    return per_loop[key]


def _row_target(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The problem a VERL row names through ``reward_model.ground_truth``."""
    reward_model = kwargs.get("reward_model")
    if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
        raise ValueError(
            "a crucible_kernel row needs reward_model.ground_truth naming the problem "
            f"({{'level', 'id'}} or a reference source); got reward_model={reward_model!r}"
        )
    return problem_target(reward_model["ground_truth"])


def _with_first_prompt(messages: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """``messages`` with the last user message's content replaced by ``prompt`` (the system
    messages kept), or ``prompt`` appended as a user message when there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return [*messages[:i], {**messages[i], "content": prompt}, *messages[i + 1 :]]
    return [*messages, {"role": "user", "content": prompt}]


@register(AGENT_NAME)
class CrucibleKernelAgentLoop(AgentLoopBase):
    """One Crucible episode per VERL trajectory (see the module's documentation).

    Settings (keyword arguments, from VERL's agent loop config file): ``url`` and ``token``
    of the server; the episode's ``profile``, ``backend``, ``eval``, ``prompt_option``,
    ``max_turns``, ``gamma`` and ``early_stop_on_correct`` (``POST /episodes``' fields);
    ``prompt`` (``dataset``: the row's messages, default; ``server``: the episode's first
    prompt replaces the row's last user message); ``feedback_template`` (the next user
    message; ``{turn}`` and ``{feedback}`` filled in); ``reward`` (``return``, default, or
    ``final``); ``turn_timeout`` and ``retries`` per turn; ``on_failure`` for a turn the
    service could not evaluate: ``raise`` (default), ``zero`` or ``nan`` (that reward, and
    the trajectory ends there).
    """

    def __init__(
        self,
        *args: Any,
        url: str | None = None,
        token: str | None = None,
        profile: str = "kernel_rl",
        backend: str = "triton",
        eval: Mapping[str, Any] | None = None,
        prompt_option: str = "zero_shot",
        max_turns: int | None = None,
        gamma: float | None = None,
        early_stop_on_correct: bool = True,
        prompt: str = "dataset",
        feedback_template: str = DEFAULT_FEEDBACK,
        reward: str = "return",
        turn_timeout: float = DEFAULT_TURN_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        on_failure: str = "raise",
        **kwargs: Any,
    ) -> None:
        # VERL's worker also passes ``tools``, and hydra the config entry's ``name``: the
        # base class takes and ignores what it does not know.
        super().__init__(*args, **kwargs)
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {', '.join(REWARDS)}, not {reward!r}")
        if prompt not in PROMPTS:
            raise ValueError(f"prompt must be one of {', '.join(PROMPTS)}, not {prompt!r}")
        multi_turn = self.rollout_config.multi_turn
        self.max_assistant_turns = multi_turn.get("max_assistant_turns") or None
        if max_turns is None and self.max_assistant_turns:
            max_turns = min(int(self.max_assistant_turns), MAX_EPISODE_TURNS)
        if max_turns is not None and not 1 <= int(max_turns) <= MAX_EPISODE_TURNS:
            raise ValueError(f"max_turns must be 1 to {MAX_EPISODE_TURNS}, not {max_turns}")
        self.url, self.token = server_url(url), token
        self.episode_settings = {
            "profile": profile,
            "backend": backend,
            "prompt_option": prompt_option,
            # Config files hand these over as OmegaConf nodes, which JSON does not encode.
            "eval": plain(eval),
            "max_turns": None if max_turns is None else int(max_turns),
            "gamma": gamma,
            "early_stop_on_correct": bool(early_stop_on_correct),
        }
        self.prompt, self.feedback_template, self.reward = prompt, feedback_template, reward
        self.turn_timeout, self.retries = float(turn_timeout), int(retries)
        self.on_failure = check_on_failure(on_failure, ON_FAILURE)
        self.response_length = self.rollout_config.response_length

    def _client(self) -> AsyncClient:
        return _shared_client(self.url, self.token)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        target = _row_target(kwargs)
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        metrics: dict[str, Any] = {}
        with simple_timer("tool_calls", metrics):
            started = await self._client().start_episode(**target, **self.episode_settings)
        episode = AsyncEpisode(self._client(), started, started["episode_id"])
        if self.prompt == "server":
            messages = _with_first_prompt(messages, episode.prompt)

        prompt_ids = await self.ct_build_initial_tokens(messages)
        response_mask: list[int] = []
        logprobs: list[float] | None = None
        # One request id for the whole trajectory: VERL's server manager keeps a trajectory on
        # one inference server (prefix caching across turns).
        request_id = uuid4().hex
        assistant_turns = user_turns = 0
        scores: list[float] = []
        last_result: Any = None
        while True:
            with simple_timer("generate_sequences", metrics):
                output = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=prompt_ids, sampling_params=sampling_params
                )
            metrics["num_preempted"] = metrics.get("num_preempted", 0) + (output.num_preempted or 0)
            assistant_turns += 1
            merged, response_mask, logprobs = await self.ct_merge_assistant_token(
                prompt_ids,
                output.token_ids,
                response_mask,
                # Log probs are kept once the server gives them (VERL's rollout.calculate_log_probs).
                (logprobs or []) if (logprobs or output.log_probs) else None,
                assistant_logprobs=output.log_probs or None,
            )
            prompt_ids = merged.token_ids
            completion = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)

            view = await self._post(episode, completion, metrics)
            if view is None:  # not evaluated, tolerated by on_failure: the trajectory ends
                scores.append(failure_value(self.on_failure))  # type: ignore[arg-type]
                last_result = None
                break
            scores.append(float(view["reward"]))
            last_result = view.get("rollout")
            if (
                episode.done
                or len(response_mask) >= self.response_length
                or (self.max_assistant_turns and assistant_turns >= self.max_assistant_turns)
            ):
                break

            # The feedback goes in as a user message: tokens the model did not write (mask 0).
            previous = [*messages, {"role": "assistant", "content": completion}]
            messages = [*previous, {"role": "user", "content": self._feedback(view)}]
            merged, mask, new_logprobs = await self.ct_merge_context_msg(
                previous, messages, prompt_ids, response_mask, logprobs
            )
            if len(mask) >= self.response_length:
                break  # no room left for an answer to it (VERL's tool_agent stops here too)
            prompt_ids, response_mask, logprobs = merged.token_ids, mask, new_logprobs
            user_turns += 1

        return self._output(
            prompt_ids, response_mask, logprobs, metrics, episode, started, scores, last_result,
            num_turns=user_turns + assistant_turns + 1,
        )

    async def _post(
        self, episode: AsyncEpisode, completion: str, metrics: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The scored turn; None when the service could not evaluate it and ``on_failure``
        tolerates that."""
        try:
            with simple_timer("tool_calls", metrics):
                return dict(
                    await episode.step(completion, timeout=self.turn_timeout, retries=self.retries)
                )
        except SCORING_ERRORS as error:
            reraise_unless_tolerated(error, self.on_failure)
            return None

    def _feedback(self, view: Mapping[str, Any]) -> str:
        return self.feedback_template.format(turn=view["turn"], feedback=view.get("feedback") or "")

    def _output(
        self,
        token_ids: list[int],
        response_mask: list[int],
        logprobs: list[float] | None,
        metrics: dict[str, Any],
        episode: AsyncEpisode,
        started: Mapping[str, Any],
        scores: list[float],
        last_result: Any,
        *,
        num_turns: int,
    ) -> AgentLoopOutput:
        # The response is the tail of the token stream that the mask covers.
        split = len(token_ids) - len(response_mask)
        limit = self.response_length
        reward = self._reward(episode, started, scores)
        outcome = outcome_metrics(last_result)
        info = {
            "score": reward,
            "turns": float(len(scores)),
            "solved": float(any(outcome_metrics(t.get("rollout"))["correct"] for t in episode.turns)),
            "final_reward": scores[-1],
            "best_reward": max(scores),
            **outcome,
        }
        return AgentLoopOutput(
            prompt_ids=token_ids[:split],
            response_ids=token_ids[split:][:limit],
            response_mask=response_mask[:limit],
            response_logprobs=logprobs[:limit] if logprobs else None,
            reward_score=reward,
            num_turns=num_turns,
            metrics=metrics,
            extra_fields={
                "turn_scores": scores,
                "crucible_episode_id": episode.id,
                "reward_extra_info": info,
            },
        )

    def _reward(
        self, episode: AsyncEpisode, started: Mapping[str, Any], scores: list[float]
    ) -> float:
        if self.reward == "final":
            return scores[-1]
        if episode.returns is not None and len(episode.returns) == len(scores):
            return float(episode.returns[0])
        # VERL's limits (or a tolerated failure) ended the episode first: the same discounting.
        return discounted_returns(scores, float(started["gamma"]))[0]
