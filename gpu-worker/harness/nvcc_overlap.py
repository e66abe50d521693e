"""nvcc with its host and device front ends side by side: the same commands nvcc runs, in two
chains at once instead of one after the other.

nvcc compiles a .cu file by running other programs in turn (`nvcc --dryrun` lists them): the
host side (the preprocessor, then cudafe++, EDG's front end, which splits host from device
code), the device side (the preprocessor again, cicc, ptxas, fatbinary), then the host
compiler on what cudafe++ wrote, which includes the device code's fatbinary. On a translation
unit that includes torch/extension.h, one cold build on an H200 host: cudafe++ 20.5 s, the
host compiler 17.2 s, cicc 13.3 s, each preprocessing 2.4 s (docs/BENCHMARKS.md, nvcc's own
--time). The only thing the device side takes from the host side is the module id (a name for
the file's anonymous namespace, written by cudafe++ and read by cicc); given a module id made
first, the two sides run at once, and the host compiler starts when both are done: ~40 s
instead of ~56 s, no command, flag or input changed, the object the same but for that name.

What is printed and the exit status are nvcc's: each command's output is kept and replayed in
nvcc's order, up to and including the first command that fails in that order (a later one that
also failed, such as cicc repeating cudafe++'s error, is not shown). Any shape of --dryrun this
does not know (relocatable device code, a device link, options nvcc acts on itself) runs the
real nvcc instead, so a build is never different, only sometimes not faster.

Run by a task's CUDA builds, as the candidate: torch's ninja file runs $PYTORCH_NVCC, which
builds.py points here (`python -I -B nvcc_overlap.py <nvcc> <nvcc's arguments>`); it can do
nothing the candidate's own process could not. Imports no module of ours.

Owns: overlap_command(), the --dryrun plan (parse_plan), the module id, the dependency file.
"""
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading

# nvcc's options that make it do something other than the plain compile planned here, or that
# it carries out itself (no command in --dryrun does them): those builds run the real nvcc.
REFUSED_OPTIONS = (
    "--dryrun", "-dryrun", "--keep", "-keep", "--keep-dir", "-keep-dir", "--save-temps",
    "-save-temps", "--time", "-time", "--relocatable-device-code", "-rdc", "--device-c", "-dc",
    "--device-link", "-dlink", "--device-w", "-dw", "--lib", "-lib", "--link", "-link",
    "--run", "-run", "--preprocess", "-E", "--generate-dependencies", "-M",
    "--generate-nonsystem-dependencies", "-MM", "--generate-nonsystem-dependencies-with-compile",
    "-MMD", "--dependency-target-name", "-MT", "--ptx", "-ptx", "--cubin", "-cubin",
    "--fatbin", "-fatbin", "--cuda", "-cuda", "--threads", "-t", "--split-compile",
    "-split-compile", "--list-gpu-arch", "--list-gpu-code", "--version", "-V", "--help", "-h",
    "--optix-ir", "-optix-ir", "--lto", "-dlto", "--options-file", "-optf",
)
# The programs of nvcc's device chain (any other program there: the real nvcc).
DEVICE_TOOLS = ("cicc", "ptxas", "fatbinary", "rm")
# nvcc's own step of an -MD build: writing the dependency file it has filtered.
FILTER_LINE = re.compile(r"^-- Filter Dependencies -- > (.+)$")
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
SHELL_OPERATORS = ("|", "||", "&", "&&", ";", "<", ">", ">>", "2>", "2>&1", "(", ")")
# A preprocessor's line marker: `# 12 "path" flags`.
LINE_MARKER = re.compile(rb'^# \d+ "((?:[^"\\]|\\.)*)"', re.MULTILINE)
ESCAPED = re.compile(r"\\(.)")


