#!/usr/bin/env bash
# `make run`: the harness's main job on this machine, a few minutes on 2 cores. Everything it measures goes into a
# run directory of its own (untracked: runs/ is ignored), never into the committed results/ (the published run):
#   RUN (default runs/<host>-<commit>[-dirty]) holds run.json (host, build), claims.{json,md,png}, default/ and
#   gated/ (points.csv, figures) and report.html.
#   1. every form x scalar against its reference (a table, seconds)
#   2. the claims ledger -> RUN/claims.{json,md}
#   3. the default sweep -> RUN/default/points.csv and the gated one (per-token gates) -> RUN/gated/; a rerun
#      resumes them, but only from points this build measured on this machine (`hla sweep --same-build`: a points
#      file with any other point is refused, never mixed)
#   4. the figures and the run's report page RUN/report.html (experiments/report.py), whose path it prints
# `make publish` copies a finished run over the published results/ (scripts/publish.sh).
# SWEEPS (environment; `make run SWEEPS=...`): the sweep configs instead of the default and gated ones, e.g. your own;
# LEDGER=skip leaves the ledger out (a quick look at a sweep).
set -euo pipefail
# hla links OpenBLAS (LIBXSMM's fallback) but none of its forms calls it; its thread pool, made at load, spins for its
# time-out and was counted in the first point's threads_used (2 at threads = 1, when the first point came within that
# time-out of the start). One OpenBLAS thread unless the caller says otherwise.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
build=${1:-build}
run=${2:-$(bash "$(dirname "$0")/run-dir.sh")}
sweeps=${SWEEPS:-configs/default.toml configs/gated.toml}
host=$(hostname -s 2>/dev/null || hostname)
# A run directory belongs to one machine: one made elsewhere (copied, or on a shared disk) is not resumed.
if [ -f "$run/run.json" ] && ! grep -q "\"host\": \"$host\"" "$run/run.json"; then
  echo "make run: $run was measured on another host ($(grep -o '"host": "[^"]*"' "$run/run.json")); pass RUN=<a new directory>" >&2
  exit 2
fi
mkdir -p "$run"
[ -f "$run/run.json" ] || printf '{"host": "%s", "started": "%s", "build": "%s"}\n' "$host" \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$build" >"$run/run.json"
plots=()
if [ "${LEDGER:-}" != skip ]; then
  "$build/bin/hla" check
  "$build/bin/hla" claims --out "$run"
  plots+=("$run/claims.json")
fi
for config in $sweeps; do
  name=$(basename "$config" .toml)
  "$build/bin/hla" sweep "$config" --out "$run/$name" --same-build
  plots+=("$run/$name")
done
# Debian's python3 has matplotlib (scripts/install-deps.sh); a python3 earlier on PATH may not.
/usr/bin/python3 experiments/plot.py "${plots[@]}"
/usr/bin/python3 experiments/report.py --results "$run"
