"""The GPU benchmark's report: bench.py --report reads its results file and prints one table with
the runs (labels) as columns, then the per-stage device-time totals, the timing-quality
comparisons between rows and the targets. Standard library only; pure functions apart from
report() itself, tested by test_bench.py.

Rows are the runs' labels (bench.py --label): `on`/`off`/`naive` for the big workload,
`naive`, `slots=K`, `precompile-off`, `adaptive`, `checks-off` for the small batch
(scripts/bench-small.sh). Several runs of one label are shards (the latest of each shard wins).
Only runs of the workload given to --report are shown (the others are counted).

Comparisons (the small batch; see docs/BENCHMARKS.md, "Small-problem batch"): a row whose worker
ran with CRUCIBLE_DEVICE_SLOTS=K is compared with the row labelled `slots=K` (adaptive timing,
precompile off, checks off: one knob apart), and `slots=K` itself with `slots=1`. For each pair,
over the tasks expected correct that both rows judged correct with a speedup (matched by label):
the relative difference |a - b| / b of the speedups (and of the kernel times), median and p95,
and the throughput ratio (evaluations per minute, a / b).
"""
import json
import os

MODE_ORDER = ["on", "off", "naive", "slots=1", "slots=2", "slots=4", "slots=8"]
# Stage times (stage_ms keys) in the order a task goes through them; others follow, sorted.
STAGE_ORDER = ["cpu_stage", "build_cache", "wait_for_device", "device_stage", "worker_prepare",
               "sandbox_worker", "sandbox_child", "setup", "load_reference", "load_candidate",
               "triton_precompile", "instantiate", "correctness", "profile", "performance",
               "integrity", "child_wall"]
# Targets per workload (the file name); the big (KernelBench) workload's are the default.
# Issue 13's: the small batch >= 8x naive (12x adaptive), KernelBench >= 5x and the GPU busy
# >= 80 %, speedups with slots=K within 3 % (p50) of slots=1's; issue 4's warm overhead.
TARGETS = {
    "workload-small.json": {"vs_naive": 8.0, "vs_naive_adaptive": 12.0, "agree": 0.03},
}
DEFAULT_TARGETS = {"vs_naive": 5.0, "overhead_ms": 100.0, "gpu_busy": 0.8, "agree": 0.03}


def judged_ms(stage_ms):
    s = stage_ms or {}
    return float(s.get("correctness", 0.0)) + float(s.get("performance", 0.0))


