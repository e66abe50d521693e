"""The GPU benchmark's crucible mode (bench.py --mode crucible): the whole workload submitted to
a running Crucible API as POST /evaluate/batch, every task long-polled, each recorded with its
server timestamps and stage_ms (the definitions are bench.py's). Standard library only.
"""
import json
import re
import time
import urllib.error
import urllib.request

from gpu_sampler import GpuSampler
from host_usage import HostSampler
from report import judged_ms
from workload import verdict_of

TERMINAL = ("done", "failed", "cancelled")


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
    host = HostSampler().start()
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
    host = host.stop()
    counters = {}
    for k in ("cache_hits_total", "cache_misses_total", "coalesced_total", "ref_cache_hits_total",
              "ref_cache_misses_total", "done_total", "failed_total", "requeued_total"):
        if k in q1:
            counters[k] = q1[k] - q0.get(k, 0)
    _, workers = call(args.api, "GET", "/workers/status")
    return {"wall_s": wall, "submit_s": t_submitted - t0, "tasks": records, "gpu": gpu, "host": host,
            "queue_delta": counters,
            "complete": all(r["got"] != "UNFINISHED" for r in records),
            "workers": [{k: w.get(k) for k in ("worker_id", "device", "state", "tasks_done")}
                        for w in (workers or {}).get("workers", [])]}
