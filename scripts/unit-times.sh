#!/usr/bin/env bash
# The slowest compile units of a build tree (recorded by scripts/unit-time.sh): `unit-times.sh [build] [N]`.
# Prints the N slowest (default 10) by CPU time, then the totals: units, CPU minutes, and the wall time of the
# longest unit (the floor of a build at any number of jobs).
set -euo pipefail
build=${1:-build}
top=${2:-10}
file=$build/unit-times.tsv
[ -s "$file" ] || { echo "unit-times: no $file (configure with -DHLA_TIME_UNITS=ON and build)"; exit 0; }
# the last record of each object wins (a rebuild appends)
awk -F'\t' '{ wall[$3] = $1; cpu[$3] = $2 } END { for (o in cpu) printf "%s\t%s\t%s\n", cpu[o], wall[o], o }' "$file" |
  sort -t$'\t' -k1,1nr > "$file.sorted"
echo "unit-times: the $top slowest units of $build (CPU s, wall s, object)"
head -n "$top" "$file.sorted" | awk -F'\t' '{ sub(/.*CMakeFiles\//, "", $3); sub(/\.dir\//, ": ", $3); printf "  %7.1f %7.1f  %s\n", $1, $2, $3 }'
# links (recorded too, for the timeline: scripts/build-timeline.py) are not units
awk -F'\t' '$3 ~ /\.(o|gch)$/ { n++; cpu += $1; if ($2 > longest) longest = $2 }
  END { printf "unit-times: %d units, %.1f CPU min in all, longest unit %.0f s wall\n", n, cpu / 60, longest }' "$file.sorted"
rm -f "$file.sorted"
