"""50,000 nested directories built bottom-up by renames (a few seconds): a recursive removal
overflowed the worker's stack and took `crucible up` down, at every restart again. Allowed
(it is the task's own directory): the verdict stays `ok`, the workers must survive removing it."""
import posix

NAME = "deep_chain_bottom_up"
DEPTH = 50_000


def hostile():
    base = posix.getcwd()
    posix.mkdir(f"{base}/chain")
    for _ in range(DEPTH):
        posix.mkdir(f"{base}/wrap")
        posix.rename(f"{base}/chain", f"{base}/wrap/d")
        posix.rename(f"{base}/wrap", f"{base}/chain")
    return f"{DEPTH} levels"
