#!/usr/bin/env bash
# `make test`: the Catch2 suite (every test case, in a fixed order).
set -euo pipefail
build=${1:-build}
"$build/bin/hla_tests" --order lex
