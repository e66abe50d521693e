"""Crucible sandbox: the OS layers around every process that runs a task's code.

The worker decides the policy (gpu-worker/src/sandbox/: who the task runs as, which namespaces,
which files, which system calls) and hands this module a plan in spec.json plus a Landlock
ruleset it built (an inherited file descriptor). This module only enters the plan, in this
order, before the task's first line of untrusted code (the reference or the candidate) runs:

    task child ("shim", as the worker or template started it)
      1. joins the task's cgroups                      (limits, kill, OOM evidence)
         and pins itself to its cores                  (device or CPU-stage cores)
      2. unshares pid, mount, network, ipc (+ user)   (namespaces)
      3. forks the judge, then only waits and mirrors its end
    judge (pid 1 of the task's pid namespace)
      4. private mounts: a fresh /proc, tmpfs /dev/shm and /tmp, masked private homes
      5. loopback up in its empty network namespace
      6. Landlock rules for the fresh mounts
      7. unprivileged identity (a sandbox uid; in a user namespace, no capabilities)
      8. no_new_privs, the Landlock domain, the judge's seccomp filter
    runner (forked by the judge for the candidate: Runner in runner.py)
      9. a nested Landlock domain (it cannot signal or trace the judge) and the runner's
         seccomp filter (stricter: no SIGKILL sent, so a runner killed by SIGKILL was killed
         from outside)

Any step that fails raises SandboxError naming its layer; judge.py reports it on fd 3
(`sandbox_failed`) and exits with status 3 (a fault of this node, retried elsewhere): a child
never goes on unsandboxed.

May import: the standard library only (no harness module).
"""
import base64
import ctypes
import errno
import fcntl
import os
import resource
import signal
import socket
import stat
import struct
import sys

SETUP_FAILED = 3   # harness.py's exit status for "could not even set up"

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = {"mount": CLONE_NEWNS, "ipc": CLONE_NEWIPC, "pid": CLONE_NEWPID,
                   "network": CLONE_NEWNET, "user": CLONE_NEWUSER}

MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
PR_CAPBSET_DROP = 24
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
CAP_LAST_CAP_GUESS = 63

# x86_64 and aarch64 numbers of the Landlock system calls (the same on both).
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446
LANDLOCK_RULE_PATH_BENEATH = 1
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_void_p]


class SandboxError(Exception):
    """A step of the plan could not be applied; `layer` names the layer it belongs to."""

    def __init__(self, layer, message):
        super().__init__(f"{layer}: {message}")
        self.layer = layer
        self.message = message


class _Layer:
    """`with _Layer("network"):` turns any failure inside into SandboxError("network", ...)."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if exc is None or isinstance(exc, SandboxError):
            return False
        if isinstance(exc, (OSError, ValueError, KeyError, TypeError)):
            raise SandboxError(self.name, f"{type(exc).__name__}: {exc}") from exc
        return False


def _check(result, what):
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def _prctl(option, arg2=0, arg3=0):
    return _check(_libc.prctl(option, ctypes.c_ulong(arg2), ctypes.c_ulong(arg3), 0, 0),
                  f"prctl({option})")


# ---------------------------------------------------------------------------------------------
# The task child (shim): cgroups, namespaces, the judge
# ---------------------------------------------------------------------------------------------

def enter_cores(plan):
    """Pins the process to the plan's cores (one thread yet; the filter keeps it there) and,
    for a CPU stage on lent device cores, drops it to SCHED_IDLE: every other thread on those
    cores preempts it. RLIMIT_NICE 0 first, so that nothing it starts can leave SCHED_IDLE
    again (that needs a nice ceiling of 20, or CAP_SYS_NICE in the host's namespace)."""
    if plan.get("cpus"):
        with _Layer("cores"):
            os.sched_setaffinity(0, plan["cpus"])
    if plan.get("idle_priority"):
        with _Layer("cores"):
            resource.setrlimit(resource.RLIMIT_NICE, (0, 0))
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def enter_task(plan):
    """Enters the plan; returns in the judge (pid 1 of the task's namespaces, every layer on)
    the names of the layers entered. The calling process becomes the shim and never returns
    from here. Raises SandboxError (in whichever process failed)."""
    namespaces = plan.get("namespaces") or []
    # Pinned before it joins its cgroup: from the moment the worker can list a thread there,
    # the thread's cores are the worker's to move (process/lending.rs), never again its own.
    enter_cores(plan)
    with _Layer("cgroup"):
        join_cgroups(plan.get("cgroup_procs") or [])
    if "user" in namespaces:
        with _Layer("user"):
            unshare_namespaces(["user"])
            map_identity(plan["uid"], plan["gid"])
    for layer, names in (("mount", ["mount", "ipc"]), ("pid", ["pid"]),
                         ("network", ["network"])):
        wanted = [n for n in names if n in namespaces]
        if wanted:
            with _Layer(layer):
                unshare_namespaces(wanted)
    if "pid" in namespaces:
        with _Layer("pid"):
            _become_judge()   # the shim stays behind in there
    return prepare_judge(plan)


def join_cgroups(procs_files):
    """Moves this process into the task's cgroup of each hierarchy (while it may still write
    there); everything it starts is counted, limited and killed there."""
    for path in procs_files:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)


