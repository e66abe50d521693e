"""The NeMo Gym resources servers (crucible_client.nemo_gym_server) against the real nemo-gym
package (0.4.0) and a live Crucible (conftest.py's server).

The servers are made as NeMo Gym makes a resources server in its child process: the config is
read by NeMo Gym's own ``load_config_from_global_config`` from the ``NEMO_GYM_CONFIG_DICT`` and
``NEMO_GYM_CONFIG_PATH`` variables its ``gym env start`` sets (nemo_gym/cli/env.py, lines
197-200), here from the example's configs/crucible.yaml with the host and port the parent
fills in; then its app is ``setup_webserver()``'s FastAPI app, driven by FastAPI's TestClient
as NeMo Gym's own server tests do (resources_servers/code_gen/tests/test_app.py). The bodies
are those of its agents: ``simple_agent``'s ``/verify`` (the row and the response) and
``gymnasium_agent``'s ``/reset`` and ``/step``, whose answers are read with NeMo Gym's own
response models. The rewards are test_adapters.py's, and equal to what ``POST /rollouts`` and
``GET /episodes/{id}`` give for the same completions. Skipped where nemo-gym is not
installed (scripts/test.sh runs this file in the trainers' venv)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import MagicMock

import pytest
from conftest import Server
from test_adapters import CORRECT, CORRECT_REWARD, FAST_EVAL, PROSE_REWARD, RELU_PROBLEM
from test_adapters import TIMEOUT_S, WRONG, WRONG_REWARD, tagged

pytest.importorskip("nemo_gym.base_resources_server")

import yaml  # noqa: E402  (NeMo Gym's configs are YAML; it depends on PyYAML)
from fastapi.testclient import TestClient  # noqa: E402
from nemo_gym import global_config  # noqa: E402
from nemo_gym.base_resources_server import BaseVerifyResponse, SimpleResourcesServer  # noqa: E402
from nemo_gym.openai_utils import NeMoGymResponse  # noqa: E402
from nemo_gym.server_utils import ServerClient  # noqa: E402
from resources_servers.gymnasium import (  # noqa: E402
    EnvResetResponse,
    EnvStepResponse,
    GymnasiumServer,
)

from crucible_client import Client  # noqa: E402
from crucible_client.base import make_rollout  # noqa: E402
from crucible_client.nemo_gym_server import (  # noqa: E402
    CrucibleEpisodeServer,
    CrucibleResourcesServer,
    CrucibleVerifyResponse,
    completion_text,
)

EXAMPLE = (Path(__file__).resolve().parents[1] / "examples" / "nemo_gym" / "resources_servers"
           / "crucible" / "configs" / "crucible.yaml")
TASK, ROLLOUT = global_config.TASK_INDEX_KEY_NAME, global_config.ROLLOUT_INDEX_KEY_NAME
PROMPT = {"input": [{"role": "user", "content": "Make torch.relu faster as a Triton kernel."}]}


def response(text: str, thinking: str = "") -> dict[str, Any]:
    """A Responses-API response as NeMo Gym's vLLM model server makes it: a ``<think>``
    section becomes a reasoning item before the message (nemo_gym/responses_converter.py)."""
    output: list[dict[str, Any]] = []
    if thinking:
        output.append({"id": "rs_0", "type": "reasoning",
                       "summary": [{"type": "summary_text", "text": thinking}]})
    output.append({"id": "msg_0", "type": "message", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]})
    return NeMoGymResponse(id="resp_0", created_at=0.0, model="policy", object="response",
                           output=output, parallel_tool_calls=False, tool_choice="auto",
                           tools=[]).model_dump()


def make_server(cls: type, top_level: str, server: Server, monkeypatch: pytest.MonkeyPatch,
                **overrides: Any) -> Any:
    """``cls`` made from the example config as NeMo Gym's child process makes it."""
    config = yaml.safe_load(EXAMPLE.read_text())
    [section] = config[top_level]["resources_servers"].values()
    section.update(host="127.0.0.1", port=0, crucible_url=server.url, eval=FAST_EVAL,
                   timeout_s=TIMEOUT_S, **overrides)
    monkeypatch.setenv(global_config.NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME, yaml.safe_dump(config))
    monkeypatch.setenv(global_config.NEMO_GYM_CONFIG_PATH_ENV_VAR_NAME, top_level)
    monkeypatch.setattr(global_config, "_GLOBAL_CONFIG_DICT", None)  # NeMo Gym's cache
    loaded = cls.load_config_from_global_config()
    assert loaded.name == top_level and loaded.crucible_url == server.url
    return cls(config=loaded, server_client=MagicMock(spec=ServerClient))


