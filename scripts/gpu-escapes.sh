#!/usr/bin/env bash
# The escape corpus on the GPU machine: the same end-to-end test as in CI (tests/tests/escapes.rs:
# its own redis-server, crucible-api and two workers), with both workers on GPU 0. Needs the
# bundle of `BUNDLE_ESCAPES=1 scripts/gpu-bundle.sh` (which adds the test binary); the log directory is copied
# under $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUNDLE=${BUNDLE:-.gpu-run}
OUT=${OUT:-/tmp/crucible-escapes}
mkdir -p "$OUT"
# redis-server through the bundle's wrapper (its libraries for it alone).
export PATH="$PWD/$BUNDLE/redis-bin:$PATH"
export CRUCIBLE_PYTHON=${CRUCIBLE_PYTHON:-python3} CRUCIBLE_REPO_ROOT="$PWD"
export CRUCIBLE_TEST_WORKER_ARGS="--gpu 0"
"$BUNDLE/bin/deps/escapes" --nocapture "$@" 2>&1 | tee "$OUT/escapes.txt"
rc=${PIPESTATUS[0]}
cp -r /tmp/crucible-e2e/escapes-* "$OUT/" 2>/dev/null
exit $rc
