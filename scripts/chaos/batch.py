"""The chaos run's batch (chaos.py): its tasks' sources, their submission in chunks to live
replicas, and what is read back at the end (the tasks' views, the open count, the verdicts the
workers' logs say were stored, the directories left behind). Stdlib only.
"""

from __future__ import annotations

import re
import time

from cluster import REPO, Cluster, call

# The tracing line a worker writes once the broker accepted a verdict (worker/outcome.rs).
STORED_LINE = re.compile(r"task done.*?task_id=(t_[0-9A-Za-z_-]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def candidate_source(i: int, sleep_s: float) -> str:
    """A correct candidate that takes about `sleep_s` in the runner; the comment makes every
    task's source distinct, so neither the result cache nor coalescing answers one for another."""
    base = (REPO / "tests/candidates/elementwise_relu__correct.py").read_text()
    return f"# chaos task {i}\nimport time\ntime.sleep({sleep_s:.2f})\n{base}"


def submit_all(cluster: Cluster, args, run_id: str) -> list[str]:
    """Submits the tasks in chunks, each to a live replica, retrying a chunk (same idempotency
    keys, so the same tasks) until a replica takes it."""
    ids: list[str] = []
    for start in range(0, args.tasks, args.chunk):
        chunk = range(start, min(start + args.chunk, args.tasks))
        body = {
            "tasks": [
                {
                    "reference_code": (REPO / "tests/problems/elementwise_relu.py").read_text(),
                    "kernel_code": candidate_source(i, args.task_seconds),
                    "num_correct_trials": 1,
                    "num_perf_trials": 3,
                    "timeout_s": 120,
                    "idempotency_key": f"{run_id}-{i}",
                }
                for i in chunk
            ]
        }
        deadline = time.monotonic() + 300
        while True:
            port = cluster.live_api()
            status, answer = call(port, "POST", "/evaluate/batch", body, timeout=60) if port else (0, None)
            if status == 202:
                ids += answer["task_ids"]
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"no replica took tasks {chunk.start}-{chunk.stop - 1}: {status} {answer}")
            time.sleep(0.5)
    return ids


def fetch_tasks(cluster: Cluster, ids: list[str]) -> dict[str, dict]:
    views = {}
    for task_id in ids:
        for _ in range(20):
            port = cluster.live_api()
            status, view = call(port, "GET", f"/tasks/{task_id}") if port else (0, None)
            if status in (200, 404):
                views[task_id] = view if status == 200 else None
                break
            time.sleep(0.5)
    return views


def pending(cluster: Cluster, ids: list[str]) -> int | None:
    """Tasks not yet terminal, from /queue/status's open counts; None while no replica answers."""
    port = cluster.live_api()
    status, q = call(port, "GET", "/queue/status") if port else (0, None)
    if status != 200:
        return None
    open_keys = ("queued_high", "queued_normal", "queued_low", "running")
    return sum(int(q.get(k, 0)) for k in open_keys)


def stored_lines(cluster: Cluster) -> dict[str, int]:
    counts: dict[str, int] = {}
    for w in cluster.workers:
        for line in ANSI.sub("", w.log_path.read_text(errors="replace")).splitlines():
            m = STORED_LINE.search(line)
            if m:
                counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def leaked_dirs(cluster: Cluster) -> list[str]:
    """What the stopped workers left in their work dirs (each cleans up after itself on a
    clean stop, and sweeps what a killed predecessor left at start)."""
    left = []
    for work in cluster.work_dirs:
        for entry in sorted(work.rglob("*")):
            if entry.is_dir() and entry.parent == work:
                left.append(str(entry.relative_to(cluster.logs)))
    return left
