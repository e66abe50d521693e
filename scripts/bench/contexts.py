#!/usr/bin/env python3
"""What other processes on the GPU do to a timing: one process times small kernels the way the
harness does (L2 flush, sync, start event, forward, end event, sync) while N neighbours hold
CUDA contexts and are stopped (SIGSTOP, as parked children are) or busy on the GPU, each with
and without the harness's clock warm-up before the timed calls (after 0.3 s of idling, as a
child waiting at its gate). Prints the median kernel time per scenario, twice each,
interleaved.

Run on the GPU machine: python3 scripts/bench/contexts.py [neighbours] [trials]
"""
import os
import signal
import statistics
import sys
import time

import torch

NEIGHBOURS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
TRIALS = int(sys.argv[2]) if len(sys.argv) > 2 else 300


def neighbour(mode, ready_w):
    """A child: sets up CUDA (unless cpu), then idles, spins on the CPU or on the GPU."""
    if mode != "cpu":
        x = torch.randn(2048, 2048, device="cuda")
        (x @ x).sum().item()
    os.write(ready_w, b"x")
    if mode in ("idle", "stopped"):
        while True:
            time.sleep(3600)
    if mode == "cpu":
        while True:
            pass
    while True:  # gpu
        for _ in range(20):
            x = x @ x
            x = x / x.norm()
        torch.cuda.synchronize()


def start(mode, n):
    pids = []
    r, w = os.pipe()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                neighbour(mode, w)
            finally:
                os._exit(0)
        pids.append(pid)
    for _ in range(n):
        os.read(r, 1)
    os.close(r)
    os.close(w)
    if mode == "stopped":
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
    return pids


def stop(pids):
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def warm(ms):
    """The harness's clock warm-up (judge_performance.warm_clocks)."""
    a = torch.ones(2048, 2048, device="cuda")
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < ms:
        for _ in range(8):
            a = torch.mm(a, a).clamp_(-1.0, 1.0)
        torch.cuda.synchronize()


def timing_child(out_w, warm_ms):
    """Times in a fresh CUDA context of its own, as a task child would."""
    flush = torch.empty(64 << 20, dtype=torch.int32, device="cuda")
    x = torch.randn(256, 4093, device="cuda")
    b = torch.randn(512, 512, device="cuda")
    results = []
    for name, fn in (("softmax 256x4093", lambda: torch.softmax(x, dim=1)),
                     ("matmul 512", lambda: b @ b)):
        times = []
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        time.sleep(0.3)   # as a child waiting at its gate: the GPU idles
        if warm_ms:
            warm(warm_ms)
        for _ in range(TRIALS):
            flush.zero_()
            torch.cuda.synchronize()
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        results.append(f"{name} {statistics.median(times) * 1e3:7.1f} us")
    os.write(out_w, ("; ".join(results)).encode())


def timed(mode, warm_ms):
    pids = start(mode, NEIGHBOURS) if mode != "alone" else []
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            timing_child(w, warm_ms)
        finally:
            os._exit(0)
    os.close(w)
    out = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    stop(pids)
    return out.decode()


def main():
    print(f"{NEIGHBOURS} neighbours, {TRIALS} timed calls each, median of the timed call")
    for round_ in (1, 2):
        for mode in ("alone", "stopped", "gpu"):
            for warm_ms in (0, 50):
                print(f"round {round_} {mode:8s} warm {warm_ms:3d} ms {timed(mode, warm_ms)}",
                      flush=True)


if __name__ == "__main__":
    main()
