#!/usr/bin/env bash
# Installs the Debian packages the harness needs. Idempotent and quiet when everything is present:
# it asks dpkg first and only runs apt-get (update, then install) for what is missing.
set -euo pipefail

packages=(
  build-essential cmake pkg-config
  libeigen3-dev libboost-dev libmpfr-dev libgmp-dev
  libfmt-dev catch2 libbenchmark-dev
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev zlib1g-dev
  python3 python3-matplotlib python3-numpy
  python3-dev pybind11-dev  # the Python module hla_harness (python/)
  python3-torch             # examples/: PyTorch implementations verified in make test
  libxsmm-dev libopenblas-dev libblis-dev  # fast/gemm/ (LIBXSMM kernels) and the bench's GEMM rooflines (issue 14)
  libopenmpi-dev openmpi-bin  # fast/distributed/: mpi-* forms, sweeps and claims across ranks (issue 13)
  chromium  # renders results/report.html in tests/python/test_report.py
  clang-16 libclang-rt-16-dev libfuzzer-16-dev libomp-16-dev  # make fuzz (libFuzzer), make tsan (ThreadSanitizer + libomp/Archer): README Hardening
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
