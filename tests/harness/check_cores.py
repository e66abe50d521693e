"""A task child's cores and priority (gpu-worker/harness/sandbox.py, enter_cores), for real, in
forked processes: pinned to the plan's cores; a CPU stage on lent device cores at SCHED_IDLE,
with what it starts there too, and unable to leave it once it has lost its privileges (as the
sandbox's setuid or user-namespace identity leaves it); a plan without the flag keeps the
normal policy. Run by scripts/test.sh; exit 1 on the first failure."""
import importlib.util
import json
import os
import resource
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "gpu-worker", "harness", "harness.py")

# Loading the entry point registers every harness module as crucible_<name>.
entry = importlib.util.spec_from_file_location("crucible_harness_entry", HARNESS)
entry.loader.exec_module(importlib.util.module_from_spec(entry))
from crucible_sandbox import enter_cores  # noqa: E402

NOBODY = 65534


def in_child(plan):
    """enter_cores(plan) in a fork, then as an unprivileged user: what the process sees."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        seen = {}
        try:
            enter_cores(plan)
            if os.geteuid() == 0:   # the sandbox's setuid identity: every capability gone
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            seen["cpus"] = sorted(os.sched_getaffinity(0))
            seen["policy"] = os.sched_getscheduler(0)
            seen["nice_limit"] = list(resource.getrlimit(resource.RLIMIT_NICE))
            grandchild = os.fork()
            if grandchild == 0:
                os._exit(0 if os.sched_getscheduler(0) == seen["policy"] else 3)
            seen["inherited"] = os.waitpid(grandchild, 0)[1] == 0
            try:
                os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
                seen["raised"] = "allowed"
            except PermissionError:
                seen["raised"] = "EPERM"
        except Exception as e:   # reported, not raised: the fork must not run the checks
            seen["error"] = f"{type(e).__name__}: {e}"
        os.write(write_end, json.dumps(seen).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        seen = json.loads(f.read() or "{}")
    os.waitpid(pid, 0)
    return seen


def main():
    cores = sorted(os.sched_getaffinity(0))
    one = [cores[-1]]
    failures = []

    def check(cond, what):
        print(("ok   " if cond else "FAIL ") + what)
        if not cond:
            failures.append(what)

    idle = in_child({"cpus": one, "idle_priority": True})
    check("error" not in idle, f"a lent CPU stage enters its cores ({idle.get('error')})")
    check(idle.get("cpus") == one, f"pinned to {one}: {idle.get('cpus')}")
    check(idle.get("policy") == os.SCHED_IDLE, f"at SCHED_IDLE: policy {idle.get('policy')}")
    check(idle.get("inherited") is True, "what it starts runs at SCHED_IDLE too")
    check(idle.get("nice_limit") == [0, 0], f"RLIMIT_NICE 0: {idle.get('nice_limit')}")
    check(idle.get("raised") == "EPERM", f"cannot leave SCHED_IDLE: {idle.get('raised')}")

    normal = in_child({"cpus": one})
    check("error" not in normal, f"a device child enters its cores ({normal.get('error')})")
    check(normal.get("policy") == os.SCHED_OTHER, f"normal policy: {normal.get('policy')}")
    check(normal.get("cpus") == one, f"pinned to {one}: {normal.get('cpus')}")

    print(f"check_cores: {'ok' if not failures else f'{len(failures)} failed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
