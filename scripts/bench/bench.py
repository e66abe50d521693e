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

Standard library only: the GPU machine has no network and nothing to pip-install from.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from report import judged_ms, report

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# The harness the naive loop runs: the bundle's snapshot (scripts/gpu-bundle.sh copies it next to
# the binaries that embed the same files) when there is one, else the working tree's.
HARNESS_DIR = os.environ.get("BENCH_HARNESS_DIR") or next(
    (d for d in (os.path.join(REPO, ".gpu-run", "harness"),
                 os.path.join(REPO, "gpu-worker", "harness"))
     if os.path.isfile(os.path.join(d, "harness.py"))),
    os.path.join(REPO, "gpu-worker", "harness"))
TERMINAL = ("done", "failed", "cancelled")

# ---------------------------------------------------------------------------------------------
# workload


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def expand_workload(path, problems_root=None, repo=REPO):
    """The workload as a list of evaluations (dicts), in submission order.

    An entry with `repeats: N` gives N samples of the same prompt (GRPO): sample k > 0 gets a
    trailing comment and, when `blocks` is given, its first `BLOCK = <n>` replaced by
    blocks[k % len(blocks)]; `duplicates: D` adds D byte-identical copies of sample 0."""
    w = json.loads(_read(path))
    root = problems_root or w.get("problems_root", ".")
    if not os.path.isabs(root):
        root = os.path.join(repo, root)
    items = []
    for ei, e in enumerate(w["entries"]):
        ref = _read(os.path.join(root, e["problem"]))
        base = _read(os.path.join(repo, e["candidate"]))
        n = int(e.get("repeats", 1))
        blocks = e.get("blocks")
        stem = lambda p: os.path.basename(p).removesuffix(".py")
        cand_rel = e["candidate"].split("/candidates/")[-1].removesuffix(".py")
        samples = []
        for k in range(n):
            code = base
            if k > 0:
                if blocks:
                    code = re.sub(r"BLOCK = \d+", f"BLOCK = {blocks[k % len(blocks)]}", code, count=1)
                code += f"\n# sample {k + 1} of {n}\n"
            samples.append((f"s{k + 1}" if n > 1 else "", code))
        for d in range(int(e.get("duplicates", 0))):
            samples.append((f"dup{d + 1}", samples[0][1]))
        for tag, code in samples:
            items.append({
                "entry": ei,
                "problem": e["problem"],
                "problem_path": os.path.join(root, e["problem"]),
                "candidate": e["candidate"],
                "label": f"{stem(e['problem'])[:30]}|{cand_rel[:34]}" + (f"#{tag}" if tag else ""),
                "backend": e.get("backend", "triton"),
                "expect": e.get("expect", "correct"),
                "timeout_s": int(e.get("timeout_s", 300)),
                "num_correct_trials": int(e.get("num_correct_trials", w.get("num_correct_trials", 5))),
                "num_perf_trials": int(e.get("num_perf_trials", w.get("num_perf_trials", 100))),
                "reference_code": ref,
                "kernel_code": code,
            })
    return items


