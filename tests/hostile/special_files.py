"""Leaves a FIFO, a listening socket, links to / and to /etc/passwd and a directory it locked
(mode 000) in its task directory: the trusted side removes them without opening, following or
blocking on any (`ok`; the test checks /etc/passwd and the workers afterwards)."""
import os
import socket

NAME = "special_files"


def hostile():
    os.mkfifo("pipe.so")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind("socket.so")
    s.listen(1)
    os.symlink("/", "root.so")
    os.symlink("/etc/passwd", "passwd.so")
    os.makedirs("locked/inner")
    with open("locked/inner/f", "w") as f:
        f.write("x")
    os.chmod("locked", 0)
    return "left a fifo, a socket, two links and a locked directory"
