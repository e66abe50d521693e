"""Trusted primitives: what the rest of the harness relies on, captured before any candidate
code runs. The bottom layer.

Owns: our own references to the standard-library functions a candidate could replace in its
process (time.perf_counter_ns, json.dumps, os._exit), taken when this module is loaded -- the
first module harness.py loads, so in the template too this happens before any reference or
candidate exists; `Trusted`, torch's functions, captured by capture_trusted() in setup (still
before any candidate code is imported); and the small process helpers built only on these.

May import: the standard library only.
"""
import json
import math
import os
import sys
import time

# Our own references to what must not be swapped out by the candidate (integrity hardening
# builds on these; the torch ones are captured in setup, still before the candidate runs).
perf_counter_ns = time.perf_counter_ns
json_dumps = json.dumps
os_exit = os._exit

PR_SET_DUMPABLE = 4
PR_SET_PDEATHSIG = 1


class Trusted:
    """Functions the harness relies on, captured before any candidate code is imported."""
    torch = None
    allclose = None
    isclose = None
    manual_seed = None
    cuda_manual_seed_all = None
    Event = None
    event_record = None
    event_elapsed = None
    synchronize = None


def capture_trusted(torch):
    Trusted.torch = torch
    Trusted.allclose = torch.allclose
    Trusted.isclose = torch.isclose
    Trusted.manual_seed = torch.manual_seed
    Trusted.cuda_manual_seed_all = torch.cuda.manual_seed_all
    Trusted.Event = torch.cuda.Event
    Trusted.event_record = torch.cuda.Event.record
    Trusted.event_elapsed = torch.cuda.Event.elapsed_time
    Trusted.synchronize = torch.cuda.synchronize


def sync_device(device):
    """Wait for queued GPU work so asynchronous faults surface where they belong."""
    if device == "cuda":
        Trusted.synchronize()


def finite_or_none(value):
    """JSON has no NaN/Infinity (and the worker's parser rejects them): map them to null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def prctl(option, value):
    """prctl(2), best effort (a kernel without it leaves the defaults)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except Exception:
        pass


def flush_std():
    """The candidate's output is the worker's to capture: flush what Python still buffers."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass
