#!/usr/bin/env python3
"""Runs the integrity corpora (tests/exploits, tests/legit) through a running Crucible API and
prints one line per entry, then a summary. Standard library only.

    python3 scripts/integrity/run_corpus.py --api http://127.0.0.1:10909 [--device cuda|cpu]
        [--out results.json] [--trials 5] [--perf-trials 50]

An exploit is caught when its verdict is the expected one (or among `verdict_any`), the rule it
names is among the result's flags, a `hack` is never correct, and a `max_speedup` bound holds.
An honest candidate passes when its verdict is `ok` with no flag at all. Entries whose
`devices` do not include --device are skipped.
"""
import argparse
import json
import os
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def call(api, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(api + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)


def read(*parts):
    with open(os.path.join(REPO, *parts), encoding="utf-8") as f:
        return f.read()


def expectation(entry):
    expect = entry.get("expect", {})
    if entry.get("verdict_any"):
        allowed = list(entry["verdict_any"])
    elif expect.get("verdict"):
        allowed = [expect["verdict"]]
    elif expect.get("error_code") == "SCREENED":
        allowed = ["error"] if entry.get("rule") == "no-modelnew" else ["hack"]
    else:
        allowed = ["decoy"]
    return allowed, expect.get("rule") or entry.get("rule"), expect.get("max_speedup")


def judge(kind, entry, result):
    verdict = result.get("verdict")
    rules = [f["rule"] for f in result.get("flags") or []]
    if kind == "legit":
        ok = verdict == "ok" and not rules and result.get("correct") is True
        return ok, "ok, no flags"
    allowed, rule, max_speedup = expectation(entry)
    ok = verdict in allowed and (rule is None or rule in rules)
    ok = ok and not (verdict == "hack" and result.get("correct"))
    speedup = result.get("speedup")
    if max_speedup is not None and speedup is not None and speedup > max_speedup:
        ok = False
    want = "/".join(allowed) + (f" +{rule}" if rule else "") + (
        f" speedup<={max_speedup}" if max_speedup else "")
    return ok, want


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", required=True)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", default=None)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--perf-trials", type=int, default=50)
    ap.add_argument("--timeout-s", type=float, default=540)
    args = ap.parse_args()

    entries = []
    for kind in ("exploits", "legit"):
        for e in json.loads(read("tests", kind, "manifest.json")):
            if args.device in e.get("devices", ["cpu", "cuda"]):
                entries.append((kind, e))
    tasks = []
    for kind, e in entries:
        body = {"reference_code": read("tests", "problems", e["problem"] + ".py"),
                "kernel_code": read("tests", kind, e["candidate"]),
                "backend": e.get("backend", "triton"), "num_correct_trials": args.trials,
                "num_perf_trials": args.perf_trials, "timeout_s": 300,
                "screening": e.get("screening", {})}
        tasks.append(call(args.api, "POST", "/evaluate", body)["task_id"])
    deadline = time.time() + args.timeout_s
    rows, caught, honest = [], [0, 0], [0, 0]
    for (kind, e), tid in zip(entries, tasks):
        task = None
        while time.time() < deadline:
            task = call(args.api, "GET", f"/tasks/{tid}?wait=10")
            if task["status"] in ("done", "failed", "cancelled"):
                break
        r = (task or {}).get("result") or {}
        ok, want = judge(kind, e, r)
        tally = caught if kind == "exploits" else honest
        tally[0] += ok
        tally[1] += 1
        speedup = r.get("speedup")
        row = {"kind": kind, "candidate": e["candidate"], "family": e.get("family"),
               "backend": e.get("backend", "triton"), "want": want, "pass": ok,
               "status": (task or {}).get("status"), "verdict": r.get("verdict"),
               "error_code": r.get("error_code"),
               "rules": [f"{f['rule']}:{f['severity']}" for f in r.get("flags") or []],
               "speedup": speedup, "custom": r.get("custom_kernel_count"),
               "total": r.get("total_kernel_count"), "coverage": r.get("custom_time_coverage"),
               "stage_ms": r.get("stage_ms"), "error": (r.get("error_message") or "")[:300]}
        rows.append(row)
        print(f"{'PASS' if ok else 'FAIL'} {kind[:7]:7} {str(e.get('family') or ''):>2} "
              f"{e['candidate'][:44]:44} {str(r.get('verdict')):9} "
              f"{'-' if speedup is None else f'{speedup:.2f}x':>7} "
              f"k={r.get('custom_kernel_count')}/{r.get('total_kernel_count')} "
              f"{','.join(x.split(':')[0] for x in row['rules'])[:60]}"
              + ("" if ok else f"  want {want}; {row['error'][:160]!r}"), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"exploits caught {caught[0]}/{caught[1]}; honest candidates ok and unflagged "
          f"{honest[0]}/{honest[1]} ({args.device})")
    return 0 if caught[0] == caught[1] and honest[0] == honest[1] else 1


if __name__ == "__main__":
    sys.exit(main())
