"""What the GPU workers of one node share below Crucible: the driver, the host's cores and the
Triton cache. Measures, with no service running (docs/gpu-runs/2026-11-28-contention-h200/):

1. `driver`: cuInit, the primary context and one allocation through libcuda alone (ctypes, no
   torch), N processes at once, on one GPU and spread over the node's; `ctxenv`: the same on
   gpu0 under each of the driver's settings that could change a context's cost;
2. `ctx`: the same through torch, as a device child does it (each makes two: judge, runner);
3. `steady`: a process launching small kernels and timing them with events (host-included:
   `kernel_us`) and as a CUDA graph (the GPU's side alone: `graph_us`), alone and beside
   processes on another GPU (or its own) that create contexts or launch kernels themselves;
   `queues`: `steady` alone with the driver's default hardware queues and with one, and 8
   torch contexts at once with each (contexts.py gives a task's processes one queue);
4. `triton`: the first call of a small Triton kernel in a fresh process, with an empty cache
   (a JIT) and with the cache a previous process filled; each call's cProfile is written to
   $OUT (or the temporary directory).

Run on a GPU machine: `python3 scripts/bench/node_contention.py [--parts driver,ctx] [--gpus N]`;
prints one table per part and writes them as JSON to --out. Processes are forked from one parent
that has imported torch (never CUDA), as the worker's template does.
"""
import argparse
import json
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time

from report import pct


def median(xs):
    return pct(xs, 50)


def wait_until(start_at):
    """Sleeps until the wall clock reaches `start_at` (the processes of a case start together)."""
    while time.time() < start_at:
        time.sleep(0.001)


