#!/usr/bin/env bash
# `make bench`: the quick default benchmark subset -> results/bench.json (Google Benchmark JSON) and its figure
# results/bench.{png,pdf,svg}.
#   hla2 and linear chunked, float and double, n = 65536, d = dv = 64, threads 1 and 2, their multi-head
#   runs (4 heads with their own Q, K, V), hla2 multi-query
#   (4 heads sharing K, V), and the roofline
#   (Eigen's square matrix product). Chunk width: HLA_BENCH_CHUNK (default 48, see experiments/bench/bench_main.cpp).
# Larger set: HLA_BENCH_FULL=1 scripts/bench.sh <build>  (n = 2^10..2^20, d = dv in {16, 64, 128}, every
# registered fast form), written to results/bench-full.json instead.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/results"
if [[ "${HLA_BENCH_FULL:-0}" != "0" ]]; then
  out="$root/results/bench-full.json"
  filter='.'
else
  out="$root/results/bench.json"
  filter='^((hla2|linear)/chunked/(float|double)/n:65536/d:64/dv:64/threads:[12])|^hla2/chunked-multiquery/(float|double)/n:65536/|^(hla2|linear)/chunked-multihead/(float|double)/n:65536/|^roofline/'
fi
# Repetitions of all entries are interleaved in random order, so a slow spell of the shared machine spreads
# over the entries instead of hitting one of them (ratios between entries are what the targets read).
"$build/bin/hla_bench" --benchmark_filter="$filter" --benchmark_repetitions="${HLA_BENCH_REPS:-5}" \
  --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true --benchmark_out="$out" --benchmark_out_format=json \
  --benchmark_counters_tabular=true
echo "wrote $out"
# Its figure: GFLOP/s against the rooflines, threads side by side (results/bench.png beside bench.json).
/usr/bin/python3 "$root/experiments/plot.py" "$out"
