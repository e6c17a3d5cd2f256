// Reverse-mode gradients through a serial recurrence X_t = step(X_{t−1}, q_t, k_t, v_t), o_t = out(X_t, q_t),
// for the loss L = Σ_t ⟨dO_t, o_t⟩ (dO = the upstream gradient ∂L/∂O).
//
// Reverse sweep, t = n..1, with X̄_t = ∂L/∂X_t (the "state gradient"), X̄_n = 0:
//     X̄_t   += out_vjp(X_t, q_t; dO_t)                     (the read-out at t)
//     X̄_{t−1} = step_vjp(X_{t−1}, X_t, q_t, k_t, v_t; X̄_t)   (and the token's dq_t, dk_t, dv_t)
// and ∂L/∂X_0 = X̄_0 is the gradient of the initial state. Each operator's Ops type (fast/backward/
// hla2.hpp, ahla.hpp, linear.hpp) supplies step (the serial form's own step function), out_vjp and
// step_vjp, with its state-gradient recurrences written out and cited there.
//
// Memory: the sweep needs X_{t−1} and X_t at every t. `recurrence_backward(…, chunk = w)` keeps only the
// states at chunk boundaries X_0, X_w, X_2w, … from a forward pass (⌈n/w⌉ checkpoints), and for the chunks
// in reverse order recomputes the chunk's w states from its checkpoint before sweeping back through them:
// O((n/w + w)·|X|) memory and one extra forward pass. w ≥ n (or w ≤ 0) is the plain serial backward that
// stores all n + 1 states — that is what the harness calls "serial backward".
#pragma once

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/state.hpp"
#include "fast/scan/common.hpp"

