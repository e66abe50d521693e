#!/usr/bin/env bash
# The small-problem GRPO batch (scripts/bench/workload-small.json: 24 evaluations) on the GPU
# machine, naive and Crucible on the same bundle, in ONE device call (~9 minutes at most):
#
#   scripts/bench-small.sh            every row of $ROWS in turn, then the report (printed last)
#   scripts/bench-small.sh report     the report of what $RESULTS holds (runs anywhere)
#
# Rows (ROWS="naive slots=1 slots=4" runs a subset, in that order; default: all of them):
#   naive           one fresh python per evaluation running the harness (bench.py --mode naive)
#   slots=K         Crucible with FRESH services: a new redis-server (no persistence), a new
#                   crucible-api, one crucible-worker --gpu 0 with CRUCIBLE_DEVICE_SLOTS=K
#   precompile-off  slots=$BASE_SLOTS and CRUCIBLE_TRITON_PRECOMPILE=0
#   adaptive        slots=$BASE_SLOTS, every request with "timing": {"mode": "adaptive"}
#   adaptive-1%     (not in the default) the same with "target_rel_error": 0.01
#   checks-off      slots=$BASE_SLOTS and CRUCIBLE_INTEGRITY_CHECKS=0
#   slots=K#N       (not in the default) slots=K once more, compared with slots=K: how far two
#                   runs of the same setting differ, the noise floor of the comparisons
# Every Crucible row submits with force_refresh (no result cache, coalescing or reference cache
# across tasks of another row; each row has its own empty Redis anyway). A row starts only when
# its estimate ($NAIVE_EST_S / $ROW_EST_S) fits in what is left of $BUDGET_S; the rows that did
# not fit are printed as the ROWS= of the next call. Every wait is bounded (bench.py --deadline-s).
#
# Results are appended to $OUT/results.json (a previous call's file is taken from $BENCH_PREV,
# default .gpu-run/bench/small-results.json: copy the returned results.json there and carry
# .gpu-run). Logs of each row (redis, api, worker, bench) are tarred into $OUT/logs.tar.gz; the
# report is $OUT/report.txt ($OUT/report-tasks.txt with one line per task). Needs the bundle of
# scripts/gpu-bundle.sh.
# CPU dry run: BIN=target/debug WORKER_ARGS=--cpu BENCH_ARGS="--device cpu --select 0,7,11".
# WORKER_ENV adds to every worker's environment; BASE_SLOTS (default 4) is the slots of the
# one-knob rows (set it to the worker's default; empty: leave CRUCIBLE_DEVICE_SLOTS unset).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
T0=$(date +%s)
ROWS=${ROWS:-naive slots=1 slots=2 slots=4 slots=8 precompile-off adaptive checks-off}
BASE_SLOTS=${BASE_SLOTS-4}
BUNDLE=${BUNDLE:-.gpu-run}
BIN=${BIN:-$BUNDLE/bin}
OUT=${OUT:-/tmp/crucible-bench-small}
mkdir -p "$OUT"
LOGS=${LOGS:-$(mktemp -d /tmp/crucible-small-logs.XXXXXX)} # outside $OUT: the tool returns 8 files
mkdir -p "$LOGS"
RESULTS=${RESULTS:-$OUT/results.json}
BENCH_PREV=${BENCH_PREV:-$BUNDLE/bench/small-results.json}
WORKLOAD=${WORKLOAD:-scripts/bench/workload-small.json}
PY=${CRUCIBLE_PYTHON:-python3}
BENCH_PY=${BENCH_PY:-python3} # the driver itself is stdlib-only
REDIS_PORT=${REDIS_PORT:-6401} # row i uses REDIS_PORT+i and API_PORT+i
API_PORT=${API_PORT:-10921}
WORKER_ARGS=${WORKER_ARGS:---gpu 0}
BENCH_ARGS=${BENCH_ARGS:-}
GPU=${BENCH_GPU:-0}
BUDGET_S=${BUDGET_S:-540}            # the whole call (the device tool allows 600 s)
NAIVE_EST_S=${NAIVE_EST_S:-200}      # what a row is expected to take, at most
ROW_EST_S=${ROW_EST_S:-75}
NAIVE_DEADLINE_S=${NAIVE_DEADLINE_S:-240} # stop starting (naive) or waiting (crucible) after
ROW_DEADLINE_S=${ROW_DEADLINE_S:-150}
HEALTH_S=${HEALTH_S:-90}             # the worker's device health check and warm-up

