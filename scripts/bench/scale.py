#!/usr/bin/env python3
"""Scale-out benchmark: the same workload with 1, 2, 4, 8 workers on one node, in one call.

Each mode starts a fresh Redis, one crucible-api and N `crucible-worker --gpu i` (one per GPU,
sharing the node's compile slots and build cache, which starts empty for every mode), submits
the whole workload as one batch (bench.py's crucible mode), stops everything and reads the
workers' logs. The workload is copied until every worker of the largest mode gets at least
--per-gpu evaluations (each copy's candidates differ by a comment: no result cache, no
coalescing), and every mode runs the same list. It prints, per mode:

  evals/min      evaluations answered per minute of the batch's wall time
  ratio          to the smallest mode's, per worker (the target: >= 0.85 N x one GPU's)
  busy           per GPU: nvidia-smi's utilization.gpu mean while the mode ran; without
                 nvidia-smi, the sum of the worker's device stages over the wall time (n/a)
  slot wait      CPU stages' wait for a compile slot (stage_ms.compile_slot_wait): p50 / max,
                 and how many took one
  cache hits     CPU stages the node's build cache answered (stage_ms build_cache/triton_cache)
  overlap        the most timings one device ran at once (from the workers' "timing window"
                 lines; must be 1): a CPU stand-in worker counts as its own device
  verdicts       evaluations whose verdict differs from the smallest mode's (must be 0)

CPU dry run (CPU workers stand in for GPUs): BIN=target/debug WORKER_ARGS=--cpu GPUS=1,2
WORKLOAD=scripts/bench/workload-cpu.json scripts/bench-gpu.sh scale. Standard library only.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import types

from crucible_mode import call, run_crucible
from host_usage import cpu_busy, cpu_times
from report import pct
from workload import REPO, expand_workload

MODES = (1, 2, 4, 8)
ANSI = re.compile(r"\x1b\[[0-9;]*m")
WINDOW = re.compile(r"timing window .*?task_id=(\S+) gpu=(\S+) from_unix_us=(\d+) until_unix_us=(\d+)")


# ---------------------------------------------------------------------------------------------
# pure


def modes_for(gpus, override=None):
    """The worker counts to run: `override` ("1,2") as given, else 1, 2, 4, 8 up to `gpus`."""
    if override:
        modes = sorted({int(x) for x in override.split(",") if x.strip()})
        if not modes or modes[0] < 1:
            raise SystemExit(f"GPUS={override}: want worker counts >= 1, e.g. 1,2")
        return modes
    return [n for n in MODES if n <= max(gpus, 1)]


def scaled(items, workers, per_gpu):
    """`items` copied until `workers` workers get >= `per_gpu` each; copy c > 0 of a candidate
    differs by a trailing comment (and its label by `@c`), so that every copy is evaluated."""
    copies = max(1, -(-per_gpu * workers // max(len(items), 1)))
    out = []
    for c in range(copies):
        for it in items:
            if c == 0:
                out.append(it)
            else:
                out.append(dict(it, label=f"{it['label']}@{c + 1}",
                                kernel_code=it["kernel_code"] + f"\n# copy {c + 1} of {copies}\n"))
    return out


def timing_windows(log_text, stand_in=None):
    """The "timing window" lines of one worker's log: (device, task_id, from_s, until_s). A
    CPU worker's device is `stand_in` (it stands in for a GPU of its own)."""
    out = []
    for line in ANSI.sub("", log_text).splitlines():
        m = WINDOW.search(line)
        if m:
            task_id, gpu, a, b = m.groups()
            device = stand_in if gpu == "cpu" and stand_in else gpu
            out.append((device, task_id, int(a) / 1e6, int(b) / 1e6))
    return out


def max_overlap(windows):
    """Per device, the most windows open at one instant (a window ending as another starts
    does not overlap it)."""
    events = {}
    for device, _, a, b in windows:
        events.setdefault(device, []).extend([(a, 1), (b, -1)])
    most = {}
    for device, ev in events.items():
        open_now = peak = 0
        for _, d in sorted(ev, key=lambda e: (e[0], e[1])):
            open_now += d
            peak = max(peak, open_now)
        most[device] = peak
    return most


def verdict_diffs(base, other):
    """Labels whose verdict in run `other` differs from run `base`'s."""
    got = {t["label"]: t["got"] for t in base["tasks"]}
    return sorted(t["label"] for t in other["tasks"] if got.get(t["label"], t["got"]) != t["got"])