# The task's host-memory bound in bytes, as the worker tells its children (task/stage.rs).
TASK_MEMORY_VAR = "CRUCIBLE_TASK_MEMORY_BYTES"
# What a build needs for the two front ends at once. One torch-including build (nvcc 13.5,
# torch 2.15, 2-core CPU host), its processes' peaks: cicc 3.0 GiB, cudafe++ 2.2 GiB, the
# bindings' cc1plus 1.5 GiB, the runner 0.5 GiB; the whole tree's peak 7.1 GiB with the overlap
# against 4.3 GiB torch's way. Below this a task's build runs nvcc as it is, so the overlap can
# never be what takes a build over the task's memory.
MEMORY_FOR_OVERLAP = 8 << 30
# This file where it was loaded from. A task's process loads it from its own directory, except
# one forked from the warm template, which loaded it from the template's (hidden from tasks).
SCRIPT = os.path.abspath(__file__)


def overlap_command(python, nvcc, script=SCRIPT):
    """What $PYTORCH_NVCC is set to (torch writes it into build.ninja as it is, run by ninja
    through sh): the copy of this file at `script` run by `python` in front of `nvcc`."""
    return shlex.join([python, "-I", "-B", script, nvcc])


def memory_allows(environ):
    """Pure: whether a task's memory bound (TASK_MEMORY_VAR in `environ`) holds both front ends
    at once; no bound told (a build outside the service) allows it, a bound that does not
    parse does not."""
    told = environ.get(TASK_MEMORY_VAR)
    if told is None:
        return True
    try:
        return int(told) >= MEMORY_FOR_OVERLAP
    except ValueError:
        return False


def refuses(args):
    """Pure: whether nvcc's arguments `args` ask for more than one compile of one file (`-c`
    and one output), or for something nvcc does itself."""
    if "-c" not in args and "--compile" not in args:
        return True
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in REFUSED_OPTIONS:
            return True
        if arg.startswith("-M") and arg not in ("-MD", "-MF"):
            return True
    return False


def _option_value(argv, option):
    """The word after `option` in `argv`, if any."""
    return argv[argv.index(option) + 1] if option in argv[:-1] else None


class Step:
    """One command of nvcc's plan: its place in nvcc's order and its argv (no shell)."""

    def __init__(self, index, argv):
        self.index = index
        self.argv = argv

    @property
    def tool(self):
        return os.path.basename(self.argv[0])

    def output(self):
        """The file after -o, if any."""
        return _option_value(self.argv, "-o")


class Plan:
    """nvcc's --dryrun as two chains and a last step: host (the host preprocessing and
    cudafe++), device (the device preprocessing, cicc, ptxas, fatbinary), then the host
    compile; the module id both front ends read; the dependency file -MD asks for (None
    without -MD) and how many steps nvcc runs before it writes that file."""

    def __init__(self, env, host, device, final, module_id_file, depfile, depfile_after=0):
        self.env = env
        self.host = host
        self.device = device
        self.final = final
        self.module_id_file = module_id_file
        self.depfile = depfile
        self.depfile_after = depfile_after


def _expand(token, env):
    """`token` with nvcc's variables ($CICC_PATH) replaced; None for an unknown one."""
    unknown = []

    def value(match):
        name = match.group(1) or match.group(2)
        if name not in env:
            unknown.append(name)
            return ""
        return env[name]

    expanded = VARIABLE.sub(value, token)
    return None if unknown else expanded


