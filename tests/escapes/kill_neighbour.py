"""Kill the other tasks' harness processes on the node (SIGTERM: SIGKILL is refused)."""
import posix

NAME = "kill_neighbour"


def attack():
    mine = {posix.getpid(), posix.getppid()}
    killed = []
    for pid in posix.listdir("/proc"):
        if not pid.isdigit() or int(pid) in mine:
            continue
        try:
            cmd = read_file(f"/proc/{pid}/cmdline")
        except OSError:
            continue
        if b"harness.py" in cmd or b"template.py" in cmd:
            try:
                posix.kill(int(pid), 15)
                killed.append(pid)
            except OSError:
                pass
    if not killed:
        raise PermissionError("no other task's process found or signalled")
    return f"signalled {killed}"


def read_file(path):
    fd = posix.open(path, posix.O_RDONLY)
    try:
        return posix.read(fd, 1 << 16)
    finally:
        posix.close(fd)
