"""The chaos run's cluster (chaos.py): redis-server with AOF, the API replicas and the CPU
workers as restartable processes with their logs, and the HTTP helper every part of the run
asks the API with. Stdlib only. scripts/soak/soak.py starts its cluster from here too.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(port: int, method: str, path: str, body=None, timeout: float = 30.0):
    """(status, json) of one request; status 0 when the server could not be reached."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"content-type": "application/json"} if data else {},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        try:
            return e.code, json.loads(e.read() or b"null")
        except ValueError:
            return e.code, None
    except (OSError, ValueError):
        return 0, None


class Service:
    """One process of the cluster, restartable under the same name and log."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path):
        self.name, self.argv, self.env = name, argv, env
        self.log_path = logs / f"{name}.log"
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        # Set before a signal is sent, cleared at the next start: a process on its way out
        # (draining, or killed) is not a failure of /health when it stops answering.
        self.stopping = False

    def start(self) -> None:
        log = open(self.log_path, "ab")
        log.write(f"\n=== start {self.starts} at {time.time():.3f} ===\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.starts += 1
        self.stopping = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive():
            self.stopping = True
            self.proc.kill()
            self.proc.wait()

    def terminate(self, timeout: float) -> bool:
        """SIGTERM, then SIGKILL after `timeout`; True when it exited by itself."""
        if not self.alive():
            return True
        self.stopping = True
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return False


def wait_until(what: str, deadline_s: float, check) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} within {deadline_s:.0f} s")


def redis_up(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class Cluster:
    def __init__(self, args, logs: Path):
        self.args, self.logs = args, logs
        bins = Path(args.bin_dir)
        self.redis_port = free_port()
        redis_dir = logs / "redis"
        redis_dir.mkdir(parents=True, exist_ok=True)
        base_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/root"),
            "NO_COLOR": "1",
            "RUST_LOG": os.environ.get("RUST_LOG", "info"),
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}",
            "CRUCIBLE_LEASE_TTL_MS": str(args.lease_ms),
            "CRUCIBLE_QUEUE_CAP": str(max(10_000, args.tasks * 2)),
        }
        if os.environ.get("CRUCIBLE_PYTHON"):
            base_env["CRUCIBLE_PYTHON"] = os.environ["CRUCIBLE_PYTHON"]
        self.redis = Service(
            "redis",
            [
                args.redis_server,
                "--port", str(self.redis_port), "--bind", "127.0.0.1",
                "--dir", str(redis_dir), "--appendonly", "yes", "--appendfsync", "everysec",
                "--save", "", "--maxmemory-policy", "noeviction",
            ],
            {"PATH": base_env["PATH"]},
            logs,
        )
        self.api_ports = [free_port() for _ in range(args.apis)]
        self.apis = [
            Service(
                f"api-{i}",
                [str(bins / "crucible-api"), "--bind", f"127.0.0.1:{port}"],
                base_env,
                logs,
            )
            for i, port in enumerate(self.api_ports)
        ]
        self.work_dirs = [logs / f"work-{i}" for i in range(args.workers)]
        self.workers = []
        for i, work in enumerate(self.work_dirs):
            work.mkdir(parents=True, exist_ok=True)
            env = dict(base_env, HOSTNAME=f"chaos-node-{i}", CRUCIBLE_WORK_DIR=str(work))
            # The first `--gpu-workers` run on GPUs 0, 1, ...; the rest on the CPU.
            device = ["--gpu", str(i)] if i < args.gpu_workers else ["--cpu"]
            argv = [str(bins / "crucible-worker"), *device, "--metrics-addr", "off"]
            self.workers.append(Service(f"worker-{i}", argv, env, logs))

    def start(self) -> None:
        self.redis.start()
        wait_until("redis to answer", 30, lambda: redis_up(self.redis_port))
        for api in self.apis:
            api.start()
        for port in self.api_ports:
            wait_until(f"the API on {port}", 60, lambda p=port: call(p, "GET", "/health")[0] == 200)
        for w in self.workers:
            w.start()
        wait_until(
            f"{len(self.workers)} workers to register",
            300,
            lambda: (call(self.api_ports[0], "GET", "/health")[1] or {}).get("workers_alive", 0)
            >= len(self.workers),
        )

    def stop(self) -> None:
        for w in self.workers:
            w.terminate(self.args.drain_s + 10)
        for a in self.apis:
            a.terminate(10)
        self.redis.terminate(10)

    def live_api(self) -> int | None:
        ports = [p for p, a in zip(self.api_ports, self.apis) if a.alive()]
        return random.choice(ports) if ports else None
