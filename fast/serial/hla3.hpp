// Third-order HLA, serial forms (γ = 1: the paper's Algorithm 3 carries a γ, but SPEC defines no
// decayed third order, so the registry accepts γ = 1 only).
//
//   serial      Algorithm 3 with the updates of eqs. 7.1–7.3, as printed (§7.2)
//   serial-eq75 the corrected-state recurrence eq. 7.5 on (F, η) of eq. 7.4, as printed (§7.3)
//   serial/corrected  our derivation from SPEC's definition: o_t = q_tᵀ F_t with
//               F_t = Σ_{u≤t} S^K_u q_u (q_uᵀ P_u), so F_t = F_{t−1} + S^K_t q_t (q_tᵀ P_t) — no S^Q at all.
//   hla3-unmasked serial: q_tᵀ S^K_t S^Q_t P_t (§7.1).
#pragma once

#include "core/state.hpp"

namespace hla::fast {

// Prefix moments shared by every third-order form: S^K, S^Q (d×d), P = Σ k vᵀ (d×dv), m = Σ k (d).
template <class T> struct Hla3Moments {
  Mat<T> SK, SQ, P, m;
  static Hla3Moments zero(Eigen::Index d, Eigen::Index dv) {
    return {Mat<T>::Zero(d, d), Mat<T>::Zero(d, d), Mat<T>::Zero(d, dv), Mat<T>::Zero(d, 1)};
  }
  template <class Self, class F> static void fields(Self& s, F&& visit) {
    visit("SK", s.SK);
    visit("SQ", s.SQ);
    visit("P", s.P);
    visit("m", s.m);
  }
  // eq. 7.1 (Alg. 3 lines 6–7)
  template <class Vec> void step(const Vec& q, const Vec& k, const RowVec<T>& v, const T& gamma) {
    if (gamma != T(1)) {
      SK *= gamma;
      SQ *= gamma;
      P *= gamma;
      m *= gamma;
    }
    SK.noalias() += k * k.transpose();
    SQ.noalias() += q * q.transpose();
    P.noalias() += k * v;
    m.col(0) += k;
  }
};

// o_t = q_tᵀ X and, normalized, ÷ (q_tᵀ x + ε): the read-out of every third-order form.
template <class T, class Vec, class Out> void hla3_read(const Mat<T>& X, const Mat<T>& x, const Vec& q, bool normalize,
                                                        const T& eps, Eigen::Index t, Out&& out) {
  RowVec<T> num = q.transpose() * X;
  if (normalize) divide_by_normalizer(num, T((q.transpose() * x)(0, 0) + eps), t);
  out = num;
}

// Algorithm 3's state: moments plus the three raw correction pairs (G⁽¹⁾,h⁽¹⁾), (G⁽²⁾,h⁽²⁾), (G⁽³⁾,h⁽³⁾).
template <class T> struct Hla3Alg3State {
  Hla3Moments<T> mo;
  Mat<T> G1, G2, G3, h1, h2, h3;
  static Hla3Alg3State zero(Eigen::Index d, Eigen::Index dv) {
    return {Hla3Moments<T>::zero(d, dv), Mat<T>::Zero(d, dv), Mat<T>::Zero(d, dv), Mat<T>::Zero(d, dv),
            Mat<T>::Zero(d, 1),          Mat<T>::Zero(d, 1),  Mat<T>::Zero(d, 1)};
  }
  template <class Self, class F> static void fields(Self& s, F&& visit) {
    Hla3Moments<T>::fields(s.mo, visit);
    visit("G1", s.G1);
    visit("G2", s.G2);
    visit("G3", s.G3);
    visit("h1", s.h1);
    visit("h2", s.h2);
    visit("h3", s.h3);
  }
};

// Algorithm 3, lines 4–18, as printed.
template <class T> Run<T> hla3_alg3(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  const T gamma = from_rational<T>(opt.gamma), eps = from_rational<T>(opt.eps);
  auto st = load_state<Hla3Alg3State<T>>(init, p.d(), p.dv());
  Mat<T> O(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
    RowVec<T> v = p.V.row(t);
    const Hla3Moments<T> prev = st.mo;  // line 4
    st.mo.step(q, k, v, gamma);         // lines 6–7
    const ColVec<T> mprev = prev.m.col(0);
    ColVec<T> u1 = prev.SQ * k;  // line 9
    st.G1 = gamma * st.G1 + k * (u1.transpose() * prev.P);
    st.h1 = gamma * st.h1 + k * u1.dot(mprev);
    ColVec<T> a2 = prev.SK * q;  // line 10
    st.G2 = gamma * st.G2 + a2 * (q.transpose() * prev.P);
    st.h2 = gamma * st.h2 + a2 * q.dot(mprev);
    ColVec<T> u3 = prev.SQ * k;  // line 11
    ColVec<T> a3 = prev.SK * u3;
    st.G3 = gamma * st.G3 + a3 * v;
    st.h3 = gamma * st.h3 + a3;
    ColVec<T> y = st.mo.SK * q;  // line 13
    ColVec<T> z = st.mo.SQ * y;
    RowVec<T> num = z.transpose() * st.mo.P - q.transpose() * st.G1 - q.transpose() * st.G2 - q.transpose() * st.G3;
    if (opt.normalized) {  // lines 15–17
      ColVec<T> denvec = st.mo.SK * (st.mo.SQ * st.mo.m) - st.h1 - st.h2 - st.h3;
      divide_by_normalizer(num, T(q.dot(denvec) + eps), t);
    }
    O.row(t) = num;
  }
  return {std::move(O), export_state<Hla3Alg3State<T>, T>(st)};
}

// (F, η) of eq. 7.4 carried beside the moments: the state of eq. 7.5 and of our corrected recurrence.
template <class T> struct Hla3CorrectedState {
  Hla3Moments<T> mo;
  Mat<T> F, eta;
  static Hla3CorrectedState zero(Eigen::Index d, Eigen::Index dv) {
    return {Hla3Moments<T>::zero(d, dv), Mat<T>::Zero(d, dv), Mat<T>::Zero(d, 1)};
  }
  template <class Self, class Fn> static void fields(Self& s, Fn&& visit) {
    Hla3Moments<T>::fields(s.mo, visit);
    visit("F", s.F);
    visit("eta", s.eta);
  }
};

// eq. 7.5 as printed, with D^K = k kᵀ, D^Q = q qᵀ, D^P = k vᵀ, d^m = k:
//   F_t = F_{t−1} + S^K_{t−1} D^Q D^P + D^K S^Q_{t−1} D^P + D^K D^Q P_{t−1} + D^K D^Q D^P
//   η_t = η_{t−1} + S^K_{t−1} D^Q d^m + D^K S^Q_{t−1} d^m + D^K D^Q m_{t−1} + D^K D^Q d^m
// evaluated right to left with vectors (D^K X = k (kᵀX)) so a step costs O(d² + d dv).
template <class T> Run<T> hla3_eq75(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  const T eps = from_rational<T>(opt.eps);
  auto st = load_state<Hla3CorrectedState<T>>(init, p.d(), p.dv());
  Mat<T> O(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
    RowVec<T> v = p.V.row(t);
    const Hla3Moments<T>& pr = st.mo;  // still S_{t−1}, P_{t−1}: moments advance after
    const T qk = q.dot(k), kq = qk;
    ColVec<T> SKq = pr.SK * q;
    ColVec<T> kSQk_vec = pr.SQ * k;
    const T kSQk = k.dot(kSQk_vec);
    const ColVec<T> mprev = pr.m.col(0);
    // S^K_{t−1} q (qᵀ k) vᵀ + k (kᵀ S^Q_{t−1} k) vᵀ + k (kᵀ q)(qᵀ P_{t−1}) + k (kᵀ q)(qᵀ k) vᵀ
    st.F += SKq * (qk * v) + k * (kSQk * v) + k * (kq * (q.transpose() * pr.P)) + k * (kq * qk * v);
    st.eta += SKq * qk + k * kSQk + k * (kq * q.dot(mprev)) + k * (kq * qk);
    st.mo.step(q, k, v, T(1));
    hla3_read(st.F, st.eta, q, opt.normalized, eps, t, O.row(t));
  }
  return {std::move(O), export_state<Hla3CorrectedState<T>, T>(st)};
}

// Corrected (derived from SPEC's hla3): the masked sum regroups by the middle index u as
//   o_t = q_tᵀ Σ_{u≤t} S^K_u q_u q_uᵀ P_u,   den_t = q_tᵀ Σ_{u≤t} S^K_u q_u q_uᵀ m_u,
// with inclusive S^K_u, P_u, m_u. Its state needs no S^Q: (S^K, P, m, F, η), d² + 2d·dv + 2d numbers.
template <class T> struct Hla3MinimalState {
  Mat<T> SK, P, m, F, eta;
  static Hla3MinimalState zero(Eigen::Index d, Eigen::Index dv) {
    return {Mat<T>::Zero(d, d), Mat<T>::Zero(d, dv), Mat<T>::Zero(d, 1), Mat<T>::Zero(d, dv), Mat<T>::Zero(d, 1)};
  }
  template <class Self, class Fn> static void fields(Self& s, Fn&& visit) {
    visit("SK", s.SK);
    visit("P", s.P);
    visit("m", s.m);
    visit("F", s.F);
    visit("eta", s.eta);
  }
};

template <class T> Run<T> hla3_corrected_serial(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  const T eps = from_rational<T>(opt.eps);
  auto st = load_state<Hla3MinimalState<T>>(init, p.d(), p.dv());
  Mat<T> O(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
    st.SK.noalias() += k * k.transpose();
    st.P.noalias() += k * p.V.row(t);
    st.m.col(0) += k;
    ColVec<T> Sq = st.SK * q;  // S^K_t q_t
    st.F.noalias() += Sq * (q.transpose() * st.P);
    st.eta += Sq * q.dot(ColVec<T>(st.m.col(0)));
    hla3_read(st.F, st.eta, q, opt.normalized, eps, t, O.row(t));
  }
  return {std::move(O), export_state<Hla3MinimalState<T>, T>(st)};
}

// hla3-unmasked: o_t = q_tᵀ S^K_t S^Q_t P_t; den_t = q_tᵀ S^K_t S^Q_t m_t (§7.1).
template <class T> Run<T> hla3_unmasked_serial(const Problem<T>& p, const Options& opt, const NamedState<T>* init) {
  const T eps = from_rational<T>(opt.eps);
  auto st = load_state<Hla3Moments<T>>(init, p.d(), p.dv());
  Mat<T> O(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
    st.step(q, k, RowVec<T>(p.V.row(t)), T(1));
    ColVec<T> z = st.SQ * (st.SK * q);  // S^Q S^K q = (qᵀ S^K S^Q)ᵀ
    RowVec<T> num = z.transpose() * st.P;
    if (opt.normalized) divide_by_normalizer(num, T(z.dot(ColVec<T>(st.m.col(0))) + eps), t);
    O.row(t) = num;
  }
  return {std::move(O), export_state<Hla3Moments<T>, T>(st)};
}

}  // namespace hla::fast
