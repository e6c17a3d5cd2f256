# Two commands on a fresh Debian 12 machine: `make run` and `make test`. Each installs what is missing
# (Debian packages only), configures into build/ and builds first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release
# A new build directory is generated for Ninja (it starts a unit as soon as its inputs exist, where Make waits for
# whole targets: docs/build.md "Sixth pass"); one configured before keeps its generator, which CMake would not change.
generator = $(if $(wildcard $(1)/CMakeCache.txt),,-G Ninja)

.PHONY: deps deps-test deps-clang configure build test run publish bench bench-distributed test-gpu bench-gpu report figures debug-build debug debug-python fuzz tsan clean

# Dependency tiers (scripts/install-deps.sh): run < test (PyTorch, Chromium, pytest) ; clang (fuzz, tsan).
deps:
	@bash scripts/install-deps.sh run
deps-test:
	@bash scripts/install-deps.sh test
deps-clang:
	@bash scripts/install-deps.sh clang

$(BUILD)/CMakeCache.txt: | deps
	@cmake -S . -B $(BUILD) $(call generator,$(BUILD)) $(CMAKE_FLAGS) >/dev/null

configure: deps $(BUILD)/CMakeCache.txt

# The harness: the library, the CLI and the Python module; not the test program (make test builds it, in the same
# build as the rest) nor the benchmark program (make bench). docs/build.md has the measured times.
build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The build and the test program in one build (Ninja starts units of both as cores free up), then every suite; each
# phase's time is printed.
test: deps-test configure
	@start=$$(date +%s); cmake --build $(BUILD) -j $(JOBS) --target all hla_tests && \
	  echo "make test: the build took $$(( $$(date +%s) - start )) s"
	@start=$$(date +%s); bash scripts/test.sh $(BUILD); rc=$$?; \
	  echo "make test: the suites took $$(( $$(date +%s) - start )) s"; exit $$rc

# Only what running the harness needs: the hla executable. It measures on this machine into a run directory of its
# own, RUN (default runs/<host>-<commit>, untracked), and ends with that run's report page (scripts/run.sh).
# SWEEPS=<configs> runs those sweeps instead of the default and gated ones.
RUN ?=
run: configure
	@cmake --build $(BUILD) -j $(JOBS) --target hla
	@$(if $(SWEEPS),SWEEPS="$(SWEEPS)") bash scripts/run.sh $(BUILD) $(RUN)

# The deliberate refresh of the published results/ (the committed run the README and docs show): a make run into
# RUN, then its ledger and sweeps replace the published ones whole (scripts/publish.sh).
publish: run
	@bash scripts/publish.sh $(or $(RUN),$(shell bash scripts/run-dir.sh))

# The benchmarks (docs/benchmarks.md): results/bench.json, its figure, the targets and the model (scripts/bench.sh).
# THREADS="1 2 4 8 16": the thread counts of the threaded entries, the rooflines, the peak FMA rate and the PyTorch
# peer (HLA_BENCH_THREADS to the script and hla_bench; it must list 1 and 2); unset, hla_bench's default "1 2".
THREADS ?=
bench: build
	@cmake --build $(BUILD) -j $(JOBS) --target hla_bench
	@$(if $(THREADS),HLA_BENCH_THREADS="$(THREADS)") bash scripts/bench.sh $(BUILD)

# Sequence-parallel forms over MPI ranks (issue 13): results/distributed/ (docs/distributed.md).
bench-distributed: build
	@bash scripts/bench-distributed.sh $(BUILD)

# ---- the GPU forms (issue 52, docs/gpu.md): on a machine with a CUDA device and nvcc, after the build is configured
# there (on the GPU machine: source scripts/device-build.sh, which configures BUILD=build-device from carried packages).
# No deps step: that machine has no apt. test-gpu runs the Catch2 cases tagged [gpu] (hidden from make test);
# bench-gpu times our GPU forms beside fla and a PyTorch peer into results/gpu/bench.json (scripts/bench-gpu.py;
# GPU_BENCH_ARGS, e.g. --quick).
PYTHON ?= python3
GPU_BENCH_ARGS ?=
test-gpu:
	@cmake --build $(BUILD) -j $(JOBS) --target hla hla_tests
	@$(BUILD)/bin/hla_tests "[gpu]"
