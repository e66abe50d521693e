"""One multi-turn episode through Crucible's OpenEnv endpoint with openenv-core's own client,
a scripted policy in place of the model.

The policy answers each prompt with the next completion of a JSONL file of rollouts as
``crucible rollouts submit`` reads them (``{"id", "problem": {"level", "id"} | "reference_code",
"completion"}``); the episode is of the first line's problem. Each step prints the turn's reward, verdict and
feedback; at the end, the discounted returns.

    pip install openenv-core
    python examples/openenv_episode.py --url http://127.0.0.1:10907 \\
        --rollouts examples/relu_rollouts.jsonl --max-turns 3
"""

from __future__ import annotations

import argparse
import asyncio
import json

from openenv.core.generic_client import GenericEnvClient


def completions(path: str) -> tuple[dict, list[str]]:
    """The first line's problem (as an episode names it) and every completion of that
    problem, in file order."""
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    key = "problem" if "problem" in rows[0] else "reference_code"
    target = {key: rows[0][key]}
    return target, [r["completion"] for r in rows if r.get(key) == target[key]]


async def play(url: str, rollouts: str, max_turns: int) -> list[float]:
    problem, answers = completions(rollouts)
    async with GenericEnvClient(base_url=f"{url.rstrip('/')}/openenv",
                                message_timeout_s=1800) as env:
        result = await env.reset(episode={**problem, "max_turns": max_turns,
                                          "eval": {"num_perf_trials": 10}})
        print(f"episode {result.observation['episode_id']}")
        turn = 0
        while not result.done:
            result = await env.step({"completion": answers[turn % len(answers)]})
            last = result.observation["last_turn"]
            verdict = ((last.get("rollout") or {}).get("result") or {}).get("verdict")
            print(f"turn {turn}: reward {result.reward:.3f} verdict {verdict}: "
                  f"{result.observation['feedback'][:120]!r}")
            turn += 1
        returns = result.observation["returns"]
        print(f"returns {[round(r, 3) for r in returns]}")
        return returns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:10907", help="Crucible's base URL")
    parser.add_argument("--rollouts", default="examples/relu_rollouts.jsonl",
                        help="JSONL of rollouts whose completions the scripted policy answers with")
    parser.add_argument("--max-turns", type=int, default=3, help="most turns of the episode")
    args = parser.parse_args()
    asyncio.run(play(args.url, args.rollouts, args.max_turns))


if __name__ == "__main__":
    main()
