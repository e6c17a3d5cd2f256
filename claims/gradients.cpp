// Gradient claims (§4.2 "Backward for gradients"), decided like the forward identities: reverse-mode
// gradients (serial, checkpointed chunks, and hla2's reverse scan under the adjoint ⊕*) against the exact
// gradients of the reference, at random prime-field points, several shapes and chunk widths.
#include "claims/gradients.hpp"

#include <fmt/core.h>

#include "claims/support.hpp"
#include "numerics/gradient_checks.hpp"

namespace hla::verify {

ClaimResult check_backward(const std::string& op, bool decay, bool normalized, fast::DecayRule rule,
                           const LedgerContext& ctx) {
  ParamSpace sp;
  sp.decay = decay;
  sp.normalized = normalized;
  const std::vector<int> chunks{1, 2, 3, 5};
  CustomSides sides;
  sides.lhs_name = "reverse-mode gradients (serial, chunked, scan)";
  sides.rhs_name = "forward-mode gradients of the reference";
  sides.field = [&](const Shape& s, std::mt19937_64& rng) {
    Problem<fp61> p = field_problem(s, rng());
    Mat<fp61> dO = field_problem({s.n, 1, s.dv}, rng()).V;
    Options o;
    if (decay) o.gamma = field_uniform_parameter(rng);
    if (normalized) {
      o.normalized = true;
      o.eps = field_uniform_parameter(rng);
    }
    std::vector<Mat<fp61>> lhs, rhs;
    for (int w : chunks) {
      GradientCheck<fp61> c = check_gradients<fp61>(op, p, o, dO, w, rule);
      const Mat<fp61> ref = flatten(c.reference, false);
      lhs.push_back(flatten(c.serial, false));
      lhs.push_back(flatten(c.chunked, false));
      rhs.push_back(ref);
      rhs.push_back(ref);
      if (c.has_scan) {
        lhs.push_back(flatten(c.scan, false));
        rhs.push_back(ref);
      }
    }
    return std::make_pair(stack_rows(lhs), stack_rows(rhs));
  };
  // Degree of "lhs − rhs" after clearing denominators. Unnormalized, a gradient of L = Σ⟨dO, O⟩ is a polynomial of
  // degree ≤ deg O (the derivative lowers it by one, dO raises it by one). Normalized, ∂L/∂x = Σ_t ⟨dO_t, (num_t' den_t
  // − num_t den_t') / den_t²⟩ has n different denominators of degree ≤ deg O + 1 (ε): each side is P/Q with deg Q ≤
  // 2n(deg O + 1) and deg P ≤ that + deg O + 2, and the cross-multiplied identity twice that. (Until 2026-12-04 this
  // was the outputs' degree, 2(deg O + 1) normalized: the verdicts stand, but the printed bounds were too small.)
  sides.degree = [&](const Shape& s) {
    ParamSpace plain = sp;
    plain.normalized = false;
    const int out = identity_degree(op, s.n, plain), n = static_cast<int>(s.n);
    return normalized ? 2 * (2 * n * (out + 1) + out + 2) : out;
  };
  const std::vector<Shape> shapes = ctx.quick ? std::vector<Shape>{{1, 1, 1}, {4, 2, 3}}
                                              : std::vector<Shape>{{1, 1, 1}, {4, 2, 3}, {7, 3, 2}, {10, 2, 2}};
  return check_custom(
      sides, shapes, ctx,
      fmt::format("identity test in F_p of dL/dQ, dL/dK, dL/dV for L = Σ⟨dO, O⟩ (random dO): serial "
                  "reverse mode, chunk-checkpointed reverse mode{} at widths {{1,2,3,5}} = forward-mode "
                  "(dual number) gradients of the {} reference; γ {}, {}",
                  operator_info(op).scan_backward ? ", reverse scan under ⊕*" : "", op, decay ? "random" : "= 1",
                  normalized ? "normalized (random ε)" : "unnormalized"));
}

}  // namespace hla::verify
