// Gated serial forms (SPEC "Gated (data-dependent) decay"): the fixed-γ token steps of linear.hpp, hla2.hpp
// and ahla.hpp, each token decayed by its own gate γ_t; and, held against them, two recurrences that are
// wrong with gates (the ledger decides them): Algorithm 1's decay rule, and a public "gated second-order
// linear attention" proposal's recurrence.
#pragma once

#include "core/gates.hpp"
#include "fast/serial/ahla.hpp"
#include "fast/serial/hla2.hpp"
#include "fast/serial/linear.hpp"

namespace hla::fast {

// One pass over the tokens: step(state, q_t, k_t, v_t, γ_t), then read(state, q_t, t, o_t).
template <class State, class T, class Step, class Read>
Run<T> gated_serial(const GatedProblem<T>& g, const NamedState<T>* init, Step&& step, Read&& read) {
  const Problem<T>& p = g.qkv;
  auto st = load_state<State>(init, p.d(), p.dv());
  Mat<T> O(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
    step(st, q, k, RowVec<T>(p.V.row(t)), g.gamma(t));
    read(st, q, t, O.row(t));
  }
  return {std::move(O), export_state<State, T>(st)};
}

// linear, SPEC gated: S_t = γ_t S_{t−1} + k_t v_tᵀ (z likewise); o_t = q_tᵀ S_t.
template <class T> Run<T> gated_linear_serial(const GatedProblem<T>& g, const Options& opt, const NamedState<T>* init) {
  const T eps = from_rational<T>(opt.eps);
  return gated_serial<LinearState<T>>(
      g, init,
      [](auto& st, const auto&, const auto& k, const auto& v, const T& gamma) { linear_step(st, k, v, gamma); },
      [&](const auto& st, const auto& q, Eigen::Index t, auto&& out) {
        linear_output(st, q, opt.normalized, eps, t, out);
      });
}

// Algorithm 1 lines 7–15 (ridge λ, normalized) as a read-out of the hla2 state, for the gated serial loop.
template <class T> auto hla2_read_out(const Options& opt) {
  return [lambda = from_rational<T>(opt.ridge), eps = from_rational<T>(opt.eps), normalized = opt.normalized](
             const auto& st, const auto& q, Eigen::Index t, auto&& out) {
    hla2_output(st, q, lambda, normalized, eps, t, out);
  };
}

// hla2 (masked) with gates. DecayRule::corrected is SPEC's gated serial: G_t = γ_t² G_{t−1} + γ_t k_t (k_tᵀ C_{t−1})
// with the previous C, then S_t = γ_t S_{t−1} + k_t k_tᵀ, C_t = γ_t C_{t−1} + q_t v_tᵀ (h, m likewise);
// o_t = q_tᵀ(S_t C_t − G_t) (Alg. 1 lines 7–15: ridge λ, normalized). DecayRule::paper is Algorithm 1's
// rule G_t = γ_t G_{t−1} + k_t k_tᵀ C_{t−1} applied with gates.
// Unmasked (Masked = false): S, C, m only, o_t = q_tᵀ S_t C_t — the absolute operator of the masked one's bound.
template <class T, bool Masked = true>
Run<T> gated_hla2_serial(const GatedProblem<T>& g, const Options& opt, const NamedState<T>* init, DecayRule rule) {
  return gated_serial<Hla2State<T, Masked>>(
      g, init,
      [rule](auto& st, const auto& q, const auto& k, const auto& v, const T& gamma) {
        hla2_step(st, q, k, v, gamma, rule);
      },
      hla2_read_out<T>(opt));
}

// ahla, SPEC gated (Algorithm 2 with γ_t): P_t = γ_t P_{t−1} + k_t v_tᵀ, E_t = γ_t E_{t−1} + k_t (q_tᵀ P_t).
template <class T> Run<T> gated_ahla_serial(const GatedProblem<T>& g, const Options& opt, const NamedState<T>* init) {
  const T eps = from_rational<T>(opt.eps);
  return gated_serial<AhlaState<T>>(
      g, init,
      [](auto& st, const auto& q, const auto& k, const auto& v, const T& gamma) { ahla_step(st, q, k, v, gamma); },
      [&](const auto& st, const auto& q, Eigen::Index t, auto&& out) {
        ahla_output(st, q, opt.normalized, eps, t, out);
      });
}

// The proposal's recurrence with scalar gates, as printed, in a_t = √γ_t:
//   S ← a_t² S + k kᵀ,   C ← γ_t C + q vᵀ,   G ← a_t G + k kᵀ (γ_t C)     (γ_t C: the previous C, decayed)
// and its normalizer likewise (m ← γ_t m + q, h ← a_t h + k kᵀ (γ_t m)); o_t = q_tᵀ(S_t C_t − G_t).
// `g_keep_power` is the power of a_t that G and h keep: 1 as printed; 4 (= γ_t², SPEC's gated rule) is the
// correction the ledger verifies (gated.hla2.proposal.corrected).
template <class T, class Vec> void proposal_hla2_step(Hla2State<T, true>& st, const Vec& q, const Vec& k,
                                                      const RowVec<T>& v, const T& a, int g_keep_power) {
  const T gamma = a * a, keep = power(a, g_keep_power);
  const RowVec<T> decayed_kC = gamma * (k.transpose() * st.C);  // k_tᵀ (γ_t C_{t−1})
  const T decayed_km = gamma * k.dot(ColVec<T>(st.m.col(0)));
  st.G = keep * st.G + k * decayed_kC;
  st.h = keep * st.h + k * decayed_km;
  st.S = gamma * st.S + k * k.transpose();
  st.C = gamma * st.C + q * v;
  st.m = gamma * st.m + q;
}

// The proposal's serial form given the roots a_t (γ_t = a_t²; the gated references take γ_t).
template <class T> Run<T> proposal_hla2_serial(const GatedProblem<T>& roots, const Options& opt,
                                               const NamedState<T>* init, int g_keep_power) {
  return gated_serial<Hla2State<T, true>>(
      roots, init,
      [g_keep_power](auto& st, const auto& q, const auto& k, const auto& v, const T& a) {
        proposal_hla2_step(st, q, k, v, a, g_keep_power);
      },
      hla2_read_out<T>(opt));
}

}  // namespace hla::fast
