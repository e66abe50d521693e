"""Crucible warm template: a Python that has imported torch, triton and the harness but has
never initialised CUDA, and forks one fresh child per task.

Run by the worker as ``python -I -B template.py <harness.py>`` with file descriptor 4 a
SOCK_SEQPACKET Unix socket to the worker. Requests (one JSON object per message) carry the
child's file descriptors, and `fds` the number each gets in the child (1, 2, 3: stdout,
stderr, the result pipe; optionally 4, the gate, and 5, the sandbox's Landlock ruleset):

    {"op": "spawn", "id": N, "taskdir": "...", "env": {...}, "fds": [1, 2, 3, 4, 5],
     "rlimits": {"NOFILE": n, ...}}

Replies and events (one JSON object per message):

    {"event": "ready", "pid": P, "import_ms": T, "cuda_initialized": false,
     "software": {"torch": ..., "triton": ..., "cuda": ...}}
    {"event": "spawned", "id": N, "pid": C}      {"event": "spawn_failed", "id": N, "error": "..."}
    {"event": "exited", "pid": C, "status": S}   (S: the raw wait status)

The child then lives exactly as a freshly started harness would: its own session, the worker's
death (through ours) kills it, the task's environment only, its rlimits, cwd = taskdir, its
descriptors at their numbers; then harness.main(taskdir), which enters the task's sandbox
first. A child is never reused. The template exits when the worker closes the socket.

May import: the standard library (and torch, triton to warm them); the harness is loaded from
the path it is given, never imported by name.
"""
import os
import sys
import time

_started = time.perf_counter()

import ctypes  # noqa: E402
import fcntl  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import selectors  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import tempfile  # noqa: E402

CONTROL_FD = 4
PR_SET_PDEATHSIG = 1
RLIMITS = {
    "NOFILE": resource.RLIMIT_NOFILE,
    "NPROC": resource.RLIMIT_NPROC,
    "FSIZE": resource.RLIMIT_FSIZE,
    "CORE": resource.RLIMIT_CORE,
}


def _load_harness(path):
    spec = importlib.util.spec_from_file_location("crucible_harness", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["crucible_harness"] = module
    spec.loader.exec_module(module)
    return module


def _warm_imports():
    """What every task would otherwise import itself, without initialising CUDA.

    Imports may ask torch whether CUDA is available; by default that initialises the driver
    and poisons every later fork ("Cannot re-initialize CUDA in forked subprocess"). Asking
    NVML instead leaves the driver alone. Children get their own environment, without this."""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    import torch  # noqa: F401
    try:
        import torch.utils.cpp_extension  # noqa: F401
    except Exception:
        pass
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception:
        pass
    else:
        _warm_triton()
    return torch


# Modules Triton's JIT imports on a kernel's first call (3.6-3.9: the specialiser looks for
# gluon's types, the compiler for its code generator), whether or not it then compiles.
TRITON_LAZY_IMPORTS = (
    "triton.experimental.gluon",
    "triton.compiler.code_generator",
    "triton.language.semantic",
    "triton.language.extra.libdevice",
    "triton.tools.tensor_descriptor",
)


def _warm_triton():
    """What Triton's first kernel call costs in a fresh process before it even looks at its
    cache: `triton_key()` hashes Triton's own installation (every compiler, backend and
    language source and the whole of libtriton; memoised per process) and the JIT imports
    the modules above. On the H200 hosts that was 0.6 s of every Triton candidate's first
    call, spent in the device stage (docs/BENCHMARKS.md); done here once, every child
    inherits both. Neither depends on the task: the key is a hash of the installed files,
    the imports are Triton's own. Best effort: what a Triton version lacks is skipped."""
    import importlib
    for module, name in (("triton.runtime.cache", "triton_key"),
                         ("triton.compiler.compiler", "triton_key")):
        try:
            getattr(importlib.import_module(module), name)()
            break
        except Exception:
            continue
    for module in TRITON_LAZY_IMPORTS:
        try:
            importlib.import_module(module)
        except Exception:
            pass


def _fork_is_clean(torch):
    """Forks a throwaway child that asks torch whether a forked child may use CUDA: the only
    reliable test that nothing imported so far initialised it."""
    pid = os.fork()
    if pid == 0:
        try:
            bad = torch.cuda._is_in_bad_fork() or torch.cuda.is_initialized()
        except BaseException:
            bad = True
        os._exit(1 if bad else 0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _child(harness, request, fds, template_pid, closing):
    """Runs in the forked child; never returns."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            try:
                os.close(fd)
            except OSError:
                pass
        os.setsid()
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != template_pid:
            os._exit(70)
        targets = request["fds"]
        # Moved above the targets first, so that no dup2 overwrites a descriptor still to be
        # placed (the received ones may have any numbers, 4 included, once fd 4 is closed).
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in fds]
        for fd in fds:
            os.close(fd)
        for src, dst in zip(moved, targets):
            os.dup2(src, dst)
        for fd in set(moved) - set(targets):
            os.close(fd)
        for name, value in request.get("rlimits", {}).items():
            if value is not None:   # None: the template's own (the task's cgroup caps it)
                resource.setrlimit(RLIMITS[name], (int(value), int(value)))
        os.chdir(request["taskdir"])
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        # What the template imported may have asked for a temporary directory already: that
        # was the template's, which the task's sandbox does not show. The task's is TMPDIR.
        tempfile.tempdir = None
    except BaseException as e:
        try:
            os.write(2, f"crucible template: child setup failed: {type(e).__name__}: {e}\n".encode())
        finally:
            os._exit(70)
    harness.main(request["taskdir"])
    os._exit(70)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -I -B template.py <harness.py>\n")
        os._exit(2)
    harness = _load_harness(sys.argv[1])
    torch = _warm_imports()
    harness.warm_dispatch_mode(torch)
    sock = socket.socket(fileno=CONTROL_FD)
    os.set_inheritable(CONTROL_FD, False)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    me = os.getpid()

    def send(obj):
        sock.send(json.dumps(obj).encode())

    send({"event": "ready", "pid": me,
          "import_ms": (time.perf_counter() - _started) * 1e3,
          "cuda_initialized": bool(torch.cuda.is_initialized()) or not _fork_is_clean(torch),
          # What every child will report: the worker keys its caches on it from the start.
          "software": {"torch": str(torch.__version__), "triton": harness.triton_version(),
                       "cuda": torch.version.cuda}})
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "control")
    sel.register(wake_r, selectors.EVENT_READ, "sigchld")
    while True:
        for key, _ in sel.select():
            if key.data == "sigchld":
                try:
                    while os.read(wake_r, 4096):
                        pass
                except BlockingIOError:
                    pass
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    send({"event": "exited", "pid": pid, "status": status})
                continue
            try:
                data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 8)
            except ConnectionError:
                data, fds = b"", []
            if not data:
                os._exit(0)   # the worker is gone or wants us gone
            request = json.loads(data)
            targets = request.get("fds")
            if request.get("op") != "spawn" or not isinstance(targets, list) or \
                    len(targets) != len(fds) or targets[:3] != [1, 2, 3] or \
                    not all(t in (4, 5) for t in targets[3:]):
                for fd in fds:
                    os.close(fd)
                send({"event": "spawn_failed", "id": request.get("id"),
                      "error": "malformed request"})
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(harness, request, fds, me, (CONTROL_FD, wake_r, wake_w))
            for fd in fds:
                os.close(fd)
            send({"event": "spawned", "id": request["id"], "pid": pid})


if __name__ == "__main__":
    main()
