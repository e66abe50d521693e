"""10,000 nested directories built top-down (mkdir, then chdir into it; the path, 20 KB, is far
past PATH_MAX, which only relative lookups reach). Allowed: `ok`, and the workers survive
removing it.

Not 50,000 as deep_chain_bottom_up: Landlock checks each mkdir against the rules of every
directory up to the root, so a chain built top-down costs the square of its depth. On the CI
machine of 2026-12-02 (kernel 6.18, Landlock ABI 7) 20,000 levels took 39 s under a Landlock
ruleset against 1.7 s without, and 50,000 did not finish within the task's 300 s. The deeper
chain is bottom_up's (renames keep each step shallow) and the removal's unit test's."""
import posix

NAME = "deep_chain_top_down"
DEPTH = 10_000


def hostile():
    start = posix.getcwd()
    posix.mkdir("top")
    posix.chdir("top")
    for _ in range(DEPTH):
        posix.mkdir("d")
        posix.chdir("d")
    posix.chdir(start)
    return f"{DEPTH} levels"
