#!/usr/bin/env bash
# `make publish`: the deliberate refresh of the published results/ (what the README, docs and the committed report
# show) from one finished `make run` of this machine: its ledger and its default and gated sweeps replace the
# published ones whole (never merged with another machine's or commit's points), then the figures and
# results/report.html are redrawn. Commit the result to publish it.
set -euo pipefail
run=${1:?usage: scripts/publish.sh RUN-DIRECTORY}
for f in claims.json claims.md default/points.csv default/points.jsonl gated/points.csv gated/points.jsonl; do
  [ -s "$run/$f" ] || { echo "make publish: $run/$f is missing: run make run (RUN=$run) to the end first" >&2; exit 2; }
done
cp "$run/claims.json" "$run/claims.md" results/
for sweep in default gated; do
  mkdir -p "results/$sweep"
  cp "$run/$sweep/points.csv" "$run/$sweep/points.jsonl" "results/$sweep/"
done
/usr/bin/python3 experiments/plot.py results/default results/gated results/claims.json
/usr/bin/python3 experiments/report.py
echo "make publish: results/ now holds the run in $run; review git diff results/ and commit it"
