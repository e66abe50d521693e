#!/usr/bin/env bash
# The rollout submission path under load (docs/BENCHMARKS.md): N (10,000) rollouts made from
# the completions of tests/rollouts/rollouts.jsonl (unique ids, so a GRPO-like mix where the
# same completion recurs), submitted by `crucible rollouts submit` in batches of 1,000 to a
# CPU-worker service, every result streamed back. BROKER=redis runs redis-server, crucible-api
# and two crucible-worker processes; the default is `crucible up` with two CPU workers on the
# embedded broker. UNIQUE=1 makes every kernel distinct (no sharing, no cache) and measures the
# submission alone: 10,000 new tasks queued, not evaluated. Prints the table last; logs under
# $OUT (or target/bench-rollouts-*).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
ensure_python
export CRUCIBLE_PYTHON
N=${N:-10000}
BROKER=${BROKER:-memory}
out=${OUT:-target/bench-rollouts-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
cargo build --release --bins -q
bin=target/release
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url=http://127.0.0.1:$port
export CRUCIBLE_PROBLEMS=$PWD/tests/rollouts/problems.jsonl CRUCIBLE_CPU_THREADS=1
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
if [ "$BROKER" = redis ]; then
  ensure_redis
  rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  redis-server --port "$rport" --save '' --appendonly no >"$out/redis.log" 2>&1 & pids+=($!)
  export REDIS_URL=redis://127.0.0.1:$rport
  CRUCIBLE_BIND=127.0.0.1:$port $bin/crucible-api >"$out/api.log" 2>&1 & pids+=($!)
  for w in 1 2; do $bin/crucible-worker --cpu >"$out/worker$w.log" 2>&1 & pids+=($!); done
else
  unset REDIS_URL
  $bin/crucible up --cpu --extra-cpu-workers 1 --bind 127.0.0.1:$port >"$out/up.log" 2>&1 & pids+=($!)
fi
deadline=$((SECONDS + 180))
until curl -sf "$url/health" | grep -q '"status":"ok"'; do
  [ $SECONDS -lt $deadline ] || { log "service not healthy"; exit 1; }
  sleep 0.5
done
python3 scripts/bench/rollouts.py make tests/rollouts/rollouts.jsonl "$N" "$out/rollouts.jsonl" \
  ${UNIQUE:+unique}
if [ -n "${UNIQUE:-}" ]; then
  $bin/crucible rollouts submit "$out/rollouts.jsonl" --url "$url" >"$out/batches.txt" 2>"$out/cli.err"
  submit_s=$(sed -n 's/.* in \([0-9.]*\) s$/\1/p' "$out/cli.err" | head -1)
  log "broker: $BROKER; commit $(git rev-parse --short HEAD); $(nproc) cores"
  cat "$out/cli.err"
  curl -s "$url/queue/status" | python3 -c "import json,sys; q=json.load(sys.stdin); \
print('queued + running tasks', q['queued_normal'] + q['running'])"
  python3 -c "print('submission, rollouts/s', round($N / $submit_s))"
  exit 0
fi
start=$(date +%s.%N)
$bin/crucible rollouts submit "$out/rollouts.jsonl" --url "$url" --wait --out "$out/results.jsonl" \
  --num-correct-trials 2 --num-perf-trials 3 2>"$out/cli.err" | tee "$out/summary.txt"
end=$(date +%s.%N)
submit_s=$(sed -n 's/.* in \([0-9.]*\) s$/\1/p' "$out/cli.err" | head -1)
curl -s "$url/metrics" >"$out/metrics.txt"
curl -s "$url/queue/status" >"$out/queue.json"
log "broker: $BROKER; commit $(git rev-parse --short HEAD); $(nproc) cores"
python3 scripts/bench/rollouts.py report "$N" "$out/results.jsonl" "$out/metrics.txt" "$out/queue.json" "$submit_s" \
  "$(python3 -c "print($end - $start)")"
