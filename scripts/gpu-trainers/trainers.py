#!/usr/bin/env python3
"""The trainer integrations on a real GPU service: for each of a slice of real KernelBench
level-1 problems (our Triton candidates'), a GRPO group of two episodes started by
`POST /episodes`, one played through the OpenEnv WebSocket session (`/openenv/ws`, the
protocol openenv-core's `EnvClient` speaks: reset with the group's episode id, then one step a
turn) and one through the episodes API (`AsyncEpisode`), with the same scripted completions
(wrong, then uncompilable, then correct); then every turn's completion scored again through the
TRL adapter (`make_async_trl_reward`, called as GRPOTrainer calls a reward function), the VERL
adapter (`compute_score_async`, as VERL's reward loop calls it) and the direct rollouts API
(`POST /rollouts`); and a third episode per problem played through the TRL environment
(`crucible_client.trl_env.KernelEnvironment`, what `GRPOTrainer(environment_factory=...)` makes:
`reset(**row)`, the `submit_kernel` tool, `get_reward`) with the same kernels, its turns checked
against `POST /rollouts` of the same answers and its reward against the episode's return.
Checks that every path gives the same reward for the same completion, and prints the tables,
the count of checks last.

Needs: the bundle's httpx (`pylib`) and a `websockets` package (the bundle's `pylib-ws`); the
OpenEnv session is driven with websockets directly, since the GPU machine has no openenv-core
(CI drives the same endpoint with openenv-core's own client: clients/python/tests/test_openenv.py).
"""

import argparse
import asyncio
import json
import pathlib
import sys
import time

# The episode run's scripted turns and helpers (scripts/gpu-episodes), first on the path.
sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "gpu-episodes"))
import scripted  # noqa: E402
from run import problems_of, verdict  # noqa: E402  (scripts/gpu-episodes/run.py)
from websockets.asyncio.client import connect  # noqa: E402

from crucible_client import AsyncClient, AsyncEpisode, compute_score_async, make_async_trl_reward  # noqa: E402
from crucible_client.trl_env import KernelEnvironment, kernel_answer  # noqa: E402

#: Rewards equal to this many places: every path reads the one result of one evaluation.
PLACES = 9


async def openenv_episode(api: str, episode_id: str, completions: list[str], timeout: float):
    """Plays `episode_id` through the OpenEnv WebSocket session: reset attaches to it, then a
    step per completion until done. Returns each step's (reward, done, verdict, feedback)."""
    url = api.replace("http://", "ws://").rstrip("/") + "/openenv/ws"
    steps = []
    async with connect(url, max_size=8 << 20) as ws:

        async def ask(message):
            await ws.send(json.dumps(message))
            reply = json.loads(await asyncio.wait_for(ws.recv(), timeout))
            if reply["type"] == "error":
                raise RuntimeError(f"openenv error: {reply['data']}")
            return reply["data"]

        first = await ask({"type": "reset", "data": {"episode_id": episode_id}})
        assert first["observation"]["episode_id"] == episode_id, first
        assert first["observation"]["turns"] == 0 and first["done"] is False, first
        for completion in completions:
            result = await ask({"type": "step", "data": {"completion": completion}})
            last = result["observation"]["last_turn"]
            steps.append((result["reward"], result["done"], verdict(last),
                          result["observation"]["feedback"]))
            if result["done"]:
                break
        state = await ask({"type": "state"})
        assert state["step_count"] == len(steps) and state["done"] == steps[-1][1], state
        await ws.send(json.dumps({"type": "close"}))
    return steps


async def group(client, api, level, pid, source, args):
    problem = {"level": level, "id": pid}
    started = await client.start_episode(
        problem=problem, profile=args.profile, backend="triton", prompt_option="zero_shot",
        thinking=True, max_turns=3, early_stop_on_correct=True, eval=args.eval, group_size=2,
    )
    via_openenv, via_api = started["episode_ids"]
    completions = scripted.turns(source)
    t0 = time.monotonic()
    openenv_steps = await openenv_episode(api, via_openenv, completions, args.turn_timeout)
    ep = AsyncEpisode(client, started, via_api)
    for completion in completions:
        if ep.done:
            break
        await ep.step(completion, timeout=args.turn_timeout)
    episode_s = time.monotonic() - t0
    played = completions[: len(ep.turns)]
    truth = [json.dumps(problem)] * len(played)
    trl = make_async_trl_reward(client=client, profile=args.profile, eval=args.eval,
                                timeout=args.turn_timeout)
    trl_rewards = await trl(prompts=[""] * len(played), completions=played, ground_truth=truth)
    verl = [
        await compute_score_async("kernelbench", c, truth[0], None, client=client,
                                  profile=args.profile, eval=args.eval,
                                  timeout=args.turn_timeout)
        for c in played
    ]
    direct = await client.score_rollouts(
        [{"id": f"{level}-{pid}-{t}", "problem": problem, "completion": c, "backend": "triton",
          "turn": t, "profile": args.profile} for t, c in enumerate(played)],
        eval=args.eval, timeout=args.turn_timeout,
    )
    episode = await client.episode(via_openenv)
    rows = []
    for t in range(len(played)):
        rows.append({
            "problem": f"{level}/{pid}",
            "turn": t,
            "verdict": verdict(ep.turns[t]),
            "openenv": openenv_steps[t][0] if t < len(openenv_steps) else None,
            "episodes": ep.rewards[t],
            "openenv_episode": episode["turns"][t]["reward"],
            "trl": trl_rewards[t],
            "verl": verl[t]["score"] if isinstance(verl[t], dict) else verl[t],
            "rollouts": direct[t]["reward"],
        })
    return {"rows": rows, "returns": ep.returns, "openenv_returns": episode.get("returns"),
            "openenv_turns": len(openenv_steps), "api_turns": len(ep.turns),
            "episode_s": episode_s}