def parse_plan(dryrun):
    """Pure: the Plan of nvcc's `--dryrun` text (its stderr), or None for a shape other than one
    host chain, one device chain and one host compile last, joined only by a module id."""
    env, steps, depfile, depfile_after = {}, [], None, 0
    for line in dryrun.splitlines():
        if not line.startswith("#$ "):
            continue
        line = line[3:].strip()
        assigned = ASSIGNMENT.match(line)
        filtered = FILTER_LINE.match(line)
        if filtered:
            if depfile is not None:
                return None
            depfile, depfile_after = filtered.group(1).strip(), len(steps)
            continue
        if assigned:
            env[assigned.group(1)] = assigned.group(2)
            continue
        try:
            tokens = shlex.split(line)
        except ValueError:
            return None
        argv = [_expand(t, env) for t in tokens]
        if not argv or any(t is None or t in SHELL_OPERATORS for t in argv):
            return None
        steps.append(Step(len(steps), argv))
    front_ends = [s for s in steps if s.tool == "cudafe++"]
    if len(front_ends) != 1 or not steps or "-c" not in steps[-1].argv:
        return None
    front_end, final = front_ends[0], steps[-1]
    module_id_file = _option_value(front_end.argv, "--module_id_file_name")
    if module_id_file is None or "--gen_module_id_file" not in front_end.argv:
        return None
    host_pre = [s for s in steps if s.output() == front_end.argv[-1] and "-E" in s.argv]
    if len(host_pre) != 1 or host_pre[0].index > front_end.index:
        return None
    front_end = Step(front_end.index, [a for a in front_end.argv if a != "--gen_module_id_file"])
    host = [host_pre[0], front_end]
    device = [s for s in steps[:-1] if s.index not in (host_pre[0].index, front_end.index)]
    for step in device:
        if step.tool in DEVICE_TOOLS:
            continue
        if "-E" not in step.argv:   # a device preprocessing is the host compiler with -E
            return None
    cicc = [s for s in device if s.tool == "cicc"]
    if not cicc or any(_option_value(s.argv, "--module_id_file_name") != module_id_file
                       for s in cicc):
        return None
    return Plan(env, host, device, final, module_id_file, depfile, depfile_after)


def module_id(source_path):
    """A module id of nvcc's shape (`_<hash>_<length>_<name>_<hash>`) for the file at
    `source_path`: its path and its content decide it, so distinct files get distinct ids."""
    name = re.sub(r"[^A-Za-z0-9]", "_", os.path.basename(source_path))
    try:
        with open(source_path, "rb") as f:
            content = f.read()
    except OSError:
        content = b""
    where = hashlib.sha256(os.path.abspath(source_path).encode()).hexdigest()[:8]
    what = hashlib.sha256(content).hexdigest()[:8]
    return f"_{where}_{len(name)}_{name}_{what}"


def dependencies(preprocessed, target):
    """Pure: the dependency file nvcc -MD writes for `target`, from the line markers of its
    preprocessings (`preprocessed`, in nvcc's order): every file either read, in the order
    first read, the source first."""
    seen, known = [], set()
    for text in preprocessed:
        for match in LINE_MARKER.finditer(text):
            path = ESCAPED.sub(r"\1", match.group(1).decode("utf-8", "surrogateescape"))
            if path.startswith("<") or path in known:
                continue
            known.add(path)
            seen.append(path)
    if not seen:
        return f"{target} :\n"
    lines = [f"{target} : {seen[0]}"] + [f"    {p}" for p in seen[1:]]
    return " \\\n".join(lines) + "\n"


class Chains:
    """Runs the two chains at once; a step that fails stops every later step (in nvcc's
    order) of both, which nvcc would never have started."""

    def __init__(self, env):
        self.env = env
        self.lock = threading.Lock()
        self.first_failure = None
        self.running = {}
        self.results = {}

    def run(self, chain):
        for step in chain:
            with self.lock:
                if self.first_failure is not None and step.index > self.first_failure:
                    return
            result = self.run_step(step)
            with self.lock:
                self.results[step.index] = result
                if result[0] != 0:
                    if self.first_failure is None or step.index < self.first_failure:
                        self.first_failure = step.index
                    for index, proc in self.running.items():
                        if index > step.index:
                            proc.kill()
                    return

    def run_step(self, step):
        if step.tool == "rm":
            for path in step.argv[1:]:
                try:
                    os.remove(path)
                except OSError:
                    pass
            return 0, b"", b""
        try:
            proc = subprocess.Popen(step.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=self.env)
        except OSError as e:
            return 127, b"", f"nvcc_overlap: cannot run {step.argv[0]}: {e}\n".encode()
        with self.lock:
            self.running[step.index] = proc
        out, err = proc.communicate()
        with self.lock:
            self.running.pop(step.index, None)
        return proc.returncode, out, err


def replay(results, upto):
    """nvcc's output of its steps in order up to `upto`; the status of the first that failed."""
    for index in sorted(i for i in results if i <= upto):
        status, out, err = results[index]
        sys.stdout.buffer.write(out)
        sys.stdout.flush()
        sys.stderr.buffer.write(err)
        sys.stderr.flush()
        if status != 0:
            return status
    return 0


