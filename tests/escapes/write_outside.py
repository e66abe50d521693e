"""Write outside the task directory: beside the work root, and in /var/tmp."""
import posix

NAME = "write_outside"


def attack():
    written = []
    for path in ("{{WORK_ROOT}}/crucible-escape-{{NONCE}}", "/var/tmp/crucible-escape-{{NONCE}}"):
        fd = posix.open(path, posix.O_WRONLY | posix.O_CREAT, 0o644)
        posix.write(fd, b"escaped")
        posix.close(fd)
        written.append(path)
    return written
