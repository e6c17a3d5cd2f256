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

namespace hla::gated_tests {

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

// The MPFR-256 outputs, the exact denominators den_t + ε, and the abs operator A (numerics/bounds.hpp) of a gated
// problem whose inputs and gates are float-representable (so float, double and MPFR see the same numbers).
struct FloatingReference {
  Mat<mpfr256> O;
  ColVec<mpfr256> den;
  Mat<double> A;  // n × (dv+1): the unmasked operator's absolute sums on |Q|, |K|, [|V| 1], with the same gates
};

inline FloatingReference floating_reference(const std::string& op, const GatedProblem<double>& g, const Options& opt) {
  using gated::FormRef;
  const Eigen::Index n = g.n(), dv = g.qkv.dv();
  // num and den in one unnormalized run on [V 1] (MPFR; the gated serial form equals the gated literal sum
  // exactly, test_gated.cpp and the ledger's gated.<op>.serial).
  Options plain = opt;
  plain.normalized = false;
  plain.eps = 0;
  const Problem<double> aug = bounds::augmented(g.qkv, false);
  const GatedProblem<mpfr256> gm{convert_problem<mpfr256>(aug), g.gamma.cast<mpfr256>()};
  const Mat<mpfr256> nd = gated::run(FormRef{op, "serial"}, gm, plain).O;
  FloatingReference r;
  r.O.resize(n, dv);
  r.den.resize(n);
  const mpfr256 eps = from_rational<mpfr256>(opt.eps);
  for (Eigen::Index t = 0; t < n; ++t) {
    r.den(t) = opt.normalized ? mpfr256(nd(t, dv) + eps) : mpfr256(1);
    for (Eigen::Index c = 0; c < dv; ++c) r.O(t, c) = opt.normalized ? mpfr256(nd(t, c) / r.den(t)) : nd(t, c);
  }
  // The abs operator: every term non-negative, so these double sums are accurate to a few ulps (the 1e-9 covers
  // them). linear and ahla are their own abs operators; hla2's is the unmasked q_tᵀ (S_t + λI) C_t.
  const Problem<double> abs = bounds::augmented(g.qkv, true);
  if (op == "hla2") {
    const double lambda = from_rational<double>(opt.ridge);
    Mat<double> S = Mat<double>::Zero(g.qkv.d(), g.qkv.d()), C = Mat<double>::Zero(g.qkv.d(), dv + 1);
    r.A.resize(n, dv + 1);
    for (Eigen::Index t = 0; t < n; ++t) {
      S = g.gamma(t) * S + abs.K.row(t).transpose() * abs.K.row(t);
      C = g.gamma(t) * C + abs.Q.row(t).transpose() * abs.V.row(t);
      r.A.row(t) = abs.Q.row(t) * (S * C + lambda * C);
    }
  } else {
    r.A = gated::run(FormRef{op, "serial"}, GatedProblem<double>{abs, g.gamma}, plain).O;
  }
  r.A *= 1 + 1e-9;
  return r;
}

struct FloatingCheck {
  double err_over_bound = 0;  // max over entries of |computed − MPFR| / bound
  double normwise_rel = 0;    // max |computed − MPFR| / max |MPFR|
  double bound_normwise = 0;  // max bound / max |MPFR|
};

// Computed outputs O (float or double) against the reference, with h roundings per term (bounds::rounding_depth
// and what the form adds to it). No row's bound may be vacuous (a denominator within its error of 0).
template <class T>
FloatingCheck check_within_bound(const Mat<T>& O, const FloatingReference& ref, const Options& opt, long h) {
  const double u = unit_roundoff<T>();
  const Eigen::Index n = ref.O.rows();
  long vacuous = 0;
  const Mat<double> B =
      bounds::output_bounds(ref.O, ref.A, opt.normalized, ref.den, from_rational<double>(opt.eps), u, h, &vacuous);
  // Old terms whose factors underflow lose their relative accuracy: an absolute floor of n² + 1 times the
  // format's smallest normal number, times the largest abs sum (cases.cpp's floor, scaled to these inputs).
  const double tiny = std::numeric_limits<T>::min() * static_cast<double>(n * n + 1) * (1 + ref.A.maxCoeff());
  FloatingCheck c;
  double max_b = 0, max_r = 0;
  for (Eigen::Index t = 0; t < ref.O.rows(); ++t)
    for (Eigen::Index k = 0; k < ref.O.cols(); ++k) {
      const double err = abs(to_mpfr(O(t, k)) - ref.O(t, k)).template convert_to<double>();
      c.err_over_bound = std::max(c.err_over_bound, err / (B(t, k) + tiny));
      max_b = std::max(max_b, B(t, k));
      max_r = std::max(max_r, std::fabs(ref.O(t, k).template convert_to<double>()));
    }
  CHECK(vacuous == 0);
  c.normwise_rel = compare_to(O, ref.O).normwise_rel;
  c.bound_normwise = max_b / max_r;
  return c;
}

}  // namespace hla::gated_tests
