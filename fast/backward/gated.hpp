// Backward of the gated serial forms (SPEC "Gated (data-dependent) decay"; fast/serial/gated.hpp), L = Σ_t ⟨dO_t, o_t⟩:
// ∂L/∂Q, ∂L/∂K, ∂L/∂V, ∂L/∂X_0 and ∂L/∂γ_t for every gate.
//
// The gated serial forms are the fixed-γ token steps with γ = γ_t at token t, so their reverse sweep is the fixed-γ
// one (recurrence.hpp) with each token's Ops (hla2.hpp with the corrected rule, ahla.hpp, linear.hpp) set to its own
// gate: X̄_t += out_vjp(X_t; dO_t), then X̄_{t−1} = step_vjp(X_{t−1}, X_t; X̄_t) at γ = γ_t.
//
// The gates: γ_t enters only X_t = step(X_{t−1}, token t; γ_t), so ∂L/∂γ_t = ⟨X̄_t, ∂step/∂γ (X_{t−1}; γ_t)⟩ with X̄_t
// the whole ∂L/∂X_t (after the read-out's adjoint at t). Every step is a polynomial of degree ≤ 2 in γ (hla2's γ²
// G_{t−1} + γ k kᵀ C_{t−1}; the others are linear in it), whose derivative is exactly the central difference (step(γ +
// 1) − step(γ − 1)) / 2: no hand-written ∂step/∂γ to get wrong, exact in exact arithmetic. Run on magnitudes
// (Magnitude, fast/backward/magnitude.hpp) the same code bounds the absolute sum of the terms of ∂L/∂γ_t: each monomial
// c γ^e of a step has |(c(γ+1)^e − c(γ−1)^e)/2| ≤ |c|((γ+1)^e + (1−γ)^e)/2, which is ≥ e|c|γ^(e−1) for e ≤ 2 (for e = 2
// it is |c|(1 + γ²) ≥ 2|c|γ).
//
// Include fast/backward/dual.hpp and magnitude.hpp before this header where those scalars are used (their comments say
// why).
#pragma once

#include <vector>

#include "core/gates.hpp"
#include "fast/backward/ops.hpp"

namespace hla::backward {

template <class T> struct GatedGradients {
  Mat<T> dQ, dK, dV;
  ColVec<T> dgamma;      // ∂L/∂γ_t, one per token
  NamedState<T> dstate;  // ∂L/∂X_0
};

// The reverse sweep with all n + 1 states stored; `ops` has a public `gamma`, set to each token's gate.
template <class Ops, class T>
GatedGradients<T> gated_recurrence_backward(Ops ops, const GatedProblem<T>& g,
                                            const std::type_identity_t<NamedState<T>>* init, const Mat<T>& dO) {
  using State = typename Ops::State;
  const Problem<T>& p = g.qkv;
  check_upstream(p, dO);
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv();
  if (g.gamma.size() != n)
    throw InputError("gated backward: " + std::to_string(g.gamma.size()) + " gates for " + std::to_string(n) +
                     " tokens");
  std::vector<State> X;
  X.reserve(static_cast<std::size_t>(n + 1));
  X.push_back(load_state<State>(init, d, dv));
  for (Eigen::Index t = 0; t < n; ++t) {
    ops.gamma = g.gamma(t);
    X.push_back(X.back());
    ops.step(X.back(), Token<T>(p, t));
  }
  GatedGradients<T> out{Mat<T>::Zero(n, d), Mat<T>::Zero(n, d), Mat<T>::Zero(n, dv), ColVec<T>::Zero(n), {}};
  const T half = from_rational<T>(rational(1, 2));
  State bar = State::zero(d, dv);
  for (Eigen::Index t = n - 1; t >= 0; --t) {
    const Token<T> tok(p, t);
    const T gamma = g.gamma(t);
    ops.gamma = gamma;
    TokenGrad<T> tg(d, dv);
    ops.out_vjp(X[t + 1], tok, RowVec<T>(dO.row(t)), t, bar, tg);
    // ∂L/∂γ_t = ⟨X̄_t, (step(γ_t + 1) − step(γ_t − 1)) / 2⟩ (see the header comment)
    State up = X[t], down = X[t];
    ops.gamma = T(gamma + T(1));
    ops.step(up, tok);
    ops.gamma = T(gamma - T(1));
    ops.step(down, tok);
    ops.gamma = gamma;
    const NamedState<T> b = export_state<State, T>(bar), u = export_state<State, T>(up),
                        w = export_state<State, T>(down);
    T dg(0);
    for (std::size_t k = 0; k < b.parts.size(); ++k) {
      const Mat<T>& bm = b.parts[k].second;
      const Mat<T>& um = u.parts[k].second;
      const Mat<T>& wm = w.parts[k].second;
      for (Eigen::Index i = 0; i < bm.size(); ++i) dg += bm(i) * T(um(i) - wm(i));
    }
    out.dgamma(t) = dg * half;
    ops.step_vjp(X[t], X[t + 1], tok, bar, tg);
    out.dQ.row(t) += tg.dq.transpose();
    out.dK.row(t) += tg.dk.transpose();
    out.dV.row(t) += tg.dv;
  }
  out.dstate = export_state<State, T>(bar);
  return out;
}

// The gated serial backward of op ∈ {hla2 (SPEC's gated rule), ahla, linear}; opt.gamma must be 1 (the decay is the
// gates').
template <class T> GatedGradients<T> gated_backward(const std::string& op, const GatedProblem<T>& g, const Options& opt,
                                                    const std::type_identity_t<NamedState<T>>* init, const Mat<T>& dO) {
  if (opt.gamma != 1) throw InputError("gated backward: the decay is the gates'; Options::gamma must be 1");
  return with_backward_ops<T>(op, opt, fast::DecayRule::corrected,
                              [&](const auto& ops) { return gated_recurrence_backward(ops, g, init, dO); });
}

}  // namespace hla::backward

// The scalars gated_backward is compiled for, once (verify/gated_backward.cpp): HLA_GATED_BACKWARD_SCALARS()
// instantiates them there, HLA_GATED_BACKWARD_SCALARS(extern) declares them for every other caller.
#define HLA_GATED_BACKWARD_ONE(EXTERN, T)                                                              \
  EXTERN template hla::backward::GatedGradients<T> hla::backward::gated_backward<T>(                   \
      const std::string&, const hla::GatedProblem<T>&, const hla::Options&, const hla::NamedState<T>*, \
      const hla::Mat<T>&);
#define HLA_GATED_BACKWARD_SCALARS(EXTERN)      \
  HLA_GATED_BACKWARD_ONE(EXTERN, hla::rational) \
  HLA_GATED_BACKWARD_ONE(EXTERN, hla::mpfr256)  \
  HLA_GATED_BACKWARD_ONE(EXTERN, hla::Magnitude)