bench-gpu:
	@cmake --build $(BUILD) -j $(JOBS) --target hla
	@$(PYTHON) scripts/bench-gpu.py --hla $(BUILD)/bin/hla $(GPU_BENCH_ARGS)

# Every figure of a results directory (no build needed), then its report page: the published results/ by default,
# any run directory (a make run's, a user's sweep's parent) with RUN=dir.
REPORT_DIR = $(or $(RUN),results)
figures:
	@/usr/bin/python3 experiments/plot.py $(wildcard $(REPORT_DIR)/*/points.csv) \
	  $(wildcard $(REPORT_DIR)/claims.json $(REPORT_DIR)/bench.json)

report: figures
	@/usr/bin/python3 experiments/report.py --results $(REPORT_DIR)

# ASan + UBSan build in build-debug/ (tests only). Any sanitizer report fails it. DEBUG_TESTS: a Catch2
# test spec (tags), default every test, as CI runs it (docs/hardening.md "Sanitizers in CI").
DEBUG_TESTS ?=
debug-build: deps
	@cmake -S . -B build-debug $(call generator,build-debug) -DCMAKE_BUILD_TYPE=Debug -DHLA_SANITIZE=ON -DHLA_BUILD_BENCH=OFF -DHLA_BUILD_PYTHON=OFF >/dev/null
	@cmake --build build-debug -j $(JOBS) --target hla hla_tests

debug: debug-build
	@bash scripts/debug-tests.sh build-debug '$(DEBUG_TESTS)'

# The Python suites' calls into the module under ASan + UBSan (scripts/debug-python.sh): the sanitizer build with its
# module. CI runs it after the sanitizer suite: 8 minutes on 2 cores once build-debug is built (docs/build.md).
debug-python: deps-test
	@cmake -S . -B build-debug $(call generator,build-debug) -DCMAKE_BUILD_TYPE=Debug -DHLA_SANITIZE=ON -DHLA_BUILD_BENCH=OFF -DHLA_BUILD_PYTHON=ON >/dev/null
	@cmake --build build-debug -j $(JOBS) --target hla hla_harness
	@bash scripts/debug-python.sh build-debug

# ---- hardening (docs/hardening.md) -----------------------------------------------------------------------
# libFuzzer targets (tests/fuzz/) in build-fuzz/ with clang++-16, each run FUZZ_SECONDS over its corpus.
FUZZ_SECONDS ?= 120
FUZZ_TARGETS = $(basename $(notdir $(wildcard tests/fuzz/fuzz_*.cpp)))
fuzz: deps-clang
	@CXX=clang++-16 cmake -S . -B build-fuzz $(call generator,build-fuzz) -DCMAKE_BUILD_TYPE=Debug -DHLA_FUZZ=ON -DHLA_BUILD_TESTS=OFF \
	  -DHLA_BUILD_BENCH=OFF -DHLA_BUILD_PYTHON=OFF >/dev/null
	@cmake --build build-fuzz -j $(JOBS) --target $(FUZZ_TARGETS)
	@bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

# ThreadSanitizer + Archer over the OpenMP drivers (tests/tsan/), build-tsan/ with clang++-16 and libomp.
ARCHER ?= /usr/lib/llvm-16/lib/libarcher.so
tsan: deps-clang
	@CXX=clang++-16 cmake -S . -B build-tsan $(call generator,build-tsan) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHLA_TSAN=ON -DHLA_BUILD_TESTS=OFF \
	  -DHLA_BUILD_BENCH=OFF -DHLA_BUILD_PYTHON=OFF >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target hla_tsan
	@OMP_TOOL_LIBRARIES=$(ARCHER) ARCHER_OPTIONS=verbose=1 TSAN_OPTIONS=ignore_noninstrumented_modules=1:exitcode=66 \
	  ./build-tsan/bin/hla_tsan

clean:
	rm -rf $(BUILD) build-debug build-fuzz build-tsan
