"""The rollout submission benchmark's two ends (scripts/bench-rollouts.sh).

  rollouts.py make SRC N OUT      N rollouts cycling through the completions of SRC, ids unique
  rollouts.py report N OUT METRICS SUBMIT_S TOTAL_S
                                  checks every id came back once and prints the table

Standard library only.
"""

import collections
import json
import re
import sys


def make(src, n, out):
    base = [json.loads(line) for line in open(src) if line.strip()]
    with open(out, "w") as f:
        for i in range(n):
            r = dict(base[i % len(base)])
            r["id"] = f"bench-{i:05d}-{r['id']}"
            f.write(json.dumps(r) + "\n")


def report(n, out, metrics, submit_s, total_s):
    ids = collections.Counter()
    status = collections.Counter()
    tasks = set()
    for line in open(out):
        r = json.loads(line)
        ids[r["id"]] += 1
        status[r["status"]] += 1
        if r["task_id"]:
            tasks.add(r["task_id"])
    twice = sum(1 for c in ids.values() if c > 1)
    lost = n - len(ids)
    requests = collections.Counter()
    pattern = re.compile(r'crucible_http_requests_total\{([^}]*)\} (\d+)')
    for m in pattern.finditer(open(metrics).read()):
        labels = dict(kv.split("=", 1) for kv in m.group(1).split(","))
        requests[(labels["method"].strip('"'), labels["route"].strip('"'))] += int(m.group(2))
    posts = requests[("POST", "/rollouts")]
    pages = requests[("GET", "/batches/{id}/results")]
    rows = [
        ("rollouts", n),
        ("results back", sum(ids.values())),
        ("lost", lost),
        ("returned twice", twice),
        ("statuses", dict(status)),
        ("distinct evaluations", len(tasks)),
        ("POST /rollouts requests", posts),
        ("GET results pages", pages),
        ("submission, s", f"{submit_s:.2f}"),
        ("submission, rollouts/s", f"{n / submit_s:.0f}"),
        ("submit to last result, s", f"{total_s:.1f}"),
    ]
    for k, v in rows:
        print(f"{k:<28} {v}")
    if lost or twice:
        sys.exit("rollouts lost or duplicated")


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "make":
        make(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    elif cmd == "report":
        report(int(sys.argv[2]), sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6]))
    else:
        sys.exit(__doc__)
