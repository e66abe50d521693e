"""TRL's own GRPOTrainer for one step against a live Crucible (conftest.py's server), with a
tiny randomly initialised Qwen3 model built from a config (no download) over an offline
tokenizer carrying TRL's Qwen3 chat template. The model's ``generate`` is scripted (random
weights would never write a kernel); everything else is TRL's: the chat template, decoding,
tool-call parsing and tool loop, the reward call, the advantages, the loss and the optimizer
step. Checked: the rewards that reach the trainer (its logged metrics) against the rewards
computed by hand and the episodes read back through the API, and that the step changed the
weights (a non-zero advantage made it to the loss).

- ``make_async_trl_reward`` as ``reward_funcs``: a correct and a wrong kernel in one group;
- ``KernelEnvironment`` as ``environment_factory``: each rollout calls the ``submit_kernel``
  tool with a wrong kernel, gets the server's feedback as the tool's answer, submits a correct
  one (the episode ends) and stops; the reward is the episode's return.

Skipped where trl is not installed (scripts/test.sh runs this file in the trainers' venv)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Server
from offline_models import offline_tokenizer
from test_adapters import CORRECT, CORRECT_REWARD, FAST_EVAL, RELU_PROBLEM, TIMEOUT_S, WRONG
from test_adapters import WRONG_REWARD, tagged

pytest.importorskip("trl")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.chat_template_utils import qwen3_chat_template  # noqa: E402

from crucible_client import Client, make_async_trl_reward  # noqa: E402
from crucible_client.trl_env import KernelEnvironment  # noqa: E402

ASK = "Make torch.relu faster: give ModelNew."


def tool_call(code: str) -> str:
    """A Qwen3 tool call of ``submit_kernel``, as the model would write it."""
    call = {"name": "submit_kernel", "arguments": {"code": code}}
    return f"<tool_call>\n{json.dumps(call)}\n</tool_call>"


def tokenizer():
    corpus = [CORRECT, WRONG, json.dumps(CORRECT), json.dumps(WRONG), ASK, qwen3_chat_template]
    return offline_tokenizer(corpus, chat_template=qwen3_chat_template, vocab_size=1200)


def scripted_model(tok: Any, policy: Any) -> Qwen3ForCausalLM:
    """A one-layer Qwen3 with random weights whose ``generate`` answers each prompt with
    ``policy(decoded prompt, row)`` and the end of turn: TRL calls ``generate`` and takes what
    follows the prompt as the completion (the loss then runs the real forward pass)."""

    class Scripted(Qwen3ForCausalLM):
        prompts: list[str] = []

        def generate(self, input_ids=None, attention_mask=None, **kwargs):  # type: ignore[override]
            answers = []
            for row, (ids, mask) in enumerate(zip(input_ids, attention_mask, strict=True)):
                prompt = tok.decode(ids[mask.bool()].tolist())
                Scripted.prompts.append(prompt)
                text = policy(prompt, row)
                answers.append(tok.encode(text, add_special_tokens=False) + [tok.eos_token_id])
            width = max(len(a) for a in answers)
            padded = [a + [tok.pad_token_id] * (width - len(a)) for a in answers]
            return torch.cat([input_ids, torch.tensor(padded, device=input_ids.device)], dim=1)

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=16384,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None,
    )
    Scripted.prompts = []
    return Scripted(config)


class Logs(TrainerCallback):
    """What the trainer logs (``on_log``), step by step."""

    def __init__(self) -> None:
        self.logs: list[dict[str, Any]] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append(dict(logs or {}))


def one_step(tmp_path: Path, model: Any, tok: Any, **trainer_args: Any) -> tuple[Any, dict]:
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=2, num_generations=2,
        max_completion_length=4096, max_steps=1, logging_steps=1, learning_rate=1e-2,
        beta=0.0, report_to="none", save_strategy="no", use_cpu=True, bf16=False,
        dataloader_num_workers=0, seed=0,
    )
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": ASK}], "ground_truth": json.dumps(RELU_PROBLEM)}]
    )
    logs = Logs()
    before = [p.detach().clone() for p in model.parameters()]
    trainer = GRPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tok,
                          callbacks=[logs], **trainer_args)
    trainer.train()
    changed = any(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
    assert trainer.state.global_step == 1 and changed
    [step] = [entry for entry in logs.logs if "reward" in entry]
    return trainer, step


def test_grpo_trainer_steps_on_crucible_rewards(tmp_path: Path, server: Server):
    tok = tokenizer()
    # The group's two completions: a correct kernel and a wrong one.
    model = scripted_model(tok, lambda prompt, row: tagged(CORRECT if row == 0 else WRONG))
    reward = make_async_trl_reward(url=server.url, eval=FAST_EVAL, timeout=TIMEOUT_S,
                                   on_failure="raise")
    _, step = one_step(tmp_path, model, tok, reward_funcs=[reward])
    mean = (CORRECT_REWARD + WRONG_REWARD) / 2
    assert step["rewards/crucible_kernel_rl/mean"] == pytest.approx(mean)
    assert step["reward"] == pytest.approx(mean) and step["reward_std"] > 0.5
    # The outcomes the reward function handed to TRL's log_metric.
    assert step["crucible/correct"] == pytest.approx(0.5)
    assert step["crucible/evaluated"] == pytest.approx(1.0)
    assert step["crucible/compiled"] == pytest.approx(1.0)
    assert all(ASK in p for p in model.prompts) and len(model.prompts) == 2


def test_grpo_trainer_plays_episodes_through_the_environment(tmp_path: Path, server: Server):
    tok = tokenizer()

    def policy(prompt: str, row: int) -> str:
        # Both rollouts submit a wrong kernel; with the feedback in, the first submits a correct
        # one (the episode ends) and the second gives up; then both stop.
        answered = prompt.count("<tool_response>")
        if answered == 0:
            return tool_call(WRONG)
        return tool_call(CORRECT) if answered == 1 and row == 0 else "Done."

    model = scripted_model(tok, policy)
    factory = KernelEnvironment.factory(url=server.url, eval=FAST_EVAL, max_turns=3,
                                        turn_timeout=TIMEOUT_S, on_failure="raise")
    trainer, step = one_step(tmp_path, model, tok, environment_factory=factory)
    ids = [env.episode_id for env in trainer.environments]
    assert len(set(ids)) == 2 and None not in ids
    with Client(server.url) as client:
        solved, gave_up = [client.episode(i) for i in ids]
    assert solved["done"] and [t["reward"] for t in solved["turns"]] == pytest.approx(
        [WRONG_REWARD, CORRECT_REWARD]
    )
    assert solved["returns"][0] == pytest.approx(WRONG_REWARD + 0.4 * CORRECT_REWARD)
    # Still open (max_turns 3): its reward is the return of the one turn it took.
    assert not gave_up["done"] and [t["reward"] for t in gave_up["turns"]] == pytest.approx(
        [WRONG_REWARD]
    )
    for episode in (solved, gave_up):
        assert episode["turns"][0]["rollout"]["format_ok"]  # kernel_answer's format is read
        # The server's feedback on the wrong kernel came back to the model as the tool's answer.
        assert any(episode["turns"][0]["feedback"] in p for p in model.prompts)
    mean = (solved["returns"][0] + WRONG_REWARD) / 2
    assert step["rewards/KernelEnvironment/mean"] == pytest.approx(mean)
    assert step["reward"] == pytest.approx(mean) and step["tools/call_frequency"] == 1.5


def test_the_environment_refuses_bad_settings_and_rows(server: Server):
    with pytest.raises(ValueError, match="reward must be"):
        KernelEnvironment.factory(url=server.url, reward="sum")
    with pytest.raises(ValueError, match="on_failure"):
        KernelEnvironment.factory(url=server.url, on_failure="zero")
    env = KernelEnvironment.factory(url=server.url, eval=FAST_EVAL, prompt="server")()
    with pytest.raises(KeyError, match="ground_truth"):
        env.reset(prompt=[])
    with pytest.raises(RuntimeError, match="reset"):
        env.submit_kernel(WRONG)
    first = env.reset(prompt=[], ground_truth=RELU_PROBLEM)
    assert first and "ModelNew" in first  # prompt="server": the episode's first prompt
    assert env.get_reward() == 0.0  # nothing submitted, like an answer without a kernel
