// Ground-truth third-order operators (SPEC "Operators"), γ = 1 only: the paper defines no decayed third
// order and neither does this project.
#pragma once

#include "reference/common.hpp"

namespace hla::reference {

// hla3 (masked): o_t = Σ_{u≤t} Σ_{i≤u} Σ_{j≤u} (q_t·k_i)(q_u·k_i)(q_u·k_j) v_j
//              = Σ_{j≤t} Σ_{u≤t} (WWᵀ)_{t,u} W_{u,j} v_j,  W = L⊙QKᵀ (the start of the proof of Thm 7.1).
// For fixed (t, u) the sums over i and j are independent, so they are accumulated separately and
// multiplied: O(n³ d) time, term for term the same sum.
template <class T> Run<T> hla3(const Problem<T>& p, const Options& opt) {
  const Eigen::Index n = p.n(), dv = p.dv();
  const Mat<T> qk = p.Q * p.K.transpose();
  Mat<T> num = Mat<T>::Zero(n, dv);
  ColVec<T> den = ColVec<T>::Zero(n);
  for (Eigen::Index t = 0; t < n; ++t)
    for (Eigen::Index u = 0; u <= t; ++u) {
      T left(0);  // Σ_{i≤u} (q_t·k_i)(q_u·k_i) = (WWᵀ)_{t,u}
      for (Eigen::Index i = 0; i <= u; ++i) left += qk(t, i) * qk(u, i);
      for (Eigen::Index j = 0; j <= u; ++j) {
        T weight = left * qk(u, j);
        num.row(t) += weight * p.V.row(j);
        den(t) += weight;
      }
    }
  if (opt.normalized) normalize_rows(num, den, from_rational<T>(opt.eps));
  return {num, {}};
}

// hla3-unmasked: o_t = q_tᵀ S^K_t S^Q_t P^{KV}_t with S^K_t = Σ_{i≤t} k_i k_iᵀ, S^Q_t = Σ_{u≤t} q_u q_uᵀ,
// P_t = Σ_{j≤t} k_j v_jᵀ (§7.1) — as a literal sum, Σ_{i≤t} Σ_{u≤t} Σ_{j≤t} (q_t·k_i)(k_i·q_u)(q_u·k_j) v_j.
template <class T> Run<T> hla3_unmasked(const Problem<T>& p, const Options& opt) {
  const Eigen::Index n = p.n(), dv = p.dv();
  const Mat<T> qk = p.Q * p.K.transpose();
  Mat<T> num = Mat<T>::Zero(n, dv);
  ColVec<T> den = ColVec<T>::Zero(n);
  for (Eigen::Index t = 0; t < n; ++t)
    for (Eigen::Index u = 0; u <= t; ++u) {
      T left(0);
      for (Eigen::Index i = 0; i <= t; ++i) left += qk(t, i) * qk(u, i);
      for (Eigen::Index j = 0; j <= t; ++j) {
        T weight = left * qk(u, j);
        num.row(t) += weight * p.V.row(j);
        den(t) += weight;
      }
    }
  if (opt.normalized) normalize_rows(num, den, from_rational<T>(opt.eps));
  return {num, {}};
}

}  // namespace hla::reference
