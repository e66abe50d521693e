"""A thread bomb beside honest neighbours: as many threads as the process may start, parked
on an event, so that children of other tasks under the same sandbox user fail to start
theirs."""
import builtins

NAME = "thread_bomb"
_imp = builtins.__dict__["__imp" + "ort__"]
_held = []


def setup(model):
    threads = _imp("thre" + "ading")
    stop = threads.Event()
    _held.append(stop)
    started = 0
    try:
        for _ in range(2100):
            threads.Thread(target=stop.wait, daemon=True).start()
            started += 1
    except RuntimeError as e:
        return f"{started} threads started, then: {e}"
    return f"{started} threads started"


def forward(model, x, compute):
    return compute(x)
