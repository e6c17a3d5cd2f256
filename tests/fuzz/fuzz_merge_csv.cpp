// libFuzzer target: hla::fuzz::merge_csv (tests/fuzz/targets.hpp says what it checks).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hla::fuzz::merge_csv({reinterpret_cast<const char*>(data), size});
  return 0;
}
