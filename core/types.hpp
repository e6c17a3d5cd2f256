// One calling convention for every operator and every form.
//
//   Run<T> form(const Problem<T>& p, const Options& opt, const NamedState<T>* initial_state)
//
//   p.Q  n×d   queries, row t is q_t          (rows are tokens, t = 1..n in the paper, 0..n-1 here)
//   p.K  n×d   keys
//   p.V  n×dv  values
//   p.gates    n per-token gates γ_t ∈ (0, 1] (docs/operators.md "Gated decay"), or empty: no gates. Only the
//              forms whose Caps say `gates` take them; the decay is then the gates' and Options::gamma stays 1
//   opt        decay γ, stabilizer ε, ridge λ (exact rationals, converted once into T), normalize flag,
//              chunk width and threads for the forms that use them
//   initial_state  nullptr for the zero state, or a state returned by the same operator's form
//   → Run<T>{ O: n×dv outputs (row t is o_t), state: the final state after token n }
//
// A sequence split in two and carried across (second call gets the first call's state) gives the same
// outputs as one call: every streaming and scan form honours this.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include "core/eigen.hpp"

#include "core/errors.hpp"
#include "core/scalar.hpp"

namespace hla {

template <class T> using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T> using ColVec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <class T> using RowVec = Eigen::Matrix<T, 1, Eigen::Dynamic>;

template <class T> struct Problem {
  Mat<T> Q, K, V;
  ColVec<T> gates = {};  // γ_t for row t, or empty (a default member, so `{Q, K, V}` stays a gate-free problem)
  Eigen::Index n() const { return Q.rows(); }
  Eigen::Index d() const { return Q.cols(); }
  Eigen::Index dv() const { return V.cols(); }
};

struct Options {
  rational gamma{1};  // decay γ ∈ (0, 1]; 1 = no decay
  bool normalized = false;
  rational eps{0};    // ε ≥ 0, added to the denominator when normalized
  rational ridge{0};  // λ ≥ 0 (hla2 only): S_t + λI in place of S_t
  int chunk = 16;     // chunk width w ≥ 1 for scan and chunked forms
  int threads = 1;    // OpenMP threads for the forms that parallelize
  // The final state too (false: the outputs only, as a forward pass that carries nothing on needs them). Every
  // form then returns an empty state (Entry::operator()); hla2's chunked forms also skip the work only the state
  // needs — C = Σ γ^{t−j} q_j v_jᵀ, one d×dv product per token of the fused form's eleven or so.
  bool state = true;
};

// A state as an ordered list of named matrices: the operator's own tuple, e.g. hla2 masked is
// (S, C, m, G, h). Forms convert their typed state to and from it; tests compare it exactly; the ledger
// counts its bytes.
template <class T> struct NamedState {
  std::vector<std::pair<std::string, Mat<T>>> parts;

  const Mat<T>& at(const std::string& name) const {
    for (const auto& [k, m] : parts)
      if (k == name) return m;
    throw InputError("state has no part named '" + name + "'");
  }
  std::size_t numbers() const {
    std::size_t c = 0;
    for (const auto& [k, m] : parts) c += static_cast<std::size_t>(m.size());
    return c;
  }
};

template <class T> struct Run {
  Mat<T> O;
  NamedState<T> state;
};

// Fetches a part of an initial state and checks its shape, so that a state from another operator or
// another shape is a clear error rather than an Eigen assertion.
template <class T>
Mat<T> state_part(const NamedState<T>& s, const std::string& name, Eigen::Index rows, Eigen::Index cols) {
  const Mat<T>& m = s.at(name);
  if (m.rows() != rows || m.cols() != cols)
    throw InputError("initial state part '" + name + "' is " + std::to_string(m.rows()) + "x" +
                     std::to_string(m.cols()) + ", expected " + std::to_string(rows) + "x" + std::to_string(cols));
  return m;
}

// o_t ← num_t / (den_t + ε), the last step of every normalized operator (eqs. 3.2, 3.4, Thm 6.1,
// Thm 7.1). An exactly vanishing normalizer is an error, never a silent Inf/NaN.
template <class T, class Row> void divide_by_normalizer(Row&& num_row, const T& den_plus_eps, Eigen::Index t) {
  if (den_plus_eps == T(0))
    throw NumericalError("normalizer den_t + eps is exactly zero at token " + std::to_string(t));
  num_row /= den_plus_eps;
}

}  // namespace hla
