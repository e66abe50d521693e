"""Whether CPU stages lent the device cores (CRUCIBLE_LEND_DEVICE_CORES, at SCHED_IDLE) move
the timing of a small kernel launched from a device core, on the GPU host, in one call.

A timer process pinned to one device core (the last core, normal priority, as a device child
is) times a launch-bound loop (20 small elementwise kernels per repetition, CUDA events, 300
repetitions) while the node's cores carry a compiler load like the CPU stages' (`g++
-fsyntax-only` of torch/extension.h, over and over), in four modes:
  quiet    no load
  stage    the load on the stage cores (the lower half), normal priority: today's default
  lend     the load on the stage cores and on the device cores, at SCHED_IDLE: lending
  shared   the load on every core at normal priority: no split at all (the bound)
Prints, per mode, the kernel time (events) and the host's wall time per repetition, medians and
p90, and each over quiet. Needs torch with a GPU and g++.

    python3 scripts/bench/lend_timing.py [--reps 300] [--warm-s 4]
"""
import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

TIMER = r"""
import json, os, sys, time
import torch
os.sched_setaffinity(0, [int(sys.argv[1])])
reps = int(sys.argv[2])
a = torch.randn(1 << 16, device="cuda")
for _ in range(50):
    a.mul(2).add_(1)
torch.cuda.synchronize()
ker, wall = [], []
for _ in range(reps):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    s.record()
    for _ in range(10):
        a.mul(2).add_(1)
    e.record()
    e.synchronize()
    wall.append((time.perf_counter() - t0) * 1e6)
    ker.append(s.elapsed_time(e) * 1e3)
print(json.dumps({"ker_us": ker, "wall_us": wall}))
"""


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def start_load(cores, idle, header):
    """One `g++ -fsyntax-only` loop per core, pinned to it, at SCHED_IDLE when `idle`."""
    procs = []
    for core in cores:
        def setup(core=core):
            os.sched_setaffinity(0, [core])
            if idle:
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        procs.append(subprocess.Popen(
            ["bash", "-c", f"while :; do g++ -std=c++17 -fsyntax-only {header}; done"],
            preexec_fn=setup, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True))
    return procs


def stop_load(procs):
    for p in procs:
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
    for p in procs:
        p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--warm-s", type=float, default=4.0, help="load running before the timer starts")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    half = len(cores) // 2
    stage, device = cores[:half], cores[half:]
    timer_core = device[-1]
    import torch.utils.cpp_extension as cpp
    with tempfile.TemporaryDirectory() as tmp:
        header = os.path.join(tmp, "tu.cpp")
        with open(header, "w") as f:
            f.write("#include <torch/extension.h>\n")
        includes = [*cpp.include_paths(), sysconfig.get_paths()["include"]]
        header = " ".join(f"-I{d}" for d in includes) + f" {header}"
        modes = [("quiet", []), ("stage", [(stage, False)]),
                 ("lend", [(stage, True), (device, True)]), ("shared", [(cores, False)])]
        rows = {}
        for name, loads in modes:
            procs = []
            for load_cores, idle in loads:
                procs += start_load(load_cores, idle, header)
            time.sleep(args.warm_s if procs else 0)
            out = subprocess.run([args.python, "-c", TIMER, str(timer_core), str(args.reps)],
                                 capture_output=True, text=True, timeout=240)
            stop_load(procs)
            if out.returncode != 0:
                print(f"{name}: timer failed: {out.stderr[-500:]}")
                return 1
            rows[name] = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{name}: done", flush=True)
    print(f"timer on core {timer_core}; stage cores {stage[0]}-{stage[-1]}, device cores "
          f"{device[0]}-{device[-1]}; 10x (mul, add_) on 64 Ki floats per repetition, {args.reps} reps")
    print(f"{'mode':8} {'kernel p50 us':>14} {'p90':>8} {'x quiet':>8} {'wall p50 us':>12} {'p90':>8} {'x quiet':>8}")
    q = rows["quiet"]
    for name, r in rows.items():
        k50, w50 = pct(r["ker_us"], 50), pct(r["wall_us"], 50)
        print(f"{name:8} {k50:14.1f} {pct(r['ker_us'], 90):8.1f} {k50 / pct(q['ker_us'], 50):8.2f} "
              f"{w50:12.1f} {pct(r['wall_us'], 90):8.1f} {w50 / pct(q['wall_us'], 50):8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
