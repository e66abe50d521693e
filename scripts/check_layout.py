#!/usr/bin/env python3
"""The code layout's three rules, checked on every test run (scripts/test.sh).

1. No source file outside tests is over LIMIT lines, except those listed in LONG_FILES with
   the reason a reader should accept.
2. No import circle between the files of a crate: `use crate::a::b` (and `crate::a::b::x`
   paths in code) from file F makes F depend on the file that defines module `a::b` (or `a`);
   a strongly connected component of more than one file is a circle. `super::` paths and a
   module's own children (`mod.rs` → its submodules, declaring them) do not count: a parent
   owning its children is the tree, not a circle.
3. A crate listed in MAY_IMPORT is layered by its top-level modules (folders, and the few
   cross-cutting files beside lib.rs): a file under `src/<top>` may name `crate::<other>` only
   for an `<other>` in its row. A top-level module missing from the table is an error too, so
   that a new one is placed on purpose. Comments and in-file `#[cfg(test)] mod tests` do not
   count, nor do tests.rs files (tests may reach what they check).

Run from the repository root: `python3 scripts/check_layout.py`. Exit 1 lists what broke.
"""
import re
import sys
from pathlib import Path

LIMIT = 500
# Files allowed over LIMIT, each with why. Keep this short.
LONG_FILES = {}
CRATES = ["shared", "task-manager", "api-server", "gpu-worker", "client", "cli", "runtime",
          "test-support", "tests", "corpus", "rl"]
# Python checked for length (every .py below them but tests): the harness, the client, the
# scripts (benchmarks, chaos, generators).
PYTHON_DIRS = ["gpu-worker/harness", "clients/python/crucible_client", "scripts"]
# Rule 3: crate → {top-level module → the other top-level modules it may import via `crate::`}.
# gpu-worker bottom first (ARCHITECTURE.md's codemap says what each owns): the processes and
# directories, the OS boundary, one child process, what the node keeps between tasks, the
# cross-cutting device/config/metrics, a task's stages, the worker that drives them.
MAY_IMPORT = {
    "gpu-worker": {
        "process": set(),
        "probe": set(),
        "device": {"probe"},
        "sandbox": {"process"},
        "child": {"process", "sandbox"},
        "cache": {"child", "device"},
        "metrics": {"process", "device"},
        "config": {"process", "sandbox", "cache", "device"},
        "task": {"process", "sandbox", "child", "cache", "device", "config", "metrics"},
        "worker": {"process", "sandbox", "child", "cache", "device", "config", "metrics", "task"},
    },
}


def module_path(src: Path, file: Path) -> tuple:
    """The module path of a file under src/: lib.rs/main.rs → (), a/mod.rs → (a,), a/b.rs → (a, b)."""
    rel = file.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def is_test_file(file: Path) -> bool:
    return "tests" in file.parts or file.name == "tests.rs" or file.parts[-2:-1] == ("benches",)


def rust_files(crate: str):
    src = Path(crate) / "src"
    return src, sorted(p for p in src.rglob("*.rs")) if src.is_dir() else []


USE_RE = re.compile(r"\bcrate::((?:[a-z_][a-z0-9_]*::)*[A-Za-z_][A-Za-z0-9_]*)")
GROUP_RE = re.compile(r"\buse\s+crate::\{([^;]*)\};", re.S)


def code_without_tests(text: str) -> str:
    """The file up to its in-file `#[cfg(test)] mod tests`, which may import what it likes."""
    m = re.search(r"#\[cfg\(test\)\]\s*mod\s+tests\b", text)
    return text[: m.start()] if m else text


def referenced_paths(text: str):
    code = code_without_tests(text)
    code = re.sub(r"//[^\n]*", "", code)
    for m in USE_RE.finditer(code):
        yield tuple(m.group(1).split("::"))
    for m in GROUP_RE.finditer(code):
        for item in re.split(r",", re.sub(r"\{[^{}]*\}", "", m.group(1))):
            item = item.strip().split(" as ")[0].strip()
            if item and item != "self":
                yield tuple(p for p in item.split("::") if p)


def import_cycles(crate: str):
    src, files = rust_files(crate)
    modules = {module_path(src, f): f for f in files if not is_test_file(f.relative_to(crate))}
    edges = {f: set() for f in modules.values()}
    for mod, f in modules.items():
        for path in referenced_paths(f.read_text()):
            # The longest prefix of the path that names a file's module.
            for n in range(len(path), 0, -1):
                target = modules.get(path[:n])
                if target is not None:
                    break
            else:
                continue
            tmod = path[:n]
            # A module naming its own descendants (or itself) is the tree, not a circle.
            if target == f or tmod[: len(mod)] == mod:
                continue
            edges[f].add(target)
    return [c for c in strongly_connected(edges) if len(c) > 1]


def forbidden_imports(crate: str, rules: dict):
    """Rule 3 for one crate: each `crate::` path that leaves its file's top-level module for
    one not in that module's row, and each top-level module that has no row."""
    src, files = rust_files(crate)
    tops = {module_path(src, f)[0] for f in files if module_path(src, f)}
    found = [f"{src}/{top}: top-level module missing from MAY_IMPORT[{crate!r}] "
             f"(add its row: the modules it may import)" for top in sorted(tops - set(rules))]
    for f in files:
        mod = module_path(src, f)
        if not mod or is_test_file(f.relative_to(crate)) or mod[0] not in rules:
            continue
        allowed = rules[mod[0]]
        for path in sorted(set(referenced_paths(f.read_text()))):
            other = path[0]
            if other != mod[0] and other in tops and other not in allowed:
                may = ", ".join(sorted(allowed)) or "nothing else of the crate"
                found.append(f"{f}: imports crate::{'::'.join(path)}, but {mod[0]}/ may "
                             f"import only: {may} (MAY_IMPORT in scripts/check_layout.py)")
    return found


def strongly_connected(edges):
    """Tarjan's algorithm, iterative enough for a crate's few hundred files."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(str(p) for p in comp))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def long_files():
    found = []
    paths = []
    for crate in CRATES:
        src, files = rust_files(crate)
        paths += [f for f in files if not is_test_file(f.relative_to(crate))]
    for d in PYTHON_DIRS:
        paths += sorted(p for p in Path(d).rglob("*.py") if not p.name.startswith("test_"))
    for p in paths:
        n = sum(1 for _ in p.open(encoding="utf-8"))
        if n > LIMIT and str(p) not in LONG_FILES:
            found.append(f"{p}: {n} lines (limit {LIMIT})")
    return found


def main() -> int:
    problems = long_files()
    for crate in CRATES:
        for cycle in import_cycles(crate):
            problems.append(f"{crate}: import circle between " + ", ".join(cycle))
    for crate, rules in MAY_IMPORT.items():
        problems += forbidden_imports(crate, rules)
    for p in problems:
        print(p)
    if not problems:
        print(f"layout: no source file over {LIMIT} lines, no import circle in {len(CRATES)} "
              f"crates, every import of {', '.join(MAY_IMPORT)} within its layer's rule")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
