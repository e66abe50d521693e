"""Crucible sandbox self-test: what the worker's start-up check runs inside a runner.

Each probe tries one thing the sandbox must refuse and records what happened; the worker
(gpu-worker/src/task/sandbox_selftest.rs) decides from the record which layers hold on this host.
Nothing here is trusted to judge itself: it only reports errno names and small facts.

May import: the standard library only (no harness module).
"""
import ctypes
import errno
import os
import signal
import socket
import time

PTRACE_ATTACH = 16
CLONE_NEWUSER = 0x10000000


def _outcome(fn):
    """'ok' when the attempt succeeded, else the errno name (or the exception's type)."""
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, type(e).__name__)
    except Exception as e:
        return type(e).__name__


def _libc_call(name, *args):
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _tcp(target):
    host, port = target
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect((host, int(port)))
    finally:
        s.close()


def _write_beside(directory):
    path = os.path.join(directory, f"selftest-{os.getpid()}")
    with open(path, "w") as f:
        f.write("escaped")
    os.unlink(path)


def _sigkill_a_child():
    """Sends SIGKILL to a child of ours: the runner's filter refuses it (so a runner dead of
    SIGKILL was killed from outside); the child is then ended with SIGTERM either way."""
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    try:
        os.kill(pid, signal.SIGKILL)
    finally:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
        os.waitpid(pid, 0)


def identity():
    """Who this process is, as the kernel says (the judge's part of the report)."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("Uid", "Gid", "NoNewPrivs", "Seccomp", "Seccomp_filters", "CapEff",
                       "NSpid"):
                fields[key] = value.split()
    return {"pid": os.getpid(), "status": fields}


def probe(targets):
    """Runs every probe; `targets` names what the worker set up to be found: a TCP port it
    listens on, a canary file and a directory outside the task directory."""
    report = identity()
    report["ppid"] = os.getppid()
    if targets.get("tcp"):
        report["tcp_worker"] = _outcome(lambda: _tcp(targets["tcp"]))
    report["tcp_socket"] = _outcome(lambda: socket.socket(socket.AF_INET).close())
    if targets.get("canary_file"):
        report["read_canary"] = _outcome(lambda: open(targets["canary_file"]).read())
    if targets.get("canary_dir"):
        report["write_outside"] = _outcome(lambda: _write_beside(targets["canary_dir"]))
    report["visible_pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())[:64]
    report["kill_all"] = _outcome(lambda: os.kill(-1, 0))
    report["ptrace_judge"] = _outcome(lambda: _libc_call("ptrace", PTRACE_ATTACH, os.getppid(),
                                                         None, None))
    report["unshare_user"] = _outcome(lambda: _libc_call("unshare", CLONE_NEWUSER))
    report["sigkill"] = _outcome(_sigkill_a_child)
    report["cores"] = sorted(os.sched_getaffinity(0))
    report["widen_cores"] = _outcome(lambda: os.sched_setaffinity(0, range(os.cpu_count() or 1)))
    with open("/proc/self/cgroup") as f:
        report["cgroup"] = f.read()[:4096]
    report["mounts"] = _filesystems(("/tmp", "/dev/shm", "/proc"))
    space = os.statvfs(os.getcwd())
    report["space"] = {"bytes": space.f_blocks * space.f_frsize, "inodes": space.f_files}
    try:
        report["cgroups_listed"] = len(os.listdir("/sys/fs/cgroup"))
    except OSError:
        report["cgroups_listed"] = -1
    return report


def _filesystems(points):
    """The file system type mounted at each of `points` (the last mount there wins)."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if len(fields) > 4 and fields[4] in points and right:
                found[fields[4]] = right.split()[0]
    return found
