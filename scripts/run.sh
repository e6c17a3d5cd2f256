#!/usr/bin/env bash
# `make run`: the harness's main job.
set -euo pipefail
build=${1:-build}
"$build/bin/hla" check
