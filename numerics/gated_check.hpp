// The floating-point check of a gated form: MPFR-256 outputs of the gated serial form and a proven rounding bound
// around them (numerics/bounds.hpp), for problems whose inputs and gates are float-representable. Used by the
// gated tests (tests/test_gated*.cpp) and the ledger's measured claims on the chunk formulations (claims/gated.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/gates.hpp"
#include "core/products.hpp"
#include "core/registry.hpp"
#include "fast/gated_forms.hpp"
#include "numerics/bounds.hpp"
#include "numerics/compare.hpp"

namespace hla::gated {

// The rounding depth h of a gated form with its stable gate factors (fast/chunked/gated.hpp, hla2_fused.hpp):
// that of a decaying form of its kind (accumulation_depth: w + ⌈n/w⌉ per level for the chunk forms, one more
// rounding per step for the decay) plus, per level (order_of), its gate factors' own error
// (bounds::gate_factor_depth says why).
inline long gated_form_depth(const std::string& op, const std::string& form, const ColVec<double>& gamma, long w,
                             long d) {
  const long n = static_cast<long>(gamma.size());
  return bounds::rounding_depth(op, bounds::accumulation_depth(form, n, w), true, false, n, d) +
         bounds::order_of(op) * bounds::gate_factor_depth(form, n, w, bounds::log_mass(gamma));
}

// The MPFR-256 outputs, the exact denominators den_t + ε, and the abs operator A (numerics/bounds.hpp) of a gated
// problem whose inputs and gates are float-representable (so float, double and MPFR see the same numbers).
struct FloatingReference {
  Mat<mpfr256> O;
  ColVec<mpfr256> den;
  Mat<double> A;  // n × (dv+1): the unmasked operator's absolute sums on |Q|, |K|, [|V| 1], with the same gates
};

inline FloatingReference floating_reference(const std::string& op, const GatedProblem<double>& g, const Options& opt) {
  const Eigen::Index n = g.n(), dv = g.qkv.dv();
  // num and den in one unnormalized run on [V 1] (MPFR; the gated serial form equals the gated literal sum
  // exactly, test_gated.cpp and the ledger's gated.<op>.serial).
  Options plain = opt;
  plain.normalized = false;
  plain.eps = 0;
  const Problem<double> aug = bounds::augmented(g.qkv, false);
  const GatedProblem<mpfr256> gm{convert_problem<mpfr256>(aug), g.gamma.cast<mpfr256>()};
  const Mat<mpfr256> nd = run(FormRef{op, "serial"}, gm, plain).O;
  FloatingReference r;
  r.O.resize(n, dv);
  r.den.resize(n);
  const mpfr256 eps = from_rational<mpfr256>(opt.eps);
  for (Eigen::Index t = 0; t < n; ++t) {
    r.den(t) = opt.normalized ? mpfr256(nd(t, dv) + eps) : mpfr256(1);
    for (Eigen::Index c = 0; c < dv; ++c) r.O(t, c) = opt.normalized ? mpfr256(nd(t, c) / r.den(t)) : nd(t, c);
  }
  // The abs operator (the table's abs_operator: linear and ahla are their own, hla2's is the unmasked
  // q_tᵀ (S_t + λI) C_t) on |Q|, |K|, [|V| 1] with the same gates, by its gated serial form: every term is
  // non-negative, so these double sums are accurate to a few ulps (the 1e-9 covers them).
  Problem<double> abs = bounds::augmented(g.qkv, true);
  abs.gates = g.gamma;
  r.A = registry<double>().find_exact(bounds::abs_operator(op), "serial")(abs, plain).O;
  r.A *= 1 + 1e-9;
  return r;
}

struct FloatingCheck {
  double err_over_bound = 0;  // max over entries of |computed − MPFR| / bound
  double normwise_rel = 0;    // max |computed − MPFR| / max |MPFR|
  double bound_normwise = 0;  // max bound / max |MPFR|
  long vacuous_rows = 0;      // rows whose denominator lies within its own error of 0 (their bound is +∞)
};

// Computed outputs O (float or double) against the reference, within γ = `gam` per term (bounds::output_bounds_for).
// A row whose bound is vacuous (a denominator within its error of 0) is counted.
template <class T>
FloatingCheck check_within(const Mat<T>& O, const FloatingReference& ref, const Options& opt, double gam) {
  const double u = unit_roundoff<T>();
  const Eigen::Index n = ref.O.rows();
  long vacuous = 0;
  const Mat<double> B = bounds::output_bounds_for(ref.O, ref.A, opt.normalized, ref.den, from_rational<double>(opt.eps),
                                                  u, gam, 0.0, &vacuous);
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
  c.vacuous_rows = vacuous;
  c.normwise_rel = compare_to(O, ref.O).normwise_rel;
  c.bound_normwise = max_b / max_r;
  return c;
}

// With h roundings per term in T's own arithmetic (bounds::rounding_depth and what the form adds to it).
template <class T>
FloatingCheck check_within_bound(const Mat<T>& O, const FloatingReference& ref, const Options& opt, long h) {
  return check_within(O, ref, opt, bounds::gamma_h(h, unit_roundoff<T>()));
}

// The same for a form whose products round their operands to a narrower format (Caps::products; bounds::mixed_gamma).
template <class T> FloatingCheck check_within_bound(const Mat<T>& O, const FloatingReference& ref, const Options& opt,
                                                    long h, const std::string& op, Products products) {
  return check_within(O, ref, opt, bounds::mixed_gamma(h, unit_roundoff<T>(), op, operand_roundoff(products)));
}

}  // namespace hla::gated
