"""A chain of 50,000 nested directories in the task directory, built bottom-up by renames (a
few seconds): the worker's recursive removal of the task directory overflowed its stack and
took `crucible up` down, and the start-up sweep met the chain again at every restart. The chain
itself is allowed (it is the task's own directory); the workers must survive removing it."""
import posix

NAME = "deep_directory_chain"
DEPTH = 50_000


def attack():
    base = posix.getcwd()
    posix.mkdir(f"{base}/chain-{{NONCE}}")
    for _ in range(DEPTH):
        posix.mkdir(f"{base}/wrap-{{NONCE}}")
        posix.rename(f"{base}/chain-{{NONCE}}", f"{base}/wrap-{{NONCE}}/d")
        posix.rename(f"{base}/wrap-{{NONCE}}", f"{base}/chain-{{NONCE}}")
    return f"{DEPTH} levels under {base}"
