"""A tinker_cookbook-style training step on Crucible's environment, without tinker: a
``KernelEnvGroupBuilder`` makes a group of episodes on one problem, a stub policy (completions
drawn from a JSONL file) plays every episode at once, each turn's feedback becomes the next
prompt, a correct kernel ends its episode early, and each turn's reward becomes a discounted
return ``R_t = s_t + γ·R_{t+1}`` and, centred over the group, an advantage.

    python examples/tinker_env.py --url http://127.0.0.1:10907 \\
        --rollouts examples/relu_rollouts.jsonl --group-size 4 --turns 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics

from crucible_client import AsyncClient, KernelEnv, KernelEnvGroupBuilder, stops_early


async def play(env: KernelEnv, completions: list[str], rng: random.Random) -> None:
    """One episode: the stub policy answers every observation until the episode ends."""
    observation, _stop = await env.initial_observation()
    while True:
        # A real policy samples from the model on `observation` (chat messages here).
        result = await env.step(rng.choice(completions))
        if result.episode_done:
            return
        observation = result.next_observation
        assert observation[-1]["role"] == "user"  # the feedback on the last attempt


async def step(args: argparse.Namespace, reference: str, completions: list[str]) -> None:
    rng = random.Random(args.seed)
    async with AsyncClient(args.url) as client:
        builder = KernelEnvGroupBuilder(
            reference_code=reference,
            group_size=args.group_size,
            client=client,
            max_turns=args.turns,
            eval={"num_correct_trials": 2, "num_perf_trials": 5},
        )
        envs = await builder.make_envs()
        await asyncio.gather(*(play(env, completions, rng) for env in envs))
    # Each episode's return from its first turn, centred over the group (GRPO's advantage).
    first_returns = [env.returns()[0] for env in envs]
    mean = statistics.fmean(first_returns)
    print(f"group of {len(envs)} episodes, tags {builder.logging_tags()}")
    for i, env in enumerate(envs):
        rewards = ", ".join(f"{r:.3f}" for r in env.step_scores)
        returns = ", ".join(f"{r:.3f}" for r in env.returns())
        solved = "solved" if stops_early(env.turns[-1].result) else "unsolved"
        print(
            f"  episode {i}: {len(env.turns)} turn(s), {solved}; rewards [{rewards}] "
            f"returns [{returns}] advantage {first_returns[i] - mean:+.3f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:10907")
    parser.add_argument("--rollouts", required=True, help="JSONL: reference_code, completion")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with open(args.rollouts) as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    reference = rows[0]["reference_code"]
    completions = [row["completion"] for row in rows if row["reference_code"] == reference]
    asyncio.run(step(args, reference, completions))


if __name__ == "__main__":
    main()
