#!/usr/bin/env bash
# KernelBench's measurement options on the GPU machine: Redis, the API and one worker on GPU 0
# (as scripts/gpu-smoke.sh), then six real level-1 problems with our Triton candidates under
# precision bf16/fp16, timing_method do_bench/host_time and reference_backend compile beside
# the defaults, and the compiled reference again (from the reference cache); the table last
# (scripts/gpu-parity/run.py). Needs the bundle of scripts/gpu-bundle.sh; outputs under $OUT.
SUITE=parity exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu-smoke.sh" "$@"