def speedup_drift(base, run):
    """For each evaluation timed in both modes (by label), its speedup in `run` over its speedup
    in `base`: (median, p5, p95), or Nones when none was. The issue's bar: the median within 3 %
    of 1.00; the spread is the measurement's own noise as much as the mode's."""
    before = {t["label"]: t.get("speedup") for t in base["tasks"]}
    ratios = [t["speedup"] / before[t["label"]] for t in run["tasks"]
              if t.get("speedup") and before.get(t["label"])]
    return pct(ratios, 50), pct(ratios, 5), pct(ratios, 95)


# The per-stage medians the scale table is read with (stage_ms keys; see docs/BENCHMARKS.md).
STAGES = ("setup", "setup_judge_context", "setup_runner_context", "correctness", "performance",
          "timing_loop", "timing_verify", "verify_sets", "verify_share", "verify_run",
          "verify_compare", "parked", "timing_wait", "device_stage", "cpu_stage", "child_wall")


def stage_table(runs):
    """Median milliseconds per task of each of STAGES, one row per mode."""
    lines = [f"{'workers':>7} " + " ".join(f"{k:>13}" for k in STAGES)]
    for run in runs:
        cells = []
        for k in STAGES:
            v = pct([t["stage_ms"][k] for t in run["tasks"] if k in (t.get("stage_ms") or {})], 50)
            cells.append(f"{'n/a' if v is None else format(v, '.0f'):>13}")
        lines.append(f"{run['workers_n']:>7} " + " ".join(cells))
    return "\n".join(lines)


def summary(run, base):
    """One row of the table for `run` (a mode's record), compared with `base` (the smallest)."""
    answered = sum(t["got"] != "UNFINISHED" for t in run["tasks"])
    rate = answered / run["wall_s"] * 60 if run["wall_s"] > 0 else 0.0
    base_rate = base["evals_per_min"] if base is not run else rate
    n, n0 = run["workers_n"], base["workers_n"]
    waits = [t["stage_ms"]["compile_slot_wait"] / 1e3 for t in run["tasks"]
             if "compile_slot_wait" in (t.get("stage_ms") or {})]
    hits = sum(bool({"build_cache", "triton_cache"} & set(t.get("stage_ms") or {})) for t in run["tasks"])
    return {
        "workers": n, "evaluations": len(run["tasks"]), "answered": answered,
        "wall_s": run["wall_s"], "evals_per_min": rate,
        "ratio": rate / base_rate if base_rate else None,
        "target": 0.85 * n / n0,
        "busy": run["busy"], "host_cpu_busy": run.get("host_cpu_busy"), "slot_wait_p50_s": pct(waits, 50),
        "slot_wait_max_s": max(waits) if waits else None, "slot_waits": len(waits),
        "cache_hits": hits, "max_timings_at_once": max(run["overlap"].values(), default=0),
        "timings": run["timings"], "verdict_diffs": verdict_diffs(base, run),
        "speedup_drift": speedup_drift(base, run),
        # Same in every mode is not enough: a harness fault fails every mode alike.
        "unexpected": sorted(t["label"] for t in run["tasks"] if t.get("expect") not in (None, t["got"])),
    }


def table(rows):
    def f(x, fmt):
        return "n/a" if x is None else format(x, fmt)
    lines = [f"{'workers':>7} {'evals':>5} {'wall s':>7} {'evals/min':>9} {'ratio':>6} {'target':>6}  "
             f"{'busy per GPU':24} {'host CPU':>8} {'slot wait p50/max s (n)':>23} {'cache hits':>10} "
             f"{'timings':>7} {'max at once':>11} {'verdicts differ':>15} {'speedup vs base p50 (p5-p95)':>28}"]
    for r in rows:
        busy = " ".join(f"{k}:{'n/a' if v is None else f'{v:.0f}%'}" for k, v in r["busy"].items())
        mid, low, high = r["speedup_drift"]
        drift = "n/a" if mid is None else f"{mid:.3f} ({low:.2f}-{high:.2f})"
        lines.append(
            f"{r['workers']:>7} {r['answered']:>2}/{r['evaluations']:<2} {r['wall_s']:>7.1f} "
            f"{r['evals_per_min']:>9.1f} {f(r['ratio'], '.2f'):>6} {r['target']:>6.2f}  {busy:24} "
            f"{f(r['host_cpu_busy'], '.0f') + ('%' if r['host_cpu_busy'] is not None else ''):>8} "
            f"{f(r['slot_wait_p50_s'], '.2f') + '/' + f(r['slot_wait_max_s'], '.2f') + ' (' + str(r['slot_waits']) + ')':>23} "
            f"{r['cache_hits']:>10} {r['timings']:>7} {r['max_timings_at_once']:>11} {len(r['verdict_diffs']):>15} "
            f"{drift:>28}")
    return "\n".join(lines)


