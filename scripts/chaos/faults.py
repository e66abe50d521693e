"""The chaos run's faults (chaos.py): the schedule of worker kills, Redis restarts, API kills
and the rolling restart, run on a thread of its own, and the /health probe that runs beside
it. Stdlib only.
"""

from __future__ import annotations

import random
import threading
import time

from cluster import Cluster, call, redis_up, wait_until


class Faults:
    """Runs the fault schedule on its own thread; records when each fault began and ended."""

    def __init__(self, cluster: Cluster, args, rng: random.Random):
        self.c, self.args, self.rng = cluster, args, rng
        plan = ["worker"] * args.kills
        for i in range(args.redis_restarts):
            plan.append("redis-term" if i % 2 == 0 else "redis-kill")
        plan += ["api"] * args.api_restarts
        rng.shuffle(plan)
        if args.rolling:
            # Last, so it meets a busy cluster that every other fault has already shaken.
            plan.append("rolling")
        self.plan = plan
        self.done: list[dict] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    # Set by main once the batch is in: the fraction of it that is terminal, or None while no
    # replica answers.
    progress = staticmethod(lambda: 0.0)

    def wait_turn(self, k: int) -> bool:
        """Waits for fault `k`'s turn; False when the run is stopping. Paced by progress (the
        default), fault k comes once a random point of the k-th of n equal slices of the first
        90 % of the batch is done, so the faults are spread over the whole run whatever its
        speed (and at least `--fault-interval-s` apart); paced by time, about every
        `--fault-interval-s`."""
        gap = self.rng.uniform(0.5, 1.5) * self.args.fault_interval_s
        if self.stop.wait(gap):
            return False
        if self.args.fault_pacing == "time":
            return True
        due = 0.9 * (k + self.rng.random()) / len(self.plan)
        while True:
            done = self.progress()
            if done is not None and done >= due:
                return True
            if self.stop.wait(0.2):
                return False

    def run(self) -> None:
        for k, fault in enumerate(self.plan):
            if not self.wait_turn(k):
                return
            began = time.time()
            detail = getattr(self, "_" + fault.replace("-", "_"))()
            self.done.append({"fault": fault, "began": began, "ended": time.time(), "detail": detail})
            print(f"[chaos] {fault}: {detail}", flush=True)

    def _worker(self) -> str:
        w = self.rng.choice(self.c.workers)
        w.kill9()
        w.start()
        return f"kill -9 {w.name}, restarted"

    def _redis_down(self, how: str) -> str:
        if how == "term":
            self.c.redis.terminate(30)
        else:
            self.c.redis.kill9()
        time.sleep(self.args.redis_outage_s)  # the outage itself, not a synchronisation
        self.c.redis.start()
        wait_until("redis to come back", 60, lambda: redis_up(self.c.redis_port))
        return f"{how}, {self.args.redis_outage_s:.0f} s down"

    def _redis_term(self) -> str:
        return self._redis_down("term")

    def _redis_kill(self) -> str:
        return self._redis_down("kill -9")

    def _api(self) -> str:
        i = self.rng.randrange(len(self.c.apis))
        self.c.apis[i].kill9()
        self.c.apis[i].start()
        port = self.c.api_ports[i]
        wait_until("the API to come back", 60, lambda: call(port, "GET", "/health")[0] == 200)
        return f"kill -9 api-{i}, restarted"

    def _rolling(self) -> str:
        clean = 0
        for i, api in enumerate(self.c.apis):
            clean += api.terminate(30)
            api.start()
            port = self.c.api_ports[i]
            wait_until("the API to come back", 60, lambda: call(port, "GET", "/health")[0] == 200)
        for w in self.c.workers:
            clean += w.terminate(self.args.drain_s + 10)
            w.start()
        total = len(self.c.apis) + len(self.c.workers)
        return f"SIGTERM + restart of {total} processes one by one, {clean} exited cleanly"


class HealthProbe:
    """Asks every live replica's /health twice a second. Any HTTP answer counts as answered (a
    503 while Redis is down is the right answer, counted as `degraded`); a failure is a replica
    that had answered since it last started, was not restarted or signalled meanwhile, and did
    not answer within 5 s (a replica still starting, draining or being killed is not a failure
    of /health). Each failure is kept with its time and replica, for the logs."""

    def __init__(self, cluster: Cluster):
        self.c = cluster
        self.latencies_ms: list[float] = []
        self.degraded = 0
        self.failures = 0
        self.failed_at: list[str] = []
        self.answered_since: dict[str, int] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.5):
            for port, api in zip(self.c.api_ports, self.c.apis):
                starts = api.starts
                if not api.alive() or api.stopping:
                    continue
                t0 = time.monotonic()
                status, _ = call(port, "GET", "/health", timeout=5)
                ms = (time.monotonic() - t0) * 1000
                if status:
                    self.latencies_ms.append(ms)
                    self.degraded += status != 200
                    self.answered_since[api.name] = starts
                elif (
                    api.alive()
                    and not api.stopping
                    and api.starts == starts
                    and self.answered_since.get(api.name) == starts
                ):
                    self.failures += 1
                    self.failed_at.append(f"{api.name} at {time.time():.3f}")
