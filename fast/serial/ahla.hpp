// Asymmetric second order (AHLA), serial form: Algorithm 2 (§6.3) with the §6.1 decay mechanism,
// exactly as printed.
#pragma once

#include "core/state.hpp"

namespace hla::fast {

// P = Σ k vᵀ (d×dv), m = Σ k (d), E = Σ_i k_i (q_iᵀ P_i) (d×dv), n = Σ_i k_i (q_iᵀ m_i) (d)  (§6.1).
template <class T> struct AhlaState {
  Mat<T> P, m, E, n;
  static AhlaState zero(Eigen::Index d, Eigen::Index dv) {
    return {Mat<T>::Zero(d, dv), Mat<T>::Zero(d, 1), Mat<T>::Zero(d, dv), Mat<T>::Zero(d, 1)};
  }
  template <class Self, class F> static void fields(Self& s, F&& visit) {
    visit("P", s.P);
    visit("m", s.m);
    visit("E", s.E);
    visit("n", s.n);
  }
};

// Algorithm 2 lines 3–6: P ← γP + k vᵀ; m ← γm + k; r ← qᵀP; s ← qᵀm; E ← γE + k r; n ← γn + s k.
template <class T, class Vec>
void ahla_step(AhlaState<T>& st, const Vec& q, const Vec& k, const RowVec<T>& v, const T& gamma) {
  if (gamma != T(1)) {
    st.P *= gamma;
    st.m *= gamma;
    st.E *= gamma;
    st.n *= gamma;
  }
  st.P.noalias() += k * v;
  st.m.col(0) += k;
  RowVec<T> r = q.transpose() * st.P;
  T s = q.dot(ColVec<T>(st.m.col(0)));
  st.E.noalias() += k * r;
  st.n.col(0) += s * k;
}

// Algorithm 2 lines 7–10: o = qᵀE; optionally divided by qᵀn + ε.
template <class T, class Vec, class Out>
void ahla_output(const AhlaState<T>& st, const Vec& q, bool normalize, const T& eps, Eigen::Index t, Out&& out) {
  RowVec<T> num = q.transpose() * st.E;
  if (normalize) divide_by_normalizer(num, T((q.transpose() * st.n)(0, 0) + eps), t);
  out = num;
}

template <class T> Run<T> ahla_serial(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  const T gamma = from_rational<T>(opt.gamma), eps = from_rational<T>(opt.eps);
  auto st = load_state<AhlaState<T>>(init, p.d(), p.dv());
  Mat<T> O(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
    ahla_step(st, q, k, RowVec<T>(p.V.row(t)), gamma);
    ahla_output(st, q, opt.normalized, eps, t, O.row(t));
  }
  return {std::move(O), export_state<AhlaState<T>, T>(st)};
}

}  // namespace hla::fast