def verdict_ok(rows):
    """The run's pass/fail: every timing alone on its device and no verdict differs."""
    return all(r["max_timings_at_once"] <= 1 and not r["verdict_diffs"] and not r["unexpected"]
               and r["answered"] == r["evaluations"] for r in rows)


# ---------------------------------------------------------------------------------------------
# processes


class GpuSampler:
    """`nvidia-smi --query-gpu=index,utilization.gpu -lms 200`: every GPU's samples."""

    def __init__(self):
        self.samples = {}  # gpu index -> [util %]
        self.proc = None
        exe = shutil.which("nvidia-smi")
        if exe:
            self.proc = subprocess.Popen([exe, "--query-gpu=index,utilization.gpu",
                                          "--format=csv,noheader,nounits", "-lms", "200"],
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) == 2 and parts[1].replace(".", "").isdigit():
                self.samples.setdefault(parts[0], []).append(float(parts[1]))

    def stop(self):
        if self.proc:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        return {k: sum(v) / len(v) for k, v in self.samples.items() if v}


def gpu_count():
    exe = shutil.which("nvidia-smi")
    if not exe:
        return 0
    out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=60).stdout
    return sum(line.startswith("GPU ") for line in out.splitlines())


def wait_for(what, check, deadline_s=120):
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            if check():
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise SystemExit(f"scale: {what} not up after {deadline_s} s")


