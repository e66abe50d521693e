#!/usr/bin/env bash
# The trainer integrations on the GPU machine: Redis, the API (the bundle's real KernelBench
# problems) and one worker on GPU 0 (as scripts/gpu-smoke.sh), then scripts/gpu-trainers/
# trainers.py: per problem a GRPO group of two episodes, one through the OpenEnv WebSocket
# session and one through the episodes API, every turn's completion also through the TRL and
# VERL adapters and POST /rollouts, and every path's reward compared. Needs scripts/gpu-bundle.sh's
# bundle (with websockets: BUNDLE_WEBSOCKETS=1). Extra arguments go to trainers.py.
SUITE=trainers exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu-smoke.sh" "$@"