bench() {
  # shellcheck disable=SC2086
  "$BENCH_PY" scripts/bench/bench.py --results "$RESULTS" --workload "$WORKLOAD" --gpu "$GPU" \
    $BENCH_ARGS "$@"
}
report() {
  bench --report --tasks >"$OUT/report-tasks.txt" 2>&1
  bench --report | tee "$OUT/report.txt"
}
if [[ "${1:-}" == report ]]; then
  bench --report "${@:2}"
  exit $?
fi
if [[ ! -e "$RESULTS" && -f "$BENCH_PREV" && "$BENCH_PREV" != "$RESULTS" ]]; then
  cp "$BENCH_PREV" "$RESULTS"
fi
left() { echo $((BUDGET_S - ($(date +%s) - T0))); }
elapsed() { echo $(($(date +%s) - T0)); }

{
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
  git rev-parse --short HEAD 2>/dev/null || cat "$BUNDLE/COMMIT" 2>/dev/null
} 2>&1 | tee "$OUT/gpu.txt"

if [[ -x "$BUNDLE/redis/redis-server" ]]; then
  REDIS=("env" "LD_LIBRARY_PATH=$BUNDLE/redis" "$BUNDLE/redis/redis-server")
  REDIS_CLI=("env" "LD_LIBRARY_PATH=$BUNDLE/redis" "$BUNDLE/redis/redis-cli")
else
  REDIS=(redis-server)
  REDIS_CLI=(redis-cli)
fi

