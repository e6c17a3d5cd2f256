#!/usr/bin/env bash
# The MPI suite of `make test` (issue 13), run by scripts/test.sh when mpirun is installed. Each numbered
# test prints "mpi: PASS|FAIL <what>"; the last line is "mpi-tests: N passed, M failed". Ranks are
# oversubscribed (up to 4 on any machine): these runs check correctness, never timing.
#   1-4  mpirun -n P hla check --distributed-only, P = 1..4: every mpi-* form equals its serial form
#        (fp61, rational: exactly, outputs and final state; mpfr256/double/float: within the rounding
#        bound), every option, with and without an initial state, n = P (one token per rank), 2P + 1, 13; and
#        outputs only (Options::state = false) the same outputs to the bit, with no state
#   5    the binary without mpirun: the same check on one rank, and MPI never initialized
#   6    mpirun -n 3 hla sweep: the same rows as one process (timings, host and rank aside)
#   7    SIGKILL of the whole distributed sweep mid-run, then a rerun: nothing lost, nothing duplicated
#   8    mpirun -n 3 hla claims --quick: the same verdicts as one process with the same seed, for every
#        claim decided by computation; the cost.* claims fit exponents to measured times, so on a loaded
#        host their verdicts can move in one process too: they run alone on their host and are listed
set -uo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
hla="$build/bin/hla"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --allow-run-as-root --bind-to none)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
result() {  # result <ok: 0|1> <what> [log]
  if [ "$1" -eq 0 ]; then echo "mpi: PASS $2"; passed=$((passed + 1))
  else echo "mpi: FAIL $2"; [ -n "${3:-}" ] && tail -25 "$3"; failed=$((failed + 1)); fi
}

for P in 1 2 3 4; do
  timeout 900 "${mpirun[@]}" -n "$P" "$hla" check --distributed-only >"$work/check$P.log" 2>&1 && grep -q "all agree" "$work/check$P.log"
  result $? "mpirun -n $P hla check --distributed-only" "$work/check$P.log"
done

timeout 600 "$hla" check --distributed-only >"$work/check-plain.log" 2>&1 && grep -q "on 1 rank(s): all agree" "$work/check-plain.log"
result $? "hla check --distributed-only without mpirun (one rank)" "$work/check-plain.log"

# 6: distributed sweep == one process
timeout 900 "$hla" sweep "$root/tests/mpi/sweep.toml" --out "$work/one" >"$work/one.log" 2>&1 &&
  timeout 900 "${mpirun[@]}" -n 3 "$hla" sweep "$root/tests/mpi/sweep.toml" --out "$work/three" >"$work/three.log" 2>&1 &&
  /usr/bin/python3 "$root/tests/mpi/compare_points.py" "$work/one/points.csv" "$work/three/points.csv" >"$work/cmp.log" 2>&1
result $? "mpirun -n 3 hla sweep: the rows of one process" "$work/cmp.log"

# 7: SIGKILL the whole job (its process group) once some rows are written, then rerun it to the end
rows() { [ -f "$1" ] && echo $(($(wc -l <"$1") - 1)) || echo 0; }
total=$(($(rows "$work/one/points.csv")))
setsid "${mpirun[@]}" -n 3 "$hla" sweep "$root/tests/mpi/sweep.toml" --out "$work/killed" >"$work/killed.log" 2>&1 &
job=$!
for _ in $(seq 1 600); do
  [ "$(rows "$work/killed/points.csv")" -ge 5 ] && break
  sleep 0.1
done
at_kill=$(rows "$work/killed/points.csv")
kill -KILL -- "-$job" 2>/dev/null
wait "$job" 2>/dev/null
sleep 1
timeout 900 "${mpirun[@]}" -n 3 "$hla" sweep "$root/tests/mpi/sweep.toml" --out "$work/killed" >"$work/resumed.log" 2>&1 &&
  grep -q "resuming" "$work/resumed.log" &&
  /usr/bin/python3 "$root/tests/mpi/compare_points.py" "$work/one/points.csv" "$work/killed/points.csv" >"$work/cmp-kill.log" 2>&1
ok=$?
echo "killed at $at_kill of $total rows" >>"$work/cmp-kill.log"
[ "$at_kill" -ge "$total" ] && { echo "the job finished before the kill: nothing was tested" >>"$work/cmp-kill.log"; ok=1; }
result $ok "SIGKILL of mpirun -n 3 hla sweep at $at_kill/$total rows, rerun: nothing lost or duplicated" "$work/cmp-kill.log"

# 8: distributed ledger == one process (same seed)
timeout 1200 "$hla" claims --quick --out "$work/claims1" >"$work/claims1.log" 2>&1 &&
  timeout 1200 "${mpirun[@]}" -n 3 "$hla" claims --quick --out "$work/claims3" >"$work/claims3.log" 2>&1 &&
  /usr/bin/python3 - "$work/claims1/claims-partial.json" "$work/claims3/claims-partial.json" >"$work/cmp-claims.log" 2>&1 <<'PY'
import json, sys
a, b = (json.load(open(p))["claims"] for p in sys.argv[1:3])
va, vb = [(c["id"], c["verdict"]) for c in a], [(c["id"], c["verdict"]) for c in b]
timed = lambda c: c[0].startswith("cost.")
exact_a, exact_b = [c for c in va if not timed(c)], [c for c in vb if not timed(c)]
diff = [(x, y) for x, y in zip(exact_a, exact_b) if x != y]
print(f"{len(va)} and {len(vb)} claims; {len(exact_a)} decided by computation, {len(diff)} of them differ", *diff[:10], sep="\n")
print("timed (cost.*), one process vs ranks:", *[(x, y[1]) for x, y in zip(va, vb) if timed(x)], sep="\n  ")
sys.exit(0 if [c[0] for c in va] == [c[0] for c in vb] and exact_a == exact_b and exact_a else 1)
PY
result $? "mpirun -n 3 hla claims --quick: the verdicts of one process" "$work/cmp-claims.log"

echo "mpi-tests: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
