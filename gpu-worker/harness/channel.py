"""The result channel: fd 3, where the judge writes stage events and the one result line, and
fd 4, the worker's gate. Only the judge writes here; the runner closes both.

Owns: binding the channel and the gate in the task's process, emit(), gated(), wait_at_gate(),
park_at_gate().

May import: trusted, errors.
"""
import json
import os
import sys

from crucible_errors import SetupError
from crucible_trusted import finite_or_none, json_dumps, os_exit


def _open_channel():
    """Open fd 3 before anything else, so a missing channel fails fast and loudly.

    The fd is marked close-on-exec: programs the candidate may exec must not inherit it.
    """
    try:
        os.fstat(3)
    except OSError:
        sys.stderr.write("crucible harness: file descriptor 3 (protocol channel) is not open\n")
        sys.stderr.flush()
        sys.exit(2)
    channel = os.fdopen(3, "w", buffering=1, encoding="utf-8")
    os.set_inheritable(3, False)
    return channel


# Bound in bind_channel(): in template mode (template.py) this module is imported long before
# the task child that owns fd 3 exists.
_channel_write = None
_channel_flush = None


def bind_channel():
    global _channel_write, _channel_flush
    channel = _open_channel()
    _channel_write = channel.write
    _channel_flush = channel.flush


GATE_FD = 4
_gate_read = None   # bound in bind_gate() when the worker passed a gate


def bind_gate():
    """fd 4, when open, is the worker's gate: one byte lets the child go on at each of two
    points (see wait_at_gate). Marked close-on-exec like fd 3."""
    global _gate_read
    try:
        os.fstat(GATE_FD)
    except OSError:
        return
    os.set_inheritable(GATE_FD, False)
    _gate_read = os.read


def gated():
    """Whether the worker passed a gate (a device stage under a worker's pipeline)."""
    return _gate_read is not None


MAX_GATE_LINE = 64 * 1024


def wait_at_gate(point):
    """Blocks until the worker opens the gate with one line (a JSON object, or empty), if
    there is a gate, and returns what the line says. Points: `standby` after setup and the
    reference's import (trusted code only: CUDA is initialised while another task has the
    device, and nothing of the candidate has run yet; the line may carry the worker's cached
    `reference_timing`, decided only now), and `timing_gate` before timing (the worker lets a
    task time only when every other child on the device is blocked at its gate). End of file:
    the worker no longer wants this task."""
    if _gate_read is None:
        return {}
    emit({"event": "stage", "stage": point})
    return _read_gate_line()


def park_at_gate():
    """Blocks between two device steps until the worker opens the gate (at once unless a
    neighbour on the device waits to time or times). Not a stage: a `park` line, so what the
    child was doing when it ended stays the stage before."""
    if _gate_read is None:
        return
    emit({"event": "park"})
    _read_gate_line()


def _read_gate_line():
    line = b""
    while not line.endswith(b"\n"):
        byte = _gate_read(GATE_FD, 1)
        if not byte:
            os_exit(0)
        line += byte
        if len(line) > MAX_GATE_LINE:
            raise SetupError("gate line too long")
    try:
        message = json.loads(line) if line.strip() else {}
    except ValueError:
        raise SetupError("unreadable gate line")
    if not isinstance(message, dict):
        raise SetupError("gate line is not an object")
    return message


def emit(obj):
    """Write one JSON line on fd 3 with the captured writer; ASCII only, no NaN."""
    line = json_dumps(finite_or_none(obj), allow_nan=False, separators=(",", ":"))
    _channel_write(line + "\n")
    _channel_flush()
