// Gated references (SPEC "Gated (data-dependent) decay"), by literal summation: SPEC's table with every γ-power
// replaced by a gate product Γ, age by age — the literal sums of reference/second_order.hpp with Γ as their decay
// (the ledger's gated.fixed-gamma holds the gated forms with γ_t ≡ γ to the fixed-γ ones).
#pragma once

#include "core/gates.hpp"
#include "reference/second_order.hpp"

namespace hla::reference {

// Γ(t, s) = Π_{r=s+1..t} γ_r for s ≤ t (Γ(t, t) = 1), each entry its own product: Γ(t, s) = γ_{s+1} Γ(t, s+1).
// No quotient of cumulative products (which would need γ_r ≠ 0 and lose accuracy in floating point).
template <class T> Mat<T> gate_products(const ColVec<T>& gamma) {
  const Eigen::Index n = gamma.size();
  Mat<T> G = Mat<T>::Zero(n, n);
  for (Eigen::Index t = 0; t < n; ++t) {
    G(t, t) = T(1);
    for (Eigen::Index s = t - 1; s >= 0; --s) G(t, s) = gamma(s + 1) * G(t, s + 1);
  }
  return G;
}

// The gated forms take their decay from the gates only: a second, scalar γ would be ambiguous.
inline void require_no_scalar_decay(const Options& opt) {
  if (opt.gamma != 1) throw InputError("gated forms take the decay from the gates; Options::gamma must be 1");
}

// hla2 (masked), SPEC gated: o_t = Σ_{j≤t} Σ_{i≤j} Γ(t,i) Γ(t,j) (q_t·k_i)(q_j·k_i) v_j;
// ridge λ adds λ Σ_{j≤t} Γ(t,j) (q_t·q_j) v_j; normalized divides by the same sums with v_j → 1, plus ε.
// masked = false: hla2-unmasked, the sum over every i, j ≤ t (the absolute operator of the masked one's bound).
template <class T> Run<T> gated_hla2(const GatedProblem<T>& g, const Options& opt, bool masked = true) {
  require_no_scalar_decay(opt);
  const Mat<T> Gam = gate_products(g.gamma);
  return hla2_sum(
      g.qkv, opt, masked, [&](Eigen::Index t, Eigen::Index i, Eigen::Index j) { return T(Gam(t, i) * Gam(t, j)); },
      [&](Eigen::Index t, Eigen::Index j) -> const T& { return Gam(t, j); });
}

// ahla, SPEC gated: o_t = Σ_{i≤t} Σ_{j≤i} Γ(t,j) (q_t·k_i)(q_i·k_j) v_j.
template <class T> Run<T> gated_ahla(const GatedProblem<T>& g, const Options& opt) {
  require_no_scalar_decay(opt);
  const Mat<T> Gam = gate_products(g.gamma);
  return ahla_sum(g.qkv, opt, [&](Eigen::Index t, Eigen::Index j) -> const T& { return Gam(t, j); });
}

// linear, SPEC gated: o_t = Σ_{j≤t} Γ(t,j) (q_t·k_j) v_j.
template <class T> Run<T> gated_linear(const GatedProblem<T>& g, const Options& opt) {
  require_no_scalar_decay(opt);
  const Mat<T> Gam = gate_products(g.gamma);
  return linear_sum(g.qkv, opt, [&](Eigen::Index t, Eigen::Index j) -> const T& { return Gam(t, j); });
}

}  // namespace hla::reference
