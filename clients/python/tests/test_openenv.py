"""The OpenEnv endpoint's WebSocket session against the real openenv-core package and a live
Crucible (conftest.py's server): openenv-core's own ``GenericEnvClient``, unmodified, plays an
episode (reset with a seed, a wrong kernel, a correct one that ends it, state), its rewards and
feedback checked against the episode the episodes API keeps; ``CrucibleEnv`` (crucible_client's
``EnvClient``) through OpenEnv's sync wrapper and with a bearer token; and the session's
errors as OpenEnv's client raises them. Skipped where openenv-core is not installed
(scripts/test.sh runs this file in the trainers' venv)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from conftest import ADMIN_TOKEN, Server
from test_adapters import CORRECT, CORRECT_REWARD, FAST_EVAL, RELU_PROBLEM, WRONG, WRONG_REWARD, tagged

pytest.importorskip("openenv.core.env_client")

from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402

from crucible_client.openenv_env import CrucibleEnv, KernelObservation, openenv_url  # noqa: E402

RELU_ONLY = {"level": 1, "start": 19, "end": 19, "test_fraction": 0.0}
#: A CPU evaluation takes seconds; OpenEnv's default message timeout would do, but not on a
#: loaded machine.
MESSAGE_TIMEOUT_S = 600.0


def test_openenvs_own_client_plays_an_episode(server: Server):
    async def play() -> tuple[list[StepResult], dict]:
        env = GenericEnvClient(base_url=openenv_url(server.url),
                               message_timeout_s=MESSAGE_TIMEOUT_S)
        async with env:
            before = await env.state()
            assert before["episode_id"] is None and before["step_count"] == 0
            first = await env.reset(seed=3, problem_set=RELU_ONLY,
                                    episode={"eval": FAST_EVAL, "max_turns": 3})
            wrong = await env.step({"completion": tagged(WRONG)})
            right = await env.step({"completion": tagged(CORRECT)})
            state = await env.state()
        return [first, wrong, right], state

    (first, wrong, right), state = asyncio.run(play())
    assert first.reward is None and not first.done
    assert first.observation["problem"] == RELU_PROBLEM and "torch.relu" in first.observation["prompt"]
    assert wrong.reward == pytest.approx(WRONG_REWARD) and not wrong.done
    assert wrong.observation["feedback"] and wrong.observation["feedback"] in wrong.observation["prompt"]
    # Early stop at the first correct kernel (the episode's default), before max_turns.
    assert right.reward == pytest.approx(CORRECT_REWARD) and right.done
    assert state["step_count"] == 2 and state["done"] is True
    episode_id = first.observation["episode_id"]
    episode = httpx.get(f"{server.url}/episodes/{episode_id}").json()
    assert [t["reward"] for t in episode["turns"]] == [wrong.reward, right.reward]
    assert [t["feedback"] for t in episode["turns"]] == [
        wrong.observation["feedback"], right.observation["feedback"]]
    assert right.observation["returns"] == episode["returns"] == state["returns"]


def test_crucible_env_through_openenvs_sync_wrapper(server: Server):
    with CrucibleEnv(server.url, message_timeout_s=MESSAGE_TIMEOUT_S).sync() as env:
        first = env.reset(episode={"problem": RELU_PROBLEM, "eval": FAST_EVAL, "max_turns": 1})
        assert isinstance(first.observation, KernelObservation)
        assert first.observation.turns == 0 and first.observation.max_turns == 1
        last = env.step(tagged(WRONG))
        assert isinstance(last.observation, KernelObservation)
        assert last.done and last.reward == pytest.approx(WRONG_REWARD)
        assert last.observation.verdict == "incorrect" and last.observation.prompt is None
        # A new episode in the same session.
        again = env.reset(episode={"problem": RELU_PROBLEM, "eval": FAST_EVAL})
        assert again.observation.episode_id != first.observation.episode_id
        assert env.state()["step_count"] == 0


def test_session_errors_reach_openenvs_client_and_the_session_goes_on(server: Server):
    async def play() -> None:
        async with GenericEnvClient(base_url=openenv_url(server.url),
                                    message_timeout_s=MESSAGE_TIMEOUT_S) as env:
            with pytest.raises(RuntimeError, match="SESSION_ERROR"):
                await env.step({"completion": "x"})
            with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                await env.reset(sed=1)
            with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                await env.reset(episode={"max_turns": 0})
            with pytest.raises(RuntimeError, match="EXECUTION_ERROR"):
                await env.reset(episode_id="e_nope")
            ok = await env.reset(episode={"problem": RELU_PROBLEM, "eval": FAST_EVAL})
            with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                await env.step({"code": "not a completion"})
            assert (await env.state())["episode_id"] == ok.observation["episode_id"]

    asyncio.run(play())


def test_crucible_env_sends_the_token_where_one_is_required(secured: Server):
    async def tenant_token() -> str:
        async with httpx.AsyncClient(base_url=secured.url) as http:
            answer = await http.post("/admin/tenants", json={"name": "openenv-test"},
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            assert answer.status_code == 201, answer.text
            return answer.json()["token"]

    token = asyncio.run(tenant_token())
    # OpenEnv's own client sends no token: the handshake is refused.
    with pytest.raises(ConnectionError):
        asyncio.run(GenericEnvClient(base_url=openenv_url(secured.url)).connect())

    async def with_token() -> dict:
        async with CrucibleEnv(secured.url, token=token) as env:
            return await env.state()

    assert asyncio.run(with_token())["step_count"] == 0
