#!/usr/bin/env bash
# The rollout corpus on the GPU machine: Redis, the API (problem registry: the real KernelBench
# problems of the bundle, via KERNELBENCH_ROOT) and one worker on GPU 0 (as
# scripts/gpu-smoke.sh), then tests/rollouts/rollouts.jsonl through `crucible rollouts submit`
# and the Python client's GRPO example; the table last. Needs scripts/gpu-bundle.sh's bundle.
SUITE=rollouts exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu-smoke.sh" "$@"
