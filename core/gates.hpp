// Per-token gates (SPEC "Gated (data-dependent) decay"): γ_t ∈ (0, 1], t = 1..n, an input of the problem like
// Q, K, V. Γ(t, s) = Π_{r=s+1..t} γ_r (empty product 1); a fixed γ is the case γ_t ≡ γ, Γ(t, s) = γ^{t−s}.
//
// A Problem carries its gates (Problem::gates); the registry runs a form's gated computation when they are
// there (Entry::gated, Caps::gates). The gated computations themselves (reference/gated.hpp,
// fast/serial/gated.hpp, fast/scan/gated.hpp) take a GatedProblem: the gates beside a gate-free problem.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/inputs.hpp"

namespace hla {

template <class T> struct GatedProblem {
  Problem<T> qkv;
  ColVec<T> gamma;  // γ_t, one per token: gamma(t) belongs to row t of Q, K, V
  Eigen::Index n() const { return qkv.n(); }
};

// The registry's problem with gates, split for the gated computations, and joined back.
template <class T> GatedProblem<T> split_gates(const Problem<T>& p) { return {Problem<T>{p.Q, p.K, p.V}, p.gates}; }
template <class T> Problem<T> join_gates(const GatedProblem<T>& g) {
  Problem<T> p = g.qkv;
  p.gates = g.gamma;
  return p;
}

// How `hla run`, `hla check` and sweeps draw a problem's gates (docs/operators.md "Gated decay"):
//   none            no gates (the fixed decay Options::gamma applies)
//   range:LO,HI     γ_t uniform in [LO, HI], 0 < LO <= HI <= 1
//   strength:S      −log γ_t = S·u_t with u_t uniform in [1/2, 3/2]: gates that vary per token around a decay
//                   rate S per token, 0 < S <= 50 (larger would leave float's normal range within one token)
// Gates are rounded to float like the inputs (core/inputs.hpp), so every scalar sees the same gates.
struct GateSpec {
  enum class Kind { none, range, strength } kind = Kind::none;
  double lo = 1, hi = 1, strength = 0;
  std::string text = "none";  // as given, for file names and reports
  bool any() const { return kind != Kind::none; }
};
GateSpec parse_gate_spec(const std::string& text);  // InputError naming the accepted forms
ColVec<double> draw_gates(const GateSpec& spec, Eigen::Index n, std::uint64_t seed);  // empty for `none`

// The fixed decay γ as gates γ_t ≡ γ.
template <class T> GatedProblem<T> with_constant_gates(Problem<T> p, const T& gamma) {
  const Eigen::Index n = p.n();
  return {std::move(p), ColVec<T>::Constant(n, gamma)};
}

// Rows [begin, end) with their gates: the two halves of a split-and-carry test.
template <class T> GatedProblem<T> slice_gated(const GatedProblem<T>& g, Eigen::Index begin, Eigen::Index end) {
  return {slice_rows(g.qkv, begin, end), g.gamma.segment(begin, end - begin)};
}

// One gate per token; with an order (every scalar but F_p), each gate in (0, 1]. In F_p a gate is any field
// element: the identities are polynomial in the gates, and uniform field gates are what decide them.
template <class T> void validate_gates(const GatedProblem<T>& g) {
  if (g.gamma.size() != g.n())
    throw InputError("gates: " + std::to_string(g.gamma.size()) + " gates for " + std::to_string(g.n()) + " tokens");
  if constexpr (has_order_v<T>)
    for (Eigen::Index t = 0; t < g.gamma.size(); ++t)
      if (!(g.gamma(t) > T(0) && g.gamma(t) <= T(1)))
        throw InputError("gates: gamma_" + std::to_string(t) + " is outside (0, 1]");
}

// Uniform nonzero elements of F_p: the gates of a random identity-test point.
inline ColVec<fp61> field_gates(Eigen::Index n, std::mt19937_64& rng) {
  std::uniform_int_distribution<std::uint64_t> pick(1, Fp::P - 1);
  ColVec<fp61> g(n);
  for (Eigen::Index t = 0; t < n; ++t) g(t) = Fp::from_raw(pick(rng));
  return g;
}

// Rational gates that are perfect squares (a_t = 1/2, 3/4, 1/4, 1, … → γ_t = 1/4, 9/16, 1/16, 1, …), so a
// recurrence written in a_t = √γ_t stays rational. They vary per token, the first three differ from 1 (a wrong
// decay shows in the shortest sequences, which the counterexample search tries first), and three chunk
// boundaries in four have a gate ≠ 1 (a cross-chunk carry decayed by the wrong product shows).
inline rational square_gate_root(Eigen::Index k) {
  static const rational roots[] = {rational(1, 2), rational(3, 4), rational(1, 4), rational(1)};
  return roots[k % 4];
}
inline ColVec<rational> square_rational_gates(Eigen::Index n) {
  ColVec<rational> g(n);
  for (Eigen::Index t = 0; t < n; ++t) g(t) = square_gate_root(t) * square_gate_root(t);
  return g;
}

}  // namespace hla
