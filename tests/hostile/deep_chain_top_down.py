"""50,000 nested directories built top-down (mkdir, then chdir into it; the path is far past
PATH_MAX, which only relative lookups reach). Allowed: `ok`, and the workers survive removing it."""
import posix

NAME = "deep_chain_top_down"
DEPTH = 50_000


def hostile():
    start = posix.getcwd()
    posix.mkdir("top")
    posix.chdir("top")
    for _ in range(DEPTH):
        posix.mkdir("d")
        posix.chdir("d")
    posix.chdir(start)
    return f"{DEPTH} levels"
