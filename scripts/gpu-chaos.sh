#!/usr/bin/env bash
# The chaos run on the GPU machine (docs/RELIABILITY.md), from the bundle scripts/gpu-bundle.sh
# makes: first a worker on GPU 0 beside two CPU workers under worker kill -9s, Redis restarts,
# an API kill and a rolling restart; then the GPU worker alone through one 20 s Redis outage
# under the default 30 s lease (the re-evaluations it costs). Logs and summaries under $OUT.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUNDLE=${BUNDLE:-.gpu-run}
OUT=${OUT:-/tmp/crucible-gpu-chaos}
PY=${CRUCIBLE_PYTHON:-python3}
export CRUCIBLE_PYTHON="$PY"
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
common=(--bin-dir "$BUNDLE/bin" --redis-server "$BUNDLE/redis-bin/redis-server")
"$PY" scripts/chaos/chaos.py "${common[@]}" --log-dir "$OUT/mixed" \
  --workers 3 --gpu-workers 1 --tasks "${TASKS:-150}" --kills "${KILLS:-12}" \
  --redis-restarts 2 --api-restarts 1 --rolling --fault-interval-s 3 >"$OUT/mixed.txt" 2>&1
mixed=$?
"$PY" scripts/chaos/chaos.py "${common[@]}" --log-dir "$OUT/outage" \
  --workers 1 --gpu-workers 1 --tasks 40 --kills 0 --redis-restarts 1 --api-restarts 0 \
  --redis-outage-s 20 --lease-ms 30000 --fault-interval-s 4 >"$OUT/outage.txt" 2>&1
outage=$?
echo "== GPU 0 + 2 CPU workers: kill -9s, Redis restarts, API kill, rolling restart (exit $mixed)"
tail -n 14 "$OUT/mixed.txt"
echo "== GPU 0 alone: one 20 s Redis outage, 30 s lease (exit $outage)"
tail -n 14 "$OUT/outage.txt"
exit $((mixed || outage))