def run_together(targets, timeout):
    """Starts one process per (function, args) of `targets`, each given the queue it reports
    on as its last argument; returns their reports (in the order they came)."""
    out = mp.Queue()
    procs = [mp.Process(target=fn, args=(*args, out)) for fn, args in targets]
    for p in procs:
        p.start()
    got = [out.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join()
    return got


def create_context(gpu, start_at, out):
    """Child: waits for start_at, creates its context on `gpu`, reports the milliseconds."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    import torch
    wait_until(start_at)
    t0 = time.perf_counter()
    torch.cuda.init()
    x = torch.empty(1 << 20, device="cuda")
    x.add_(1)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    pool = torch.cuda.MemPool() if hasattr(torch.cuda, "MemPool") else None
    del pool
    out.put({"gpu": gpu, "ctx_ms": (t1 - t0) * 1e3, "extra_ms": (time.perf_counter() - t1) * 1e3})


CTYPES_CTX = r"""
import ctypes, json, os, sys, time
start_at = float(sys.argv[1])
cuda = ctypes.CDLL("libcuda.so.1")
while time.time() < start_at:
    time.sleep(0.001)
t0 = time.perf_counter()
assert cuda.cuInit(0) == 0
t1 = time.perf_counter()
dev = ctypes.c_int()
assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p()
assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
assert cuda.cuCtxSetCurrent(ctx) == 0
t2 = time.perf_counter()
ptr = ctypes.c_uint64()
assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(4 << 20)) == 0
t3 = time.perf_counter()
print(json.dumps({"init_ms": (t1 - t0) * 1e3, "ctx_ms": (t2 - t1) * 1e3, "alloc_ms": (t3 - t2) * 1e3}))
"""


def driver_contexts(placement, env=None):
    """One process per GPU index of `placement`, started together, each making its context
    through the driver alone (CTYPES_CTX) with `env` added: their reports."""
    start_at = time.time() + 1.0
    procs = [subprocess.Popen([sys.executable, "-c", CTYPES_CTX, str(start_at)], stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=str(g), **(env or {})))
             for g in placement]
    return [json.loads(p.communicate(timeout=120)[0]) for p in procs]


def driver_row(case, got):
    """A table row of driver reports: median and max of each figure."""
    row = {"case": case, "n": len(got)}
    for k in ("init_ms", "ctx_ms", "alloc_ms"):
        row[k] = median([g[k] for g in got])
        row[k.replace("_ms", "_max_ms")] = max(g[k] for g in got)
    return row


def part_ctx_driver(gpus):
    """The driver alone (ctypes, no torch in the process): cuInit, the primary context, one
    allocation; N processes at once on gpu0, then spread."""
    return [driver_row(name, driver_contexts(placement))
            for name, placement in [("1 on gpu0", [0]), ("8 on gpu0", [0] * 8),
                                    (f"8 over x{gpus}", [i % gpus for i in range(8)])]
            for _rep in range(2)]


# The driver's own settings that could change what a context costs: its hardware work queues
# (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default) are made with it.
CTX_ENV_VARIANTS = (("default", {}), ("max connections 1", {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}),
                    ("max connections 32", {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}))


def part_ctxenv(gpus):
    """The driver alone, as `driver`, under each of CTX_ENV_VARIANTS: 1 process (three
    rounds) and 8 at once on gpu0 (two rounds); which setting shortens the node-wide queue."""
    del gpus
    return [driver_row(f"{label}, {n} at once",
                       [g for _rep in range(rounds) for g in driver_contexts([0] * n, extra)])
            for label, extra in CTX_ENV_VARIANTS for n, rounds in ((1, 3), (8, 2))]


def with_env(env, fn, *args):
    """Child: `fn(*args)` with `env` set before its first CUDA call."""
    os.environ.update(env)
    fn(*args)


def part_queues(gpus, seconds):
    """Whether one hardware queue changes what a single-stream program measures or what its
    context costs through torch: `steady` alone under each of CTX_ENV_VARIANTS but the last
    (kernel and graph times), then 8 torch contexts at once on gpu0 under each."""
    del gpus
    rows = []
    for label, extra in CTX_ENV_VARIANTS[:2]:
        for _rep in range(2):
            start_at = time.time() + 2.0
            me = run_together([(with_env, (extra, steady, 0, seconds, start_at, "measured"))],
                              timeout=300)[0]
            rows.append({"case": f"steady, {label}", **{k: me[k] for k in ("n", "kernel_us", "kernel_p90_us",
                                                                             "graph_us", "graph_p90_us")},
                         "ctx_ms": "", "ctx_max_ms": ""})
    for label, extra in CTX_ENV_VARIANTS[:2]:
        for _rep in range(2):
            start_at = time.time() + 0.5
            got = run_together([(with_env, (extra, create_context, 0, start_at)) for _ in range(8)],
                               timeout=120)
            ms = [g["ctx_ms"] for g in got]
            rows.append({"case": f"8 torch contexts, {label}", "n": len(ms), "kernel_us": "",
                         "kernel_p90_us": "", "graph_us": "", "graph_p90_us": "",
                         "ctx_ms": median(ms), "ctx_max_ms": max(ms)})
    return rows


def part_ctx(gpus):
    """N simultaneous context creations, for several N and placements."""
    cases = [("1 on gpu0", [0]), ("2 on gpu0", [0, 0]), ("4 on gpu0", [0] * 4), ("8 on gpu0", [0] * 8)]
    if gpus > 1:
        cases += [(f"1 per gpu x{gpus}", list(range(gpus))),
                  (f"4 per gpu x{gpus}", [g for g in range(gpus) for _ in range(4)])]
    rows = []
    for name, placement in cases:
        for _rep in range(2):
            start_at = time.time() + 0.5
            got = run_together([(create_context, (g, start_at)) for g in placement], timeout=120)
            ms = [g["ctx_ms"] for g in got]
            rows.append({"case": name, "n": len(placement), "median_ms": median(ms), "max_ms": max(ms),
                         "extra_ms": median([g["extra_ms"] for g in got])})
    return rows


def steady(gpu, seconds, start_at, role, out):
    """Child: small kernels launched and synchronised, and timed with events, for `seconds`."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    import torch
    x = torch.rand(128, 2000, device="cuda")
    b = torch.rand(2000, device="cuda")
    y = torch.empty_like(x)
    flush = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            torch.mul(x, torch.sigmoid(x), out=y)
            y.add_(b)
        with torch.cuda.graph(graph):
            for _ in range(10):
                torch.mul(x, torch.sigmoid(x), out=y)
                y.add_(b)
    torch.cuda.synchronize()
    wait_until(start_at)
    host_us, kernel_us, graph_us = [], [], []
    until = time.time() + seconds
    while time.time() < until:
        flush.zero_()
        t0 = time.perf_counter()
        ev0.record()
        torch.mul(x, torch.sigmoid(x), out=y)
        y.add_(b)
        ev1.record()
        ev1.synchronize()
        host_us.append((time.perf_counter() - t0) * 1e6)
        kernel_us.append(ev0.elapsed_time(ev1) * 1e3)
        if len(kernel_us) % 4 == 0:   # the same work with no host in between: the GPU's side
            flush.zero_()
            ev0.record()
            graph.replay()
            ev1.record()
            ev1.synchronize()
            graph_us.append(ev0.elapsed_time(ev1) * 1e3 / 10)
    out.put({"role": role, "gpu": gpu, "host_us": median(host_us), "host_p90_us": pct(host_us, 90),
             "kernel_us": median(kernel_us), "kernel_p90_us": pct(kernel_us, 90),
             "graph_us": median(graph_us), "graph_p90_us": pct(graph_us, 90), "n": len(host_us)})


def churn(gpu, seconds, start_at, role, out):
    """Child: forks context-creating processes one after another for `seconds` (a device
    child's set-up, over and over)."""
    import torch  # noqa: F401  (imported once here, as in the template)
    wait_until(start_at)
    until = time.time() + seconds
    ms = []
    while time.time() < until:
        ms.append(run_together([(create_context, (gpu, 0))], timeout=120)[0]["ctx_ms"])
    out.put({"role": role, "gpu": gpu, "ctx_ms": median(ms), "n": len(ms)})


