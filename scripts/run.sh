#!/usr/bin/env bash
# `make run`: the harness's main job, a few minutes on this machine.
#   1. every form x scalar against its reference (a table, seconds)
#   2. the claims ledger -> results/claims.{json,md}
#   3. the default sweep -> results/default/points.csv (resumes: points already there are kept) and its figures;
#      the gated sweep (per-token gates) -> results/gated/
#   4. the ledger's figure and the report page results/report.html (experiments/report.py), whose path it prints
set -euo pipefail
build=${1:-build}
"$build/bin/hla" check
"$build/bin/hla" claims
"$build/bin/hla" sweep configs/default.toml
"$build/bin/hla" sweep configs/gated.toml
# Debian's python3 has matplotlib (scripts/install-deps.sh); a python3 earlier on PATH may not.
/usr/bin/python3 experiments/plot.py results/default results/gated results/claims.json
/usr/bin/python3 experiments/report.py
