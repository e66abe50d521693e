"""The rollout submission benchmark's two ends (scripts/bench-rollouts.sh).

  rollouts.py make SRC N OUT [unique]
                                  N rollouts cycling through the completions of SRC, ids
                                  unique; with `unique`, every kernel too (a comment is added)
  rollouts.py report N OUT METRICS QUEUE SUBMIT_S TOTAL_S
                                  checks every id came back once and prints the table

Standard library only.
"""

import collections
import json
import re
import sys


def make(src, n, out, unique=False):
    base = [json.loads(line) for line in open(src) if line.strip()]
    with open(out, "w") as f:
        for i in range(n):
            r = dict(base[i % len(base)])
            r["id"] = f"bench-{i:05d}-{r['id']}"
            if unique and "```" in r["completion"]:
                head, _, tail = r["completion"].rpartition("```")
                r["completion"] = f"{head}# variant {i}\n```{tail}"
            f.write(json.dumps(r) + "\n")


def report(n, out, metrics, queue, submit_s, total_s):
    ids = collections.Counter()
    status = collections.Counter()
    for line in open(out):
        r = json.loads(line)
        ids[r["id"]] += 1
        status[r["status"]] += 1
    q = json.load(open(queue))
    twice = sum(1 for c in ids.values() if c > 1)
    lost = n - len(ids)
    requests = collections.Counter()
    # Route labels hold braces ({id}), so labels are read as quoted values, not up to a brace.
    pattern = re.compile(r'^crucible_http_requests_total\{(.*)\} (\d+)$', re.M)
    for m in pattern.finditer(open(metrics).read()):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        requests[(labels["method"], labels["route"])] += int(m.group(2))
    posts = requests[("POST", "/rollouts")]
    pages = requests[("GET", "/batches/{id}/results")]
    rows = [
        ("rollouts", n),
        ("results back", sum(ids.values())),
        ("lost", lost),
        ("returned twice", twice),
        ("statuses", dict(status)),
        # A cache hit is a task too (done at once), so tasks are not evaluations.
        ("evaluations run by workers", q["done_total"] + q["failed_total"] - q["cache_hits_total"]),
        ("answered from cache / joined", f"{q['cache_hits_total']} / {q['coalesced_total']}"),
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
        make(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:] == ["unique"])
    elif cmd == "report":
        report(
            int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]), float(sys.argv[7])
        )
    else:
        sys.exit(__doc__)
