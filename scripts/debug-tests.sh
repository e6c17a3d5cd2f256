#!/usr/bin/env bash
# The Catch2 suite under ASan + UBSan (make debug): `debug-tests.sh BUILD [TEST-SPEC] [SECONDS]`.
# Any sanitizer report fails it (UBSan halts on its first report; ASan aborts on its first error and reports leaks
# at exit). SECONDS, when given, is a deadline (CI passes what is left of its 90 minutes): a suite still running then
# is stopped and reported as NOT FINISHED with the last test case it reached, exit 124, never silently.
set -uo pipefail
build=${1:-build-debug}
spec=${2:-}
deadline=${3:-}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cmd=(./bin/hla_tests --order lex --list-test-names-only)
cd "$build" || exit 2
total=$(ASAN_OPTIONS=detect_leaks=0 "${cmd[@]}" ${spec:+"$spec"} | grep -c .)
run=(env ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
     ./bin/hla_tests --order lex --durations yes ${spec:+"$spec"})
if [ -n "$deadline" ]; then
  timeout --signal=TERM --kill-after=30 "$deadline" "${run[@]}" 2>&1 | tee "$log"
else
  "${run[@]}" 2>&1 | tee "$log"
fi
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  done_cases=$(grep -cE "^[0-9.]+ s: " "$log")
  echo "debug-tests: NOT FINISHED: the deadline of ${deadline} s stopped the sanitizer suite after ${done_cases} of ${total} test cases (no sanitizer report until then)"
  exit 124
fi
exit "$rc"
