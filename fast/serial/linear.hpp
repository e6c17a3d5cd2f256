// First-order linear attention with identity features (the baseline), serial form:
// S_t = γ S_{t−1} + k_t v_tᵀ, z_t = γ z_{t−1} + k_t; o_t = q_tᵀ S_t (÷ (q_tᵀ z_t + ε) when normalized).
#pragma once

#include "core/state.hpp"

namespace hla::fast {

template <class T> struct LinearState {
  Mat<T> S, z;
  static LinearState zero(Eigen::Index d, Eigen::Index dv) { return {Mat<T>::Zero(d, dv), Mat<T>::Zero(d, 1)}; }
  template <class Self, class F> static void fields(Self& s, F&& visit) {
    visit("S", s.S);
    visit("z", s.z);
  }
};

template <class T, class Vec> void linear_step(LinearState<T>& st, const Vec& k, const RowVec<T>& v, const T& gamma) {
  if (gamma != T(1)) {
    st.S *= gamma;
    st.z *= gamma;
  }
  st.S.noalias() += k * v;
  st.z.col(0) += k;
}

template <class T, class Vec, class Out>
void linear_output(const LinearState<T>& st, const Vec& q, bool normalize, const T& eps, Eigen::Index t, Out&& out) {
  RowVec<T> num = q.transpose() * st.S;
  if (normalize) divide_by_normalizer(num, T((q.transpose() * st.z)(0, 0) + eps), t);
  out = num;
}

template <class T> Run<T> linear_serial(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  const T gamma = from_rational<T>(opt.gamma), eps = from_rational<T>(opt.eps);
  auto st = load_state<LinearState<T>>(init, p.d(), p.dv());
  Mat<T> O(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
    linear_step(st, k, RowVec<T>(p.V.row(t)), gamma);
    linear_output(st, q, opt.normalized, eps, t, O.row(t));
  }
  return {std::move(O), export_state<LinearState<T>, T>(st)};
}

}  // namespace hla::fast
