#!/usr/bin/env bash
# CPU-side queue benchmark (docs/BENCHMARKS.md): builds the release binaries, makes sure
# redis-server exists, and runs crucible-bench, which starts its own redis-server and
# crucible-api on free loopback ports. Arguments go to crucible-bench (see --help), e.g.
#   scripts/bench-cpu.sh --tasks 5000 --claim-tasks 500
# The output is also written to target/bench-cpu-<UTC time>.txt.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
ensure_redis
cargo build --release -p crucible-tests -p crucible-api-server --bins
out="target/bench-cpu-$(date -u +%Y%m%dT%H%M%SZ).txt"
commit=unknown
if head=$(git rev-parse --short HEAD 2>/dev/null); then
  commit=$head
  git diff --quiet HEAD 2>/dev/null || commit="$commit (with local changes)"
fi
log "redis: $(redis-server --version | cut -d' ' -f3); commit: $commit"
target/release/crucible-bench "$@" 2>&1 | tee "$out"
log "output written to $out"
