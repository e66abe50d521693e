"""The verifiers environment (crucible_client.verifiers_env) against the real verifiers package
(0.4.0, ``verifiers.v1``) and a live Crucible (conftest.py's server). verifiers' own loader
makes the environment from its taskset id, and verifiers' own rollout path runs it as its eval
runner does (``env.serving()``, ``env.run_slot``): the ``solver`` role on verifiers' ``null``
chat harness, whose program (a uv script) calls the model through verifiers' interception
server and eval client, here a scripted OpenAI-compatible server on 127.0.0.1
(scripted_openai.py) that answers the problem with a wrong kernel and the server's feedback
with a correct one. The rewards, metrics and feedback that reach verifiers' episode are
checked against the server's episode, read back through the API.

The harness program's first run installs its few packages with uv from PyPI (verifiers does
that itself; later runs use uv's cache). Skipped where verifiers is not installed
(scripts/test.sh runs this file in the trainer packages' venv)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import pytest
from conftest import Server
from scripted_openai import scripted_openai
from test_adapters import CORRECT, CORRECT_REWARD, FAST_EVAL, RELU_PROBLEM, WRONG, WRONG_REWARD
from test_adapters import tagged

vf = pytest.importorskip("verifiers.v1")

from crucible_client import Client  # noqa: E402
from crucible_client.verifiers_env import (  # noqa: E402
    ENV_ID,
    CrucibleEnv,
    CrucibleTaskset,
    feedback_message,
    load_environment,
)

#: One rollout's bound: the harness's first uv install, two CPU evaluations.
ROLLOUT_DEADLINE_S = 600.0
#: kernel_rl asks for a <think> section in episodes and weighs it 0.1.
THINKING = 0.1


@pytest.fixture(autouse=True)
def uv_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # verifiers runs the harness program with uv, found on PATH: the venv's own.
    bin_dir = os.path.dirname(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def policy(messages: list[dict[str, Any]]) -> str:
    """A wrong kernel for the problem, a correct one once the server's feedback is in."""
    last = [m for m in messages if m["role"] == "user"][-1]["content"]
    return tagged(CORRECT if "Feedback on it" in last else WRONG, "drafting")


def run_one(env: CrucibleEnv, model_url: str) -> Any:
    """One rollout of the taskset's first task, through verifiers' own runner path."""
    ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(
        base_url=model_url, api_key_var="CRUCIBLE_TEST_OPENAI_KEY"))

    async def main() -> Any:
        async with env.serving():
            [slot] = env.slots(next(iter(env.taskset)))
            return await env.run_slot(slot, ctx)

    return asyncio.run(asyncio.wait_for(main(), ROLLOUT_DEADLINE_S))


def test_bad_settings_are_refused_before_anything_is_sent():
    with pytest.raises(ValueError, match="names no problem"):
        load_environment(url="http://127.0.0.1:9", problems=[{"level": 1}])
    with pytest.raises(ValueError):
        load_environment(url="http://127.0.0.1:9", problems=[RELU_PROBLEM], max_turns=0)
    with pytest.raises(ValueError):
        load_environment(url="http://127.0.0.1:9", problems=[RELU_PROBLEM], reward="best")


def test_verifiers_loads_the_taskset_by_its_id(server: Server):
    config = vf.resolve_env_config({"taskset": {"id": ENV_ID, "url": server.url,
                                                "problem_set": {"level": 1}}})
    env = vf.load_environment(config)
    assert isinstance(env, CrucibleEnv) and isinstance(env.taskset, CrucibleTaskset)
    tasks = list(env.taskset)
    assert tasks and all(t.data.problem["level"] == 1 for t in tasks)
    assert [t.data.idx for t in tasks] == list(range(len(tasks)))


def test_a_rollout_is_the_servers_episode(server: Server):
    env = load_environment(url=server.url, problems=[RELU_PROBLEM], eval=FAST_EVAL, max_turns=3)
    with scripted_openai(policy) as model:
        episode = run_one(env, model.url)

    assert episode.ok, (episode.errors, [t.errors for t in episode.traces])
    [trace] = episode.traces
    assert trace.ok and trace.agent.name == "solver"
    info = trace.info["crucible"]
    with Client(server.url) as client:
        served = client.episode(info["episode_id"])
    assert served["done"] and len(served["turns"]) == 2 and info["done"]
    # The server's rewards, by hand: a wrong kernel, then a correct one that ends it early.
    rewards = [t["reward"] for t in served["turns"]]
    assert rewards == pytest.approx([WRONG_REWARD + THINKING, CORRECT_REWARD + THINKING])
    assert [t["reward"] for t in info["turns"]] == rewards
    assert info["returns"] == served["returns"]
    assert trace.rewards["crucible"].score == pytest.approx(served["returns"][0])
    assert trace.reward == pytest.approx(rewards[0] + 0.4 * rewards[1])
    assert trace.metrics == pytest.approx({
        "evaluated": 1.0, "format_ok": 1.0, "compiled": 1.0, "correct": 1.0,
        "speedup": served["turns"][1]["rollout"]["result"]["speedup"] or 0.0,
        "turns": 2.0, "solved": 1.0, "best_reward": rewards[1]})
    assert [t["verdict"] for t in info["turns"]] == ["incorrect", "ok"]
    assert [t["feedback"] for t in info["turns"]] == [t["feedback"] for t in served["turns"]]

    # What the model saw: the server's first prompt, then its feedback on the wrong kernel.
    first, second = model.user_messages
    assert first == served["prompt"]["text"]
    assert second == feedback_message(first, served["turns"][0])
    # The server's next prompt is the first one, then this: only the new part is sent.
    assert served["turns"][0]["next_prompt"]["text"].rstrip() == f"{first.rstrip()}\n\n{second}"
    assert second.startswith("Your answer to attempt 1:") and first not in second
    assert served["turns"][0]["feedback"].strip() in second
    assert len(model.requests[1]["messages"]) >= 3, "the conversation goes on in one chat"
    # And verifiers' trace holds the same conversation.
    replies = [m.content for m in trace.messages if isinstance(m, vf.AssistantMessage)]
    assert replies == [policy([{"role": "user", "content": first}]),
                       policy([{"role": "user", "content": second}])]


def test_the_last_reward_and_an_episode_of_one_turn(server: Server):
    env = load_environment(url=server.url, problems=[RELU_PROBLEM], eval=FAST_EVAL,
                           max_turns=1, reward="last")
    with scripted_openai(lambda messages: tagged(WRONG, "one try")) as model:
        episode = run_one(env, model.url)
    assert episode.ok, (episode.errors, [t.errors for t in episode.traces])
    [trace] = episode.traces
    info = trace.info["crucible"]
    assert info["done"] and len(model.requests) == 1
    assert trace.rewards["crucible"].score == pytest.approx(WRONG_REWARD + THINKING)
    assert trace.metrics["correct"] == 0.0 and trace.metrics["solved"] == 0.0
    with Client(server.url) as client:
        assert client.episode(info["episode_id"])["returns"] == info["returns"]
