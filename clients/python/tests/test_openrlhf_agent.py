"""OpenRLHF's multi-turn agent (crucible_client/openrlhf_agent.py) through OpenRLHF's own
``MultiTurnAgentExecutor.execute`` (openrlhf/utils/agent.py, lines 32-185) against a live
Crucible (conftest.py's server), with a scripted engine (fixed answers, each ending in EOS,
through a real offline tokenizer). The file is loaded as ``_load_agent_executor``
(openrlhf/trainer/ray/vllm_engine.py, lines 19-30) loads ``--train.agent_func_path``: that
module needs ray and vllm, so its few steps are taken here by call shape. Rewards, feedback and
turns are checked against the episode read back with ``GET /episodes/{id}``.

Runs where openrlhf is installed (the trainer packages' venv: scripts/test.sh); skipped
elsewhere, since the agent file imports OpenRLHF's base classes."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import Server
from test_adapters import CORRECT, CORRECT_REWARD, FAST_EVAL, RELU, RELU_PROBLEM, TIMEOUT_S
from test_adapters import WRONG, WRONG_REWARD, tagged

torch = pytest.importorskip("torch")
agent = pytest.importorskip("openrlhf.utils.agent")

from crucible_client import Client  # noqa: E402
from crucible_client import openrlhf_agent  # noqa: E402
from crucible_client.episodes import feedback_message  # noqa: E402
from crucible_client.openrlhf_agent import AgentSettings, make_agent_executor  # noqa: E402

#: kernel_rl asks for a <think> section (its thinking weight is above 0): 0.1 more with one.
THINKING = 0.1
GOOD, BAD = tagged(CORRECT, "drafting"), tagged(WRONG, "drafting")
PROMPT = "<bos>User: Make torch.relu faster with Triton.\nAssistant:"
FEEDBACK_TEMPLATE = "\nUser: {feedback}\nAssistant:"
PROMPT_TEMPLATE = "<bos>User: {prompt}\nAssistant:"
MAX_TURNS = 3
#: The whole run's bound: a few turns of CPU evaluation each.
RUN_DEADLINE_S = 900.0


@pytest.fixture
def crucible_env(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # OpenRLHF makes each sample's agent without arguments: its settings are the environment's.
    monkeypatch.setenv("CRUCIBLE_URL", server.url)
    monkeypatch.setenv("CRUCIBLE_EVAL", json.dumps(FAST_EVAL))
    monkeypatch.setenv("CRUCIBLE_TIMEOUT", str(TIMEOUT_S))
    monkeypatch.setenv("CRUCIBLE_EPISODE", json.dumps({"max_turns": MAX_TURNS}))
    monkeypatch.setenv("CRUCIBLE_FEEDBACK_TEMPLATE", FEEDBACK_TEMPLATE)


def load_agent_file() -> Any:
    """The agent file's executor, as ``_load_agent_executor`` makes it."""
    spec = importlib.util.spec_from_file_location("agent_module", openrlhf_agent.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert hasattr(module, "AgentExecutor")
    assert issubclass(module.AgentExecutor, agent.AgentExecutorBase)
    return module, module.AgentExecutor()


def test_openrlhf_loads_the_agent_file():
    module, executor = load_agent_file()
    assert isinstance(executor, agent.MultiTurnAgentExecutor)
    # Loaded from the file, not the package's module: the classes are the file's own.
    assert executor.agent_instance_cls is module.AgentInstance
    assert module.AgentInstance is not openrlhf_agent.AgentInstance
    assert issubclass(executor.agent_instance_cls, agent.AgentInstanceBase)


def test_bad_settings_are_refused_before_anything_is_sent(monkeypatch: pytest.MonkeyPatch):
    for bad, match in [({"on_failure": "none"}, "on_failure"), ({"reward": "best"}, "reward"),
                       ({"episode": {"problem": RELU_PROBLEM}}, "problem is the label"),
                       ({"feedback_template": "no slot"}, "{feedback}"),
                       ({"prompt_template": "no slot"}, "{prompt}"),
                       ({"timeout": 0}, "timeout")]:
        with pytest.raises(ValueError, match=match):
            AgentSettings(**bad)
    monkeypatch.setenv("CRUCIBLE_EPISODE", "max_turns=2")
    with pytest.raises(ValueError, match="CRUCIBLE_EPISODE is not JSON"):
        openrlhf_agent.AgentInstance()
    monkeypatch.setenv("CRUCIBLE_EPISODE", "[2]")
    with pytest.raises(ValueError, match="JSON object"):
        openrlhf_agent.AgentInstance()
    monkeypatch.delenv("CRUCIBLE_EPISODE")
    instance = openrlhf_agent.AgentInstance()
    with pytest.raises(RuntimeError, match="reset"):
        asyncio.run(instance.step({"action_text": "x"}))
    # The label is read before the server is asked anything (nothing listens on port 9).
    monkeypatch.setenv("CRUCIBLE_URL", "http://127.0.0.1:9")
    with pytest.raises(ValueError, match="names no problem"):
        asyncio.run(instance.reset({"observation": PROMPT, "label": {"level": 1}}))


class ScriptedEngine:
    """What ``MultiTurnAgentExecutor.execute`` asks of a vLLM engine: ``generate(tokens,
    params, multi_modal_data=)`` → ``.outputs[0]`` with ``token_ids``, ``text``,
    ``finish_reason``, ``logprobs``. Answers its prompts with the scripted texts in turn."""

    def __init__(self, tokenizer, answers: list[str]) -> None:
        self.tokenizer, self.answers = tokenizer, list(answers)
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_token_ids, params, multi_modal_data=None):
        assert params.max_tokens > 0 and multi_modal_data is None
        if len(self.prompts) == len(self.answers):
            raise AssertionError(f"a generation past the script ({len(self.answers)} turns)")
        answer = self.answers[len(self.prompts)]
        self.prompts.append(list(prompt_token_ids))
        tokens = self.tokenizer.encode(answer, add_special_tokens=False)
        # vLLM's text leaves out the EOS it stopped at; its token ids hold it.
        output = SimpleNamespace(token_ids=[*tokens, self.tokenizer.eos_token_id], text=answer,
                                 finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


def recording(cls: type, instances: list[Any]) -> type:
    """``cls`` that keeps each instance the executor makes (to read its episode back): the
    executor's instance class is the only thing changed."""

    class Recording(cls):
        def __init__(self) -> None:
            super().__init__()
            instances.append(self)

    return Recording


def as_experience_info(output: dict[str, Any]) -> dict[str, float]:
    """The output's reward, score and logs as ``samples_generator.py`` (lines 283-293) turns
    them into an experience's info (by call shape: that module needs ray and vllm)."""
    info = {"reward": torch.tensor([output["reward"]]).item(),
            "score": torch.tensor([output["scores"]]).item()}
    for key, value in output["extra_logs"].items():
        info[key] = torch.tensor([value.flatten()[0].item()]).item()
    return info


def test_multi_turn_rollouts_are_the_servers_episodes(server: Server, crucible_env: None):
    from offline_tokenizer import offline_tokenizer

    tokenizer = offline_tokenizer([PROMPT, GOOD, BAD])
    _, executor = load_agent_file()
    instances: list[Any] = []
    executor.agent_instance_cls = recording(executor.agent_instance_cls, instances)
    # Settings in code, as a file of one's own would make them: the last turn's reward, and the
    # server's first prompt shown in a template instead of the dataset's.
    last = make_agent_executor(url=server.url, eval=FAST_EVAL, timeout=TIMEOUT_S,
                               episode={"max_turns": MAX_TURNS}, reward="last",
                               feedback_template=FEEDBACK_TEMPLATE,
                               prompt_template=PROMPT_TEMPLATE)()
    last.agent_instance_cls = recording(last.agent_instance_cls, instances)
    prompt_tokens = tokenizer.encode(PROMPT, add_special_tokens=False)
    # Room for the prompt and one answer, not for the feedback after it.
    tight = len(prompt_tokens) + len(tokenizer.encode(BAD, add_special_tokens=False)) + 2
    cases = [  # executor, label, answers, max_length
        (executor, json.dumps(RELU_PROBLEM), [BAD, GOOD], 1 << 16),  # correct: stops early
        (executor, RELU, [BAD, BAD, BAD], 1 << 16),  # runs out of turns
        (executor, RELU_PROBLEM, [BAD], tight),  # OpenRLHF's budget ends it, the episode open
        (last, RELU_PROBLEM, [BAD, GOOD], 1 << 16),
    ]
    engines = [ScriptedEngine(tokenizer, answers) for _, _, answers, _ in cases]

    async def main() -> list[dict[str, Any]]:
        runs = []
        for (ex, label, _, max_length), engine in zip(cases, engines):
            # Each sample its own params: execute sets max_tokens on the object it is given.
            sampling = SimpleNamespace(max_tokens=None, logprobs=None)
            runs.append(ex.execute(PROMPT, label, sampling, max_length, tokenizer, engine))
        return list(await asyncio.gather(*runs))

    outputs = asyncio.run(asyncio.wait_for(main(), RUN_DEADLINE_S))
    # Made in order, each reset before any await: instance i is case i's.
    assert len(instances) == len(cases)
    with Client(server.url) as client:
        served = [client.episode(i.episode.id) for i in instances]

    bad, good = WRONG_REWARD + THINKING, CORRECT_REWARD + THINKING
    want_rewards = [[bad, good], [bad] * MAX_TURNS, [bad], [bad, good]]
    for episode, rewards, (_, _, answers, _) in zip(served, want_rewards, cases):
        assert [t["reward"] for t in episode["turns"]] == pytest.approx(rewards)
        assert [t["status"] for t in episode["turns"]] == ["scored"] * len(answers)
    assert [e["done"] for e in served] == [True, True, False, True]
    assert served[0]["returns"] == pytest.approx([bad + 0.4 * good, good])
    assert served[2].get("returns") is None

    # The sample's reward: the sum of the steps' rewards (execute, line 122).
    infos = [as_experience_info(o) for o in outputs]
    assert infos[0]["reward"] == pytest.approx(served[0]["returns"][0])
    assert infos[1]["reward"] == pytest.approx(served[1]["returns"][0])
    assert infos[2]["reward"] == pytest.approx(bad)  # the return of the one turn played
    assert infos[3]["reward"] == pytest.approx(served[3]["turns"][-1]["reward"])
    assert [i["score"] for i in infos] == [1.0, 0.0, 0.0, 1.0]
    assert [i["crucible/solved"] for i in infos] == [1.0, 0.0, 0.0, 1.0]
    assert [i["crucible/correct"] for i in infos] == [1.0, 0.0, 0.0, 1.0]
    assert [i["crucible/turns"] for i in infos] == [2.0, 3.0, 1.0, 2.0]
    for info, episode in zip(infos, served):
        assert info["crucible/turn_reward"] == pytest.approx(episode["turns"][-1]["reward"])
        assert info["crucible/evaluated"] == info["crucible/compiled"] == 1.0

    # What the model saw: the prompt, each answer and EOS, then the server's feedback in the
    # template; nothing after the last answer of a finished episode.
    for output, engine, episode, (_, _, answers, _) in zip(outputs, engines, served, cases):
        first = episode["prompt"]["text"]
        shown = PROMPT_TEMPLATE.replace("{prompt}", first) if engine is engines[3] else PROMPT
        feedbacks = [FEEDBACK_TEMPLATE.replace("{feedback}", feedback_message(first, t))
                     for t in episode["turns"]]
        for turn, feedback in enumerate(feedbacks):
            assert episode["turns"][turn]["feedback"].strip() in feedback
        context = shown
        for turn, answer in enumerate(answers):
            assert tokenizer.decode(engine.prompts[turn]) == context
            context += answer + "<eos>" + feedbacks[turn]
        assert len(engine.prompts) == len(answers)
        assert len(output["action_ranges"]) == len(answers)
        decoded = tokenizer.decode(output["observation_tokens"])
        if episode["done"]:
            assert decoded == context[: len(context) - len(feedbacks[-1])]
        else:  # the budget ran out: the last feedback was appended, then execute stopped
            assert decoded == context
