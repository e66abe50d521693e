"""Whether a worker that lends its device cores (CRUCIBLE_LEND_DEVICE_CORES, the default) takes
them back while its device times (gpu-worker/src/process/lending.rs), seen from outside it.

`sample` watches the threads of every CPU stage (`<task>_cpu-*` cgroups under the workers'
`crucible-w<pid>` cgroups), every `--interval-ms`, and writes one JSON line whenever a
thread first appears, changes the cores it may run on, or is gone:
    {"t": unix seconds, "tid": 123, "cpus": [0, 1, ...]}   (cpus null: gone)
`check` reads those lines and the worker's log ("timing window" lines) and reports, for the
given device cores, how long lent threads could run on a device core inside timing windows
(the first `--grace-ms` of a window not counted: the sampler sees a move up to one interval
late) and outside them (what lending is for):

    python3 scripts/bench/lent_threads.py sample --out lent.jsonl --deadline-s 600 &
    python3 scripts/bench/lent_threads.py check --samples lent.jsonl --log on-worker.log \
        --device-cpus 8-15
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale import timing_windows  # noqa: E402

CGROUP_ROOT = "/sys/fs/cgroup"
BASE_PREFIX = "crucible-w"
CPU_STAGE_MARK = "_cpu-"


def parse_cpus(text):
    """Pure: "0-3,8" -> [0, 1, 2, 3, 8]."""
    cpus = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def worker_bases(root=CGROUP_ROOT, depth=6):
    """The workers' cgroup base directories (`crucible-w<pid>`) under `root`."""
    found, stack = [], [(root, 0)]
    while stack:
        path, d = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for e in entries:
            if not e.is_dir(follow_symlinks=False):
                continue
            if e.name.startswith(BASE_PREFIX):
                found.append(e.path)
            elif d < depth:
                stack.append((e.path, d + 1))
    return found


def stage_threads(bases):
    """The thread ids of every CPU stage's cgroup under `bases`."""
    tids = set()
    for base in bases:
        try:
            stages = [e.path for e in os.scandir(base) if CPU_STAGE_MARK in e.name]
        except OSError:
            continue
        for stage in stages:
            for name in ("cgroup.threads", "tasks"):
                try:
                    with open(os.path.join(stage, name)) as f:
                        tids.update(int(x) for x in f.read().split())
                    break
                except (OSError, ValueError):
                    continue
    return tids


def sample(out, interval_s, deadline_s, root=CGROUP_ROOT):
    """Writes the change lines (see the module's comment) until the deadline."""
    seen = {}
    bases, bases_at = [], 0.0
    end = time.monotonic() + deadline_s
    with open(out, "w") as f:
        while time.monotonic() < end:
            now = time.time()
            if now - bases_at > 1.0:
                bases, bases_at = worker_bases(root), now
            current = stage_threads(bases)
            for tid in current:
                try:
                    cpus = sorted(os.sched_getaffinity(tid))
                except OSError:
                    continue
                if seen.get(tid) != cpus:
                    seen[tid] = cpus
                    f.write(json.dumps({"t": now, "tid": tid, "cpus": cpus}) + "\n")
            for tid in [t for t in seen if t not in current]:
                del seen[tid]
                f.write(json.dumps({"t": now, "tid": tid, "cpus": None}) + "\n")
            f.flush()
            time.sleep(interval_s)


def intervals(lines, device, end):
    """Pure: per thread, the [start, stop) spans during which it could run on a `device` core,
    from the change lines; a span still open at the last line closes at `end`."""
    open_at, spans = {}, []
    for rec in lines:
        tid, t, cpus = rec["tid"], rec["t"], rec["cpus"]
        on_device = cpus is not None and bool(set(cpus) & device)
        if on_device and tid not in open_at:
            open_at[tid] = t
        elif not on_device and tid in open_at:
            spans.append((open_at.pop(tid), t))
    spans.extend((start, end) for start in open_at.values())
    return spans


def overlap(spans, windows, grace_s):
    """Pure: thread-seconds of `spans` inside the windows (each less its first `grace_s`), and
    the windows any span reached."""
    total, hit = 0.0, 0
    for lo, hi in windows:
        lo += grace_s
        inside = sum(max(0.0, min(hi, b) - max(lo, a)) for a, b in spans)
        total += inside
        hit += inside > 0
    return total, hit


def check(samples, log, device_cpus, grace_ms):
    with open(samples) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    with open(log, errors="replace") as f:
        windows = [(a, b) for _, _, a, b in timing_windows(f.read())]
    if not lines:
        return {"error": "no CPU stage thread was seen"}
    end = lines[-1]["t"]
    spans = intervals(lines, set(device_cpus), end)
    lent_s = sum(b - a for a, b in spans)
    inside_s, windows_hit = overlap(spans, windows, grace_ms / 1e3)
    timed_s = sum(b - a for a, b in windows)
    return {
        "threads_seen": len({r["tid"] for r in lines}),
        "timing_windows": len(windows),
        "timed_s": round(timed_s, 3),
        "lent_thread_s": round(lent_s, 3),
        "lent_thread_s_inside_timing": round(inside_s, 4),
        "windows_with_a_lent_thread": windows_hit,
        "grace_ms": grace_ms,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--out", required=True)
    s.add_argument("--interval-ms", type=float, default=5.0)
    s.add_argument("--deadline-s", type=float, default=600.0)
    c = sub.add_parser("check")
    c.add_argument("--samples", required=True)
    c.add_argument("--log", required=True, help="the worker's log (its timing window lines)")
    c.add_argument("--device-cpus", required=True, type=parse_cpus)
    c.add_argument("--grace-ms", type=float, default=25.0)
    args = ap.parse_args()
    if args.cmd == "sample":
        sample(args.out, args.interval_ms / 1e3, args.deadline_s)
    else:
        print(json.dumps(check(args.samples, args.log, args.device_cpus, args.grace_ms), indent=1))


if __name__ == "__main__":
    main()
