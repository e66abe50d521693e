"""Kill the judge that is checking us (SIGKILL), hoping for a retry instead of a verdict."""
import posix

NAME = "kill_judge"


def attack():
    posix.kill(posix.getppid() or 1, 9)
    return "judge signalled"
