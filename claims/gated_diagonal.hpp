// Diagonal (per-channel) gates, a study (SPEC "Gated (data-dependent) decay", last paragraph; issue 31 item 4):
// which placements of per-channel gates admit an exact masked recurrence of the hla2 form?
//
// A placement says where the gates act on the two prefix summaries of eq. 3.1, with key-channel gates
// α_t ∈ F^d (A_t = diag α_t) and value-channel gates β_t ∈ F^dv (B_t = diag β_t):
//   S_t = L_t S_{t−1} R_t + k_t k_tᵀ      L_t, R_t ∈ {I, A_t}           (S left, right, two-sided)
//   C_t = M_t C_{t−1} N_t + q_t v_tᵀ      M_t ∈ {I, A_t}, N_t ∈ {I, B_t}  (C key side, value side)
// so S_t = Σ_{i≤t} L(t,i) k_i k_iᵀ R(t,i) and C_t = Σ_{j≤t} M(t,j) q_j v_jᵀ N(t,j), with L(t,i) = Π_{r=i+1..t} L_r (all
// diagonal, so the order of the product does not matter). The unmasked output q_tᵀ S_t C_t is the sum over all
// pairs (i, j ≤ t) of q_tᵀ X_ij(t), X_ij(t) = L(t,i) k_i (k_iᵀ R(t,i) M(t,j) q_j) v_jᵀ N(t,j) (d×dv); the masked
// operator of the placement is the same sum over the pairs i ≤ j only (what the scalar-gated hla2 is when every
// gate is a multiple of I). Its literal sum is `masked_output` below.
//
// The hla2 form: o_t = q_tᵀ(S_t C_t − G_t), G_t = Σ_{j<i≤t} X_ij(t) (the excluded pairs), carried as
//   G_t = Φ_t(G_{t−1}) + k_t k_tᵀ (M_t C_{t−1} N_t)       (the new excluded pairs i = t, j < t)
// with Φ_t a linear map that depends on the token's gates only. Such a Φ_t exists iff the excluded pairs of every
// past, aged by one token, are a linear function of their sum: over many random pasts (same step gates), the
// columns vec G_{t−1} and vec(aged pairs) must satisfy rank [P; N] = rank P. A rank increase is a proof that no
// hla2-form recurrence exists (exact in F_p); equal ranks make Φ_t exist with high probability, and then the
// scalar-gated rule with every gate outside, Φ_t(X) = L_t R_t M_t X N_t, is checked against the literal sum by the
// identity tester.
#pragma once

#include <string>
#include <vector>

#include "core/inputs.hpp"

