#!/usr/bin/env python3
"""Drives a GPU smoke run against a running Crucible API: submits every entry of a candidate
manifest against real KernelBench problems, waits for the verdicts, then re-runs a few correct
candidates to show the worker recovered from the faults, and prints one table.

Standard library only: the GPU machine has no network and nothing to pip-install from."""

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.request


def call(api, method, path, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(api + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def verdict_of(task):
    r = task.get("result") or {}
    if task["status"] != "done":
        return task["status"].upper()
    if r.get("correct"):
        return "correct"
    code = r.get("error_code")
    return "incorrect" if code == "CORRECTNESS" else (code or "?")


def submit(api, problems, cand_dir, entry, trials, perf_trials, force_refresh=False):
    body = {
        "reference_code": open(f"{problems}/{entry['problem']}").read(),
        "kernel_code": open(f"{cand_dir}/{entry['candidate']}").read(),
        "backend": entry["backend"],
        "num_correct_trials": trials,
        "num_perf_trials": perf_trials,
        "timeout_s": entry.get("timeout_s", 300),
        # A recovery run repeats an earlier request: it must be evaluated again, not joined to
        # the first one or answered from the result cache.
        "force_refresh": force_refresh,
    }
    status, answer = call(api, "POST", "/evaluate", body)
    if status != 202:
        raise SystemExit(f"submit {entry['candidate']} answered {status}: {answer}")
    return answer["task_id"], time.time()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", default="http://127.0.0.1:10907")
    ap.add_argument("--problems", required=True, help="KernelBench root (has level1/)")
    ap.add_argument("--candidates", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--perf-trials", type=int, default=100)
    ap.add_argument("--recovery", type=int, default=3, help="correct candidates re-run after the faults")
    ap.add_argument("--out", default=None, help="write every task as JSON lines here")
    ap.add_argument("--deadline-s", type=float, default=1500)
    ap.add_argument("--select", default=None, help="only manifest entries whose candidate matches this regex")
    args = ap.parse_args()

    manifest = json.load(open(args.manifest))
    if args.select:
        manifest = [e for e in manifest if re.search(args.select, e["candidate"])]
    correct = [e for e in manifest if e["expect"] == "correct"]
    runs = [(e, "first") for e in manifest]
    runs += [(e, "recovery") for e in correct[: args.recovery]]
    t0 = time.time()
    # Faults are queued among the correct ones, and the recovery runs come last, so the table
    # shows the worker serving correctly after every kind of failure.
    pending = [(e, phase) + submit(args.api, args.problems, args.candidates, e, args.trials,
                                   args.perf_trials, force_refresh=phase == "recovery")
               for e, phase in runs]
    rows, tasks = [], []
    for entry, phase, task_id, _ in pending:
        task = None
        while task is None:
            left = args.deadline_s - (time.time() - t0)
            if left <= 0:
                break
            status, answer = call(args.api, "GET", f"/tasks/{task_id}?wait={min(30, left):.0f}", timeout=90)
            if status == 200 and answer["status"] in ("done", "failed", "cancelled"):
                task = answer
        if task is None:
            # Past the deadline: report what is known rather than nothing.
            _, task = call(args.api, "GET", f"/tasks/{task_id}")
        tasks.append(task)
        r = task.get("result") or {}
        got = verdict_of(task) if task["status"] in ("done", "failed", "cancelled") else "UNFINISHED"
        ok = got == entry["expect"]
        med = lambda k: (r.get(k) or {}).get("median")
        rows.append({
            "problem": entry["problem"].split("/")[-1].removesuffix(".py")[:34],
            "candidate": entry["candidate"].removesuffix(".py")[:28],
            "be": entry["backend"],
            "phase": phase,
            "expect": entry["expect"],
            "got": got,
            "ok": "PASS" if ok else "FAIL",
            "ref_ms": med("ref_runtime_ms"),
            "ker_ms": med("runtime_ms"),
            "speedup": r.get("speedup"),
            "child_s": (r.get("stage_ms") or {}).get("child_wall", 0) / 1e3,
            "att": task["attempts"],
        })
        if not ok and r.get("error_message"):
            print(f"# {entry['candidate']}: {r.get('error_code')}: {r['error_message'][:300]!r}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            for t in tasks:
                f.write(json.dumps(t) + "\n")

    _, workers = call(args.api, "GET", "/workers/status")
    _, queue = call(args.api, "GET", "/queue/status")
    fmt = lambda v, p: "-" if v is None else f"{v:.{p}f}"
    header = f"{'problem':34} {'candidate':28} {'be':6} {'phase':8} {'expect':11} {'got':11} {'':4} {'ref ms':>8} {'ker ms':>8} {'speedup':>7} {'child s':>7} att"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['problem']:34} {r['candidate']:28} {r['be']:6} {r['phase']:8} {r['expect']:11} {r['got']:11} {r['ok']:4} "
              f"{fmt(r['ref_ms'], 3):>8} {fmt(r['ker_ms'], 3):>8} {fmt(r['speedup'], 2):>7} {r['child_s']:7.1f} {r['att']:>3}")
    passed = sum(r["ok"] == "PASS" for r in rows)
    print("-" * len(header))
    for w in workers.get("workers", []):
        print(f"worker {w['worker_id']} on {w['device']['name']}: state {w['state']}, tasks done {w['tasks_done']}")
        sandbox = w.get("sandbox") or {}
        layers = ", ".join(f"{l['layer']} {l['state']}" for l in sandbox.get("layers", []))
        print(f"  sandbox ({sandbox.get('identity')}, self-test {sandbox.get('selftest_ms', 0):.0f} ms): {layers}")
    # What the sandbox cost each task: the worker's part (user, cgroup, ruleset) and the child's
    # (namespaces, mounts, identity, Landlock, seccomp), from every result's stage_ms.
    for part in ("sandbox_worker", "sandbox_child"):
        # A verdict the CPU stage gave (a failed build) has no device child: no figure.
        ms = sorted(m for t in tasks
                    if (m := ((t.get("result") or {}).get("stage_ms") or {}).get(part)) is not None)
        if ms:
            print(f"{part}: median {ms[len(ms) // 2]:.1f} ms, max {ms[-1]:.1f} ms over {len(ms)} tasks")
    print(f"queue: done {queue['done_total']}, failed {queue['failed_total']}, requeued {queue['requeued_total']}")
    print(f"wall {time.time() - t0:.0f} s for {len(rows)} evaluations")
    print(f"{passed} passed, {len(rows) - passed} failed")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
