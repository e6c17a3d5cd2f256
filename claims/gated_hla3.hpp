// Gates on third order, a study (issue: "hla3 has no decay in the paper; add gates there only if the algebra stays
// exact, and record the decision"): does masked hla3 with per-token gates keep an exact serial recurrence?
//
// The gated weighting follows hla2's (docs/operators.md "Gated decay"): every summed token is decayed by its own age at
// the query t. Masked hla3 sums over three tokens, i (its key twice), u (its query twice) and j (its key and value), so
//   o_t = Σ_{u≤t} Σ_{i≤u} Σ_{j≤u} Γ(t,i) Γ(t,u) Γ(t,j) (q_t·k_i)(q_u·k_i)(q_u·k_j) v_j,     Γ(t,s) = Π_{r=s+1..t} γ_r
// (γ_t ≡ 1 is the paper's hla3). For i, j ≤ u ≤ t the weight is Γ(t,u)³ Γ(u,i) Γ(u,j), so with the decayed summaries
// S^K_u = Σ_{i≤u} Γ(u,i) k_i k_iᵀ and P_u = Σ_{j≤u} Γ(u,j) k_j v_jᵀ (the corrected hla3 state, fast/serial/hla3.hpp)
//   o_t = q_tᵀ F_t,   F_t = Σ_{u≤t} Γ(t,u)³ S^K_u q_u q_uᵀ P_u = γ_t³ F_{t−1} + S^K_t q_t q_tᵀ P_t,
// a recurrence of the corrected state's size. Decaying F like the summaries it is built from (γ_t, as S^K and P) is
// the mistake hla2's Algorithm 1 makes with G; the ledger holds both against the literal sum (gated.hla3.*).
#pragma once

#include "core/types.hpp"

namespace hla::verify::gated_hla3 {

// The literal sum above, with Γ as a table of products (no quotient), O(n³) terms per output row.
template <class T> Mat<T> literal_sum(const Problem<T>& p, const ColVec<T>& gates) {
  const Eigen::Index n = p.n(), dv = p.dv();
  Mat<T> G = Mat<T>::Zero(n, n);  // G(t, s) = Γ(t, s) for s ≤ t
  for (Eigen::Index s = 0; s < n; ++s) {
    G(s, s) = T(1);
    for (Eigen::Index t = s + 1; t < n; ++t) G(t, s) = G(t - 1, s) * gates(t);
  }
  const Mat<T> QK = p.Q * p.K.transpose();  // QK(a, b) = q_a·k_b
  Mat<T> O = Mat<T>::Zero(n, dv);
  for (Eigen::Index t = 0; t < n; ++t)
    for (Eigen::Index u = 0; u <= t; ++u)
      for (Eigen::Index i = 0; i <= u; ++i) {
        const T left = G(t, i) * G(t, u) * QK(t, i) * QK(u, i);
        if (left == T(0)) continue;
        for (Eigen::Index j = 0; j <= u; ++j) O.row(t) += T(left * G(t, j) * QK(u, j)) * p.V.row(j);
      }
  return O;
}

// The serial recurrence with F decayed by γ_t^f_power per token (3: the weighting above; 1: like S^K and P).
template <class T> Mat<T> recurrence(const Problem<T>& p, const ColVec<T>& gates, int f_power) {
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv();
  Mat<T> SK = Mat<T>::Zero(d, d), P = Mat<T>::Zero(d, dv), F = Mat<T>::Zero(d, dv), O(n, dv);
  for (Eigen::Index t = 0; t < n; ++t) {
    const ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
    T gf(1);
    for (int e = 0; e < f_power; ++e) gf *= gates(t);
    SK = gates(t) * SK + k * k.transpose();
    P = gates(t) * P + k * p.V.row(t);
    F = gf * F + (SK * q) * (q.transpose() * P);
    O.row(t) = q.transpose() * F;
  }
  return O;
}

}  // namespace hla::verify::gated_hla3
