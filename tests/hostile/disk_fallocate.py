"""Asks for the task directory's room 768 MiB at a time (fallocate, each under the file size
limit) until refused at the bounded space's size limit; the ENOSPC is not caught, so the
candidate ends `RESOURCE`."""
import os

NAME = "disk_fallocate"
EACH = 768 << 20


def hostile():
    for i in range(64):
        fd = os.open(f"big-{i}.bin", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, EACH)
        finally:
            os.close(fd)
    return f"{64 * EACH >> 20} MiB allocated"