def test_the_completion_is_the_text_with_its_reasoning():
    got = completion_text(NeMoGymResponse.model_validate(response("answer", "plan")))
    assert got == "<think>plan</think>answer"
    assert completion_text(NeMoGymResponse.model_validate(response("just this"))) == "just this"


def test_verify_scores_as_crucible_does(server: Server, monkeypatch: pytest.MonkeyPatch):
    gym = make_server(CrucibleResourcesServer, "crucible", server, monkeypatch)
    assert isinstance(gym, SimpleResourcesServer)
    rows = [(tagged(CORRECT), "one block per program", RELU_PROBLEM),
            (tagged(WRONG), "", '{"level": 1, "id": 19}'),
            ("I would rather not.", "", RELU_PROBLEM)]
    with TestClient(gym.setup_webserver()) as http:
        answers = []
        for i, (text, thinking, truth) in enumerate(rows):
            # simple_agent's verify body: the row (with the indices NeMo Gym's rollout
            # collection gives it), then the response (its run()).
            body = {"responses_create_params": PROMPT, "ground_truth": truth,
                    TASK: i, ROLLOUT: 0, "response": response(text, thinking)}
            answer = http.post("/verify", json=body)
            assert answer.status_code == 200, answer.text
            BaseVerifyResponse.model_validate(answer.json())
            answers.append(CrucibleVerifyResponse.model_validate(answer.json()))
        metrics = http.post("/aggregate_metrics",
                            json={"verify_responses": [a.model_dump() for a in answers]})
        assert metrics.status_code == 200, metrics.text
    want = [CORRECT_REWARD + 0.1, WRONG_REWARD, PROSE_REWARD]
    assert [a.reward for a in answers] == pytest.approx(want)
    assert [(a.correct, a.compiled, a.evaluated) for a in answers] == [
        (1.0, 1.0, 1.0), (0.0, 1.0, 1.0), (0.0, 0.0, 1.0)]
    assert [a.verdict for a in answers[:2]] == ["ok", "incorrect"] and answers[0].speedup > 0
    assert answers[1].model_extra == {TASK: 1, ROLLOUT: 0}
    assert answers[0].ground_truth == RELU_PROBLEM
    # The same completions through the API: the same rewards.
    completions = [(f"<think>{t}</think>" if t else "") + text for text, t, _ in rows]
    with Client(server.url) as client:
        direct = client.score_rollouts(
            [make_rollout(str(i), c, problem=RELU_PROBLEM) for i, c in enumerate(completions)],
            FAST_EVAL, timeout=TIMEOUT_S)
    assert [a.reward for a in answers] == pytest.approx([r["reward"] for r in direct])
    # NeMo Gym's own aggregation of the verify responses: our numbers averaged with the reward.
    overall = metrics.json()["agent_metrics"]
    assert overall["mean/reward"] == pytest.approx(sum(want) / 3)
    assert overall["mean/correct"] == pytest.approx(1 / 3) and overall["mean/evaluated"] == 1.0


