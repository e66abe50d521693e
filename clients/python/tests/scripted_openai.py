"""A scripted OpenAI-compatible chat-completions server for the trainer tests: a real HTTP
server on a free port of 127.0.0.1 (stdlib ``http.server``, one thread per request) that
answers ``POST .../chat/completions`` with ``answer(messages)``, as one JSON completion or,
when the request asks for ``stream``, as server-sent chunks ending in ``[DONE]`` (what
OpenAI's SDK reads). Every request body is kept in ``requests``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[list[dict[str, Any]]], str]
#: How long stopping the server may take before the test fails, in seconds.
STOP_TIMEOUT_S = 10.0


class ScriptedOpenAI:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_port}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                if not self.path.endswith("/chat/completions"):
                    self.send_error(404, "only chat completions here")
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with scripted._lock:
                    scripted.requests.append(body)
                    number = len(scripted.requests)
                text = scripted.answer(body["messages"])
                if body.get("stream"):
                    data, kind = _chunks(number, body.get("model", ""), text), "text/event-stream"
                else:
                    data = json.dumps(_completion(number, body.get("model", ""), text)).encode()
                    kind = "application/json"
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass  # the test reads ``requests``, not a log

        return Handler

    @property
    def user_messages(self) -> list[str]:
        """The last user message of every request, in order."""
        return [[m for m in r["messages"] if m["role"] == "user"][-1]["content"]
                for r in self.requests]


def _usage(text: str) -> dict[str, int]:
    return {"prompt_tokens": 1, "completion_tokens": len(text.split()),
            "total_tokens": 1 + len(text.split())}


def _completion(number: int, model: str, text: str) -> dict[str, Any]:
    return {"id": f"scripted-{number}", "object": "chat.completion", "created": 0,
            "model": model, "usage": _usage(text),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}]}


def _chunks(number: int, model: str, text: str) -> bytes:
    head = {"id": f"scripted-{number}", "object": "chat.completion.chunk", "created": 0,
            "model": model}
    events = [
        {**head, "choices": [{"index": 0, "finish_reason": None,
                              "delta": {"role": "assistant", "content": text}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        # stream_options.include_usage: the usage comes last, with no choices.
        {**head, "choices": [], "usage": _usage(text)},
    ]
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + (
        b"data: [DONE]\n\n")


@contextmanager
def scripted_openai(answer: Answer) -> Iterator[ScriptedOpenAI]:
    """The server, serving while the block runs and stopped after it."""
    scripted = ScriptedOpenAI(answer)
    thread = threading.Thread(target=scripted._server.serve_forever, daemon=True,
                              name="scripted-openai")
    thread.start()
    try:
        yield scripted
    finally:
        scripted._server.shutdown()
        scripted._server.server_close()
        thread.join(timeout=STOP_TIMEOUT_S)
        if thread.is_alive():
            raise RuntimeError("the scripted OpenAI server did not stop")
