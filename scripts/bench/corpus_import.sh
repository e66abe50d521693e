#!/usr/bin/env bash
# The corpus import benchmark (docs/BENCHMARKS.md, "Corpus import"): KernelBook and Sakana
# archive parquet files synthesised in their published schemas with as many rows as the
# published files (48,777), imported and indexed with the functions `crucible corpus import`
# calls, then every KernelBench problem of $KERNELBENCH searched for each backend (k = 3, own
# entries left out); prints the index build time and the query p50/p90/p99.
#
#   scripts/bench/corpus_import.sh                 KERNELBENCH=../shared/kernelbench by default
#   scripts/bench/corpus_import.sh --scale 0.1     a tenth of the rows (a quick look)
#
# Extra arguments go to the example (corpus/examples/import_bench.rs). Release build.
set -euo pipefail
cd "$(dirname "$0")/../.."
KERNELBENCH=${KERNELBENCH:-../shared/kernelbench}
[ -d "$KERNELBENCH/level1" ] || { echo "no KernelBench at $KERNELBENCH (set KERNELBENCH)" >&2; exit 2; }
cargo build --release -p crucible-corpus --features fixtures --example import_bench
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
exec target/release/examples/import_bench --kernelbench "$KERNELBENCH" "$@"
