#!/usr/bin/env bash
# The Python suites' calls into the module under ASan + UBSan (make debug-python): `debug-python.sh [BUILD]`.
# The sanitizer build's module (BUILD/python/hla_harness) is loaded into python3 with the sanitizer runtimes
# preloaded, and the tests that call the module (-k "module or Module") run against it and against the sanitized
# `hla` (HLA_BUILD=BUILD). Leak checking is off: CPython does not free everything at exit. Any report fails it (UBSan
# halts on its first, ASan on its first error). CI runs it (.ci/run): 7-8 min on two workers here (10 min 20 s in one).
set -uo pipefail
build=$(cd "${1:-build-debug}" && pwd) || exit 2
root=$(cd "$(dirname "$0")/.." && pwd)
ls "$build"/python/hla_harness*.so >/dev/null 2>&1 || { echo "debug-python: no module in $build/python (make debug-python builds it)"; exit 2; }
workers=$(nproc 2>/dev/null || echo 2)
((workers > 8)) && workers=8
export LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libubsan.so)"
export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export HLA_BUILD="$build" PYTHONPATH="$build/python"
cd "$root/tests/python" || exit 2
exec /usr/bin/python3 -m pytest -n "$workers" -p no:cacheprovider -rfE -q test_verify.py test_verify_gates.py \
  test_hardening.py -k "module or Module"
