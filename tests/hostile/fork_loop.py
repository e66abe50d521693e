"""A runaway fork loop, uncaught: every child forks again (bounded at 20,000 starts so that a
broken limit cannot take the machine down; each lives 60 s). The task's process limit stops
it: `RESOURCE`."""
import os
import time

NAME = "fork_loop"
MOST_STARTS = 20_000


def hostile():
    for _ in range(MOST_STARTS):
        if os.fork() == 0:
            try:
                time.sleep(60)
            finally:
                os._exit(0)
    return f"{MOST_STARTS} processes started"
