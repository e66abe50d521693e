#!/usr/bin/env python3
"""The soak run: no candidate hurts the node over a long mixed batch.

A real cluster (redis-server, one crucible-api, N CPU workers, started exactly as
scripts/chaos/chaos.py starts them, through its Cluster) is given one long batch in which a
fraction of the tasks are the hostile corpus of tests/hostile (deep directory chains, disk,
inode, /dev/shm and /tmp fills, a fork loop, inherited descriptors, cgroup listing, special
files), screening off, mixed in a seeded random order with honest candidates of
tests/candidates that run on the CPU. Nothing is injected from outside: whatever goes wrong is
the candidates' doing. It proves, for the whole batch:

  lost        0  every task reaches a terminal state before --deadline-s
  failed      0  no task ends `failed` (a service fault on every attempt)
  mismatches  0  every hostile task ends with the verdict its manifest entry names
  changed     0  every honest task keeps the verdict tests/candidates/manifest.json names
  crashes     0  the API and every worker still run at the end
  /health     0 failures: polled every 200 ms, each answer 2xx within 1 s
  leaks       0  nothing left in the workers' work dirs once they stopped on SIGTERM
  mounts      0  no task space still mounted under the run's directory
  (and every worker stops on SIGTERM within 180 s)

A task counts in one of lost / failed / mismatches-or-changed at most, in that order. Every
task's source is made distinct (a trailing comment), so the result cache answers none: each
of the N tasks is really evaluated. The workers get small bounds (--task-space-mb,
--sandbox-tmp-mb, --child-memory-mb) so the fills end in seconds; the run refuses to start
(exit 2) unless every worker reports the sandbox layers the corpus needs (it runs as root).

Prints which honest entries were used, progress, what went wrong, and a table last; writes the
same to <log-dir>/soak.json. Exit status 1 when a target is missed, 2 when the cluster could not
be set up. Stdlib only. Run it through scripts/soak.sh (which finds redis-server and a Python
with torch), e.g.

    CRUCIBLE_BIN_DIR=target/debug scripts/soak.sh --tasks 30 --hostile-fraction 0.2 --seed 1
"""

from __future__ import annotations

import argparse
import json
import random
import re
import signal
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# The cluster, its processes and the HTTP helper are the chaos run's (scripts/chaos/): the soak
# must start the services exactly as the chaos run does, so the two runs' results compare.
sys.dont_write_bytecode = True  # no __pycache__ beside chaos.py
sys.path.insert(0, str(HERE.parent / "chaos"))
from batch import fetch_tasks, pending  # noqa: E402
from cluster import Cluster, call, wait_until  # noqa: E402

TERMINAL = {"done", "failed", "cancelled"}
# What a worker's sandbox must have before the hostile corpus is let loose on this machine
# (tests/tests/node_safety.rs asks for the same): without storage and cgroup, a disk fill
# fills this disk and a fork loop forks on this host.
REQUIRED_LAYERS = ["network", "pid", "mount", "user", "landlock", "seccomp", "cgroup", "storage"]
# Honest entries that are slow on purpose (a hang waits for its deadline, a flood or a fork
# storm for a limit): a soak of them measures the limits' patience, not the node's health.
SLOW_ON_PURPOSE = ("hang", "sleeps", "fork_storm", "memory_blowup", "flood")
STOP_TIMEOUT_S = 180  # a worker's drain bound is 120 s; past this it did not stop on SIGTERM
CHUNK = 100  # tasks per POST /evaluate/batch


def screening_off() -> dict[str, str]:
    """Every rule of screen.py's DEFAULT_POLICY turned off, read as tests/src/corpus.rs reads it
    (a lookalike of a policy that learnt to evade screening sends exactly this)."""
    text = (REPO / "gpu-worker/harness/screen.py").read_text()
    policy = text.split("DEFAULT_POLICY = {", 1)[1].split("}", 1)[0]
    rules = {m.group(1): "off" for m in re.finditer(r'^\s*"([^"]+)"', policy, re.M)}
    if len(rules) < 10:
        raise SystemExit(f"read only {len(rules)} screening rules from screen.py")
    return rules


