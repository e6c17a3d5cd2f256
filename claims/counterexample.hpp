// Smallest counterexample search for a failing claim, in exact rationals: search upward over
// (n, d, dv) with small integer inputs until both sides differ, then shrink the entries one by one to
// 0, 1 or −1 while they still differ, so the result can be checked by hand.
#pragma once

#include <functional>
#include <optional>

#include "core/inputs.hpp"
#include "core/types.hpp"

namespace hla::verify {

using RationalEvaluation = std::function<std::pair<Mat<rational>, Mat<rational>>(const Problem<rational>&)>;

struct Counterexample {
  Problem<rational> inputs;
  Mat<rational> lhs, rhs;
};

inline bool sides_differ(const RationalEvaluation& eval, const Problem<rational>& p, Mat<rational>* lhs = nullptr,
                         Mat<rational>* rhs = nullptr) {
  try {
    auto [a, b] = eval(p);
    if (lhs) *lhs = a;
    if (rhs) *rhs = b;
    return a.rows() != b.rows() || a.cols() != b.cols() || a != b;
  } catch (const NumericalError&) {
    return false;  // a vanishing normalizer is not a counterexample
  }
}

// Shrinks entries towards 0, ±1 while the sides still differ; a shrunk counterexample still fails
// (re-checked at the end).
inline Counterexample shrink(const RationalEvaluation& eval, Problem<rational> p) {
  bool changed = true;
  while (changed) {
    changed = false;
    for (Mat<rational>* m : {&p.V, &p.K, &p.Q})
      for (Eigen::Index i = 0; i < m->size(); ++i)
        for (int candidate : {0, 1, -1}) {
          if ((*m)(i) == candidate) break;
          rational keep = (*m)(i);
          (*m)(i) = candidate;
          if (sides_differ(eval, p)) {
            changed = true;
            break;
          }
          (*m)(i) = keep;
        }
  }
  Counterexample c{p, {}, {}};
  sides_differ(eval, p, &c.lhs, &c.rhs);
  return c;
}

inline std::optional<Counterexample> find_counterexample(const RationalEvaluation& eval, int max_n = 6,
                                                         int seeds_per_shape = 6) {
  for (int n = 1; n <= max_n; ++n)
    for (int d = 1; d <= 3; ++d)
      for (int dv = 1; dv <= 2; ++dv)
        for (int seed = 0; seed < seeds_per_shape; ++seed) {
          Problem<rational> p =
              convert_problem<rational>(integer_problem({n, d, dv}, 1000 * n + 100 * d + 10 * dv + seed, 2));
          if (sides_differ(eval, p)) return shrink(eval, p);
        }
  return std::nullopt;
}

}  // namespace hla::verify
