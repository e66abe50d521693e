"""NeMo Gym resources servers over Crucible, on NeMo Gym's own base classes and models
(``pip install 'crucible-client[nemo-gym]'``; NeMo Gym 0.4.0).

``CrucibleResourcesServer`` is a ``SimpleResourcesServer``: its ``/verify`` takes what NeMo
Gym's ``simple_agent`` posts (``responses_api_agents/simple_agent/app.py``, ``run``: the
dataset row, its ``responses_create_params``, and the model's Responses-API ``response``),
scores the completion as one Crucible rollout (``POST /rollouts``) of the problem the row's
``ground_truth`` names (``{"level", "id"}``, that as JSON, or the reference source, as for
VERL) and answers NeMo Gym's ``BaseVerifyResponse`` with the Crucible reward and our numbers
(``evaluated``, ``format_ok``, ``compiled``, ``correct``, ``speedup``; ``verdict`` and
``feedback``), which NeMo Gym's ``/aggregate_metrics`` averages like any verify field.

``CrucibleEpisodeServer`` is a ``GymnasiumServer`` (``resources_servers/gymnasium``, NeMo Gym's
multi-turn notion, driven by its ``gymnasium_agent``): ``/reset`` starts a Crucible episode
(``POST /episodes``, docs/ENVIRONMENT.md "Episodes") of the row's problem, each ``/step``
posts the response as the episode's next turn and answers its reward, ``terminated`` at a
correct kernel, ``truncated`` when the turns run out, and otherwise the server's feedback as
the next user message (the agent keeps the conversation itself).

The completion is the response as NeMo Gym's own converter writes it back into chat text
(``nemo_gym/responses_converter.py``: ``_format_reasoning``, line 285, wraps each reasoning
item's summaries in ``<think>`` tags, ``_wrap_reasoning_in_think_tags``, line 100): its vLLM
model server splits a ``<think>`` section into a reasoning item (lines 314-327), and the
``thinking`` reward looks for it in the text.

Settings are the server's config (``configs/crucible.yaml`` beside an ``app.py`` that calls
``run_webserver()``: clients/python/examples/nemo_gym/); ``crucible_url`` and
``crucible_token`` fall back to ``$CRUCIBLE_URL`` and ``$CRUCIBLE_TOKEN``.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any, Literal, Optional

try:
    from fastapi import HTTPException
    from pydantic import ConfigDict, PrivateAttr

    from nemo_gym.base_resources_server import (
        BaseResourcesServerConfig,
        BaseVerifyRequest,
        BaseVerifyResponse,
        SimpleResourcesServer,
    )
    from nemo_gym.openai_utils import NeMoGymResponse
    from resources_servers.gymnasium import GymnasiumServer
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "crucible_client.nemo_gym_server needs nemo-gym: pip install 'crucible-client[nemo-gym]'"
    ) from error

from crucible_client.aio import AsyncClient
from crucible_client.base import make_rollout
from crucible_client.episodes import DEFAULT_TURN_TIMEOUT_S, AsyncEpisode
from crucible_client.errors import NotEvaluated
from crucible_client.scoring import (
    SCORING_ERRORS,
    is_service_failure,
    outcome_metrics,
    problem_target,
    score_async,
    server_url,
)
from crucible_client.tinker_env import DEFAULT_FEEDBACK

def completion_text(response: NeMoGymResponse) -> str:
    """The model's completion in ``response``: each reasoning item as a ``<think>`` section
    and each message's output text, in order (tool calls carry no kernel)."""
    parts: list[str] = []
    for item in response.output:
        kind = getattr(item, "type", None)
        if kind == "reasoning":
            text = "".join(s.text for s in item.summary if s.text)
            if text:
                parts.append(f"<think>{text}</think>")
        elif kind == "message" and getattr(item, "role", None) == "assistant":
            content = item.content
            if isinstance(content, str):
                parts.append(content)
            else:
                parts.extend(c.text for c in content if getattr(c, "type", None) == "output_text")
    return "".join(parts)