def hostile_entries() -> list[dict]:
    d = REPO / "tests/hostile"
    kernel = (d / "kernel.py").read_text()
    off = screening_off()
    return [
        {
            "kind": "hostile",
            "name": e["name"],
            "problem": "elementwise_relu",
            "source": f"{(d / e['file']).read_text()}\n\n{kernel}",
            "backend": "triton",
            "screening": off,
            "expect": e["expect"],
        }
        for e in json.loads((d / "manifest.json").read_text())
    ]


def honest_entries() -> tuple[list[dict], list[str]]:
    """The candidates manifest's entries a CPU worker decides quickly, and why the others were
    left out."""
    d = REPO / "tests/candidates"
    used, skipped = [], []
    for e in json.loads((d / "manifest.json").read_text()):
        name = e["candidate"].removesuffix(".py")
        kind = name.split("__", 1)[-1]
        if e.get("backend", "triton") != "triton":
            skipped.append(f"{name} (backend {e['backend']}: its expectation is a GPU's)")
        elif kind in SLOW_ON_PURPOSE:
            skipped.append(f"{name} (slow on purpose)")
        else:
            used.append({
                "kind": "honest",
                "name": name,
                "problem": e["problem"],
                "source": (d / e["candidate"]).read_text(),
                "backend": e["backend"],
                # Fault-injection entries opt out of the one rule they would trip.
                "screening": e.get("screening"),
                "expect": e["expect"],
            })
    return used, skipped


def plan_tasks(args, rng: random.Random) -> tuple[list[dict], list[dict], list[str]]:
    """The batch: `--hostile-fraction` of it hostile, the rest honest, each kind cycling through
    a seeded permutation of its entries (so every entry comes up as evenly as the count allows),
    then all shuffled together."""
    hostile = hostile_entries()
    honest, skipped = honest_entries()
    n_hostile = min(args.tasks, max(0, round(args.tasks * args.hostile_fraction)))

    def cycle(entries: list[dict], n: int) -> list[dict]:
        order = entries[:]
        rng.shuffle(order)
        return [order[i % len(order)] for i in range(n)] if order else []

    plan = cycle(hostile, n_hostile) + cycle(honest, args.tasks - n_hostile)
    rng.shuffle(plan)
    return plan, honest, skipped


def request(entry: dict, i: int, run_id: str, problems: dict[str, str]) -> dict:
    body = {
        "reference_code": problems[entry["problem"]],
        # A trailing comment makes every source distinct, so neither the result cache nor
        # coalescing answers a task for another: each is evaluated. At the end, so no line
        # number (nor a SyntaxError's) moves.
        "kernel_code": f"{entry['source']}\n# soak {run_id} task {i}\n",
        "backend": entry["backend"],
        "num_correct_trials": 2,
        "num_perf_trials": 5,
        "timeout_s": 300,
        "idempotency_key": f"{run_id}-{i}",
    }
    if entry["screening"]:
        body["screening"] = entry["screening"]
    return body


def submit(port: int, bodies: list[dict]) -> list[str]:
    """POSTs the batch in chunks; a refused chunk is retried (same idempotency keys, so the same
    tasks) for up to 5 minutes."""
    ids: list[str] = []
    for start in range(0, len(bodies), CHUNK):
        chunk = bodies[start:start + CHUNK]
        deadline = time.monotonic() + 300
        while True:
            status, answer = call(port, "POST", "/evaluate/batch", {"tasks": chunk}, timeout=60)
            if status == 202:
                ids += answer["task_ids"]
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"tasks {start}-{start + len(chunk) - 1} refused: {status} {answer}")
            time.sleep(1)
    return ids


class HealthProbe:
    """GET /health every 200 ms, each with a 1 s timeout. An answer is a 2xx within 1 s; a
    failure is anything else (no answer, non-2xx, or a 2xx that trickled in after 1 s)."""

    def __init__(self, port: int):
        self.port = port
        self.answered = 0
        self.slowest_ms = 0.0
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        next_at = time.monotonic()
        while not self.stop.is_set():
            t0 = time.monotonic()
            status, _ = call(self.port, "GET", "/health", timeout=1.0)
            ms = (time.monotonic() - t0) * 1000
            if 200 <= status < 300 and ms <= 1000:
                self.answered += 1
                self.slowest_ms = max(self.slowest_ms, ms)
            else:
                self.failures.append(f"{time.strftime('%H:%M:%S')} status {status} after {ms:.0f} ms")
            # A fixed cadence, not a fixed gap: a slow answer does not thin the probes out.
            next_at = max(next_at + 0.2, time.monotonic())
            self.stop.wait(next_at - time.monotonic())


