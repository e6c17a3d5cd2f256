// What the gated tests (test_gated*.cpp) share: exact cases whose gates vary per token, the comparison of states,
// and the floating-point check — MPFR-256 outputs of the gated serial form and a proven rounding bound around them.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/gates.hpp"
#include "fast/gated_forms.hpp"
#include "numerics/bounds.hpp"
#include "numerics/compare.hpp"
#include "numerics/gated_check.hpp"

namespace hla::gated_tests {

using gated::check_within_bound;
using gated::floating_reference;
using gated::FloatingCheck;
using gated::FloatingReference;
using gated::gated_form_depth;

// Small integer inputs with the perfect-square rational gates of core/gates.hpp (they vary per token).
inline GatedProblem<rational> rational_case(const Shape& s, std::uint64_t seed) {
  return {convert_problem<rational>(integer_problem(s, seed, 2)), square_rational_gates(s.n)};
}

// A random point of F_p: uniform inputs and uniform nonzero gates.
inline GatedProblem<fp61> field_case(const Shape& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  return {field_problem(s, rng()), field_gates(s.n, rng)};
}

// Plain, normalized, and (hla2) ridge alone and with normalization.
inline std::vector<Options> option_sets(const std::string& op) {
  std::vector<Options> sets(2);
  sets[1].normalized = true;
  sets[1].eps = rational(1, 8);
  if (op == "hla2") {
    sets[1].ridge = rational(1, 2);
    Options ridge;
    ridge.ridge = rational(3, 2);
    sets.push_back(ridge);
  }
  return sets;
}

template <class T> bool same_state(const NamedState<T>& a, const NamedState<T>& b) {
  if (a.parts.size() != b.parts.size()) return false;
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    const Mat<T>&x = a.parts[i].second, &y = b.parts[i].second;
    if (a.parts[i].first != b.parts[i].first || x.rows() != y.rows() || x.cols() != y.cols() || x != y) return false;
  }
  return true;
}

// Float-representable gates with −log γ_t = strength · s_t, s_t uniform in [1/2, 3/2].
inline ColVec<double> gates_of_strength(Eigen::Index n, double strength, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> s(0.5, 1.5);
  ColVec<double> g(n);
  for (Eigen::Index t = 0; t < n; ++t) g(t) = static_cast<double>(static_cast<float>(std::exp(-strength * s(rng))));
  return g;
}

}  // namespace hla::gated_tests
