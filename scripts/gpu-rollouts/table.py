"""The GPU rollout run's table (scripts/gpu-rollouts.sh): one line per rollout of
tests/rollouts/rollouts.jsonl as scored against the real KernelBench problems, with the
verdict the CPU corpus expects beside it, then the counts. Standard library only."""

import collections
import json
import sys

expected = json.load(open(sys.argv[1]))
results = [json.loads(line) for line in open(sys.argv[2]) if line.strip()]
same = collections.Counter()
for r in sorted(results, key=lambda r: r["id"]):
    res = r["result"] or {}
    want = expected.get(r["id"], {}).get("verdict")
    verdict = res.get("verdict")
    same[verdict == want] += 1
    speedup = f"{res['speedup']:.2f}x" if res.get("speedup") is not None else "-"
    reward = f"{r['reward']:.3f}" if r["reward"] is not None else "-"
    problem = r.get("problem") or {}
    print(
        f"{r['id'][:34]:<34} L{problem.get('level')}/{problem.get('id'):<3} {r['profile']:<9} "
        f"{r['status']:<9} {str(verdict):<9} cpu:{str(want):<9} {speedup:>7} {reward:>7} "
        f"{res.get('error_code') or ''}"
    )
print(f"{len(results)} rollouts; verdict as on CPU: {same[True]}, different: {same[False]}")