def require_layers(port: int, count: int) -> list[str]:
    """What each worker lacks of REQUIRED_LAYERS (empty when all are active)."""
    def reports():
        _, v = call(port, "GET", "/workers/status")
        ws = (v or {}).get("workers") or []
        return ws if len(ws) >= count and all(isinstance(w.get("sandbox"), dict) for w in ws) else None

    wait_until("the workers' sandbox reports", 300, lambda: reports() is not None)
    missing = []
    for w in reports():
        active = {l.get("layer") for l in w["sandbox"].get("layers") or [] if l.get("state") == "active"}
        missing += [f"{w.get('worker_id')}: {layer}" for layer in REQUIRED_LAYERS if layer not in active]
    return missing


def hostile_mismatch(result: dict, expect: dict) -> str | None:
    """What a done hostile task's result lacks of its manifest `expect` (as node_safety.rs
    checks it), or None."""
    wrong = []
    for field in ("verdict", "error_code"):
        if expect.get(field) is not None and result.get(field) != expect[field]:
            wrong.append(f"{field} {result.get(field)!r} (want {expect[field]!r})")
    for field, key in (("error_message", "message"), ("output_tail", "output")):
        if expect.get(key) and expect[key] not in (result.get(field) or ""):
            wrong.append(f"{field} lacks {expect[key]!r}")
    return "; ".join(wrong) or None


def honest_changed(result: dict, expect: dict) -> str | None:
    """The fields of a done honest task's result that differ from the candidates manifest's
    expectation (error_code, correct, compiled where named, as verdicts.rs compares), or None."""
    wrong = [
        f"{field} {result.get(field)!r} (want {expect[field]!r})"
        for field in ("error_code", "correct", "compiled")
        if field in expect and (field != "compiled" or expect[field] is not None)
        and result.get(field) != expect[field]
    ]
    return "; ".join(wrong) or None


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below `root`, from this process's mount table (the workers mount
    their task spaces in the host's namespace)."""
    root_s = str(root)
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if len(fields) > 4:
            # mountinfo escapes space, tab, newline and backslash as octal.
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            if point == root_s or point.startswith(root_s + "/"):
                found.append(point)
    return found


