"""Outlive the task: double fork, setsid, and a process that listens on a port for an hour
(a marker in its command line, for the test to look for)."""
import posix
import sys

NAME = "daemon_listen"
DAEMON = ("import _socket, time\n"
          "s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)\n"
          "s.bind(('0.0.0.0', {{DAEMON_PORT}}))\n"
          "s.listen(8)\n"
          "time.sleep(3600)\n")


def attack():
    pid = posix.fork()
    if pid == 0:
        posix.setsid()
        if posix.fork() == 0:
            posix.execv(sys.executable, [sys.executable, "-c", DAEMON,
                                         "crucible-escape-{{NONCE}}"])
        posix._exit(0)
    posix.waitpid(pid, 0)
    return "daemon started"