pids=()
descendants() { # every process below the given ones, from /proc (no ps needed)
  "$BENCH_PY" - "$@" <<'PYEOF'
import os, sys
kids = {}
for d in os.listdir("/proc"):
    try:
        if d.isdigit():
            with open(f"/proc/{d}/stat") as f:
                kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
    except (OSError, IndexError, ValueError):
        pass
todo, out = [int(p) for p in sys.argv[1:]], []
while todo:
    for c in kids.get(todo.pop(), []):
        out.append(c)
        todo.append(c)
print(" ".join(map(str, out)))
PYEOF
}
stop_services() {
  # The services of this row and everything they started (task children included), by id:
  # TERM, up to 10 s, then KILL.
  ((${#pids[@]})) || return 0
  local all p alive
  read -r -a all <<<"${pids[*]} $(descendants "${pids[@]}")"
  kill -TERM "${all[@]}" 2>/dev/null
  for _ in $(seq 50); do
    alive=0
    for p in "${all[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.2
  done
  kill -KILL "${all[@]}" 2>/dev/null
  wait "${pids[@]}" 2>/dev/null
  pids=()
}
trap stop_services EXIT

run_crucible_row() { # row index, label, worker env, bench.py args...
  local i=$1 row=$2 wenv=$3
  shift 3
  local rport=$((REDIS_PORT + i)) aport=$((API_PORT + i)) deadline
  "${REDIS[@]}" --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
    --maxmemory-policy noeviction >"$LOGS/$row-redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    "${REDIS_CLI[@]}" -p "$rport" ping 2>/dev/null | grep -q PONG && break
    sleep 0.1
  done
  REDIS_URL="redis://127.0.0.1:$rport" CRUCIBLE_PYTHON="$PY" RUST_LOG=${RUST_LOG:-info} \
    "$BIN/crucible-api" --bind "127.0.0.1:$aport" >"$LOGS/$row-api.log" 2>&1 &
  pids+=($!)
  local -a worker_env
  read -r -a worker_env <<<"$wenv ${WORKER_ENV:-}"
  # shellcheck disable=SC2086
  env REDIS_URL="redis://127.0.0.1:$rport" CRUCIBLE_PYTHON="$PY" RUST_LOG=${RUST_LOG:-info} \
    "${worker_env[@]}" "$BIN/crucible-worker" $WORKER_ARGS >"$LOGS/$row-worker.log" 2>&1 &
  pids+=($!)
  # The worker reports ok once its device passed the health check (NVML + CUDA probe on a GPU).
  if ! "$BENCH_PY" - "$aport" "$HEALTH_S" <<'PYEOF'; then
import json, sys, time, urllib.request
t0 = time.time()
url, t_end = f"http://127.0.0.1:{sys.argv[1]}/health", t0 + float(sys.argv[2])
health = None
while time.time() < t_end:
    try:
        health = json.load(urllib.request.urlopen(url, timeout=2))
        if health["status"] == "ok":
            break
    except Exception as e:
        health = str(e)
    time.sleep(0.2)
print(f"health after {time.time() - t0:.1f} s:", health, flush=True)
sys.exit(0 if isinstance(health, dict) and health.get("status") == "ok" else 1)
PYEOF
    echo "row $row: the worker did not become healthy in ${HEALTH_S} s; skipped (logs in logs.tar.gz)"
    tail -n 5 "$LOGS/$row-worker.log"
    stop_services
    return 1
  fi
  deadline=$(($(left) - 20))
  ((deadline > ROW_DEADLINE_S)) && deadline=$ROW_DEADLINE_S
  bench --mode crucible --label "$row" --api "http://127.0.0.1:$aport" --force-refresh \
    --worker-env "$wenv ${WORKER_ENV:-}" --deadline-s "$deadline" "$@" 2>&1 | tee "$LOGS/$row-bench.log"
  local rc=${PIPESTATUS[0]}
  grep -E "gpu (un)?healthy|giving task back|cuda fault|panicked" "$LOGS/$row-worker.log" | tail -n 5
  local t_stop
  t_stop=$(date +%s)
  stop_services
  echo "services stopped in $(($(date +%s) - t_stop)) s"
  return "$rc"
}

base_env=${BASE_SLOTS:+CRUCIBLE_DEVICE_SLOTS=$BASE_SLOTS}
rc=0
i=0
skipped=()
for row in $ROWS; do
  i=$((i + 1))
  est=$ROW_EST_S
  [[ "$row" == naive ]] && est=$NAIVE_EST_S
  if (($(left) < est)); then
    skipped+=("$row")
    continue
  fi
  echo "=== row $row at +$(elapsed) s ($(left) s of the budget left)"
  t_row=$(date +%s)
  case "$row" in
  naive)
    deadline=$(($(left) - 15))
    ((deadline > NAIVE_DEADLINE_S)) && deadline=$NAIVE_DEADLINE_S
    bench --mode naive --label naive --python "$PY" --deadline-s "$deadline" 2>&1 | tee "$LOGS/naive-bench.log"
    r=${PIPESTATUS[0]}
    ;;
  slots=[0-9]*)
    k=${row#slots=}
    run_crucible_row "$i" "$row" "CRUCIBLE_DEVICE_SLOTS=${k%%#*}"
    r=$?
    ;;
  precompile-off) run_crucible_row "$i" "$row" "$base_env CRUCIBLE_TRITON_PRECOMPILE=0"; r=$? ;;
  adaptive) run_crucible_row "$i" "$row" "$base_env" --timing adaptive; r=$? ;;
  adaptive-1%) run_crucible_row "$i" "$row" "$base_env" --timing adaptive --timing-target 0.01; r=$? ;;
  checks-off) run_crucible_row "$i" "$row" "$base_env CRUCIBLE_INTEGRITY_CHECKS=0"; r=$? ;;
  *) echo "unknown row $row (naive slots=K precompile-off adaptive checks-off)" >&2; r=2 ;;
  esac
  ((r != 0)) && rc=$r
  echo "=== row $row: rc $r, $(($(date +%s) - t_row)) s"
done
tar -czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null
echo "=== $(elapsed) s in all; logs in $OUT/logs.tar.gz"
((${#skipped[@]})) && echo "=== not run (no time left in ${BUDGET_S} s): next call ROWS=\"${skipped[*]}\""
report
exit $rc
