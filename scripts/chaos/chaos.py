#!/usr/bin/env python3
"""The chaos run: a real cluster (redis-server with AOF, N API replicas, M CPU workers) given a
batch of short tasks while faults are injected, then counted.

Faults, shuffled and spread over the run: `kill -9` of a random worker (restarted at once with
the same node name and work directory, so its start-up sweep meets what the dead one left),
Redis stopped with SIGTERM or `kill -9` and started again after an outage, an API replica
killed and restarted, and optionally a rolling restart (SIGTERM to every API replica and worker
one by one, each started again before the next goes).

Counted at the end (docs/RELIABILITY.md):
  lost        submitted tasks not terminal at the deadline (or unknown to the API)
  duplicated  tasks whose verdict the workers' logs say was stored more than once
  failed      tasks that ended `failed` (a service fault every attempt)
  retried     tasks evaluated more than once (attempts > 1), and the attempts spent
  recovery    seconds from the end of the last fault to the last result
  leaked      task and template directories left in the workers' work dirs after they stopped
  health      /health answers while faults ran: answered, degraded (503: Redis down), and
              failed (no answer from a replica that was up)

Stdlib only, so it runs with any Python 3.10+. Exit status 1 when a target (0 lost,
0 duplicated, 0 failed, 0 leaked) is missed, 2 when the cluster could not be set up.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

# The run's parts, modules beside this file (its directory is first on sys.path).
from batch import fetch_tasks, leaked_dirs, pending, stored_lines, submit_all
from cluster import REPO, Cluster
from faults import Faults, HealthProbe


def iso_ts(s: str | None) -> float | None:
    if not s:
        return None
    from datetime import datetime

    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def recovery_text(recovery: float | None) -> str:
    if recovery is None:
        return "-"
    if recovery < 0:
        return f"0 s (every result in {-recovery:.1f} s before the last fault ended)"
    return f"{recovery:.1f} s"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--kills", type=int, default=50, help="kill -9 of a random worker")
    p.add_argument("--redis-restarts", type=int, default=3, help="alternately SIGTERM and kill -9")
    p.add_argument("--api-restarts", type=int, default=2)
    p.add_argument("--rolling", action=argparse.BooleanOptionalAction, default=False, help="end with a rolling restart of every process")
    p.add_argument("--apis", type=int, default=2)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--gpu-workers", type=int, default=0, help="workers on GPUs 0..N-1 (the rest on the CPU)")
    p.add_argument("--fault-pacing", choices=["progress", "time"], default="progress",
                   help="spread the faults over the batch's progress (default) or every --fault-interval-s")
    p.add_argument("--fault-interval-s", type=float, default=3.0,
                   help="mean gap between faults (with progress pacing: the least gap)")
    p.add_argument("--redis-outage-s", type=float, default=3.0)
    p.add_argument("--task-seconds", type=float, default=0.5, help="the candidate's sleep")
    p.add_argument("--lease-ms", type=int, default=15_000)
    p.add_argument("--drain-s", type=float, default=60.0, help="how long a SIGTERMed worker may take")
    p.add_argument("--chunk", type=int, default=100, help="tasks per POST /evaluate/batch")
    p.add_argument("--deadline-s", type=float, default=1800.0, help="for the whole batch")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--bin-dir", default=str(REPO / "target/debug"))
    p.add_argument("--redis-server", default="redis-server")
    p.add_argument("--log-dir", default=None)
    args = p.parse_args()

    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    random.seed(seed)
    run_id = f"chaos-{int(time.time())}-{seed}"
    logs = Path(args.log_dir or f"/tmp/crucible-chaos/{run_id}")
    logs.mkdir(parents=True, exist_ok=True)
    print(f"[chaos] seed {seed}, logs in {logs}", flush=True)

    cluster = Cluster(args, logs)
    try:
        cluster.start()
    except TimeoutError as e:
        print(f"[chaos] set-up failed: {e}", file=sys.stderr)
        cluster.stop()
        return 2
    faults = Faults(cluster, args, rng)
    health = HealthProbe(cluster)
    t0 = time.time()
    try:
        health.thread.start()
        faults.thread.start()
        ids = submit_all(cluster, args, run_id)

        def progress() -> float | None:
            open_now = pending(cluster, ids)
            return None if open_now is None else 1 - open_now / max(1, len(ids))

        faults.progress = progress
        print(f"[chaos] {len(ids)} tasks submitted in {time.time() - t0:.1f} s", flush=True)
        end = time.monotonic() + args.deadline_s
        while time.monotonic() < end:
            if not faults.thread.is_alive() and pending(cluster, ids) == 0:
                break
            time.sleep(1)
        faults.stop.set()
        faults.thread.join()
        views = fetch_tasks(cluster, ids)
    finally:
        faults.stop.set()
        health.stop.set()
        cluster.stop()

    statuses: dict[str, int] = {}
    for v in views.values():
        key = v["status"] if v else "unknown"
        statuses[key] = statuses.get(key, 0) + 1
    terminal = {"done", "failed", "cancelled"}
    lost = sum(1 for t in ids if not views.get(t) or views[t]["status"] not in terminal)
    failed = statuses.get("failed", 0)
    attempts = [v["attempts"] for v in views.values() if v]
    retried = sum(1 for a in attempts if a > 1)
    extra_attempts = sum(a - 1 for a in attempts if a > 1)
    stored = stored_lines(cluster)
    duplicated = sum(1 for n in stored.values() if n > 1)
    finished = [iso_ts(v.get("finished_at")) for v in views.values() if v]
    finished = [f for f in finished if f]
    last_fault = max((f["ended"] for f in faults.done), default=t0)
    recovery = max(finished) - last_fault if finished else None
    leaked = leaked_dirs(cluster)
    lat = sorted(health.latencies_ms)

    def pct(q: float) -> float:
        return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else float("nan")

    summary = {
        "seed": seed,
        "tasks": args.tasks,
        "submitted": len(ids),
        "statuses": statuses,
        "lost": lost,
        "duplicated": duplicated,
        "failed": failed,
        "retried": retried,
        "extra_attempts": extra_attempts,
        "stored_lines": sum(stored.values()),
        "faults": [f["fault"] for f in faults.done],
        "faults_planned": len(faults.plan),
        "recovery_s": recovery,
        "wall_s": time.time() - t0,
        "leaked": leaked,
        "health_answered": len(lat),
        "health_degraded": health.degraded,
        "health_failures": health.failures,
        "health_failed_at": health.failed_at,
        "health_p50_ms": pct(0.5),
        "health_p99_ms": pct(0.99),
        "health_max_ms": lat[-1] if lat else None,
    }
    (logs / "summary.json").write_text(json.dumps(summary, indent=2))
    kinds = {k: summary["faults"].count(k) for k in dict.fromkeys(summary["faults"])}
    print(f"\n[chaos] faults: {', '.join(f'{n} {k}' for k, n in kinds.items())} "
          f"({len(faults.done)}/{len(faults.plan)} done); logs {logs}")
    rows = [
        ("tasks submitted", len(ids)),
        ("done", statuses.get("done", 0)),
        ("lost", lost),
        ("duplicated", duplicated),
        ("failed", failed),
        ("retried (attempts > 1)", f"{retried} ({extra_attempts} extra attempts)"),
        ("verdicts stored (worker logs)", sum(stored.values())),
        ("last fault -> last result", recovery_text(recovery)),
        ("leaked dirs", len(leaked)),
        ("/health answered / degraded / failed", f"{len(lat)} / {health.degraded} / {health.failures}"),
        ("/health p50 / p99 / max", f"{pct(0.5):.1f} / {pct(0.99):.1f} / {summary['health_max_ms'] or 0:.1f} ms"),
        ("wall", f"{summary['wall_s']:.0f} s"),
    ]
    for name, value in rows:
        print(f"  {name:<38} {value}")
    missed = lost or duplicated or failed or leaked or len(faults.done) < len(faults.plan)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
