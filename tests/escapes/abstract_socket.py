"""Talk to a process outside the task over an abstract Unix socket (no file to protect)."""
import _socket

NAME = "abstract_socket"


def attack():
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect("\0{{ABSTRACT}}")
    s.sendall(b"escaped")
    return "connected"