def pct(values, p):
    v = sorted(x for x in values if x is not None)
    if not v:
        return None
    if len(v) == 1:
        return v[0]
    k = (len(v) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def stage_totals(tasks):
    """Sum of each stage_ms key over the tasks that ran (not answered from the result cache or
    coalesced), in ms, ordered by STAGE_ORDER."""
    tot = {}
    for t in tasks:
        if t.get("cached") or t.get("coalesced"):
            continue
        for k, v in (t.get("stage_ms") or {}).items():
            if isinstance(v, (int, float)):
                tot[k] = tot.get(k, 0.0) + float(v)
    order = [k for k in STAGE_ORDER if k in tot] + sorted(k for k in tot if k not in STAGE_ORDER)
    return {k: tot[k] for k in order}


def rel_diffs(tasks_a, tasks_b, key="speedup"):
    """|a - b| / b per task label, over the tasks expected correct that both judged correct with
    a positive `key` in both."""
    def honest(tasks):
        return {t["label"]: t[key] for t in tasks
                if t.get("expect") == "correct" and t.get("got") == "correct"
                and isinstance(t.get(key), (int, float)) and t[key] > 0}
    a, b = honest(tasks_a), honest(tasks_b)
    return [abs(a[k] - b[k]) / b[k] for k in a if k in b]


def worker_slots(run):
    """K of CRUCIBLE_DEVICE_SLOTS=K in the run's worker environment, else None."""
    for kv in (run.get("worker_env") or "").split():
        k, _, v = kv.partition("=")
        if k == "CRUCIBLE_DEVICE_SLOTS" and v.isdigit():
            return int(v)
    return None


def base_label(label, run, labels):
    """The row a row is compared with (None: none): slots=K against slots=1, a row one knob
    apart from slots=K (same CRUCIBLE_DEVICE_SLOTS) against slots=K."""
    k = worker_slots(run)
    if k is None:
        return None
    base = "slots=1" if label == f"slots={k}" else f"slots={k}"
    return base if base != label and base in labels else None


def latest_by_label(runs, workload=None):
    """{label: [runs, one per shard, latest wins]} in MODE_ORDER then first appearance, and the
    number of runs of other workloads left out."""
    by, skipped = {}, 0
    for r in runs:
        if workload and r.get("workload") and os.path.basename(r["workload"]) != os.path.basename(workload):
            skipped += 1
            continue
        by.setdefault(r["mode"], {})[r.get("shard") or "1/1"] = r
    order = [m for m in MODE_ORDER if m in by] + [m for m in by if m not in MODE_ORDER]
    return {m: [by[m][k] for k in sorted(by[m])] for m in order}, skipped


def combine(runs):
    """Runs of one label (shards, in order) -> one summary."""
    tasks = [t for r in runs for t in r["tasks"]]
    wall = sum(r["wall_s"] for r in runs)
    gpu_n = sum(r["gpu"].get("samples", 0) for r in runs)
    gpu = None
    if gpu_n:
        mems = [r["gpu"]["mem_max_mib"] for r in runs if r["gpu"].get("mem_max_mib") is not None]
        idle = [r["gpu"]["mem_min_mib"] for r in runs if r["gpu"].get("mem_min_mib") is not None]
        gpu = {"busy": sum(r["gpu"].get("util_sum", 0) for r in runs) / gpu_n / 100.0,
               "any": sum(r["gpu"].get("busy_samples", 0) for r in runs) / gpu_n,
               "samples": gpu_n, "mem_max": max(mems) if mems else None,
               "mem_min": min(idle) if idle else None}
    # "host_cpu": the name of the runs of 2026-12-03 (CPU figures only).
    host = [r.get("host") or r["host_cpu"] for r in runs if r.get("host") or r.get("host_cpu")]
    host_n = sum(h["samples"] for h in host)
    peaks = [h["memory_peak_bytes"] for h in host if h.get("memory_peak_bytes") is not None]
    host_use = None if not host_n else {
        "mean": sum(h["mean"] * h["samples"] for h in host) / host_n,
        "saturated": sum(h["saturated"] * h["samples"] for h in host) / host_n,
        "memory_peak": max(peaks) if peaks else None}
    q = {}
    for r in runs:
        for k, v in r.get("queue_delta", {}).items():
            q[k] = q.get(k, 0) + v
    ev = [t for t in tasks if t.get("evaluated") and t.get("service_ms") is not None]
    warm = [t for t in ev if t.get("ref_runtime_cached")]
    answered = [t for t in tasks if t["got"] != "UNFINISHED"]
    return {
        "runs": len(runs), "device": runs[0].get("device"), "tasks": tasks, "n": len(tasks),
        "answered": len(answered), "evaluated": len(ev), "wall_s": wall,
        "timing": runs[0].get("timing"), "worker_env": runs[0].get("worker_env"),
        "per_min": len(answered) / wall * 60 if wall > 0 else None,
        "lat50": pct([t.get("latency_ms") for t in answered], 50),
        "lat95": pct([t.get("latency_ms") for t in answered], 95),
        "svc50": pct([t["service_ms"] for t in ev], 50),
        "svc_sum": sum(t["service_ms"] for t in ev if t["service_ms"] is not None),
        "ovh50": pct([t["overhead_ms"] for t in ev], 50),
        "ovh95": pct([t["overhead_ms"] for t in ev], 95),
        "ovh50_warm": pct([t["overhead_ms"] for t in warm], 50), "n_warm": len(warm),
        "judged50": pct([judged_ms(t.get("stage_ms")) for t in ev], 50),
        "gpu": gpu, "host": host_use, "q": q, "stages": stage_totals(tasks),
        "cpu_decided": sum(bool(t.get("cpu_decided")) for t in tasks),
        "built_pool": sum(t.get("build") == "compile_pool" for t in tasks),
        "built_cache": sum(t.get("build") == "cache" for t in tasks),
        "cpu50": pct([(t.get("stage_ms") or {}).get("cpu_stage") for t in tasks
                      if (t.get("stage_ms") or {}).get("cpu_stage") is not None], 50),
        "cached": sum(t.get("cached", False) for t in tasks),
        "coalesced": sum(t.get("coalesced", False) for t in tasks),
        "expected": sum(t["got"] == t["expect"] for t in tasks),
        "complete": all(r.get("complete") for r in runs),
    }


def comparisons(by_label, s):
    """One dict per row that has a base row (base_label): speedup and kernel-time relative
    differences against it (median, p95, n) and the throughput ratio."""
    out = []
    for m, runs in by_label.items():
        base = base_label(m, runs[0], by_label)
        if base is None:
            continue
        sp = rel_diffs(s[m]["tasks"], s[base]["tasks"], "speedup")
        kt = rel_diffs(s[m]["tasks"], s[base]["tasks"], "ker_ms")
        a, b = s[m]["per_min"], s[base]["per_min"]
        out.append({"row": m, "base": base, "n": len(sp), "sp50": pct(sp, 50), "sp95": pct(sp, 95),
                    "kt50": pct(kt, 50), "kt95": pct(kt, 95),
                    "throughput": a / b if a and b else None,
                    "kind": "slots" if m.startswith("slots=") else m})
    return out


def _fmt():
    f0 = lambda v, p=0, suf="": "-" if v is None else f"{v:,.{p}f}{suf}"
    ms = lambda v: "-" if v is None else (f"{v:,.0f} ms" if abs(v) < 10000 else f"{v / 1e3:,.1f} s")
    pc = lambda v: "-" if v is None else f"{v * 100:.1f} %"
    return f0, ms, pc


def report(results_path, show_tasks, workload=None):
    with open(results_path) as f:
        runs = json.load(f)["runs"]
    by_label, skipped = latest_by_label(runs, workload)
    if not by_label:
        print(f"no runs of {workload} in {results_path} ({skipped} of other workloads)")
        return 1
    modes = list(by_label)
    s = {m: combine(by_label[m]) for m in modes}
    naive_rate = s["naive"]["per_min"] if "naive" in s else None
    tg = TARGETS.get(os.path.basename(workload or ""), DEFAULT_TARGETS)
    small = "vs_naive_adaptive" in tg
    f0, ms, pc = _fmt()
    gpu_mem = lambda key: lambda x: ("n/a" if not x["gpu"] or x["gpu"][key] is None
                                     else f"{x['gpu'][key]:,.0f} MiB")
    vs_target = (f">= {tg['vs_naive']:.0f}x (>= {tg['vs_naive_adaptive']:.0f}x adaptive)" if small
                 else f">= {tg['vs_naive']:.0f}x")
    rows = [
        ("device", lambda x: (x["device"] or "?")[:22], ""),
        ("evaluations answered / in workload", lambda x: f"{x['answered']}/{x['n']}", ""),
        ("  evaluated / result cache / coalesced", lambda x: f"{x['evaluated']}/{x['cached']}/{x['coalesced']}", ""),
        ("  verdicts as expected", lambda x: f"{x['expected']}/{x['n']}", ""),
        ("total wall time", lambda x: f0(x["wall_s"], 1, " s") + ("" if x["runs"] == 1 else f" ({x['runs']} shards)"), ""),
        ("evaluations per minute", lambda x: f0(x["per_min"], 1), ""),
        ("  vs naive", lambda x: "-" if not naive_rate or x["per_min"] is None else f"{x['per_min'] / naive_rate:.2f}x",
         vs_target),
        ("end-to-end latency p50", lambda x: ms(x["lat50"]), ""),
        ("end-to-end latency p95", lambda x: ms(x["lat95"]), ""),
        ("  decided in the CPU stage (no GPU)", lambda x: f0(x["cpu_decided"]), ""),
        ("device time per task p50", lambda x: ms(x["svc50"]), ""),
        ("device time, all tasks", lambda x: ms(x["svc_sum"]), ""),
        ("correctness+performance p50", lambda x: ms(x["judged50"]), ""),
        ("overhead p50", lambda x: ms(x["ovh50"]), ""),
        ("overhead p95", lambda x: ms(x["ovh95"]), ""),
        ("overhead p50, warm (ref cached)", lambda x: ms(x["ovh50_warm"]) + (f" (n={x['n_warm']})" if x["n_warm"] else ""),
         "" if small else f"<= {tg['overhead_ms']:.0f} ms"),
        ("GPU busy (mean utilization.gpu)", lambda x: "n/a" if not x["gpu"] else f"{x['gpu']['busy'] * 100:.0f} %",
         "" if small else f">= {tg['gpu_busy'] * 100:.0f} %"),
        ("  samples with a kernel running", lambda x: "n/a" if not x["gpu"] else f"{x['gpu']['any'] * 100:.0f} %", ""),
        ("GPU memory.used high-water", gpu_mem("mem_max"), ""),
        ("  memory.used lowest in the run", gpu_mem("mem_min"), ""),
        ("host CPU busy (mean / samples >= 90 %)", lambda x: "n/a" if not x["host"] else
         f"{x['host']['mean']:.0f} % / {x['host']['saturated'] * 100:.0f} %", ""),
        ("host memory in use, peak", lambda x: "n/a" if not x["host"] or x["host"]["memory_peak"] is None
         else f"{x['host']['memory_peak'] / 2**30:.1f} GiB", ""),
        ("CPU stage p50 (overlapped)", lambda x: ms(x["cpu50"]), ""),
        ("CUDA builds: compile pool / build cache", lambda x: f"{x['built_pool']}/{x['built_cache']}", ""),
        ("result cache hits (queue status)", lambda x: f0(x["q"].get("cache_hits_total")), ""),
        ("coalesced (queue status)", lambda x: f0(x["q"].get("coalesced_total")), ""),
        ("reference cache hits (queue status)", lambda x: f0(x["q"].get("ref_cache_hits_total")) if "ref_cache_hits_total" in x["q"] else "n/a", ""),
        ("requeued / failed", lambda x: f"{x['q'].get('requeued_total', 0)}/{x['q'].get('failed_total', 0)}" if x["q"] else "-", "0/0"),
    ]
    w0 = max(len(r[0]) for r in rows) + 2
    wc = max(16, max(len(m) for m in modes) + 2) if small else 24
    header = f"{'':{w0}}" + "".join(f"{m:>{wc}}" for m in modes) + "  target"
    print(header)
    print("-" * len(header))
    for name, fn, target in rows:
        print((f"{name:{w0}}" + "".join(f"{fn(s[m]):>{wc}}" for m in modes) + f"  {target}").rstrip())
    print("-" * len(header))
    # Device time by stage: the sum of each stage_ms over the batch.
    stages = []
    for m in modes:
        stages += [k for k in s[m]["stages"] if k not in stages]
    order = [k for k in STAGE_ORDER if k in stages] + [k for k in stages if k not in STAGE_ORDER]
    print(f"{'stage totals over the batch (sum of stage_ms)':{w0}}")
    for k in order:
        print(f"{'  ' + k:{w0}}" + "".join(f"{ms(s[m]['stages'].get(k)):>{wc}}" for m in modes))
    print("-" * len(header))
    comps = comparisons(by_label, s)
    if comps:
        print("timing quality: honest tasks (expect correct, judged correct in both rows), matched by label;")
        print("relative difference |row - base| / base of the speedup and of the kernel time")
        print(f"  {'row':16} {'vs':10} {'n':>3} {'speedup p50':>12} {'p95':>8} {'kernel p50':>11} {'p95':>8} "
              f"{'throughput':>11}  target")
        for c in comps:
            target = (f"speedup p50 <= {tg['agree'] * 100:.0f} %" if c["kind"] == "slots" else
                      "integrity checks cost ratio - 1" if c["row"] == "checks-off" else "")
            print(f"  {c['row']:16} {c['base']:10} {c['n']:>3} {pc(c['sp50']):>12} {pc(c['sp95']):>8} "
                  f"{pc(c['kt50']):>11} {pc(c['kt95']):>8} "
                  f"{'-' if c['throughput'] is None else format(c['throughput'], '.2f') + 'x':>11}  {target}".rstrip())
        print("-" * len(header))
    checks = (targets_line if small else kernelbench_targets)(s, naive_rate, comps, tg)
    if checks:
        print("targets: " + "; ".join(checks))
    for m in modes:
        if not s[m]["complete"]:
            print(f"WARNING: {m} did not finish every evaluation (deadline)")
        bad = [t for t in s[m]["tasks"] if t["got"] != t["expect"]]
        for t in bad[:8]:
            print(f"  {m}: {t['label']}: expected {t['expect']}, got {t['got']}: {(t.get('error') or '')[:160]!r}")
    if skipped:
        print(f"({skipped} runs of other workloads in {results_path} not shown)")
    if show_tasks:
        print_tasks(modes, s)
    return 0


def met(ok):
    """A target's word in the report."""
    return "met" if ok else "NOT met"


def agreement_lines(comps, tg):
    """Each slots=K row's speedups against slots=1's, against the agreement target."""
    return [f"{c['row']} vs {c['base']} speedups agree within {c['sp50'] * 100:.1f} % p50 / "
            f"{c['sp95'] * 100:.1f} % p95 ({met(c['sp50'] <= tg['agree'])}, p50 <= {tg['agree'] * 100:.0f} %)"
            for c in comps if c["kind"] == "slots" and c["sp50"] is not None]


def targets_line(s, naive_rate, comps, tg):
    """The small batch's targets, each met or not."""
    out = []
    if naive_rate:
        fixed = [(s[m]["per_min"] / naive_rate, m) for m in s
                 if m.startswith("slots=") and s[m]["timing"] != "adaptive" and s[m]["per_min"]]
        if fixed:
            r, m = max(fixed)
            out.append(f"best slots row {m} {r:.2f}x naive ({met(r >= tg['vs_naive'])}, >= {tg['vs_naive']:.0f}x)")
        ad = [(s[m]["per_min"] / naive_rate, m) for m in s if s[m]["timing"] == "adaptive" and s[m]["per_min"]]
        if ad:
            r, m = max(ad)
            out.append(f"{m} {r:.2f}x naive ({met(r >= tg['vs_naive_adaptive'])}, >= {tg['vs_naive_adaptive']:.0f}x)")
    return out + agreement_lines(comps, tg)


def kernelbench_targets(s, naive_rate, comps, tg):
    """The big workload's targets, for its fastest Crucible row (`on` or a slots row)."""
    rows = [m for m in s if (m == "on" or m.startswith("slots=")) and s[m]["per_min"]]
    if not rows:
        return agreement_lines(comps, tg)
    best = max(rows, key=lambda m: s[m]["per_min"])
    row = s[best]
    checks = []
    if naive_rate:
        ratio = row["per_min"] / naive_rate
        checks.append(f"throughput {ratio:.2f}x naive ({met(ratio >= tg['vs_naive'])}, >= {tg['vs_naive']:.0f}x)")
    ov = row["ovh50_warm"] if row["ovh50_warm"] is not None else row["ovh50"]
    if ov is not None:
        checks.append(f"overhead p50 {ov:.0f} ms{' (warm)' if row['ovh50_warm'] is not None else ' (no warm task: all)'} "
                      f"({met(ov <= tg['overhead_ms'])}, <= {tg['overhead_ms']:.0f} ms)")
    if row["gpu"]:
        busy = row["gpu"]["busy"]
        checks.append(f"GPU busy {busy * 100:.0f} % ({met(busy >= tg['gpu_busy'])}, >= {tg['gpu_busy'] * 100:.0f} %)")
    else:
        checks.append("GPU busy n/a (no nvidia-smi samples)")
    return [f"({best}) " + "; ".join(checks)] + agreement_lines(comps, tg)


def print_tasks(modes, s):
    f0, _, _ = _fmt()
    print()
    print(f"{'row':14} {'task':60} {'got':12} {'lat ms':>9} {'svc ms':>9} {'judged':>8} {'ovh ms':>8} "
          f"{'ref ms':>8} {'ker ms':>8} {'speedup':>8} flags")
    for m in modes:
        for t in s[m]["tasks"]:
            flags = ",".join(k for k in ("cached", "coalesced", "ref_runtime_cached") if t.get(k))
            print(f"{m[:14]:14} {t['label'][:60]:60} {t['got'][:12]:12} {f0(t.get('latency_ms')):>9} "
                  f"{f0(t.get('service_ms')):>9} "
                  f"{f0(judged_ms(t.get('stage_ms')) if t.get('evaluated') else None):>8} {f0(t.get('overhead_ms')):>8} "
                  f"{f0(t.get('ref_ms'), 3):>8} {f0(t.get('ker_ms'), 3):>8} {f0(t.get('speedup'), 3):>8} {flags}")
