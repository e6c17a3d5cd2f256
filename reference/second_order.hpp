// Ground-truth second-order operators (SPEC "Operators"), each by its literal sum. No algebraic
// rewriting: the loops are the sums, index for index, so a reader can check them against SPEC's table.
// Time O(n² d) (dot products are formed once per pair and reused).
#pragma once

#include "reference/common.hpp"

namespace hla::reference {

// The literal sums, each with the decay of its terms left to the caller, so that the fixed-γ operators below and
// the gated ones (reference/gated.hpp, SPEC "Gated (data-dependent) decay") are one sum each:
//   pair_decay(t, i, j)  the decay of a pair (i, j) read at t: γ^{(t−i)+(t−j)}, or Γ(t,i) Γ(t,j) with gates
//   decay(t, j)          one age: γ^{t−j}, or Γ(t,j)

// hla2 (masked) and hla2-unmasked:
//   masked    o_t = Σ_{j≤t} Σ_{i≤j} γ^{(t−i)+(t−j)} (q_t·k_i)(q_j·k_i) v_j
//   unmasked  o_t = Σ_{j≤t} Σ_{i≤t} γ^{(t−i)+(t−j)} (q_t·k_i)(q_j·k_i) v_j
// ridge λ adds λ Σ_{j≤t} γ^{(t−j)} (q_t·q_j) v_j (SPEC, §5.1 Remark); normalized divides by the same sums
// with v_j → 1, plus ε.
template <class T, class PairDecay, class Decay>
Run<T> hla2_sum(const Problem<T>& p, const Options& opt, bool masked, PairDecay&& pair_decay, Decay&& decay) {
  const Eigen::Index n = p.n(), dv = p.dv();
  const T lambda = from_rational<T>(opt.ridge);
  const Mat<T> qk = p.Q * p.K.transpose();  // qk(t, i) = q_t·k_i
  const Mat<T> qq = p.Q * p.Q.transpose();  // qq(t, j) = q_t·q_j
  Mat<T> num = Mat<T>::Zero(n, dv);
  ColVec<T> den = ColVec<T>::Zero(n);
  for (Eigen::Index t = 0; t < n; ++t) {
    for (Eigen::Index j = 0; j <= t; ++j) {
      const Eigen::Index i_last = masked ? j : t;
      T weight(0);
      for (Eigen::Index i = 0; i <= i_last; ++i) weight += pair_decay(t, i, j) * qk(t, i) * qk(j, i);
      if (opt.ridge != 0) weight += lambda * decay(t, j) * qq(t, j);
      num.row(t) += weight * p.V.row(j);
      den(t) += weight;
    }
  }
  if (opt.normalized) normalize_rows(num, den, from_rational<T>(opt.eps));
  return {num, {}};
}
template <class T> Run<T> hla2(const Problem<T>& p, const Options& opt, bool masked) {
  const std::vector<T> g = decay_powers(from_rational<T>(opt.gamma), 2 * p.n());
  return hla2_sum(
      p, opt, masked, [&](Eigen::Index t, Eigen::Index i, Eigen::Index j) -> const T& { return g[(t - i) + (t - j)]; },
      [&](Eigen::Index t, Eigen::Index j) -> const T& { return g[t - j]; });
}

// ahla: o_t = Σ_{i≤t} Σ_{j≤i} γ^{(t−j)} (q_t·k_i)(q_i·k_j) v_j  (§6.1, eq. 6.1 with SPEC's decay).
template <class T, class Decay> Run<T> ahla_sum(const Problem<T>& p, const Options& opt, Decay&& decay) {
  const Eigen::Index n = p.n(), dv = p.dv();
  const Mat<T> qk = p.Q * p.K.transpose();
  Mat<T> num = Mat<T>::Zero(n, dv);
  ColVec<T> den = ColVec<T>::Zero(n);
  for (Eigen::Index t = 0; t < n; ++t)
    for (Eigen::Index i = 0; i <= t; ++i)
      for (Eigen::Index j = 0; j <= i; ++j) {
        T weight = decay(t, j) * qk(t, i) * qk(i, j);
        num.row(t) += weight * p.V.row(j);
        den(t) += weight;
      }
  if (opt.normalized) normalize_rows(num, den, from_rational<T>(opt.eps));
  return {num, {}};
}
template <class T> Run<T> ahla(const Problem<T>& p, const Options& opt) {
  const std::vector<T> g = decay_powers(from_rational<T>(opt.gamma), p.n());
  return ahla_sum(p, opt, [&](Eigen::Index t, Eigen::Index j) -> const T& { return g[t - j]; });
}

// linear (first-order baseline, identity features): o_t = Σ_{j≤t} γ^{(t−j)} (q_t·k_j) v_j.
template <class T, class Decay> Run<T> linear_sum(const Problem<T>& p, const Options& opt, Decay&& decay) {
  const Eigen::Index n = p.n(), dv = p.dv();
  Mat<T> num = Mat<T>::Zero(n, dv);
  ColVec<T> den = ColVec<T>::Zero(n);
  for (Eigen::Index t = 0; t < n; ++t)
    for (Eigen::Index j = 0; j <= t; ++j) {
      T weight = decay(t, j) * p.Q.row(t).dot(p.K.row(j));
      num.row(t) += weight * p.V.row(j);
      den(t) += weight;
    }
  if (opt.normalized) normalize_rows(num, den, from_rational<T>(opt.eps));
  return {num, {}};
}
template <class T> Run<T> linear(const Problem<T>& p, const Options& opt) {
  const std::vector<T> g = decay_powers(from_rational<T>(opt.gamma), p.n());
  return linear_sum(p, opt, [&](Eigen::Index t, Eigen::Index j) -> const T& { return g[t - j]; });
}

// softmax (baseline): causal softmax(QKᵀ/√d) V, row by row with the row maximum subtracted.
template <class T> Run<T> softmax(const Problem<T>& p, const Options&) {
  using std::exp, std::sqrt;
  const Eigen::Index n = p.n(), dv = p.dv();
  const T scale = T(1) / sqrt(T(static_cast<int>(p.d())));
  Mat<T> out = Mat<T>::Zero(n, dv);
  for (Eigen::Index t = 0; t < n; ++t) {
    std::vector<T> logits(static_cast<std::size_t>(t) + 1);
    T top = p.Q.row(t).dot(p.K.row(0)) * scale;
    for (Eigen::Index j = 0; j <= t; ++j) {
      logits[j] = p.Q.row(t).dot(p.K.row(j)) * scale;
      if (logits[j] > top) top = logits[j];
    }
    T total(0);
    for (Eigen::Index j = 0; j <= t; ++j) {
      T w = exp(logits[j] - top);
      out.row(t) += w * p.V.row(j);
      total += w;
    }
    out.row(t) /= total;
  }
  return {out, {}};
}

}  // namespace hla::reference
