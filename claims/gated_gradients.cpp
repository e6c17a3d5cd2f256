// The gated backward passes' claim (gated.<op>.backward), decided like the fixed-γ gradient claims
// (claims/gradients.cpp): the reverse-mode gradients of the gated serial form — all states stored, checkpointed every w
// tokens, and for hla2 the reverse scan under ⊕* with every token's ρ = γ_t differentiated (fast/backward/gated.hpp) —
// against the forward-mode (dual number) gradients of the gated literal sums (numerics/gated_gradient_checks.hpp),
// ∂L/∂γ_t included, by the identity tester in F_p with uniform random gates.
#include <fmt/core.h>

#include "claims/gated.hpp"
#include "claims/support.hpp"
#include "core/gates.hpp"
#include "numerics/gated_gradient_checks.hpp"

namespace hla::verify {

ClaimResult check_gated_backward(const std::string& op, const LedgerContext& ctx) {
  const bool scan = operator_info(op).scan_backward;
  const std::vector<int> chunks{1, 2, 3, 5};
  CustomSides sides;
  sides.lhs_name = std::string("reverse-mode gated gradients (serial, checkpointed") + (scan ? ", reverse scan)" : ")");
  sides.rhs_name = "forward-mode gradients of the gated reference";
  sides.field = [&](const Shape& s, std::mt19937_64& rng) {
    const GatedProblem<fp61> g{field_problem(s, rng()), field_gates(s.n, rng)};
    const Mat<fp61> dO = field_problem({s.n, 1, s.dv}, rng()).V;
    Options norm;
    norm.normalized = true;
    norm.eps = field_uniform_parameter(rng);
    if (operator_info(op).options.ridge) norm.ridge = field_uniform_parameter(rng);
    std::vector<Mat<fp61>> lhs, rhs;
    for (const Options& o : {Options{}, norm}) {
      const Mat<fp61> ref = flatten(gated_forward_mode_gradients<fp61>(op, g, o, nullptr, dO), false);
      auto add = [&](const backward::GatedGradients<fp61>& got) {
        lhs.push_back(flatten(got, false));
        rhs.push_back(ref);
      };
      add(backward::gated_backward<fp61>(op, g, o, nullptr, dO));
      for (int w : chunks) {
        add(backward::gated_backward<fp61>(op, g, o, nullptr, dO, w));
        if (scan) add(backward::gated_scan_backward<fp61>(op, g, o, nullptr, dO, w));
      }
    }
    return std::make_pair(stack_rows(lhs), stack_rows(rhs));
  };
  // Degree in (Q, K, V, dO, λ, ε, the gates) of "lhs − rhs" after clearing denominators. Unnormalized, a gradient of
  // L = Σ⟨dO, O⟩ is a polynomial of degree ≤ deg O + 1 (dO; a dγ_t lowers it by one, a dq by one) with deg O = the
  // operator's degree in (Q, K, V) plus its gate degree per token times n. Normalized, ∂L/∂x = Σ_t ⟨dO_t, (num_t' den_t
  // − num_t den_t') / den_t²⟩ over n different denominators of degree ≤ deg O + 1 (ε): the common denominator has
  // degree ≤ 2n(deg O + 1), so each side is P/Q with deg P, deg Q ≤ 2n(deg O + 1) + deg O + 2 and the cross-multiplied
  // identity twice that.
  sides.degree = [&](const Shape& s) {
    ParamSpace sp;
    sp.ridge = operator_info(op).options.ridge;
    const int out = identity_degree(op, s.n, sp) + operator_info(op).gate_degree * static_cast<int>(s.n);
    return 2 * (2 * static_cast<int>(s.n) * (out + 1) + out + 2);
  };
  const std::vector<Shape> shapes = ctx.quick ? std::vector<Shape>{{1, 1, 1}, {4, 2, 3}}
                                              : std::vector<Shape>{{1, 1, 1}, {4, 2, 3}, {7, 3, 2}, {10, 2, 2}};
  return check_custom(
      sides, shapes, ctx,
      fmt::format("identity test in F_p of dL/dQ, dL/dK, dL/dV and dL/dγ_t for L = Σ⟨dO, O⟩ (random dO), uniform "
                  "random gates: the gated serial reverse mode (all states; checkpointed every w tokens){} at widths "
                  "{{1,2,3,5}} = forward-mode (dual number) gradients of the gated {} reference (one tangent per "
                  "input and per gate); unnormalized, and normalized with random ε{}",
                  scan ? ", and the reverse scan under ⊕* with each token's ρ = γ_t differentiated," : "", op,
                  operator_info(op).options.ridge ? " and ridge λ" : ""));
}

}  // namespace hla::verify
