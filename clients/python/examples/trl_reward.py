"""What TRL's GRPOTrainer does with Crucible's async reward function, without TRL: a step's
completions (a group per prompt, conversational) scored by ``reward_funcs`` gathered on an
event loop, ``None`` turned into NaN and summed across reward functions with ``nansum``, then
the group-normalised advantages ``(r - mean) / (std + 1e-4)``.

    python examples/trl_reward.py --url http://127.0.0.1:10907 \\
        --rollouts examples/relu_rollouts.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics

from crucible_client import make_async_trl_reward


def length_penalty(prompts: list, completions: list, **kwargs: object) -> list[float]:
    """A second reward function beside Crucible's, as a TRL run would have."""
    return [-len(c[-1]["content"]) / 100_000 for c in completions]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:10907")
    parser.add_argument("--rollouts", required=True, help="JSONL: reference_code, completion")
    args = parser.parse_args()
    with open(args.rollouts) as lines:
        rows = [json.loads(line) for line in lines if line.strip()]

    crucible = make_async_trl_reward(
        url=args.url, eval={"num_correct_trials": 2, "num_perf_trials": 5}
    )
    prompts = [
        [{"role": "user", "content": f"Write a faster kernel for:\n{row['reference_code']}"}]
        for row in rows
    ]
    completions = [[{"role": "assistant", "content": row["completion"]}] for row in rows]
    columns = {"ground_truth": [row["reference_code"] for row in rows]}

    async def score() -> list[float | None]:
        [rewards] = await asyncio.gather(
            crucible(prompts=prompts, completions=completions, trainer_state=None, **columns)
        )
        return rewards

    from_crucible = asyncio.run(score())
    other = length_penalty(prompts, completions)
    # nansum across reward functions: a None (no verdict) leaves only the others' reward.
    totals = [
        sum(x for x in (c, o) if x is not None and not math.isnan(x))
        for c, o in zip(from_crucible, other, strict=True)
    ]
    mean, std = statistics.fmean(totals), statistics.stdev(totals)
    print(f"{crucible.__name__}: one group of {len(rows)} completions")
    for c, total in zip(from_crucible, totals, strict=True):
        shown = "None" if c is None else f"{c:.3f}"
        print(
            f"  crucible {shown:<6} total {total:+.4f} advantage {(total - mean) / (std + 1e-4):+.3f}"
        )


if __name__ == "__main__":
    main()
