// libFuzzer target: hla::fuzz::rational_text (tests/fuzz/targets.hpp says what it checks).
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hla::fuzz::rational_text({reinterpret_cast<const char*>(data), size});
  return 0;
}
