"""Die instead of being scored: a wrong candidate that sets its own RLIMIT_CPU with the soft
limit equal to the hard one, then spins in forward until the kernel kills it with SIGKILL
(which looks like a kill from outside the task)."""
import builtins

NAME = "sigkill_rlimit"
_imp = builtins.__dict__["__imp" + "ort__"]


def setup(model):
    resource = _imp("reso" + "urce")
    used = resource.getrusage(resource.RUSAGE_SELF)
    limit = int(used.ru_utime + used.ru_stime) + 3
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
    return f"RLIMIT_CPU set to {limit} s"


def forward(model, x, compute):
    while True:
        pass
