// Third-order HLA as associative scan operators (γ = 1 only, as SPEC's hla3).
//
// paper — ⊗3 of eqs. 7.6–7.7 (Thm 7.2, Alg. 4), as printed. A segment X carries
//   (S^K, S^Q, P, m, F, η)  the eq. 7.5 state (fast/serial/hla3.hpp, Hla3CorrectedState), local to X,
//   R^QP = Σ q qᵀ k vᵀ (d×dv),  r^Qm = Σ q qᵀ k (d),  U^KQ = Σ k kᵀ q qᵀ (d×d),
//   M^KQP[Z] = Σ k kᵀ Z k vᵀ,   M^KQm[Z] = Σ k kᵀ Z k.
//   The maps are stored DENSE: M^KQP as the d² × (d·dv) matrix Σ vec(k kᵀ) vec(k vᵀ)ᵀ, applied as
//   vec(M[Z])ᵀ = vec(Z)ᵀ M (column-major vec), and M^KQm as d² × d. Memory per state:
//     d³·dv + d³ + 3d² + 3d·dv + 3d numbers   (d = 8, dv = 8: 5 016 numbers; d = 64, dv = 64: ~17.1 M)
//   — the O(d³·dv) of `cost.hla3.scan-state`. Dense is meant for the small d of exact tests.
//   ⊗3 is the segment summary of the eq. 7.5 recurrence, so a scan under it reproduces
//   `hla3/serial-eq75/paper` — and therefore inherits eq. 7.5's disagreement with SPEC's hla3 (finding).
//
// corrected — the smallest exact summary we found of the corrected recurrence
//   F_t = F_{t−1} + S^K_t q_t q_tᵀ P_t,  η_t = η_{t−1} + S^K_t q_t q_tᵀ m_t   (hla3/serial/corrected).
//   A segment carries (S^K, P, m, F, η) (Hla3MinimalState, local and inclusive) and
//     SQ = Σ q qᵀ (d×d),  X = Σ_u q_u q_uᵀ P_u^local (d×dv),  x = Σ_u q_u q_uᵀ m_u^local (d),
//     Y = Σ_u S^{K,local}_u q_u q_uᵀ (d×d).
//   For A then B (every u ∈ B sees S^K_u = S^K_A + S^{K,local}_u and P_u = P_A + P_u^local):
//     F_AB = F_A + F_B + S^K_A X_B + Y_B P_A + S^K_A SQ_B P_A,  η_AB likewise with (x_B, m_A),
//     X_AB = X_A + X_B + SQ_B P_A,  x_AB = x_A + x_B + SQ_B m_A,  Y_AB = Y_A + Y_B + S^K_A SQ_B,
//     S^K, P, m, SQ additive.
//   Numbers per state: 3d² + 3d·dv + 3d (no O(d³) maps, no S^Q beyond SQ).
// Single-token segments contain the token's own diagonal terms (Alg. 4 line 2):
//   paper: F = k kᵀ q qᵀ k vᵀ, η = k kᵀ q qᵀ k, R = q qᵀ k vᵀ, r = q qᵀ k, U = k kᵀ q qᵀ, maps as above;
//   corrected: F = k kᵀ q qᵀ k vᵀ, η = k kᵀ q qᵀ k, X = q qᵀ k vᵀ, x = q qᵀ k, Y = k kᵀ q qᵀ, SQ = q qᵀ.
#pragma once

#include "fast/scan/common.hpp"
#include "fast/serial/hla3.hpp"

