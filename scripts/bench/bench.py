#!/usr/bin/env python3
"""Crucible GPU benchmark driver: one RL-style batch of evaluations, three ways.

Modes (each run appends one JSON object to --results; --report prints the combined table):
  crucible  submit the whole workload to a running Crucible API as one POST /evaluate/batch,
            long-poll every task, and record its server timestamps and stage_ms. Label the run
            `on` (everything on) or `off` (run with a worker started with CRUCIBLE_TEMPLATE=0 and
            pass --force-refresh so the result cache and coalescing are bypassed).
  naive     what a KernelBench loop does: one fresh `python -I -B harness.py <taskdir>` per
            evaluation, sequentially, with a private task dir (reference.py, candidate.py,
            spec.json), fd 3 as the result pipe, the reference timed again every time.
  --report  read --results and print one table (labels as columns) with the targets, the
            device time by stage and the timing-quality comparisons (scripts/bench/report.py).
            --label names a run: on/off/naive (bench-gpu.sh), or the small batch's rows
            (bench-small.sh: naive, slots=K, precompile-off, adaptive, checks-off).

While a mode runs, `nvidia-smi --query-gpu=utilization.gpu,memory.used -lms 200` samples the GPU
(absent on a CPU machine: busy fraction and memory high-water are then reported as n/a).

Definitions (per evaluated task; see docs/BENCHMARKS.md, "GPU benchmark"):
  latency   end-to-end: the instant the task's verdict was final minus the instant the batch
            was submitted (Crucible: finished_at - submitted_at, both from Redis's clock; naive:
            the end of its child minus the start of the run, as if the whole batch had been
            handed to the loop at once).
  service   worker-side time of the task: finished_at - started_at (claim to ack) for Crucible,
            the child's wall time for naive.
  overhead  service - (stage_ms.correctness + stage_ms.performance): everything the worker and
            the child spend on something other than checking and timing the kernel (interpreter
            start, imports, CUDA context, loading, instantiating, task dir, claim/ack).
Tasks answered from the result cache or joined to an identical task (coalesced) have no
service time of their own: they count as evaluations answered, not in the overhead figures.

The modes are crucible_mode.py and naive_mode.py, the workload's expansion workload.py, the GPU
sampling gpu_sampler.py; this file is the command line.

Standard library only: the GPU machine has no network and nothing to pip-install from.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from crucible_mode import call, run_crucible
from naive_mode import run_naive
from report import report
from workload import HERE, REPO, expand_workload, select_shard


def device_name(args):
    if args.mode == "crucible":
        _, workers = call(args.api, "GET", "/workers/status")
        for w in (workers or {}).get("workers", []):
            dev = w.get("device") or {}
            return f"{dev.get('kind', '?')}: {dev.get('name', '?')}"
    if args.device == "cpu":
        return "cpu"
    exe = shutil.which("nvidia-smi")
    if exe:
        try:
            return "cuda: " + subprocess.run([exe, "-i", str(args.gpu), "--query-gpu=name", "--format=csv,noheader"],
                                             capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return "cuda"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=["crucible", "naive"])
    ap.add_argument("--label", default=None, help="name of this run in the report (crucible: on/off; naive: naive)")
    ap.add_argument("--report", action="store_true", help="print the table from --results")
    ap.add_argument("--tasks", action="store_true", help="with --report: one line per task too")
    ap.add_argument("--results", default="/tmp/crucible-bench/results.json")
    ap.add_argument("--workload", default=os.path.join(HERE, "workload.json"))
    ap.add_argument("--problems", default=None, help="problems root (default: the workload's problems_root)")
    ap.add_argument("--shard", default=None, help="K/N: run only the K-th of N slices (modes too long for one call)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N evaluations")
    ap.add_argument("--api", default="http://127.0.0.1:10907")
    ap.add_argument("--force-refresh", action="store_true", help="crucible: bypass the result cache and coalescing")
    ap.add_argument("--timing-target", type=float, default=None,
                    help="with --timing adaptive: the requests' target_rel_error (default: the API's)")
    ap.add_argument("--timing", choices=["fixed", "adaptive"], default=None,
                    help='crucible: put "timing": {"mode": ...} into every request (default: none)')
    ap.add_argument("--worker-env", default="",
                    help="the worker's extra environment (recorded: the report pairs rows by CRUCIBLE_DEVICE_SLOTS)")
    ap.add_argument("--perf-trials", type=int, default=None, help="override every evaluation's num_perf_trials (dry runs)")
    ap.add_argument("--select", default=None, help="I,J,...: only these evaluations (0-based, after --limit)")
    ap.add_argument("--python", default=os.environ.get("CRUCIBLE_PYTHON", "python3"), help="naive: interpreter")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="naive: harness device")
    ap.add_argument("--gpu", default="0")
    ap.add_argument("--deadline-s", type=float, default=570.0, help="stop waiting/starting after this long")
    args = ap.parse_args()

    if args.report:
        return report(args.results, args.tasks, args.workload)
    if not args.mode:
        ap.error("--mode or --report")
    if args.mode == "naive" and not os.path.isabs(args.python):
        args.python = shutil.which(args.python) or args.python
    items = expand_workload(args.workload, args.problems)
    if args.limit:
        items = items[: args.limit]
    if args.select:
        items = [items[int(i)] for i in args.select.split(",")]
    if args.perf_trials:
        items = [dict(it, num_perf_trials=args.perf_trials) for it in items]
    items = select_shard(items, args.shard)
    label = args.label or ("naive" if args.mode == "naive" else "on")
    print(f"bench: mode {args.mode} ({label}), {len(items)} evaluations"
          f"{' shard ' + args.shard if args.shard else ''}, "
          f"{len({it['problem'] for it in items})} problems", flush=True)
    dev = device_name(args)
    run = run_crucible(args, items) if args.mode == "crucible" else run_naive(args, items)
    run.update({"mode": label, "kind": args.mode, "shard": args.shard, "device": dev,
                "force_refresh": args.force_refresh, "timing": args.timing, "worker_env": args.worker_env,
                "workload": os.path.relpath(args.workload, REPO),
                "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    data = {"runs": []}
    if os.path.exists(args.results):
        with open(args.results) as f:
            data = json.load(f)
    data["runs"].append(run)
    tmp = args.results + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
    os.replace(tmp, args.results)
    n_ok = sum(t["got"] == t["expect"] for t in run["tasks"])
    print(f"bench: {label}: {len(run['tasks'])} evaluations in {run['wall_s']:.1f} s, "
          f"{n_ok} verdicts as expected; appended to {args.results}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
