#!/usr/bin/env bash
# The long forms that scripts/test.sh leaves out (tests marked #[ignore] with a reason: each
# pays minutes of compiler or of waiting that CI's short profile need not). Installs and builds
# what scripts/test.sh does, then runs only those.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
ensure_redis
ensure_python
ensure_cxx
export CRUCIBLE_PYTHON
cargo build --workspace --bins
cargo nextest run --workspace --no-fail-fast --run-ignored only "$@"
