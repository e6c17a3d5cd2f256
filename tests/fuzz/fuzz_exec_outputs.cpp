// libFuzzer target: hla::fuzz::exec_outputs (tests/fuzz/targets.hpp says what it checks).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hla::fuzz::exec_outputs({reinterpret_cast<const char*>(data), size});
  return 0;
}
