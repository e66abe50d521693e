"""The OpenEnv endpoint over HTTP against a live Crucible (conftest.py's server), with httpx
alone: ``/openenv/reset`` starting an episode of the problem a seed picks, ``/openenv/step``
turns scored as the episode's, ``/openenv/state``, the session routes' errors, and a plain GET
of the WebSocket route. test_openenv.py drives the WebSocket session with openenv-core's own
client."""

from __future__ import annotations

import httpx
import pytest
from conftest import Server
from test_adapters import CORRECT, CORRECT_REWARD, FAST_EVAL, RELU_PROBLEM, WRONG, WRONG_REWARD, tagged

#: The registry's ReLU alone, so any seed picks it.
RELU_ONLY = {"level": 1, "start": 19, "end": 19, "test_fraction": 0.0}


def post(server: Server, path: str, body: object) -> httpx.Response:
    return httpx.post(f"{server.url}/openenv/{path}", json=body, timeout=90.0)


def step_until_scored(server: Server, body: dict) -> httpx.Response:
    """A step, posted again while it answers 202 (the same step goes on waiting)."""
    for _ in range(20):
        answer = post(server, "step", body)
        if answer.status_code != 202:
            return answer
    pytest.fail(f"step not scored after 20 waits: {answer.text}")


def test_http_session_plays_an_episode_the_seed_picked(server: Server):
    reset = post(server, "reset", {"seed": 7, "problem_set": RELU_ONLY,
                                   "episode": {"eval": FAST_EVAL, "max_turns": 2}})
    assert reset.status_code == 200, reset.text
    first = reset.json()
    assert first["reward"] is None and first["done"] is False
    observation = first["observation"]
    assert observation["problem"] == RELU_PROBLEM and observation["turns"] == 0
    assert "torch.relu" in observation["prompt"] and observation["response_format"] in observation["prompt"]
    episode_id = observation["episode_id"]

    wrong = step_until_scored(server, {"action": {"completion": tagged(WRONG)},
                                       "episode_id": episode_id, "turn": 0})
    assert wrong.status_code == 200, wrong.text
    scored = wrong.json()
    assert scored["reward"] == pytest.approx(WRONG_REWARD) and scored["done"] is False
    assert scored["observation"]["turns"] == 1 and scored["observation"]["feedback"]
    assert scored["observation"]["feedback"] in scored["observation"]["prompt"]
    assert scored["observation"]["last_turn"]["rollout"]["result"]["verdict"] == "incorrect"

    right = step_until_scored(server, {"action": {"completion": tagged(CORRECT)},
                                       "episode_id": episode_id})
    assert right.status_code == 200, right.text
    last = right.json()
    assert last["reward"] == pytest.approx(CORRECT_REWARD) and last["done"] is True
    assert "prompt" not in last["observation"] and len(last["observation"]["returns"]) == 2

    state = httpx.get(f"{server.url}/openenv/state", params={"episode_id": episode_id}).json()
    assert state["step_count"] == 2 and state["done"] is True
    # The same episode as the episodes API keeps it: one set of rewards.
    episode = httpx.get(f"{server.url}/episodes/{episode_id}").json()
    assert state["rewards"] == [t["reward"] for t in episode["turns"]]
    assert state["returns"] == episode["returns"] == last["observation"]["returns"]
    # Done: a further step is the episodes API's 409.
    again = post(server, "step", {"action": {"completion": tagged(WRONG)},
                                  "episode_id": episode_id})
    assert again.status_code == 409 and again.json()["code"] == "CONFLICT"


def test_reset_attaches_to_an_episode_of_a_group(server: Server):
    started = httpx.post(f"{server.url}/episodes", json={
        "problem": RELU_PROBLEM, "group_size": 2, "eval": FAST_EVAL}).json()
    attached = post(server, "reset", {"episode_id": started["episode_ids"][1]})
    assert attached.status_code == 200, attached.text
    observation = attached.json()["observation"]
    assert observation["episode_id"] == started["episode_ids"][1]
    assert observation["prompt"] == started["prompt"]["text"] and observation["turns"] == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"sed": 1}, None),
        ({"episode_id": "e_x", "seed": 1}, "episode_id"),
        ({"episode": {"group_size": 2}}, "episode.group_size"),
        ({"episode": {"max_turns": 99}}, "episode.max_turns"),
        ({"problem_set": {"level": 9}}, "problem_set.level"),
        ({"split": "test", "problem_set": RELU_ONLY}, "split"),
    ],
)
def test_bad_resets_are_422_naming_the_field(server: Server, body: dict, field: str | None):
    answer = post(server, "reset", body)
    assert answer.status_code == 422, answer.text
    error = answer.json()
    assert error["code"] == "VALIDATION"
    if field is not None:
        assert error.get("field") == field, error


def test_session_routes_refuse_unknown_episodes_and_bad_steps(server: Server):
    unknown = post(server, "step", {"action": {"completion": "x"}, "episode_id": "e_nope"})
    assert unknown.status_code == 404 and unknown.json()["code"] == "NOT_FOUND"
    state = httpx.get(f"{server.url}/openenv/state", params={"episode_id": "e_nope"})
    assert state.status_code == 404
    no_action = post(server, "step", {"episode_id": "e_nope"})
    assert no_action.status_code == 422
    too_long = post(server, "step", {"action": {"completion": "x"}, "episode_id": "e_nope",
                                     "timeout_s": 600})
    assert too_long.status_code == 422 and too_long.json()["field"] == "timeout_s"


def test_plain_get_of_the_websocket_is_426_and_the_info_routes_answer(server: Server):
    plain = httpx.get(f"{server.url}/openenv/ws")
    assert plain.status_code == 426 and plain.json()["code"] == "UPGRADE_REQUIRED"
    assert httpx.get(f"{server.url}/openenv/health").json() == {"status": "healthy"}
    assert httpx.get(f"{server.url}/openenv/metadata").json()["name"] == "crucible"
    schema = httpx.get(f"{server.url}/openenv/schema").json()
    assert set(schema) >= {"action", "observation", "state"}
    assert "completion" in schema["action"]["properties"]
    assert schema["action"]["required"] == ["completion"]
    assert "TurnView" in schema["components"]["schemas"]
