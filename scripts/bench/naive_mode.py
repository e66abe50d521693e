"""The GPU benchmark's naive mode (bench.py --mode naive): what a KernelBench loop does, one fresh
`python -I -B harness.py <taskdir>` per evaluation, sequentially, with a private task dir
(reference.py, candidate.py, spec.json) and fd 3 as the result pipe. Standard library only.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from gpu_sampler import GpuSampler
from report import judged_ms
from workload import REPO, verdict_of

# The harness the naive loop runs: the bundle's snapshot (scripts/gpu-bundle.sh copies it next to
# the binaries that embed the same files) when there is one, else the working tree's.
HARNESS_DIR = os.environ.get("BENCH_HARNESS_DIR") or next(
    (d for d in (os.path.join(REPO, ".gpu-run", "harness"),
                 os.path.join(REPO, "gpu-worker", "harness"))
     if os.path.isfile(os.path.join(d, "harness.py"))),
    os.path.join(REPO, "gpu-worker", "harness"))


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
