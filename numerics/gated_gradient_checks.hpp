// The exact gradients the gated backward passes (fast/backward/gated.hpp) are held to, by forward mode: for
// L = Σ_t ⟨dO_t, o_t⟩, ∂L/∂(Q, K, V) with one dual tangent per input entry (forward_mode_gradients) and ∂L/∂γ_t with
// one tangent per gate, through the gated literal sums (reference/gated.hpp). With an initial state, whose derivative
// the literal sums cannot give, through the gated serial forms (fast/serial/gated.hpp), which take one; those skip the
// decay at a gate of exactly 1 (a `γ != 1` guard that Dual numbers compare by value), so ∂L/∂γ_t through them is lost
// where γ_t = 1: draw such gates ≠ 1. Used by tests/test_gated_backward.cpp and the ledger (gated.<op>.backward).
#pragma once

#include "fast/backward/dual.hpp"
#include "fast/backward/gated.hpp"
#include "fast/serial/gated.hpp"
#include "numerics/gradient_checks.hpp"
#include "reference/gated.hpp"

namespace hla {

// The gated operator's outputs in Dual numbers: the literal sums, or from `init` the gated serial form.
template <class T> Mat<Dual<T>> gated_dual_outputs(const std::string& op, const Problem<Dual<T>>& p,
                                                   const ColVec<Dual<T>>& gates, const Options& opt,
                                                   const NamedState<Dual<T>>* init) {
  const GatedProblem<Dual<T>> g{p, gates};
  switch (op_id(op)) {
    case OpId::hla2:
      return init ? fast::gated_hla2_serial(g, opt, init, fast::DecayRule::corrected).O
                  : reference::gated_hla2(g, opt).O;
    case OpId::ahla:
      return init ? fast::gated_ahla_serial(g, opt, init).O : reference::gated_ahla(g, opt).O;
    case OpId::linear:
      return init ? fast::gated_linear_serial(g, opt, init).O : reference::gated_linear(g, opt).O;
    case OpId::hla2_unmasked:
    case OpId::hla3:
    case OpId::hla3_unmasked:
    case OpId::softmax:
      break;
  }
  throw InputError("no gated backward for operator '" + op + "'");
}

// ∂L/∂(Q, K, V, γ) (and ∂L/∂X_0 from `init`) of the gated operator, by forward mode.
template <class T>
backward::GatedGradients<T> gated_forward_mode_gradients(const std::string& op, const GatedProblem<T>& g,
                                                         const Options& opt, const NamedState<T>* init,
                                                         const Mat<T>& dO) {
  const auto lifted = [](const ColVec<T>& c) {
    return ColVec<Dual<T>>(c.unaryExpr([](const T& x) { return Dual<T>(x); }));
  };
  const ColVec<Dual<T>> gates = lifted(g.gamma);
  Gradients<T> qkv =
      forward_mode_gradients<T>(g.qkv, init, dO, [&](const Problem<Dual<T>>& dp, const NamedState<Dual<T>>* di) {
        return gated_dual_outputs<T>(op, dp, gates, opt, di);
      });
  // ∂L/∂γ_t: one tangent per gate, the inputs and the state lifted undifferentiated.
  const Problem<Dual<T>> dp{lift(g.qkv.Q), lift(g.qkv.K), lift(g.qkv.V)};
  std::optional<NamedState<Dual<T>>> di;
  if (init) {
    di.emplace();
    for (const auto& [name, m] : init->parts) di->parts.emplace_back(name, lift(m));
  }
  ColVec<T> dgamma(g.n());
  for (Eigen::Index t = 0; t < g.n(); ++t) {
    ColVec<Dual<T>> tangent = gates;
    tangent(t).d = T(1);
    const Mat<Dual<T>> O = gated_dual_outputs<T>(op, dp, tangent, opt, di ? &*di : nullptr);
    T s(0);
    for (Eigen::Index i = 0; i < O.size(); ++i) s += dO(i) * O(i).d;
    dgamma(t) = s;
  }
  return {std::move(qkv.dQ), std::move(qkv.dK), std::move(qkv.dV), std::move(dgamma), std::move(qkv.dstate)};
}

// One column of everything a gated backward returns (dQ, dK, dV, dγ; ∂L/∂X_0 with `with_state`), for comparing two.
template <class T> Mat<T> flatten(const backward::GatedGradients<T>& g, bool with_state) {
  Gradients<T> qkv{g.dQ, g.dK, g.dV, g.dstate};
  const Mat<T> a = flatten(qkv, with_state);
  Mat<T> out(a.rows() + g.dgamma.size(), 1);
  out << a, g.dgamma;
  return out;
}

}  // namespace hla
