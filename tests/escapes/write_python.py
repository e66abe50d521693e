"""Plant a module in the interpreter's site-packages, to run in every later task."""
import posix
import sysconfig

NAME = "write_python"


def attack():
    path = sysconfig.get_paths()["purelib"] + "/crucible_escape_{{NONCE}}.py"
    fd = posix.open(path, posix.O_WRONLY | posix.O_CREAT, 0o644)
    posix.write(fd, b"print('planted')\n")
    posix.close(fd)
    return path
