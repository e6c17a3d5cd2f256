#!/usr/bin/env bash
# `make bench-distributed`: measures the sequence-parallel forms (fast/distributed/) on this machine and
# writes results/distributed/:
#   runs.json   every `hla mpi-bench` run: P = 1, 2 ranks (this machine has 2 cores; more ranks would be
#               oversubscribed, which is for correctness only), both cross-rank scans (mpi-chunked =
#               MPI_Exscan, mpi-chunked-rd = recursive doubling), strong scaling (n fixed) and weak
#               scaling (n per rank fixed), hla2 and linear, double, and hla2 at d = dv = 64; each with its
#               phases (local, scan, finish: max over ranks, median of repeats; the time is to each rank's
#               own rows) and apart the gather of the whole output, and bytes sent per rank
#   workspan.json the work/span model's P = 2 prediction for hla2 beside the measurement (experiments/model/)
#   calibration.json  MPI ping-pong latency/bandwidth between two ranks, one combine per operator
#   model.json + model.{png,pdf,svg}  the cost model fitted from them, to P = 1024, against a ring
#               (LASP: P − 1 sequential steps) and an all-gather of the summaries (LASP-2)
# About 5 minutes. Env: HLA_DIST_N (strong-scaling n, default 65536), HLA_DIST_REPS (5).
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/results/distributed"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpirun=(mpirun --allow-run-as-root --bind-to core)
n=${HLA_DIST_N:-65536}
reps=${HLA_DIST_REPS:-5}
d=16
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for op in hla2 linear; do
  for P in 1 2; do
    for form in mpi-chunked mpi-chunked-rd; do
      "${mpirun[@]}" -n "$P" "$build/bin/hla" mpi-bench --op "$op" --form "$form" --n "$n" --d $d --dv $d --chunk 64 \
        --repeats "$reps" | sed 's/^{/{"scaling":"strong",/' >>"$tmp"
      "${mpirun[@]}" -n "$P" "$build/bin/hla" mpi-bench --op "$op" --form "$form" --n $((n / 2 * P)) --d $d --dv $d \
        --chunk 64 --repeats "$reps" | sed 's/^{/{"scaling":"weak",/' >>"$tmp"
    done
  done
done
# hla2 at d = dv = 64 (the issue-28 case): each rank's rows kept (time_s), the gather reported apart (gather_s); with
# the final state, and outputs only as make bench times (since 2026-12-06).
for only in "" --outputs-only; do
  for P in 1 2; do
    "${mpirun[@]}" -n "$P" "$build/bin/hla" mpi-bench --op hla2 --form mpi-chunked --n "$n" --d 64 --dv 64 --chunk 64 \
      --repeats "$reps" $only | sed 's/^{/{"scaling":"strong",/' >>"$tmp"
  done
done
/usr/bin/python3 - "$tmp" "$out/runs.json" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump({"runs": runs}, open(sys.argv[2], "w"), indent=1)
print(f"{len(runs)} runs -> {sys.argv[2]}")
PY
: >"$tmp"
for op in hla2 ahla hla3 linear; do
  "${mpirun[@]}" -n 2 "$build/bin/hla" mpi-bench --op "$op" --n 4096 --d $d --dv $d --repeats 1 --calibrate >>"$tmp"
done
/usr/bin/python3 - "$tmp" "$out/calibration.json" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
json.dump({"calibration": runs}, open(sys.argv[2], "w"), indent=1)
PY
/usr/bin/python3 "$root/experiments/plots/distributed.py" "$out"
# The work/span model's one-pass prediction at P = 2 from P = 1, beside the measurement.
if [ -f "$root/results/bench.json" ]; then
  /usr/bin/python3 "$root/experiments/model/workspan.py" mpi-here "$out/runs.json" "$root/results/bench.json" --out "$out/workspan.json"
fi
