#!/usr/bin/env python3
"""Static screening (gpu-worker/harness/screen.py) over the repository's candidates.

    python tests/harness/check_screening.py [-v]

Honest candidates (tests/candidates/*__correct.py, scripts/gpu-smoke/candidates/*.py and
cuda/*.py, scripts/bench/candidates/level2/*.py) must get no reject finding; every planted
exploit of tests/exploits/manifest.json must get its rule with the severity the manifest says.
Prints 'N passed, N failed'; exits 1 on any failure. Standard library only.
"""
import glob
import json
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "gpu-worker", "harness"))
import screen  # noqa: E402


def honest():
    pats = ["tests/candidates/*__correct.py", "scripts/gpu-smoke/candidates/*.py",
            "scripts/bench/candidates/level2/*.py"]
    out = [(p, "triton") for pat in pats for p in sorted(glob.glob(os.path.join(REPO, pat)))]
    out += [(p, "cuda") for p in sorted(glob.glob(
        os.path.join(REPO, "scripts/gpu-smoke/candidates/cuda/*.py")))]
    out.append((os.path.join(REPO, "tests/candidates/elementwise_relu__cuda_backend.py"), "cuda"))
    return out


def main():
    verbose = "-v" in sys.argv
    passed = failed = 0
    for path, backend in honest():
        with open(path, encoding="utf-8") as f:
            findings = screen.screen(f.read(), backend)
        rejects = [x for x in findings if x["severity"] == "reject"]
        rel = os.path.relpath(path, REPO)
        if rejects:
            failed += 1
            print(f"FAIL {rel}: honest candidate rejected: {rejects}")
        else:
            passed += 1
            if verbose or findings:
                print(f"ok   {rel}" + (f" (flags: {findings})" if findings else ""))
    with open(os.path.join(REPO, "tests/exploits/manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    for entry in manifest:
        if "rule" not in entry:
            continue   # caught at run time, not by screening (tests/tests/integrity.rs)
        path = os.path.join(REPO, "tests/exploits", entry["candidate"])
        with open(path, encoding="utf-8") as f:
            findings = screen.screen(f.read(), entry.get("backend", "triton"))
        hit = [x for x in findings
               if x["rule"] == entry["rule"] and x["severity"] == entry["severity"]]
        if hit:
            passed += 1
            if verbose:
                print(f"ok   {entry['candidate']}: {hit[0]['rule']} {hit[0]['detail']}")
        else:
            failed += 1
            print(f"FAIL {entry['candidate']}: expected {entry['rule']} ({entry['severity']}), "
                  f"got {findings}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
