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
#pragma once

#include <algorithm>
#include <vector>

#include "core/gates.hpp"
#include "fast/backward/magnitude.hpp"  // HLA_GATED_BACKWARD_SCALARS names Magnitude
#include "fast/backward/ops.hpp"
#include "fast/scan/gated.hpp"

namespace hla::backward {

template <class T> struct GatedGradients {
  Mat<T> dQ, dK, dV;
  ColVec<T> dgamma;      // ∂L/∂γ_t, one per token
  NamedState<T> dstate;  // ∂L/∂X_0
};

// The reverse sweep; `ops` has a public `gamma`, set to each token's gate. As recurrence_backward: with chunk = w in
// [1, n) only the states at chunk boundaries X_0, X_w, … are kept from the forward pass, and each chunk's states are
// recomputed from its checkpoint (with the chunk's own gates) before the sweep passes back through it — O((n/w + w)
// states) instead of n + 1, and the same arithmetic, so the same gradients bit for bit; chunk ≤ 0 or ≥ n stores all.
template <class Ops, class T>
GatedGradients<T> gated_recurrence_backward(Ops ops, const GatedProblem<T>& g,
                                            const std::type_identity_t<NamedState<T>>* init, const Mat<T>& dO,
                                            Eigen::Index chunk = 0) {
  using State = typename Ops::State;
  const Problem<T>& p = g.qkv;
  check_upstream(p, dO);
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv();
  if (g.gamma.size() != n)
    throw InputError("gated backward: " + std::to_string(g.gamma.size()) + " gates for " + std::to_string(n) +
                     " tokens");
  const Eigen::Index w = (chunk <= 0 || chunk > n) ? std::max<Eigen::Index>(n, 1) : chunk;
  const auto step = [&](State& x, Eigen::Index t) {
    ops.gamma = g.gamma(t);
    ops.step(x, Token<T>(p, t));
  };
  std::vector<State> checkpoint;  // the state entering each chunk
  State x = load_state<State>(init, d, dv);
  for (Eigen::Index t = 0; t < n; ++t) {
    if (t % w == 0) checkpoint.push_back(x);
    step(x, t);
  }
  GatedGradients<T> out{Mat<T>::Zero(n, d), Mat<T>::Zero(n, d), Mat<T>::Zero(n, dv), ColVec<T>::Zero(n), {}};
  const T half = from_rational<T>(rational(1, 2));
  State bar = State::zero(d, dv);
  std::vector<State> X;  // X[s] = the state after token begin + s − 1 of the current chunk
  for (Eigen::Index c = static_cast<Eigen::Index>(checkpoint.size()) - 1; c >= 0; --c) {
    const Eigen::Index begin = c * w, end = std::min(n, begin + w);
    X.assign(1, checkpoint[c]);
    for (Eigen::Index t = begin; t < end; ++t) {
      X.push_back(X.back());
      step(X.back(), t);
    }
    for (Eigen::Index t = end - 1; t >= begin; --t) {
      const Token<T> tok(p, t);
      const T gamma = g.gamma(t);
      const State &before = X[t - begin], &after = X[t - begin + 1];
      ops.gamma = gamma;
      TokenGrad<T> tg(d, dv);
      ops.out_vjp(after, tok, RowVec<T>(dO.row(t)), t, bar, tg);
      // ∂L/∂γ_t = ⟨X̄_t, (step(γ_t + 1) − step(γ_t − 1)) / 2⟩ (see the header comment)
      State up = before, down = before;
      ops.gamma = T(gamma + T(1));
      ops.step(up, tok);
      ops.gamma = T(gamma - T(1));
      ops.step(down, tok);
      ops.gamma = gamma;
      const NamedState<T> b = export_state<State, T>(bar), u = export_state<State, T>(up),
                          v = export_state<State, T>(down);
      T dg(0);
      for (std::size_t k = 0; k < b.parts.size(); ++k) {
        const Mat<T>& bm = b.parts[k].second;
        const Mat<T>& um = u.parts[k].second;
        const Mat<T>& vm = v.parts[k].second;
        for (Eigen::Index i = 0; i < bm.size(); ++i) dg += bm(i) * T(um(i) - vm(i));
      }
      out.dgamma(t) = dg * half;
      ops.step_vjp(before, after, tok, bar, tg);
      out.dQ.row(t) += tg.dq.transpose();
      out.dK.row(t) += tg.dk.transpose();
      out.dV.row(t) += tg.dv;
    }
  }
  out.dstate = export_state<State, T>(bar);
  return out;
}

// The gated serial backward of op ∈ {hla2 (SPEC's gated rule), ahla, linear}; opt.gamma must be 1 (the decay is the
// gates'). chunk = w ≥ 1 checkpoints every w tokens (gated_recurrence_backward); 0 stores every state.
template <class T> GatedGradients<T> gated_backward(const std::string& op, const GatedProblem<T>& g, const Options& opt,
                                                    const std::type_identity_t<NamedState<T>>* init, const Mat<T>& dO,
                                                    Eigen::Index chunk = 0) {
  if (opt.gamma != 1) throw InputError("gated backward: the decay is the gates'; Options::gamma must be 1");
  if (chunk < 0) throw InputError("gated backward: the checkpoint width must be >= 0 (0: every state)");
  return with_backward_ops<T>(op, opt, fast::DecayRule::corrected,
                              [&](const auto& ops) { return gated_recurrence_backward(ops, g, init, dO, chunk); });
}

// The gated reverse scan (hla2 only, the operator table's scan_backward): §4.2's reverse scan under ⊕* (hla2.hpp,
// hla2_reverse_scan) over the gated scan operator, whose token segments carry ρ = γ_t (fast/scan/gated.hpp), with
// the ρs differentiated: ∂L/∂γ_t = ∂L/∂ρ_{T_t}. Carries at every w-th token (w ≥ 1; w ≥ n one chunk). It differentiates
// the same function as gated_backward (the scan's combines fold to SPEC's gated serial rule: gated.hla2.scan), so it
// returns the same gradients, exactly in exact arithmetic (tests/test_gated_backward.cpp; ledger gated.hla2.backward).
template <class T> GatedGradients<T> gated_scan_backward(const std::string& op, const GatedProblem<T>& g,
                                                         const Options& opt,
                                                         const std::type_identity_t<NamedState<T>>* init,
                                                         const Mat<T>& dO, Eigen::Index chunk) {
  if (!operator_info(op).scan_backward)
    throw InputError("gated scan backward: no reverse scan for operator '" + op + "' (" +
                     operator_names([](const OperatorInfo& o) { return o.scan_backward; }) + " only)");
  if (opt.gamma != 1) throw InputError("gated scan backward: the decay is the gates'; Options::gamma must be 1");
  if (chunk < 1) throw InputError("gated scan backward: the chunk width must be >= 1");
  check_upstream(g.qkv, dO);
  if (g.gamma.size() != g.n())
    throw InputError("gated scan backward: " + std::to_string(g.gamma.size()) + " gates for " + std::to_string(g.n()) +
                     " tokens");
  const scan::GatedOp<scan::Hla2Op<T, true>> gop({opt, scan::Variant::corrected}, g.gamma);
  GatedGradients<T> out;
  Gradients<T> r = hla2_reverse_scan(gop, g.qkv, opt, init, dO, chunk, &out.dgamma, nullptr);
  out.dQ = std::move(r.dQ);
  out.dK = std::move(r.dK);
  out.dV = std::move(r.dV);
  out.dstate = std::move(r.dstate);
  return out;
}

}  // namespace hla::backward