namespace hla::backward {

// ∂L/∂Q, ∂L/∂K, ∂L/∂V and ∂L/∂X_0 (the initial state, as the operator's NamedState; empty when a form
// has no initial state, e.g. the reference).
template <class T> struct Gradients {
  Mat<T> dQ, dK, dV;
  NamedState<T> dstate;
};

template <class T> Gradients<T> zero_gradients(const Problem<T>& p) {
  return {Mat<T>::Zero(p.n(), p.d()), Mat<T>::Zero(p.n(), p.d()), Mat<T>::Zero(p.n(), p.dv()), {}};
}

// Checks the upstream gradient's shape (dO must be n×dv).
template <class T> void check_upstream(const Problem<T>& p, const Mat<T>& dO) {
  if (dO.rows() != p.n() || dO.cols() != p.dv())
    throw InputError("upstream gradient dO is " + std::to_string(dO.rows()) + "x" + std::to_string(dO.cols()) +
                     ", expected " + std::to_string(p.n()) + "x" + std::to_string(p.dv()));
}

// The token's inputs as the serial forms take them (the scan forms' TokenRows).
template <class T> using Token = scan::TokenRows<T>;

// What a backward pass kept (for the sweep's memory columns and the benchmarks' counters), filled when
// a pointer is given: the checkpoints held through the whole pass, and the most states alive at once
// (checkpoints + one chunk's recomputed states, and for the scan its adjoints), each of state_numbers numbers.
struct BackwardStats {
  std::size_t checkpoints = 0, peak_states = 0, state_numbers = 0;
  std::size_t peak_numbers() const { return peak_states * state_numbers; }
};

template <class State> std::size_t numbers_in(const State& x) {
  std::size_t c = 0;
  State::fields(x, [&](const char*, const auto& m) { c += static_cast<std::size_t>(m.size()); });
  return c;
}

// Token t's gradient rows, accumulated by the Ops' vjp functions.
template <class T> struct TokenGrad {
  ColVec<T> dq, dk;
  RowVec<T> dv;
  TokenGrad(Eigen::Index d, Eigen::Index dv_)
      : dq(ColVec<T>::Zero(d)), dk(ColVec<T>::Zero(d)), dv(RowVec<T>::Zero(dv_)) {}
};

template <class Ops, class T>
Gradients<T> recurrence_backward(const Ops& ops, const Problem<T>& p, const std::type_identity_t<NamedState<T>>* init,
                                 const Mat<T>& dO, Eigen::Index chunk, BackwardStats* stats = nullptr) {
  using State = typename Ops::State;
  check_upstream(p, dO);
  const Eigen::Index n = p.n(), d = p.d(), dv = p.dv();
  const Eigen::Index w = (chunk <= 0 || chunk > n) ? std::max<Eigen::Index>(n, 1) : chunk;
  // Forward: checkpoints X_0, X_w, X_2w, … (the state entering each chunk).
  std::vector<State> checkpoint;
  State x = load_state<State>(init, d, dv);
  for (Eigen::Index t = 0; t < n; ++t) {
    if (t % w == 0) checkpoint.push_back(x);
    ops.step(x, Token<T>(p, t));
  }
  if (n == 0) checkpoint.push_back(x);
  // Backward: chunks in reverse; recompute the chunk's states, then sweep back through them.
  Gradients<T> g = zero_gradients(p);
  State bar = State::zero(d, dv);  // X̄ at the current position; X̄_n = 0 (the loss does not read X_n)
  std::vector<State> local;
  std::size_t peak_local = 0;
  for (Eigen::Index c = static_cast<Eigen::Index>(checkpoint.size()) - 1; c >= 0 && n > 0; --c) {
    const Eigen::Index begin = c * w, end = std::min(n, begin + w);
    local.assign(1, checkpoint[c]);  // local[s] = X_{begin+s}
    for (Eigen::Index t = begin; t < end; ++t) {
      local.push_back(local.back());
      ops.step(local.back(), Token<T>(p, t));
    }
    peak_local = std::max(peak_local, local.size());
    for (Eigen::Index t = end - 1; t >= begin; --t) {
      const Token<T> tok(p, t);
      TokenGrad<T> tg(d, dv);
      ops.out_vjp(local[t - begin + 1], tok, RowVec<T>(dO.row(t)), t, bar, tg);
      ops.step_vjp(local[t - begin], local[t - begin + 1], tok, bar, tg);
      g.dQ.row(t) += tg.dq.transpose();
      g.dK.row(t) += tg.dk.transpose();
      g.dV.row(t) += tg.dv;
    }
  }
  g.dstate = export_state<State, T>(bar);
  if (stats) *stats = {checkpoint.size(), checkpoint.size() + peak_local, numbers_in(bar)};
  return g;
}

// Gradient of y = num / (den + ε) w.r.t. num and den, for upstream dy (1×dv):
//   ∂L/∂num = dy / (den + ε),   ∂L/∂den = −⟨dy, y⟩ / (den + ε).
// Not normalized: ∂L/∂num = dy, ∂L/∂den = 0.
template <class T> struct NormalizerVjp {
  RowVec<T> dnum;
  T dden{0};
  NormalizerVjp(const RowVec<T>& num, const T& den_plus_eps, bool normalized, const RowVec<T>& dy, Eigen::Index t) {
    if (!normalized) {
      dnum = dy;
      return;
    }
    if (den_plus_eps == T(0))
      throw NumericalError("normalizer den_t + eps is exactly zero at token " + std::to_string(t));
    dnum = dy / den_plus_eps;
    dden = -T(dnum.dot(num)) / den_plus_eps;
  }
};

// Adjoint of the first-order read-out o = qᵀX / (qᵀz + ε) (or qᵀX), shared by linear attention (X = S,
// z = z) and AHLA (X = E, z = n):  X̄ += q num̄,  z̄ += q dēn,  dq += X num̄ᵀ + z dēn.
template <class T> void first_order_readout_vjp(const Mat<T>& X, const Mat<T>& z, const ColVec<T>& q,
                                                const RowVec<T>& dy, const T& eps, bool normalized, Eigen::Index t,
                                                Mat<T>& Xbar, Mat<T>& zbar, ColVec<T>& dq) {
  const RowVec<T> num = q.transpose() * X;
  const NormalizerVjp<T> nv(num, T((q.transpose() * z)(0, 0) + eps), normalized, dy, t);
  Xbar.noalias() += q * nv.dnum;
  dq.noalias() += X * nv.dnum.transpose();
  if (normalized) {
    zbar.col(0) += nv.dden * q;
    dq += nv.dden * z.col(0);
  }
}

// γ, ε and the normalize flag in T, for the Ops of decayed, normalizable recurrences.
template <class T> struct DecayReadout {
  T gamma, eps;
  bool normalized;
  explicit DecayReadout(const Options& opt)
      : gamma(from_rational<T>(opt.gamma)), eps(from_rational<T>(opt.eps)), normalized(opt.normalized) {}
};

}  // namespace hla::backward
