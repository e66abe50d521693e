#!/usr/bin/env bash
# Sets up what is missing, builds, and runs `crucible up` on 127.0.0.1:10907: the API, the
# lease reaper and one worker per visible GPU (one CPU worker without a GPU). Uses the
# embedded broker unless REDIS_URL is set. Extra arguments go to `crucible up`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$(crucible_root)"
check_prerequisites
ensure_python
log "python: $CRUCIBLE_PYTHON"
cargo build --release --quiet -p crucible-cli --bin crucible
exec target/release/crucible up "$@"
