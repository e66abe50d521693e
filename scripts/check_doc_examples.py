#!/usr/bin/env python3
"""Run the README's and docs' examples as written, against a live `crucible up --cpu`.

Which blocks: a fenced ```bash or ```python block of README.md, clients/python/README.md,
docs/*.md or docs/trainers/*.md (one page per trainer) whose line before the fence is an HTML comment (invisible in rendered Markdown):

    <!-- example: run -->
    <!-- example: run, needs=openenv, given=policy, timeout=300 -->

`needs=` names modules (`+` between several) that only some Python has (the trainers' venv):
the block is skipped, saying so, where the checker's Python cannot import them. `given=`
(names separated by spaces) binds names the prose leaves to the reader (`client`, a
`reference_code` and its `kernel`, ...) from the repository's own files, before the block runs
(FIXTURES below); the block's text is never edited. `timeout=` is its deadline in seconds
(default 240). A block that cannot run on a CPU-only machine (a GPU, systemd, Redis, a
KernelBench checkout, a placeholder id) is simply not marked.

How they run: cwd the repository root; every `127.0.0.1:10907` / `localhost:10907` in a block
becomes the test server's port (the only edit, since the server listens on a free port), and
$CRUCIBLE_URL is the server's URL, for the CLI and the clients that read it. bash blocks run
under `bash -euo pipefail` with `crucible` ($CRUCIBLE_BIN) on PATH, and `python`/`pip` a
throwaway venv that sees the checker's packages (so `pip install ./clients/python` installs
there, not into the venv the other tests use). python blocks run with the Python running this
checker, clients/python on PYTHONPATH (what `pip install ./clients/python` gives a reader).

The server: $CRUCIBLE_BIN (default target/debug/crucible) `up --cpu` on a free loopback port,
CRUCIBLE_PROBLEMS=tests/rollouts/problems.jsonl, CRUCIBLE_CPU_THREADS=1 (as the Python client's
tests run it), and the test corpus (tests/prompts/build_corpus.py) as CRUCIBLE_CORPUS, so
`option=raicl` prompts have examples to retrieve. Stopped with its whole process group.

Prints one line per block (file:line, ran/skipped/FAILED, seconds; a failure's output after
it) and then `N passed, N failed[, N skipped]`; exits 1 on any failure.

Usage: $CRUCIBLE_PYTHON scripts/check_doc_examples.py [--needs-only] [FILE.md ...]
Unit tests of the parsing: python3 scripts/test_doc_examples.py.
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC_PORT = 10907
DEFAULT_TIMEOUT_S = 240.0
#: A CPU worker imports torch and triton in its warm template before it reports ready.
START_DEADLINE_S = 180.0
LANGS = {"bash": "bash", "sh": "bash", "python": "python"}
MARKER = re.compile(r"^\s*<!--\s*example:\s*(?P<body>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
LOOPBACK_URL = re.compile(r"\b(127\.0\.0\.1|localhost):%d\b" % DOC_PORT)


class MarkerError(ValueError):
    """A marker this checker cannot honour: the check fails rather than silently skip it."""


@dataclass
class Block:
    path: str  # relative to the repository root
    line: int  # the opening fence's, 1-based
    lang: str  # "bash" or "python"
    source: str
    needs: list[str] = field(default_factory=list)
    given: list[str] = field(default_factory=list)
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def parse_marker(body: str) -> dict | None:
    """The options of a marker's body (`run, needs=a+b, given=x y, timeout=60`); None for an
    `example:` comment that is not `run` (room for other words later, e.g. `skip`)."""
    parts = [p.strip() for p in body.split(",")]
    if parts[0] != "run":
        return None
    options: dict = {"needs": [], "given": [], "timeout_s": DEFAULT_TIMEOUT_S}
    for part in parts[1:]:
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not value:
            raise MarkerError(f"option {part!r} is not key=value")
        if key == "needs":
            options["needs"] = value.split("+")
        elif key == "given":
            options["given"] = value.split()
        elif key == "timeout":
            try:
                options["timeout_s"] = float(value)
            except ValueError:
                raise MarkerError(f"timeout={value!r} is not a number of seconds") from None
        else:
            raise MarkerError(f"unknown option {key!r} (needs, given, timeout)")
    unknown = [g for g in options["given"] if g not in FIXTURES]
    if unknown:
        raise MarkerError(f"given names without a fixture: {', '.join(unknown)}")
    return options


def extract(text: str, path: str) -> list[Block]:
    """The marked blocks of one Markdown file. A marker must sit on the line right before an
    opening fence of a known language; anything else is a MarkerError naming the line."""
    blocks: list[Block] = []
    lines = text.splitlines()
    pending: tuple[int, dict] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        if m:
            try:
                options = parse_marker(m.group("body"))
            except MarkerError as e:
                raise MarkerError(f"{path}:{i + 1}: {e}") from None
            if options is not None:
                pending = (i + 1, options)
            i += 1
            continue
        f = FENCE.match(line)
        if not f:
            if pending:
                raise MarkerError(f"{path}:{pending[0]}: the marker's next line is no fence")
            i += 1
            continue
        # A fence: read to its closing one (same character, at least as long, no info).
        fence, indent = f.group("fence"), len(f.group("indent"))
        lang = f.group("info").strip().split(" ")[0].lower()
        body, j = [], i + 1
        while j < len(lines):
            c = FENCE.match(lines[j])
            if c and c.group("fence")[0] == fence[0] and len(c.group("fence")) >= len(fence) \
                    and not c.group("info").strip():
                break
            # A fence indented (in a list item) has its content indented as much.
            body.append(lines[j][indent:] if lines[j][:indent].isspace() else lines[j])
            j += 1
        if pending:
            if lang not in LANGS:
                raise MarkerError(f"{path}:{pending[0]}: a marked block must be bash or python, "
                                  f"not {lang or 'unlabelled'}")
            blocks.append(Block(path, i + 1, LANGS[lang], "\n".join(body) + "\n",
                                **pending[1]))
            pending = None
        i = j + 1
    if pending:
        raise MarkerError(f"{path}:{pending[0]}: the marker's next line is no fence")
    return blocks


def rewrite_port(source: str, port: int) -> str:
    """The block with the docs' port (loopback addresses only) turned into the test server's."""
    return LOOPBACK_URL.sub(lambda m: f"{m.group(1)}:{port}", source)


def doc_files(repo: str) -> list[str]:
    names = ["README.md", "clients/python/README.md"]
    for pattern in (("docs", "*.md"), ("docs", "trainers", "*.md")):
        names += sorted(os.path.relpath(p, repo) for p in glob.glob(os.path.join(repo, *pattern)))
    return [n for n in names if os.path.exists(os.path.join(repo, n))]


def missing_modules(needs: list[str]) -> list[str]:
    missing = []
    for name in needs:
        try:
            if importlib.util.find_spec(name) is None:
                missing.append(name)
        except (ImportError, ValueError):
            missing.append(name)
    return missing


# --- python blocks: run in a child of this interpreter (`--run-python`), fixtures first ---

def _read(rel: str) -> str:
    with open(os.path.join(REPO, rel)) as f:
        return f.read()


def _relu_rollouts() -> list[dict]:
    with open(os.path.join(REPO, "clients/python/examples/relu_rollouts.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def _client(ns):
    from crucible_client import Client
    return Client(_fixture(ns, "url"))


def _result(ns):
    view = _fixture(ns, "client").evaluate(_fixture(ns, "reference_code"),
                                           kernel_code=_fixture(ns, "kernel"), backend="triton")
    return view["result"]


def _running_task(ns):
    # A kernel that sleeps for an hour, so a cancel finds it queued or running (bounded by
    # its timeout_s should a block fail before cancelling it).
    return _fixture(ns, "client").submit(
        _read("tests/problems/elementwise_relu.py"), backend="triton", timeout_s=60,
        kernel_code=_read("tests/candidates/elementwise_relu__sleeps.py"))["task_id"]


#: Names a marker's `given=` may bind, each made from the repository's files or the server.
FIXTURES = {
    "url": lambda ns: os.environ["CRUCIBLE_URL"],
    "client": _client,
    "reference_code": lambda ns: _read("tests/problems/softmax.py"),
    "kernel": lambda ns: _read("tests/candidates/softmax__correct.py"),
    "ref_src": lambda ns: _read("tests/problems/softmax.py"),
    "kernel_src": lambda ns: _read("tests/candidates/softmax__correct.py"),
    "rollouts": lambda ns: _relu_rollouts(),
    "completion_text": lambda ns: _relu_rollouts()[0]["completion"],
    # A policy that writes no kernel: its turns are scored on their text, without a worker.
    "policy": lambda ns: (lambda prompt: "I have no kernel for this one yet."),
    "result": _result,
    "turn_rewards": lambda ns: [0.25, 1.0],
    "num_epochs": lambda ns: 1,
    "task_id": _running_task,
    "submission": lambda ns: _fixture(ns, "client").submit_rollouts(_relu_rollouts()),
    "batch_id": lambda ns: _fixture(ns, "submission").batch_ids[0],
}


def _fixture(ns: dict, name: str):
    if name not in ns:
        ns[name] = FIXTURES[name](ns)
    return ns[name]


def run_python_child(path: str, line: int, given: list[str]) -> None:
    """Runs the source on stdin as the block at path:line, the given names bound first.
    Compiled under the doc's path with its lines in place, so a traceback names the doc's line."""
    source = sys.stdin.read()
    ns: dict = {"__name__": "__main__"}
    for name in given:
        _fixture(ns, name)
    exec(compile("\n" * line + source, path, "exec"), ns)


# --- running blocks ---

@dataclass
class Outcome:
    block: Block
    status: str  # ran | skipped | FAILED
    seconds: float = 0.0
    detail: str = ""


def run_block(block: Block, env: dict, port: int) -> Outcome:
    missing = missing_modules(block.needs)
    if missing:
        return Outcome(block, "skipped",
                       detail=f"needs {', '.join(missing)}, which {sys.executable} cannot import")
    source = rewrite_port(block.source, port)
    if block.lang == "bash":
        argv, stdin = ["bash", "-euo", "pipefail", "-c", source], None
    else:
        argv = [sys.executable, os.path.abspath(__file__), "--run-python", block.path,
                str(block.line), " ".join(block.given)]
        stdin = source
    started = time.monotonic()
    # Its own session, so a deadline kills what the block started too (a server, a pipeline).
    proc = subprocess.Popen(argv, cwd=REPO, env=env, text=True, start_new_session=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(stdin, timeout=block.timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return Outcome(block, "FAILED", time.monotonic() - started,
                       f"past its deadline of {block.timeout_s:.0f} s\n{out}")
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        return Outcome(block, "FAILED", seconds, f"exit status {proc.returncode}\n{out}")
    return Outcome(block, "ran", seconds)


def report(outcomes: list[Outcome], out=sys.stdout) -> int:
    """Prints the summary line and returns the exit status."""
    counts = {s: sum(o.status == s for o in outcomes) for s in ("ran", "FAILED", "skipped")}
    line = f"{counts['ran']} passed, {counts['FAILED']} failed"
    if counts["skipped"]:
        line += f", {counts['skipped']} skipped"
    print(line, file=out)
    return 1 if counts["FAILED"] else 0


def print_outcome(o: Outcome, out=sys.stdout) -> None:
    print(f"{o.block.where:<40} {o.status:<8} {o.seconds:6.1f} s"
          + (f"  ({o.detail})" if o.status == "skipped" else ""), file=out, flush=True)
    if o.status == "FAILED":
        tail = o.detail[-6000:]
        print("\n".join("    | " + line for line in tail.rstrip().splitlines()), file=out,
              flush=True)


# --- the server and the blocks' environment ---

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_corpus(binary: str, tmp: str) -> str:
    corpus = os.path.join(tmp, "corpus.jsonl")
    index = os.path.join(tmp, "corpus-index")
    subprocess.run([sys.executable, "tests/prompts/build_corpus.py", "--corpus", corpus],
                   cwd=REPO, check=True, stdout=subprocess.DEVNULL, timeout=120)
    subprocess.run([binary, "corpus", "index", corpus, "--out", index], cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL, timeout=120)
    return index


def start_server(binary: str, tmp: str) -> tuple[subprocess.Popen, str, str]:
    import httpx

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    drop = {"REDIS_URL", "CRUCIBLE_AUTH", "CRUCIBLE_ADMIN_TOKEN", "CRUCIBLE_TOKEN", "CRUCIBLE_URL"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.setdefault("CRUCIBLE_PYTHON", sys.executable)
    env["CRUCIBLE_CPU_THREADS"] = "1"
    env["CRUCIBLE_PROBLEMS"] = os.path.join(REPO, "tests", "rollouts", "problems.jsonl")
    env["CRUCIBLE_CORPUS"] = build_corpus(binary, tmp)
    log = os.path.join(tmp, "crucible.log")
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary, "up", "--cpu", "--bind", f"127.0.0.1:{port}"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline, last = time.monotonic() + START_DEADLINE_S, "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"crucible exited with {proc.returncode}:\n{tail(log)}")
        try:
            answer = httpx.get(f"{url}/health", timeout=5.0)
            last = answer.text
            # "ok": a worker is ready, so the first block's evaluation does not wait for one.
            if answer.status_code == 200 and answer.json().get("status") == "ok":
                return proc, url, log
        except (httpx.TransportError, ValueError) as e:
            last = repr(e)
        time.sleep(0.25)
    stop_server(proc)
    raise RuntimeError(f"crucible not healthy after {START_DEADLINE_S:.0f} s (last: {last}):\n"
                       f"{tail(log)}")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL if it is not gone in 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def tail(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()[-4000:]


def block_env(binary: str, url: str, tmp: str, need_venv: bool) -> dict:
    """What the blocks run with: `crucible` on PATH, `python`/`pip` of a throwaway venv."""
    bin_dir = os.path.join(tmp, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    os.symlink(os.path.abspath(binary), os.path.join(bin_dir, "crucible"))
    path = [bin_dir]
    if need_venv:
        venv = os.path.join(tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
        # The venv sees this Python's packages (torch, httpx) through a .pth file, as the
        # trainers' venv does; what a block installs stays in it.
        import site
        code = "import site, sys; open(site.getsitepackages()[0] + '/checker.pth', 'w')" \
               ".write('\\n'.join(sys.argv[1:]) + '\\n')"
        subprocess.run([os.path.join(venv, "bin", "python"), "-c", code,
                        *site.getsitepackages()], check=True, timeout=60)
        path.insert(0, os.path.join(venv, "bin"))
    env = {k: v for k, v in os.environ.items()
           if k not in {"CRUCIBLE_TOKEN", "CRUCIBLE_AUTH", "VIRTUAL_ENV", "PYTHONHOME"}}
    env["PATH"] = os.pathsep.join(path + [os.environ.get("PATH", "")])
    env["CRUCIBLE_URL"] = url
    env.setdefault("CRUCIBLE_PYTHON", sys.executable)
    client = os.path.join(REPO, "clients", "python")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (client, os.environ.get("PYTHONPATH")) if p)
    return env


#: What `pip install ./clients/python` writes into the tree (setuptools builds in place).
BUILD_LEFTOVERS = ["clients/python/build", "clients/python/crucible_client.egg-info"]


def remove_build_leftovers(paths: list[str]) -> None:
    """Removes those of the paths a block made (they were absent before), so a check leaves the
    working tree as it found it; ones that were there already are the developer's."""
    for rel in paths:
        shutil.rmtree(os.path.join(REPO, rel), ignore_errors=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--run-python"]:
        run_python_child(argv[1], int(argv[2]), argv[3].split())
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", help="Markdown files (default: all the docs)")
    parser.add_argument("--needs-only", action="store_true",
                        help="run only the blocks with needs= (for the trainers' venv)")
    args = parser.parse_args(argv)
    blocks: list[Block] = []
    try:
        for name in args.files or doc_files(REPO):
            with open(os.path.join(REPO, name)) as f:
                blocks += extract(f.read(), os.path.relpath(os.path.join(REPO, name), REPO))
    except MarkerError as e:
        print(f"bad marker: {e}", file=sys.stderr)
        return 1
    if args.needs_only:
        blocks = [b for b in blocks if b.needs]
    outcomes = [Outcome(b, "skipped", detail=f"needs {', '.join(missing_modules(b.needs))}, "
                        f"which {sys.executable} cannot import")
                for b in blocks if missing_modules(b.needs)]
    runnable = [b for b in blocks if not missing_modules(b.needs)]
    for o in outcomes:
        print_outcome(o)
    if runnable:
        binary = os.environ.get("CRUCIBLE_BIN", os.path.join(REPO, "target", "debug", "crucible"))
        if not os.path.exists(binary):
            print(f"no crucible binary at {binary}: cargo build --bins, or set CRUCIBLE_BIN",
                  file=sys.stderr)
            return 1
        leftovers = [p for p in BUILD_LEFTOVERS if not os.path.exists(os.path.join(REPO, p))]
        with tempfile.TemporaryDirectory(prefix="crucible-doc-examples-") as tmp:
            proc, url, log = start_server(binary, tmp)
            try:
                port = int(url.rsplit(":", 1)[1])
                env = block_env(binary, url, tmp, any(b.lang == "bash" for b in runnable))
                for block in runnable:
                    o = run_block(block, env, port)
                    print_outcome(o)
                    outcomes.append(o)
            finally:
                stop_server(proc)
                remove_build_leftovers(leftovers)
            if any(o.status == "FAILED" for o in outcomes):
                print(f"server log (tail):\n{tail(log)}")
    return report(outcomes)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
