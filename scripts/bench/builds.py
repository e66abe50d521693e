"""Cold load_inline builds side by side, and the service's verdicts on the CUDA build workload.

    python3 scripts/bench/builds.py side-by-side --out DIR [--workload W] [--jobs K]
                                                 [--arms torch,overlap,pch] [--count N]
        On a GPU host: builds every correct candidate's load_inline call (the first N) cold in
        fresh directories once per arm, the arms in turn (which goes first rotates), K
        candidates at a time: `torch` as torch does it; `overlap` with $PYTORCH_NVCC set to
        gpu-worker/harness/nvcc_overlap.py, as the worker's builds run (nvcc's host and device
        front ends at once); `pch` as `overlap` and with the node's precompiled header of
        torch/extension.h first on the include path (CRUCIBLE_PCH, on by default; the headers
        are made first with gpu-worker/harness/pch.py, timed). Prints each arm's cold build wall times
        (p50, p90), its p50 over torch's (target <= 1/3) and each translation unit's compile
        time from ninja's log; writes DIR/builds.json.
    python3 scripts/bench/builds.py phases --out DIR [--workload W] [--count K]
        nvcc's own time per compilation phase (`--time`) of K cold builds of distinct
        candidates, one at a time: where a CUDA build's translation unit spends its wall time
        (the host preprocessing, cudafe++, the device front end cicc, ptxas, the host
        compiler). Writes DIR/phases.json.
    python3 scripts/bench/builds.py check --results R [--label L] [--workload W]
        The service's run of the same workload (bench.py, appended to R): every verdict the
        expected one, the extensions built in the CPU stage (`build` compile_pool, whatever
        the style, so none on the device's time), and each failing build's error_message led by
        the compiler's first error line. Exit 1 on any miss.

The workload is scripts/bench/workload-cuda.json (scripts/bench/make_cuda_candidates.py).
"""
import argparse
import concurrent.futures
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from report import pct

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PCH_SCRIPT = os.path.join(REPO, "gpu-worker", "harness", "pch.py")
HARNESS_DIR = os.path.join(REPO, "gpu-worker", "harness")
ARMS = ("torch", "overlap", "pch")
TARGET_RATIO = 1 / 3
# A compiler's error line: nvcc's `file.cu(12): error: ...`, GCC's `file.cpp:3:5: error: ...`.
COMPILER_ERROR = re.compile(r"(\(\d+\): error|:\d+:(\d+:)? (fatal )?error)")
# One build in a fresh interpreter: its wall time inside load_inline only.
BUILD_ONE = r"""
import json, sys, time
from torch.utils.cpp_extension import load_inline
args = json.load(open(sys.argv[1]))
t0 = time.monotonic()
load_inline(**args)
print(json.dumps({"wall_s": time.monotonic() - t0}))
"""


class Recorded(Exception):
    """Raised by the recording load_inline: the arguments are all that is wanted."""


def load_workload(path):
    with open(path) as f:
        w = json.load(f)
    return w, [dict(e, candidate=os.path.join(REPO, e["candidate"]),
                    problem=os.path.join(REPO, w["problems_root"], e["problem"]))
               for e in w["entries"]]


def recorded_calls(entry):
    """The load_inline arguments of a candidate, whatever its style: imported, ModelNew made,
    forward called with the problem's inputs, until its first load_inline (nothing is built)."""
    import importlib.util

    import torch.utils.cpp_extension as cpp

    calls = []
    real = cpp.load_inline

    def record(*args, **kwargs):
        calls.append(kwargs if not args else dict(zip(("name", "cpp_sources"), args), **kwargs))
        raise Recorded()

    cpp.load_inline = record
    try:
        def module(path, name):
            spec = importlib.util.spec_from_file_location(name, path)
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
            return m
        try:
            problem = module(entry["problem"], "problem")
            cand = module(entry["candidate"], "candidate")
            model = cand.ModelNew(*problem.get_init_inputs())
            model(*problem.get_inputs())
        except Recorded:
            pass
    finally:
        cpp.load_inline = real
    return calls


