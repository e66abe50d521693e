#!/usr/bin/env bash
# Makes .gpu-run/ (git-ignored): what a GPU run needs that the GPU machine lacks. Release
# binaries, redis-server and redis-cli with their shared libraries, and the KernelBench
# problems from ../shared/kernelbench. Name .gpu-run in the device tool's `carry`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
ensure_redis
ensure_python
KB=${KERNELBENCH_ROOT:-../shared/kernelbench}
cargo build --release --workspace --bins
rm -rf .gpu-run && mkdir -p .gpu-run/bin .gpu-run/redis .gpu-run/kernelbench
# BUNDLE_CLI=0 leaves `crucible` out (runs that start crucible-api and crucible-worker only):
# the device tool carries at most 64 MiB.
cp target/release/crucible-api target/release/crucible-worker .gpu-run/bin/
if [[ "${BUNDLE_CLI:-1}" == 1 ]]; then
  cp target/release/crucible .gpu-run/bin/
fi
# The harness files the binaries embed, for the bench's naive loop (same code in every mode).
# Every module: harness.py loads the others from its own directory.
mkdir -p .gpu-run/harness && cp gpu-worker/harness/*.py .gpu-run/harness/
for exe in "$(command -v redis-server)" "$(command -v redis-cli)"; do
  cp "$exe" .gpu-run/redis/
  ldd "$exe" | awk '/=> \//{print $3}' | grep -E 'jemalloc|lzf|atomic' \
    | xargs -r -I{} cp -L {} .gpu-run/redis/
done
cp -r "$KB/level1" "$KB/level2" "$KB/level3" "$KB/baseline_times" .gpu-run/kernelbench/
# The RA-ICL corpus of our own solved kernels, indexed by the binary that serves it.
"$CRUCIBLE_PYTHON" tests/prompts/build_corpus.py --kernelbench "$KB" --corpus .gpu-run/corpus.jsonl
target/release/crucible corpus index .gpu-run/corpus.jsonl --out .gpu-run/corpus
# A `redis-server` that finds its libraries without handing them to anyone else (the escape
# test starts its own by name).
mkdir -p .gpu-run/redis-bin
printf '#!/bin/sh\nd=$(dirname "$(readlink -f "$0")")/../redis\nLD_LIBRARY_PATH="$d" exec "$d/redis-server" "$@"\n' \
  >.gpu-run/redis-bin/redis-server
chmod +x .gpu-run/redis-bin/redis-server
# End-to-end tests run there against GPU workers, each only when named in BUNDLE_TESTS
# (scripts/gpu-escapes.sh: escapes, also BUNDLE_ESCAPES=1; scripts/gpu-measurement.sh:
# measurement; scripts/gpu-node-safety.sh: node_safety): a test binary takes ~12 MB of the
# device tool's 64 MiB.
tests=${BUNDLE_TESTS:-}
[[ "${BUNDLE_ESCAPES:-0}" == 1 ]] && tests="$tests escapes"
for test in $tests; do
  mkdir -p .gpu-run/bin/deps
  built=$(cargo test --release -p crucible-tests --test "$test" --no-run --message-format=json 2>/dev/null \
    | "$CRUCIBLE_PYTHON" -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[1] and m.get("executable"):
        print(m["executable"])' "$test")
  cp "$built" ".gpu-run/bin/deps/$test"
done
# Another build's worker beside this one's (OLD_WORKER=path), to compare the two on one machine
# in one call: .gpu-run/bin-old holds it and this bundle's API.
if [[ -n "${OLD_WORKER:-}" ]]; then
  mkdir -p .gpu-run/bin-old
  cp "$OLD_WORKER" .gpu-run/bin-old/crucible-worker
  ln -s ../bin/crucible-api .gpu-run/bin-old/crucible-api
fi
# The Python client's dependencies (httpx with its own, and tenacity; all pure Python) for the
# GPU machine, which has no package index.
mkdir -p .gpu-run/pylib
"$CRUCIBLE_PYTHON" - .gpu-run/pylib <<'PYEOF'
import importlib, pathlib, shutil, sys
for name in ["httpx", "tenacity", "httpcore", "h11", "anyio", "sniffio", "idna", "certifi"]:
    try:
        src = pathlib.Path(importlib.import_module(name).__file__).parent
    except ImportError:
        if name in ("httpx", "tenacity"):  # the client's own: a bundle without one is broken
            raise
        continue  # not every httpx version needs every one of these
    shutil.copytree(src, pathlib.Path(sys.argv[1]) / name, ignore=shutil.ignore_patterns("__pycache__"))
PYEOF
# BUNDLE_WEBSOCKETS=1: the `websockets` package for the GPU machine's Python (3.12 there, which
# has none), for scripts/gpu-trainers.sh's OpenEnv session: its wheel from PyPI, unpacked.
if [[ "${BUNDLE_WEBSOCKETS:-0}" == 1 ]]; then
  wheels=$(mktemp -d)
  "$CRUCIBLE_PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$wheels" 'websockets>=13'
  mkdir -p .gpu-run/pylib-ws
  "$CRUCIBLE_PYTHON" -c 'import sys, zipfile; [zipfile.ZipFile(w).extractall(sys.argv[1]) for w in sys.argv[2:]]' \
    .gpu-run/pylib-ws "$wheels"/*.whl
  rm -rf "$wheels"
fi
strip .gpu-run/bin/crucible* .gpu-run/bin/deps/* .gpu-run/bin-old/crucible-worker 2>/dev/null || true
rm .gpu-run/corpus.jsonl
du -sh --apparent-size .gpu-run
