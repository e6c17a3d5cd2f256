// What the decode tests (test_foundation.cpp, test_gated_decode.cpp) share: each decoding kernel
// (fast/serial/decode.hpp) called with an explicit token block, the serial form it re-lays out, and an arbitrary
// non-zero initial state.
#pragma once

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>

#include "core/registry.hpp"
#include "fast/serial/decode.hpp"

namespace hla::decode_tests {

// Every registered decode form, called with an explicit token block. A new decode form fails here until
// it is listed.
template <class T> Run<T> decode_with_block(const std::string& key, const Problem<T>& p, const Options& o,
                                            const NamedState<T>* s, Eigen::Index block) {
  namespace f = hla::fast;
  if (key == "hla2/decode/corrected") return f::hla2_decode<T>(p, o, s, f::DecayRule::corrected, block);
  if (key == "hla2/decode-packed/corrected") return f::hla2_decode<T, true>(p, o, s, f::DecayRule::corrected, block);
  if (key == "ahla/decode/paper") return f::ahla_decode<T>(p, o, s, block);
  if (key == "linear/decode/paper") return f::linear_decode<T>(p, o, s, block);
  throw std::logic_error("tests/decode_cases.hpp (decode_with_block) does not know the decode form " + key);
}

// The serial form a decode form re-lays out: same operator and variant, "decode…" → "serial…".
template <class T> const Entry<T>& serial_of(const Entry<T>& e) {
  return registry<T>().find(e.op, "serial" + e.form.substr(std::string("decode").size()), e.variant);
}

// A state reached by the serial form on `prefix`, plus arbitrary integers in every entry: non-zero, and S
// not symmetric.
template <class T>
NamedState<T> perturbed_state(const Entry<T>& serial, const Problem<T>& prefix, const Options& o, std::uint64_t seed) {
  NamedState<T> s = serial(prefix, o).state;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-3, 3);
  for (auto& [name, m] : s.parts)
    for (Eigen::Index i = 0; i < m.size(); ++i) m(i) += T(small(rng));
  return s;
}

}  // namespace hla::decode_tests
