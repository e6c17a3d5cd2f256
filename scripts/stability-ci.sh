#!/usr/bin/env bash
# The numerical-stability regression on its own: configs/stability-ci.toml through the sweep engine
# (tests/test_sweep.cpp, tag [sweep]); every form × precision must stay within its rounding-error bound and
# the error's growth exponent in n within the stated band. Usage: scripts/stability-ci.sh [build-dir]
set -euo pipefail
build=${1:-build}
"$build/bin/hla_tests" "[sweep]"