namespace hla::scan {

// y = M[Z] for a dense map M (d² × rows·cols) stored as above.
template <class T> Mat<T> apply_map(const Mat<T>& M, const Mat<T>& Z, Eigen::Index rows, Eigen::Index cols) {
  const RowVec<T> z = Eigen::Map<const RowVec<T>>(Z.data(), Z.size());
  const RowVec<T> y = z * M;
  return Eigen::Map<const Mat<T>>(y.data(), rows, cols);
}

template <class T> ColVec<T> vec_of(const Mat<T>& X) { return Eigen::Map<const ColVec<T>>(X.data(), X.size()); }

template <class T> struct Hla3TensorSeg {
  fast::Hla3CorrectedState<T> st;  // S^K, S^Q, P, m, F, η
  Mat<T> R, r, U, M, Mm;           // R^QP, r^Qm, U^KQ, dense M^KQP, dense M^KQm
  template <class Self, class F> static void fields(Self& s, F&& visit) {
    fast::Hla3CorrectedState<T>::fields(s.st, visit);
    visit("RQP", s.R);
    visit("rQm", s.r);
    visit("UKQ", s.U);
    visit("MKQP", s.M);
    visit("MKQm", s.Mm);
  }
  NamedState<T> named() const { return named_segment<Hla3TensorSeg, T>(*this); }
};

// ⊗3 of eqs. 7.6–7.7 as printed.
template <class T> class Hla3TensorOp {
 public:
  using Seg = Hla3TensorSeg<T>;
  using Serial = fast::Hla3CorrectedState<T>;
  explicit Hla3TensorOp(const Options& o, Variant = Variant::paper) : ro_(o) {}

  Seg identity(Eigen::Index d, Eigen::Index dv) const {
    return {Serial::zero(d, dv), Mat<T>::Zero(d, dv),         Mat<T>::Zero(d, 1),
            Mat<T>::Zero(d, d),  Mat<T>::Zero(d * d, d * dv), Mat<T>::Zero(d * d, d)};
  }

  Seg token(const TokenRows<T>& x) const {
    const Eigen::Index d = x.q.size(), dv = x.v.size();
    Seg s = identity(d, dv);
    s.st.mo.step(x.q, x.k, x.v, T(1));  // D^K, D^Q, D^P, d^m
    const T kq = x.k.dot(x.q);
    s.st.F = x.k * (kq * kq * x.v);               // D^K D^Q D^P
    s.st.eta = x.k * (kq * kq);                   // D^K D^Q d^m
    s.R = x.q * (kq * x.v);                       // D^Q D^P
    s.r = x.q * kq;                               // D^Q d^m
    s.U = x.k * (kq * x.q.transpose());           // D^K D^Q
    const ColVec<T> kk = vec_of<T>(s.st.mo.SK);   // vec(k kᵀ)
    s.M = kk * vec_of<T>(s.st.mo.P).transpose();  // Z ↦ k kᵀ Z k vᵀ
    s.Mm = kk * x.k.transpose();                  // Z ↦ k kᵀ Z k
    return s;
  }

  Seg combine(const Seg& A, const Seg& B) const {
    const Eigen::Index d = A.st.mo.SK.rows(), dv = A.st.mo.P.cols();
    Seg r;
    r.st.mo.SK = A.st.mo.SK + B.st.mo.SK;
    r.st.mo.SQ = A.st.mo.SQ + B.st.mo.SQ;
    r.st.mo.P = A.st.mo.P + B.st.mo.P;
    r.st.mo.m = A.st.mo.m + B.st.mo.m;
    r.R = A.R + B.R;
    r.r = A.r + B.r;
    r.U = A.U + B.U;
    r.M = A.M + B.M;
    r.Mm = A.Mm + B.Mm;
    // eq. 7.7
    r.st.F = A.st.F + B.st.F + A.st.mo.SK * B.R + apply_map(B.M, A.st.mo.SQ, d, dv) + B.U * A.st.mo.P;
    r.st.eta = A.st.eta + B.st.eta + A.st.mo.SK * B.r + apply_map(B.Mm, A.st.mo.SQ, d, 1) + B.U * A.st.mo.m;
    return r;
  }

  // A prefix segment from an eq. 7.5 state: R, r, U and the maps are 0 (a prefix is only ever a left
  // operand, and eq. 7.7 reads them from the right operand only).
  Seg prefix(Serial st) const {
    Seg s = identity(st.mo.SK.rows(), st.mo.P.cols());
    s.st = std::move(st);
    return s;
  }

  template <class Out> void read(const Seg& I, const TokenRows<T>& x, Eigen::Index t, Out&& out) const {
    fast::hla3_read(I.st.F, I.st.eta, x.q, ro_.normalized, ro_.eps, t, std::forward<Out>(out));
  }

  static std::size_t numbers(std::size_t d, std::size_t dv) {
    return d * d * d * dv + d * d * d + 3 * d * d + 3 * d * dv + 3 * d;
  }

 private:
  ReadOut<T> ro_;
};

template <class T> struct Hla3MinimalSeg {
  fast::Hla3MinimalState<T> st;  // S^K, P, m, F, η
  Mat<T> SQ, X, x, Y;
  template <class Self, class F> static void fields(Self& s, F&& visit) {
    fast::Hla3MinimalState<T>::fields(s.st, visit);
    visit("SQ", s.SQ);
    visit("X", s.X);
    visit("x", s.x);
    visit("Y", s.Y);
  }
  NamedState<T> named() const { return named_segment<Hla3MinimalSeg, T>(*this); }
};

// The corrected third-order concatenation (derived above).
template <class T> class Hla3MinimalOp {
 public:
  using Seg = Hla3MinimalSeg<T>;
  using Serial = fast::Hla3MinimalState<T>;
  explicit Hla3MinimalOp(const Options& o, Variant = Variant::corrected) : ro_(o) {}

  Seg identity(Eigen::Index d, Eigen::Index dv) const {
    return {Serial::zero(d, dv), Mat<T>::Zero(d, d), Mat<T>::Zero(d, dv), Mat<T>::Zero(d, 1), Mat<T>::Zero(d, d)};
  }

  Seg token(const TokenRows<T>& x) const {
    const T kq = x.k.dot(x.q);
    Seg s;
    s.st.SK = x.k * x.k.transpose();
    s.st.P = x.k * x.v;
    s.st.m = x.k;
    s.st.F = x.k * (kq * kq * x.v);
    s.st.eta = x.k * (kq * kq);
    s.SQ = x.q * x.q.transpose();
    s.X = x.q * (kq * x.v);
    s.x = x.q * kq;
    s.Y = x.k * (kq * x.q.transpose());
    return s;
  }

  Seg combine(const Seg& A, const Seg& B) const {
    Seg r;
    const Mat<T> SQP = B.SQ * A.st.P;  // SQ_B P_A
    const Mat<T> SQm = B.SQ * A.st.m;  // SQ_B m_A
    r.st.SK = A.st.SK + B.st.SK;
    r.st.P = A.st.P + B.st.P;
    r.st.m = A.st.m + B.st.m;
    r.st.F = A.st.F + B.st.F + A.st.SK * B.X + B.Y * A.st.P + A.st.SK * SQP;
    r.st.eta = A.st.eta + B.st.eta + A.st.SK * B.x + B.Y * A.st.m + A.st.SK * SQm;
    r.SQ = A.SQ + B.SQ;
    r.X = A.X + B.X + SQP;
    r.x = A.x + B.x + SQm;
    r.Y = A.Y + B.Y + A.st.SK * B.SQ;
    return r;
  }

  // A prefix segment from a corrected serial state: SQ, X, x, Y = 0 (read from right operands only).
  Seg prefix(Serial st) const {
    Seg s = identity(st.SK.rows(), st.P.cols());
    s.st = std::move(st);
    return s;
  }

  template <class Out> void read(const Seg& I, const TokenRows<T>& x, Eigen::Index t, Out&& out) const {
    fast::hla3_read(I.st.F, I.st.eta, x.q, ro_.normalized, ro_.eps, t, std::forward<Out>(out));
  }

  static std::size_t numbers(std::size_t d, std::size_t dv) { return 3 * d * d + 3 * d * dv + 3 * d; }

 private:
  ReadOut<T> ro_;
};

}  // namespace hla::scan
