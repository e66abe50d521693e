"""OpenRLHF's custom reward function (crucible_client/openrlhf_reward.py) against a live
Crucible (conftest.py's server).

Through OpenRLHF itself where it is installed (the trainer packages' venv holds openrlhf 0.11.2
without its GPU-only dependencies, which its reward path does not import): its
``SingleTurnAgentExecutor`` loads the file from ``remote_rm_url`` as it does for
``--reward.remote_url``, and its ``execute`` generates with a scripted engine (the tokens of a
fixed answer, then EOS, through a real offline tokenizer) and calls ``reward_func`` as it
always does; the rewards it keeps are then wrapped as ``samples_generator.py`` wraps them.
Elsewhere, by call shape: ``reward_func([query], [prompt], [label])`` in a thread, as
``_fetch_rewards_via_func`` calls it (openrlhf/utils/agent.py, line 318)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import Server
from test_adapters import CORRECT, CORRECT_REWARD, FAST_EVAL, PROSE_REWARD, RELU, RELU_PROBLEM
from test_adapters import TIMEOUT_S, WRONG, WRONG_REWARD, tagged

torch = pytest.importorskip("torch")

from crucible_client import openrlhf_reward  # noqa: E402
from crucible_client.openrlhf_reward import completion_of, make_reward_func  # noqa: E402

REWARD_FILE = Path(openrlhf_reward.__file__)
#: A prompt as a chat template leaves it, holding a kernel of its own: only the completion
#: after it may be scored.
PROMPT = ("<bos>System: You write Triton kernels.\nUser: Make torch.relu faster. Answer after "
          f"<KERNEL> in a fenced block, like this one:\n<KERNEL>\n```python\n{CORRECT}```\n"
          "Assistant:")
ANSWERS = [tagged(CORRECT), tagged(WRONG), "I would rather not."]
LABELS = [json.dumps(RELU_PROBLEM), RELU, {"level": 1, "id": 19}]
WANT = [(CORRECT_REWARD, 1.0), (WRONG_REWARD, 0.0), (PROSE_REWARD, 0.0)]


@pytest.fixture
def crucible_env(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # OpenRLHF passes the function nothing but the samples: its settings are the environment's.
    monkeypatch.setenv("CRUCIBLE_URL", server.url)
    monkeypatch.setenv("CRUCIBLE_EVAL", json.dumps(FAST_EVAL))
    monkeypatch.setenv("CRUCIBLE_TIMEOUT", str(TIMEOUT_S))


def test_the_completion_is_what_follows_the_prompt():
    assert completion_of("PROMPT answer", "PROMPT") == " answer"
    # A prompt cut on the left (OpenRLHF keeps the last max_prompt_length tokens).
    long_prompt = "x" * 300 + "the end of the prompt."
    assert completion_of(long_prompt[-250:] + "answer", long_prompt) == "answer"
    with pytest.raises(ValueError, match="end of its prompt"):
        completion_of("something else entirely", "PROMPT")


def test_bad_input_is_refused_before_anything_is_sent():
    reward = make_reward_func(url="http://127.0.0.1:9")
    with pytest.raises(ValueError, match="one of each"):
        reward(["a"], ["a", "b"], [RELU])
    with pytest.raises(ValueError, match="no queries"):
        reward([], [], [])
    with pytest.raises(ValueError, match="on_failure"):
        make_reward_func(on_failure="none")
    with pytest.raises(ValueError, match="names no problem"):
        reward([PROMPT + "x"], [PROMPT], [{"level": 1}])


def test_reward_func_by_call_shape(crucible_env: None):
    async def as_openrlhf_calls_it(query: str, prompt: str, label: Any) -> dict[str, Any]:
        return await asyncio.to_thread(openrlhf_reward.reward_func, [query], [prompt], [label])

    async def main() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(as_openrlhf_calls_it(PROMPT + a, PROMPT, label)
                                           for a, label in zip(ANSWERS, LABELS))))

    for info, (reward, correct) in zip(asyncio.run(main()), WANT):
        assert info["rewards"].tolist() == pytest.approx([reward])
        assert info["scores"].tolist() == [correct]
        assert info["extra_logs"]["crucible/correct"].tolist() == [correct]
        assert info["extra_logs"]["crucible/evaluated"].tolist() == [1.0]


class ScriptedEngine:
    """What ``execute`` asks of a vLLM engine: ``generate(prompt_token_ids, params,
    multi_modal_data=)`` → ``.outputs[0]`` with ``token_ids``, ``finish_reason``, ``logprobs``.
    Answers each prompt with a fixed text and EOS, as a sampler stops."""

    def __init__(self, tokenizer, answer: str) -> None:
        self.tokenizer, self.answer = tokenizer, answer
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_token_ids, params, multi_modal_data=None):
        assert params.max_tokens and multi_modal_data is None
        self.prompts.append(list(prompt_token_ids))
        tokens = self.tokenizer.encode(self.answer, add_special_tokens=False)
        output = SimpleNamespace(token_ids=[*tokens, self.tokenizer.eos_token_id],
                                 finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[output])


def test_openrlhf_loads_and_calls_the_reward_function(crucible_env: None):
    agent = pytest.importorskip("openrlhf.utils.agent")
    from offline_tokenizer import offline_tokenizer

    tokenizer = offline_tokenizer([PROMPT, *ANSWERS])
    executor = agent.SingleTurnAgentExecutor(remote_rm_url=str(REWARD_FILE))
    # Loaded by OpenRLHF from the file, not imported from the package.
    assert executor.reward_func is not openrlhf_reward.reward_func
    assert executor.reward_func.__module__ == "reward_func"
    sampling = SimpleNamespace(max_tokens=None, logprobs=None)

    async def main() -> list[dict[str, Any]]:
        runs = []
        for answer, label in zip(ANSWERS, LABELS):
            engine = ScriptedEngine(tokenizer, answer)
            runs.append(executor.execute(PROMPT, label, sampling, 4096, tokenizer, engine))
        return list(await asyncio.gather(*runs))

    outputs = asyncio.run(main())
    for output, (reward, correct) in zip(outputs, WANT):
        assert output["reward"] is not None, "OpenRLHF logged a failed reward call"
        assert tokenizer.decode(output["observation_tokens"]).endswith("<eos>")
        # As samples_generator.py (lines 283-293) turns them into the experience's info.
        assert torch.tensor([output["reward"]]).tolist() == pytest.approx([reward])
        assert torch.tensor([output["scores"]]).tolist() == [correct]
        logs = {k: v.flatten()[0].item() for k, v in output["extra_logs"].items()}
        assert logs["crucible/correct"] == correct and logs["crucible/evaluated"] == 1.0
        assert logs["crucible/compiled"] == (1.0 if reward else 0.0)
