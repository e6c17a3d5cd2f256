# Two commands on a fresh Debian 12 machine: `make run` and `make test`. Each installs what is missing
# (Debian packages only), configures into build/ and builds first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=Release

.PHONY: deps configure build test run bench bench-distributed report figures debug clean

deps:
	@bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@bash scripts/test.sh $(BUILD)

run: build
	@bash scripts/run.sh $(BUILD)

bench: build
	@bash scripts/bench.sh $(BUILD)

# Sequence-parallel forms over MPI ranks (issue 13): results/distributed/ (README "Beyond one machine").
bench-distributed: build
	@bash scripts/bench-distributed.sh $(BUILD)

# Every figure from the committed results (no build needed), then the report page results/report.html.
figures:
	@/usr/bin/python3 experiments/plot.py $(wildcard results/*/points.csv) $(wildcard results/claims.json results/bench.json)

report: figures
	@/usr/bin/python3 experiments/report.py

# ASan + UBSan build in build-debug/ (tests only).
debug: deps
	@cmake -S . -B build-debug -DCMAKE_BUILD_TYPE=Debug -DHLA_SANITIZE=ON -DHLA_BUILD_BENCH=OFF >/dev/null
	@cmake --build build-debug -j $(JOBS)
	@cd build-debug && ./bin/hla_tests

clean:
	rm -rf $(BUILD) build-debug
