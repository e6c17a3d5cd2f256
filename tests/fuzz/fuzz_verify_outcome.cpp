// libFuzzer target: hla::fuzz::verify_outcome (tests/fuzz/targets.hpp says what it checks).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hla::fuzz::verify_outcome({reinterpret_cast<const char*>(data), size});
  return 0;
}
