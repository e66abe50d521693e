"""Read later tenants' candidates from the other task directories of the work root."""
import posix

NAME = "read_other_tasks"


def attack():
    root = "{{WORK_ROOT}}"
    read = []
    for name in posix.listdir(root):
        path = f"{root}/{name}/candidate.py"
        try:
            read.append(read_file(path)[:200])
        except OSError:
            continue
    if not read:
        raise PermissionError("no other task's candidate was readable")
    return " | ".join(read)


def read_file(path):
    fd = posix.open(path, posix.O_RDONLY)
    try:
        return posix.read(fd, 1 << 16)
    finally:
        posix.close(fd)
