// Backward of first-order linear attention (the baseline), L = Σ_t ⟨dO_t, o_t⟩.
//
// Forward (fast/serial/linear.hpp): S_t = γ S_{t−1} + k v,  z_t = γ z_{t−1} + k;
//   num = qᵀ S_t,  den = qᵀ z_t,  o_t = num / (den + ε) (or num).
// Read-out adjoint: S̄_t += q num̄,  z̄_t += q dēn,  dq += S_t num̄ᵀ + z_t dēn.
// State-gradient recurrence: dk += S̄_t vᵀ + z̄_t,  dv += kᵀ S̄_t,  S̄_{t−1} = γ S̄_t,  z̄_{t−1} = γ z̄_t.
#pragma once

#include "fast/backward/recurrence.hpp"
#include "fast/serial/linear.hpp"

namespace hla::backward {

template <class T> struct LinearOps : DecayReadout<T> {
  using State = fast::LinearState<T>;
  using DecayReadout<T>::gamma, DecayReadout<T>::eps, DecayReadout<T>::normalized;
  explicit LinearOps(const Options& opt) : DecayReadout<T>(opt) {}

  void step(State& x, const Token<T>& tok) const { fast::linear_step(x, tok.k, tok.v, gamma); }

  void out_vjp(const State& x, const Token<T>& tok, const RowVec<T>& dy, Eigen::Index t, State& bar,
               TokenGrad<T>& g) const {
    first_order_readout_vjp(x.S, x.z, tok.q, dy, eps, normalized, t, bar.S, bar.z, g.dq);
  }

  void step_vjp(const State&, const State&, const Token<T>& tok, State& bar, TokenGrad<T>& g) const {
    g.dk.noalias() += bar.S * tok.v.transpose();
    g.dk += bar.z.col(0);
    g.dv.noalias() += tok.k.transpose() * bar.S;
    bar.S *= gamma;
    bar.z *= gamma;
  }
};

}  // namespace hla::backward
