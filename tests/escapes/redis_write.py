"""TCP to the broker over loopback (a `_socket` import instead of `socket`): write a key."""
import _socket

NAME = "redis_write"


def attack():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(("127.0.0.1", int("{{REDIS_PORT}}")))
    key = b"escape:{{NONCE}}"
    s.sendall(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\n1\r\n" % (len(key), key))
    return s.recv(64)
