#!/usr/bin/env bash
# The hostile corpus on the GPU machine: the same end-to-end test as in CI
# (tests/tests/node_safety.rs: its own redis-server, crucible-api and two workers holding a stray
# secret descriptor, one killed and restarted), with both workers on GPU 0. Needs the bundle of
# `BUNDLE_TESTS=node_safety scripts/gpu-bundle.sh`; the log directory is copied under $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUNDLE=${BUNDLE:-.gpu-run}
OUT=${OUT:-/tmp/crucible-node-safety}
mkdir -p "$OUT"
# redis-server through the bundle's wrapper (its libraries for it alone).
export PATH="$PWD/$BUNDLE/redis-bin:$PATH"
export CRUCIBLE_PYTHON=${CRUCIBLE_PYTHON:-python3} CRUCIBLE_REPO_ROOT="$PWD"
export CRUCIBLE_TEST_WORKER_ARGS="--gpu 0"
# A GPU task's judge and runner each hold a CUDA context: more host memory than on a CPU.
export CRUCIBLE_TEST_CHILD_MEMORY_MB=${CRUCIBLE_TEST_CHILD_MEMORY_MB:-8192}
"$BUNDLE/bin/deps/node_safety" --nocapture "$@" 2>&1 | tee "$OUT/node_safety.txt"
rc=${PIPESTATUS[0]}
cp -r /tmp/crucible-e2e/node_safety-* "$OUT/" 2>/dev/null
exit $rc
