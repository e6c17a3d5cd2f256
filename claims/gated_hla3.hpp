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

#include <algorithm>
#include <optional>
#include <vector>

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

// The scan operator of the gated recurrence (F by γ_t³): hla3's corrected minimal concatenation (fast/scan/hla3.hpp,
// Hla3MinimalOp) with the segment's ρ = Π γ over it. A segment carries S^K, P, m, F, η as the serial state (local)
// and SQ = Σ_u Γ(e,u) q_u q_uᵀ, X = Σ_u Γ(e,u)² q_u q_uᵀ P_u, x likewise with m_u, Y = Σ_u Γ(e,u)² S^K_u q_u q_uᵀ
// (e the segment's last token, S^K_u, P_u, m_u local). For A then B, with b = ρ_B, every u ∈ B sees
// S^K_u = Γ(u,a) S^K_A + S^K_u(B) and Γ(e,u)³ Γ(u,a)² = b² Γ(e,u), Γ(e,u)³ Γ(u,a) = b Γ(e,u)², so
//   F_AB = b³ F_A + F_B + b S^K_A X_B + b Y_B P_A + b² S^K_A SQ_B P_A      (η likewise with x_B, m_A)
//   X_AB = b² X_A + X_B + b SQ_B P_A,   x_AB = b² x_A + x_B + b SQ_B m_A,   Y_AB = b² Y_A + Y_B + b S^K_A SQ_B
//   S^K, P, m, SQ: b·A + B;   ρ_AB = ρ_A ρ_B.
// At ρ ≡ 1 it is Hla3MinimalOp's combine. The ledger decides it associative and its scans equal to the literal sum
// (gated.hla3.scan.associative, gated.hla3.scan): what a gated hla3 scan or chunked form would rest on.
template <class T> struct Segment {
  Mat<T> SK, P, m, F, eta, SQ, X, x, Y;
  T rho;
};

template <class T> Segment<T> token(const Problem<T>& p, const ColVec<T>& gates, Eigen::Index t) {
  const ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
  const Mat<T> v = p.V.row(t);
  const T kq = k.dot(q);
  return {k * k.transpose(), k * v,        k,      k * (T(kq * kq) * v),     k * T(kq * kq),
          q * q.transpose(), q * (kq * v), q * kq, k * (kq * q.transpose()), gates(t)};
}

template <class T> Segment<T> combine(const Segment<T>& A, const Segment<T>& B) {
  const T b = B.rho, b2 = b * b, b3 = b2 * b;
  const Mat<T> SQP = B.SQ * A.P, SQm = B.SQ * A.m;  // SQ_B P_A, SQ_B m_A
  Segment<T> r;
  r.SK = b * A.SK + B.SK;
  r.P = b * A.P + B.P;
  r.m = b * A.m + B.m;
  r.F = b3 * A.F + B.F + b * (A.SK * B.X) + b * (B.Y * A.P) + b2 * (A.SK * SQP);
  r.eta = b3 * A.eta + B.eta + b * (A.SK * B.x) + b * (B.Y * A.m) + b2 * (A.SK * SQm);
  r.SQ = b * A.SQ + B.SQ;
  r.X = b2 * A.X + B.X + b * SQP;
  r.x = b2 * A.x + B.x + b * SQm;
  r.Y = b2 * A.Y + B.Y + b * (A.SK * B.SQ);
  r.rho = A.rho * B.rho;
  return r;
}

// Every part of a segment, one column (for comparing two segments entry by entry).
template <class T> Mat<T> flat(const Segment<T>& s) {
  std::vector<const Mat<T>*> parts{&s.SK, &s.P, &s.m, &s.F, &s.eta, &s.SQ, &s.X, &s.x, &s.Y};
  Eigen::Index size = 1;
  for (const Mat<T>* m : parts) size += m->size();
  Mat<T> out(size, 1);
  Eigen::Index at = 0;
  for (const Mat<T>* m : parts)
    for (Eigen::Index i = 0; i < m->size(); ++i) out(at++, 0) = (*m)(i);
  out(at, 0) = s.rho;
  return out;
}

// Outputs by a two-level scan with chunks of width w: each token's inclusive prefix is the fold of the complete
// chunks before it (carried across chunks) combined with the fold of its own chunk up to it; o_t = q_tᵀ [F η] of
// that prefix (numerator and denominator columns: unnormalized outputs, and the normalizer's sum).
template <class T> Mat<T> scan_outputs(const Problem<T>& p, const ColVec<T>& gates, Eigen::Index w) {
  const Eigen::Index n = p.n(), dv = p.dv();
  Mat<T> O(n, dv + 1);
  std::optional<Segment<T>> carry;  // everything before the current chunk
  for (Eigen::Index c = 0; c < n; c += w) {
    std::optional<Segment<T>> local;
    for (Eigen::Index t = c; t < std::min(n, c + w); ++t) {
      const Segment<T> tok = token(p, gates, t);
      local = local ? combine(*local, tok) : tok;
      const Segment<T> I = carry ? combine(*carry, *local) : *local;
      const RowVec<T> q = p.Q.row(t);
      O.row(t).head(dv) = q * I.F;
      O(t, dv) = (q * I.eta)(0, 0);
    }
    carry = carry ? combine(*carry, *local) : *local;
  }
  return O;
}

// The literal sum's numerator and the normalizer's sum (the same sum with v replaced by 1), as scan_outputs' columns.
template <class T> Mat<T> literal_sum_with_normalizer(const Problem<T>& p, const ColVec<T>& gates) {
  Problem<T> ones = p;
  ones.V.conservativeResize(Eigen::NoChange, p.dv() + 1);
  ones.V.col(p.dv()).setOnes();
  return literal_sum(ones, gates);
}

}  // namespace hla::verify::gated_hla3