def build(arguments, build_dir, python, extra_env=None):
    """One cold build in a fresh interpreter: (wall seconds, per-target ms from .ninja_log)."""
    args = dict(arguments, build_directory=build_dir, verbose=False)
    spec = os.path.join(build_dir, "args.json")
    with open(spec, "w") as f:
        json.dump(args, f)
    env = dict(os.environ, PATH=os.path.dirname(python) + os.pathsep + os.environ.get("PATH", ""))
    env.pop("PYTORCH_NVCC", None)
    env.update(extra_env or {})
    out = subprocess.run([python, "-c", BUILD_ONE, spec], capture_output=True, text=True,
                         env=env, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"build failed: {out.stderr[-2000:]}")
    wall = json.loads(out.stdout.strip().splitlines()[-1])["wall_s"]
    return wall, ninja_targets(os.path.join(build_dir, ".ninja_log"))


def ninja_targets(path):
    """ms per target from a .ninja_log (`start end mtime target hash`)."""
    times = {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split("\t")
                if len(parts) >= 4 and parts[0].isdigit():
                    times[parts[3]] = int(parts[1]) - int(parts[0])
    except OSError:
        pass
    return times


def make_pch(root, python, variants, with_cuda):
    """The variants made in parallel, one process each: {flags: seconds}."""
    procs = {}
    for v in variants:
        cmd = [python, PCH_SCRIPT, root, f"--cflags={v}"] + (["--with-cuda"] if with_cuda else [])
        procs[v] = (time.monotonic(), subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
    took = {}
    for v, (t0, p) in procs.items():
        out, _ = p.communicate(timeout=900)
        took[v] = round(time.monotonic() - t0, 1)
        print(f"pch {v or '(none)'}: {out.strip()} in {took[v]} s", flush=True)
        if p.returncode != 0:
            raise SystemExit(f"pch.py failed for {v!r}")
    return took


def harness_builds():
    """The harness's builds module (the worker's own matching of a build to a variant),
    loaded as a task child loads it: harness.py registers every module as crucible_<name>."""
    import importlib.util
    entry = importlib.util.spec_from_file_location("crucible_harness_entry",
                                                   os.path.join(HARNESS_DIR, "harness.py"))
    entry.loader.exec_module(importlib.util.module_from_spec(entry))
    import crucible_builds
    return crucible_builds


def side_by_side(args):
    harness = harness_builds()
    arms = [a for a in args.arms.split(",") if a]
    if not arms or arms[0] != "torch" or any(a not in ARMS for a in arms):
        raise SystemExit(f"--arms: torch first, then any of {ARMS[1:]}")
    import torch
    from torch.utils import cpp_extension
    overlap_env = {}
    if harness.use_nvcc_overlap(overlap_env, args.python, cpp_extension.CUDA_HOME) is None:
        raise SystemExit("no nvcc under CUDA_HOME: nothing to build with")
    _, entries = load_workload(args.workload)
    entries = [e for e in entries if e["expect"] == "correct"]
    os.makedirs(args.out, exist_ok=True)
    pch_seconds, variants = {}, []
    if "pch" in arms:
        root = args.pch_root or os.path.join(args.out, "pch")
        os.makedirs(root, exist_ok=True)
        pch_seconds = make_pch(root, args.python, ["", "-O3"], torch.cuda.is_available())
        variants = harness.pch_variants(root)
    work = []
    for e in entries:
        for call in recorded_calls(e):
            work.append((os.path.basename(e["candidate"]), e.get("style"), call))
    work = work[:args.count] if args.count else work
    print(f"{len(work)} load_inline calls of {len(entries)} candidates, arms {arms}; "
          f"{args.jobs} candidates at once", flush=True)
    scratch = tempfile.mkdtemp(prefix="builds-", dir=args.scratch)

    def one(i):
        label, style, call = work[i]
        headed = harness.with_pch(call, variants)
        how = {"torch": (call, None), "overlap": (call, overlap_env), "pch": (headed, overlap_env)}
        order = arms[i % len(arms):] + arms[:i % len(arms)]
        row = {"candidate": label, "style": style, "pch": "pch" in arms and headed is not call}
        for arm in order:
            d = os.path.join(scratch, f"{i}-{arm}")
            os.makedirs(d)
            arguments, env = how[arm]
            try:
                row[arm], row[arm + "_targets"] = build(arguments, d, args.python, env)
            except (RuntimeError, subprocess.SubprocessError, ValueError) as e:
                row[arm], row[arm + "_targets"], row[arm + "_error"] = None, {}, str(e)[-1500:]
        secs = "  ".join(f"{a} " + ("failed" if row[a] is None else f"{row[a]:6.1f} s")
                         for a in arms)
        print(f"  {label:40s} {secs}" + "".join(f"\n    {a} failed: {row[a + '_error'][-600:]}"
                                                 for a in arms if row[a] is None), flush=True)
        return row

    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(one, range(len(work))))
    subprocess.run(["rm", "-rf", "--", scratch], check=False)
    report = summarize(rows, arms, pch_seconds)
    with open(os.path.join(args.out, "builds.json"), "w") as f:
        json.dump({"rows": rows, "summary": report}, f, indent=1)
    print_summary(report, arms)
    return 1 if report["failed"] else 0


def phase_times(csv_path):
    """nvcc's --time table summed per phase: {phase: ms}. Its rows are `source, phase, ...,
    milliseconds, unit`: the last number of a row is its time; a header row has none."""
    took = {}
    try:
        with open(csv_path, newline="") as f:
            for row in csv.reader(f):
                row = [c.strip().strip('"') for c in row]
                values = [float(c) for c in row[2:] if re.fullmatch(r"[0-9]+(\.[0-9]*)?", c)]
                if len(row) >= 2 and values:
                    took[row[1]] = took.get(row[1], 0.0) + values[-1]
    except OSError:
        pass
    return took


def phases(args):
    _, entries = load_workload(args.workload)
    entries = [e for e in entries if e["expect"] == "correct"]
    os.makedirs(args.out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="phases-")
    rows, seen = [], set()
    for e in entries:
        if len(rows) >= args.count:
            break
        calls = recorded_calls(e)
        if not calls or e["problem"] in seen:
            continue
        seen.add(e["problem"])
        d = os.path.join(scratch, str(len(rows)))
        os.makedirs(d)
        csv_path = os.path.join(d, "nvcc-time.csv")
        call = dict(calls[0])
        call["extra_cuda_cflags"] = list(call.get("extra_cuda_cflags") or []) + ["--time", csv_path]
        try:
            wall, targets = build(call, d, args.python)
        except (RuntimeError, subprocess.SubprocessError, ValueError) as err:
            print(f"  {os.path.basename(e['candidate'])}: build failed: {str(err)[-600:]}", flush=True)
            continue
        row = {"candidate": os.path.basename(e["candidate"]), "wall_s": round(wall, 1),
               "targets_ms": targets, "nvcc_phases_ms": phase_times(csv_path)}
        rows.append(row)
        print(f"  {row['candidate']}: {wall:.1f} s; ninja {targets}", flush=True)
        for phase, ms in sorted(row["nvcc_phases_ms"].items(), key=lambda kv: -kv[1]):
            print(f"      {phase:40s} {ms:9.0f} ms", flush=True)
    subprocess.run(["rm", "-rf", "--", scratch], check=False)
    with open(os.path.join(args.out, "phases.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return 0 if rows else 1


def summarize(rows, arms, pch_seconds):
    """Each arm's p50/p90, its p50 over torch's and each unit's p50, over the candidates that
    built in every arm."""
    failed = [r for r in rows if any(r[a] is None for a in arms)]
    rows = [r for r in rows if r not in failed]
    out = {"builds": len(rows), "failed": len(failed), "with_pch": sum(r["pch"] for r in rows),
           "pch_seconds": pch_seconds}
    for arm in arms:
        walls = [r[arm] for r in rows]
        out[arm] = {"p50": pct(walls, 50), "p90": pct(walls, 90)}
        for unit, suffix in (("main.cpp", "main.o"), ("cuda.cu", "cuda.cuda.o"), ("link", ".so")):
            ms = [v for r in rows for t, v in r[arm + "_targets"].items() if t.endswith(suffix)]
            if ms:
                out[arm][unit] = pct(ms, 50) / 1e3
        if rows:
            out[arm]["ratio_p50"] = out[arm]["p50"] / out["torch"]["p50"]
            out[arm]["per_build_ratio_p50"] = pct([r[arm] / r["torch"] for r in rows], 50)
    return out


def print_summary(s, arms):
    if s["pch_seconds"]:
        print(f"precompiled headers made in {s['pch_seconds']} s (once per node and torch)")
    print(f"{'':10s} {'p50 s':>8s} {'p90 s':>8s} {'main.cpp p50':>13s} {'cuda.cu p50':>12s} "
          f"{'link p50':>9s} {'p50/torch':>10s} {'per build':>10s}")
    for arm in arms:
        a = s.get(arm)
        if not a or a["p50"] is None:
            continue
        print(f"{arm:10s} {a['p50']:8.1f} {a['p90']:8.1f} {a.get('main.cpp', 0):13.1f} "
              f"{a.get('cuda.cu', 0):12.1f} {a.get('link', 0):9.1f} {a['ratio_p50']:10.2f} "
              f"{a['per_build_ratio_p50']:10.2f}")
    best = min((s[a]["ratio_p50"] for a in arms[1:] if s.get(a) and "ratio_p50" in s[a]),
               default=None)
    if best is not None:
        verdict = "met" if best <= TARGET_RATIO else "not met"
        print(f"cold build p50 over torch's: best {best:.2f} (target <= {TARGET_RATIO:.2f}: "
              f"{verdict}); {s['builds']} candidates built in every arm, {s['failed']} with a "
              f"failed build" + (f", {s['with_pch']} found a precompiled header"
                                 if "pch" in arms else ""))


def check(args):
    w, entries = load_workload(args.workload)
    with open(args.results) as f:
        runs = json.load(f)["runs"]
    # bench.py names a run's label `mode` (on, off, or the LABEL it was given).
    chosen = [r for r in runs if args.label in (None, r.get("mode"))]
    if not chosen:
        raise SystemExit(f"no run labelled {args.label!r} in {args.results}")
    run = chosen[-1]
    style = {os.path.basename(e["candidate"]): e.get("style") for e in entries}
    misses = []
    print(f"{'candidate':40s} {'style':10s} {'expect':12s} {'got':12s} {'build':13s} {'device s':>8s}")
    for t in run["tasks"]:
        # bench.py's label is `problem|candidate`, cut to a width: the candidate it starts.
        short = t["label"].split("|")[-1].split("/")[-1].split("@")[0]
        name = next((n for n in style if n.removesuffix(".py").startswith(short)), short + ".py")
        device_s = (t.get("stage_ms") or {}).get("device_stage", 0) / 1e3
        print(f"{name:40s} {style.get(name, '?'):10s} {t['expect']:12s} {t['got']:12s} "
              f"{str(t.get('build')):13s} {device_s:8.1f}")
        if t["got"] != t["expect"]:
            misses.append(f"{name}: {t['got']} (expected {t['expect']}): {t.get('error')}")
        if t["expect"] == "correct" and t.get("build") != "compile_pool":
            misses.append(f"{name}: build {t.get('build')!r}, not the CPU stage's")
        if t["expect"] == "COMPILATION":
            first = (t.get("error") or "").split("compiler errors:", 1)[-1].strip().splitlines()[:1]
            if not first or not COMPILER_ERROR.search(first[0]):
                misses.append(f"{name}: error_message not led by a compiler error: {t.get('error')!r}")
    for m in misses:
        print("MISS", m)
    print(f"builds check: {len(run['tasks'])} evaluations, {len(misses)} misses")
    return 1 if misses else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    s = sub.add_parser("side-by-side")
    s.add_argument("--out", required=True)
    s.add_argument("--jobs", type=int, default=4)
    s.add_argument("--arms", default="torch,overlap")
    s.add_argument("--count", type=int, default=0, help="the first N calls (0: all)")
    s.add_argument("--pch-root", default=None)
    s.add_argument("--scratch", default=None, help="where the build directories go")
    s.add_argument("--python", default=os.environ.get("CRUCIBLE_PYTHON", sys.executable))
    ph = sub.add_parser("phases")
    ph.add_argument("--out", required=True)
    ph.add_argument("--count", type=int, default=3)
    ph.add_argument("--python", default=os.environ.get("CRUCIBLE_PYTHON", sys.executable))
    c = sub.add_parser("check")
    c.add_argument("--results", required=True)
    c.add_argument("--label", default=None)
    for p in (s, ph, c):
        p.add_argument("--workload", default=os.path.join(HERE, "workload-cuda.json"))
    args = ap.parse_args()
    return {"side-by-side": side_by_side, "phases": phases, "check": check}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
