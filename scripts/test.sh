#!/usr/bin/env bash
# Installs what the tests need when missing (redis-server, openssl, the Python venv with torch and
# triton, NVIDIA's nvcc from PyPI, chromium for the status page's browser test, Schemathesis in
# a venv of its own, curl and jq for the README's examples),
# builds every binary, and runs the whole
# suite: unit tests, broker contract tests against a real redis-server, the harness checks and
# the end-to-end tests that start real API and worker processes (and a headless browser), the
# API fuzzer against its OpenAPI document, the chaos run's short profile, and the Python client's
# tests against a live server.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
ensure_redis
ensure_tls_tools
ensure_python
ensure_cxx
ensure_chromium
ensure_doc_tools
log "python: $CRUCIBLE_PYTHON ($("$CRUCIBLE_PYTHON" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'))"
log "redis: $(redis-server --version | cut -d' ' -f3)"
export CRUCIBLE_PYTHON
# The end-to-end tests run the binaries this build makes.
cargo build --workspace --bins
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast "$@"
else
  cargo test --workspace --no-fail-fast "$@"
fi
"$CRUCIBLE_PYTHON" tests/harness/check_screening.py
"$CRUCIBLE_PYTHON" tests/harness/check_spec.py
# Adaptive timing's stopping rule and checked calls, on synthetic times.
"$CRUCIBLE_PYTHON" tests/harness/check_timing.py
# A failed build's message leads with the compiler's errors (a broken extension built here).
"$CRUCIBLE_PYTHON" tests/harness/check_errors.py
# A CUDA candidate's lazily built extensions are built by the CPU stage's dry run (C++ here).
"$CRUCIBLE_PYTHON" tests/harness/check_builds.py
# The node's precompiled header of torch/extension.h is the one GCC takes for main.cpp.
"$CRUCIBLE_PYTHON" tests/harness/check_pch.py
# The output comparison's fast path (float32/float64) agrees with isclose and the exact path.
"$CRUCIBLE_PYTHON" tests/harness/check_compare.py
# The timed calls' outputs go into the judge's slots only when they fit; poison differs.
"$CRUCIBLE_PYTHON" tests/harness/check_slots.py
# The footprint a device child reports before it is let go, sized on the meta device.
"$CRUCIBLE_PYTHON" tests/harness/check_memory.py
# A task child's cores and priority: a CPU stage on lent device cores stays at SCHED_IDLE.
"$CRUCIBLE_PYTHON" tests/harness/check_cores.py
# The CPU stage's Triton dry run: its cache entries are the ones Triton's JIT looks up.
"$CRUCIBLE_PYTHON" tests/harness/check_triton_aot.py
# Which task processes make their CUDA context with one hardware queue.
"$CRUCIBLE_PYTHON" tests/harness/check_contexts.py
# nvcc's two front ends at once, against the real nvcc (installed from PyPI where missing).
ensure_nvcc
"$CRUCIBLE_PYTHON" tests/harness/check_nvcc_overlap.py
# Every environment variable the binaries read is documented in .env.example.
"$CRUCIBLE_PYTHON" scripts/check_env_example.py
# The built-in worked examples of one- and few-shot prompts: Triton ones run on CPU through the
# Triton interpreter against their Model, CUDA ones parsed and their build checked.
"$CRUCIBLE_PYTHON" scripts/check_worked_examples.py
# No source file over 600 lines, no import circle between a crate's files, gpu-worker's
# folders importing only the layers their rule allows; and the checker's own tests.
"$CRUCIBLE_PYTHON" scripts/check_layout.py
"$CRUCIBLE_PYTHON" scripts/test_check_layout.py
# deploy/: the alert rules and their unit tests, the dashboard, a staged install of every role
# and its units' verify and exposure bounds (installs promtool and systemd-analyze if missing).
bash scripts/check_deploy.sh
# The GPU benchmark's report and workload expansion (stdlib only; the small batch's shape).
"$CRUCIBLE_PYTHON" scripts/bench/test_bench.py
# The docs' examples checker's parsing and runner (stdlib only; a deliberately broken block fails).
"$CRUCIBLE_PYTHON" scripts/test_doc_examples.py
# The harness modules' layering: no module imports one above it, judge and runner apart.
"$CRUCIBLE_PYTHON" tests/harness/check_layers.py
# The HTTP API against its own OpenAPI document: Schemathesis on a live crucible-api (0 5xx,
# 0 undocumented statuses, 0 schema mismatches; under a minute).
CRUCIBLE_API_BIN="$PWD/target/debug/crucible-api" bash scripts/fuzz-api.sh
# The chaos run's short profile (docs/RELIABILITY.md): 200 tasks on a real Redis with AOF, two
# API replicas and three CPU workers through 10 worker kill -9s, 2 Redis restarts, an API kill
# and a rolling restart; fails unless 0 lost, 0 duplicated, 0 failed, 0 leaked (about 2 min).
CRUCIBLE_BIN_DIR="$PWD/target/debug" bash scripts/chaos.sh --profile ci --log-dir "${CRUCIBLE_CHAOS_LOGS:-/tmp/crucible-chaos/ci-$$}"
# The Python client against a live `crucible up` (the debug binary built above).
"$CRUCIBLE_PYTHON" -c 'import httpx, tenacity, pytest, unasync' 2>/dev/null ||
  "$CRUCIBLE_PYTHON" -m pip install --quiet --disable-pip-version-check httpx tenacity pytest unasync
CRUCIBLE_BIN="$PWD/target/debug/crucible" "$CRUCIBLE_PYTHON" -m pytest -q -p no:cacheprovider clients/python/tests
# The README's and docs' examples marked `<!-- example: run -->`, as written, against a live
# `crucible up --cpu` (about 1.5 min); those needing a trainer package are skipped here.
CRUCIBLE_BIN="$PWD/target/debug/crucible" "$CRUCIBLE_PYTHON" scripts/check_doc_examples.py
# The adapters against the real trainer packages (skipped above, where they are not installed;
# test_verifiers.py's harness program installs its few packages with uv from PyPI on first use).
TRAINERS_PYTHON=$(ensure_trainers_python)
CRUCIBLE_BIN="$PWD/target/debug/crucible" "$TRAINERS_PYTHON" -m pytest -q -p no:cacheprovider \
  clients/python/tests/test_cookbook.py clients/python/tests/test_skyrl.py \
  clients/python/tests/test_openenv.py clients/python/tests/test_verifiers.py \
  clients/python/tests/test_openrlhf.py clients/python/tests/test_openrlhf_agent.py \
  clients/python/tests/test_verl_agent_loop.py clients/python/tests/test_verl_reward_loop.py \
  clients/python/tests/test_trl.py \
  clients/python/tests/test_nemo_gym.py
# ... and the docs' examples that need one of those packages (`needs=`: every trainer page's
# snippets, docs/trainers/*.md, about 2 min), in the same venv.
CRUCIBLE_BIN="$PWD/target/debug/crucible" "$TRAINERS_PYTHON" scripts/check_doc_examples.py --needs-only
