"""The benchmarks' host figures while a mode runs: how busy the node's cores were
(/proc/stat), as a mean and as the share of one-second samples with nearly every core busy,
and the most memory in use (/proc/meminfo: MemTotal less MemAvailable). A CUDA workload is
compile-bound when the second is high: then only less compiler work raises the rate, not more
builds at once; the memory peak is what the compile pool's and the tasks' bounds are sized
against. Standard library only; absent /proc, every figure is None.
"""
import threading
import time

# A sample counts as saturated at this share of the host's CPU time busy.
SATURATED_PERCENT = 90.0


def cpu_times():
    """The host's CPU time so far (/proc/stat's first line): (busy, total) jiffies, or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)   # idle + iowait
    return sum(fields) - idle, sum(fields)


def cpu_busy(before, after):
    """Pure: the share of the host's CPU time that was busy between two cpu_times(), in %."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return 100.0 * (after[0] - before[0]) / (after[1] - before[1])


def memory_used():
    """The host's memory in use now (/proc/meminfo: MemTotal - MemAvailable), bytes, or None."""
    fields = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                fields[name] = int(rest.split()[0]) * 1024   # kB
    except (OSError, ValueError, IndexError):
        return None
    if "MemTotal" not in fields or "MemAvailable" not in fields:
        return None
    return fields["MemTotal"] - fields["MemAvailable"]


def summarise(samples, saturated=SATURATED_PERCENT):
    """Pure: per-interval busy percentages -> {mean, saturated share, samples}; None if none."""
    samples = [s for s in samples if s is not None]
    if not samples:
        return None
    return {"mean": sum(samples) / len(samples),
            "saturated": sum(s >= saturated for s in samples) / len(samples),
            "samples": len(samples)}


class HostSampler:
    """cpu_busy() of every `interval_s` and the memory in use then, from start() to stop(), on
    a daemon thread."""

    def __init__(self, interval_s=1.0):
        self.interval_s = interval_s
        self.samples = []
        self.memory = []
        self.first = None
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self.first = cpu_times()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        before = self.first
        while not self._stop.wait(self.interval_s):
            now = cpu_times()
            self.samples.append(cpu_busy(before, now))
            self.memory.append(memory_used())
            before = now

    def stop(self):
        """{mean (over the whole window, not the samples), saturated, samples,
        memory_peak_bytes}, or None."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        summary = summarise(self.samples)
        whole = cpu_busy(self.first, cpu_times())
        if summary is not None and whole is not None:
            summary["mean"] = whole
        memory = [m for m in self.memory if m is not None]
        if summary is not None:
            summary["memory_peak_bytes"] = max(memory) if memory else None
        return summary
