"""Creates empty files until the file system says no (400,000 in 23 s once, millions in a
task's time), catching the ENOSPC: the bounded space's inode limit stops it, and the worker
sees it: `RESOURCE`, naming the inode limit."""
import errno
import os

NAME = "inode_flood"
MOST_FILES = 5_000_000


def hostile():
    os.mkdir("flood")
    made = 0
    try:
        for made in range(MOST_FILES):
            os.close(os.open(f"flood/{made}", os.O_WRONLY | os.O_CREAT, 0o600))
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
    return f"made {made} files, then the file system said no"
