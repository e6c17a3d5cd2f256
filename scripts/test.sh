#!/usr/bin/env bash
# `make test`: every suite, then one plain closing line "tests: N passed, M failed" that any CI log reader
# understands (the sum over suites).
#   1. the Catch2 suite (every test case, in a fixed order), started in the background: it runs on one core, and the
#      Python suites beside it leave part of the cores idle while they wait on child processes (docs/build.md
#      "Seventh pass" has what running them side by side saves); its log is printed after theirs
#   2. the Python suites tests/python/test_*.py (unittest test cases, run by pytest on every core when
#      pytest-xdist is installed; they import build/python/hla_harness and run build/bin/hla), when the build
#      has them
#   3. the MPI suite (mpirun, P up to 4), when mpirun is installed
set -uo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
log=$(mktemp) catch_log=$(mktemp)
catch_pid=
trap '[ -n "$catch_pid" ] && kill "$catch_pid" 2>/dev/null; rm -f "$log" "$catch_log"' EXIT
passed=0 failed=0 status=0

"$build/bin/hla_tests" --order lex >"$catch_log" 2>&1 &
catch_pid=$!

# Python suites. Most of their time is spent waiting on child processes (hla, PyTorch's import in every
# --exec round), so with pytest-xdist (the test tier) they run on every core, one worker per core up to 8:
# pytest ends with "N passed, M failed, K skipped, E errors in T s". Without xdist: unittest in one process,
# which prints "Ran N tests" and "FAILED (failures=a, errors=b, skipped=c)" or "OK".
if compgen -G "$root/tests/python/test_*.py" >/dev/null; then
  export HLA_BUILD="$(cd "$build" && pwd)" PYTHONPATH="$(cd "$build" && pwd)/python${PYTHONPATH:+:$PYTHONPATH}"
  if /usr/bin/python3 -c "import xdist, pytest" 2>/dev/null; then
    workers=$(nproc 2>/dev/null || echo 2)
    ((workers > 8)) && workers=8
    ((workers < 2)) && workers=2
    /usr/bin/python3 -m pytest -n "$workers" -p no:cacheprovider -rfE -q "$root/tests/python" 2>&1 | tee "$log"
    s=${PIPESTATUS[0]}
    [ "$s" -ne 0 ] && status=$s
    line=$(grep -E "[0-9]+ (passed|failed|errors?)(, .*)? in [0-9.]+s" "$log" | tail -1)
    p=$(grep -oE "[0-9]+ passed" <<<"$line" | cut -d' ' -f1)
    f=$(grep -oE "[0-9]+ failed" <<<"$line" | cut -d' ' -f1)
    e=$(grep -oE "[0-9]+ errors?" <<<"$line" | cut -d' ' -f1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0} + ${e:-0}))
    [ -z "$line" ] && { failed=$((failed + 1)); status=1; }
  else
    /usr/bin/python3 -m unittest discover -s "$root/tests/python" -p 'test_*.py' -v 2>&1 | tee "$log"
    s=${PIPESTATUS[0]}
    [ "$s" -ne 0 ] && status=$s
    ran=$(grep -E "^Ran [0-9]+ tests?" "$log" | tail -1 | sed -E 's/^Ran ([0-9]+).*/\1/')
    bad=0
    if line=$(grep -E "^FAILED \(" "$log" | tail -1); then
      for key in failures errors; do
        v=$(grep -oE "$key=[0-9]+" <<<"$line" | cut -d= -f2)
        bad=$((bad + ${v:-0}))
      done
    fi
    skipped=$(grep -oE "skipped=[0-9]+" "$log" | tail -1 | cut -d= -f2)
    passed=$((passed + ${ran:-0} - bad - ${skipped:-0})); failed=$((failed + bad))
    [ -z "$ran" ] && { failed=$((failed + 1)); status=1; }
  fi
fi

# The Catch2 suite's result (it ran beside the Python suites).
wait "$catch_pid"
s=$?
catch_pid=
echo "---- the Catch2 suite (run beside the Python suites) ----"
cat "$catch_log"
[ "$s" -ne 0 ] && status=$s
summary=$(grep -E "^(All tests passed|test cases:)" "$catch_log" | tail -1)
if [[ $summary == All\ tests\ passed* ]]; then
  p=$(sed -E 's/.* in ([0-9]+) test cases?\).*/\1/' <<<"$summary"); f=0
else
  p=$(sed -E 's/.*\| *([0-9]+) passed.*/\1/' <<<"$summary")
  f=$(sed -E 's/.*\| *([0-9]+) failed.*/\1/' <<<"$summary")
  [[ $f =~ ^[0-9]+$ ]] || f=1
fi
passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))

# MPI suite (issue 13): scripts/test-mpi.sh (mpirun, P up to 4), counted like the others.
if command -v mpirun >/dev/null && [ -x "$build/bin/hla" ]; then
  bash "$root/scripts/test-mpi.sh" "$build" 2>&1 | tee "$log"
  s=${PIPESTATUS[0]}
  [ "$s" -ne 0 ] && status=$s
  line=$(grep -E "^mpi-tests: " "$log" | tail -1)
  p=$(sed -E 's/^mpi-tests: ([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
  [[ $p =~ ^[0-9]+$ && $f =~ ^[0-9]+$ ]] || { p=0; f=1; }
  passed=$((passed + p)); failed=$((failed + f))
fi

echo "tests: ${passed} passed, ${failed} failed"
exit "$status"
