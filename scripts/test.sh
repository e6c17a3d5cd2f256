#!/usr/bin/env bash
# `make test`: the Catch2 suite (every test case, in a fixed order), then a plain closing line
# "tests: N passed, M failed" that any CI log reader understands.
set -uo pipefail
build=${1:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$build/bin/hla_tests" --order lex 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
summary=$(grep -E "^(All tests passed|test cases:)" "$log" | tail -1)
if [[ $summary == All\ tests\ passed* ]]; then
  passed=$(sed -E 's/.* in ([0-9]+) test cases?\).*/\1/' <<<"$summary")
  failed=0
else
  passed=$(sed -E 's/.*\| *([0-9]+) passed.*/\1/' <<<"$summary")
  failed=$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<<"$summary")
fi
echo "tests: ${passed:-0} passed, ${failed:-0} failed"
exit "$status"
