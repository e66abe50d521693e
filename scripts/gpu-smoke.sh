#!/usr/bin/env bash
# GPU smoke run, on the GPU machine: Redis, the API and one worker on GPU 0, then real
# KernelBench level-1 problems with our Triton and CUDA candidates and faulting candidates
# (illegal memory access, hangs, compile errors); prints the table last. Needs the bundle made
# by scripts/gpu-bundle.sh (release binaries, redis-server with its libraries, the problems).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUNDLE=${BUNDLE:-.gpu-run}
OUT=${OUT:-/tmp/crucible-smoke}
mkdir -p "$OUT"
PY=${CRUCIBLE_PYTHON:-python3}
REDIS_PORT=${REDIS_PORT:-6390}
API_PORT=${API_PORT:-10907}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
"$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$OUT/gpu.txt"
# The timing check's packed slots across two processes (the harness's CUDA IPC, no service).
"$PY" tests/harness/check_slots_cuda.py | tee "$OUT/slots-cuda.txt" || { echo "check_slots_cuda failed"; exit 1; }

# Only redis-server gets the bundled libraries: the workers' Python must not see them.
LD_LIBRARY_PATH="$BUNDLE/redis" "$BUNDLE/redis/redis-server" --port "$REDIS_PORT" --bind 127.0.0.1 \
  --save "" --appendonly no --maxmemory-policy noeviction >"$OUT/redis.log" 2>&1 &
pids=($!)
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 100); do
  LD_LIBRARY_PATH="$BUNDLE/redis" "$BUNDLE/redis/redis-cli" -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break
  sleep 0.1
done

export REDIS_URL="redis://127.0.0.1:$REDIS_PORT" CRUCIBLE_PYTHON="$PY" RUST_LOG=${RUST_LOG:-info}
# Problems by {level, id}: the real KernelBench problems of the bundle.
export KERNELBENCH_ROOT="$BUNDLE/kernelbench"
# The RA-ICL corpus of our solved kernels, when the bundle has its index (gpu-bundle.sh).
[[ -d "$BUNDLE/corpus" ]] && export CRUCIBLE_CORPUS="$BUNDLE/corpus"
"$BUNDLE/bin/crucible-api" --bind "127.0.0.1:$API_PORT" >"$OUT/api.log" 2>&1 &
pids+=($!)
"$BUNDLE/bin/crucible-worker" --gpu 0 >"$OUT/worker.log" 2>&1 &
pids+=($!)
# The worker reports ok once its GPU passed the health check (NVML + CUDA probe).
"$PY" - "$API_PORT" <<'PYEOF'
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

if [[ "${SUITE:-smoke}" == rollouts ]]; then
  # scripts/gpu-rollouts.sh: the rollout corpus against the real problems, by the CLI, then
  # two turns of the Python client's GRPO example (httpx from the bundle).
  "$BUNDLE/bin/crucible" rollouts submit tests/rollouts/rollouts.jsonl \
    --url "http://127.0.0.1:$API_PORT" --wait --out "$OUT/rewards.jsonl" "$@" 2>"$OUT/cli.err" \
    | tee "$OUT/summary.txt"
  rc=${PIPESTATUS[0]}
  PYTHONPATH="$BUNDLE/pylib:clients/python" "$PY" clients/python/examples/grpo_loop.py \
    --url "http://127.0.0.1:$API_PORT" --rollouts tests/rollouts/rollouts.jsonl --turns 2 \
    >"$OUT/grpo_loop.txt" 2>&1 || rc=1
  tail -n 5 "$OUT/grpo_loop.txt"
  "$PY" scripts/gpu-rollouts/table.py tests/rollouts/expected.json "$OUT/rewards.jsonl" \
    | tee "$OUT/table.txt"
  cat "$OUT/summary.txt"
  exit $rc
elif [[ "${SUITE:-smoke}" == episodes ]]; then
  # scripts/gpu-episodes.sh: a level-1 slice as a problem set, multi-turn episodes with
  # scripted completions, and a checkpoint batch's report, by the Python client (httpx from
  # the bundle); then the same report through `crucible report`.
  PYTHONPATH="$BUNDLE/pylib:clients/python" "$PY" scripts/gpu-episodes/run.py \
    --api "http://127.0.0.1:$API_PORT" --manifest scripts/gpu-smoke/candidates/manifest.json \
    --candidates scripts/gpu-smoke/candidates --out "$OUT" "$@" | tee "$OUT/episodes.txt"
  rc=${PIPESTATUS[0]}
  # The CLI binary is left out of bundles trimmed to the device tool's 64 MiB.
  if [[ -s "$OUT/checkpoint_batch.txt" && -x "$BUNDLE/bin/crucible" ]]; then
    "$BUNDLE/bin/crucible" report "$(cat "$OUT/checkpoint_batch.txt")" \
      --url "http://127.0.0.1:$API_PORT" --json "$OUT/report-cli.json" | tee "$OUT/report-cli.txt"
  fi
  exit $rc
elif [[ "${SUITE:-smoke}" == trainers ]]; then
  # scripts/gpu-trainers.sh: GRPO groups of episodes through the OpenEnv WebSocket session and
  # the episodes API, their completions through the TRL and VERL adapters and POST /rollouts,
  # every path's reward compared (httpx and websockets from the bundle).
  PYTHONPATH="$BUNDLE/pylib:$BUNDLE/pylib-ws:clients/python" "$PY" scripts/gpu-trainers/trainers.py \
    --api "http://127.0.0.1:$API_PORT" --manifest scripts/gpu-smoke/candidates/manifest.json \
    --candidates scripts/gpu-smoke/candidates --out "$OUT" "$@" | tee "$OUT/trainers.txt"
  exit "${PIPESTATUS[0]}"
elif [[ "${SUITE:-smoke}" == parity ]]; then
  # scripts/gpu-parity.sh: the measurement options (precision, timing_method,
  # reference_backend) on real problems with our Triton candidates.
  "$PY" scripts/gpu-parity/run.py --api "http://127.0.0.1:$API_PORT" \
    --problems "$BUNDLE/kernelbench" --candidates scripts/gpu-smoke/candidates \
    --out "$OUT/tasks.jsonl" "$@"
elif [[ "${SUITE:-smoke}" == integrity ]]; then
  # scripts/gpu-integrity.sh: the exploit and honest corpora instead of the smoke problems.
  "$PY" scripts/integrity/run_corpus.py --api "http://127.0.0.1:$API_PORT" \
    --out "$OUT/integrity.json" "$@"
else
  "$PY" scripts/gpu-smoke/run.py --api "http://127.0.0.1:$API_PORT" \
    --problems "$BUNDLE/kernelbench" --candidates scripts/gpu-smoke/candidates \
    --manifest scripts/gpu-smoke/candidates/manifest.json --out "$OUT/tasks.jsonl" "$@"
fi
rc=$?
grep -E "gpu (un)?healthy|giving task back|cuda fault" "$OUT/worker.log" | tail -n 20
exit $rc
