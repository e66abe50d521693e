#!/usr/bin/env bash
# Makes .gpu-run/ (git-ignored): what a GPU run needs that the GPU machine lacks. Release
# binaries, redis-server and redis-cli with their shared libraries, and the KernelBench
# problems from ../shared/kernelbench. Name .gpu-run in the device tool's `carry`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
ensure_redis
ensure_python
KB=${KERNELBENCH_ROOT:-../shared/kernelbench}
cargo build --release --workspace --bins
rm -rf .gpu-run && mkdir -p .gpu-run/bin .gpu-run/redis .gpu-run/kernelbench
cp target/release/crucible target/release/crucible-api target/release/crucible-worker .gpu-run/bin/
# The harness files the binaries embed, for the bench's naive loop (same code in every mode).
mkdir -p .gpu-run/harness && cp gpu-worker/harness/harness.py gpu-worker/harness/screen.py gpu-worker/harness/transport.py .gpu-run/harness/
strip .gpu-run/bin/* 2>/dev/null || true
for exe in "$(command -v redis-server)" "$(command -v redis-cli)"; do
  cp "$exe" .gpu-run/redis/
  ldd "$exe" | awk '/=> \//{print $3}' | grep -E 'jemalloc|lzf|atomic' \
    | xargs -r -I{} cp -L {} .gpu-run/redis/
done
cp -r "$KB/level1" "$KB/level2" "$KB/level3" "$KB/baseline_times" .gpu-run/kernelbench/
# The Python client's one dependency (httpx, pure Python, with its own) for the GPU machine,
# which has no package index.
mkdir -p .gpu-run/pylib
"$CRUCIBLE_PYTHON" - .gpu-run/pylib <<'PYEOF'
import importlib, pathlib, shutil, sys
for name in ["httpx", "httpcore", "h11", "anyio", "sniffio", "idna", "certifi"]:
    try:
        src = pathlib.Path(importlib.import_module(name).__file__).parent
    except ImportError:
        continue  # not every httpx version needs every one of these
    shutil.copytree(src, pathlib.Path(sys.argv[1]) / name, ignore=shutil.ignore_patterns("__pycache__"))
PYEOF
du -sh .gpu-run
