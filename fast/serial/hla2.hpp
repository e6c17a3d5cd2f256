// Second-order HLA, serial (streaming) forms: the §3.1 online updates, the §4.3 decayed updates and
// Algorithm 1's per-token output (ridge λ, normalize), exactly as printed — plus the corrected decayed
// cross-summary update the claims ledger derives (variant "corrected").
//
// The token update and the output read-out are also used by the scan forms (fast/scan/), which must
// compute outputs from their inclusive state "the same way the serial form does".
#pragma once

#include <utility>

#include "core/state.hpp"

namespace hla::fast {

// State of masked second order: S = Σ k kᵀ (d×d), C = Σ q vᵀ (d×dv), m = Σ q (d), and the masked
// cross-summaries G = Σ_i k_i k_iᵀ C_{i−1} (d×dv), h = Σ_i k_i k_iᵀ m_{i−1} (d) (§3.1). The unmasked form
// (eq. 3.1) keeps only (S, C, m).
template <class T, bool Masked> struct Hla2State {
  Mat<T> S, C, m, G, h;
  static Hla2State zero(Eigen::Index d, Eigen::Index dv) {
    return {Mat<T>::Zero(d, d), Mat<T>::Zero(d, dv), Mat<T>::Zero(d, 1), Mat<T>::Zero(d, Masked ? dv : 0),
            Mat<T>::Zero(d, Masked ? 1 : 0)};
  }
  template <class Self, class F> static void fields(Self& s, F&& visit) {
    visit("S", s.S);
    visit("C", s.C);
    visit("m", s.m);
    if constexpr (Masked) {
      visit("G", s.G);
      visit("h", s.h);
    }
  }
};

// How the decayed cross-summaries G, h advance.
//   paper:     G_t = γ G_{t−1} + k_t k_tᵀ C_{t−1}            (§4.3; Alg. 1 line 6)
//   corrected: G_t = γ² G_{t−1} + γ k_t k_tᵀ C_{t−1}         (makes q_tᵀ(S_t C_t − G_t) equal the decayed
//              masked sum of SPEC: each pair j < i ≤ t must carry γ^{(t−i)+(t−j)}, and a step multiplies
//              both exponents' t by one more γ)
// At γ = 1 they coincide.
enum class DecayRule { paper, corrected };

// One token of the online updates (§3.1; §4.3 with γ): S, C, m decay by γ and add the token's deltas;
// G, h add k_t (k_tᵀ X_{t−1}) with the *previous* C and m.
template <class T, bool Masked, class Vec> void hla2_step(Hla2State<T, Masked>& st, const Vec& q, const Vec& k,
                                                          const RowVec<T>& v, const T& gamma, DecayRule rule) {
  const bool decays = gamma != T(1);
  if constexpr (Masked) {
    // Cross-terms read C_{t−1}, m_{t−1}: do them before C, m advance.
    const T carry = rule == DecayRule::corrected ? gamma : T(1);
    const T keep = rule == DecayRule::corrected ? T(gamma * gamma) : gamma;
    RowVec<T> kC = k.transpose() * st.C;   // k_tᵀ C_{t−1}, 1×dv
    T km = k.dot(ColVec<T>(st.m.col(0)));  // k_tᵀ m_{t−1}
    if (decays) {
      st.G *= keep;
      st.h *= keep;
      kC *= carry;
      km *= carry;
    }
    st.G.noalias() += k * kC;
    st.h.noalias() += k * km;
  }
  if (decays) {
    st.S *= gamma;
    st.C *= gamma;
    st.m *= gamma;
  }
  st.S.noalias() += k * k.transpose();
  st.C.noalias() += q * v;
  st.m.col(0) += q;
}

// Algorithm 1 lines 9–15 given u = q_tᵀ S_eff: num = u C_t − q_tᵀ G_t; den = u m_t − q_tᵀ h_t + ε
// (unmasked: without the G, h terms). Writes o_t into `out`.
template <class T, bool Masked, class Vec, class Out>
void hla2_output_from_u(const Hla2State<T, Masked>& st, const Vec& q, const RowVec<T>& u, bool normalize, const T& eps,
                        Eigen::Index t, Out&& out) {
  RowVec<T> num = u * st.C;
  if constexpr (Masked) num.noalias() -= q.transpose() * st.G;
  if (normalize) {
    T den = (u * st.m)(0, 0);
    if constexpr (Masked) den -= (q.transpose() * st.h)(0, 0);
    divide_by_normalizer(num, T(den + eps), t);
  }
  out = num;
}

// Algorithm 1 lines 7–15 from an inclusive state: S_eff = S_t + λI, u = q_tᵀ S_eff, then the read-out.
template <class T, bool Masked, class Vec, class Out> void hla2_output(const Hla2State<T, Masked>& st, const Vec& q,
                                                                       const T& lambda, bool normalize, const T& eps,
                                                                       Eigen::Index t, Out&& out) {
  RowVec<T> u = q.transpose() * st.S;
  if (lambda != T(0)) u += lambda * q.transpose();
  hla2_output_from_u(st, q, u, normalize, eps, t, std::forward<Out>(out));
}

// The serial form: one pass over the tokens from an initial (or zero) state.
template <class T, bool Masked>
Run<T> hla2_serial(const Problem<T>& p, const Options& opt, const NamedState<T>* init, DecayRule rule) {
  const T gamma = from_rational<T>(opt.gamma), lambda = from_rational<T>(opt.ridge), eps = from_rational<T>(opt.eps);
  auto st = load_state<Hla2State<T, Masked>>(init, p.d(), p.dv());
  Mat<T> O(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
    hla2_step(st, q, k, RowVec<T>(p.V.row(t)), gamma, rule);
    hla2_output(st, q, lambda, opt.normalized, eps, t, O.row(t));
  }
  return {std::move(O), export_state<Hla2State<T, Masked>, T>(st)};
}

}  // namespace hla::fast
