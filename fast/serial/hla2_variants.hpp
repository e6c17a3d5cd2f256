// Second-order variants of §3 and §5.2 that change how the state is stored or shared, not the algebra:
//   - identity metric (§3 "Connection with linear attention"): eq. 3.2 with S_t replaced by I;
//   - multi-query (§5.2): K, V shared across h heads, S^K stored once, (C, m, G, h) per head;
//   - packed symmetric S (§5.2): only the upper triangle of S, d(d+1)/2 numbers.
#pragma once

#include <vector>

#include "fast/serial/hla2.hpp"

namespace hla::fast {

// §3: "Setting S_t = I yields num_t = q_tᵀ C_t, den_t = q_tᵀ m_t" (unmasked, eq. 3.2), with the §4.3 decay.
template <class T> Mat<T> hla2_identity_metric(const Problem<T>& p, const Options& opt) {
  const T gamma = from_rational<T>(opt.gamma), eps = from_rational<T>(opt.eps);
  Mat<T> C = Mat<T>::Zero(p.d(), p.dv()), O(p.n(), p.dv());
  ColVec<T> m = ColVec<T>::Zero(p.d());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<T> q = p.Q.row(t).transpose();
    C = gamma * C + q * p.V.row(t);
    m = gamma * m + q;
    RowVec<T> num = q.transpose() * C;
    if (opt.normalized) divide_by_normalizer(num, T(q.dot(m) + eps), t);
    O.row(t) = num;
  }
  return O;
}

// §5.2 multi-query: one S^K (from the shared keys) and per-head (C, m, G, h). Returns each head's outputs
// and the number of state numbers held: d² + h(2d·dv + 2d) instead of h(d² + 2d·dv + 2d).
template <class T> struct MultiQueryRun {
  std::vector<Mat<T>> outputs;
  std::size_t state_numbers = 0;
};

template <class T> MultiQueryRun<T> hla2_multiquery_serial(const std::vector<Mat<T>>& Qs, const Mat<T>& K,
                                                           const Mat<T>& V, const Options& opt, DecayRule rule) {
  const T gamma = from_rational<T>(opt.gamma), lambda = from_rational<T>(opt.ridge), eps = from_rational<T>(opt.eps);
  const Eigen::Index d = K.cols(), dv = V.cols(), n = K.rows();
  // Per-head states carry (C, m, G, h); their S slot stays 0×0 in spirit (kept zero here) because the one
  // shared S is authoritative and is read through hla2_output_from_u.
  Mat<T> shared_S = Mat<T>::Zero(d, d);
  std::vector<Hla2State<T, true>> heads(Qs.size(), Hla2State<T, true>::zero(d, dv));
  MultiQueryRun<T> out;
  for (std::size_t h = 0; h < Qs.size(); ++h) out.outputs.emplace_back(n, dv);
  for (Eigen::Index t = 0; t < n; ++t) {
    ColVec<T> k = K.row(t).transpose();
    shared_S = gamma * shared_S + k * k.transpose();  // once per token, for every head
    for (std::size_t h = 0; h < Qs.size(); ++h) {
      ColVec<T> q = Qs[h].row(t).transpose();
      heads[h].S.setZero();
      hla2_step(heads[h], q, k, RowVec<T>(V.row(t)), gamma, rule);
      RowVec<T> u = q.transpose() * shared_S;
      if (lambda != T(0)) u += lambda * q.transpose();
      hla2_output_from_u(heads[h], q, u, opt.normalized, eps, t, out.outputs[h].row(t));
    }
  }
  // Counted from the parts actually carried between tokens: the shared S and each head's (C, m, G, h).
  // (Each head's S slot is scratch for hla2_step, zeroed every token, and not state.)
  out.state_numbers = static_cast<std::size_t>(shared_S.size());
  for (const auto& hs : heads)
    out.state_numbers += static_cast<std::size_t>(hs.C.size() + hs.m.size() + hs.G.size() + hs.h.size());
  return out;
}

