"""Reads every descriptor it was born with beyond stdin, stdout and stderr: whatever the
worker's own parent left open without close-on-exec (the test starts the workers holding a
secret file on fds 10 and 251) must not reach a task. Prints what it read; the test looks for
the secret in every result."""
import os
import stat

NAME = "inherited_descriptors"


def hostile():
    seen = []
    for fd in range(3, 1024):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        kind = "file" if stat.S_ISREG(st.st_mode) else "other"
        text = ""
        if kind == "file":
            try:
                text = os.pread(fd, 200, 0).decode(errors="replace")
            except OSError as e:
                text = f"unreadable ({e.errno})"
        seen.append(f"{fd}:{kind}:{text}")
    return f"descriptors {seen}"