def trl_env_episode(api, problem, codes, args):
    """One episode as TRL's environment_factory plays it (synchronously, as TRL calls it)."""
    env = KernelEnvironment(url=api, profile=args.profile, eval=args.eval, max_turns=3,
                            prompt="server", turn_timeout=args.turn_timeout)
    prompt = env.reset(ground_truth=json.dumps(problem), prompt="the row's prompt")
    assert prompt, "prompt=server gives the episode's first prompt"
    answers = [env.submit_kernel(code) for code in codes]
    return env.episode_id, env.get_reward(), answers


async def trl_env_rows(client, api, level, pid, source, args):
    problem = {"level": level, "id": pid}
    codes = [scripted.wrong(source), scripted.uncompilable(source), source]
    episode_id, reward, answers = await asyncio.to_thread(trl_env_episode, api, problem, codes,
                                                          args)
    episode = await client.episode(episode_id)
    played = [kernel_answer(c) for c in codes[: len(episode["turns"])]]
    direct = await client.score_rollouts(
        [{"id": f"env-{level}-{pid}-{t}", "problem": problem, "completion": c,
          "backend": "triton", "turn": t, "profile": args.profile} for t, c in enumerate(played)],
        eval=args.eval, timeout=args.turn_timeout,
    )
    return {
        "problem": f"{level}/{pid}",
        "turns": [t["reward"] for t in episode["turns"]],
        "rollouts": [d["reward"] for d in direct],
        "verdicts": [verdict(t) for t in episode["turns"]],
        "reward": reward,
        "return0": (episode.get("returns") or [None])[0],
        "after_done": answers[len(played):],
    }


def equal(values):
    known = [v for v in values if v is not None]
    return len(known) == len(values) and all(round(v - known[0], PLACES) == 0 for v in known)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", default="http://127.0.0.1:10907")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--candidates", required=True)
    ap.add_argument("--problems", type=int, default=4)
    ap.add_argument("--profile", default="kernel_rl")
    ap.add_argument("--perf-trials", type=int, default=50)
    ap.add_argument("--turn-timeout", type=float, default=600)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    args.eval = {"num_correct_trials": 5, "num_perf_trials": args.perf_trials, "timeout_s": 300}
    chosen = problems_of(args.manifest, args.candidates, 1)[: args.problems]
    async with AsyncClient(args.api, timeout=args.turn_timeout) as client:
        groups = await asyncio.gather(*(group(client, args.api, lv, pid, src, args)
                                        for lv, pid, src in chosen))
        envs = await asyncio.gather(*(trl_env_rows(client, args.api, lv, pid, src, args)
                                      for lv, pid, src in chosen))
    rows = [r for g in groups for r in g["rows"]]
    pathlib.Path(args.out, "trainers.json").write_text(
        json.dumps({"groups": groups, "trl_environment": envs}, indent=1))
    cols = ["openenv", "episodes", "openenv_episode", "trl", "verl", "rollouts"]
    print(f"{'problem':8} {'turn':>4} {'verdict':22} " + " ".join(f"{c:>15}" for c in cols) + "  equal")
    # One check a turn (every path's reward the same) and one a group (the two episodes'
    # turns and returns the same).
    passed = failed = 0
    for r in rows:
        same = equal([r[c] for c in cols])
        passed, failed = passed + same, failed + (not same)
        cells = " ".join(f"{r[c]:>15.6f}" if r[c] is not None else f"{'-':>15}" for c in cols)
        print(f"{r['problem']:8} {r['turn']:>4} {r['verdict']:22} {cells}  {'yes' if same else 'NO'}")
    for g in groups:
        same = g["returns"] == g["openenv_returns"] and g["openenv_turns"] == g["api_turns"]
        passed, failed = passed + same, failed + (not same)
        print(f"{g['rows'][0]['problem']:8} returns api {g['returns']} openenv {g['openenv_returns']}"
              f" turns {g['api_turns']}/{g['openenv_turns']} {g['episode_s']:.1f} s"
              f" {'same' if same else 'DIFFER'}")
    print(f"{'problem':8} TRL environment: turn rewards (= POST /rollouts of its answers), reward = R_0")
    for e in envs:
        same = (len(e["turns"]) == len(e["rollouts"])
                and all(equal([a, b]) for a, b in zip(e["turns"], e["rollouts"]))
                and e["reward"] is not None and equal([e["reward"], e["return0"]]))
        passed, failed = passed + same, failed + (not same)
        print(f"{e['problem']:8} {e['verdicts']} turns {[round(r, 6) for r in e['turns']]}"
              f" rollouts {[round(r, 6) for r in e['rollouts']]} reward {e['reward']:.6f}"
              f" R_0 {e['return0']:.6f} {'same' if same else 'DIFFER'}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
