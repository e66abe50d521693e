#!/usr/bin/env bash
# The trusted measurement on the GPU machine (docs/INTEGRITY.md, "Timing the candidate cannot
# write"), each part in one device call:
#
#   scripts/gpu-measurement.sh attacks            the measurement attack corpus
#       (tests/tests/measurement.rs: forged timings, faked counts, a GPU neighbour's side-stream
#       work, burners, a thread bomb, self-inflicted SIGKILLs) against one crucible-worker on
#       GPU 0 with its default device slots, among honest neighbours; its table is printed last.
#       Needs the bundle of `BUNDLE_TESTS=measurement scripts/gpu-bundle.sh`.
#   scripts/gpu-measurement.sh bench LABEL [BIN]   the KernelBench level-1 bench
#       (scripts/bench/workload-level1.json) with the worker in BIN (default the bundle's), as row
#       LABEL of $OUT/results.json; WORKER_ENV as scripts/bench-gpu.sh takes it.
#   scripts/gpu-measurement.sh compare            the honest tasks' speedups and kernel times of
#       the rows `new` against `old` (today's measurement: the worker of `OLD_WORKER=... 
#       scripts/gpu-bundle.sh`, in .gpu-run/bin-old) and `new` against `new-slots1`: relative
#       differences, median and p95; and what the new checks cost per task (stage_ms).
#
# One worker, not two: two workers on one GPU do not share a timing gate, and each would find
# the other's work on the device whenever it times.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BUNDLE=${BUNDLE:-.gpu-run}
OUT=${OUT:-/tmp/crucible-measurement}
mkdir -p "$OUT"
export PATH="$PWD/$BUNDLE/redis-bin:$PATH"
export CRUCIBLE_PYTHON=${CRUCIBLE_PYTHON:-python3} CRUCIBLE_REPO_ROOT="$PWD"
MODE=${1:-}
shift || true
case "$MODE" in
attacks)
  export CRUCIBLE_TEST_WORKER_ARGS="--gpu 0" CRUCIBLE_TEST_WORKERS=1
  "$BUNDLE/bin/deps/measurement" --nocapture "$@" 2>&1 | tee "$OUT/measurement.txt"
  rc=${PIPESTATUS[0]}
  cp /tmp/crucible-e2e/measurement-*/*.log "$OUT/" 2>/dev/null
  echo "--- table (measured.log) ---"
  cat /tmp/crucible-e2e/measurement-*/measured.log
  exit "$rc"
  ;;
bench)
  label=${1:?label}
  bin=${2:-$BUNDLE/bin}
  BIN=$bin LABEL=$label OUT=$OUT WORKLOAD=scripts/bench/workload-level1.json \
    DEADLINE_S=${DEADLINE_S:-240} API_PORT=${API_PORT:-10908} scripts/bench-gpu.sh on
  ;;
compare)
  python3 - "$OUT/results.json" <<'PYEOF'
import statistics, sys
sys.path.insert(0, "scripts/bench")
import json, report
with open(sys.argv[1]) as f:
    runs = json.load(f)["runs"]
by, _ = report.latest_by_label(runs)
s = {m: report.combine(r) for m, r in by.items()}
def line(a, b):
    if a not in s or b not in s:
        print(f"{a} vs {b}: a row is missing ({sorted(s)})")
        return
    sp = report.rel_diffs(s[a]["tasks"], s[b]["tasks"], "speedup")
    kt = report.rel_diffs(s[a]["tasks"], s[b]["tasks"], "ker_ms")
    p = lambda v, q: "-" if not v else f"{report.pct(v, q) * 100:.1f} %"
    print(f"{a} vs {b}: honest tasks {len(sp)}: speedup rel. diff p50 {p(sp, 50)} p95 {p(sp, 95)};"
          f" kernel time p50 {p(kt, 50)} p95 {p(kt, 95)}; verdicts as expected"
          f" {s[a]['expected']}/{s[a]['n']} vs {s[b]['expected']}/{s[b]['n']}")
def perf(m):
    vals = [(t.get("stage_ms") or {}).get("performance") for t in s.get(m, {}).get("tasks", [])]
    vals = [v for v in vals if isinstance(v, (int, float))]
    return statistics.median(vals) if vals else None
line("new", "old")
line("new", "new-slots1")
for m in ("old", "new", "new-slots1"):
    if m in s:
        print(f"{m}: {s[m]['per_min'] or 0:.1f} evaluations/min, performance stage p50 {perf(m)} ms")
PYEOF
  ;;
*)
  echo "usage: $0 attacks|bench LABEL [BIN]|compare" >&2
  exit 2
  ;;
esac
