#!/usr/bin/env python3
"""Run the Crucible harness on one problem + candidate, the way the worker does.

    python tests/harness/run_harness.py tests/problems/elementwise_relu.py \
        tests/candidates/elementwise_relu__correct.py [--backend triton] [--device cpu] \
        [--timeout 60] [--perf-trials 10] [--no-perf] [--spec '{"atol": 1e-4}'] \
        [--rlimit AS=8589934592]

Builds a private task dir (harness.py, reference.py, candidate.py, spec.json), starts
`python -I -B harness.py <taskdir>` in its own session with a cleared environment
(TRITON_INTERPRET=1 on CPU), fd 3 as a pipe, stdout/stderr captured and capped, and a
wall-clock timeout after which the whole process group is killed. Prints one JSON object:
the harness result plus what a worker would observe (stages, exit status, signal, timeout,
output sizes and tails, and an approximate worker verdict for runs that ended without a
result). A developer tool, standard library only.
"""
import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")
DEFAULT_PYTHON = os.environ.get("CRUCIBLE_PYTHON", "/root/.cache/crucible/venv/bin/python")
OUTPUT_CAP = 1 << 20            # bytes kept (and allowed) per stream, stdout and stderr each
PROTOCOL_LINE_CAP = 1 << 20     # protocol lines longer than this are violations
TAIL_CHARS = 2000


class _Buf(bytearray):
    """Captured bytes (at most the cap) plus the total size the child wrote."""
    total = 0


def _reader(stream, sink, cap, on_overflow):
    """Drain a pipe into `sink`, keeping at most `cap` bytes; call on_overflow past the cap."""
    read = stream.read1 if hasattr(stream, "read1") else stream.read
    while True:
        chunk = read(65536)
        if not chunk:
            break
        sink.total += len(chunk)
        room = cap - len(sink)
        if room > 0:
            sink += chunk[:room]
        if sink.total > cap:
            on_overflow()