def _target(ground_truth: Any) -> dict[str, Any]:
    """The problem ``ground_truth`` names, or 422 saying why not."""
    if ground_truth is None:
        raise HTTPException(422, "the row's ground_truth must name the problem: {level, id}, "
                                 "that as JSON, or the reference source")
    try:
        return problem_target(ground_truth)
    except (TypeError, ValueError) as error:
        raise HTTPException(422, f"ground_truth: {error}") from None


def _http_error(error: BaseException) -> HTTPException:
    """A Crucible failure as the HTTP error NeMo Gym's agent raises on: 503 when the service
    failed (retry later), 422 when Crucible refused the request (fix the row or config)."""
    if is_service_failure(error):
        return HTTPException(503, f"Crucible could not score this: {error}")
    return HTTPException(422, f"Crucible refused the request: {error}")


class CrucibleResourcesServerConfig(BaseResourcesServerConfig):
    """The server's section of NeMo Gym's config (beside ``entrypoint``, ``host``, ...)."""

    crucible_url: Optional[str] = None
    crucible_token: Optional[str] = None
    profile: str = "kernel_rl"
    backend: str = "triton"
    #: The evaluation settings of ``POST /rollouts`` (``num_correct_trials``, ...).
    eval: Optional[dict[str, Any]] = None
    #: How long one verify (or turn) waits for Crucible, in seconds; then it is cancelled.
    timeout_s: float = DEFAULT_TURN_TIMEOUT_S
    #: What a completion the service could not evaluate scores under ``/verify``: ``raise``
    #: (a 503 the agent raises on) or ``zero``. Not ``nan``: NeMo Gym answers JSON, which has
    #: no NaN. A failed kernel is not this: it has a verdict and a real reward.
    on_failure: Literal["raise", "zero"] = "raise"


class CrucibleVerifyRequest(BaseVerifyRequest):
    """What the agent posts: the row (any other fields kept), and the response."""

    model_config = ConfigDict(extra="allow")
    ground_truth: Any = None


class CrucibleVerifyResponse(CrucibleVerifyRequest, BaseVerifyResponse):
    """NeMo Gym's verify response (the request, echoed, and its ``reward``) and our numbers."""

    evaluated: float = 0.0
    format_ok: float = 0.0
    compiled: float = 0.0
    correct: float = 0.0
    speedup: float = 0.0
    verdict: Optional[str] = None
    feedback: Optional[str] = None


class _CrucibleClients:
    """One ``AsyncClient`` per event loop (an httpx client belongs to the loop it first ran
    in; NeMo Gym runs one loop per uvicorn worker, a test client one per portal)."""

    def __init__(self) -> None:
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = (
            weakref.WeakKeyDictionary())

    def get(self, config: CrucibleResourcesServerConfig) -> AsyncClient:
        loop = asyncio.get_running_loop()
        if loop not in self._clients:
            self._clients[loop] = AsyncClient(server_url(config.crucible_url),
                                              token=config.crucible_token)
        return self._clients[loop]


class CrucibleResourcesServer(SimpleResourcesServer):
    """A NeMo Gym resources server whose ``/verify`` is a Crucible rollout's reward."""

    config: CrucibleResourcesServerConfig
    _crucible: _CrucibleClients = PrivateAttr(default_factory=_CrucibleClients)

    async def verify(self, body: CrucibleVerifyRequest) -> CrucibleVerifyResponse:
        rollout = make_rollout("0", completion_text(body.response), **_target(body.ground_truth),
                               profile=self.config.profile,  # type: ignore[arg-type]
                               backend=self.config.backend)  # type: ignore[arg-type]
        client, settings = self._crucible.get(self.config), self.config.eval
        try:
            [result] = await score_async(client, [rollout], settings,  # type: ignore[arg-type]
                                         self.config.timeout_s)
        except SCORING_ERRORS as error:
            if self.config.on_failure == "raise" or not is_service_failure(error):
                raise _http_error(error) from None
            return CrucibleVerifyResponse(**body.model_dump(), reward=0.0)
        reward = result.get("reward")
        if reward is None:
            if self.config.on_failure == "raise":
                raise _http_error(NotEvaluated({result["id"]: result.get("error") or
                                                result["status"]}))
            reward = 0.0
        evaluation = result.get("result") or {}
        return CrucibleVerifyResponse(
            **body.model_dump(),
            reward=float(reward),
            **outcome_metrics(result),
            verdict=evaluation.get("verdict"),
            feedback=evaluation.get("feedback"),
        )


