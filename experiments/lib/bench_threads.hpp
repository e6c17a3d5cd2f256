// The thread counts `hla_bench` runs its threaded entries, rooflines and peak FMA rate at: HLA_BENCH_THREADS (make
// bench THREADS="1 2 4 8 16"). Here, not in the benchmark program, so the parser is tested and fuzzed without Google
// Benchmark (fuzz_bench_threads).
#pragma once

#include <vector>

namespace hla::bench {

// The most threads a count may ask for.
inline constexpr int kMaxBenchThreads = 1024;

// The counts a value of HLA_BENCH_THREADS lists: positive integers up to kMaxBenchThreads separated by blanks, each
// once, sorted (the entries come in the same order whatever order the list was written in); {1, 2} when unset
// (nullptr). Throws std::invalid_argument saying what is wrong (an empty list, a word that is not such an integer —
// a sign, a hex or exponent form, 1e20 —, a repeated count).
std::vector<int> parse_bench_threads(const char* value);

}  // namespace hla::bench
