"""Lists the host's cgroup hierarchies, where other tasks' cgroup directories (named after
their workers and tasks) were listable. The mount layer masks them: it must see nothing there
(the test fails on a worker's or a task's cgroup name in any result)."""
import os

NAME = "cgroup_listing"


def hostile():
    found = []
    for top, dirs, _ in os.walk("/sys/fs/cgroup"):
        found.extend(os.path.join(top, d) for d in dirs)
        if len(found) > 200:
            break
    return f"{len(found)} cgroup directories: {found[:50]}"