def unshare_namespaces(names):
    flags = 0
    for name in names:
        flags |= NAMESPACE_FLAGS[name]
    if flags:
        _check(_libc.unshare(flags), f"unshare({', '.join(names)})")
    return flags


def map_identity(uid, gid):
    """In a new user namespace (a worker that is not root): the worker's own ids map to
    themselves, the only mapping an unprivileged process may write."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                       ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _become_judge():
    """The first process of a new pid namespace is its init: fork it, and stay behind as the
    shim that the worker supervises, mirroring the judge's end. When the judge (pid 1) ends,
    the kernel kills everything left in its namespace: nothing of the task outlives it."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        return
    # The judge holds the protocol channel, the gate and the ruleset: the shim must not, or
    # their readers would wait for the shim too.
    os.closerange(3, 1 << 16)
    _mirror(pid)


def _mirror(pid):
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(SETUP_FAILED)
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    sig = os.WTERMSIG(status)
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


# ---------------------------------------------------------------------------------------------
# The judge: mounts, network, identity, Landlock, seccomp
# ---------------------------------------------------------------------------------------------

def prepare_judge(plan):
    """Steps 4-8 in the judge; returns the names of the layers entered."""
    namespaces = set(plan.get("namespaces") or [])
    applied = [n for n in ("network", "pid", "mount") if n in namespaces]
    ruleset = plan.get("landlock")
    if "mount" in namespaces:
        private_mounts(plan, ruleset)
    if "network" in namespaces:
        with _Layer("network"):
            loopback_up()
    if plan.get("identity") != "none":
        with _Layer("user"):
            drop_identity(plan)
        applied.append("user")
    with _Layer("landlock"):
        # Cleared by the identity change; the judge dies with the shim, which dies with the
        # worker.
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        if ruleset is not None:
            landlock_restrict(ruleset["fd"])
            applied.append("landlock")
    if plan.get("seccomp"):
        with _Layer("seccomp"):
            for program in plan["seccomp"]["judge"]:
                seccomp_install(program)
        applied.append("seccomp")
    if plan.get("cgroup_procs"):
        applied.append("cgroup")
    return applied