namespace hla::verify::diagonal {

struct Placement {
  std::string id, description;
  bool s_left = false, s_right = false, c_key = false, c_value = false;
  // The proposal's diagonal reading: the key moment S gated by √α on each side, C by α. The study's inputs
  // are then the roots a_t (α_t = a_t ∘ a_t), so L_t = R_t = diag a_t and M_t = diag(a_t ∘ a_t).
  bool sqrt_on_s = false;
};

inline const std::vector<Placement>& placements() {
  static const std::vector<Placement> all{
      {"s-left", "S_t = A_t S_{t−1} + k kᵀ (gates on the q_t·k_i side)", true, false, false, false},
      {"s-right", "S_t = S_{t−1} A_t + k kᵀ", false, true, false, false},
      {"s-two-sided", "S_t = A_t S_{t−1} A_t + k kᵀ", true, true, false, false},
      {"c-key", "C_t = A_t C_{t−1} + q vᵀ (key-side rows of C)", false, false, true, false},
      {"c-value", "C_t = C_{t−1} B_t + q vᵀ (value channels)", false, false, false, true},
      {"s-left+c-value", "S_t = A_t S_{t−1} + k kᵀ, C_t = C_{t−1} B_t + q vᵀ", true, false, false, true},
      {"s-left+c-key", "S_t = A_t S_{t−1} + k kᵀ, C_t = A_t C_{t−1} + q vᵀ", true, false, true, false},
      {"proposal", "S_t = A_t^{1/2} S_{t−1} A_t^{1/2} + k kᵀ, C_t = A_t C_{t−1} + q vᵀ (the proposal's diagonal gates)",
       true, true, true, false, true},
  };
  return all;
}

// A problem with per-channel gates: row t of alpha (n×d) and beta (n×dv) belongs to token t. With sqrt_on_s,
// alpha holds the roots a_t.
template <class T> struct DiagonalProblem {
  Problem<T> qkv;
  Mat<T> alpha, beta;
};

// The per-token diagonal factors of a placement, as vectors: L_t, R_t, M_t (length d), N_t (length dv).
template <class T> struct StepFactors { ColVec<T> L, R, M, N; };
template <class T> StepFactors<T> step_factors(const Placement& pl, const DiagonalProblem<T>& p, Eigen::Index t) {
  const Eigen::Index d = p.qkv.d(), dv = p.qkv.dv();
  const ColVec<T> one = ColVec<T>::Ones(d), a = p.alpha.row(t).transpose();
  const ColVec<T> c_gate = pl.sqrt_on_s ? ColVec<T>(a.cwiseProduct(a)) : a;
  return {pl.s_left ? a : one, pl.s_right ? a : one, pl.c_key ? c_gate : one,
          pl.c_value ? ColVec<T>(p.beta.row(t).transpose()) : ColVec<T>::Ones(dv)};
}

// Products of the factors over tokens (s, t]: Π_{r=s+1..t} L_r etc.
template <class T>
StepFactors<T> aged(const Placement& pl, const DiagonalProblem<T>& p, Eigen::Index t, Eigen::Index s) {
  StepFactors<T> f{ColVec<T>::Ones(p.qkv.d()), ColVec<T>::Ones(p.qkv.d()), ColVec<T>::Ones(p.qkv.d()),
                   ColVec<T>::Ones(p.qkv.dv())};
  for (Eigen::Index r = s + 1; r <= t; ++r) {
    const StepFactors<T> x = step_factors(pl, p, r);
    f.L = f.L.cwiseProduct(x.L);
    f.R = f.R.cwiseProduct(x.R);
    f.M = f.M.cwiseProduct(x.M);
    f.N = f.N.cwiseProduct(x.N);
  }
  return f;
}

// X_ij(t) = L(t,i) k_i (k_iᵀ R(t,i) M(t,j) q_j) v_jᵀ N(t,j), literally.
template <class T>
Mat<T> pair_term(const Placement& pl, const DiagonalProblem<T>& p, Eigen::Index t, Eigen::Index i, Eigen::Index j) {
  const StepFactors<T> fi = aged(pl, p, t, i), fj = aged(pl, p, t, j);
  const ColVec<T> k = p.qkv.K.row(i).transpose(), q = p.qkv.Q.row(j).transpose();
  const RowVec<T> v = p.qkv.V.row(j);
  const T middle = k.cwiseProduct(fi.R).dot(fj.M.cwiseProduct(q));
  return k.cwiseProduct(fi.L) * (middle * v.cwiseProduct(fj.N.transpose()));
}

// The placement's masked operator: o_t = q_tᵀ Σ_{i≤j≤t} X_ij(t).
template <class T> Mat<T> masked_output(const Placement& pl, const DiagonalProblem<T>& p) {
  const Eigen::Index n = p.qkv.n();
  Mat<T> O(n, p.qkv.dv());
  for (Eigen::Index t = 0; t < n; ++t) {
    Mat<T> sum = Mat<T>::Zero(p.qkv.d(), p.qkv.dv());
    for (Eigen::Index j = 0; j <= t; ++j)
      for (Eigen::Index i = 0; i <= j; ++i) sum += pair_term(pl, p, t, i, j);
    O.row(t) = p.qkv.Q.row(t) * sum;
  }
  return O;
}

// The excluded pairs j < i ≤ last of the first last+1 tokens, aged to token t ≥ last: Σ X_ij(t), flattened.
template <class T>
ColVec<T> excluded_pairs(const Placement& pl, const DiagonalProblem<T>& p, Eigen::Index last, Eigen::Index t) {
  Mat<T> sum = Mat<T>::Zero(p.qkv.d(), p.qkv.dv());
  for (Eigen::Index i = 0; i <= last; ++i)
    for (Eigen::Index j = 0; j < i; ++j) sum += pair_term(pl, p, t, i, j);
  return Eigen::Map<const ColVec<T>>(sum.data(), sum.size());
}

// How a candidate hla2-form recurrence ages G: the scalar-gated rule with every gate moved outside,
// Φ_t(X) = (L_t R_t M_t) X N_t — exact whenever the gates are scalars, since they then commute past k_iᵀ q_j — or
// the proposal's as printed, Φ_t(X) = L_t X N_t (for its placement G ← A^{1/2} G).
enum class Aging { all_gates_outside, proposal_as_printed };

// A candidate hla2-form recurrence: S, C as the placement says, then
//   G_t = Φ_t(G_{t−1}) + k_t k_tᵀ (M_t C_{t−1} N_t);  o_t = q_tᵀ(S_t C_t − G_t).
// With the proposal's placement and Aging::proposal_as_printed this is the proposal with diagonal gates:
//   S ← A^{1/2} S A^{1/2} + k kᵀ, C ← A C + q vᵀ, G ← A^{1/2} G + k kᵀ (A C).
template <class T> Mat<T> hla2_form_recurrence(const Placement& pl, const DiagonalProblem<T>& p, Aging aging) {
  const Eigen::Index n = p.qkv.n(), d = p.qkv.d(), dv = p.qkv.dv();
  Mat<T> S = Mat<T>::Zero(d, d), C = Mat<T>::Zero(d, dv), G = Mat<T>::Zero(d, dv), O(n, dv);
  for (Eigen::Index t = 0; t < n; ++t) {
    const StepFactors<T> f = step_factors(pl, p, t);
    const ColVec<T> q = p.qkv.Q.row(t).transpose(), k = p.qkv.K.row(t).transpose();
    const Mat<T> decayed_C = f.M.asDiagonal() * C * f.N.asDiagonal();  // M_t C_{t−1} N_t
    const ColVec<T> left = aging == Aging::all_gates_outside ? ColVec<T>(f.L.cwiseProduct(f.R).cwiseProduct(f.M)) : f.L;
    G = left.asDiagonal() * G * f.N.asDiagonal() + k * (k.transpose() * decayed_C);
    S = f.L.asDiagonal() * S * f.R.asDiagonal() + k * k.transpose();
    C = decayed_C + q * p.qkv.V.row(t);
    O.row(t) = q.transpose() * (S * C - G);
  }
  return O;
}

// Rank of a matrix over an exact field (Gaussian elimination).
template <class T> Eigen::Index exact_rank(Mat<T> m) {
  Eigen::Index rank = 0;
  for (Eigen::Index c = 0; c < m.cols() && rank < m.rows(); ++c) {
    Eigen::Index pivot = rank;
    while (pivot < m.rows() && m(pivot, c) == T(0)) ++pivot;
    if (pivot == m.rows()) continue;
    m.row(rank).swap(m.row(pivot));
    for (Eigen::Index r = rank + 1; r < m.rows(); ++r)
      if (m(r, c) != T(0)) m.row(r) -= (m(r, c) / m(rank, c)) * m.row(rank);
    ++rank;
  }
  return rank;
}

}  // namespace hla::verify::diagonal
