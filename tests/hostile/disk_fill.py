"""Fills the task directory in 4 MiB writes until the disk says no, catches the ENOSPC and goes
on as if nothing happened: without a bounded space it wrote 8 GiB onto the node's disk with a
verdict `ok`. The worker sees the full space itself: `RESOURCE`, naming the size limit."""
import errno
import os

NAME = "disk_fill"
MOST_BYTES = 64 << 30
CHUNK = b"\xab" * (4 << 20)


def hostile():
    written = 0
    try:
        with open("filler.bin", "wb") as f:
            while written < MOST_BYTES:
                f.write(CHUNK)
                f.flush()
                written += len(CHUNK)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise
        # The file size limit (RLIMIT_FSIZE) stops one file: go on with the next ones.
        for i in range(MOST_BYTES // (512 << 20)):
            try:
                with open(f"more-{i}.bin", "wb") as f:
                    for _ in range(128):
                        f.write(CHUNK)
                        f.flush()
                        written += len(CHUNK)
            except OSError as again:
                if again.errno in (errno.ENOSPC, errno.EDQUOT):
                    break
                if again.errno != errno.EFBIG:
                    raise
    return f"wrote {written >> 20} MiB, then the disk said no"
