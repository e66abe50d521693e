"""Die instead of being scored: a wrong candidate that arms a POSIX timer whose signal is
SIGKILL (timer_create through ctypes, reached through builtins' dictionary), then sleeps in
forward until it fires."""
import builtins
import time

NAME = "sigkill_timer"
_imp = builtins.__dict__["__imp" + "ort__"]


def setup(model):
    ct = _imp("ctyp" + "es")

    class SigEvent(ct.Structure):
        _fields_ = [("value", ct.c_void_p), ("signo", ct.c_int), ("notify", ct.c_int),
                    ("pad", ct.c_byte * 48)]

    class TimeSpec(ct.Structure):
        _fields_ = [("sec", ct.c_long), ("nsec", ct.c_long)]

    class ITimerSpec(ct.Structure):
        _fields_ = [("interval", TimeSpec), ("value", TimeSpec)]

    libc = ct.CDLL(None, use_errno=True)
    event = SigEvent(None, 9, 0)   # SIGKILL, SIGEV_SIGNAL
    timer = ct.c_void_p()
    if libc.timer_create(1, ct.byref(event), ct.byref(timer)) != 0:   # CLOCK_MONOTONIC
        return f"timer_create refused: errno {ct.get_errno()}"
    spec = ITimerSpec(TimeSpec(0, 0), TimeSpec(2, 0))
    libc.timer_settime(timer, 0, ct.byref(spec), None)
    return "SIGKILL timer armed for 2 s"


def forward(model, x, compute):
    time.sleep(5)
    return compute(x) * 0