def part_steady(gpus, seconds):
    """The measured process on gpu0, alone and beside neighbours on the other GPUs."""
    other = 1 if gpus > 1 else 0
    cases = [("alone", []),
             (f"4 ctx churns on gpu{other}", [(churn, other)] * 4),
             (f"4 steady on gpu{other}", [(steady, other)] * 4),
             ("4 ctx churns on gpu0 (same)", [(churn, 0)] * 4)]
    if gpus > 2:
        cases.append((f"churn x2 on each of gpu1-{gpus - 1}",
                      [(churn, g) for g in range(1, gpus) for _ in range(2)]))
    rows = []
    for name, neighbours in cases:
        start_at = time.time() + 3.0
        got = run_together([(steady, (0, seconds, start_at, "measured"))]
                           + [(fn, (g, seconds, start_at, "neighbour")) for fn, g in neighbours],
                           timeout=300)
        me = next(g for g in got if g["role"] == "measured")
        nb = [g for g in got if g["role"] == "neighbour"]
        rows.append({"case": name, **{k: me[k] for k in ("host_us", "host_p90_us", "kernel_us", "kernel_p90_us",
                                                           "graph_us", "graph_p90_us", "n")},
                     "neighbour_ctx_ms": median([g["ctx_ms"] for g in nb if "ctx_ms" in g]),
                     "neighbour_ctx_n": sum(g.get("n", 0) for g in nb if "ctx_ms" in g)})
    return rows


PROFILE_DIR = os.environ.get("OUT", tempfile.gettempdir())
# The small workload's Triton candidate: its kernel is the one the first call runs.
TRITON_CANDIDATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "candidates", "small",
                                "01_swish_bias.py")


def triton_first_call(cache_dir, src_dir, label, out):
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
    os.environ["TRITON_CACHE_DIR"] = cache_dir
    sys.path.insert(0, src_dir)
    import torch
    t0 = time.perf_counter()
    import kern
    import triton
    t1 = time.perf_counter()
    x = torch.rand(128, 2000, device="cuda")
    b = torch.rand(2000, device="cuda")
    y = torch.empty_like(x)
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    kern._swish_bias_kernel[(triton.cdiv(x.numel(), 1024),)](x, b, y, x.numel(), 2000, BLOCK=1024)
    torch.cuda.synchronize()
    t3 = time.perf_counter()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(25)
    with open(os.path.join(PROFILE_DIR, label.split()[0] + f"-{os.getpid()}.txt"), "w") as f:
        f.write(text.getvalue())
    kern._swish_bias_kernel[(triton.cdiv(x.numel(), 1024),)](x, b, y, x.numel(), 2000, BLOCK=1024)
    torch.cuda.synchronize()
    t4 = time.perf_counter()
    n_files = sum(len(f) for _, _, f in os.walk(cache_dir))
    out.put({"case": label, "import_ms": (t1 - t0) * 1e3, "ctx_and_inputs_ms": (t2 - t1) * 1e3,
             "first_call_ms": (t3 - t2) * 1e3, "second_call_ms": (t4 - t3) * 1e3,
             "cache_files_after": n_files})


def part_triton():
    rows = []
    src = tempfile.mkdtemp(prefix="nc-src-")
    shutil.copyfile(TRITON_CANDIDATE, os.path.join(src, "kern.py"))
    cache = tempfile.mkdtemp(prefix="nc-cache-")
    for label in ("empty cache (JIT)", "cache of the run before", "cache of the run before"):
        rows += run_together([(triton_first_call, (cache, src, label))], timeout=300)
    return rows


def table(rows):
    if not rows:
        return ""
    keys = list(rows[0].keys())
    fmt = lambda v: f"{v:.1f}" if isinstance(v, float) else str(v)
    widths = [max(len(k), *(len(fmt(r.get(k, ""))) for r in rows)) for k in keys]
    lines = ["  ".join(k.ljust(w) for k, w in zip(keys, widths))]
    lines += ["  ".join(fmt(r.get(k, "")).ljust(w) for k, w in zip(keys, widths)) for r in rows]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=None, help="GPUs to use (default: all torch sees)")
    ap.add_argument("--seconds", type=float, default=8.0, help="length of each steady case")
    ap.add_argument("--parts", default="driver,ctx,steady,triton")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    mp.set_start_method("fork")
    import torch  # the parent imports torch, never CUDA: the children fork from it
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    gpus = args.gpus or max(1, sum(line.startswith("GPU ") for line in listed.splitlines()))
    print(f"node_contention: {gpus} GPU(s), {os.cpu_count()} cores, torch {torch.__version__}", flush=True)
    report = {}
    for part in args.parts.split(","):
        t = time.time()
        rows = {"ctx": lambda: part_ctx(gpus), "steady": lambda: part_steady(gpus, args.seconds),
                "triton": part_triton, "driver": lambda: part_ctx_driver(gpus),
                "ctxenv": lambda: part_ctxenv(gpus), "queues": lambda: part_queues(gpus, args.seconds)}[part]()
        report[part] = rows
        print(f"\n== {part} ({time.time() - t:.0f} s)\n{table(rows)}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
