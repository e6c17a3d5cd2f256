#!/usr/bin/env bash
# Installs the Debian packages the harness needs, in tiers, each including the ones before it:
#   run    what building and running the harness needs (make build, make run, make bench)
#   test   + what the test suites need: PyTorch (the examples and test implementations), Chromium (the report
#          page's rendering test), pytest and venv (a user's pytest through the pip-installed module;
#          xdist runs the Python suites in parallel)
#   clang  + clang-16, libFuzzer and LLVM's OpenMP (make fuzz, make tsan)
# Usage: install-deps.sh [run|test|clang] (default run). Idempotent and silent when everything is present:
# it asks dpkg first and only runs apt-get (update, then install) for what is missing.
set -euo pipefail
tier=${1:-run}

run_packages=(
  build-essential cmake ninja-build pkg-config
  libeigen3-dev libboost-dev libmpfr-dev libgmp-dev
  libfmt-dev catch2 libbenchmark-dev
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  python3 python3-matplotlib python3-numpy
  python3-dev pybind11-dev  # the Python module hla_harness (python/)
  libxsmm-dev libopenblas-dev libblis-dev  # fast/gemm/ (LIBXSMM kernels) and the bench's GEMM rooflines
  libopenmpi-dev openmpi-bin  # the mpi-* forms, sweeps and claims across ranks (docs/distributed.md)
)
test_packages=(
  python3-torch             # examples/ and tests/verify_impls/: PyTorch implementations verified in make test
  chromium                  # renders results/report.html in tests/python/test_report.py
  python3-pytest python3-venv python3-setuptools  # pip install . into a venv, and a user's pytest (docs/build.md)
  python3-pytest-xdist      # make test runs the Python suites on every core (scripts/test.sh)
  clang-format python3-flake8  # the house style, checked by tests/python/test_style.py (clang-format 14, flake8 5)
)
clang_packages=(
  clang-16 libclang-rt-16-dev libfuzzer-16-dev libomp-16-dev  # make fuzz (libFuzzer), make tsan (TSan + Archer)
)
case $tier in
  run) packages=("${run_packages[@]}") ;;
  test) packages=("${run_packages[@]}" "${test_packages[@]}") ;;
  clang) packages=("${run_packages[@]}" "${clang_packages[@]}") ;;
  *) echo "install-deps: unknown tier '$tier' (run, test or clang)" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps ($tier): installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps ($tier): done"
