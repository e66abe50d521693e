"""A multi-turn GRPO-style loop against Crucible, with a stub in place of the model.

Each turn, every open trajectory "generates" a completion, the whole turn is scored in one
``POST /rollouts`` batch, and per problem the group's rewards become advantages
``(r - mean) / (std + eps)``. The server's feedback on each attempt becomes that
trajectory's next prompt; a trajectory whose kernel is correct (and fast enough, with
``--min-speedup``) stops early. At the end each trajectory's per-turn rewards become
discounted returns ``R_t = r_t + γ·R_{t+1}``: the numbers a multi-turn trainer would
weight its updates with.

The "policy" picks completions at random from a JSONL file of rollouts as ``crucible rollouts
submit`` reads them (an element of ``POST /rollouts``' ``rollouts`` a line; their ``id`` is not
used here): ``{"id": "a", "problem": {"level": 1, "id": 19}, "completion": "..."}`` or
``{"id": "b", "reference_code": "...", "completion": "..."}``, optionally with ``"backend"``.
Lines of the same problem form its pool.

    python examples/grpo_loop.py --url http://127.0.0.1:10907 \\
        --rollouts examples/relu_rollouts.jsonl --turns 2
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
from dataclasses import dataclass, field
from typing import Any, cast

from crucible_client import Client, discounted_returns, make_rollout, stops_early
from crucible_client.types import Backend, EvalSettings

EPS = 1e-6


@dataclass
class Task:
    """One problem and the completions the stub policy may answer it with."""

    key: str
    target: dict[str, Any]  # {"problem": {...}} or {"reference_code": ...}
    backend: Backend
    completions: list[str] = field(default_factory=list)

    def first_prompt(self) -> str:
        return (
            f"Write a faster {self.backend} implementation (class ModelNew) of {self.key}. "
            "Think in <think> tags, then give the code after <KERNEL> in a fenced block."
        )


@dataclass
class Trajectory:
    task: Task
    sample: int
    prompt: str
    rewards: list[float] = field(default_factory=list)
    open: bool = True
    #: The service could not evaluate a turn: no reward to learn from, so no returns.
    dropped: bool = False

    @property
    def name(self) -> str:
        return f"{self.task.key}/s{self.sample}"


def load_tasks(path: str) -> list[Task]:
    tasks: dict[str, Task] = {}
    with open(path) as lines:
        for line in lines:
            if not line.strip():
                continue
            row = json.loads(line)
            if "problem" in row:
                p = row["problem"]
                key, target = f"level{p['level']}/{p['id']}", {"problem": p}
            else:
                ref = row["reference_code"]
                digest = hashlib.sha256(ref.encode()).hexdigest()[:8]
                key = f"ref-{digest}"
                target = {"reference_code": ref}
            backend = cast(Backend, row.get("backend", "triton"))
            task = tasks.setdefault(key, Task(key, target, backend))
            task.completions.append(row["completion"])
    if not tasks:
        raise SystemExit(f"{path} has no rollouts")
    return list(tasks.values())


def stub_policy(trajectory: Trajectory, rng: random.Random) -> str:
    """Stands in for sampling the model on ``trajectory.prompt``."""
    return rng.choice(trajectory.task.completions)


def next_prompt(task: Task, feedback: str) -> str:
    return (
        f"{task.first_prompt()}\n\nYour previous attempt was evaluated:\n{feedback}\nImprove on it."
    )


def advantages(rewards: list[float | None]) -> list[float | None]:
    """Group-normalized advantages; a rollout without a reward (the service failed) has
    none and does not move the group's mean."""
    scored = [r for r in rewards if r is not None]
    if not scored:
        return [None] * len(rewards)
    mean, std = statistics.fmean(scored), statistics.pstdev(scored)
    return [None if r is None else (r - mean) / (std + EPS) for r in rewards]


def run_turn(
    client: Client,
    turn: int,
    trajectories: list[Trajectory],
    args: argparse.Namespace,
    rng: random.Random,
) -> None:
    rollouts = [
        make_rollout(
            f"{t.name}/t{turn}",
            stub_policy(t, rng),
            backend=t.task.backend,
            turn=turn,
            profile=args.profile,
            **t.task.target,
        )
        for t in trajectories
    ]
    settings: EvalSettings = {
        "num_correct_trials": args.correct_trials,
        "num_perf_trials": args.perf_trials,
    }
    results = client.score_rollouts(rollouts, settings, timeout=args.timeout)

    groups: dict[str, list[int]] = {}
    for i, t in enumerate(trajectories):
        groups.setdefault(t.task.key, []).append(i)
    for key, members in groups.items():
        advs = advantages([results[i]["reward"] for i in members])
        print(f"\n== turn {turn}, {key}: group of {len(members)}")
        for i, adv in zip(members, advs, strict=True):
            t, r = trajectories[i], results[i]
            evaluation = r.get("result")
            verdict = evaluation["verdict"] if evaluation else r["status"]
            reward = "-" if r["reward"] is None else f"{r['reward']:.3f}"
            shown = "-" if adv is None else f"{adv:+.3f}"
            print(f"  {t.name:<28} {verdict:<10} reward {reward:<6} advantage {shown}")
            if r["reward"] is None:
                t.open, t.dropped = False, True
                print(f"    not evaluated ({r.get('error', r['status'])}): dropped")
                continue
            t.rewards.append(r["reward"])
            if stops_early(r, args.min_speedup):
                t.open = False
                print("    correct: trajectory stops here")
            elif turn + 1 < args.turns:
                t.prompt = next_prompt(t.task, r["feedback"])
                print("    next prompt:\n      " + t.prompt.replace("\n", "\n      "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:10907")
    parser.add_argument("--rollouts", required=True, help="JSONL file of rollouts")
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4, help="samples per problem")
    parser.add_argument(
        "--profile", default="kernel_rl", choices=["kernel_rl", "kevin", "drkernel"]
    )
    parser.add_argument("--gamma", type=float, default=0.4)
    parser.add_argument("--min-speedup", type=float, default=None)
    parser.add_argument("--correct-trials", type=int, default=2)
    parser.add_argument("--perf-trials", type=int, default=5)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per turn")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    trajectories = [
        Trajectory(task, sample, task.first_prompt())
        for task in load_tasks(args.rollouts)
        for sample in range(args.group_size)
    ]
    with Client(args.url) as client:
        for turn in range(args.turns):
            open_trajectories = [t for t in trajectories if t.open]
            if not open_trajectories:
                break
            run_turn(client, turn, open_trajectories, args, rng)

    print(f"\n== discounted returns (γ = {args.gamma})")
    for t in trajectories:
        if t.dropped:
            print(f"  {t.name:<28} dropped (not evaluated)")
            continue
        returns = discounted_returns(t.rewards, args.gamma)
        print(f"  {t.name:<28} rewards {fmt(t.rewards)}  returns {fmt(returns)}")


def fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3f}" for v in values) + "]"


if __name__ == "__main__":
    main()