class CrucibleEpisodeServerConfig(CrucibleResourcesServerConfig):
    """``CrucibleResourcesServerConfig`` and the episode's knobs (docs/ENVIRONMENT.md)."""

    max_turns: int = 4
    gamma: float = 0.4
    early_stop_on_correct: bool = True
    speedup_threshold: Optional[float] = None
    #: The user message after a turn; ``{turn}`` and ``{feedback}`` (the server's) filled in.
    feedback_template: str = DEFAULT_FEEDBACK
    #: How many times a turn the service failed to evaluate is posted again.
    retries: int = 2


class CrucibleEpisodeServer(GymnasiumServer):
    """A NeMo Gym gymnasium-style resources server: one Crucible episode per rollout."""

    config: CrucibleEpisodeServerConfig
    _crucible: _CrucibleClients = PrivateAttr(default_factory=_CrucibleClients)

    async def reset(self, metadata: dict, session_id: Optional[str] = None
                    ) -> tuple[Optional[str], dict]:
        """Starts the episode; the dataset's prompt is what the model sees first (the
        observation is None), the episode's id is in ``info``."""
        if session_id is None:
            raise HTTPException(400, "no NeMo Gym session: use NeMo Gym's session middleware")
        config = self.config
        try:
            episode = await AsyncEpisode.start(
                self._crucible.get(config), **_target(metadata.get("ground_truth")),
                profile=config.profile, backend=config.backend, eval=config.eval,
                max_turns=config.max_turns, gamma=config.gamma,
                early_stop_on_correct=config.early_stop_on_correct,
                speedup_threshold=config.speedup_threshold)
        except (*SCORING_ERRORS, ValueError) as error:
            raise _http_error(error) from None
        self.session_state[session_id] = episode
        return None, {"episode_id": episode.id}

    async def step(self, action: NeMoGymResponse, metadata: dict,
                   session_id: Optional[str] = None
                   ) -> tuple[Optional[str], float, bool, bool, dict]:
        episode = self.session_state.get(session_id) if session_id is not None else None
        if not isinstance(episode, AsyncEpisode):
            raise HTTPException(409, "no Crucible episode in this session: /reset first")
        if episode.done:
            raise HTTPException(409, f"Crucible episode {episode.id} is done: /reset for another")
        try:
            view = await episode.step(completion_text(action), timeout=self.config.timeout_s,
                                      retries=self.config.retries)
        except SCORING_ERRORS as error:
            raise _http_error(error) from None
        numbers = outcome_metrics(view.get("rollout"))
        info: dict[str, Any] = {"episode_id": episode.id, "turn": view["turn"],
                                **numbers, "feedback": view["feedback"]}
        if view["done"]:
            info["returns"] = view.get("returns")
            solved = bool(numbers["correct"])
            return None, float(view["reward"] or 0.0), solved, not solved, info
        observation = self.config.feedback_template.format(turn=view["turn"],
                                                           feedback=view["feedback"])
        return observation, float(view["reward"] or 0.0), False, False, info

    async def close_session(self, session_id: Optional[str]) -> None:
        with contextlib.suppress(KeyError):
            del self.session_state[session_id]
