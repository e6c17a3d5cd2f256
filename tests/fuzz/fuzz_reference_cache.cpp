// libFuzzer target: hla::fuzz::reference_cache (tests/fuzz/targets.hpp says what it checks).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hla::fuzz::reference_cache({reinterpret_cast<const char*>(data), size});
  return 0;
}
