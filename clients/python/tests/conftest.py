"""A real Crucible for the live tests: ``crucible up --cpu`` on a free port, started once per
session and stopped (its whole process group) at the end; and, for test_auth.py, another one
that requires bearer tokens (``secured``).

``$CRUCIBLE_BIN`` names the binary (default ``<repo>/target/debug/crucible``: build it with
``cargo build --bins``). Workers run candidates with ``$CRUCIBLE_PYTHON``, else with the
Python running the tests, which then needs torch and triton. The problem registry is
``<repo>/tests/rollouts/problems.jsonl``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
PROBLEMS = REPO / "tests" / "rollouts" / "problems.jsonl"
#: A CPU worker imports torch and triton in its warm template before it reports ready.
START_DEADLINE_S = 180.0


#: The admin token of the ``secured`` server.
ADMIN_TOKEN = "python-live-admin-token-0123456789abcdef"


@dataclass(frozen=True)
class Server:
    url: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"


def _wait_healthy(url: str, proc: subprocess.Popen, log: Path, need_worker: bool) -> None:
    """Polls ``GET /health`` until the API answers and, with ``need_worker``, a worker is ready
    (``status`` ``ok``), or the deadline."""
    deadline = time.monotonic() + START_DEADLINE_S
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"crucible exited with {proc.returncode}:\n{_log_tail(log)}")
        try:
            answer = httpx.get(f"{url}/health", timeout=5.0)
            last = answer.text
            ready = not need_worker or answer.json().get("status") == "ok"
            if answer.status_code == 200 and ready:
                return
        except httpx.TransportError as e:
            last = repr(e)
        time.sleep(0.25)
    pytest.fail(
        f"crucible not healthy after {START_DEADLINE_S} s (last: {last}):\n{_log_tail(log)}"
    )


def _up(
    tmp_path_factory: pytest.TempPathFactory, extra_env: dict[str, str], need_worker: bool
) -> Iterator[Server]:
    binary = Path(os.environ.get("CRUCIBLE_BIN", REPO / "target" / "debug" / "crucible"))
    if not binary.exists():
        pytest.fail(f"no crucible binary at {binary}: run `cargo build --bins` or set CRUCIBLE_BIN")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    drop = {"REDIS_URL", "CRUCIBLE_AUTH", "CRUCIBLE_ADMIN_TOKEN", "CRUCIBLE_TOKEN"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.setdefault("CRUCIBLE_PYTHON", sys.executable)
    env["CRUCIBLE_CPU_THREADS"] = "1"
    env["CRUCIBLE_PROBLEMS"] = str(PROBLEMS)
    env.update(extra_env)
    log = tmp_path_factory.mktemp("crucible") / "crucible.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(binary), "up", "--cpu", "--bind", f"127.0.0.1:{port}"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            # Its own process group: the API's workers and their Python children go with it.
            start_new_session=True,
        )
    try:
        _wait_healthy(url, proc, log, need_worker)
        yield Server(url=url)
    finally:
        _stop(proc)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Single-user mode: on a loopback address authentication is off by default."""
    yield from _up(tmp_path_factory, {}, need_worker=True)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server that requires bearer tokens (its tests need no worker: they evaluate nothing)."""
    yield from _up(
        tmp_path_factory,
        {"CRUCIBLE_AUTH": "required", "CRUCIBLE_ADMIN_TOKEN": ADMIN_TOKEN},
        need_worker=False,
    )


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL if it is not gone in 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass  # the group is gone already
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
