#!/usr/bin/env bash
# GPU benchmark, on the GPU machine, one mode per call (the device tool allows 10 minutes a call):
#
#   scripts/bench-gpu.sh on     [bench.py args]  Crucible, everything on: Redis, crucible-api, one
#                                                crucible-worker --gpu 0; the whole workload as one batch
#   scripts/bench-gpu.sh off    [bench.py args]  Crucible with the fast path off: the worker runs with
#                                                $OFF_ENV (no template: a fresh process per task; no CPU
#                                                stage, compile pool or build cache; no claiming ahead)
#                                                and every request has force_refresh (no result cache,
#                                                no coalescing, no reference cache)
#   scripts/bench-gpu.sh naive  [bench.py args]  one fresh python per evaluation running the harness,
#                                                sequentially (a KernelBench loop); no service
#   scripts/bench-gpu.sh report [--tasks]        the table of every mode recorded so far
#   scripts/bench-gpu.sh scale  [scale.py args]  scale-out: the workload (copied to >= 8 evaluations
#                                                per GPU) with 1, 2, 4, 8 workers, one per GPU, as many
#                                                as nvidia-smi -L lists (GPUS=1,2 picks), all modes in
#                                                one call: the table of scripts/bench/scale.py
#
# bench.py args: --shard K/N runs the K-th of N slices (off and naive take ~8-10 min for the whole
# workload: run them as --shard 1/2 and --shard 2/2 in two calls; the report sums the shards).
# Results are appended to $OUT/results.json; a previous call's file is taken from $BENCH_PREV
# (default .gpu-run/bench/results.json: copy the returned results.json there before the next
# call, and name .gpu-run in the device tool's carry). Needs the bundle of scripts/gpu-bundle.sh.
# Overrides for a CPU dry run: BIN=target/debug WORKER_ARGS=--cpu BENCH_ARGS="--device cpu".
# WORKER_ENV adds to the worker's environment and LABEL names the run in the report, e.g. the
# integrity checks' cost: LABEL=checks-off WORKER_ENV=CRUCIBLE_INTEGRITY_CHECKS=0 ... on.
# The small-problem batch (naive and the Crucible rows in one call) is scripts/bench-small.sh.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MODE=${1:-}
shift || true
case "$MODE" in on | off | naive | report | scale) ;; *)
  echo "usage: $0 on|off|naive|report|scale [bench.py args]" >&2
  exit 2
  ;;
esac
BUNDLE=${BUNDLE:-.gpu-run}
BIN=${BIN:-$BUNDLE/bin}
OUT=${OUT:-/tmp/crucible-bench}
mkdir -p "$OUT"
RESULTS=${RESULTS:-$OUT/results.json}
BENCH_PREV=${BENCH_PREV:-$BUNDLE/bench/results.json}
PROBLEMS=${PROBLEMS:-} # default: the workload's problems_root (.gpu-run/kernelbench)
WORKLOAD=${WORKLOAD:-scripts/bench/workload.json}
PY=${CRUCIBLE_PYTHON:-python3}
BENCH_PY=${BENCH_PY:-python3} # the driver itself is stdlib-only
REDIS_PORT=${REDIS_PORT:-6391}
API_PORT=${API_PORT:-10908}
WORKER_ARGS=${WORKER_ARGS:---gpu 0}
OFF_ENV=${OFF_ENV:-CRUCIBLE_TEMPLATE=0 CRUCIBLE_COMPILE_POOL=0 CRUCIBLE_PREFETCH=0}
BENCH_ARGS=${BENCH_ARGS:-}
GPU=${BENCH_GPU:-0}
# Stop waiting (crucible) or starting evaluations (naive) after this long: the call has 600 s.
DEADLINE_S=${DEADLINE_S:-520}

if [[ ! -e "$RESULTS" && -f "$BENCH_PREV" && "$BENCH_PREV" != "$RESULTS" ]]; then
  cp "$BENCH_PREV" "$RESULTS"
