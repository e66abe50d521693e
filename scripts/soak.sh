#!/usr/bin/env bash
# The soak run (scripts/soak/soak.py): a real redis-server, one crucible-api and CPU workers
# (started as scripts/chaos.sh starts them) given one long batch in which the hostile corpus of
# tests/hostile (screening off) is mixed, in a seeded order, with honest candidates of
# tests/candidates; it proves that no candidate hurts the node: 0 lost, failed, hostile
# verdicts off their manifest, honest verdicts changed, service crashes, /health failures
# (polled every 200 ms, 1 s bound), leaked work-dir entries and task spaces left mounted.
# Prints a table last and writes it to <log-dir>/soak.json; exit 1 when a target is missed.
# The workers need root (the sandbox's storage and cgroup layers); it refuses to run without.
#
#   scripts/soak.sh                  1,000 tasks, 10 % hostile, 2 CPU workers (hours on 2 cores)
#   scripts/soak.sh --tasks 30 --hostile-fraction 0.2 --seed 1     a short one (minutes)
#   scripts/soak.sh --help           every flag: --tasks, --hostile-fraction, --workers, --seed,
#                                    --log-dir, --deadline-s, --bin-dir, --task-space-mb,
#                                    --sandbox-tmp-mb, --child-memory-mb
# CRUCIBLE_BIN_DIR names built crucible-api and crucible-worker binaries; without it they are
# built with cargo first. Not part of CI.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
for arg in "$@"; do
  # The flags need no cluster, no Redis and no torch.
  if [[ "$arg" == "-h" || "$arg" == "--help" ]]; then exec python3 scripts/soak/soak.py --help; fi
done
ensure_redis
ensure_python
export CRUCIBLE_PYTHON
if [[ -z "${CRUCIBLE_BIN_DIR:-}" ]]; then
  cargo build --quiet -p crucible-api -p crucible-gpu-worker --bins
  CRUCIBLE_BIN_DIR="$PWD/target/debug"
fi
exec "$CRUCIBLE_PYTHON" scripts/soak/soak.py --bin-dir "$CRUCIBLE_BIN_DIR" "$@"
