"""Reads the NDJSON report of a Schemathesis run (scripts/fuzz-api.sh) and prints, per operation,
how many requests got each status, and the totals. Exits 1 when an operation never got a 2xx
answer: a run whose requests all bounce off authentication or validation would pass every check
while testing nothing behind them."""

from __future__ import annotations

import collections
import json
import sys

# Operations whose 2xx needs something the fuzz run deliberately lacks: draining a worker needs a
# registered worker, and the run starts none (a worker would evaluate every fuzzed task); the
# OpenEnv session answers 101 to a WebSocket handshake, which Schemathesis does not make (the
# session is tested by clients/python/tests/test_openenv.py). Their other answers are still
# checked against the document like every other.
NO_2XX_HERE = {"POST /admin/workers/{id}/drain", "GET /openenv/ws"}


def main(path: str) -> int:
    statuses: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    failed = 0
    for line in open(path, encoding="utf-8"):
        event = json.loads(line)
        finished = event.get("ScenarioFinished")
        if not finished:
            continue
        recorder = finished["recorder"]
        for interaction in recorder.get("interactions", {}).values():
            response = interaction.get("response")
            if response:
                statuses[recorder["label"]][response["status_code"]] += 1
        for checks in recorder.get("checks", {}).values():
            failed += sum(1 for c in checks if c["status"] == "failure")
    requests = sum(sum(c.values()) for c in statuses.values())
    for label in sorted(statuses):
        counts = ", ".join(f"{s}: {n}" for s, n in sorted(statuses[label].items()))
        print(f"{label:40} {counts}")
    print(f"{requests} requests to {len(statuses)} operations, {failed} failed checks")
    unreached = [
        label
        for label, c in statuses.items()
        if label not in NO_2XX_HERE and not any(200 <= s < 300 for s in c)
    ]
    if unreached:
        print(f"never answered 2xx: {', '.join(sorted(unreached))}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