fi
bench() {
  # shellcheck disable=SC2086
  "$BENCH_PY" scripts/bench/bench.py --results "$RESULTS" --workload "$WORKLOAD" \
    ${PROBLEMS:+--problems "$PROBLEMS"} --gpu "$GPU" --deadline-s "$DEADLINE_S" $BENCH_ARGS "$@"
}
if [[ "$MODE" == scale ]]; then
  # Its own driver: it starts Redis, the API and the workers of each mode itself.
  export BIN OUT REDIS_PORT API_PORT CRUCIBLE_PYTHON="$PY"
  # shellcheck disable=SC2086
  WORKER_ARGS=${WORKER_ARGS#--gpu 0} "$BENCH_PY" scripts/bench/scale.py --workload "$WORKLOAD" \
    ${PROBLEMS:+--problems "$PROBLEMS"} $BENCH_ARGS "$@" 2>&1 | tee -a "$OUT/scale.log"
  exit "${PIPESTATUS[0]}"
fi
if [[ "$MODE" == report ]]; then
  bench --report "$@"
  exit $?
fi

if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
fi
"$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$OUT/gpu.txt"

if [[ "$MODE" == naive ]]; then
  bench --mode naive --label naive --python "$PY" "$@" 2>&1 | tee -a "$OUT/naive.log"
  rc=${PIPESTATUS[0]}
  bench --report
  exit $rc
fi

# Redis: the bundled one (only it gets the bundled libraries: the workers' Python must not see
# them), else one from PATH.
if [[ -x "$BUNDLE/redis/redis-server" ]]; then
  REDIS=("env" "LD_LIBRARY_PATH=$BUNDLE/redis" "$BUNDLE/redis/redis-server")
  REDIS_CLI=("env" "LD_LIBRARY_PATH=$BUNDLE/redis" "$BUNDLE/redis/redis-cli")
else
  REDIS=(redis-server)
  REDIS_CLI=(redis-cli)
fi
"${REDIS[@]}" --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
  --maxmemory-policy noeviction >"$OUT/$MODE-redis.log" 2>&1 &
pids=($!)
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 100); do
  "${REDIS_CLI[@]}" -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done

export REDIS_URL="redis://127.0.0.1:$REDIS_PORT" CRUCIBLE_PYTHON="$PY" RUST_LOG=${RUST_LOG:-info}
"$BIN/crucible-api" --bind "127.0.0.1:$API_PORT" >"$OUT/$MODE-api.log" 2>&1 &
pids+=($!)
read -r -a worker_env <<<"${WORKER_ENV:-}"
force=()
if [[ "$MODE" == off ]]; then
  read -r -a off_env <<<"$OFF_ENV"
  worker_env+=("${off_env[@]}")
  force=(--force-refresh)
fi
# shellcheck disable=SC2086
env "${worker_env[@]}" "$BIN/crucible-worker" $WORKER_ARGS >"$OUT/$MODE-worker.log" 2>&1 &
pids+=($!)
# The worker reports ok once its device passed the health check (NVML + CUDA probe on a GPU).
"$BENCH_PY" - "$API_PORT" <<'PYEOF'
import json, sys, time, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/health"
for _ in range(300):
    try:
        health = json.load(urllib.request.urlopen(url, timeout=2))
        if health["status"] == "ok":
            break
    except Exception as e:
        health = str(e)
    time.sleep(0.2)
print("health:", health)
PYEOF

# The worker's environment goes with the results: the report pairs slots=K with slots=1 by it.
bench --mode crucible --label "${LABEL:-$MODE}" --api "http://127.0.0.1:$API_PORT" "${force[@]}" \
  --worker-env "${WORKER_ENV:-}" "$@" 2>&1 | tee -a "$OUT/$MODE.log"
rc=${PIPESTATUS[0]}
grep -E "gpu (un)?healthy|giving task back|cuda fault|template" "$OUT/$MODE-worker.log" | tail -n 10
bench --report
exit $rc
