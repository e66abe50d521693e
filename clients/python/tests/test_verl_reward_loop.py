"""VERL's reward loop with crucible_client/verl_reward.py against the real verl package and a
live Crucible (conftest.py's server), as the recipe in docs/trainers/verl.md sets it up
(`reward.reward_manager.name=naive`, `reward.custom_reward_function.path=.../verl_reward.py`,
`.name=compute_score_async`, `.reward_kwargs`): VERL's own `get_custom_reward_fn` loads the
function from its file, VERL's `resolve_reward_manager_cls` picks the `naive` manager, and its
`run_single` decodes each sample's response tokens (an offline tokenizer) and awaits the
function, as VERL 0.9's reward loop does; `assemble_rm_scores` places the scores. The scores and
extras are checked against the rewards computed by hand (test_adapters.py) and against
`POST /rollouts` for the same completions. Skipped where verl is not installed (scripts/test.sh
runs this file in the trainers' venv)."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import REPO, Server
from offline_models import offline_tokenizer
from test_adapters import CORRECT, CORRECT_REWARD, FAST_EVAL, RELU_PROBLEM, TIMEOUT_S, WRONG
from test_adapters import PROSE_REWARD, WRONG_REWARD, tagged

pytest.importorskip("verl.experimental.reward_loop")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls  # noqa: E402

from crucible_client import Client  # noqa: E402

VERL_REWARD = REPO / "clients" / "python" / "crucible_client" / "verl_reward.py"
PROMPT = "Make torch.relu faster: give ModelNew after <KERNEL>."


def config(server: Server):
    """The reward section of a VERL config, as the recipe writes it."""
    return OmegaConf.create({
        "reward": {
            "reward_manager": {"source": "register", "name": "naive"},
            "custom_reward_function": {
                "path": str(VERL_REWARD),
                "name": "compute_score_async",
                "reward_kwargs": {"url": server.url, "eval": FAST_EVAL, "timeout": TIMEOUT_S},
            },
        },
    })


def sample(tokenizer, completion: str, ground_truth, width: int) -> DataProto:
    """One rollout sample as VERL's reward loop gets it: prompt and response token ids (the
    response right-padded to the batch's `width`), the attention mask over both, and the row's
    non-tensor fields."""
    prompt_ids = tokenizer(PROMPT)["input_ids"]
    response_ids = tokenizer(completion)["input_ids"]
    # Padding after the response: run_single must read only the valid tokens.
    pad = width - len(response_ids)
    responses = torch.tensor([response_ids + [tokenizer.pad_token_id] * pad])
    prompts = torch.tensor([prompt_ids])
    attention = torch.tensor([[1] * len(prompt_ids) + [1] * len(response_ids) + [0] * pad])
    batch = TensorDict({"prompts": prompts, "responses": responses,
                        "attention_mask": attention}, batch_size=[1])
    non_tensor = {
        "data_source": np.array(["kernelbench"], dtype=object),
        "reward_model": np.array([{"ground_truth": ground_truth}], dtype=object),
        "extra_info": np.array([{}], dtype=object),
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def test_verls_naive_reward_manager_scores_through_the_recipe(server: Server):
    completions = [tagged(CORRECT), tagged(WRONG), "no kernel today"]
    truths = [RELU_PROBLEM, json.dumps(RELU_PROBLEM), RELU_PROBLEM]
    tokenizer = offline_tokenizer([PROMPT, *completions])
    cfg = config(server)
    compute_score = get_custom_reward_fn(cfg)
    assert compute_score is not None
    manager_cls = resolve_reward_manager_cls(cfg)
    assert manager_cls.__name__ == "NaiveRewardManager"

    async def run() -> list[dict]:
        manager = manager_cls(cfg, tokenizer, compute_score)
        width = max(len(tokenizer(c)["input_ids"]) for c in completions) + 8
        samples = [sample(tokenizer, c, t, width) for c, t in zip(completions, truths)]
        answers = await asyncio.gather(*(manager.run_single(s) for s in samples))
        scores = manager_cls.assemble_rm_scores(
            DataProto.concat(samples), [a["reward_score"] for a in answers])
        return answers, scores, samples

    # VERL's managers run on an event loop of their own; the function's client is made in it.
    answers, scores, samples = asyncio.run(run())
    assert [a["reward_score"] for a in answers] == pytest.approx(
        [CORRECT_REWARD, WRONG_REWARD, PROSE_REWARD])
    extras = [a["reward_extra_info"] for a in answers]
    assert [(e["correct"], e["compiled"], e["evaluated"]) for e in extras] == [
        (1.0, 1.0, 1.0), (0.0, 1.0, 1.0), (0.0, 0.0, 1.0)]
    # Each score sits on its sample's last valid response token, as VERL places rewards.
    for row, (answer, s) in enumerate(zip(answers, samples)):
        last = int(s.batch["attention_mask"][0, s.batch["prompts"].size(1):].sum()) - 1
        assert float(scores[row, last]) == pytest.approx(answer["reward_score"])
        assert float(scores[row].abs().sum()) == pytest.approx(abs(answer["reward_score"]))
    # The same completions through the rollouts API: the same rewards.
    with Client(server.url) as client:
        direct = client.score_rollouts(
            [{"id": f"r{i}", "problem": RELU_PROBLEM, "completion": c, "backend": "triton"}
             for i, c in enumerate(completions)],
            eval=FAST_EVAL, timeout=TIMEOUT_S)
    assert [a["reward_score"] for a in answers] == pytest.approx([d["reward"] for d in direct])
