#!/usr/bin/env bash
# Packs the Debian 12 packages the harness builds against into one archive for the GPU machine, which has no
# network and no apt (Ubuntu 24.04, g++ 13, CMake 4, CUDA 13.0, Python 3.12 + torch + triton + numpy + einops).
# Run on this (Debian 12) machine from the project's root:
#   bash scripts/device-carry.sh [DIR]        # default DIR: .devcarry (ignored by .gitignore)
# It writes DIR/deps.tar.xz (~36 MiB): the packages fetched with `apt-get download`, unpacked with `dpkg -x` into one
# usr/ tree, docs and most static archives dropped. Name DIR in the GPU machine's carry list; there, unpack it with
# scripts/device-build.sh. What travels (tracked files + carried paths) must stay under 64 MiB.
set -euo pipefail
C=${1:-.devcarry}
mkdir -p "$C"
pkgs=(
  libeigen3-dev libboost1.74-dev libmpfr-dev libmpfr6 libgmp-dev libgmp10 libgmpxx4ldbl
  libfmt-dev libfmt9 libtomlplusplus-dev libtomlplusplus3 libcli11-dev nlohmann-json3-dev zlib1g-dev zlib1g
  libbenchmark-dev libbenchmark1debian libxsmm-dev pybind11-dev catch2
  libopenblas-pthread-dev libopenblas0-pthread libblis-openmp-dev libblis4-openmp
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15 libhwloc-plugins
  libevent-2.1-7 libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-extra-2.1-7 libevent-openssl-2.1-7 libevent-dev
  libfabric1 libpsm2-2 libpsm-infinipath1 libucx0 libibverbs1 librdmacm1 ibverbs-providers libnl-3-200
  libnl-route-3-200 libmunge2
  libgfortran5 libquadmath0 libnuma1 libatomic1 libudev1 libuuid1
)
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
apt-get update -qq >/dev/null 2>&1 || true
(cd "$W" && apt-get download "${pkgs[@]}" >/dev/null)
mkdir -p "$W/tree"
for f in "$W"/*.deb; do dpkg -x "$f" "$W/tree"; done
ls "$W"/*.deb | sed 's|.*/||' > "$W/tree/PACKAGES.txt"
# LIBXSMM, Google Benchmark (its CMake targets name benchmark_main) and Catch2 are linked statically: keep theirs.
find "$W/tree" -name '*.a' ! -name 'libxsmm*.a' ! -name 'libbenchmark*.a' ! -name 'libCatch2*.a' -delete
rm -rf "$W/tree/usr/share/doc" "$W/tree/usr/share/man" "$W/tree/usr/share/locale" "$W/tree/usr/share/lintian"
tar -C "$W/tree" -c . | xz -T0 -6 > "$C/deps.tar.xz"
du -sh "$C/deps.tar.xz"
