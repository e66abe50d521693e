"""Kill every worker on the node (found by their command line in /proc)."""
import posix

NAME = "kill_worker"


def attack():
    killed = []
    for pid in posix.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = read_file(f"/proc/{pid}/cmdline")
        except OSError:
            continue
        if b"crucible-worker" in cmd or b"crucible-api" in cmd:
            try:
                posix.kill(int(pid), 9)
                killed.append(pid)
            except OSError:
                pass
    if not killed:
        raise PermissionError("no worker process found or signalled")
    return f"killed {killed}"


def read_file(path):
    fd = posix.open(path, posix.O_RDONLY)
    try:
        return posix.read(fd, 1 << 16)
    finally:
        posix.close(fd)
