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
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# The tracing line a worker writes once the broker accepted a verdict (worker/outcome.rs).
STORED_LINE = re.compile(r"task done.*?task_id=(t_[0-9A-Za-z_-]+)")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port: int, method: str, path: str, body=None, timeout: float = 30.0):
    """(status, json) of one request; status 0 when the server could not be reached."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"content-type": "application/json"} if data else {},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None
    except (OSError, ValueError):
        return 0, None


class Service:
    """One process of the cluster, restartable under the same name and log."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path):
        self.name, self.argv, self.env = name, argv, env
        self.log_path = logs / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        # Set before a signal is sent, cleared at the next start: a process on its way out
        # (draining, or killed) is not a failure of /health when it stops answering.
        self.stopping = False

    def start(self) -> None:
        log = open(self.log_path, "ab")
        log.write(f"\n=== start {self.starts} at {time.time():.3f} ===\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.starts += 1
        self.stopping = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            self.stopping = True
            self.proc.kill()
            self.proc.wait()

    def terminate(self, timeout: float) -> bool:
        """SIGTERM, then SIGKILL after `timeout`; True when it exited by itself."""
        if not self.alive():
            return True
        self.stopping = True
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return False


def wait_until(what: str, deadline_s: float, check) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} within {deadline_s:.0f} s")


def redis_up(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def candidate_source(i: int, sleep_s: float) -> str:
    """A correct candidate that takes about `sleep_s` in the runner; the comment makes every
    task's source distinct, so neither the result cache nor coalescing answers one for another."""
    base = (REPO / "tests/candidates/elementwise_relu__correct.py").read_text()
    return f"# chaos task {i}\nimport time\ntime.sleep({sleep_s:.2f})\n{base}"


class Cluster:
    def __init__(self, args, logs: Path):
        self.args, self.logs = args, logs
        bins = Path(args.bin_dir)
        self.redis_port = free_port()
        redis_dir = logs / "redis"
        redis_dir.mkdir(parents=True, exist_ok=True)
        base_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "NO_COLOR": "1",
            "RUST_LOG": os.environ.get("RUST_LOG", "info"),
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}",
            "CRUCIBLE_LEASE_TTL_MS": str(args.lease_ms),
            "CRUCIBLE_QUEUE_CAP": str(max(10_000, args.tasks * 2)),
        }
        if os.environ.get("CRUCIBLE_PYTHON"):
            base_env["CRUCIBLE_PYTHON"] = os.environ["CRUCIBLE_PYTHON"]
        self.redis = Service(
            "redis",
            [
                args.redis_server,
                "--port", str(self.redis_port), "--bind", "127.0.0.1",
                "--dir", str(redis_dir), "--appendonly", "yes", "--appendfsync", "everysec",
                "--save", "", "--maxmemory-policy", "noeviction",
            ],
            {"PATH": base_env["PATH"]},
            logs,
        )
        self.api_ports = [free_port() for _ in range(args.apis)]
        self.apis = [
            Service(
                f"api-{i}",
                [str(bins / "crucible-api"), "--bind", f"127.0.0.1:{port}"],
                base_env,
                logs,
            )
            for i, port in enumerate(self.api_ports)
        ]
        self.work_dirs = [logs / f"work-{i}" for i in range(args.workers)]
        self.workers = []
        for i, work in enumerate(self.work_dirs):
            work.mkdir(parents=True, exist_ok=True)
            env = dict(base_env, HOSTNAME=f"chaos-node-{i}", CRUCIBLE_WORK_DIR=str(work))
            # The first `--gpu-workers` run on GPUs 0, 1, ...; the rest on the CPU.
            device = ["--gpu", str(i)] if i < args.gpu_workers else ["--cpu"]
            argv = [str(bins / "crucible-worker"), *device, "--metrics-addr", "off"]
            self.workers.append(Service(f"worker-{i}", argv, env, logs))

    def start(self) -> None:
        self.redis.start()
        wait_until("redis to answer", 30, lambda: redis_up(self.redis_port))
        for api in self.apis:
            api.start()
        for port in self.api_ports:
            wait_until(f"the API on {port}", 60, lambda p=port: call(p, "GET", "/health")[0] == 200)
        for w in self.workers:
            w.start()
        wait_until(
            f"{len(self.workers)} workers to register",
            300,
            lambda: (call(self.api_ports[0], "GET", "/health")[1] or {}).get("workers_alive", 0)
            >= len(self.workers),
        )

    def stop(self) -> None:
        for w in self.workers:
            w.terminate(self.args.drain_s + 10)
        for a in self.apis:
            a.terminate(10)
        self.redis.terminate(10)

    def live_api(self) -> int | None:
        ports = [p for p, a in zip(self.api_ports, self.apis) if a.alive()]
        return random.choice(ports) if ports else None


