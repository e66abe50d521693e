#!/usr/bin/env bash
# The integrity corpora on the GPU machine: Redis, the API and one worker on GPU 0 (as
# scripts/gpu-smoke.sh), then every entry of tests/exploits and tests/legit that runs on CUDA
# through the service; one line per entry and the summary last (scripts/integrity/run_corpus.py).
# Needs the bundle of scripts/gpu-bundle.sh; outputs under $OUT.
SUITE=integrity exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu-smoke.sh" "$@"
