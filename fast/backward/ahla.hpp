// Backward of AHLA (Algorithm 2, §6.3, with the §6.1 decay), L = Σ_t ⟨dO_t, o_t⟩.
//
// Forward (fast/serial/ahla.hpp):
//   P_t = γ P_{t−1} + k v     m_t = γ m_{t−1} + k
//   r = qᵀ P_t   s = qᵀ m_t   E_t = γ E_{t−1} + k r   n_t = γ n_{t−1} + s k
//   num = qᵀ E_t,  den = qᵀ n_t,  o_t = num / (den + ε) (or num)
// Read-out adjoint (out_vjp): Ē_t += q num̄,  n̄_t += q dēn,  dq += E_t num̄ᵀ + n_t dēn.
// State-gradient recurrence (step_vjp), X̄_t → X̄_{t−1}; r, s read the *updated* P_t, m_t, so their
// adjoints enter P̄_t, m̄_t before those decay:
//   r̄ = kᵀ Ē_t,  s̄ = kᵀ n̄_t,  dk += Ē_t rᵀ + s n̄_t
//   P̄_t += q r̄,  m̄_t += q s̄,  dq += P_t r̄ᵀ + m_t s̄
//   dk += P̄_t vᵀ + m̄_t,  dv += kᵀ P̄_t
//   P̄_{t−1} = γ P̄_t,  m̄_{t−1} = γ m̄_t,  Ē_{t−1} = γ Ē_t,  n̄_{t−1} = γ n̄_t
#pragma once

#include "fast/backward/recurrence.hpp"
#include "fast/serial/ahla.hpp"

namespace hla::backward {

template <class T> struct AhlaOps : DecayReadout<T> {
  using State = fast::AhlaState<T>;
  using DecayReadout<T>::gamma, DecayReadout<T>::eps, DecayReadout<T>::normalized;
  explicit AhlaOps(const Options& opt) : DecayReadout<T>(opt) {}

  void step(State& x, const Token<T>& tok) const { fast::ahla_step(x, tok.q, tok.k, tok.v, gamma); }

  void out_vjp(const State& x, const Token<T>& tok, const RowVec<T>& dy, Eigen::Index t, State& bar,
               TokenGrad<T>& g) const {
    first_order_readout_vjp(x.E, x.n, tok.q, dy, eps, normalized, t, bar.E, bar.n, g.dq);
  }

  // prev = X_{t−1} (unused), cur = X_t; bar: X̄_t in, X̄_{t−1} out.
  void step_vjp(const State&, const State& cur, const Token<T>& tok, State& bar, TokenGrad<T>& g) const {
    const ColVec<T>& q = tok.q;
    const ColVec<T>& k = tok.k;
    const RowVec<T> r = q.transpose() * cur.P;
    const T s = q.dot(ColVec<T>(cur.m.col(0)));
    const RowVec<T> rbar = k.transpose() * bar.E;
    const T sbar = k.dot(ColVec<T>(bar.n.col(0)));
    g.dk.noalias() += bar.E * r.transpose();
    g.dk += s * bar.n.col(0);
    bar.P.noalias() += q * rbar;
    bar.m.col(0) += sbar * q;
    g.dq.noalias() += cur.P * rbar.transpose();
    g.dq += sbar * cur.m.col(0);
    g.dk.noalias() += bar.P * tok.v.transpose();
    g.dk += bar.m.col(0);
    g.dv.noalias() += k.transpose() * bar.P;
    bar.P *= gamma;
    bar.m *= gamma;
    bar.E *= gamma;
    bar.n *= gamma;
  }
};

}  // namespace hla::backward
