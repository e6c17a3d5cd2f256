// The fuzz targets (tests/fuzz/targets.hpp) on every input a fuzzer once failed on (tests/data/fuzz/<target>/,
// one file per finding, named after what it found) and on the committed seed corpora
// (tests/fuzz/corpus/<target>/): each must end as a clean refusal or a result with the target's properties.
// The sanitizer build (make debug) runs these under ASan + UBSan too.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>

#include "tests/fuzz/targets.hpp"

namespace fs = std::filesystem;

namespace {

const std::map<std::string, std::function<void(std::string_view)>>& targets() {
  static const std::map<std::string, std::function<void(std::string_view)>> t{
      {"fuzz_rational", hla::fuzz::rational_text},        {"fuzz_npy", hla::fuzz::npy_bytes},
      {"fuzz_sweep_config", hla::fuzz::sweep_config},     {"fuzz_cli_run", hla::fuzz::cli_run_args},
      {"fuzz_verify_outcome", hla::fuzz::verify_outcome}, {"fuzz_exec_outputs", hla::fuzz::exec_outputs},
      {"fuzz_merge_csv", hla::fuzz::merge_csv},           {"fuzz_reference_cache", hla::fuzz::reference_cache},
      {"fuzz_bench_threads", hla::fuzz::bench_threads}};
  return t;
}

// The inputs replayed, per target folder under root. A missing root or an empty folder fails: a corpus that is not
// where it should be must not pass having replayed nothing.
std::map<std::string, std::size_t> replay(const fs::path& root) {
  INFO(root);
  REQUIRE(fs::is_directory(root));
  std::map<std::string, std::size_t> inputs;
  for (const auto& dir : fs::directory_iterator(root)) {
    INFO(dir.path());
    const std::string target = dir.path().filename().string();
    REQUIRE(targets().count(target) == 1);  // a folder per target, named after it
    const auto& run = targets().at(target);
    std::size_t& replayed = inputs[target];
    for (const auto& file : fs::directory_iterator(dir.path())) {
      std::ifstream in(file.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      INFO(file.path());
      CHECK_NOTHROW(run(bytes));
      ++replayed;
    }
    CHECK(replayed >= 1);
  }
  return inputs;
}

}  // namespace

// Findings exist for some targets only (tests/data/fuzz/ has a folder for each target a fuzzer once failed).
TEST_CASE("fuzz findings stay fixed", "[fuzz]") { CHECK_FALSE(replay(fs::path(HLA_TEST_DATA) / "fuzz").empty()); }

// Every target has a seed corpus (tests/fuzz/make_corpus.py writes one per target).
TEST_CASE("the fuzzers' seed corpora are handled", "[fuzz]") {
  CHECK(replay(fs::path(HLA_SOURCE_DIR) / "tests" / "fuzz" / "corpus").size() == targets().size());
}
