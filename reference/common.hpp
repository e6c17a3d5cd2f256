// Shared pieces of the literal-sum references: decay powers and the normalize-by-(den + ε) step.
#pragma once

#include <vector>

#include "core/types.hpp"

namespace hla::reference {

// γ^0 .. γ^max, so that a literal sum can look up γ^{(t-i)+(t-j)} without re-deriving it.
template <class T> std::vector<T> decay_powers(const T& gamma, Eigen::Index max_power) {
  std::vector<T> g(static_cast<std::size_t>(max_power) + 1);
  g[0] = T(1);
  for (std::size_t k = 1; k < g.size(); ++k) g[k] = g[k - 1] * gamma;
  return g;
}

// Every normalized operator in SPEC divides the output row by (den_t + ε).
template <class T> void normalize_rows(Mat<T>& num, const ColVec<T>& den, const T& eps) {
  for (Eigen::Index t = 0; t < num.rows(); ++t) divide_by_normalizer(num.row(t), T(den(t) + eps), t);
}

}  // namespace hla::reference
