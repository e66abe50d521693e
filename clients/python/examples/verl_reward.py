"""What VERL does with Crucible's reward functions, without VERL: one training step's batch of
completions scored the way the ``batch`` reward manager calls ``compute_scores`` (keyword
arguments, the config's ``reward_kwargs`` spread in), then the per-sample form its reward loop
awaits, ``compute_score_async``. Prints the scores and the per-key means VERL would log.

    python examples/verl_reward.py --url http://127.0.0.1:10907 \\
        --rollouts examples/relu_rollouts.jsonl

In a real run VERL loads ``crucible_client/verl_reward.py`` by path (README, "VERL").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from typing import Any

from crucible_client import compute_score_async, compute_scores

#: ``+reward.custom_reward_function.reward_kwargs.*`` of the run's config.
REWARD_KWARGS: dict[str, Any] = {
    "profile": "kernel_rl",
    "eval": {"num_correct_trials": 2, "num_perf_trials": 5},
    "on_failure": "raise",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:10907")
    parser.add_argument("--rollouts", required=True, help="JSONL: reference_code, completion")
    args = parser.parse_args()
    with open(args.rollouts) as lines:
        rows = [json.loads(line) for line in lines if line.strip()]

    # The batch reward manager: every sample of the step in one call, one POST /rollouts.
    scores = compute_scores(
        data_sources=["kernelbench"] * len(rows),
        solution_strs=[row["completion"] for row in rows],
        ground_truths=[row["reference_code"] for row in rows],
        extra_infos=[{"index": i} for i in range(len(rows))],
        url=args.url,
        **REWARD_KWARGS,
    )
    print("batch reward manager (compute_scores):")
    for i, score in enumerate(scores):
        assert isinstance(score, dict)
        print(f"  sample {i}: " + ", ".join(f"{k} {v:.3f}" for k, v in score.items()))
    for key in ("score", "correct", "compiled", "evaluated"):
        mean = statistics.fmean(s[key] for s in scores if isinstance(s, dict))
        print(f"  mean {key}: {mean:.3f}")

    # The reward loop: one coroutine per sample, run together.
    async def reward_loop() -> list[float]:
        scored = await asyncio.gather(
            *(
                compute_score_async(
                    data_source="kernelbench",
                    solution_str=row["completion"],
                    ground_truth=row["reference_code"],
                    extra_info=None,
                    url=args.url,
                    details=False,
                    **REWARD_KWARGS,
                )
                for row in rows
            )
        )
        return [float(s) for s in scored if not isinstance(s, dict)]

    print("reward loop (compute_score_async):", [f"{s:.3f}" for s in asyncio.run(reward_loop())])


if __name__ == "__main__":
    main()
