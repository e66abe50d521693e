#!/usr/bin/env python3
"""The environment side on a real service, driven by the Python client alone: a level-1
problem set and its first batch, one multi-turn episode per problem with scripted completions
(wrong, then a Triton kernel that does not compile, then the correct kernel: early stop on
correct), and a checkpoint evaluation of the slice as one rollout batch whose report
(`GET /batches/{id}/report`) is checked against a hand computation over its own results.
Prints one table per part, the report last.

Problems: the manifest's entries (KernelBench file names such as `level1/19_ReLU.py`, with a
correct candidate each); the registry is the API's (KERNELBENCH_ROOT or CRUCIBLE_PROBLEMS)."""

import argparse
import asyncio
import json
import math
import pathlib
import re
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import scripted  # noqa: E402

from crucible_client import AsyncClient, AsyncEpisode  # noqa: E402

P_VALUES = [0.0, 1.0, 1.2, 1.5, 2.0]


def problems_of(manifest, candidates, level):
    """(level, id, candidate source) of each manifest entry of `level` with a correct
    Triton candidate."""
    out = []
    for entry in json.loads(pathlib.Path(manifest).read_text()):
        m = re.match(r"level(\d+)/(\d+)_", entry["problem"])
        if not m or int(m.group(1)) != level:
            continue
        if entry.get("backend", "triton") != "triton" or entry.get("expect", "correct") != "correct":
            continue
        source = (pathlib.Path(candidates) / entry["candidate"]).read_text()
        out.append((int(m.group(1)), int(m.group(2)), source))
    return sorted(out)


def verdict(turn):
    result = (turn.get("rollout") or {}).get("result") or {}
    code = result.get("error_code")
    return result.get("verdict", "-") + (f"/{code}" if code else "")


async def episode(client, level, pid, source, args):
    started = await client.start_episode(
        problem={"level": level, "id": pid},
        profile=args.profile,
        backend="triton",
        prompt_option=args.prompt_option,
        thinking=True,
        max_turns=4,
        gamma=0.4,
        early_stop_on_correct=True,
        eval={"num_correct_trials": args.trials, "num_perf_trials": args.perf_trials,
              "timeout_s": 300},
    )
    ep = AsyncEpisode(client, started, started["episode_id"])
    # The first prompt's worked examples come with the start, not from a second request.
    examples = started["prompt"]["examples"]
    prompt_bytes = len(ep.prompt)
    t0 = time.monotonic()
    for completion in scripted.turns(source):
        if ep.done:
            break
        await ep.step(completion, timeout=args.turn_timeout)
    return {
        "problem": f"{level}/{pid}",
        "prompt_bytes": prompt_bytes,
        "examples": examples,
        "next_prompt_bytes": [len((t.get("next_prompt") or {}).get("text", "")) for t in ep.turns],
        "verdicts": [verdict(t) for t in ep.turns],
        "rewards": ep.rewards,
        "returns": ep.returns,
        "speedup": ((ep.turns[-1].get("rollout") or {}).get("result") or {}).get("speedup"),
        "wall_s": time.monotonic() - t0,
        "done": ep.done,
    }


