#!/usr/bin/env bash
# On the GPU machine (docs/gpu.md), from the project's root: unpack the carried Debian packages (.devcarry/, made here
# by scripts/device-carry.sh) into /tmp/deps (never into /), set the environment, configure and build into
# build-device/ (Release, -march=native, the GPU forms for sm_90). A warm machine keeps /tmp, so a second call skips
# what is done. Source it to keep the environment:  source scripts/device-build.sh [TARGETS...]
# Extra CMake flags: HLA_DEVICE_CMAKE="-D...".  The Python module is not built there (its pybind11 is Debian's).
C=${HLA_CARRY:-.devcarry}
P=/tmp/deps/usr
L=$P/lib/x86_64-linux-gnu
if [ ! -x $P/bin/orterun ]; then mkdir -p /tmp/deps && tar -xJf "$C/deps.tar.xz" -C /tmp/deps; fi
ln -sf mpirun.openmpi $P/bin/mpirun; ln -sf mpicxx.openmpi $P/bin/mpicxx; ln -sf mpiexec.openmpi $P/bin/mpiexec
# Link against the carried base libraries, but run with the machine's own (newer) copies where it has them.
mkdir -p /tmp/deps/fallback /tmp/deps/needed
for lib in libz.so.1 libudev.so.1 libuuid.so.1 libatomic.so.1 libgfortran.so.5 libquadmath.so.0 libnuma.so.1; do
  mv $L/$lib* /tmp/deps/lib/x86_64-linux-gnu/$lib* /tmp/deps/fallback/ 2>/dev/null
  ldconfig -p | grep -q "^\s*$lib " || cp -a /tmp/deps/fallback/$lib* /tmp/deps/needed/ 2>/dev/null
done
rm -f $L/libz.so
export OPAL_PREFIX=$P PATH=$P/bin:$PATH
export LD_LIBRARY_PATH=$L:$L/openblas-pthread:$L/blis-openmp:$L/openmpi/lib:/tmp/deps/needed${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader
export PMIX_MCA_mca_base_component_path=$L/pmix2/lib/pmix PMIX_MCA_pcompress_base_silence_warning=1
export PATH=/usr/local/cuda/bin:$PATH
B=${HLA_DEVICE_BUILD:-build-device}
if [ ! -f $B/CMakeCache.txt ]; then
  cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH=$P -DMPI_CXX_COMPILER=$P/bin/mpicxx -DCMAKE_CXX_FLAGS="-isystem $P/include/x86_64-linux-gnu" \
    -DOPENBLAS_LIBRARY=$L/openblas-pthread/libopenblas.so -DOPENBLAS_INCLUDE_DIR=$P/include/x86_64-linux-gnu/openblas-pthread \
    -DBLIS_LIBRARY=$L/blis-openmp/libblis.so -DBLIS_INCLUDE_DIR=$P/include/x86_64-linux-gnu/blis-openmp \
    -DLIBXSMM_LIBRARY=$P/lib/libxsmm.a -DLIBXSMMEXT_LIBRARY=$P/lib/libxsmmext.a -DLIBXSMM_INCLUDE_DIR=$P/include \
    -DMPFR_LIBRARY=$L/libmpfr.so -DGMP_LIBRARY=$L/libgmp.so \
    -DZLIB_LIBRARY=$(ls /tmp/deps/fallback/libz.so.1.* | head -1) -DZLIB_INCLUDE_DIR=$P/include -DHLA_BUILD_PYTHON=OFF -DHLA_TIME_UNITS=OFF ${HLA_DEVICE_CMAKE:-} | tail -5
fi
cmake --build $B -j "$(nproc)" ${1:+--target "$@"} 2>&1 | grep -vE '^\[[0-9]+/[0-9]+\] ' | tail -20
