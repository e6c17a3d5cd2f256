#!/usr/bin/env bash
# `make bench`: the quick default benchmark subset -> results/bench.json (Google Benchmark JSON) and its figure
# results/bench.{png,pdf,svg}, in one run (about 10 minutes on 2 cores):
#   - the forms: hla2, ahla and linear chunked, hla2 chunked-fused, float and double, n = 65536, d = dv = 64,
#     at each thread count of HLA_BENCH_THREADS (below), and each one's two-core ceiling (ceiling/...: its two
#     halves at once, nothing shared, the limit its threads:2 entry is read against); their multi-head runs (4 heads with their own Q, K, V), hla2 multi-query (4 heads
#     sharing K, V); hla2's decoding kernel (one thread); the chunked forms of hla2, ahla and linear with per-token
#     gates beside the same forms at a fixed γ < 1, and the naive cumulative-product gated formulation (one thread);
#   - the machine's limits (experiments/bench/gemm_libraries.cpp): every GEMM library's 1024² product
#     (roofline/<library>/...: eigen, openblas, blis, libxsmm; at each thread count), the chunk form's own
#     product shapes in each library (gemm/...), the peak FMA rate and clock (peak/...), the cache
#     bandwidth of the decoding state (bandwidth/...);
#   - the PyTorch peer (experiments/peer/torch_chunked.py) on the same inputs, at each thread count, in each of its
#     formulations, its outputs checked against ours (peer/torch/...), and torch.mm's 1024² product
#     (roofline/torch/...), merged into the same JSON; rooflines and peer with OpenBLAS's own kernel choice;
#   - the work/span model's predictions beside the measured times (experiments/model/, results/model.json);
#   - the targets' ratios (experiments/bench_targets.py), printed and written into the JSON ("targets").
# Chunk width: HLA_BENCH_CHUNK (default 48, see experiments/bench/bench_main.cpp); repetitions HLA_BENCH_REPS (5).
# Thread counts: HLA_BENCH_THREADS (make bench THREADS="1 2 4 8 16"; default "1 2"), positive integers separated by
# spaces; the default subset needs 1 and 2 among them (the targets read them).
# Larger set: HLA_BENCH_FULL=1 scripts/bench.sh <build>  (n = 2^10..2^20, d = dv in {16, 64, 128}, every
# registered fast form, no peer), written to results/bench-full.json instead.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/results"
# hla_bench alone reads and checks HLA_BENCH_THREADS (exit 2 and why on a bad list) and prints it back sorted, so the
# filter and the peer below time the thread counts its entries were registered at.
threads=$("$build/bin/hla_bench" --print-threads)
if [[ "${HLA_BENCH_FULL:-0}" == "0" && " $threads " != " 1 2 "* ]]; then
  echo "bench.sh: HLA_BENCH_THREADS='$threads' must list 1 and 2, which the targets read (bench_targets.py)" >&2
  exit 2
fi
shape='n:65536/d:64/dv:64'
if [[ "${HLA_BENCH_FULL:-0}" != "0" ]]; then
  out="$root/results/bench-full.json"
  filter='.'
else
  out="$root/results/bench.json"
  # <op>/chunked also matches its gated and fixed-γ siblings (.../threads:<t>/gates:..., /gamma:...: docs/benchmarks.md
  # "Gated forms"); the naive cumulative-product formulation at its one thread.
  filter="^((hla2|ahla|linear)/chunked|hla2/chunked-fused)/(float|double)/$shape/threads:(${threads// /|})(/|$)|^hla2/decode/(float|double)/$shape/threads:1"
  filter+="|^(hla2|ahla|linear)/chunked-naive-cumprod/(float|double)/$shape/threads:1/gates:"
  filter+="|^hla2/chunked-multiquery/(float|double)/n:65536/|^(hla2|linear)/chunked-multihead/(float|double)/n:65536/|^hla2/chunked-fused-multihead/(float|double)/n:65536/"
  filter+="|^ceiling/((hla2|linear)/chunked|hla2/chunked-fused)/(float|double)/$shape/threads:2"
  filter+='|^roofline/|^gemm/|^peak/|^bandwidth/|^phase/'
fi
# No BLAS thread of a library may spin beside a form after its own entry (OpenBLAS's idle threads busy-wait
# for 2^28 cycles by default): 2^4 cycles, then sleep.
export OPENBLAS_THREAD_TIMEOUT=4

# The rooflines and the PyTorch peer run with OpenBLAS choosing its own kernels: a machine may set
# OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in its environment, and they are unset for these commands alone (the
# core OpenBLAS then chose is recorded: hla_openblas in the context, openblas_core in the peer's entries).
unhandicapped=(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE)
peer_entries=()
if [[ "${HLA_BENCH_FULL:-0}" == "0" ]]; then
  peer=$(mktemp -d)
  trap 'rm -rf "$peer"' EXIT
  "$build/bin/hla_bench" --write-peer-inputs "$peer"
  for t in $threads; do
    "${unhandicapped[@]}" OMP_NUM_THREADS=$t OPENBLAS_NUM_THREADS=$t /usr/bin/python3 "$root/experiments/peer/torch_chunked.py" "$peer" \
      --threads "$t" --chunk "${HLA_BENCH_CHUNK:-48}" --reps "${HLA_BENCH_REPS:-5}" --out "$peer/peer-$t.json"
    peer_entries+=("$peer/peer-$t.json")
  done
fi

# Repetitions of all entries are interleaved in random order, so a slow spell of the shared machine spreads
# over the entries instead of hitting one of them (ratios between entries are what the targets read).
"${unhandicapped[@]}" "$build/bin/hla_bench" --benchmark_filter="$filter" --benchmark_repetitions="${HLA_BENCH_REPS:-5}" \
  --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true --benchmark_out="$out" --benchmark_out_format=json \
  --benchmark_counters_tabular=true
echo "wrote $out"
if [[ "${HLA_BENCH_FULL:-0}" == "0" ]]; then
  /usr/bin/python3 "$root/experiments/bench_targets.py" "$out" --add-entries "${peer_entries[@]}" --write
  # The work/span model beside the measurements: P = 1, 2 and every other count here, its predictions to P = 64
  # (experiments/model/workspan.py; `workspan.py xeon DIR` checks it against 16-core measurements).
  /usr/bin/python3 "$root/experiments/model/workspan.py" bench "$out" --out "$root/results/model.json"
fi
# Its figure: GFLOP/s against the rooflines, threads side by side (results/bench.png beside bench.json).
/usr/bin/python3 "$root/experiments/plot.py" "$out"