def run_mode(args, n, items):
    """Starts Redis, the API and `n` workers, runs the batch, stops them; the mode's record."""
    out = os.path.join(args.out, f"scale-{n}")
    os.makedirs(out, exist_ok=True)
    build_cache = os.path.join(out, "build-cache")
    shutil.rmtree(build_cache, ignore_errors=True)
    procs = []

    def start(argv, log, env=None):
        f = open(os.path.join(out, log), "w")
        procs.append(subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT,
                                      env=dict(os.environ, **(env or {})), start_new_session=True))

    try:
        start(args.redis + ["--port", str(args.redis_port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--maxmemory-policy", "noeviction"], "redis.log")
        env = {"REDIS_URL": f"redis://127.0.0.1:{args.redis_port}", "CRUCIBLE_BUILD_CACHE": build_cache}
        api = f"http://127.0.0.1:{args.api_port}"
        wait_for("redis", lambda: subprocess.run(args.redis_cli + ["-p", str(args.redis_port), "ping"],
                                                 capture_output=True, text=True).stdout.strip() == "PONG")
        start([os.path.join(args.bin, "crucible-api"), "--bind", f"127.0.0.1:{args.api_port}"], "api.log", env)
        wait_for("crucible-api", lambda: call(api, "GET", "/health", timeout=2)[0] == 200)
        for i in range(n):
            argv = [os.path.join(args.bin, "crucible-worker")] + args.worker_args.split()
            if "--cpu" not in argv:
                argv += ["--gpu", str(i)]
            start(argv, f"worker-{i}.log", dict(env, CRUCIBLE_WORKER_METRICS_ADDR=f"127.0.0.1:{args.metrics_port + i}",
                                                **args.worker_env))
        # Up: every worker registered and past its device check (a GPU's NVML + CUDA probe).
        wait_for(f"{n} workers", lambda: sum(w.get("state") in ("idle", "busy") for w in
                                             call(api, "GET", "/workers/status", timeout=2)[1]["workers"]) >= n,
                 deadline_s=300)
        print(f"scale: {n} worker(s) up, {len(items)} evaluations", flush=True)
        sampler = GpuSampler()
        cpu_before = cpu_times()
        bargs = types.SimpleNamespace(api=api, gpu="0", force_refresh=False, timing=None, timing_target=None,
                                      deadline_s=args.deadline_s)
        run = run_crucible(bargs, items)
        util = sampler.stop()
        host_busy = cpu_busy(cpu_before, cpu_times())
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    windows = []
    for i in range(n):
        with open(os.path.join(out, f"worker-{i}.log"), errors="replace") as f:
            windows += timing_windows(f.read(), stand_in=f"cpu{i}")
    # Busy per GPU: nvidia-smi's figure when there is one, else n/a for each worker's device.
    devices = sorted({w[0] for w in windows} | {str(i) for i in range(n)}) if not util else sorted(util)
    # The mode's build cache is its own (emptied at its start): gigabytes nobody reads again.
    shutil.rmtree(build_cache, ignore_errors=True)
    run.update({"mode": f"scale-{n}", "workers_n": n, "overlap": max_overlap(windows), "timings": len(windows),
                "host_cpu_busy": host_busy,
                "busy": {d: util.get(d) for d in devices} if util else {f"gpu{i}": None for i in range(n)},
                "windows": windows})
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default=os.path.join(REPO, "scripts/bench/workload.json"))
    ap.add_argument("--problems", default=None)
    ap.add_argument("--limit", type=int, default=None, help="only the first N evaluations of the workload")
    ap.add_argument("--perf-trials", type=int, default=None, help="override every num_perf_trials (dry runs)")
    ap.add_argument("--per-gpu", type=int, default=8, help="evaluations per worker of the largest mode")
    ap.add_argument("--gpus", default=os.environ.get("GPUS"), help="worker counts, e.g. 1,2 (default: 1,2,4,8 up to nvidia-smi -L)")
    ap.add_argument("--bin", default=os.environ.get("BIN", ".gpu-run/bin"))
    ap.add_argument("--worker-args", default=os.environ.get("WORKER_ARGS", ""), help="e.g. --cpu (stand-ins)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/crucible-bench"))
    ap.add_argument("--deadline-s", type=float, default=float(os.environ.get("DEADLINE_S", 520)),
                    help="per mode: stop waiting after this long")
    ap.add_argument("--redis-port", type=int, default=int(os.environ.get("REDIS_PORT", 6391)))
    ap.add_argument("--api-port", type=int, default=int(os.environ.get("API_PORT", 10908)))
    ap.add_argument("--metrics-port", type=int, default=int(os.environ.get("METRICS_PORT", 10930)))
    args = ap.parse_args()
    bundle_redis = os.path.join(REPO, ".gpu-run", "redis")
    if os.access(os.path.join(bundle_redis, "redis-server"), os.X_OK):
        lib = ["env", f"LD_LIBRARY_PATH={bundle_redis}"]
        args.redis, args.redis_cli = lib + [bundle_redis + "/redis-server"], lib + [bundle_redis + "/redis-cli"]
    else:
        args.redis, args.redis_cli = ["redis-server"], ["redis-cli"]
    args.worker_env = dict(kv.split("=", 1) for kv in os.environ.get("WORKER_ENV", "").split() if "=" in kv)
    modes = modes_for(gpu_count(), args.gpus)
    items = expand_workload(args.workload, args.problems)[: args.limit]
    if args.perf_trials:
        items = [dict(it, num_perf_trials=args.perf_trials) for it in items]
    items = scaled(items, modes[-1], args.per_gpu)
    print(f"scale: modes {modes}, {len(items)} evaluations each", flush=True)
    runs = [run_mode(args, n, items) for n in modes]
    rows = []
    for r in runs:
        rows.append(summary(r, runs[0]))
        runs[0].setdefault("evals_per_min", rows[0]["evals_per_min"])
    path = os.path.join(args.out, "scale.json")
    with open(path, "w") as f:
        json.dump({"rows": rows, "runs": runs}, f, indent=1)
    print("median stage_ms per task")
    print(stage_table(runs))
    print(table(rows))
    for r in rows:
        if r["unexpected"]:
            print(f"scale: {r['workers']} workers: {len(r['unexpected'])} verdict(s) not the workload's "
                  "expected one: " + ", ".join(r["unexpected"][:10]))
        if r["verdict_diffs"]:
            print(f"scale: {r['workers']} workers: verdicts differ from {rows[0]['workers']}'s: "
                  + ", ".join(r["verdict_diffs"][:10]))
    ok = verdict_ok(rows)
    print(f"scale: {'ok' if ok else 'FAILED'}: every timing alone on its device, every verdict the expected "
          "one, none differs "
          f"(target ratio >= 0.85 N is reported, not enforced); {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
