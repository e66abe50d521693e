#!/usr/bin/env python3
"""Every environment variable the binaries read is documented in .env.example.

    python3 scripts/check_env_example.py

Collects the names of the form CRUCIBLE_*, REDIS_URL and KERNELBENCH_ROOT quoted in the
crates' sources (`*/src/**/*.rs`: what the shipped binaries read, not what tests set) and
fails, one line per name, when .env.example does not mention one (as a setting or in a
comment). Names that are not settings are listed in NOT_SETTINGS with the reason.
Standard library only; exit 0 when every name is there.
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = re.compile(r'"((?:CRUCIBLE_[A-Z0-9_]+)|REDIS_URL|KERNELBENCH_ROOT)"')
NOT_SETTINGS = {
    # A name the worker keeps from task children, whatever the operator sets.
    "CRUCIBLE_API": "never passed to a child (gpu-worker/src/task/stage.rs)",
}


def names_in_sources():
    found = {}
    for crate in sorted(os.listdir(REPO)):
        src = os.path.join(REPO, crate, "src")
        if not os.path.isdir(src) or crate in ("target", "tests", "test-support"):
            continue
        for root, _, files in os.walk(src):
            for name in files:
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    for var in NAME.findall(f.read()):
                        found.setdefault(var, os.path.relpath(path, REPO))
    return found


def main():
    with open(os.path.join(REPO, ".env.example"), encoding="utf-8") as f:
        documented = set(re.findall(r"\b[A-Z][A-Z0-9_]+\b", f.read()))
    missing = {v: p for v, p in names_in_sources().items()
               if v not in documented and v not in NOT_SETTINGS}
    for var, path in sorted(missing.items()):
        print(f".env.example does not mention {var} (read in {path})")
    if not missing:
        print("env: every variable the binaries read is in .env.example")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