def test_bad_rows_are_refused_with_the_reason(server: Server, monkeypatch: pytest.MonkeyPatch):
    gym = make_server(CrucibleResourcesServer, "crucible", server, monkeypatch)
    body = {"responses_create_params": PROMPT, "response": response(tagged(CORRECT))}
    with TestClient(gym.setup_webserver()) as http:
        missing = http.post("/verify", json=body)
        assert missing.status_code == 422 and "ground_truth" in missing.text
        partial = http.post("/verify", json={**body, "ground_truth": {"level": 1}})
        assert partial.status_code == 422 and "names no problem" in partial.text
        unknown = http.post("/verify", json={**body, "ground_truth": {"level": 9, "id": 999}})
        assert unknown.status_code == 422 and "Crucible refused" in unknown.text
        no_response = http.post("/verify", json={"responses_create_params": PROMPT,
                                                 "ground_truth": RELU_PROBLEM})
        assert no_response.status_code == 422  # NeMo Gym's own model: the response is required
    with pytest.raises(ValueError, match="on_failure"):
        make_server(CrucibleResourcesServer, "crucible", server, monkeypatch, on_failure="nan")


def test_episode_server_plays_a_crucible_episode(server: Server, monkeypatch: pytest.MonkeyPatch):
    gym = make_server(CrucibleEpisodeServer, "crucible_episodes", server, monkeypatch,
                      max_turns=3)
    assert isinstance(gym, GymnasiumServer)
    row = {"responses_create_params": PROMPT, "ground_truth": RELU_PROBLEM}
    with TestClient(gym.setup_webserver()) as http:
        early = http.post("/step", json={**row, "response": response(tagged(WRONG))})
        assert early.status_code == 409 and "/reset first" in early.text
        # gymnasium_agent's run(): /reset with the row, then /step per model response, with
        # the cookies (NeMo Gym's session) carried along, as the test client does.
        reset = EnvResetResponse.model_validate(http.post("/reset", json=row).json())
        assert reset.observation is None
        episode_id = reset.info["episode_id"]
        steps = []
        for text, thinking in [(tagged(WRONG), "leaky, on purpose"),
                               (tagged(CORRECT), "one block per program")]:
            answer = http.post("/step", json={**row, "response": response(text, thinking)})
            assert answer.status_code == 200, answer.text
            steps.append(EnvStepResponse.model_validate(answer.json()))
        after = http.post("/step", json={**row, "response": response(tagged(CORRECT))})
        assert after.status_code == 409  # the session was closed with the episode
    first, second = steps
    assert first.reward == pytest.approx(WRONG_REWARD + 0.1)
    assert not (first.terminated or first.truncated)
    assert "turn 0" in first.observation and first.info["feedback"] in first.observation
    assert second.reward == pytest.approx(CORRECT_REWARD + 0.1)
    assert second.terminated and not second.truncated and second.observation is None
    with Client(server.url) as client:
        episode = client.episode(episode_id)
    assert episode["done"] and [t["reward"] for t in episode["turns"]] == pytest.approx(
        [first.reward, second.reward])
    assert second.info["returns"] == pytest.approx(episode["returns"])
    assert second.info["correct"] == 1.0 and second.info["turn"] == 1


def test_an_episode_that_runs_out_of_turns_is_truncated(server: Server,
                                                        monkeypatch: pytest.MonkeyPatch):
    gym = make_server(CrucibleEpisodeServer, "crucible_episodes", server, monkeypatch,
                      max_turns=1)
    row = {"responses_create_params": PROMPT, "ground_truth": RELU_PROBLEM}
    with TestClient(gym.setup_webserver()) as http:
        assert http.post("/reset", json=row).status_code == 200
        step = EnvStepResponse.model_validate(
            http.post("/step", json={**row, "response": response(tagged(WRONG))}).json())
        bad = http.post("/reset", json={**row, "ground_truth": 3})
        assert bad.status_code == 422 and "ground_truth" in bad.text
    assert step.truncated and not step.terminated and step.reward == pytest.approx(WRONG_REWARD)
    assert step.info["returns"] == pytest.approx([WRONG_REWARD])