def private_mounts(plan, ruleset):
    """Mounts only this task sees: a fresh /proc for its pid namespace, and each private
    mount of the plan (bounded tmpfs on /dev/shm and /tmp, on homes the sandbox user could not
    traverse, and an empty one over the host's cgroups, joined before) with the paths it must
    still see bound back in. Landlock rules are added for
    the fresh ones: a rule follows an inode, and these are new."""
    with _Layer("mount"):
        _check(_libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None),
               "mount --make-rprivate /")
    if "pid" in (plan.get("namespaces") or []):
        with _Layer("pid"):
            _mount(b"proc", "/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        if ruleset is not None:
            with _Layer("landlock"):
                landlock_add_path(ruleset["fd"], "/proc", ruleset["proc_access"])
    with _Layer("mount"):
        _tmpfs_mounts(plan, ruleset)


def _tmpfs_mounts(plan, ruleset):
    for mount in plan.get("private_mounts") or []:
        kept = [(p, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p in mount.get("expose") or []]
        options = f"mode={mount['mode']},size={mount['size_bytes']},nr_inodes={mount['inodes']}"
        if mount.get("owned"):
            options += f",uid={plan['uid']},gid={plan['gid']}"
        _mount(b"tmpfs", mount["path"], b"tmpfs", MS_NOSUID | MS_NODEV, options.encode())
        for path, fd in kept:
            os.makedirs(path, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}".encode(), path, None, MS_BIND | MS_REC)
            os.close(fd)
        if mount.get("writable") and ruleset is not None:
            landlock_add_path(ruleset["fd"], mount["path"], ruleset["rw_access"])


def _mount(source, target, fstype, flags, data=None):
    _check(_libc.mount(source, target.encode(), fstype, flags, data), f"mount {target}")


def loopback_up():
    """The task's network namespace has only a loopback, down: bring it up, so local
    addresses behave as a kernel expects while nothing outside is reachable."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        request = struct.pack("16sh14x", b"lo", 0)
        flags = struct.unpack("16sh14x", fcntl.ioctl(s, SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh14x", b"lo", flags | IFF_UP))
    finally:
        s.close()


def drop_identity(plan):
    """Root worker: become the plan's sandbox user (no supplementary groups, no capabilities).
    Unprivileged worker (user namespace): stay the worker's uid and give up every capability
    the namespace granted."""
    if plan.get("identity") == "userns":
        _drop_capabilities()
        return
    uid, gid = plan["uid"], plan["gid"]
    if uid == 0 or gid == 0:
        raise ValueError("the sandbox user must not be root")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise ValueError("identity change did not take")


def _drop_capabilities():
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    for cap in range(CAP_LAST_CAP_GUESS + 1):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 and ctypes.get_errno() == errno.EINVAL:
            break   # past the kernel's last capability
    header = struct.pack("Ii", 0x20080522, 0)   # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)                              # effective, permitted, inheritable: none
    nr = SYS_CAPSET.get(os.uname().machine)
    if nr is None:
        raise ValueError(f"capset: unknown architecture {os.uname().machine}")
    _check(_libc.syscall(nr, ctypes.c_char_p(header), ctypes.c_char_p(data)), "capset")


def landlock_add_path(ruleset_fd, path, access):
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        attr = ctypes.create_string_buffer(struct.pack("=Qi", access, fd))
        _check(_libc.syscall(SYS_LANDLOCK_ADD_RULE, ruleset_fd, LANDLOCK_RULE_PATH_BENEATH, attr,
                             0), f"landlock rule for {path}")
    finally:
        os.close(fd)


def landlock_restrict(ruleset_fd):
    """Enters (or, called again, nests) the Landlock domain of the worker's ruleset:
    files beyond its rules, signals to and tracing of processes outside the domain, abstract
    Unix sockets outside it and TCP are refused from now on, for this process and its
    descendants."""
    _check(_libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset_fd, 0), "landlock_restrict_self")


def seccomp_install(program_b64):
    """Installs a seccomp filter the worker compiled (classic BPF, 8 bytes per instruction)."""
    program = base64.b64decode(program_b64)
    if not program or len(program) % 8:
        raise ValueError("malformed seccomp program")
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HxxxxxxP", len(program) // 8, ctypes.addressof(buf))
    _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER,
                       ctypes.c_char_p(fprog), 0, 0), "seccomp filter")


# ---------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------

def enter_runner(plan):
    """Step 9, in the runner right after the judge forked it (before any candidate code)."""
    ruleset = plan.get("landlock")
    if ruleset is not None:
        with _Layer("landlock"):
            landlock_restrict(ruleset["fd"])
    if plan.get("seccomp"):
        with _Layer("seccomp"):
            for program in plan["seccomp"]["runner"]:
                seccomp_install(program)


def close_ruleset(plan):
    ruleset = plan.get("landlock")
    if ruleset is not None:
        try:
            os.close(ruleset["fd"])
        except OSError:
            pass


def status_of(pid):
    """The fields of /proc/<pid>/status the judge checks about its runner."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("Uid", "Gid", "NoNewPrivs", "Seccomp", "Seccomp_filters", "CapEff",
                       "NSpid"):
                fields[key] = value.split()
    return fields


def check_runner(pid, plan):
    """The runner's sandbox as the kernel reports it, checked before the candidate runs:
    a runner that is not where the plan put it is a fault of this node."""
    fields = status_of(pid)
    problems = []
    if plan.get("identity") != "userns" and any(int(u) != plan["uid"] for u in fields["Uid"]):
        problems.append(f"uid {fields['Uid']}")
    if fields.get("NoNewPrivs") != ["1"]:
        problems.append("no_new_privs off")
    if plan.get("seccomp") and fields.get("Seccomp") != ["2"]:
        problems.append(f"seccomp mode {fields.get('Seccomp')}")
    if any(int(c, 16) for c in fields.get("CapEff", ["0"])):
        problems.append(f"capabilities {fields['CapEff']}")
    if problems:
        raise SandboxError("runner", "not sandboxed: " + ", ".join(problems))
