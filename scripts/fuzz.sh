#!/usr/bin/env bash
# Runs every libFuzzer target of build-fuzz/ (make fuzz) for SECONDS each over its committed seed corpus
# (tests/fuzz/corpus/<target>/) plus what earlier runs found (build-fuzz/corpus/<target>/, not committed).
# A crash, leak, UBSan report, time-out (> 10 s on one input) or memory blow-up (> 2 GiB) is written to
# build-fuzz/findings/ and fails the run: turn it into a regression test under tests/data/fuzz/ and fix it.
#   bash scripts/fuzz.sh [BUILD_DIR] [SECONDS] [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
seconds=${2:-60}
shift $(( $# > 2 ? 2 : $# ))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=($(cd tests/fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//'))
mkdir -p "$build/findings"
failed=()
for t in "${targets[@]}"; do
  mkdir -p "$build/corpus/$t"
  start=$(date +%s)
  # -max_len: the seeds' size (the largest config is 4 KB; .npz archives a few KB)
  "$build/bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$t-" "$build/corpus/$t" "tests/fuzz/corpus/$t" > "$build/findings/$t.log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$build/findings/$t.log" | grep -o '[0-9]*$')
  echo "fuzz: $t: $(( $(date +%s) - start )) s, ${runs:-?} runs, exit $rc"
  if [ $rc -ne 0 ]; then
    failed+=("$t")
    grep -m 5 -E 'ERROR|SUMMARY|runtime error|Test unit written' "$build/findings/$t.log" | sed 's/^/  /'
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FINDINGS in ${failed[*]} (logs and inputs in $build/findings/)"
  exit 1
fi
echo "fuzz: no findings"