# How a front end names the file's anonymous namespace: this, then the module id.
ANON_NAMESPACE = b"_GLOBAL__N_"


def names(path, given):
    """Pure over the file at `path`: (how many times it names an anonymous namespace, whether
    every one of them is by the module id `given`); (0, False) for a file not there."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except (OSError, TypeError):
        return 0, False
    count = data.count(ANON_NAMESPACE)
    return count, count == data.count(ANON_NAMESPACE + given.encode())


def ids_agree(plan, given):
    """Whether both front ends used the module id `given`: cudafe++'s C++ file names the
    anonymous namespace by it, and whatever cicc wrote (its stub, its device file, its PTX)
    names none by another. A front end that made its own id would register the device code
    under another name than the host code looks it up by; then the plan's object is not used."""
    host_count, host_ours = names(_option_value(plan.host[-1].argv, "--gen_c_file_name"), given)
    if host_count == 0 or not host_ours:
        return False
    for step in plan.device:
        if step.tool != "cicc":
            continue
        for option in ("--stub_file_name", "--gen_device_file_name", "-o"):
            count, ours = names(_option_value(step.argv, option), given)
            if count and not ours:
                return False
    return True


def run_plan(plan, source, target):
    """nvcc's status after running `plan` for `source` into `target`; None when the front
    ends did not agree on the module id (then nothing was printed: the real nvcc runs)."""
    env = dict(os.environ)
    env.update(plan.env)
    given = module_id(source)
    with open(plan.module_id_file, "w", encoding="utf-8") as f:
        f.write(given)
    chains = Chains(env)
    threads = [threading.Thread(target=chains.run, args=(chain,)) for chain in
               (plan.host, plan.device)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = chains.first_failure
    if failed is None and not ids_agree(plan, given):
        return None
    if plan.depfile is not None and (failed is None or failed >= plan.depfile_after):
        write_dependencies(plan, target)
    last = max(s.index for s in plan.host + plan.device)
    status = replay(chains.results, last if failed is None else failed)
    if status != 0:
        return status
    return subprocess.run(plan.final.argv, env=env).returncode


def write_dependencies(plan, target):
    """The dependency file, as nvcc writes it once its preprocessings are done."""
    texts = []
    for step in sorted(plan.host + plan.device, key=lambda s: s.index):
        if "-E" in step.argv and step.index < plan.depfile_after:
            with open(step.output(), "rb") as f:
                texts.append(f.read())
    with open(plan.depfile, "w", encoding="utf-8") as f:
        f.write(dependencies(texts, target))


def overlapped(nvcc, args):
    """nvcc's status for `args` with the chains at once, or None where nvcc itself must run
    (a shape not planned, front ends that disagree, or anything going wrong before a word of
    output: the real nvcc then does it all again, so a build never fails because of this)."""
    target, sources = _option_value(args, "-o"), [a for a in args if a.endswith(".cu")]
    if refuses(args) or target is None or len(sources) != 1:
        return None
    scratch = None
    try:
        scratch = tempfile.mkdtemp(prefix="crucible-nvcc-")
        dry = subprocess.run([nvcc, "--dryrun", *args], capture_output=True,
                             env=dict(os.environ, TMPDIR=scratch))
        plan = parse_plan(dry.stderr.decode("utf-8", "surrogateescape"))
        if dry.returncode != 0 or plan is None:
            return None
        return run_plan(plan, sources[0], target)
    except Exception:   # noqa: BLE001 - whatever it was, nvcc alone decides
        return None
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def main(argv):
    """`nvcc_overlap.py <nvcc> <arguments>`: nvcc's compile with the two chains at once, or
    the real nvcc for what this does not plan."""
    if len(argv) < 2:
        sys.stderr.write("usage: nvcc_overlap.py <nvcc> <nvcc arguments>\n")
        return 2
    nvcc, args = argv[1], argv[2:]
    status = overlapped(nvcc, args)
    if status is not None:
        return status
    os.execv(nvcc, [nvcc, *args])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
