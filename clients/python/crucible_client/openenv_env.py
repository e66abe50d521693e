"""Crucible as an OpenEnv environment, on openenv-core's own ``EnvClient``
(``pip install 'crucible-client[openenv]'``).

The server speaks OpenEnv at ``/openenv`` (docs/trainers/openenv.md): a WebSocket session
``/openenv/ws`` per environment, in which ``reset`` starts a Crucible episode (one kernel
problem) and observes its first prompt, each ``step`` is one turn's completion, observed as
the turn's reward, feedback and next prompt, and ``state`` is where the episode stands. Any
OpenEnv client can use it as it is (``GenericEnvClient(base_url=".../openenv")``); this one
adds what a training loop wants on top:

- ``CrucibleEnv(url, token=...)``: the base URL of the service (``/openenv`` is added), the
  bearer token on the WebSocket handshake (``EnvClient`` sends none), and a message timeout
  long enough for a GPU evaluation (OpenEnv's default of 60 s is shorter than a CUDA build).
- ``step`` takes the completion as a string (or ``{"completion": ...}``) and answers a
  ``StepResult`` whose ``observation`` is a ``KernelObservation``.

The environment is async, as ``EnvClient`` is; ``.sync()`` gives OpenEnv's synchronous
wrapper.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
    from websockets.asyncio.client import connect as ws_connect
except ImportError as error:  # pragma: no cover - the message is the point
    raise ImportError(
        "crucible_client.openenv_env needs openenv-core: pip install 'crucible-client[openenv]'"
    ) from error

#: Where the server serves OpenEnv, below its base URL.
OPENENV_PATH = "/openenv"
#: How long one message waits for its answer by default, in seconds: a step's answer comes
#: once the turn is scored, which on a GPU includes the queue and a cold CUDA build.
DEFAULT_MESSAGE_TIMEOUT_S = 1800.0


@dataclass
class KernelObservation:
    """What the model sees after ``reset`` or a ``step`` (the server's ``OpenEnvObservation``)."""

    #: The episode this session plays (``GET /episodes/{id}`` reads it whole).
    episode_id: str
    #: The answer format the reward parser reads (also inside ``prompt``).
    response_format: str
    #: Turns posted so far: the next step is turn ``turns``.
    turns: int
    max_turns: int
    #: What to give the model now; None once the episode is done or while a turn is pending.
    prompt: str | None = None
    #: The last turn's feedback; empty before the first.
    feedback: str = ""
    #: ``{"level", "id"}`` of a registered problem, else None.
    problem: dict[str, int] | None = None
    #: The last turn whole (status, reward, the rollout and its evaluation result).
    last_turn: dict[str, Any] | None = None
    #: Once done: the discounted return of every turn.
    returns: list[float] | None = None
    #: Anything else the server sent that this version does not name.
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> KernelObservation:
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        missing = {"episode_id", "response_format", "turns", "max_turns"} - data.keys()
        if missing:
            raise ValueError(f"not a Crucible observation (missing {sorted(missing)}): {data}")
        return cls(
            **{k: v for k, v in data.items() if k in known},
            extra={k: v for k, v in data.items() if k not in known},
        )

    @property
    def verdict(self) -> str | None:
        """The last turn's verdict (``ok``, ``incorrect``, ``hack``, ...), if it was evaluated."""
        result = ((self.last_turn or {}).get("rollout") or {}).get("result") or {}
        return result.get("verdict")


def openenv_url(url: str) -> str:
    """The OpenEnv base URL of a Crucible at ``url`` (``/openenv`` added once)."""
    url = url.rstrip("/")
    return url if url.endswith(OPENENV_PATH) else url + OPENENV_PATH


class CrucibleEnv(EnvClient[Any, KernelObservation, dict[str, Any]]):
    """One OpenEnv session of a Crucible server: one episode at a time."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:10907",
        *,
        token: str | None = None,
        message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(openenv_url(url), message_timeout_s=message_timeout_s, **kwargs)
        self._token = token if token is not None else os.environ.get("CRUCIBLE_TOKEN")

    async def connect(self) -> CrucibleEnv:
        if self._ws is not None or not self._token:
            await super().connect()
            return self
        # EnvClient sends no headers; the token goes on the handshake as the API reads it.
        try:
            self._ws = await ws_connect(
                self._ws_url,
                open_timeout=self._connect_timeout,
                max_size=self._max_message_size,
                additional_headers={"Authorization": f"Bearer {self._token}"},
            )
        except Exception as e:
            raise ConnectionError(f"failed to connect to {self._ws_url}: {e}") from e
        return self

    def _step_payload(self, action: Any) -> dict[str, Any]:
        if isinstance(action, str):
            return {"completion": action}
        if isinstance(action, dict):
            return action
        raise TypeError(
            "a step takes the completion as a str (or {\"completion\": ...}), "
            f"not {type(action).__name__}"
        )

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[KernelObservation]:
        return StepResult(
            observation=KernelObservation.from_wire(payload.get("observation") or {}),
            reward=payload.get("reward"),
            done=bool(payload.get("done", False)),
        )

    def _parse_state(self, payload: dict[str, Any]) -> dict[str, Any]:
        return payload
