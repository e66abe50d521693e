"""The trainer adapters against a live Crucible (conftest.py's server): VERL's batch and async
reward functions, TRL's async reward function called as TRL calls it, and the tinker-style
environment driven through whole episodes by scripted completions (a wrong kernel, then a
correct one that ends the episode early; two wrong ones that run out of turns), with the
feedback in the next prompt and the discounted returns. Rewards are the ones
test_client.py computes by hand for the same completions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import REPO, Server

from crucible_client import (
    AsyncClient,
    KernelEnv,
    KernelEnvGroupBuilder,
    compute_scores,
    compute_scores_async,
    make_async_trl_reward,
)
from crucible_client.types import EvalSettings

CANDIDATES = REPO / "tests" / "candidates"
RELU = (REPO / "tests" / "problems" / "elementwise_relu.py").read_text()
CORRECT = (CANDIDATES / "elementwise_relu__correct.py").read_text()
WRONG = (CANDIDATES / "elementwise_relu__wrong.py").read_text()
FAST_EVAL: EvalSettings = {"num_correct_trials": 2, "num_perf_trials": 5}
TIMEOUT_S = 600.0
#: The registry's ReLU (tests/rollouts/problems.jsonl): the same source as RELU.
RELU_PROBLEM = {"level": 1, "id": 19}


def tagged(code: str, thinking: str = "") -> str:
    think = f"<think>{thinking}</think>\n" if thinking else ""
    return f"{think}Here is my kernel.\n<KERNEL>\n```python\n{code}```\n"


# kernel_rl, by hand (docs/REWARDS.md; every kernel here is under 2,000 bytes): format 0.1 +
# length 0.05 + compile 0.2 + correctness (trials passed / trials) [+ thinking 0.1].
CORRECT_REWARD = 0.1 + 0.05 + 0.2 + 1.0
WRONG_REWARD = 0.1 + 0.05 + 0.2
PROSE_REWARD = 0.0


def test_verl_batch_scores_each_completion(server: Server):
    scores = compute_scores(
        data_sources=["kernelbench"] * 3,
        solution_strs=[tagged(CORRECT), tagged(WRONG), "no kernel today"],
        ground_truths=[RELU, RELU_PROBLEM, '{"level": 1, "id": 19}'],
        extra_infos=[None] * 3,
        url=server.url,
        eval=FAST_EVAL,
        timeout=TIMEOUT_S,
    )
    assert all(isinstance(s, dict) for s in scores)
    details = [s for s in scores if isinstance(s, dict)]
    assert [s["score"] for s in details] == pytest.approx(
        [CORRECT_REWARD, WRONG_REWARD, PROSE_REWARD]
    )
    assert [(s["correct"], s["compiled"], s["evaluated"]) for s in details] == [
        (1.0, 1.0, 1.0),
        (0.0, 1.0, 1.0),
        (0.0, 0.0, 1.0),
    ]


def test_verl_async_batch_scores_the_same(server: Server):
    async def main() -> list[Any]:
        async with AsyncClient(server.url) as client:
            return await compute_scores_async(
                ["kernelbench"] * 2,
                [tagged(CORRECT), tagged(WRONG)],
                [RELU, RELU],
                client=client,
                eval=FAST_EVAL,
                timeout=TIMEOUT_S,
                details=False,
            )

    assert asyncio.run(main()) == pytest.approx([CORRECT_REWARD, WRONG_REWARD])


def test_trl_async_reward_as_trl_calls_it(server: Server):
    reward = make_async_trl_reward(url=server.url, eval=FAST_EVAL, timeout=TIMEOUT_S)
    metrics: dict[str, list[float]] = {}
    columns: dict[str, list[Any]] = {}

    async def step() -> list[float | None]:
        # TRL gathers every async reward function of a step on its own loop.
        [rewards] = await asyncio.gather(
            reward(
                prompts=[[{"role": "user", "content": "p"}]] * 2,
                completions=[
                    [{"role": "assistant", "content": tagged(CORRECT, "one block per program")}],
                    [{"role": "assistant", "content": tagged(WRONG)}],
                ],
                completion_ids=[[1], [2]],
                ground_truth=[RELU_PROBLEM, RELU_PROBLEM],
                trainer_state=None,
                # TRL's loggers (GRPOTrainer._log_metric, _log_completion_extra).
                log_metric=lambda name, value: metrics.setdefault(name, []).append(value),
                log_extra=lambda column, values: columns.setdefault(column, []).extend(values),
            )
        )
        return rewards

    assert asyncio.run(step()) == pytest.approx([CORRECT_REWARD + 0.1, WRONG_REWARD])
    assert metrics["crucible/correct"] == [0.5] and metrics["crucible/compiled"] == [1.0]
    assert metrics["crucible/evaluated"] == [1.0] and metrics["crucible/speedup"][0] > 0
    assert columns["crucible_verdict"] == ["ok", "incorrect"]
    assert columns["crucible_speedup"][0] > 0 and columns["crucible_speedup"][1] is None


async def run_episode(env: KernelEnv, script: list[str]) -> tuple[list[Any], list[Any]]:
    """Drives ``env`` with the scripted completions until it ends: (observations seen, step
    results)."""
    observation, stop = await env.initial_observation()
    assert stop is None
    observations, steps = [observation], []
    for completion in script:
        result = await env.step(completion)
        steps.append(result)
        if result.episode_done:
            break
        observations.append(result.next_observation)
    return observations, steps


def test_the_environment_runs_multi_turn_episodes(server: Server):
    wrong = tagged(WRONG, "leaky, on purpose")
    correct = tagged(CORRECT, "one block per program")

    async def main() -> tuple[Any, ...]:
        async with AsyncClient(server.url) as client:
            builder = KernelEnvGroupBuilder(
                RELU_PROBLEM,
                group_size=2,
                client=client,
                eval=FAST_EVAL,
                timeout=TIMEOUT_S,
                max_turns=2,
                system_prompt="You write Triton kernels.",
            )
            solver, stuck = await builder.make_envs()
            return (
                builder,
                solver,
                stuck,
                await run_episode(solver, [wrong, correct, wrong]),
                await run_episode(stuck, [wrong, wrong, correct]),
            )

    builder, solver, stuck, (seen, steps), (_, stuck_steps) = asyncio.run(main())
    assert builder.logging_tags() == ["level_1", "problem_19", "crucible", "multiturn"]
    assert solver.prompt is stuck.prompt, "the group's prompt is built once"

    # Turn 0: the problem (its reference fetched from the registry) in chat messages.
    first = seen[0]
    assert [m["role"] for m in first] == ["system", "user"]
    assert "torch.relu(x)" in first[1]["content"] and "<KERNEL>" in first[1]["content"]
    # Turn 1: the last attempt, without its thinking, and the server's feedback on it.
    second = seen[1]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert "leaky, on purpose" not in second[2]["content"]
    assert second[2]["content"].startswith("Here is my kernel.")
    assert "turn 0" in second[3]["content"]
    assert steps[0].metrics["correct"] == 0.0 and steps[0].metrics["compiled"] == 1.0

    # The correct kernel ends the episode early; the wrong one's turn is credited with it.
    rewards = [s.reward for s in steps]
    assert rewards == pytest.approx([WRONG_REWARD + 0.1, CORRECT_REWARD + 0.1])
    assert [s.episode_done for s in steps] == [False, True]
    assert steps[1].next_observation is None and steps[1].metrics["solved"] == 1.0
    assert solver.returns() == pytest.approx([rewards[0] + 0.4 * rewards[1], rewards[1]])
    with pytest.raises(RuntimeError, match="is over"):
        asyncio.run(solver.step(correct))

    # Two wrong kernels: out of turns, never solved.
    assert [s.episode_done for s in stuck_steps] == [False, True]
    assert [s.metrics["solved"] for s in stuck_steps] == [0.0, 0.0]
    assert stuck.step_scores == pytest.approx([WRONG_REWARD + 0.1] * 2)