def run(problem, candidate, spec=None, timeout=120.0, python=DEFAULT_PYTHON,
        cpu_threads=None, keep_taskdir=False, output_cap=OUTPUT_CAP, rlimits=None):
    """Evaluate `candidate` against `problem`; returns a dict (see module docstring).

    `rlimits` maps resource names to soft=hard limits set in the child, e.g.
    {"AS": 8 << 30, "NPROC": 256}. (RLIMIT_NPROC does not bind root.)"""
    spec = dict({"backend": "triton", "device": "cpu", "num_correct_trials": 5,
                 "num_perf_trials": 10, "num_warmup": 2, "measure_performance": True,
                 "atol": 0.01, "rtol": 0.01, "seed": 42, "max_speedup": 10.0,
                 "timing": {"mode": "fixed", "target_rel_error": 0.001, "max_time_ms": 2000,
                            "min_trials": 3},
                 "precision": "fp32", "timing_method": "cuda_event", "reference_backend": "eager"},
                **(spec or {}))
    taskdir = tempfile.mkdtemp(prefix="crucible-task-")
    os.chmod(taskdir, 0o700)
    # What the worker writes into a task directory: harness.py and the modules it loads from
    # its own directory (every .py there but the template's).
    harness_dir = os.path.dirname(HARNESS)
    for module in sorted(os.listdir(harness_dir)):
        if module.endswith(".py") and module != "template.py":
            shutil.copyfile(os.path.join(harness_dir, module), os.path.join(taskdir, module))
    shutil.copyfile(problem, os.path.join(taskdir, "reference.py"))
    shutil.copyfile(candidate, os.path.join(taskdir, "candidate.py"))
    with open(os.path.join(taskdir, "spec.json"), "w") as f:
        json.dump(spec, f)

    # The interpreter's bin dir first: load_inline needs the venv's ninja.
    path = os.pathsep.join([os.path.dirname(python), "/usr/local/bin", "/usr/bin", "/bin"])
    env = {"PATH": path, "HOME": taskdir, "LANG": "C.UTF-8",
           "TMPDIR": taskdir,
           # Where the worker puts it (stage.rs): the CPU stage's dry run reports files there.
           "TRITON_CACHE_DIR": os.path.join(taskdir, "cache", "triton")}
    if spec["device"] == "cpu":
        env["TRITON_INTERPRET"] = "1"
        if cpu_threads:
            env["CRUCIBLE_CPU_THREADS"] = str(cpu_threads)

    r, w = os.pipe()          # both non-inheritable (PEP 446)

    def child_setup():
        # fd 3 = the protocol pipe's write end; dup2 clears close-on-exec on the copy.
        if w == 3:
            os.set_inheritable(3, True)
        else:
            os.dup2(w, 3)
        for name, value in (rlimits or {}).items():
            resource.setrlimit(getattr(resource, "RLIMIT_" + name), (value, value))

    t0 = time.monotonic()
    proc = subprocess.Popen(
        [python, "-I", "-B", os.path.join(taskdir, "harness.py"), taskdir],
        cwd=taskdir, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, close_fds=False, preexec_fn=child_setup,
        start_new_session=True)
    os.close(w)
    pgid = proc.pid           # start_new_session: the child leads its own process group
    flags = {"output_limit": False}

    def kill_group():
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def overflow():
        if not flags["output_limit"]:
            flags["output_limit"] = True
            kill_group()

    out, err, proto = _Buf(), _Buf(), _Buf()
    threads = [
        threading.Thread(target=_reader, args=(proc.stdout, out, output_cap, overflow)),
        threading.Thread(target=_reader, args=(proc.stderr, err, output_cap, overflow)),
        threading.Thread(target=_reader, args=(os.fdopen(r, "rb", buffering=0), proto,
                                               4 * PROTOCOL_LINE_CAP, lambda: None)),
    ]
    for t in threads:
        t.daemon = True
        t.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group()
        proc.wait()
    wall_s = time.monotonic() - t0
    kill_group()              # leftovers (forked children) may hold the pipes open
    for t in threads:
        t.join(timeout=5)
    if not keep_taskdir:
        shutil.rmtree(taskdir, ignore_errors=True)

    events, result, prepared, violations = [], None, None, []
    for raw in bytes(proto).split(b"\n"):
        if not raw:
            continue
        if len(raw) > PROTOCOL_LINE_CAP:
            violations.append("line over 1 MiB")
            continue
        try:
            msg = json.loads(raw)
        except ValueError:
            violations.append(f"not JSON: {raw[:80]!r}")
            continue
        if msg.get("event") == "stage":
            events.append(msg.get("stage"))
        elif msg.get("event") == "prepared" and result is None and prepared is None:
            prepared = msg        # the end of a prepare (CPU) stage, instead of a result
        elif msg.get("event") == "result":
            if result is not None or prepared is not None:
                violations.append("second result")
            else:
                result = msg
        else:
            violations.append(f"unknown event: {raw[:80]!r}")

    rc = proc.returncode
    sig = -rc if rc is not None and rc < 0 else None
    worker_verdict = None     # what a worker would decide from what it observed
    if flags["output_limit"]:
        worker_verdict = "OUTPUT_LIMIT"
    elif timed_out:
        worker_verdict = "TIMEOUT"
    elif result is None and sig is not None:
        worker_verdict = "CRASH"
    elif result is None and prepared is None and rc == 0:
        worker_verdict = "RUNTIME"   # exited without a result (os._exit in the candidate)
    elif result is not None:
        worker_verdict = result.get("error_code")
    return {
        "result": result, "prepared": prepared, "stages": events, "returncode": rc,
        "signal": signal.Signals(sig).name if sig else None, "timed_out": timed_out,
        "output_limit": flags["output_limit"], "protocol_violations": violations,
        "worker_verdict": worker_verdict, "wall_s": round(wall_s, 3),
        "stdout_bytes": out.total, "stderr_bytes": err.total,
        "stdout_tail": bytes(out[-TAIL_CHARS:]).decode("utf-8", "replace"),
        "stderr_tail": bytes(err[-TAIL_CHARS:]).decode("utf-8", "replace"),
        "taskdir": taskdir if keep_taskdir else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem")
    ap.add_argument("candidate")
    ap.add_argument("--backend", default="triton", choices=["triton", "cuda"])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--perf-trials", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--spec", default="{}", help="JSON object merged into spec.json")
    ap.add_argument("--python", default=DEFAULT_PYTHON)
    ap.add_argument("--cpu-threads", type=int, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the task dir")
    ap.add_argument("--rlimit", action="append", default=[], metavar="NAME=VALUE",
                    help="child rlimit, e.g. AS=8589934592 or NPROC=256 (repeatable)")
    args = ap.parse_args()
    spec = {"backend": args.backend, "device": args.device, "num_correct_trials": args.trials,
            "num_perf_trials": args.perf_trials, "num_warmup": args.warmup,
            "measure_performance": not args.no_perf}
    spec.update(json.loads(args.spec))
    report = run(args.problem, args.candidate, spec, timeout=args.timeout, python=args.python,
                 cpu_threads=args.cpu_threads, keep_taskdir=args.keep,
                 rlimits={k: int(v) for k, v in (x.split("=", 1) for x in args.rlimit)})
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