// The scalars gated_backward is compiled for, once (verify/gated_backward.cpp): HLA_GATED_BACKWARD_SCALARS()
// instantiates them there, HLA_GATED_BACKWARD_SCALARS(extern) declares them for every other caller.
#define HLA_GATED_BACKWARD_ONE(EXTERN, T)                                                              \
  EXTERN template hla::backward::GatedGradients<T> hla::backward::gated_backward<T>(                   \
      const std::string&, const hla::GatedProblem<T>&, const hla::Options&, const hla::NamedState<T>*, \
      const hla::Mat<T>&, Eigen::Index);
#define HLA_GATED_SCAN_BACKWARD_ONE(EXTERN, T)                                                         \
  EXTERN template hla::backward::GatedGradients<T> hla::backward::gated_scan_backward<T>(              \
      const std::string&, const hla::GatedProblem<T>&, const hla::Options&, const hla::NamedState<T>*, \
      const hla::Mat<T>&, Eigen::Index);
#define HLA_GATED_BACKWARD_SCALARS(EXTERN)           \
  HLA_GATED_BACKWARD_ONE(EXTERN, hla::rational)      \
  HLA_GATED_BACKWARD_ONE(EXTERN, hla::mpfr256)       \
  HLA_GATED_BACKWARD_ONE(EXTERN, hla::Magnitude)     \
  HLA_GATED_SCAN_BACKWARD_ONE(EXTERN, hla::rational) \
  HLA_GATED_SCAN_BACKWARD_ONE(EXTERN, hla::mpfr256)  \
  HLA_GATED_SCAN_BACKWARD_ONE(EXTERN, hla::Magnitude)
