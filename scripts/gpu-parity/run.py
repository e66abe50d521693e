#!/usr/bin/env python3
"""Drives the measurement options' GPU run against a running Crucible API: real KernelBench
level-1 problems with our Triton candidates, each evaluated under every option that is not the
default (precision bf16 and fp16, timing_method do_bench and host_time, reference_backend
compile) beside the defaults, then the compiled reference once more with another seed (a new
evaluation, so not the result cache's answer, but the same reference: its compiled timing must
come from the reference cache, with no compilation); prints one table.

Standard library only (the GPU machine has nothing to pip-install from); the HTTP helpers are
the smoke run's."""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu-smoke"))
from run import call, verdict_of  # noqa: E402

PROBLEMS = ["19_ReLU", "23_Softmax", "1_Square_matrix_multiplication_", "36_RMSNorm_",
            "47_Sum_reduction_over_a_dimension", "26_GELU_"]
# name -> the request's options; the first is every default.
CONFIGS = {
    "default": {},
    "bf16": {"precision": "bf16"},
    "fp16": {"precision": "fp16"},
    "do_bench": {"timing_method": "do_bench"},
    "host_time": {"timing_method": "host_time"},
    "compile": {"reference_backend": "compile"},
}


def submit(api, problems, candidates, problem, options, trials, perf_trials):
    body = dict(options, **{
        "reference_code": open(f"{problems}/level1/{problem}.py").read(),
        "kernel_code": open(f"{candidates}/{problem}.py").read(),
        "backend": "triton", "num_correct_trials": trials, "num_perf_trials": perf_trials,
        "timeout_s": 600})
    status, answer = call(api, "POST", "/evaluate", body)
    if status != 202:
        raise SystemExit(f"submit {problem} {options} answered {status}: {answer}")
    return answer["task_id"]


def wait(api, task_id, deadline):
    while time.time() < deadline:
        left = deadline - time.time()
        status, task = call(api, "GET", f"/tasks/{task_id}?wait={min(30, left):.0f}", timeout=90)
        if status == 200 and task["status"] in ("done", "failed", "cancelled"):
            return task
    return call(api, "GET", f"/tasks/{task_id}")[1]


def row(problem, config, task):
    r = task.get("result") or {}
    stats = lambda k: r.get(k) or {}
    return {"problem": problem[:30], "config": config, "verdict": verdict_of(task),
            "ref_ms": stats("ref_runtime_ms").get("median"),
            "ker_ms": stats("runtime_ms").get("median"),
            "ref_n": stats("ref_runtime_ms").get("trials"),
            "ker_n": stats("runtime_ms").get("trials"),
            "speedup": r.get("speedup"), "cached": r.get("ref_runtime_cached"),
            "compile_s": (r.get("stage_ms") or {}).get("compile_reference", 0) / 1e3,
            "max_diff": r.get("max_abs_diff"), "error": r.get("error_message")}


def check_device_classes(args):
    """The worker advertises `args.device_class`; a request for it runs on this GPU and says so
    in its result, one for a class no worker has is refused at submit."""
    _, workers = call(args.api, "GET", "/workers/status")
    advertised = sorted({(w.get("device") or {}).get("class") for w in workers["workers"]})
    problem = PROBLEMS[0]
    task_id = submit(args.api, args.problems, args.candidates, problem,
                     {"device_class": args.device_class}, args.trials, args.perf_trials)
    task = wait(args.api, task_id, time.time() + 300)
    ran_on = ((task.get("result") or {}).get("device") or {}).get("class")
    other = "a100" if args.device_class != "a100" else "h200"
    status, answer = call(args.api, "POST", "/evaluate", {
        "reference_code": open(f"{args.problems}/level1/{problem}.py").read(),
        "kernel_code": open(f"{args.candidates}/{problem}.py").read(), "device_class": other})
    ok = advertised == [args.device_class] and ran_on == args.device_class \
        and verdict_of(task) == "correct" and status == 422 \
        and answer.get("code") == "DEVICE_CLASS_UNAVAILABLE"
    print(f"device classes: workers advertise {advertised}; device_class {args.device_class} ran "
          f"on {ran_on} ({verdict_of(task)}); device_class {other}: {status} "
          f"{answer.get('code')}: {answer.get('message')} -> {'PASS' if ok else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--api", default="http://127.0.0.1:10907")
    ap.add_argument("--problems", required=True, help="KernelBench root (has level1/)")
    ap.add_argument("--candidates", required=True)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--perf-trials", type=int, default=100)
    ap.add_argument("--out", default=None, help="write every task as JSON lines here")
    ap.add_argument("--deadline-s", type=float, default=500)
    ap.add_argument("--device-class", default=None,
                    help="the class this GPU's worker should have (e.g. h100): a request naming "
                         "it runs there, one naming another class is refused with 422")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma-separated names of CONFIGS to run (compile runs twice)")
    args = ap.parse_args()
    wanted = args.configs.split(",")
    configs = [(name, opts) for name, opts in CONFIGS.items() if name in wanted]
    t0 = time.time()
    deadline = t0 + args.deadline_s
    first = [(p, name, submit(args.api, args.problems, args.candidates, p, opts, args.trials,
                              args.perf_trials)) for name, opts in configs for p in PROBLEMS]
    done = [(p, name, wait(args.api, tid, deadline)) for p, name, tid in first]
    # The compiled reference again: timed once per problem, then taken from the cache. A
    # chosen seed makes it a new evaluation (force_refresh would also skip the reference
    # cache); the reference's timing does not depend on the seed.
    again = [(p, "compile again", submit(args.api, args.problems, args.candidates, p,
                                         dict(CONFIGS["compile"], seed=7), args.trials,
                                         args.perf_trials))
             for p in PROBLEMS if "compile" in wanted]
    done += [(p, name, wait(args.api, tid, deadline)) for p, name, tid in again]
    classes_ok = check_device_classes(args) if args.device_class else True
    rows = [row(p, name, task) for p, name, task in done]
    if args.out:
        with open(args.out, "w") as f:
            for _, _, task in done:
                f.write(json.dumps(task) + "\n")
    for r in rows:
        if r["verdict"] != "correct" and r["error"]:
            print(f"# {r['problem']} {r['config']}: {r['error'][:300]!r}")
    fmt = lambda v, p: "-" if v is None else f"{v:.{p}f}"
    header = (f"{'problem':30} {'config':13} {'verdict':9} {'ref ms':>8} {'n':>4} {'ker ms':>8} "
              f"{'n':>4} {'speedup':>7} {'cached':6} {'compile s':>9} {'max diff':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['problem']:30} {r['config']:13} {r['verdict']:9} {fmt(r['ref_ms'], 3):>8} "
              f"{r['ref_n'] or '-':>4} {fmt(r['ker_ms'], 3):>8} {r['ker_n'] or '-':>4} "
              f"{fmt(r['speedup'], 2):>7} {str(r['cached']):6} {r['compile_s']:9.1f} "
              f"{fmt(r['max_diff'], 5):>9}")
    correct = sum(r["verdict"] == "correct" for r in rows)
    print("-" * len(header))
    print(f"wall {time.time() - t0:.0f} s for {len(rows)} evaluations; {correct} correct")
    hits = sum(bool(r["cached"]) for r in rows if r["config"] == "compile again")
    print(f"compiled reference timings from the cache on the second run: {hits}/{len(again)}")
    return 0 if correct == len(rows) and hits == len(again) and classes_ok else 1


if __name__ == "__main__":
    sys.exit(main())
