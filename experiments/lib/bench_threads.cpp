// HLA_BENCH_THREADS (experiments/lib/bench_threads.hpp).
#include "experiments/lib/bench_threads.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>
#include <stdexcept>
#include <string>

namespace hla::bench {

std::vector<int> parse_bench_threads(const char* value) {
  if (!value) return {1, 2};
  const auto refuse = [&](const std::string& why) {
    return std::invalid_argument(
        fmt::format("HLA_BENCH_THREADS must be thread counts in 1..{} separated by spaces, "
                    "e.g. \"1 2 4 8 16\"; got '{}': {}",
                    kMaxBenchThreads, value, why));
  };
  std::vector<int> threads;
  std::istringstream words{std::string(value)};
  for (std::string word; words >> word;) {
    int t = 0;
    const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), t);
    const bool digits = std::all_of(word.begin(), word.end(), [](unsigned char c) { return std::isdigit(c); });
    if (!digits || ec != std::errc{} || end != word.data() + word.size() || t < 1 || t > kMaxBenchThreads)
      throw refuse(fmt::format("'{}' is not one", word));
    threads.push_back(t);
  }
  if (threads.empty()) throw refuse("no thread count");
  std::sort(threads.begin(), threads.end());
  if (const auto twice = std::adjacent_find(threads.begin(), threads.end()); twice != threads.end())
    throw refuse(fmt::format("{} is listed twice", *twice));
  return threads;
}

}  // namespace hla::bench