def hand_report(results):
    """fast_p and the rest, by KernelBench's definition, over every sample."""
    n = len(results)
    ok = [r for r in results if (r.get("result") or {}).get("verdict") == "ok"]
    speedups = [r["result"]["speedup"] for r in ok if r["result"].get("speedup") is not None]
    fast = {p: sum(1 for s in speedups if s > p) / n for p in P_VALUES}
    geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    return {"samples": n, "correct_rate": len(ok) / n, "fast_p": fast, "geomean": geo}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", default="http://127.0.0.1:10907")
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--candidates", required=True)
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--min-problems", type=int, default=12)
    ap.add_argument("--profile", default="kernel_rl")
    ap.add_argument("--prompt-option", default="few_shot")
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--perf-trials", type=int, default=100)
    ap.add_argument("--checkpoint-perf-trials", type=int, default=200)
    ap.add_argument("--turn-timeout", type=float, default=900)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    problems = problems_of(args.manifest, args.candidates, args.level)
    if len(problems) < args.min_problems:
        raise SystemExit(f"{len(problems)} problems in the slice, fewer than {args.min_problems}")
    ids = [pid for _, pid, _ in problems]
    failed = False
    async with AsyncClient(args.api, timeout=120) as client:
        # 1. The slice as a problem set, and its first batch.
        pset = await client.problem_set(level=args.level, start=min(ids), end=max(ids), seed=7)
        batch = await client.problem_batch(0, 0, level=args.level, start=min(ids), end=max(ids), seed=7)
        print(f"problem set level {args.level} ids {min(ids)}-{max(ids)}: "
              f"{len(pset['train'])} train, {len(pset['test'])} test "
              f"(test: {[p['id'] for p in pset['test']]}); epoch 0 step 0 of "
              f"{batch['steps_per_epoch']}: {[(p['id'], p['group_size']) for p in batch['problems']]}")

        # 2. One episode per problem, all at once: the worker overlaps their CPU stages.
        t0 = time.monotonic()
        episodes = await asyncio.gather(*(episode(client, lvl, pid, src, args) for lvl, pid, src in problems))
        wall = time.monotonic() - t0
        (out / "episodes.json").write_text(json.dumps(episodes, indent=1))
        print(f"\n{len(episodes)} episodes, {sum(len(e['rewards']) for e in episodes)} turns in {wall:.0f} s")
        print(f"first prompts ({args.prompt_option}): "
              + "; ".join(f"{e['problem']} <- {','.join(x.rsplit('/', 1)[-1] for x in e['examples'])}"
                          for e in episodes))
        print(f"{'problem':>8} | {'turn verdicts':<48} | {'rewards':<20} | {'returns':<22} | speedup")
        for e in episodes:
            rewards = " ".join(f"{r:.2f}" if r is not None else "-" for r in e["rewards"])
            returns = " ".join(f"{r:.3f}" for r in e["returns"] or [])
            print(f"{e['problem']:>8} | {', '.join(e['verdicts']):<48} | {rewards:<20} | {returns:<22} | {e['speedup']}")
            expected = ["incorrect/CORRECTNESS", "error/COMPILATION", "ok"]
            if e["verdicts"] != expected or not e["done"]:
                print(f"  !! expected {expected}, done")
                failed = True

        # 3. The checkpoint evaluation: the slice's correct kernels, and one wrong sample each.
        rollouts = []
        for lvl, pid, src in problems:
            for k, text in enumerate([scripted.completion(src, "final"), scripted.completion(scripted.wrong(src), "final")]):
                rollouts.append({"id": f"{lvl}-{pid}-{k}", "problem": {"level": lvl, "id": pid},
                                 "completion": text, "backend": "triton", "profile": args.profile})
        # Timed with other settings than the episodes' turns, so the same kernels are measured
        # again rather than answered from the result cache.
        eval_settings = {"num_correct_trials": args.trials,
                         "num_perf_trials": args.checkpoint_perf_trials, "timeout_s": 300}
        submission = await client.submit_rollouts(rollouts, eval_settings)
        results = await client.wait_results(submission, timeout=1200)
        (batch_id,) = submission.batch_ids  # under 1,000 rollouts: one batch
        report = await client.report(batch_id)
        (out / "report.json").write_text(json.dumps(report, indent=1))
        hand = hand_report(list(results.values()))
        overall = report["overall"]
        got = {f["p"]: f["rate"] for f in overall["fast_p"]}
        print(f"\ncheckpoint batch {batch_id}: {overall['samples']} samples")
        print(f"{'':>12} | {'report':>8} | {'by hand':>8}")
        print(f"{'correct':>12} | {overall['correct_rate']:>8.3f} | {hand['correct_rate']:>8.3f}")
        for p in P_VALUES:
            print(f"{'fast_' + format(p, 'g'):>12} | {got[p]:>8.3f} | {hand['fast_p'][p]:>8.3f}")
            failed |= abs(got[p] - hand["fast_p"][p]) > 1e-9
        print(f"{'geomean':>12} | {overall.get('geomean_speedup') or 0:>8.4g} | {hand['geomean'] or 0:>8.4g}")
        (out / "checkpoint_batch.txt").write_text(batch_id + "\n")
        failed |= abs(overall["correct_rate"] - hand["correct_rate"]) > 1e-9
    print("\nFAILED" if failed else "\nall episodes and the report as expected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
