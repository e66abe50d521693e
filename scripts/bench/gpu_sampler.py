"""The GPU benchmark's utilisation sampler (bench.py): nvidia-smi's utilization.gpu and
memory.used while a mode runs, summed over the mode's window (absent on a CPU machine: busy
fraction and memory high-water are then reported as n/a). Standard library only.
"""
import shutil
import subprocess
import threading
import time


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
