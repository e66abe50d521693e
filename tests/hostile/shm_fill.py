"""Fills /dev/shm (a tmpfs: memory, out of sight of a watchdog that reads resident sets) in
512 MiB files, uncaught: its size limit or the task's memory limit stops it (the tmpfs's pages
are charged to the task's memory cgroup), either way `RESOURCE`."""
NAME = "shm_fill"
CHUNK = b"\xcd" * (64 << 20)


def hostile():
    i = 0
    while True:
        with open(f"/dev/shm/filler-{i}", "wb") as f:
            for _ in range(8):
                f.write(CHUNK)
                f.flush()
        i += 1
