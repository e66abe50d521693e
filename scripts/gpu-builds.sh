#!/usr/bin/env bash
# CUDA builds on the GPU host, one device call: tests/harness/check_nvcc_overlap.py against the
# host's nvcc (and load_inline through the overlap, run on the GPU), then
# scripts/bench/builds.py side-by-side (cold builds of the CUDA workload's candidates, torch's
# way against the worker's). Writes check.txt, side-by-side.txt and side-by-side.json to $OUT.
#   ARMS=torch,overlap[,pch] COUNT=12 (0: all 36) JOBS=4 (candidates at once) SBS_S=330
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-/tmp/crucible-builds}
mkdir -p "$OUT"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export CRUCIBLE_NVCC=${CRUCIBLE_NVCC:-$CUDA_HOME/bin/nvcc}
PY=${CRUCIBLE_PYTHON:-python3}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$CRUCIBLE_NVCC" --version | tail -2
echo "cores $(nproc); $(g++ --version | head -1)"
timeout 240 "$PY" tests/harness/check_nvcc_overlap.py >"$OUT/check.txt" 2>&1
echo "check_nvcc_overlap rc=$?"
tail -4 "$OUT/check.txt"
timeout "${SBS_S:-330}" "$PY" scripts/bench/builds.py side-by-side --out "$OUT/sbs" \
  --arms "${ARMS:-torch,overlap}" --count "${COUNT:-12}" --jobs "${JOBS:-4}" >"$OUT/side-by-side.txt" 2>&1
echo "side-by-side rc=$?"
cp "$OUT/sbs/builds.json" "$OUT/side-by-side.json" 2>/dev/null
rm -rf "$OUT/sbs"
tail -20 "$OUT/side-by-side.txt"
