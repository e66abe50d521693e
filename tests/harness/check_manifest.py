#!/usr/bin/env python3
"""Run every harness-decided entry of tests/candidates/manifest.json and check its verdict.

    python tests/harness/check_manifest.py [--device cpu] [--timeout 120] [-k substring] [-v]

Entries with "decided_by": "worker" (hang, segfault, flood, fork storm, memory blow-up, early
exit) are skipped: their verdict comes from the supervising worker, not from the harness.
For each entry the harness result must have the expected error_code, correct and compiled,
exactly one result line and no protocol violation, and exit 0. Prints one line per entry and
'N passed, N failed' at the end; exits 1 if anything failed.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_harness  # noqa: E402

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANIFEST = os.path.join(TESTS, "candidates", "manifest.json")


def check(entry, args):
    """Returns (ok, detail) for one manifest entry."""
    problem = os.path.join(TESTS, "problems", entry["problem"] + ".py")
    candidate = os.path.join(TESTS, "candidates", entry["candidate"])
    spec = {"backend": entry.get("backend", "triton"), "device": args.device,
            "num_correct_trials": args.trials, "num_perf_trials": args.perf_trials,
            "num_warmup": args.warmup, "measure_performance": True,
            "screening": entry.get("screening", {})}
    rep = run_harness.run(problem, candidate, spec, timeout=args.timeout, python=args.python)
    res = rep["result"]
    problems = []
    if rep["protocol_violations"]:
        problems.append(f"protocol violations {rep['protocol_violations']}")
    if res is None:
        problems.append(f"no result (rc={rep['returncode']}, signal={rep['signal']}, "
                        f"timed_out={rep['timed_out']}, stages={rep['stages']}, "
                        f"stderr: {rep['stderr_tail'][-300:]!r})")
        return False, "; ".join(problems), rep
    if rep["returncode"] != 0:
        problems.append(f"exit status {rep['returncode']}")
    for key, want in entry["expect"].items():
        if res.get(key) != want:
            problems.append(f"{key}={res.get(key)!r}, expected {want!r}")
    if res.get("correct"):
        if res.get("trials_passed") != res.get("trials_total"):
            problems.append("correct but not all trials passed")
        if not res.get("runtime_ms") or not res.get("ref_runtime_ms") or not res.get("speedup"):
            problems.append("correct but no timings")
    if res.get("error_code") and not res.get("error_message"):
        problems.append("error_code without error_message")
    detail = (f"{res.get('error_code')} compiled={res.get('compiled')} "
              f"correct={res.get('correct')} {res.get('trials_passed')}/{res.get('trials_total')} "
              f"{rep['wall_s']:.2f}s")
    if problems:
        detail += " -- " + "; ".join(problems)
    return not problems, detail, rep


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--perf-trials", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--python", default=run_harness.DEFAULT_PYTHON)
    ap.add_argument("-k", default="", help="only entries whose candidate contains this")
    ap.add_argument("-v", action="store_true", help="print error messages too")
    args = ap.parse_args()

    with open(MANIFEST) as f:
        manifest = json.load(f)
    passed = failed = skipped = 0
    t0 = time.monotonic()
    for entry in manifest:
        name = entry["candidate"]
        if args.k not in name:
            continue
        if entry.get("decided_by") == "worker":
            skipped += 1
            continue
        if entry.get("backend") == "cuda" and args.device == "cuda":
            # On a GPU the cuda candidate is a real build; its CPU expectation does not apply.
            skipped += 1
            continue
        ok, detail, rep = check(entry, args)
        print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
        if args.v and rep.get("result") and rep["result"].get("error_message"):
            print("    " + rep["result"]["error_message"].replace("\n", "\n    "))
        passed += ok
        failed += not ok
    print(f"({skipped} skipped as worker-decided or device-specific, "
          f"{time.monotonic() - t0:.1f}s)")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
