"""How a task's processes make their CUDA contexts: with one hardware work queue where the
program cannot use a second.

The NVIDIA driver makes contexts one at a time for the whole node, and a context's cost grows
with the hardware queues (channels) it is made with, `CUDA_DEVICE_MAX_CONNECTIONS` of them (8
by default). On one H200 (docs/gpu-runs/2026-12-02-contexts-h200/, the driver alone): a context
with the default queues 134 ms, eight at once 924 ms each; with one queue 59 ms and 279 ms; with
32 queues 499 ms and 8.5 s. Every device child makes two (its judge's and its runner's), so on
a node of several GPUs these queues are what the workers wait on.

A second queue only matters to a program that runs work on two streams at once (or a graph with
parallel branches): everything on one stream runs in order whatever the queues. So a process
whose code names no stream and no graph gets one queue, and one that does keeps the driver's
default. Serialising can only slow a program that hid its streams, never speed it up, so a
candidate cannot gain from evading the test. An operator's own setting (passed through to the
children) is left as it is.
"""
import os

HARDWARE_QUEUES_VAR = "CUDA_DEVICE_MAX_CONNECTIONS"
# Words whose presence in a program's source (any case) keeps the driver's default queues:
# torch's and CUDA's stream and graph APIs, nvcc's `--default-stream per-thread`, streams
# handed in from elsewhere (ExternalStream).
_CONCURRENCY_WORDS = ("stream", "graph")


def one_queue_fits(source):
    """Pure: whether a program whose source is `source` can run on one hardware queue
    without a change in what it does: it names no stream and no graph. An unknown source
    (None) keeps the default."""
    if source is None:
        return False
    text = source.lower()
    return not any(word in text for word in _CONCURRENCY_WORDS)


def source_of(path):
    """A program's source as text, or None when it cannot be read (then nothing is assumed)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def use_one_queue(environ=None):
    """Before this process's first CUDA call: one hardware queue for its context, unless the
    operator set the queues. Returns the value in force."""
    environ = os.environ if environ is None else environ
    return environ.setdefault(HARDWARE_QUEUES_VAR, "1")
