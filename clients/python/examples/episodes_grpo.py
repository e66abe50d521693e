"""A multi-turn GRPO loop over server-side episodes, with a scripted policy in place of the model.

Per problem the server starts a group of episodes in one call (``EpisodeGroup.start``); each
turn the "policy" answers every open episode's prompt, ``EpisodeGroup.step`` posts the turns
and returns their rewards, feedback and next prompts (the server builds them: the problem, the
previous kernel and its feedback), and each turn's rewards become group advantages
``(r - mean) / (std + eps)``. The server stops an episode at a correct kernel (or after
``max_turns``) and hands back the discounted returns ``R_t = r_t + gamma * R_{t+1}`` of every
turn: the numbers a multi-turn trainer weights its updates with. Only ``Episode`` /
``EpisodeGroup`` and the client are used.

The policy picks completions at random from a JSONL file of rollouts as ``crucible rollouts
submit`` reads them (their ``id`` is not used here): ``{"id": "a", "problem": {"level": 1, "id":
19}, "completion": "..."}`` or ``{"id": "b", "reference_code": "...", "completion": "..."}``;
lines of one problem form its pool.

    python examples/episodes_grpo.py --url http://127.0.0.1:10907 \\
        --rollouts examples/relu_rollouts.jsonl --group-size 4 --max-turns 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
from typing import Any

from crucible_client import Client, EpisodeGroup

EPS = 1e-6


def load_pools(path: str) -> dict[str, tuple[dict[str, Any], list[str]]]:
    """Problem key -> (the problem as ``start_episode`` takes it, its completions)."""
    pools: dict[str, tuple[dict[str, Any], list[str]]] = {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            if "problem" in row:
                key, target = json.dumps(row["problem"]), {"problem": row["problem"]}
            else:
                ref = row["reference_code"]
                key = f"ref-{hashlib.sha256(ref.encode()).hexdigest()[:8]}"
                target = {"reference_code": ref}
            pools.setdefault(key, (target, []))[1].append(row["completion"])
    return pools


def advantages(rewards: list[float]) -> list[float]:
    if len(rewards) < 2:
        return [0.0 for _ in rewards]
    mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
    return [(r - mean) / (std + EPS) for r in rewards]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:10907")
    parser.add_argument("--rollouts", required=True)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=3)
    parser.add_argument("--gamma", type=float, default=0.4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-correct-trials", type=int, default=2)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    eval_settings: Any = {
        "num_correct_trials": args.num_correct_trials,
        "measure_performance": False,
    }
    with Client(args.url) as client:
        for key, (target, pool) in load_pools(args.rollouts).items():
            group = EpisodeGroup.start(
                client,
                args.group_size,
                max_turns=args.max_turns,
                gamma=args.gamma,
                eval=eval_settings,
                **target,
            )
            turn = 0
            while not group.done:
                # The policy: a scripted answer to every open episode's prompt.
                completions = [None if p is None else rng.choice(pool) for p in group.prompts]
                views = group.step(completions)
                scored = [v for v in views if v is not None]
                rewards = [v["reward"] or 0.0 for v in scored]
                adv = advantages(rewards)
                print(
                    f"{key} turn {turn}: rewards {[round(r, 3) for r in rewards]} "
                    f"advantages {[round(a, 2) for a in adv]}"
                )
                turn += 1
            for e in group.episodes:
                print(f"  episode {e.id}: rewards {e.rewards} returns {e.returns}")


if __name__ == "__main__":
    main()
