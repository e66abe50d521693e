"""The VERL agent loop (crucible_client.verl_agent_loop) against the real verl package and a
live Crucible (conftest.py's server): VERL's own ``AgentLoopWorker`` (built from VERL's
generated PPO config, the model directory a tiny offline tokenizer and a Llama config) loads
the loop from an agent loop config file, as a VERL run does, and its ``generate_sequences``
runs a batch through it. The server manager is scripted (``generate`` with VERL's signature,
answering token ids of scripted completions through the real tokenizer): a wrong kernel, then
a correct one once the server's feedback is in the prompt. What reaches the trainer (the
batch's ``rm_scores``, ``response_mask``, ``rollout_log_probs``, the reward extras) is checked
against the episodes read back through the API. Skipped where verl is not installed
(scripts/test.sh runs this file in the trainers' venv)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from conftest import Server
from offline_models import EOS, llama_dir, offline_tokenizer
from test_adapters import CORRECT, CORRECT_REWARD, FAST_EVAL, RELU_PROBLEM, TIMEOUT_S, WRONG
from test_adapters import WRONG_REWARD, tagged

pytest.importorskip("verl.experimental.agent_loop")

import numpy as np  # noqa: E402
import verl  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from crucible_client import Client  # noqa: E402
from crucible_client.verl_agent_loop import AGENT_NAME, CrucibleKernelAgentLoop  # noqa: E402

TARGET = f"{CrucibleKernelAgentLoop.__module__}.{CrucibleKernelAgentLoop.__qualname__}"
ASK = "Make torch.relu faster: give ModelNew after <KERNEL>."
STUBBORN = "(stubborn)"
LOGPROB = -0.5


class ScriptedServer:
    """VERL's server manager for the agent loop (``LLMServerClient.generate``'s signature):
    a wrong kernel first, a correct one once the prompt holds the server's feedback, and only
    wrong ones for a prompt marked stubborn; each answer ends with the end-of-turn token."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.calls: list[tuple[str, str]] = []

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        assert "temperature" in sampling_params
        prompt = self.tokenizer.decode(prompt_ids)
        self.calls.append((request_id, prompt))
        fixed = "was evaluated" in prompt and STUBBORN not in prompt
        answer = tagged(CORRECT if fixed else WRONG, "one block per program")
        ids = self.tokenizer.encode(answer + EOS, add_special_tokens=False)
        return TokenOutput(token_ids=ids, log_probs=[LOGPROB] * len(ids))


def worker(tmp_path: Path, server: Server, *, response_length: int = 8192, **settings: Any):
    """VERL's AgentLoopWorker with the agent loop registered from a config file under a name
    of its own (VERL's registry is per process), and its scripted server manager."""
    tokenizer = offline_tokenizer([CORRECT, WRONG, ASK])
    model = llama_dir(tmp_path / "model", tokenizer)
    name = f"{AGENT_NAME}_{tmp_path.name}"
    entry = {"name": name, "_target_": TARGET, "url": server.url, "eval": FAST_EVAL,
             "turn_timeout": TIMEOUT_S, **settings}
    OmegaConf.save(OmegaConf.create([entry]), tmp_path / "agent.yaml")
    config = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    rollout = config.actor_rollout_ref.rollout
    config.actor_rollout_ref.model.path = str(model)
    rollout.name, rollout.prompt_length, rollout.response_length = "vllm", 1024, response_length
    rollout.calculate_log_probs = True
    rollout.agent.agent_loop_config_path = str(tmp_path / "agent.yaml")
    scripted = ScriptedServer(tokenizer)
    return AgentLoopWorker(config, scripted), scripted, name, tokenizer


def batch(name: str, prompts: list[str], ground_truth: Any = RELU_PROBLEM) -> DataProto:
    rows = len(prompts)

    def column(values: list[Any]) -> np.ndarray:
        # One object per row (np.array would turn the lists of messages into a 2-D array).
        array = np.empty(rows, dtype=object)
        array[:] = values
        return array

    return DataProto.from_dict(non_tensors={
        "raw_prompt": column([[{"role": "user", "content": p}] for p in prompts]),
        "agent_name": column([name] * rows),
        "data_source": column(["crucible"] * rows),
        "reward_model": column([{"style": "rule", "ground_truth": ground_truth}] * rows),
        "index": np.arange(rows),
    })


def runs(mask: list[int]) -> list[tuple[int, int]]:
    """The mask as runs of (value, length)."""
    out: list[tuple[int, int]] = []
    for m in mask:
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1] + 1)
        else:
            out.append((m, 1))
    return out


def row(output: DataProto, i: int) -> dict[str, Any]:
    """Row ``i`` of VERL's output batch, without its padding."""
    attention = output.batch["attention_mask"][i].tolist()
    prompt_width = output.batch["prompts"].shape[1]
    length = sum(attention[prompt_width:])
    return {
        "responses": output.batch["responses"][i][:length].tolist(),
        "mask": output.batch["response_mask"][i][:length].tolist(),
        "logprobs": output.batch["rollout_log_probs"][i][:length].tolist(),
        "scores": output.batch["rm_scores"][i].tolist(),
        "length": length,
    }