def select_shard(items, shard):
    """`K/N`: the K-th of N contiguous slices (1-based)."""
    if not shard:
        return items
    k, n = (int(x) for x in shard.split("/"))
    if not 1 <= k <= n:
        raise SystemExit(f"--shard {shard}: want K/N with 1 <= K <= N")
    return [it for i, it in enumerate(items) if i * n // len(items) == k - 1]


def verdict_of(status, result):
    if status != "done":
        return status.upper()
    r = result or {}
    if r.get("correct"):
        return "correct"
    code = r.get("error_code")
    return "incorrect" if code == "CORRECTNESS" else (code or "?")


# ---------------------------------------------------------------------------------------------
# GPU utilisation


class GpuSampler:
    """nvidia-smi utilization.gpu every 200 ms, each line stamped with time.time() on arrival."""

    def __init__(self, gpu):
        self.gpu = str(gpu)
        self.samples = []  # (t, util %, memory.used MiB)
        self.proc = None
        self.error = None

    def start(self):
        exe = shutil.which("nvidia-smi")
        if exe is None:
            self.error = "no nvidia-smi"
            return self
        try:
            self.proc = subprocess.Popen(
                [exe, "-i", self.gpu, "--query-gpu=utilization.gpu,memory.used",
                 "--format=csv,noheader,nounits", "-lms", "200"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError as e:
            self.error = str(e)
            return self
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.samples.append((time.time(), float(parts[0]), float(parts[1])))
            except (ValueError, IndexError):
                pass

    def stop(self, t0, t1):
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        window = [s for s in self.samples if t0 <= s[0] <= t1]
        if not window:
            return {"samples": 0, "error": self.error or "no samples"}
        utils = [u for _, u, _ in window]
        return {"samples": len(window), "util_sum": sum(utils),
                "busy_samples": sum(u > 0 for u in utils),
                "mem_max_mib": max(m for _, _, m in window),
                "mem_min_mib": min(m for _, _, m in window)}


# ---------------------------------------------------------------------------------------------
# crucible mode


def call(api, method, path, body=None, timeout=120):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(api + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


_TS = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?$")


def parse_ts(s):
    """RFC 3339 (any number of fraction digits) -> POSIX seconds, or None."""
    if not s:
        return None
    m = _TS.match(s)
    if not m:
        return None
    import calendar
    y, mo, d, h, mi, se, frac, tz = m.groups()
    t = calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(se), 0, 0, 0))
    t += float("0." + frac) if frac else 0.0
    if tz and tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        tz = tz[1:].replace(":", "")
        t -= sign * (int(tz[:2]) * 3600 + int(tz[2:]) * 60)
    return t


def request_body(it, force_refresh, timing=None, timing_target=None):
    body = {
        "reference_code": it["reference_code"],
        "kernel_code": it["kernel_code"],
        "backend": it["backend"],
        "num_correct_trials": it["num_correct_trials"],
        "num_perf_trials": it["num_perf_trials"],
        "timeout_s": it["timeout_s"],
        "force_refresh": force_refresh,
    }
    if timing:
        body["timing"] = {"mode": timing}
        if timing_target is not None:
            body["timing"]["target_rel_error"] = timing_target
    return body


def queue_counters(api):
    status, q = call(api, "GET", "/queue/status")
    return q if status == 200 else {}


def run_crucible(args, items):
    q0 = queue_counters(args.api)
    sampler = GpuSampler(args.gpu).start()
    t0 = time.time()
    task_ids = []
    for i in range(0, len(items), 500):
        chunk = items[i:i + 500]
        status, ans = call(args.api, "POST", "/evaluate/batch",
                           {"tasks": [request_body(it, args.force_refresh, args.timing, args.timing_target)
                                     for it in chunk]})
        if status != 202:
            raise SystemExit(f"POST /evaluate/batch answered {status}: {ans}")
        task_ids += ans["task_ids"]
    t_submitted = time.time()
    tasks = {}
    for tid in dict.fromkeys(task_ids):
        while True:
            left = args.deadline_s - (time.time() - t0)
            status, task = call(args.api, "GET", f"/tasks/{tid}?wait={max(1, min(30, int(left)))}", timeout=90)
            if status == 200 and task["status"] in TERMINAL:
                break
            if left <= 0:
                break
        tasks[tid] = task
        r = task.get("result") or {}
        print(f"  {task['task_id']:28} {task['status']:9} "
              f"{verdict_of(task['status'], r) if task['status'] in TERMINAL else '-':12} "
              f"child {((r.get('stage_ms') or {}).get('child_wall') or 0) / 1e3:6.1f} s"
              f"{'  cached' if task.get('cached') else ''}", flush=True)
    t_seen = time.time()
    q1 = queue_counters(args.api)
    first_of = {}
    records = []
    finished = []
    for it, tid in zip(items, task_ids):
        task = tasks[tid]
        r = task.get("result") or {}
        stage = r.get("stage_ms") or {}
        sub, st, fin = (parse_ts(task.get(k)) for k in ("submitted_at", "started_at", "finished_at"))
        joined = tid in first_of  # a second request that got an earlier request's task
        first_of.setdefault(tid, it["label"])
        cached = bool(task.get("cached"))
        evaluated = not cached and not joined and st is not None and fin is not None and bool(stage)
        # With the CPU stage and claiming ahead, claim-to-ack includes the wait for the device;
        # the device stage (taking the device to the verdict) is what the task cost the GPU.
        cpu_decided = evaluated and "cpu_stage" in stage and "device_stage" not in stage
        if not evaluated or cpu_decided:
            service_ms = None
        elif "device_stage" in stage:
            service_ms = float(stage["device_stage"])
        else:
            service_ms = (fin - st) * 1e3
        if fin is not None and task["status"] in TERMINAL:
            finished.append(fin)
        records.append({
            "label": it["label"], "problem": it["problem"], "backend": it["backend"],
            "expect": it["expect"],
            "got": verdict_of(task["status"], r) if task["status"] in TERMINAL else "UNFINISHED",
            "task_id": tid, "attempts": task.get("attempts"),
            "cached": cached, "coalesced": joined, "evaluated": evaluated,
            "ref_runtime_cached": bool(r.get("ref_runtime_cached")),
            "latency_ms": (fin - sub) * 1e3 if fin is not None and sub is not None else None,
            "queue_wait_ms": (st - sub) * 1e3 if st is not None and sub is not None else None,
            "service_ms": service_ms,
            "overhead_ms": service_ms - judged_ms(stage) if service_ms is not None else None,
            "claim_to_ack_ms": (fin - st) * 1e3 if evaluated else None,
            "cpu_decided": cpu_decided,
            "build": r.get("build"),
            "child_wall_ms": stage.get("child_wall"),
            "stage_ms": stage,
            "ref_ms": (r.get("ref_runtime_ms") or {}).get("median"),
            "ker_ms": (r.get("runtime_ms") or {}).get("median"),
            "speedup": r.get("speedup"),
            "error": (r.get("error_message") or task.get("error") or "")[:300] or None,
        })
    # The batch is done when its last verdict was written (Redis's clock; same host as ours).
    t_end = max(finished) if len(finished) == len(records) and finished else t_seen
    wall = max(t_end, t_submitted) - t0
    gpu = sampler.stop(t0, t0 + wall)
    counters = {}
    for k in ("cache_hits_total", "cache_misses_total", "coalesced_total", "ref_cache_hits_total",
              "ref_cache_misses_total", "done_total", "failed_total", "requeued_total"):
        if k in q1:
            counters[k] = q1[k] - q0.get(k, 0)
    _, workers = call(args.api, "GET", "/workers/status")
    return {"wall_s": wall, "submit_s": t_submitted - t0, "tasks": records, "gpu": gpu,
            "queue_delta": counters,
            "complete": all(r["got"] != "UNFINISHED" for r in records),
            "workers": [{k: w.get(k) for k in ("worker_id", "device", "state", "tasks_done")}
                        for w in (workers or {}).get("workers", [])]}


# ---------------------------------------------------------------------------------------------
# naive mode


def child_env(taskdir, python, device, gpu):
    """The environment the worker gives a task child (gpu-worker/src/task/evaluation.rs)."""
    bindir = os.path.dirname(python) if os.path.isabs(python) else ""
    env = {
        "PATH": (bindir + ":" if bindir else "") + "/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": taskdir, "TMPDIR": os.path.join(taskdir, "tmp"),
        "XDG_CACHE_HOME": os.path.join(taskdir, "cache"),
        "TRITON_CACHE_DIR": os.path.join(taskdir, "cache", "triton"),
        "TORCH_EXTENSIONS_DIR": os.path.join(taskdir, "cache", "torch_extensions"),
        "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
        "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
    }
    if device == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["TRITON_INTERPRET"] = "1"
    for k in ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH"):
        if k in os.environ:
            env[k] = os.environ[k]
    return env


def run_harness_once(it, python, device, gpu, work_root):
    """One fresh interpreter running the harness on a private task dir, as
    tests/harness/run_harness.py and the worker's direct-spawn path do."""
    taskdir = tempfile.mkdtemp(prefix="bench-task-", dir=work_root)
    os.chmod(taskdir, 0o700)
    # harness.py and the modules it loads from its own directory, as the worker writes them.
    for name in sorted(os.listdir(HARNESS_DIR)):
        if name.endswith(".py") and name != "template.py":
            shutil.copyfile(os.path.join(HARNESS_DIR, name), os.path.join(taskdir, name))
    for name, text in (("reference.py", it["reference_code"]), ("candidate.py", it["kernel_code"])):
        with open(os.path.join(taskdir, name), "w", encoding="utf-8") as f:
            f.write(text)
    spec = {"backend": it["backend"], "device": device,
            "num_correct_trials": it["num_correct_trials"], "num_perf_trials": it["num_perf_trials"],
            "num_warmup": 3, "measure_performance": True, "atol": 0.01, "rtol": 0.01, "seed": 42,
            "max_speedup": 10.0,
            "timing": {"mode": "fixed", "target_rel_error": 0.001, "max_time_ms": 2000,
                       "min_trials": 3},
            "precision": "fp32", "timing_method": "cuda_event", "reference_backend": "eager"}
    with open(os.path.join(taskdir, "spec.json"), "w") as f:
        json.dump(spec, f)
    os.mkdir(os.path.join(taskdir, "tmp"))
    os.mkdir(os.path.join(taskdir, "cache"))
    out = open(os.path.join(taskdir, "output.txt"), "wb")
    r, w = os.pipe()

    def child_setup():
        os.dup2(w, 3)  # the protocol pipe as fd 3 (dup2 clears close-on-exec)

    t_start = time.time()
    proc = subprocess.Popen([python, "-I", "-B", os.path.join(taskdir, "harness.py"), taskdir],
                            cwd=taskdir, env=child_env(taskdir, python, device, gpu),
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            # Our descriptors are non-inheritable (PEP 446); dup2 makes fd 3 the
                            # one exception. close_fds=True would close it after preexec_fn.
                            close_fds=False, preexec_fn=child_setup,
                            start_new_session=True)
    os.close(w)
    proto = bytearray()

    def reader():
        with os.fdopen(r, "rb", buffering=0) as f:
            while True:
                chunk = f.read(65536)
                if not chunk:
                    break
                proto.extend(chunk)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    timed_out = False
    try:
        proc.wait(timeout=it["timeout_s"])
    except subprocess.TimeoutExpired:
        timed_out = True
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the child's group, leftovers included
    except ProcessLookupError:
        pass
    proc.wait()
    t_end = time.time()
    th.join(timeout=5)
    out.close()
    result = None
    for line in bytes(proto).split(b"\n"):
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if isinstance(msg, dict) and msg.get("event") == "result":
            result = msg
    tail = ""
    if result is None:
        with open(os.path.join(taskdir, "output.txt"), "rb") as f:
            tail = f.read()[-600:].decode("utf-8", "replace")
    shutil.rmtree(taskdir, ignore_errors=True)
    if timed_out:
        got = "TIMEOUT"
    elif result is None:
        got = "CRASH" if proc.returncode and proc.returncode < 0 else "RUNTIME"
    else:
        got = verdict_of("done", result)
    return t_start, t_end, got, result, tail


def run_naive(args, items):
    sampler = GpuSampler(args.gpu).start()
    work_root = tempfile.mkdtemp(prefix="crucible-bench-naive-")
    t0 = time.time()
    records = []
    for it in items:
        # Do not start what cannot end before the deadline (a cold load_inline build is ~55 s).
        if time.time() - t0 + (60 if it["backend"] == "cuda" else 10) > args.deadline_s:
            records.append({"label": it["label"], "problem": it["problem"], "backend": it["backend"],
                            "expect": it["expect"], "got": "UNFINISHED", "evaluated": False})
            continue
        t_start, t_end, got, result, tail = run_harness_once(it, args.python, args.device, args.gpu, work_root)
        r = result or {}
        stage = dict(r.get("stage_ms") or {})
        service_ms = (t_end - t_start) * 1e3
        stage["child_wall"] = service_ms
        records.append({
            "label": it["label"], "problem": it["problem"], "backend": it["backend"],
            "expect": it["expect"], "got": got, "attempts": 1,
            "cached": False, "coalesced": False, "evaluated": True, "ref_runtime_cached": False,
            "latency_ms": (t_end - t0) * 1e3, "queue_wait_ms": (t_start - t0) * 1e3,
            "service_ms": service_ms, "overhead_ms": service_ms - judged_ms(stage),
            "child_wall_ms": service_ms, "stage_ms": stage,
            "ref_ms": (r.get("ref_runtime_ms") or {}).get("median"),
            "ker_ms": (r.get("runtime_ms") or {}).get("median"),
            "speedup": r.get("speedup"),
            "error": ((r.get("error_message") or "") or tail)[:300] or None,
        })
        print(f"  {it['label']:68} {got:12} {service_ms / 1e3:6.1f} s", flush=True)
    wall = time.time() - t0
    shutil.rmtree(work_root, ignore_errors=True)
    return {"wall_s": wall, "tasks": records, "gpu": sampler.stop(t0, t0 + wall), "queue_delta": {},
            "complete": all(r["got"] != "UNFINISHED" for r in records)}


# ---------------------------------------------------------------------------------------------


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
