#!/usr/bin/env bash
# The chaos run (docs/RELIABILITY.md): a real redis-server with AOF, API replicas and CPU
# workers given a batch of short tasks while workers are `kill -9`ed, Redis is restarted
# (SIGTERM and `kill -9`) and API replicas are killed; prints lost, duplicated, failed and
# retried tasks and the recovery time, and fails when a target (0 lost, 0 duplicated, 0 failed,
# 0 leaked directories) is missed.
#
#   scripts/chaos.sh                 the full profile: 1,000 tasks, 50 kills, 3 Redis restarts
#   scripts/chaos.sh --profile ci    the short one scripts/test.sh runs: 200 tasks, 10 kills, 2
#   scripts/chaos.sh --profile outage  one 20 s Redis outage under the default 30 s lease and
#                                      nothing else: the re-evaluations it costs (target 0)
#   scripts/chaos.sh --tasks 300 --kills 20 --rolling ...   any of scripts/chaos/chaos.py's flags
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
profile=full
if [[ "${1:-}" == "--profile" ]]; then
  profile=$2
  shift 2
fi
case "$profile" in
  full) flags=(--tasks 1000 --kills 50 --redis-restarts 3 --api-restarts 3 --rolling) ;;
  ci) flags=(--tasks 200 --kills 10 --redis-restarts 2 --api-restarts 1 --rolling --fault-interval-s 2) ;;
  outage) flags=(--tasks 60 --kills 0 --redis-restarts 1 --api-restarts 0 --no-rolling --redis-outage-s 20 --lease-ms 30000 --fault-interval-s 6) ;;
  *) log "unknown profile $profile (full, ci or outage)"; exit 2 ;;
esac
ensure_redis
ensure_python
export CRUCIBLE_PYTHON
if [[ -z "${CRUCIBLE_BIN_DIR:-}" ]]; then
  cargo build --quiet -p crucible-api -p crucible-gpu-worker --bins
  CRUCIBLE_BIN_DIR="$PWD/target/debug"
fi
exec "$CRUCIBLE_PYTHON" scripts/chaos/chaos.py --bin-dir "$CRUCIBLE_BIN_DIR" "${flags[@]}" "$@"
