// Second-order HLA as associative scan operators (§4.1, eq. 4.1, §4.2).
//
// A segment X carries the serial state's parts (fast/serial/hla2.hpp, Hla2State) summed over X and
// its attenuation ρ(X) = γ^{ℓ(X)}:
//   unmasked (§4.1, §4.2):  (S, C, m, ρ)
//     (A ⊕γ B) = (ρB SA + SB, ρB CA + CB, ρB mA + mB, ρA ρB)          — with ρ ≡ 1 the §4.1 additive monoid
//   masked (eq. 4.1, §4.2): (S, C, m, G, h, ρ)
//     paper (as printed in §4.2):
//       G = ρB GA + GB + SB(ρB CA),   h = ρB hA + hB + SB(ρB mA)        — with ρ ≡ 1 exactly eq. 4.1
//     corrected (derived; consistent with SPEC's decayed hla2 and the serial rule
//                G_t = γ² G_{t−1} + γ k_t k_tᵀ C_{t−1}):
//       G = ρB² GA + GB + SB(ρB CA),  h = ρB² hA + hB + SB(ρB mA)
//     Why: G_X = Σ_{j<i in X} γ^{(e−i)+(e−j)} k_i k_iᵀ q_j v_jᵀ (e = X's last index) carries one γ per
//     step for each of the two indices, so appending B multiplies A's pairs by ρB twice; a pair j ∈ A,
//     i ∈ B carries γ^{e−i} (inside SB) times γ^{e−j} = ρB γ^{e_A−j} (inside ρB CA).
//     With γ = 1 both variants are eq. 4.1.
// Single-token segment: S = k kᵀ, C = q vᵀ, m = q, G = h = 0, ρ = γ (the serial step on the zero state);
// the inclusive state P_t ⊕ T_t then holds the token's own diagonal terms in S_t C_t.
// Numbers per state: unmasked d² + d·dv + d + 1; masked d² + 2d·dv + 2d + 1.
#pragma once

#include "fast/scan/common.hpp"
#include "fast/serial/hla2.hpp"

namespace hla::scan {

template <class T, bool Masked> struct Hla2Seg {
  fast::Hla2State<T, Masked> st;  // S, C, m (, G, h) of the segment
  T rho{1};                       // ρ = γ^length
  template <class Self, class F> static void fields(Self& s, F&& visit) {
    fast::Hla2State<T, Masked>::fields(s.st, visit);
    visit("rho", s.rho);
  }
  NamedState<T> named() const { return named_segment<Hla2Seg, T>(*this); }
};

template <class T, bool Masked> class Hla2Op {
 public:
  using Seg = Hla2Seg<T, Masked>;
  using Serial = fast::Hla2State<T, Masked>;
  Hla2Op(const Options& o, Variant v) : ro_(o), variant_(v) {}

  Seg identity(Eigen::Index d, Eigen::Index dv) const { return {Serial::zero(d, dv), T(1)}; }
  Variant variant() const { return variant_; }

  Seg token(const TokenRows<T>& x) const {
    Seg s{Serial::zero(x.q.size(), x.v.size()), ro_.gamma};
    fast::hla2_step(s.st, x.q, x.k, x.v, T(1), fast::DecayRule::paper);  // deltas on the zero state
    return s;
  }

  Seg combine(const Seg& A, const Seg& B) const {
    const T& b = B.rho;
    Seg r;
    const Mat<T> bCA = scaled(b, A.st.C), bmA = scaled(b, A.st.m);  // ρB CA, ρB mA
    r.st.S = scaled(b, A.st.S) + B.st.S;
    r.st.C = bCA + B.st.C;
    r.st.m = bmA + B.st.m;
    if constexpr (Masked) {
      const T keep = variant_ == Variant::paper ? b : T(b * b);  // ρB (printed) | ρB² (corrected)
      r.st.G = scaled(keep, A.st.G) + B.st.G + B.st.S * bCA;
      r.st.h = scaled(keep, A.st.h) + B.st.h + B.st.S * bmA;
    } else {
      r.st.G = A.st.G;  // empty (d×0)
      r.st.h = A.st.h;
    }
    r.rho = A.rho * B.rho;
    return r;
  }

  // An initial state is the inclusive segment of everything before this call. Its ρ is set to 1: a
  // prefix is only ever the left operand, whose ρ reaches no part but the combined ρ.
  Seg prefix(Serial st) const { return {std::move(st), T(1)}; }

  template <class Out> void read(const Seg& I, const TokenRows<T>& x, Eigen::Index t, Out&& out) const {
    fast::hla2_output(I.st, x.q, ro_.lambda, ro_.normalized, ro_.eps, t, std::forward<Out>(out));
  }

  static std::size_t numbers(std::size_t d, std::size_t dv) {
    return Masked ? d * d + 2 * d * dv + 2 * d + 1 : d * d + d * dv + d + 1;
  }

 private:
  ReadOut<T> ro_;
  Variant variant_;
};

}  // namespace hla::scan