def test_verl_runs_multi_turn_episodes(tmp_path: Path, server: Server):
    loop_worker, scripted, name, tokenizer = worker(tmp_path, server, max_turns=2)
    output = asyncio.run(loop_worker.generate_sequences(batch(name, [ASK, f"{ASK} {STUBBORN}"])))
    assert {"rm_scores", "response_mask", "rollout_log_probs"} <= set(output.batch.keys())
    assert list(output.non_tensor_batch["__num_turns__"]) == [4, 4]  # user, 2 x (model, feedback)
    assert {"score", "solved", "turns"} <= set(output.meta_info["reward_extra_keys"])
    assert list(output.non_tensor_batch["solved"]) == [1.0, 0.0]

    with Client(server.url) as client:
        episodes = [client.episode(i) for i in output.non_tensor_batch["crucible_episode_id"]]
    fixed, stubborn = episodes
    assert fixed["done"] and stubborn["done"]  # early stop at the correct kernel; max turns
    turn_rewards = [[t["reward"] for t in e["turns"]] for e in episodes]
    assert turn_rewards[0] == pytest.approx([WRONG_REWARD + 0.1, CORRECT_REWARD + 0.1])
    assert turn_rewards[1] == pytest.approx([WRONG_REWARD + 0.1] * 2)
    for i, episode in enumerate(episodes):
        got = row(output, i)
        assert list(output.non_tensor_batch["turn_scores"][i]) == pytest.approx(turn_rewards[i])
        # The trajectory's reward is the episode's R_0, on its last token alone.
        assert got["scores"][got["length"] - 1] == pytest.approx(episode["returns"][0])
        assert sum(got["scores"]) == pytest.approx(episode["returns"][0])
        # Model tokens, the feedback (not the model's: mask 0, log prob 0), model tokens.
        pattern = runs(got["mask"])
        assert [value for value, _ in pattern] == [1, 0, 1]
        (_, first), (_, feedback), _ = pattern
        assert set(got["logprobs"][:first]) == {LOGPROB}
        assert set(got["logprobs"][first:first + feedback]) == {0.0}
        text = tokenizer.decode(got["responses"][first:first + feedback])
        assert episode["turns"][0]["feedback"] in text and "turn 0" in text
        answer = tokenizer.decode(got["responses"][:first], skip_special_tokens=True)
        assert answer == tagged(WRONG, "one block per program")
    assert fixed["returns"][0] == pytest.approx(turn_rewards[0][0] + 0.4 * turn_rewards[0][1])
    # One request id per trajectory, kept across its turns; the second turn saw the feedback.
    assert len(scripted.calls) == 4 and len({rid for rid, _ in scripted.calls}) == 2
    assert sum("was evaluated" in prompt for _, prompt in scripted.calls) == 2


def test_verl_limits_end_the_trajectory_first(tmp_path: Path, server: Server):
    """response_length leaves no room after the first answer: one turn, an episode the server
    would have continued, and its reward the discounted return of the turns it got."""
    probe = offline_tokenizer([CORRECT, WRONG, ASK])
    first = len(probe.encode(tagged(WRONG, "one block per program") + EOS, add_special_tokens=False))
    loop_worker, scripted, name, _ = worker(tmp_path, server, response_length=first + 20,
                                            max_turns=3, prompt="server", reward="return")
    output = asyncio.run(loop_worker.generate_sequences(batch(name, [ASK])))
    got = row(output, 0)
    assert runs(got["mask"]) == [(1, first)]
    with Client(server.url) as client:
        episode = client.episode(output.non_tensor_batch["crucible_episode_id"][0])
    assert not episode["done"] and len(episode["turns"]) == 1
    assert sum(got["scores"]) == pytest.approx(episode["turns"][0]["reward"])
    # prompt: server puts the episode's own first prompt in place of the row's.
    [(_, prompt)] = scripted.calls
    assert episode["prompt"]["text"] in prompt and ASK not in prompt


def test_bad_rows_and_settings_are_refused(tmp_path: Path, server: Server):
    loop_worker, _, name, _ = worker(tmp_path, server)
    bad = batch(name, [ASK])
    del bad.non_tensor_batch["reward_model"]
    with pytest.raises(ValueError, match="reward_model.ground_truth"):
        asyncio.run(loop_worker.generate_sequences(bad))
    with pytest.raises(ValueError, match="names no problem"):
        asyncio.run(loop_worker.generate_sequences(batch(name, [ASK], ground_truth={"id": 3})))
    (tmp_path / "bad").mkdir()
    bad_worker, _, bad_name, _ = worker(tmp_path / "bad", server, reward="sum")
    with pytest.raises(Exception, match="reward must be one of return, final"):
        asyncio.run(bad_worker.generate_sequences(batch(bad_name, [ASK])))


def test_the_loop_is_in_verls_registry():
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    assert _agent_loop_registry[AGENT_NAME] == {"_target_": TARGET}
