// The harness's two errors, in a header of their own (standard library only), so that a header the CUDA compiler
// also reads (fast/cuda/device.hpp, through core/names.hpp) can name them without Eigen or Boost.
#pragma once

#include <stdexcept>

namespace hla {

// Bad input: shapes, ranges, names, non-finite values. The CLI maps it to exit code 2.
struct InputError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
// A computation that would produce NaN/Inf (e.g. a normalizer den_t + ε that vanishes).
struct NumericalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace hla
