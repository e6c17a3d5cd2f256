// libFuzzer target: hla::fuzz::bench_threads (tests/fuzz/targets.hpp says what it checks).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hla::fuzz::bench_threads({reinterpret_cast<const char*>(data), size});
  return 0;
}