// §5.2 packed symmetric S: the upper triangle, row by row (d(d+1)/2 numbers). u = q_tᵀ S_t is formed from
// the packed entries directly; everything else is the serial form's update and read-out.
template <class T> struct PackedSymmetric {
  Eigen::Index d = 0;
  ColVec<T> upper;  // (i, j), i ≤ j, at index i·d − i(i−1)/2 + (j − i)
  explicit PackedSymmetric(Eigen::Index dim) : d(dim), upper(ColVec<T>::Zero(dim * (dim + 1) / 2)) {}
  Eigen::Index index(Eigen::Index i, Eigen::Index j) const { return i * d - i * (i - 1) / 2 + (j - i); }
  // Row i of the upper triangle, (i, i..d−1): contiguous.
  auto row(Eigen::Index i) { return upper.segment(index(i, i), d - i); }
  auto row(Eigen::Index i) const { return upper.segment(index(i, i), d - i); }
  // The upper triangle of a (full) S, and back to full symmetric storage.
  static PackedSymmetric from_upper(const Mat<T>& S) {
    PackedSymmetric p(S.rows());
    for (Eigen::Index i = 0; i < p.d; ++i) p.row(i) = S.row(i).tail(p.d - i).transpose();
    return p;
  }
  Mat<T> full() const {
    Mat<T> S(d, d);
    for (Eigen::Index i = 0; i < d; ++i) {
      S.row(i).tail(d - i) = row(i).transpose();
      S.col(i).tail(d - i) = row(i);
    }
    return S;
  }
  // S ← γS + k kᵀ, a row of the triangle at a time (γ = 1: decays = false, no multiply).
  template <class Vec> void decay_add_outer(const Vec& k, const T& gamma, bool decays = true) {
    for (Eigen::Index i = 0; i < d; ++i) {
      if (decays)
        row(i) = gamma * row(i) + k(i) * k.tail(d - i);
      else
        row(i) += k(i) * k.tail(d - i);
    }
  }
  // u += (qᵀS)ᵀ: entry (i, j ≥ i) adds q_i s_ij to u_j (an axpy over the row) and, off the diagonal,
  // s_ij q_j to u_i (a dot with the same row).
  template <class Vec, class Out> void add_left_product(const Vec& q, Out&& u) const {
    for (Eigen::Index i = 0; i < d; ++i) {
      u.segment(i, d - i) += q(i) * row(i);
      if (i + 1 < d) u(i) += row(i).tail(d - i - 1).dot(q.tail(d - i - 1));
    }
  }
  RowVec<T> left_multiply(const ColVec<T>& q) const {  // qᵀ S
    ColVec<T> u = ColVec<T>::Zero(d);
    add_left_product(q, u);
    return u.transpose();
  }
};

// With per-token gates (p.gates, opt.gamma = 1) each token's step decays by its own γ_t (the gated serial form,
// fast/serial/gated.hpp); constant gates are the fixed-γ loop, step for step.
template <class T>
Run<T> hla2_packed_serial(const Problem<T>& p, const Options& opt, const NamedState<T>* init, DecayRule rule) {
  const T gamma = from_rational<T>(opt.gamma), lambda = from_rational<T>(opt.ridge), eps = from_rational<T>(opt.eps);
  auto st = load_state<Hla2State<T, true>>(init, p.d(), p.dv());
  PackedSymmetric<T> packed = PackedSymmetric<T>::from_upper(st.S);
  Mat<T> O(p.n(), p.dv());
  for (Eigen::Index t = 0; t < p.n(); ++t) {
    ColVec<T> q = p.Q.row(t).transpose(), k = p.K.row(t).transpose();
    // The full-storage S is kept at zero so hla2_step's S work is trivial; the packed copy is the metric.
    st.S.setZero();
    const T& g = p.gates.size() ? p.gates(t) : gamma;
    hla2_step(st, q, k, RowVec<T>(p.V.row(t)), g, rule);
    packed.decay_add_outer(k, g);
    RowVec<T> u = packed.left_multiply(q);
    if (lambda != T(0)) u += lambda * q.transpose();
    hla2_output_from_u(st, q, u, opt.normalized, eps, t, O.row(t));
  }
  st.S = packed.full();
  return {std::move(O), export_state<Hla2State<T, true>, T>(st)};
}

}  // namespace hla::fast
