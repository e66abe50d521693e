#!/usr/bin/env bash
# The CUDA workload through the service on the GPU host, one device call: what a compile-bound
# node's settings give (evaluations a minute, the host's CPU busy, the builds' stages), e.g.
# the node's precompiled headers on and off, or more tasks claimed ahead:
#   LABEL=pch-off WORKER_ENV="CRUCIBLE_PCH=0" scripts/gpu-cuda-throughput.sh
#   CHECK=1 also runs tests/harness/check_nvcc_overlap.py against the host's nvcc first.
#   SAMPLE_LENT=1 watches the CPU stages' threads meanwhile (scripts/bench/lent_threads.py):
#   with the device cores lent (the default), how long they could run on a device core inside the
#   worker's timing windows and outside them (lent-check-$LABEL.json).
# Each call builds into a build cache of its own (every build cold, the precompiled headers made
# at the worker's start as on a fresh node). Writes service-$LABEL.txt, check-$LABEL.txt,
# results.json and the services' logs as one logs-$LABEL.tar.gz to $OUT (the device tool
# brings back at most 8 files a call: two runs of this fit under two folders of $OUT).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/crucible-cuda}
LABEL=${LABEL:-on}
mkdir -p "$OUT"
export CRUCIBLE_PYTHON=${CRUCIBLE_PYTHON:-python3}
if [[ "${CHECK:-0}" == 1 ]]; then
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  CRUCIBLE_NVCC=${CRUCIBLE_NVCC:-$CUDA_HOME/bin/nvcc} timeout 240 "$CRUCIBLE_PYTHON" \
    tests/harness/check_nvcc_overlap.py >"$OUT/check-nvcc-overlap.txt" 2>&1
  echo "check_nvcc_overlap rc=$?"
  tail -3 "$OUT/check-nvcc-overlap.txt"
fi
cache=$(mktemp -d /tmp/crucible-build-cache.XXXXXX)
sampler=
if [[ "${SAMPLE_LENT:-0}" == 1 ]]; then
  python3 scripts/bench/lent_threads.py sample --out "$OUT/lent-$LABEL.jsonl" \
    --deadline-s $((${DEADLINE_S:-480} + 300)) &
  sampler=$!
fi
OUT=$OUT LABEL=$LABEL WORKLOAD=scripts/bench/workload-cuda.json DEADLINE_S=${DEADLINE_S:-480} \
  WORKER_ENV="CRUCIBLE_BUILD_CACHE=$cache ${WORKER_ENV:-}" \
  bash scripts/bench-gpu.sh on >"$OUT/service-$LABEL.txt" 2>&1
echo "service rc=$?"
if [[ -n "$sampler" ]]; then
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  device_cpus=$(grep -ao 'device children on [0-9,-]*' "$OUT/on-worker.log" | head -1 | awk '{print $4}' | sed 's/,$//')
  python3 scripts/bench/lent_threads.py check --samples "$OUT/lent-$LABEL.jsonl" \
    --log "$OUT/on-worker.log" --device-cpus "${device_cpus:-0}" >"$OUT/lent-check-$LABEL.json" 2>&1
  echo "lent threads (device cores ${device_cpus:-unknown}): $(tr -d '\n' <"$OUT/lent-check-$LABEL.json")"
fi
python3 scripts/bench/builds.py check --results "$OUT/results.json" --label "$LABEL" >"$OUT/check-$LABEL.txt" 2>&1
echo "builds check rc=$?"
tail -3 "$OUT/check-$LABEL.txt"
logs=(on-api.log on-redis.log on-worker.log on.log gpu.txt "lent-$LABEL.jsonl")
tar -C "$OUT" -czf "$OUT/logs-$LABEL.tar.gz" --ignore-failed-read "${logs[@]}" 2>/dev/null
(cd "$OUT" && rm -f "${logs[@]}")
grep -E "verdicts as expected|total wall|per minute|latency p50|host CPU|CPU stage p50|compile pool /|  cpu_stage|build_dry_run|compile_slot_wait" \
  "$OUT/service-$LABEL.txt"
