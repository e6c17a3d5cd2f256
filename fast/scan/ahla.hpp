// Asymmetric second order (AHLA) as an associative scan operator (eq. 6.2 and §6.2 decay-aware form).
//
// A segment X carries the serial state (fast/serial/ahla.hpp, AhlaState: P = Σ k vᵀ, m = Σ k,
// E = Σ_i k_i q_iᵀ P_i, n = Σ_i k_i q_iᵀ m_i, all local to X and decayed to X's end), the key–query
// moment R = Σ_{i∈X} k_i q_iᵀ (d×d) and ρ = γ^{ℓ(X)}:
//   paper (§6.2 "decay-aware concatenation", as printed; with ρ ≡ 1 exactly eq. 6.2):
//     (ρB RA + RB, ρB PA + PB, ρB mA + mB, ρB EA + EB + RB(ρB PA), ρB nA + nB + RB(ρB mA), ρA ρB)
//   corrected (derived): R is NOT attenuated — R_AB = RA + RB — everything else as printed.
//     Why: for i ∈ B the prefix is P_i = γ^{i−e_A} PA + P_i^local, and E_AB weighs i by γ^{e_B−i}, so the
//     cross-term is Σ_{i∈B} γ^{e_B−i} γ^{i−e_A} k_i q_iᵀ PA = ρB (Σ_{i∈B} k_i q_iᵀ) PA: the *undecayed*
//     Σ k qᵀ of B. The printed ρB RA + RB makes a multi-token right operand's R decayed, which is wrong
//     as soon as B has two or more tokens (γ < 1); a single-token B (the serial fold) is unaffected.
//     Same state size as the printed one.
// Single-token segment: the serial step on the zero state — P = k vᵀ, m = k, E = k (qᵀk) vᵀ (the
// diagonal i = j term, not 0), n = k (qᵀk) — with R = k qᵀ and ρ = γ.
// Numbers per state: d² + 2d·dv + 2d + 1.
#pragma once

#include "fast/scan/common.hpp"
#include "fast/serial/ahla.hpp"

namespace hla::scan {

template <class T> struct AhlaSeg {
  fast::AhlaState<T> st;  // P, m, E, n of the segment
  Mat<T> R;               // Σ k qᵀ over the segment (attenuated in the printed variant, not in the corrected)
  T rho{1};
  template <class Self, class F> static void fields(Self& s, F&& visit) {
    fast::AhlaState<T>::fields(s.st, visit);
    visit("R", s.R);
    visit("rho", s.rho);
  }
  NamedState<T> named() const { return named_segment<AhlaSeg, T>(*this); }
};

template <class T> class AhlaOp {
 public:
  using Seg = AhlaSeg<T>;
  using Serial = fast::AhlaState<T>;
  AhlaOp(const Options& o, Variant v) : ro_(o), variant_(v) {}

  Seg identity(Eigen::Index d, Eigen::Index dv) const { return {Serial::zero(d, dv), Mat<T>::Zero(d, d), T(1)}; }
  Variant variant() const { return variant_; }

  Seg token(const TokenRows<T>& x) const {
    Seg s{Serial::zero(x.q.size(), x.v.size()), x.k * x.q.transpose(), ro_.gamma};
    fast::ahla_step(s.st, x.q, x.k, x.v, T(1));
    return s;
  }

  Seg combine(const Seg& A, const Seg& B) const {
    const T& b = B.rho;
    Seg r;
    const Mat<T> bPA = scaled(b, A.st.P), bmA = scaled(b, A.st.m);
    r.R = (variant_ == Variant::paper ? scaled(b, A.R) : A.R) + B.R;
    r.st.P = bPA + B.st.P;
    r.st.m = bmA + B.st.m;
    r.st.E = scaled(b, A.st.E) + B.st.E + B.R * bPA;
    r.st.n = scaled(b, A.st.n) + B.st.n + B.R * bmA;
    r.rho = A.rho * B.rho;
    return r;
  }

  // A prefix segment from a serial state: R = 0 and ρ = 1 (a prefix is only ever a left operand, whose
  // R and ρ reach only the combined R and ρ, never P, m, E, n).
  Seg prefix(Serial st) const {
    const Eigen::Index d = st.P.rows();
    return {std::move(st), Mat<T>::Zero(d, d), T(1)};
  }

  template <class Out> void read(const Seg& I, const TokenRows<T>& x, Eigen::Index t, Out&& out) const {
    fast::ahla_output(I.st, x.q, ro_.normalized, ro_.eps, t, std::forward<Out>(out));
  }

  static std::size_t numbers(std::size_t d, std::size_t dv) { return d * d + 2 * d * dv + 2 * d + 1; }

 private:
  ReadOut<T> ro_;
  Variant variant_;
};

}  // namespace hla::scan