class Faults:
    """Runs the fault schedule on its own thread; records when each fault began and ended."""

    def __init__(self, cluster: Cluster, args, rng: random.Random):
        self.c, self.args, self.rng = cluster, args, rng
        plan = ["worker"] * args.kills
        for i in range(args.redis_restarts):
            plan.append("redis-term" if i % 2 == 0 else "redis-kill")
        plan += ["api"] * args.api_restarts
        rng.shuffle(plan)
        if args.rolling:
            # Last, so it meets a busy cluster that every other fault has already shaken.
            plan.append("rolling")
        self.plan = plan
        self.done: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    # Set by main once the batch is in: the fraction of it that is terminal, or None while no
    # replica answers.
    progress = staticmethod(lambda: 0.0)

    def wait_turn(self, k: int) -> bool:
        """Waits for fault `k`'s turn; False when the run is stopping. Paced by progress (the
        default), fault k comes once a random point of the k-th of n equal slices of the first
        90 % of the batch is done, so the faults are spread over the whole run whatever its
        speed (and at least `--fault-interval-s` apart); paced by time, about every
        `--fault-interval-s`."""
        gap = self.rng.uniform(0.5, 1.5) * self.args.fault_interval_s
        if self.stop.wait(gap):
            return False
        if self.args.fault_pacing == "time":
            return True
        due = 0.9 * (k + self.rng.random()) / len(self.plan)
        while True:
            done = self.progress()
            if done is not None and done >= due:
                return True
            if self.stop.wait(0.2):
                return False

    def run(self) -> None:
        for k, fault in enumerate(self.plan):
            if not self.wait_turn(k):
                return
            began = time.time()
            detail = getattr(self, "_" + fault.replace("-", "_"))()
            self.done.append({"fault": fault, "began": began, "ended": time.time(), "detail": detail})
            print(f"[chaos] {fault}: {detail}", flush=True)

    def _worker(self) -> str:
        w = self.rng.choice(self.c.workers)
        w.kill9()
        w.start()
        return f"kill -9 {w.name}, restarted"

    def _redis_down(self, how: str) -> str:
        if how == "term":
            self.c.redis.terminate(30)
        else:
            self.c.redis.kill9()
        time.sleep(self.args.redis_outage_s)  # the outage itself, not a synchronisation
        self.c.redis.start()
        wait_until("redis to come back", 60, lambda: redis_up(self.c.redis_port))
        return f"{how}, {self.args.redis_outage_s:.0f} s down"

    def _redis_term(self) -> str:
        return self._redis_down("term")

    def _redis_kill(self) -> str:
        return self._redis_down("kill -9")

    def _api(self) -> str:
        i = self.rng.randrange(len(self.c.apis))
        self.c.apis[i].kill9()
        self.c.apis[i].start()
        port = self.c.api_ports[i]
        wait_until("the API to come back", 60, lambda: call(port, "GET", "/health")[0] == 200)
        return f"kill -9 api-{i}, restarted"

    def _rolling(self) -> str:
        clean = 0
        for i, api in enumerate(self.c.apis):
            clean += api.terminate(30)
            api.start()
            port = self.c.api_ports[i]
            wait_until("the API to come back", 60, lambda: call(port, "GET", "/health")[0] == 200)
        for w in self.c.workers:
            clean += w.terminate(self.args.drain_s + 10)
            w.start()
        total = len(self.c.apis) + len(self.c.workers)
        return f"SIGTERM + restart of {total} processes one by one, {clean} exited cleanly"


class HealthProbe:
    """Asks every live replica's /health twice a second. Any HTTP answer counts as answered (a
    503 while Redis is down is the right answer, counted as `degraded`); a failure is a replica
    that had answered since it last started, was not restarted or signalled meanwhile, and did
    not answer within 5 s (a replica still starting, draining or being killed is not a failure
    of /health). Each failure is kept with its time and replica, for the logs."""

    def __init__(self, cluster: Cluster):
        self.c = cluster
        self.latencies_ms: list[float] = []
        self.degraded = 0
        self.failures = 0
        self.failed_at: list[str] = []
        self.answered_since: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.5):
            for port, api in zip(self.c.api_ports, self.c.apis):
                starts = api.starts
                if not api.alive() or api.stopping:
                    continue
                t0 = time.monotonic()
                status, _ = call(port, "GET", "/health", timeout=5)
                ms = (time.monotonic() - t0) * 1000
                if status:
                    self.latencies_ms.append(ms)
                    self.degraded += status != 200
                    self.answered_since[api.name] = starts
                elif (
                    api.alive()
                    and not api.stopping
                    and api.starts == starts
                    and self.answered_since.get(api.name) == starts
                ):
                    self.failures += 1
                    self.failed_at.append(f"{api.name} at {time.time():.3f}")


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
