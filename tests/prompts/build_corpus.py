#!/usr/bin/env python3
"""Write the RA-ICL test corpus (JSONL for `crucible corpus index`) from our own solved
kernels, and the problem registry they solve (JSONL for CRUCIBLE_PROBLEMS).

Entries: every candidate of tests/legit/manifest.json, every `*__correct.py` of
tests/candidates/manifest.json (problems in tests/problems), and every `correct` entry of
scripts/gpu-smoke/candidates/manifest.json (real KernelBench level-1 problems, read from
--kernelbench when it is there). Each line: {id, backend, description, code, problem_hash}:
the description is the problem's source, the hash is Crucible's problem hash of it (so
retrieval can leave out a problem's own solutions); a KernelBench problem missing from
--kernelbench gets its name as description and no hash, and is left out of the registry.

Registry: tests/problems as level 1, ids 1001-1006 in file-name order (apart from KernelBench's
ids), then the KernelBench problems found, under their own level and id; paths absolute.

Usage: python3 tests/prompts/build_corpus.py --corpus OUT.jsonl [--registry OUT.jsonl]
                                             [--kernelbench DIR (default ../shared/kernelbench)]
"""
import argparse
import hashlib
import json
import os
import re

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUR_PROBLEMS = os.path.join(REPO, "tests", "problems")
FIRST_OWN_ID = 1001


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def problem_hash(source):
    return "sha256:" + hashlib.sha256(source.encode("utf-8")).hexdigest()


def entry(entry_id, backend, code_path, problem_source, fallback_description):
    line = {
        "id": entry_id,
        "backend": backend,
        "description": problem_source if problem_source is not None else fallback_description,
        "code": read(code_path),
    }
    if problem_source is not None:
        line["problem_hash"] = problem_hash(problem_source)
    return line


def ours(directory, keep):
    manifest = json.loads(read(os.path.join(REPO, "tests", directory, "manifest.json")))
    for m in manifest:
        if not keep(m["candidate"]):
            continue
        stem = m["candidate"][: -len(".py")]
        source = read(os.path.join(OUR_PROBLEMS, m["problem"] + ".py"))
        yield entry(f"{directory}/{stem}", m["backend"],
                    os.path.join(REPO, "tests", directory, m["candidate"]), source, m["problem"])


def kernelbench(kb_root):
    smoke = os.path.join(REPO, "scripts", "gpu-smoke", "candidates")
    for m in json.loads(read(os.path.join(smoke, "manifest.json"))):
        if m.get("expect") != "correct":
            continue
        problem_path = os.path.join(kb_root, m["problem"])
        source = read(problem_path) if os.path.exists(problem_path) else None
        name = os.path.basename(m["problem"])[: -len(".py")]
        description = "KernelBench level 1 problem " + name.replace("_", " ").strip()
        stem = m["candidate"][: -len(".py")]
        yield (m["problem"], problem_path if source is not None else None,
               entry(f"gpu-smoke/{stem}", m["backend"], os.path.join(smoke, m["candidate"]),
                     source, description))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--registry")
    ap.add_argument("--kernelbench", default=os.path.join(os.path.dirname(REPO), "shared", "kernelbench"))
    args = ap.parse_args()

    lines = list(ours("legit", lambda c: True))
    lines += ours("candidates", lambda c: c.endswith("__correct.py"))
    registry = []
    for n, f in enumerate(sorted(p for p in os.listdir(OUR_PROBLEMS) if p.endswith(".py"))):
        registry.append({"level": 1, "id": FIRST_OWN_ID + n, "name": f[: -len(".py")],
                         "path": os.path.join(OUR_PROBLEMS, f)})
    seen = set()
    for problem, path, line in kernelbench(args.kernelbench):
        lines.append(line)
        match = re.fullmatch(r"level(\d+)/(\d+)_(.+)\.py", problem)
        if path is not None and problem not in seen:
            seen.add(problem)
            registry.append({"level": int(match.group(1)), "id": int(match.group(2)),
                             "name": match.group(3), "path": path})
    with open(args.corpus, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
    if args.registry:
        with open(args.registry, "w", encoding="utf-8") as f:
            for r in registry:
                f.write(json.dumps(r) + "\n")
    print(f"{len(lines)} corpus entries, {len(registry)} problems")


if __name__ == "__main__":
    main()
