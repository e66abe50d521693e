#!/usr/bin/env bash
# Fuzzes the HTTP API against its own OpenAPI document (/openapi.json) with Schemathesis: every
# documented operation gets generated valid and invalid requests, with the admin token so the
# protected routes are exercised, and the run fails on any 5xx, any status the document does
# not list for the route, or any body, content type or header that does not match it. The
# server is a crucible-api replica on a redis-server of its own (free ports, no worker: the
# fuzzed tasks are queued, never evaluated, so the run costs the API's time alone), with the
# problem registry of tests/rollouts. A task, a batch, a rollout batch and a tenant are made
# first and their ids given to the operations that take one (tests/fuzz/seed.py), so those are
# fuzzed past the 404 of an unknown id. Bounded by
# FUZZ_EXAMPLES (examples per operation, default 100) and FUZZ_TIMEOUT_S (default 300). Logs and
# the report under $FUZZ_OUT (default a temporary directory, kept on failure).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
ensure_redis
ensure_schemathesis
api=${CRUCIBLE_API_BIN:-$PWD/target/debug/crucible-api}
[ -x "$api" ] || cargo build -p crucible-api-server --bin crucible-api
out=${FUZZ_OUT:-$(mktemp -d -t crucible-fuzz.XXXXXX)}
mkdir -p "$out"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port)
port=$(free_port)
url=http://127.0.0.1:$port
token=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$out" \
  >"$out/redis.log" 2>&1 & pids+=($!)
CRUCIBLE_PROBLEMS=$PWD/tests/rollouts/problems.jsonl \
  REDIS_URL=redis://127.0.0.1:$rport CRUCIBLE_BIND=127.0.0.1:$port CRUCIBLE_AUTH=required \
  CRUCIBLE_ADMIN_TOKEN=$token "$api" >"$out/api.log" 2>&1 & pids+=($!)
deadline=$((SECONDS + 60))
until curl -sf "$url/health" >/dev/null; do
  [ $SECONDS -lt $deadline ] || { log "crucible-api not up; see $out/api.log"; exit 1; }
  sleep 0.2
done
# The settings, then the seeded ids as per-operation parameters; the token reaches
# Schemathesis through the environment, not its command line.
cp tests/fuzz/schemathesis.toml "$out/schemathesis.toml"
CRUCIBLE_FUZZ_TOKEN=$token python3 tests/fuzz/seed.py "$url" >>"$out/schemathesis.toml"
log "fuzzing $url/openapi.json (schemathesis $SCHEMATHESIS_VERSION; logs in $out)"
status=0
# One worker: Hypothesis parses lambdas' source with `ast`, which CPython 3.11 does not keep
# thread-safe ("AST constructor recursion depth mismatch" with two), and one is deterministic
# under the fixed seed.
CRUCIBLE_FUZZ_TOKEN=$token timeout "${FUZZ_TIMEOUT_S:-300}" "$SCHEMATHESIS_PYTHON" -m schemathesis.cli \
  --config-file "$out/schemathesis.toml" run "$url/openapi.json" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,response_headers_conformance \
  --max-examples "${FUZZ_EXAMPLES:-100}" --request-timeout 30 --workers 1 \
  --generation-database none --seed "${FUZZ_SEED:-15}" --no-color \
  --report junit,ndjson --report-dir "$out" || status=$?
# Requests by operation and status; fails when an operation never got past the checks in
# front of its handler.
python3 tests/fuzz/summary.py "$out"/ndjson-*.ndjson || { [ "$status" -ne 0 ] || status=1; }
# An error the server logged is a bug even when its answer passed the checks.
if sed 's/\x1b\[[0-9;]*m//g' "$out/api.log" | grep -E '^\S+ +ERROR '; then
  log "crucible-api logged errors"
  [ "$status" -ne 0 ] || status=1
fi
if [ "$status" -ne 0 ]; then
  log "fuzzing failed (exit $status); the API's log and the report are in $out"
  exit "$status"
fi
[ -n "${FUZZ_OUT:-}" ] || rm -rf "$out"