def interrupted(*_) -> None:
    raise KeyboardInterrupt


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--hostile-fraction", type=float, default=0.1)
    p.add_argument("--workers", type=int, default=2, help="CPU workers")
    p.add_argument("--seed", type=int, default=None, help="of the mix's order (random when left out)")
    p.add_argument("--log-dir", default=None, help="default /tmp/crucible-soak/<run id>")
    p.add_argument("--deadline-s", type=float, default=7200.0, help="from the first submission to the last result")
    p.add_argument("--bin-dir", default=str(REPO / "target/debug"))
    p.add_argument("--task-space-mb", type=int, default=512, help="CRUCIBLE_TASK_SPACE_MB of the workers")
    p.add_argument("--sandbox-tmp-mb", type=int, default=512, help="CRUCIBLE_SANDBOX_TMP_MB of the workers")
    p.add_argument("--child-memory-mb", type=int, default=3072, help="CRUCIBLE_CHILD_MEMORY_MB of the workers")
    args = p.parse_args()
    if args.tasks < 1 or args.workers < 1 or not 0 <= args.hostile_fraction <= 1:
        p.error("--tasks and --workers must be at least 1, --hostile-fraction within 0-1")

    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    run_id = f"soak-{int(time.time())}-{seed}"
    logs = Path(args.log_dir or f"/tmp/crucible-soak/{run_id}").resolve()
    logs.mkdir(parents=True, exist_ok=True)
    plan, honest, skipped = plan_tasks(args, rng)
    n_hostile = sum(e["kind"] == "hostile" for e in plan)
    print(f"[soak] seed {seed}, {len(plan)} tasks ({n_hostile} hostile), logs in {logs}", flush=True)
    print(f"[soak] honest entries used: {', '.join(e['name'] for e in honest)}", flush=True)
    print(f"[soak] honest entries left out: {', '.join(skipped)}", flush=True)
    problems = {e["problem"]: (REPO / f"tests/problems/{e['problem']}.py").read_text() for e in plan}
    bodies = [request(e, i, run_id, problems) for i, e in enumerate(plan)]

    # The chaos run's Cluster, with the settings that are not the soak's business at their defaults
    # (one API, a 30 s lease, no GPU), and the soak's bounds added to each worker's environment.
    cluster = Cluster(
        argparse.Namespace(bin_dir=args.bin_dir, redis_server="redis-server", lease_ms=30_000,
                           tasks=args.tasks, apis=1, workers=args.workers, gpu_workers=0,
                           drain_s=STOP_TIMEOUT_S - 10),
        logs,
    )
    for i, w in enumerate(cluster.workers):
        w.env = dict(
            w.env,
            HOSTNAME=f"soak-node-{i}",
            CRUCIBLE_TASK_SPACE_MB=str(args.task_space_mb),
            CRUCIBLE_SANDBOX_TMP_MB=str(args.sandbox_tmp_mb),
            CRUCIBLE_CHILD_MEMORY_MB=str(args.child_memory_mb),
            # The run's own build cache, beside (not in) the work dirs, whose leftovers count.
            CRUCIBLE_BUILD_CACHE=str(logs / "builds"),
        )
    api, port = cluster.apis[0], cluster.api_ports[0]
    services = [api, *cluster.workers]
    # A SIGTERM to the soak (a CI timeout, a wrapper) still stops what it started.
    signal.signal(signal.SIGTERM, interrupted)

    health = HealthProbe(port)
    crashes: dict[str, str] = {}
    unclean: list[str] = []
    views: dict[str, dict | None] = {}
    ids: list[str] = []
    t0 = time.monotonic()
    wall = 0.0
    try:
        try:
            cluster.start()
            missing = require_layers(port, len(cluster.workers))
        except TimeoutError as e:
            print(f"[soak] set-up failed: {e}", file=sys.stderr)
            return 2
        if missing:
            print(f"[soak] refusing to run the hostile corpus: sandbox layers not active: {missing}",
                  file=sys.stderr)
            return 2
        health.thread.start()
        t0 = time.monotonic()
        ids = submit(port, bodies)
        print(f"[soak] {len(ids)} tasks submitted in {time.monotonic() - t0:.1f} s", flush=True)
        last_report = t0
        while time.monotonic() - t0 < args.deadline_s:
            for s in services:
                if s.name not in crashes and not s.alive():
                    crashes[s.name] = f"exited with {s.proc.returncode} at +{time.monotonic() - t0:.0f} s"
                    print(f"[soak] {s.name} {crashes[s.name]}", flush=True)
            if not api.alive() or not any(w.alive() for w in cluster.workers):
                break  # nothing will finish the rest
            open_now = pending(cluster, ids)
            if open_now == 0:
                # The queue's counts say done; the tasks themselves must say so too.
                views = fetch_tasks(cluster, ids)
                if all(v and v["status"] in TERMINAL for v in views.values()) and len(views) == len(ids):
                    break
            if time.monotonic() - last_report >= 30:
                last_report = time.monotonic()
                print(f"[soak] +{last_report - t0:.0f} s: {open_now} of {len(ids)} open", flush=True)
            time.sleep(2)
        wall = time.monotonic() - t0
        if api.alive():
            views = fetch_tasks(cluster, ids)
        health.stop.set()
        health.thread.join(timeout=5)
        for s in services:
            if s.name not in crashes and not s.alive():
                crashes[s.name] = f"exited with {s.proc.returncode} by the end"
        for w in cluster.workers:
            if w.alive() and not w.terminate(STOP_TIMEOUT_S):
                unclean.append(f"{w.name} did not stop within {STOP_TIMEOUT_S} s of SIGTERM")
    except KeyboardInterrupt:
        print("[soak] interrupted: stopping the cluster", file=sys.stderr)
        return 1
    finally:
        health.stop.set()
        # Workers still up (an interrupt, a set-up failure) get their whole drain bound: one
        # killed mid-task leaves its task space mounted, and no later worker sweeps this run's
        # work dirs. A second interrupt kills them at once.
        try:
            for s in cluster.workers:
                s.terminate(STOP_TIMEOUT_S)
        except KeyboardInterrupt:
            for s in cluster.workers:
                s.kill9()
        for s in [api, cluster.redis]:
            s.terminate(10)

    # What the batch did, task by task.
    lost, failed, mismatches, changed = [], [], [], []
    cached = sum(1 for v in views.values() if v and v.get("cached"))
    for task_id, entry in zip(ids, plan):
        v = views.get(task_id)
        label = f"{entry['kind']} {entry['name']} ({task_id})"
        if not v or v["status"] not in TERMINAL:
            lost.append(f"{label}: {v['status'] if v else 'unknown to the API'}")
        elif v["status"] == "failed":
            failed.append(f"{label}: {v.get('error')}")
        else:
            r = v.get("result") or {}
            why = f"status {v['status']}" if v["status"] != "done" else (
                hostile_mismatch if entry["kind"] == "hostile" else honest_changed)(r, entry["expect"])
            if why:
                detail = (f"{label}: {why}; error_message {r.get('error_message')!r}; "
                          f"output_tail {(r.get('output_tail') or '')[-300:]!r}")
                (mismatches if entry["kind"] == "hostile" else changed).append(detail)
    leaked = [str(e.relative_to(logs)) for work in cluster.work_dirs if work.exists()
              for e in sorted(work.iterdir())]
    mounts = mounts_under(logs)
    done = sum(1 for v in views.values() if v and v["status"] == "done")
    per_min = done / (wall / 60) if wall > 0 else 0.0

    table = [
        ("tasks", len(plan)),
        ("hostile", n_hostile),
        ("honest", len(plan) - n_hostile),
        ("lost", len(lost)),
        ("failed", len(failed)),
        ("hostile mismatches", len(mismatches)),
        ("honest verdicts changed", len(changed)),
        ("service crashes", len(crashes)),
        ("workers not stopping on SIGTERM", len(unclean)),
        ("/health answers / failures / slowest ms",
         f"{health.answered} / {len(health.failures)} / {health.slowest_ms:.0f}"),
        ("leaked dirs", len(leaked)),
        ("mounts left", len(mounts)),
        ("wall time", f"{wall:.0f} s"),
        ("evaluations/min", f"{per_min:.1f}"),
    ]
    report = {
        "seed": seed,
        "run_id": run_id,
        "args": vars(args),
        "table": {name: value for name, value in table},
        "submitted": len(ids),
        "done": done,
        "cached": cached,
        "honest_entries": [e["name"] for e in honest],
        "honest_left_out": skipped,
        "lost": lost,
        "failed": failed,
        "hostile_mismatches": mismatches,
        "honest_changed": changed,
        "crashes": crashes,
        "unclean_stops": unclean,
        "health_failures": health.failures,
        "leaked": leaked,
        "mounts": mounts,
        "tasks_by_entry": {k: sum(1 for e in plan if f"{e['kind']} {e['name']}" == k)
                           for k in sorted({f"{e['kind']} {e['name']}" for e in plan})},
    }
    (logs / "soak.json").write_text(json.dumps(report, indent=2))
    for title, items in [("lost", lost), ("failed", failed), ("hostile mismatches", mismatches),
                         ("honest verdicts changed", changed),
                         ("service crashes", [f"{k} {v}" for k, v in crashes.items()]),
                         ("unclean stops", unclean), ("/health failures", health.failures),
                         ("leaked", leaked), ("mounts left", mounts)]:
        for item in items[:10]:
            print(f"[soak] {title}: {item}")
        if len(items) > 10:
            print(f"[soak] {title}: ... {len(items) - 10} more in {logs / 'soak.json'}")
    if cached:
        print(f"[soak] note: {cached} tasks were answered from the result cache")
    print(f"\n[soak] seed {seed}; logs and soak.json in {logs}")
    for name, value in table:
        print(f"  {name:<42} {value}")
    bad = lost or failed or mismatches or changed or crashes or unclean or health.failures \
        or leaked or mounts or health.answered == 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
