"""Fills /tmp (a tmpfs of the task's own) in 64 MiB writes across files, uncaught: its size
limit or the task's memory limit stops it, `RESOURCE`."""
NAME = "tmp_fill"
CHUNK = b"\xef" * (64 << 20)


def hostile():
    i = 0
    while True:
        with open(f"/tmp/filler-{i}", "wb") as f:
            for _ in range(8):
                f.write(CHUNK)
                f.flush()
        i += 1
