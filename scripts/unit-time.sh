#!/usr/bin/env bash
# Compiler launcher (CMake's CXX_COMPILER_LAUNCHER, first in the chain) that records each unit's wall and
# CPU time: one line "seconds<TAB>cpu-seconds<TAB>object<TAB>start" (start: epoch seconds, so that a build's
# timeline, and where its cores idle, can be drawn from the file) appended to $HLA_UNIT_TIMES. `scripts/unit-times.sh`
# prints the slowest units from it (docs/build.md; CI prints its ten slowest). The compile's own exit code passes through.
set -u
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
start=$(date +%s.%N)
TIMEFORMAT='%U %S'
{ time "$@" 2>&3; } 3>&2 2>"${HLA_UNIT_TIMES}.cpu.$$" ; rc=$?
end=$(date +%s.%N)
read -r user sys < "${HLA_UNIT_TIMES}.cpu.$$" 2>/dev/null || { user=0; sys=0; }
rm -f "${HLA_UNIT_TIMES}.cpu.$$"
[ $rc -eq 0 ] && [ -n "$out" ] && \
  awk -v a="$start" -v b="$end" -v u="$user" -v s="$sys" -v o="$out" \
    'BEGIN { printf "%.2f\t%.2f\t%s\t%.2f\n", b - a, u + s, o, a }' >> "$HLA_UNIT_TIMES"
exit $rc
