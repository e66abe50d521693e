#!/usr/bin/env bash
# The environment side on the GPU machine: Redis, the API (the real KernelBench problems of the
# bundle) and one worker on GPU 0 (as scripts/gpu-smoke.sh), then scripts/gpu-episodes/run.py:
# a level-1 slice (our Triton candidates' problems) as a problem set, one multi-turn episode per
# problem with scripted completions (wrong, uncompilable, correct), and a checkpoint batch whose
# report is checked against a hand computation; `crucible report` prints it last. Needs
# scripts/gpu-bundle.sh's bundle. Extra arguments go to run.py (e.g. --prompt-option raicl).
SUITE=episodes exec bash "$(dirname "${BASH_SOURCE[0]}")/gpu-smoke.sh" "$@"
